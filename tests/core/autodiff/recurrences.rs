//! Recurrences: counted loops whose iterations carry values the gradient needs (a cumulative
//! product, a linear recurrence, an RNN unrolled in one worker, a selective scan), products and
//! min/max reduced over loops; recorded per iteration or checkpointed (`ovl_ir::grad`'s
//! records), against central differences in f64 and references computed here.

use super::*;
use ovl::Construct;

/// The row-wise cumulative product.
#[operator]
pub fn cumprod_rows(x: Tensor<f64>) -> Tensor<f64> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output_like(&x);
    let mut acc = variable(1.0f64);
    for j in 0..cols {
        acc *= x[[r, j]];
        out[[r, j]] = acc;
    }
    out
}

#[test]
fn cumulative_product() {
    check(
        "cumprod_rows",
        &|xs| vec![cumprod_rows(&xs[0])],
        vec![values(&[3, 5], 60, -1.5, 1.5)],
    );
}

/// The gradient of a cumulative product with zeros: each factor gets the product of the others
/// (no division), as JAX's `cumprod` gradient gives; computed here in f64.
#[test]
fn cumulative_product_with_zeros_matches_the_product_of_the_other_factors() {
    let x = ndarray::array![[2.0, 0.0, 3.0, 0.0, 0.5], [0.0, 1.5, -2.0, 4.0, 1.0]].into_dyn();
    let seed = values(&[2, 5], 61, -1.0, 1.0);
    let mut want = ArrayD::<f64>::zeros(IxDyn(&[2, 5]));
    for r in 0..2 {
        for k in 0..5 {
            // d out[r, j] / d x[r, k] = prod_{i <= j, i != k} x[r, i] for j >= k.
            let mut g = 0.0;
            for j in k..5 {
                let others: f64 = (0..=j).filter(|&i| i != k).map(|i| x[[r, i]]).product();
                g += seed[[r, j]] * others;
            }
            want[[r, k]] = g;
        }
    }
    let (xl, sl) = (Lazy::from(x.clone()), Lazy::from(seed));
    let y = cumprod_rows(&xl);
    let g = ovl::backward(&[(&y, &sl)], &[&xl]).unwrap();
    for (name, options) in targets() {
        let got = ovl::evaluate_with(&g.of(&xl).unwrap(), &options).unwrap();
        assert_close(&format!("cumprod with zeros on {name}"), &got, &want, 1e-12);
    }
}

/// `h = a[j] * h + b[r, j]`, written out at every step.
#[operator]
pub fn linear_recurrence(a: Tensor<f64>, b: Tensor<f64>) -> Tensor<f64> {
    let [rows, cols] = b.dims::<2>();
    let r = position_in([rows])[0];
    let out = output_like(&b);
    let mut h = variable(0.0f64);
    for j in 0..cols {
        h = a[[j]] * h + b[[r, j]];
        out[[r, j]] = h;
    }
    out
}

#[test]
fn linear_recurrence_and_its_second_derivative() {
    let xs = vec![values(&[6], 62, -1.2, 1.2), values(&[3, 6], 63, -1.0, 1.0)];
    check(
        "linear_recurrence",
        &|xs| vec![linear_recurrence(&xs[0], &xs[1])],
        xs.clone(),
    );
    check(
        "gradient of linear_recurrence",
        &gradient_of(&|xs| vec![linear_recurrence(&xs[0], &xs[1])]),
        xs,
    );
}

/// An RNN cell unrolled over 16 steps inside one worker (one batch row): the state `h` in a
/// local tensor updated in place, `h' = tanh(W h + u x_t)`, every step written out.
#[operator]
pub fn rnn16(x: Tensor<f64>, w: Tensor<f64>, u: Tensor<f64>) -> Tensor<f64> {
    let [batch, steps] = x.dims::<2>();
    let [hidden, _] = w.dims::<2>();
    let b = position_in([batch])[0];
    let out = output([batch, steps, hidden]);
    let h = zeros::<f64>([hidden]);
    let next = zeros::<f64>([hidden]);
    for t in 0..steps {
        for i in 0..hidden {
            let mut s = variable(u[[i]] * x[[b, t]]);
            for j in 0..hidden {
                s += w[[i, j]] * h[[j]];
            }
            next[[i]] = tanh(s);
        }
        for i in 0..hidden {
            h[[i]] = next[[i]];
            out[[b, t, i]] = h[[i]];
        }
    }
    out
}

