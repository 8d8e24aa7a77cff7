//! The LSTM-cell nonlinearity from stdlib operators (the paper's Figure 7 form): forward and
//! backward each fuse into exactly one kernel and match a plain Rust computation.

use ndarray::{Array, Array2, ArrayD, Ix2};
use ovl::{Lazy, Options};
use ovl_stdlib as ops;

const B: usize = 3;
const H: usize = 5;
const FORGET_BIAS: f64 = 1.0;

fn values(shape: (usize, usize), seed: u64) -> Array2<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    Array::from_shape_simple_fn(shape, || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
    })
}

/// `new_c = c * sigmoid(f + bias) + sigmoid(i) * tanh(j)`, `new_h = tanh(new_c) * sigmoid(o)`.
fn cell(concat: &Lazy<f64>, c: &Lazy<f64>) -> (Lazy<f64>, Lazy<f64>) {
    let gates = ops::split(concat, 1, 4);
    let (i, j, f, o) = (&gates[0], &gates[1], &gates[2], &gates[3]);
    let bias = Lazy::from(ndarray::arr0(FORGET_BIAS));
    let new_c = ops::add(
        ops::mul(c, ops::sigmoid(ops::add(f, bias))),
        ops::mul(ops::sigmoid(i), ops::tanh(j)),
    );
    let new_h = ops::mul(ops::tanh(&new_c), ops::sigmoid(o));
    (new_c, new_h)
}

fn sigmoid(v: f64) -> f64 {
    1.0 / (1.0 + (-v).exp())
}

struct Reference {
    new_c: Array2<f64>,
    new_h: Array2<f64>,
    d_concat: Array2<f64>,
    d_c: Array2<f64>,
}

/// The cell and its gradients by hand, in plain Rust.
fn reference(
    concat: &Array2<f64>,
    c: &Array2<f64>,
    dc: &Array2<f64>,
    dh: &Array2<f64>,
) -> Reference {
    let mut r = Reference {
        new_c: Array2::zeros((B, H)),
        new_h: Array2::zeros((B, H)),
        d_concat: Array2::zeros((B, 4 * H)),
        d_c: Array2::zeros((B, H)),
    };
    for b in 0..B {
        for k in 0..H {
            let (i, j, f, o) = (
                concat[[b, k]],
                concat[[b, H + k]],
                concat[[b, 2 * H + k]],
                concat[[b, 3 * H + k]],
            );
            let (si, tj, sf, so) = (sigmoid(i), j.tanh(), sigmoid(f + FORGET_BIAS), sigmoid(o));
            let nc = c[[b, k]] * sf + si * tj;
            let tc = nc.tanh();
            r.new_c[[b, k]] = nc;
            r.new_h[[b, k]] = tc * so;
            // Backward: dh flows into new_c through tanh, plus the direct dc.
            let d_nc = dc[[b, k]] + dh[[b, k]] * so * (1.0 - tc * tc);
            r.d_c[[b, k]] = d_nc * sf;
            r.d_concat[[b, k]] = d_nc * tj * si * (1.0 - si);
            r.d_concat[[b, H + k]] = d_nc * si * (1.0 - tj * tj);
            r.d_concat[[b, 2 * H + k]] = d_nc * c[[b, k]] * sf * (1.0 - sf);
            r.d_concat[[b, 3 * H + k]] = dh[[b, k]] * tc * so * (1.0 - so);
        }
    }
    r
}

fn close(got: &ArrayD<f64>, want: &Array2<f64>, what: &str) {
    let got = got.clone().into_dimensionality::<Ix2>().expect("a matrix");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= 1e-12 * w.abs().max(1.0),
            "{what}: {g} != {w}"
        );
    }
}

#[test]
fn lstm_cell_forward_and_backward_fuse_into_one_kernel_each() {
    let concat_v = values((B, 4 * H), 1);
    let c_v = values((B, H), 2);
    let dc_v = values((B, H), 3);
    let dh_v = values((B, H), 4);
    let want = reference(&concat_v, &c_v, &dc_v, &dh_v);

    let concat = Lazy::from(concat_v.clone());
    let c = Lazy::from(c_v.clone());
    let (new_c, new_h) = cell(&concat, &c);
    let (dc, dh) = (Lazy::from(dc_v.clone()), Lazy::from(dh_v.clone()));
    let grads = ovl::backward(&[(&new_c, &dc), (&new_h, &dh)], &[&concat, &c]).unwrap();
    let (d_concat, d_c) = (grads.of(&concat).unwrap(), grads.of(&c).unwrap());

    for (level, forward_kernels, backward_kernels) in [(0u8, None, None), (3, Some(1), Some(1))] {
        let options = Options::cpu().with_opt_level(level);
        let ((nc, nh), forward) = ovl::profile((&new_c, &new_h), &options, 1).unwrap();
        close(&nc, &want.new_c, "new_c");
        close(&nh, &want.new_h, "new_h");
        let ((gx, gc), backward) = ovl::profile((&d_concat, &d_c), &options, 1).unwrap();
        close(&gx, &want.d_concat, "d_concat");
        close(&gc, &want.d_c, "d_c");
        println!(
            "opt level {level}: forward {} kernels, backward {} kernels",
            forward.kernel_count(),
            backward.kernel_count()
        );
        if let (Some(f), Some(b)) = (forward_kernels, backward_kernels) {
            assert_eq!(
                forward.kernel_count(),
                f,
                "forward kernels at opt level {level}"
            );
            assert_eq!(
                backward.kernel_count(),
                b,
                "backward kernels at opt level {level}"
            );
        }
    }
}
