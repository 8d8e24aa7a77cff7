//! What the GEMM tests share: options with the test cache, operands of every transposed form,
//! deterministic values, and the product by a plain loop in f64 with the size of its rounding.
#![allow(dead_code)]

use ndarray::{ArrayD, IxDyn};
use ovl::{Lazy, Options};

pub fn options(target: Options) -> Options {
    match std::env::var_os("OVL_CACHE_DIR") {
        Some(dir) => Options {
            cache_dir: Some(dir.into()),
            ..target
        },
        None => target,
    }
}

pub fn eval<T: ovl::Scalar>(y: &Lazy<T>, o: &Options) -> ArrayD<T> {
    ovl::evaluate_with(y, &options(o.clone())).unwrap_or_else(|e| panic!("{e}"))
}

/// Deterministic values in [-2, 2) with some exact zeros.
pub fn values(shape: &[usize], seed: u64) -> ArrayD<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    ArrayD::from_shape_simple_fn(IxDyn(shape), || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let v = (s >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0;
        if v.abs() < 0.1 {
            0.0
        } else {
            v
        }
    })
}

/// The operand shapes of `op(a) · op(b)` for `[batch.., m, k] x [batch.., k, n]`.
pub fn shapes(
    batch: &[usize],
    (m, k, n): (usize, usize, usize),
    ta: bool,
    tb: bool,
) -> [Vec<usize>; 2] {
    let a = if ta { [k, m] } else { [m, k] };
    let b = if tb { [n, k] } else { [k, n] };
    [
        batch.iter().copied().chain(a).collect(),
        batch.iter().copied().chain(b).collect(),
    ]
}

/// The product by a plain loop in f64, with `|products|` summed too (the size of rounding).
pub fn reference(
    a: &ArrayD<f64>,
    b: &ArrayD<f64>,
    ta: bool,
    tb: bool,
) -> (ArrayD<f64>, ArrayD<f64>) {
    let r = a.ndim();
    let (m, k) = if ta {
        (a.shape()[r - 1], a.shape()[r - 2])
    } else {
        (a.shape()[r - 2], a.shape()[r - 1])
    };
    let n = if tb {
        b.shape()[r - 2]
    } else {
        b.shape()[r - 1]
    };
    let batch: Vec<usize> = a.shape()[..r - 2].to_vec();
    let out_shape: Vec<usize> = batch.iter().copied().chain([m, n]).collect();
    let mut c = ArrayD::<f64>::zeros(IxDyn(&out_shape));
    let mut mag = ArrayD::<f64>::zeros(IxDyn(&out_shape));
    let batches: usize = batch.iter().product();
    let (a, b) = (
        a.as_standard_layout()
            .into_owned()
            .into_raw_vec_and_offset()
            .0,
        b.as_standard_layout()
            .into_owned()
            .into_raw_vec_and_offset()
            .0,
    );
    let (cs, ms) = (c.as_slice_mut().unwrap(), mag.as_slice_mut().unwrap());
    for p in 0..batches {
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut t) = (0.0, 0.0);
                for q in 0..k {
                    let x = if ta {
                        a[p * m * k + q * m + i]
                    } else {
                        a[p * m * k + i * k + q]
                    };
                    let y = if tb {
                        b[p * k * n + j * k + q]
                    } else {
                        b[p * k * n + q * n + j]
                    };
                    s += x * y;
                    t += (x * y).abs();
                }
                cs[p * m * n + i * n + j] = s;
                ms[p * m * n + i * n + j] = t;
            }
        }
    }
    (c, mag)
}

/// `got` within rounding of `want`: `|got - want| <= eps * (|products| summed + 1)`.
pub fn close<T: Into<f64> + Copy>(
    got: &ArrayD<T>,
    want: &ArrayD<f64>,
    mag: &ArrayD<f64>,
    eps: f64,
    what: &str,
) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    for ((g, w), s) in got.iter().zip(want).zip(mag) {
        let g: f64 = (*g).into();
        assert!(
            (g - w).abs() <= eps * (s + 1.0),
            "{what}: {g} != {w} (sum of |products| {s})"
        );
    }
}

pub const SIZES: [(usize, usize, usize); 7] = [
    (1, 1, 1),
    (3, 5, 7),
    (17, 1, 33),
    (4, 0, 3),
    (2, 9, 1),
    (1, 40, 1),
    (70, 65, 33),
];
pub const FORMS: [(bool, bool); 4] = [(false, false), (true, false), (false, true), (true, true)];
