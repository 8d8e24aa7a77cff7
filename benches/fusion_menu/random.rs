//! Random graphs for the fusion menu's property check (`--random N`): each a chain of 3 to 7
//! steps drawn from elementwise operators, transposes, row and column statistics used by their
//! consumers, softmax along either axis and a product written as one worker per element, on
//! square f32 matrices, so that any step can follow any other. The same seed gives the same
//! graphs on every run.

use ovl::prelude::*;
use ovl_stdlib as ops;

/// A step of a random graph, for the case's name.
#[derive(Clone, Copy, Debug)]
enum Step {
    Tanh,
    Sigmoid,
    Add,
    Mul,
    Transpose,
    CentreRows,
    CentreColumns,
    ScaleByRowMax,
    SoftmaxRows,
    SoftmaxColumns,
    Product,
}

const STEPS: [Step; 11] = [
    Step::Tanh,
    Step::Sigmoid,
    Step::Add,
    Step::Mul,
    Step::Transpose,
    Step::CentreRows,
    Step::CentreColumns,
    Step::ScaleByRowMax,
    Step::SoftmaxRows,
    Step::SoftmaxColumns,
    Step::Product,
];

/// xorshift64: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// A random graph: its name (the steps) and its output.
pub struct RandomGraph {
    pub name: String,
    pub output: Lazy<f32>,
}

/// `count` random graphs over `n x n` matrices made by `data(shape, seed)`; products (an
/// `n^3` fold each) at most once per graph.
pub fn graphs(
    count: usize,
    n: usize,
    seed: u64,
    data: impl Fn(&[usize], usize) -> Lazy<f32>,
) -> Vec<RandomGraph> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut out = Vec::with_capacity(count);
    for g in 0..count {
        let x = data(&[n, n], 100 + 2 * g);
        let y = data(&[n, n], 101 + 2 * g);
        let steps = 3 + rng.below(5);
        let mut values = vec![x, y];
        let mut names = Vec::new();
        let mut product_used = false;
        for _ in 0..steps {
            let mut step = STEPS[rng.below(STEPS.len())];
            if matches!(step, Step::Product) && product_used {
                step = Step::Tanh;
            }
            let a = values[values.len() - 1].clone();
            let b = values[rng.below(values.len())].clone();
            let v = match step {
                Step::Tanh => ops::tanh(&a),
                Step::Sigmoid => ops::sigmoid(&a),
                Step::Add => ops::add(&a, &b),
                Step::Mul => ops::mul(&a, &b),
                Step::Transpose => ops::transpose(&a, &[1, 0]),
                Step::CentreRows => ops::sub(&a, ops::mean_keepdim(&a, 1)),
                Step::CentreColumns => ops::sub(&a, ops::mean_keepdim(&a, 0)),
                Step::ScaleByRowMax => {
                    let m = ops::max_keepdim(ops::abs(&a), 1);
                    ops::div(&a, &m + 1.0f32)
                }
                Step::SoftmaxRows | Step::SoftmaxColumns => {
                    let axis = usize::from(matches!(step, Step::SoftmaxRows));
                    let e = ops::exp(ops::sub(&a, ops::max_keepdim(&a, axis)));
                    ops::div(&e, ops::sum_keepdim(&e, axis))
                }
                Step::Product => {
                    product_used = true;
                    // Scaled so that the values stay of order 1.
                    let scaled = &b * (1.0f32 / n as f32);
                    super::product_per_element(&a, &scaled)
                }
            };
            names.push(format!("{step:?}"));
            values.push(v);
        }
        out.push(RandomGraph {
            name: names.join(" > "),
            output: values.pop().expect("at least one step"),
        });
    }
    out
}
