//! Every math function on every dtype it supports, against Rust's std (and libm for erf),
//! on edge values and a sweep of ordinary values.

use super::support::{close_f32, close_f64};
use ndarray::Array1;
use ovl::prelude::*;

/// The unary float functions, in a fixed order.
pub const UNARY: [&str; 23] = [
    "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan",
    "asin", "acos", "atan", "sinh", "cosh", "tanh", "sigmoid", "erf", "ceil", "floor", "round",
];

/// Applies unary function number `f` of [`UNARY`] (a plain helper: trace-time `match`).
fn apply<T: Float>(f: usize, x: Expr<T>) -> Expr<T> {
    match f {
        0 => sqrt(x),
        1 => rsqrt(x),
        2 => exp(x),
        3 => exp2(x),
        4 => expm1(x),
        5 => log(x),
        6 => log2(x),
        7 => log10(x),
        8 => log1p(x),
        9 => sin(x),
        10 => cos(x),
        11 => tan(x),
        12 => asin(x),
        13 => acos(x),
        14 => atan(x),
        15 => sinh(x),
        16 => cosh(x),
        17 => tanh(x),
        18 => sigmoid(x),
        19 => erf(x),
        20 => x.ceil(),
        21 => x.floor(),
        _ => x.round(),
    }
}

/// All unary functions at once, as a `Vec` of outputs (an unrolled trace-time loop).
#[operator]
pub fn unary_all<T: Float>(x: Tensor<T>) -> Vec<Tensor<T>> {
    let i = position_in(x.shape())[0];
    let mut outs: Vec<Tensor<T>> = Vec::new();
    for _name in UNARY.iter() {
        // A loop over anything but a range runs at trace time.
        outs.push(output_like(&x));
    }
    let v = x[[i]];
    for (f, out) in outs.iter().enumerate() {
        out[[i]] = apply(f, v);
    }
    outs
}

#[operator]
#[allow(clippy::type_complexity)]
pub fn binary_all<T: Float>(
    a: Tensor<T>,
    b: Tensor<T>,
) -> (
    Tensor<T>,
    Tensor<T>,
    Tensor<T>,
    Tensor<bool>,
    Tensor<bool>,
    Tensor<bool>,
) {
    let i = position_in(a.shape())[0];
    let p = output_like(&a);
    let t = output_like(&a);
    let f = output_like(&a);
    let inf = output(a.shape());
    let fin = output(a.shape());
    let nan = output(a.shape());
    let (x, y) = (a[[i]], b[[i]]);
    p[[i]] = pow(x, y);
    t[[i]] = atan2(x, y);
    f[[i]] = fma(x, y, constant(0.5f32).cast::<T>());
    inf[[i]] = isinf(x);
    fin[[i]] = isfinite(x);
    nan[[i]] = isnan(x);
    (p, t, f, inf, fin, nan)
}

fn inputs_f64() -> Vec<f64> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        2.5,
        -2.5,
        3.5,
        1e-8,
        -1e-8,
        0.999,
        1.001,
        10.0,
        -10.0,
        88.0,
        -88.0,
        700.0,
        1e-300,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        f64::MAX,
    ];
    v.extend((0..64).map(|k| -6.0 + k as f64 * 0.19));
    v
}

