//! A two-layer perceptron with softmax cross-entropy, trained with gradients from
//! `ovl::backward`: the fused training step (opt level 3) matches the unfused one (opt level 0)
//! step for step, matches central differences, and lowers the loss.

use ndarray::{Array, Array2, ArrayD, Ix2};
use ovl::{Lazy, Options};
use ovl_stdlib as ops;

const N: usize = 8; // examples
const D: usize = 4; // features
const HID: usize = 6; // hidden units
const K: usize = 3; // classes

fn values(shape: (usize, usize), seed: u64, scale: f64) -> Array2<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    Array::from_shape_simple_fn(shape, || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale
    })
}

#[derive(Clone)]
struct Params {
    w1: Array2<f64>,
    b1: Array2<f64>,
    w2: Array2<f64>,
    b2: Array2<f64>,
}

impl Params {
    /// The elements of parameter `which` (w1, b1, w2, b2), mutable.
    fn get_mut(&mut self, which: usize) -> &mut [f64] {
        let m = match which {
            0 => &mut self.w1,
            1 => &mut self.b1,
            2 => &mut self.w2,
            _ => &mut self.b2,
        };
        m.as_slice_mut().expect("standard layout")
    }
}

/// Mean cross-entropy of softmax(relu(x w1 + b1) w2 + b2) against one-hot labels.
fn loss(x: &Lazy<f64>, onehot: &Lazy<f64>, p: &[Lazy<f64>; 4]) -> Lazy<f64> {
    let hidden = ops::relu(ops::add(ops::matmul(x, &p[0]), &p[1]));
    let logits = ops::add(ops::matmul(&hidden, &p[2]), &p[3]);
    let probabilities = ops::softmax(&logits);
    let picked = ops::sum(ops::mul(onehot, ops::log(&probabilities)), 1);
    ops::neg(ops::mean(&picked, 0))
}

fn lazies(p: &Params) -> [Lazy<f64>; 4] {
    [p.w1.clone(), p.b1.clone(), p.w2.clone(), p.b2.clone()].map(Lazy::from)
}

/// One step of gradient descent; returns the loss before the step and the gradients.
fn step(
    p: &mut Params,
    x: &Array2<f64>,
    onehot: &Array2<f64>,
    options: &Options,
) -> (f64, Vec<ArrayD<f64>>) {
    let (xl, yl) = (Lazy::from(x.clone()), Lazy::from(onehot.clone()));
    let params = lazies(p);
    let l = loss(&xl, &yl, &params);
    let seed = Lazy::from(ndarray::arr0(1.0f64));
    let refs: Vec<&Lazy<f64>> = params.iter().collect();
    let grads = ovl::backward(&[(&l, &seed)], &refs).unwrap();
    let g: Vec<Lazy<f64>> = params.iter().map(|q| grads.of(q).unwrap()).collect();
    let (value, g0, g1, g2, g3) =
        ovl::evaluate_with((&l, &g[0], &g[1], &g[2], &g[3]), options).unwrap();
    let gs = vec![g0, g1, g2, g3];
    let lr = 0.5;
    for (w, g) in [&mut p.w1, &mut p.b1, &mut p.w2, &mut p.b2]
        .into_iter()
        .zip(&gs)
    {
        let g = g.clone().into_dimensionality::<Ix2>().unwrap();
        w.scaled_add(-lr, &g);
    }
    (value[[]], gs)
}

fn data() -> (Array2<f64>, Array2<f64>, Params) {
    let x = values((N, D), 1, 1.0);
    let mut onehot = Array2::zeros((N, K));
    for n in 0..N {
        // The label depends on the features, so there is something to learn.
        let label = if x[[n, 0]] + x[[n, 1]] > 0.3 {
            0
        } else if x[[n, 2]] > 0.0 {
            1
        } else {
            2
        };
        onehot[[n, label]] = 1.0;
    }
    let p = Params {
        w1: values((D, HID), 2, 0.7),
        b1: values((1, HID), 3, 0.1),
        w2: values((HID, K), 4, 0.7),
        b2: values((1, K), 5, 0.1),
    };
    (x, onehot, p)
}

#[test]
fn fused_training_matches_unfused_and_learns() {
    let (x, onehot, p) = data();
    let mut fused = p.clone();
    let mut unfused = p;
    let mut losses = Vec::new();
    for _ in 0..5 {
        let (lf, gf) = step(&mut fused, &x, &onehot, &Options::cpu());
        let (lu, gu) = step(&mut unfused, &x, &onehot, &Options::cpu().with_opt_level(0));
        assert!((lf - lu).abs() <= 1e-12, "loss fused {lf} vs unfused {lu}");
        for (a, b) in gf.iter().zip(&gu) {
            for (u, v) in a.iter().zip(b) {
                assert!(
                    (u - v).abs() <= 1e-12 * v.abs().max(1.0),
                    "gradient {u} vs {v}"
                );
            }
        }
        losses.push(lf);
    }
    println!("losses: {losses:?}");
    assert!(
        losses[4] < losses[0] * 0.9,
        "the loss did not fall: {losses:?}"
    );
}

#[test]
fn gradients_match_central_differences() {
    let (x, onehot, p) = data();
    let eval_loss = |p: &Params| {
        let l = loss(
            &Lazy::from(x.clone()),
            &Lazy::from(onehot.clone()),
            &lazies(p),
        );
        ovl::evaluate_with(&l, &Options::interpreter()).unwrap()[[]]
    };
    let mut probe = p.clone();
    let (_, grads) = step(&mut probe, &x, &onehot, &Options::interpreter());
    let h = 1e-6;
    for (which, grad) in grads.iter().enumerate() {
        for j in 0..grad.len() {
            let mut plus = p.clone();
            let mut minus = p.clone();
            plus.get_mut(which)[j] += h;
            minus.get_mut(which)[j] -= h;
            let numeric = (eval_loss(&plus) - eval_loss(&minus)) / (2.0 * h);
            let got = grad.as_slice().unwrap()[j];
            assert!(
                (got - numeric).abs() <= 1e-6,
                "param {which}[{j}]: {got} vs {numeric}"
            );
        }
    }
}