#[test]
fn rnn_unrolled_sixteen_steps_in_one_worker() {
    check(
        "rnn16",
        &|xs| vec![rnn16(&xs[0], &xs[1], &xs[2])],
        vec![
            values(&[2, 16], 64, -1.0, 1.0),
            values(&[3, 3], 65, -0.6, 0.6),
            values(&[3], 66, -1.0, 1.0),
        ],
    );
}

/// A selective scan (Mamba's state-space layer), one worker per batch x channel, the state in
/// a local tensor: `h_n = exp(dt A[d, n]) h_n + dt B[b, t, n] x`, `y = sum_n C[b, t, n] h_n`.
#[operator]
pub fn scan_small(
    x: Tensor<f64>,
    dt: Tensor<f64>,
    a: Tensor<f64>,
    bm: Tensor<f64>,
    cm: Tensor<f64>,
) -> Tensor<f64> {
    let [batch, channels, steps] = x.dims::<3>();
    let [_, state] = a.dims::<2>();
    let p = position_in([batch, channels]);
    let (b, d) = (p[0], p[1]);
    let out = output_like(&x);
    let h = zeros::<f64>([state]);
    for t in 0..steps {
        let delta = dt[[b, d, t]];
        let xt = x[[b, d, t]];
        let mut y = variable(0.0f64);
        for n in 0..state {
            h[[n]] = exp(delta * a[[d, n]]) * h[[n]] + delta * bm[[b, t, n]] * xt;
            y += cm[[b, t, n]] * h[[n]];
        }
        out[[b, d, t]] = y;
    }
    out
}

#[test]
fn selective_scan() {
    check(
        "scan_small",
        &|xs| vec![scan_small(&xs[0], &xs[1], &xs[2], &xs[3], &xs[4])],
        vec![
            values(&[2, 2, 4], 67, -1.0, 1.0),
            values(&[2, 2, 4], 68, 0.1, 0.6),
            values(&[2, 3], 69, -1.0, -0.2),
            values(&[2, 4, 3], 70, -1.0, 1.0),
            values(&[2, 4, 3], 71, -1.0, 1.0),
        ],
    );
}

/// A product reduction and a max reduced over two loops (a 2-D block per worker).
#[operator]
pub fn block_prod_max(x: Tensor<f64>) -> (Tensor<f64>, Tensor<f64>) {
    let [rows, a, b] = x.dims::<3>();
    let r = position_in([rows])[0];
    let prod = output([rows]);
    let top = output([rows]);
    let mut p = product_of(1.0f64);
    for j in 0..b {
        p *= x[[r, 0, j]];
    }
    let mut m = max_of(f64::NEG_INFINITY);
    for i in 0..a {
        for j in 0..b {
            m.update(x[[r, i, j]] * 2.0);
        }
    }
    prod[[r]] = p;
    top[[r]] = m;
    (prod, top)
}

