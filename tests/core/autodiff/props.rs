//! Random elementwise operators (hand-built IR: unary and binary ops of the table, `select`,
//! `if`/`else` with a variable, reads at the worker's element, reversed and broadcast), whose
//! derived gradients must match central differences (f64) on the interpreter and C++. The
//! operators are drawn from a fixed seed, so every run checks the same ones.

use ndarray::{ArrayD, IxDyn};
use ovl::{DType, Lazy, Options};
use ovl_core::builder::{Builder, IN, OUT};
use ovl_core::ir::{self, Op};
use ovl_core::lazy::{LazyTensor, Node, OperatorNode};
use std::sync::Arc;

const N: u64 = 5;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A random operator over inputs `x0[N]` (read at `i`), `x1[N]` (read at `N - 1 - i`) and
/// `x2[1]` (read at 0 by every worker); one output `[N]`.
fn random_operator(rng: &mut Rng) -> ir::ExpressionDag {
    let mut b = Builder::new("random_elementwise", &[N]);
    for shape in [[N], [N], [1]] {
        b.input(DType::F64, &shape);
    }
    b.output(DType::F64, &[N]);
    let i = b.position(0);
    let last = b.i64(N as i64 - 1);
    let rev = b.op(Op::Sub, &[last, i]);
    let zero = b.i64(0);
    let mut pool = vec![
        b.read(IN, 0, &[i]),
        b.read(IN, 1, &[rev]),
        b.read(IN, 2, &[zero]),
    ];
    let steps = 4 + rng.below(6);
    for _ in 0..steps {
        let a = pool[rng.below(pool.len())];
        let c = pool[rng.below(pool.len())];
        let one = b.f64(1.0);
        let v = match rng.below(16) {
            0 => b.op(Op::Sin, &[a]),
            1 => b.op(Op::Tanh, &[a]),
            2 => b.op(Op::Sigmoid, &[a]),
            3 => b.op(Op::Atan, &[a]),
            4 => {
                let t = b.op(Op::Tanh, &[a]);
                b.op(Op::Exp, &[t])
            }
            5 => {
                let sq = b.op(Op::Mul, &[a, a]);
                b.op(Op::Log1p, &[sq])
            }
            6 => {
                let sq = b.op(Op::Mul, &[c, c]);
                let d = b.op(Op::Add, &[sq, one]);
                b.op(Op::Div, &[a, d])
            }
            7 => b.op(Op::Mul, &[a, c]),
            8 => b.op(Op::Add, &[a, c]),
            9 => b.op(Op::Sub, &[a, c]),
            10 => b.op(Op::Max, &[a, c]),
            11 => b.op(Op::Min, &[a, c]),
            12 => {
                let cond = b.op(Op::Gt, &[a, c]);
                let ac = b.op(Op::Mul, &[a, c]);
                b.op(Op::Select, &[cond, ac, c])
            }
            13 => {
                let sq = b.op(Op::Mul, &[a, a]);
                let s = b.op(Op::Add, &[sq, one]);
                b.op(Op::Sqrt, &[s])
            }
            14 => {
                let c2 = b.op(Op::Mul, &[c, c]);
                let d = b.op(Op::Add, &[c2, one]);
                b.op(Op::Atan2, &[a, d])
            }
            _ => {
                // if a > c { v = a * a } else { v = cos(c) + v }
                let v = b.var(a);
                let cond = b.op(Op::Gt, &[a, c]);
                b.if_(cond);
                let sq = b.op(Op::Mul, &[a, a]);
                b.assign(v, sq);
                b.else_();
                let cs = b.op(Op::Cos, &[c]);
                let s = b.op(Op::Add, &[cs, v]);
                b.assign(v, s);
                b.end_if();
                // A copy of the variable's value after the branch.
                let z = b.f64(0.0);
                b.op(Op::Add, &[v, z])
            }
        };
        pool.push(v);
    }
    // The output mixes the last value with one earlier one.
    let last = *pool.last().unwrap();
    let other = pool[rng.below(pool.len())];
    let y = b.op(Op::Mul, &[last, other]);
    b.write(OUT, 0, &[i], y);
    b.build()
}

/// A call of `dag` on `inputs`.
fn call(dag: &ir::ExpressionDag, inputs: &[Lazy<f64>]) -> Lazy<f64> {
    let node = OperatorNode::new(
        Arc::new(dag.clone()),
        inputs.iter().map(|x| x.untyped().clone()).collect(),
        None,
    );
    let t = LazyTensor {
        node: Arc::new(Node::Operator(node)),
        output: 0,
        dtype: DType::F64,
        shape: vec![N as usize].into(),
    };
    Lazy::try_from(t).unwrap()
}

fn loss(dag: &ir::ExpressionDag, xs: &[ArrayD<f64>], seed: &ArrayD<f64>) -> f64 {
    let lazies: Vec<Lazy<f64>> = xs.iter().map(|x| Lazy::from(x.clone())).collect();
    let y = ovl::evaluate_with(&call(dag, &lazies), &Options::interpreter()).unwrap();
    (&y * seed).sum()
}

#[test]
fn derived_gradients_of_random_elementwise_operators_match_central_differences() {
    let mut rng = Rng(0x05EE_D0F0_A11B);
    for case in 0..24 {
        let dag = random_operator(&mut rng);
        ovl_core::validate::validate(&dag).unwrap();
        let xs: Vec<ArrayD<f64>> = [N as usize, N as usize, 1]
            .iter()
            .map(|&n| ArrayD::from_shape_simple_fn(IxDyn(&[n]), || rng.unit() * 3.0 - 1.5))
            .collect();
        let seed = ArrayD::from_shape_simple_fn(IxDyn(&[N as usize]), || rng.unit() * 2.0 - 1.0);
        let h = 1e-6;
        let want: Vec<ArrayD<f64>> = (0..xs.len())
            .map(|k| {
                let mut g = ArrayD::zeros(xs[k].raw_dim());
                for (e, slot) in g.iter_mut().enumerate() {
                    let (mut plus, mut minus) = (xs.to_vec(), xs.to_vec());
                    plus[k].as_slice_mut().unwrap()[e] += h;
                    minus[k].as_slice_mut().unwrap()[e] -= h;
                    *slot = (loss(&dag, &plus, &seed) - loss(&dag, &minus, &seed)) / (2.0 * h);
                }
                g
            })
            .collect();
        let lazies: Vec<Lazy<f64>> = xs.iter().map(|x| Lazy::from(x.clone())).collect();
        let y = call(&dag, &lazies);
        let s = Lazy::from(seed.clone());
        let wrt: Vec<&Lazy<f64>> = lazies.iter().collect();
        let grads = ovl::backward(&[(&y, &s)], &wrt).unwrap();
        for (target, options) in [
            ("interpreter", Options::interpreter()),
            ("cpu", Options::cpu()),
        ] {
            for (k, x) in lazies.iter().enumerate() {
                let got = ovl::evaluate_with(&grads.of_or_zeros(x), &options).unwrap();
                for (e, (g, w)) in got.iter().zip(want[k].iter()).enumerate() {
                    assert!(
                        (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                        "case {case} on {target}, input {k}, element {e}: derived {g}, \
                         central differences {w}\n{}",
                        ovl_core::text::to_text(&dag)
                    );
                }
            }
        }
    }
}
