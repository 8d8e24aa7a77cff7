//! The original system's examples: expm1/log1p with if / else if / else, edge-parallel triangle
//! counting, and a 1-D convolution (cumsum and cumprod are in `control`).

use super::support::{close_f64, eval};
use ndarray::Array1;
use ovl::prelude::*;

/// `log1p(x)` and `expm1(x)` by branch: a Taylor polynomial near zero, the library elsewhere.
#[operator]
pub fn log1p_expm1(x: Tensor<f64>) -> (Tensor<f64>, Tensor<f64>) {
    let i = position_in(x.shape())[0];
    let l = output_like(&x);
    let e = output_like(&x);
    let v = x[[i]];
    if abs(v) < 1e-5 {
        l[[i]] = v - v * v / 2.0 + v * v * v / 3.0;
        e[[i]] = v + v * v / 2.0 + v * v * v / 6.0;
    } else if v > -1.0 {
        l[[i]] = log(1.0 + v);
        e[[i]] = exp(v) - 1.0;
    } else {
        l[[i]] = f64::NAN;
        e[[i]] = exp(v) - 1.0;
    }
    (l, e)
}

pub fn log1p_and_expm1(options: &Options) {
    let xs = vec![-2.0, -1.0, -0.5, -1e-7, 0.0, 3e-6, 0.25, 1.0, 30.0];
    let o = log1p_expm1(Array1::from(xs.clone()));
    let (l, e) = ovl::evaluate_with((&o.0, &o.1), options).unwrap();
    for (i, &x) in xs.iter().enumerate() {
        let want_l = if x <= -1.0 { f64::NAN } else { x.ln_1p() };
        assert!(
            close_f64(l[[i]], want_l, 64) || (want_l - l[[i]]).abs() < 1e-15,
            "log1p({x}) = {}",
            l[[i]]
        );
        assert!(
            (e[[i]] - x.exp_m1()).abs() <= 1e-12 * x.exp_m1().abs().max(1e-300) + 1e-20,
            "expm1({x}) = {}",
            e[[i]]
        );
    }
}

/// Edge-parallel triangle counting: one worker per edge (u, v) with u < v counts the common
/// neighbours w > v by merging the two sorted adjacency lists (CSR).
#[operator]
pub fn triangles_per_edge(
    row_ptr: Tensor<i32>,
    cols: Tensor<i32>,
    src: Tensor<i32>,
    dst: Tensor<i32>,
) -> Tensor<i32> {
    let e = position_in(src.shape())[0];
    let out = output(src.shape());
    let u = src[[e]];
    let v = dst[[e]];
    let mut a = variable(row_ptr[[u]]);
    let a_end = row_ptr[[u + 1]];
    let mut b = variable(row_ptr[[v]]);
    let b_end = row_ptr[[v + 1]];
    let mut count = variable(0i32);
    while a < a_end && b < b_end {
        let x = cols[[a]];
        let y = cols[[b]];
        if x == y {
            if x > v {
                count += 1;
            }
            a += 1;
            b += 1;
        } else if x < y {
            a += 1;
        } else {
            b += 1;
        }
    }
    out[[e]] = count;
    out
}

pub fn triangle_counting(options: &Options) {
    // A small graph: two triangles sharing an edge (0-1-2, 1-2-3), a 4-clique on 4..8
    // (4 triangles), and a pendant vertex 8. 6 triangles in all.
    let undirected = [
        (0, 1),
        (0, 2),
        (1, 2),
        (1, 3),
        (2, 3),
        (4, 5),
        (4, 6),
        (4, 7),
        (5, 6),
        (5, 7),
        (6, 7),
        (7, 8),
    ];
    let n = 9;
    let mut adj = vec![Vec::new(); n];
    for &(a, b) in &undirected {
        adj[a].push(b as i32);
        adj[b].push(a as i32);
    }
    let mut row_ptr = vec![0i32];
    let mut cols = Vec::new();
    for list in &mut adj {
        list.sort();
        cols.extend(list.iter().copied());
        row_ptr.push(cols.len() as i32);
    }
    let src: Vec<i32> = undirected.iter().map(|&(a, _)| a as i32).collect();
    let dst: Vec<i32> = undirected.iter().map(|&(_, b)| b as i32).collect();
    let per_edge = eval(
        &triangles_per_edge(
            Array1::from(row_ptr),
            Array1::from(cols),
            Array1::from(src),
            Array1::from(dst),
        ),
        options,
    );
    // Brute force over vertex triples, independently.
    let mut brute = 0;
    for a in 0..n {
        for b in a + 1..n {
            for c in b + 1..n {
                let has = |x: usize, y: usize| adj[x].contains(&(y as i32));
                if has(a, b) && has(b, c) && has(a, c) {
                    brute += 1;
                }
            }
        }
    }
    assert_eq!(brute, 6);
    assert_eq!(per_edge.sum(), brute);
}

/// 1-D convolution with zero padding: `out[i] = sum_k x[i + k - r] * w[k]`.
#[operator]
pub fn conv1d(x: Tensor<f32>, w: Tensor<f32>) -> Tensor<f32> {
    let n = x.shape()[0];
    let taps = w.shape()[0];
    let radius = (taps / 2) as i64;
    let i = position_in([n])[0];
    let out = output_like(&x);
    let mut acc = variable(0.0f32);
    for k in 0..taps {
        let j = i + k - radius;
        if j >= 0 && j < n as i64 {
            acc += x[[j]] * w[[k]];
        }
    }
    out[[i]] = acc;
    out
}

pub fn convolution_1d(options: &Options) {
    let x = Array1::from_shape_fn(37, |i| ((i * 7) % 11) as f32 - 5.0);
    let w = Array1::from(vec![0.25f32, -0.5, 1.0, 0.5, 0.125]);
    let got = eval(&conv1d(&x, &w), options);
    for i in 0..37i64 {
        let mut acc = 0.0f32;
        for k in 0..5i64 {
            let j = i + k - 2;
            if (0..37).contains(&j) {
                acc += x[j as usize] * w[k as usize];
            }
        }
        assert_eq!(got[i as usize], acc, "conv at {i}");
    }
}