#[test]
fn products_and_a_max_reduced_over_two_loops() {
    check(
        "block_prod_max",
        &|xs| {
            let (p, m) = block_prod_max(&xs[0]);
            vec![p, m]
        },
        vec![values(&[2, 3, 4], 72, -1.5, 1.5)],
    );
    // Zeros: the product of the other factors; a tie of the max: the last equal value.
    let x = ndarray::array![[
        [0.0, 2.0, 0.0, 3.0],
        [1.0, 3.0, 0.5, 0.5],
        [3.0, 0.0, 1.0, 2.0]
    ]]
    .into_dyn();
    let (xl, one) = (
        Lazy::from(x),
        Lazy::from(ArrayD::from_elem(IxDyn(&[1]), 1.0)),
    );
    let (p, m) = block_prod_max(&xl);
    let gp = ovl::backward(&[(&p, &one)], &[&xl]).unwrap();
    let gm = ovl::backward(&[(&m, &one)], &[&xl]).unwrap();
    for (name, options) in targets() {
        let got = ovl::evaluate_with(&gp.of(&xl).unwrap(), &options).unwrap();
        let want = [0.0, 0.0, 0.0, 0.0];
        assert_eq!(&got.as_slice().unwrap()[..4], &want, "{name}");
        let got = ovl::evaluate_with(&gm.of(&xl).unwrap(), &options).unwrap();
        let mut want = [0.0; 12];
        want[8] = 2.0;
        assert_eq!(got.as_slice().unwrap(), &want, "max tie on {name}");
    }
    let x = ndarray::array![[[2.0, 0.0, 3.0, 0.5]]].into_dyn();
    let xl = Lazy::from(x);
    let (p, _) = block_prod_max(&xl);
    let gp = ovl::backward(&[(&p, &one)], &[&xl]).unwrap();
    let got = ovl::evaluate(&gp.of(&xl).unwrap()).unwrap();
    assert_eq!(got.as_slice().unwrap(), &[0.0, 3.0, 0.0, 0.0]);
}

/// A long scalar recurrence: 9,000 f64 states per worker do not fit the record budget
/// (72,000 bytes), so the loop is checkpointed every 95 iterations. (Each row has its own
/// coefficients: a coefficient shared by the rows would get its gradient by a gather that
/// recomputes every row's sweep per coefficient, 9,000 sweeps.)
#[operator]
pub fn long_recurrence(a: Tensor<f64>, b: Tensor<f64>) -> Tensor<f64> {
    let [rows, cols] = b.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows]);
    let mut h = variable(0.0f64);
    let mut s = variable(0.0f64);
    for j in 0..cols {
        h = a[[r, j]] * h + b[[r, j]];
        s += h * h;
    }
    out[[r]] = s;
    out
}

#[test]
fn a_long_recurrence_is_checkpointed() {
    let n = 9000;
    let a = values(&[2, n], 73, 0.5, 0.99);
    let b = values(&[2, n], 74, -1.0, 1.0);
    let seed = values(&[2], 75, -1.0, 1.0);
    // Reference in f64: forward states, then the adjoint recurrence.
    let mut da = ArrayD::<f64>::zeros(IxDyn(&[2, n]));
    let mut db = ArrayD::<f64>::zeros(IxDyn(&[2, n]));
    for r in 0..2 {
        let mut hs = vec![0.0; n + 1];
        for j in 0..n {
            hs[j + 1] = a[[r, j]] * hs[j] + b[[r, j]];
        }
        let mut gh = 0.0;
        for j in (0..n).rev() {
            gh += seed[[r]] * 2.0 * hs[j + 1];
            db[[r, j]] = gh;
            da[[r, j]] = gh * hs[j];
            gh *= a[[r, j]];
        }
    }
    let (al, bl, sl) = (Lazy::from(a), Lazy::from(b), Lazy::from(seed));
    let y = long_recurrence(&al, &bl);
    let g = ovl::backward(&[(&y, &sl)], &[&al, &bl]).unwrap();
    for (name, options) in targets() {
        let (ga, gb) =
            ovl::evaluate_with((&g.of(&al).unwrap(), &g.of(&bl).unwrap()), &options).unwrap();
        assert_close(&format!("checkpointed da on {name}"), &ga, &da, 1e-9);
        assert_close(&format!("checkpointed db on {name}"), &gb, &db, 1e-9);
    }
}