/// The unary and binary math checks of one float type against Rust's own functions (and libm's
/// `erf`): the f32 and f64 versions differ only in their types.
macro_rules! float_math_checks {
    ($t:ident, $close:ident, $erf:path, $unary:ident, $binary:ident) => {
        pub fn $unary(options: &Options) {
            let xs: Vec<$t> = inputs_f64().into_iter().map(|x| x as $t).collect();
            let outs = unary_all(Array1::from(xs.clone()));
            let got = ovl::evaluate_with(&outs[..], options).unwrap_or_else(|e| panic!("{e}"));
            let reference: [fn($t) -> $t; 23] = [
                $t::sqrt,
                |x| 1.0 / x.sqrt(),
                $t::exp,
                $t::exp2,
                $t::exp_m1,
                $t::ln,
                $t::log2,
                $t::log10,
                $t::ln_1p,
                $t::sin,
                $t::cos,
                $t::tan,
                $t::asin,
                $t::acos,
                $t::atan,
                $t::sinh,
                $t::cosh,
                $t::tanh,
                |x| 1.0 / (1.0 + (-x).exp()),
                $erf,
                $t::ceil,
                $t::floor,
                $t::round,
            ];
            for (f, name) in UNARY.iter().enumerate() {
                for (i, &x) in xs.iter().enumerate() {
                    let (g, e) = (got[f][[i]], reference[f](x));
                    assert!(
                        $close(g, e, 4),
                        "{name}({x:e}) as {}: got {g:e}, expected {e:e}",
                        stringify!($t)
                    );
                }
            }
        }

        pub fn $binary(options: &Options) {
            let base = [
                0.0 as $t,
                -0.0,
                0.5,
                -2.0,
                3.0,
                1e10,
                $t::INFINITY,
                $t::NEG_INFINITY,
                $t::NAN,
                7.25,
            ];
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for &x in &base {
                for &y in &base {
                    a.push(x);
                    b.push(y);
                }
            }
            let o = binary_all(Array1::from(a.clone()), Array1::from(b.clone()));
            let r = ovl::evaluate_with((&o.0, &o.1, &o.2, &o.3, &o.4, &o.5), options).unwrap();
            for i in 0..a.len() {
                let (x, y) = (a[i], b[i]);
                assert!(
                    $close(r.0[[i]], x.powf(y), 2),
                    "pow({x}, {y}) = {}",
                    r.0[[i]]
                );
                assert!(
                    $close(r.1[[i]], x.atan2(y), 2),
                    "atan2({x}, {y}) = {}",
                    r.1[[i]]
                );
                assert!(
                    $close(r.2[[i]], x.mul_add(y, 0.5), 0),
                    "fma({x}, {y}, 0.5) = {}",
                    r.2[[i]]
                );
                assert_eq!(r.3[[i]], x.is_infinite(), "isinf({x})");
                assert_eq!(r.4[[i]], x.is_finite(), "isfinite({x})");
                assert_eq!(r.5[[i]], x.is_nan(), "isnan({x})");
            }
        }
    };
}

float_math_checks!(f64, close_f64, libm::erf, unary_f64, binary_f64);
float_math_checks!(f32, close_f32, libm::erff, unary_f32, binary_f32);

/// `min_value`, `max_value` and `epsilon` are trace-time constants of each dtype.
#[operator]
pub fn limits(x: Tensor<i32>) -> (Tensor<f32>, Tensor<i16>, Tensor<u64>) {
    let i = position_in(x.shape())[0];
    let f = output(x.shape());
    let s = output(x.shape());
    let u = output(x.shape());
    f[[i]] = select(
        x[[i]] == 0,
        min_value::<f32>(),
        select(x[[i]] == 1, max_value::<f32>(), epsilon::<f32>()),
    );
    s[[i]] = select(x[[i]] == 0, min_value::<i16>(), max_value::<i16>());
    u[[i]] = select(x[[i]] == 0, min_value::<u64>(), max_value::<u64>());
    (f, s, u)
}

pub fn limit_constants(options: &Options) {
    let o = limits(Array1::from(vec![0, 1, 2]));
    let (f, s, u) = ovl::evaluate_with((&o.0, &o.1, &o.2), options).unwrap();
    assert_eq!(
        f.iter().copied().collect::<Vec<_>>(),
        vec![f32::MIN, f32::MAX, f32::EPSILON]
    );
    assert_eq!(
        s.iter().copied().collect::<Vec<_>>(),
        vec![i16::MIN, i16::MAX, i16::MAX]
    );
    assert_eq!(
        u.iter().copied().collect::<Vec<_>>(),
        vec![0, u64::MAX, u64::MAX]
    );
}
