//! Float MIN/MAX reduction lanes (`ovl::lane_min`/`lane_max`, a plain conditional that compiles
//! to the CPU's min/max instruction): bit for bit the interpreter's NaN-ignoring min/max, with
//! ties of +0 and -0 (the first one wins), NaN values, infinities, an accumulator that starts
//! at NaN or at -0, along rows and down columns, f32 and f64, on one thread and on several.

use crate::common::same_as_interpreter;
use ovl_ir::builder::{Builder, IN, OUT};
use ovl_ir::ir::ExpressionDag;
use ovl_ir::ops::Combiner;
use ovl_ir::{DType, HostTensor};

/// Per row (`down == false`) or per column of `x: d[rows, cols]`: a max and a min from `init`,
/// and a max and a min from the identity, four outputs.
fn min_max(d: DType, rows: u64, cols: u64, down: bool, init: f64) -> ExpressionDag {
    let (workers, len) = if down { (cols, rows) } else { (rows, cols) };
    let mut b = Builder::new("lanes_min_max", &[workers]);
    b.input(d, &[rows, cols]);
    for _ in 0..4 {
        b.output(d, &[workers]);
    }
    let w = b.position(0);
    let lit = |b: &mut Builder, v: f64| {
        if d == DType::F32 {
            b.f32(v as f32)
        } else {
            b.f64(v)
        }
    };
    let (i0, i1) = (lit(&mut b, init), lit(&mut b, init));
    let (lo, hi) = (lit(&mut b, f64::INFINITY), lit(&mut b, f64::NEG_INFINITY));
    let accs = [
        b.accumulator(Combiner::Max, i0),
        b.accumulator(Combiner::Min, i1),
        b.accumulator(Combiner::Max, hi),
        b.accumulator(Combiner::Min, lo),
    ];
    let (start, end, one) = (b.i64(0), b.i64(len as i64), b.i64(1));
    let k = b.range(start, end, one);
    let x = if down {
        b.read(IN, 0, &[k, w])
    } else {
        b.read(IN, 0, &[w, k])
    };
    for &a in &accs {
        b.accumulate(a, x);
    }
    b.end_range();
    for (o, &a) in accs.iter().enumerate() {
        b.write(OUT, o as u32, &[w], a);
    }
    b.build()
}

/// Rows of edge values: signed zeros in both orders (alone and with negatives), NaN first,
/// last and everywhere, infinities, and mixed values; each row `cols` long.
fn values(rows: usize, cols: usize) -> Vec<f64> {
    let nan = f64::NAN;
    let mut v = Vec::with_capacity(rows * cols);
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for r in 0..rows {
        for c in 0..cols {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let pick = |opts: &[f64]| opts[(state % opts.len() as u64) as usize];
            v.push(match r % 8 {
                0 => pick(&[0.0, -0.0]),
                1 => pick(&[0.0, -0.0, -1.0, -2.5]),
                2 => pick(&[0.0, -0.0, 1.0, 2.5]),
                3 => nan,
                4 => pick(&[nan, 0.0, -0.0]),
                5 if c == 0 => nan,
                6 => pick(&[f64::INFINITY, f64::NEG_INFINITY, nan, 3.0]),
                _ => (state as i64 as f64) / 9e18,
            });
        }
    }
    v
}

#[test]
fn float_min_max_lanes_match_the_interpreter_bit_for_bit() {
    for d in [DType::F32, DType::F64] {
        for (rows, cols) in [
            (16usize, 3usize),
            (24, 37),
            (40, 200),
            (130, 64),
            (600, 300),
        ] {
            let v = values(rows, cols);
            let x = if d == DType::F32 {
                HostTensor::from_vec(&[rows, cols], v.iter().map(|&x| x as f32).collect())
            } else {
                HostTensor::from_vec(&[rows, cols], v.clone())
            }
            .expect("shape");
            for down in [false, true] {
                for init in [f64::NAN, -0.0, 0.0, f64::NEG_INFINITY] {
                    let dag = min_max(d, rows as u64, cols as u64, down, init);
                    for threads in [1, 2] {
                        same_as_interpreter(&dag, &[&x], threads);
                    }
                }
            }
        }
    }
}