/// A state of 512 f64 updated over 4,096 steps: 16 MiB recorded, 512 KiB checkpointed; past
/// the budget either way.
#[operator]
pub fn huge_state(x: Tensor<f64>) -> Tensor<f64> {
    let [rows, steps] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output([rows]);
    let h = ones::<f64>([512]);
    for t in 0..steps {
        for j in 0..512 {
            h[[j]] = h[[(j + 1) % 512]] * x[[r, t]];
        }
    }
    out[[r]] = h[[0]];
    out
}

#[test]
fn a_record_that_cannot_fit_is_an_error_naming_the_operator_and_the_loop() {
    let x = Lazy::from(values(&[2, 4096], 76, 0.9, 1.1));
    let seed = Lazy::from(values(&[2], 77, -1.0, 1.0));
    let y = huge_state(&x);
    let e = match ovl::backward(&[(&y, &seed)], &[&x]) {
        Err(GradError::Underivable(e)) => e,
        other => panic!("expected a record too large, got {other:?}"),
    };
    assert!(
        matches!(e.construct, Construct::TapeTooLarge { trips: 4096, .. }),
        "{e}"
    );
    assert_eq!(e.operator, "huge_state");
    let msg = e.to_string();
    assert!(
        msg.contains("checkpointing") && msg.contains("4096 iterations") && msg.contains("64 KiB"),
        "{msg}"
    );
}

/// The recorded and checkpointed gradients on the CUDA backend: on a GPU they equal the
/// interpreter's; without one, every kernel is compiled by NVRTC and validated by ptxas (values
/// from the interpreter in the GPU's order). Says which happened (scripts/gpu-check.sh runs it).
#[test]
fn recurrences_on_cuda() {
    use std::io::Write as _;
    let say = |s: &str| {
        let _ = writeln!(std::io::stderr(), "{s}");
    };
    let options = match ovl::cuda::gpu_status() {
        Ok(gpu) => {
            say(&format!(
                "recurrences cuda: running on the GPU {}",
                gpu.name
            ));
            Options::cuda()
        }
        Err(_) => {
            if let Err(e) = ovl::cuda::nvrtc_status() {
                say(&format!(
                    "recurrences cuda: CUDA DID NOT RUN (no GPU, and NVRTC is missing: {})",
                    e.to_string().lines().next().unwrap_or_default()
                ));
                return;
            }
            say("recurrences cuda: GPU EXECUTION DID NOT RUN (no GPU): kernels compiled by NVRTC and validated by ptxas");
            Options::cuda_validate()
        }
    };
    let scan = |xs: &[Lazy<f64>]| vec![scan_small(&xs[0], &xs[1], &xs[2], &xs[3], &xs[4])];
    let long = |xs: &[Lazy<f64>]| vec![long_recurrence(&xs[0], &xs[1])];
    let cases: [(&str, &Forward, Vec<ArrayD<f64>>); 2] = [
        (
            "scan_small",
            &scan,
            vec![
                values(&[2, 3, 20], 80, -1.0, 1.0),
                values(&[2, 3, 20], 81, 0.1, 0.6),
                values(&[3, 4], 82, -1.0, -0.2),
                values(&[2, 20, 4], 83, -1.0, 1.0),
                values(&[2, 20, 4], 84, -1.0, 1.0),
            ],
        ),
        (
            "long_recurrence",
            &long,
            vec![
                values(&[3, 9000], 85, 0.5, 0.99),
                values(&[3, 9000], 86, -1.0, 1.0),
            ],
        ),
    ];
    for (name, f, xs) in cases {
        let lazies: Vec<Lazy<f64>> = xs.iter().map(|x| Lazy::from(x.clone())).collect();
        let seeds: Vec<ArrayD<f64>> = f(&lazies)
            .iter()
            .map(|y| values(y.shape(), 87, -1.0, 1.0))
            .collect();
        let want = derived(f, &xs, &seeds, &Options::interpreter()).unwrap();
        let got = derived(f, &xs, &seeds, &options).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(&format!("{name} on cuda, input {i}"), g, w, 1e-9);
        }
    }
}
