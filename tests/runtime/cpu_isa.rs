//! `OVL_CPU_ISA=avx2` end to end: this test binary runs itself again with the switch set (a
//! child process: the setting is read once per process) and compares what the two computed.
//! Held to AVX2, the generated kernels (reductions along rows and down columns, the LSTM cell's
//! elementwise math) give the same bits as with AVX-512, Fortran-order inputs go through the
//! AVX2 transposing copy, and matrix products through the `gemm` crate instead of ovl's AVX-512
//! kernels, each within rounding of an f64 reference.

use crate::gemm_values::{close, reference, shapes, values, FORMS};
use crate::lstm_small_ops::{lstm_cell, pseudo_random};
use ndarray::{Array2, ShapeBuilder};
use ovl::{Lazy, Options};

/// Where a child writes its results (set by the parent); without it the test is the parent.
const CHILD_OUT: &str = "OVL_CPU_ISA_TEST_OUT";

/// A result: its name, its values, and whether the two settings must agree bit for bit
/// (generated code) or within rounding (matrix products, by other kernels).
type Results = Vec<(String, Vec<f32>, bool)>;

fn compute() -> Results {
    let o = crate::gemm_values::options(Options::cpu().with_threads(2));
    let run = |y: &Lazy<f32>| -> Vec<f32> {
        let out = ovl::evaluate_with(y, &o).unwrap_or_else(|e| panic!("{e}"));
        out.iter().copied().collect()
    };
    let mut results = Results::new();
    // A Fortran-order input (copied to row-major by the transposing copy), partial tiles at
    // its edges.
    let x = Array2::from_shape_fn((300, 530).f(), |(i, j)| {
        ((i * 7 + j * 13) % 101) as f32 * 0.03 - 1.5
    });
    let xc = x.as_standard_layout().to_owned();
    let cases: Vec<(&str, Lazy<f32>)> = vec![
        ("softmax of a Fortran-order input", ovl_stdlib::softmax(&x)),
        ("layer norm", ovl_stdlib::layernorm(&xc, 1e-5)),
        ("sum along rows", ovl_stdlib::sum(&xc, 1)),
        ("sum down columns", ovl_stdlib::sum(&x, 0)),
    ];
    for (name, y) in cases {
        results.push((name.to_string(), run(&y), true));
    }
    let (z, c) = (pseudo_random((20, 2600), 3), pseudo_random((20, 650), 4));
    let (new_c, new_h) = lstm_cell(&Lazy::from(z), &Lazy::from(c), 1.0);
    results.push(("LSTM cell, c".into(), run(&new_c), true));
    results.push(("LSTM cell, h".into(), run(&new_h), true));
    // The LSTM layer's products (few rows: ovl's AVX-512 kernels where allowed, else the
    // `gemm` crate), one with many rows and few columns (the crate) and one with enough columns
    // for ovl's packed kernel (AVX-512; held to AVX2, the crate), in every transposed form, each
    // within rounding of the f64 product.
    for (m, k, n) in [(20, 650, 2600), (300, 310, 290), (130, 200, 600)] {
        for (ta, tb) in FORMS {
            let [sa, sb] = shapes(&[], (m, k, n), ta, tb);
            let (a, b) = (values(&sa, 5), values(&sb, 6));
            let (want, mag) = reference(&a, &b, ta, tb);
            let (a32, b32) = (a.mapv(|v| v as f32), b.mapv(|v| v as f32));
            let y = ovl::gemm(&Lazy::from(a32), &Lazy::from(b32), ta, tb);
            let got = ovl::evaluate_with(&y, &o).unwrap_or_else(|e| panic!("{e}"));
            let name = format!("product {sa:?} x {sb:?} ({ta}, {tb})");
            close(&got, &want, &mag, 1e-6, &name);
            results.push((name, got.iter().copied().collect(), false));
        }
    }
    results
}

fn write(results: &Results) -> String {
    let mut s = String::new();
    for (name, v, exact) in results {
        s.push_str(&format!("{name}\t{exact}\t"));
        let hex: Vec<String> = v.iter().map(|x| format!("{:08x}", x.to_bits())).collect();
        s.push_str(&hex.join(","));
        s.push('\n');
    }
    s
}

fn read(text: &str) -> Results {
    text.lines()
        .map(|line| {
            let mut parts = line.split('\t');
            let (name, exact, values) = (
                parts.next().expect("a name"),
                parts.next().expect("exact or not"),
                parts.next().expect("values"),
            );
            let v = values
                .split(',')
                .map(|h| f32::from_bits(u32::from_str_radix(h, 16).expect("hex bits")))
                .collect();
            (name.to_string(), v, exact == "true")
        })
        .collect()
}

#[test]
fn avx2_and_native_give_the_same_results() {
    if let Some(path) = std::env::var_os(CHILD_OUT) {
        assert_eq!(ovl_ir_isa(), "avx2", "the child runs held to AVX2");
        std::fs::write(path, write(&compute())).expect("write the child's results");
        return;
    }
    let native = compute();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("avx2.txt");
    let exe = std::env::current_exe().expect("the test executable");
    let out = std::process::Command::new(exe)
        .args(["--exact", "cpu_isa::avx2_and_native_give_the_same_results"])
        .env("OVL_CPU_ISA", "avx2")
        .env(CHILD_OUT, &path)
        .output()
        .expect("run the child");
    assert!(
        out.status.success(),
        "the child failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let avx2 = read(&std::fs::read_to_string(&path).expect("the child's results"));
    assert_eq!(avx2.len(), native.len());
    assert_eq!(native.len(), 6 + 12);
    for ((name, a, exact), (name2, b, _)) in native.iter().zip(&avx2) {
        assert_eq!(name, name2);
        assert_eq!(a.len(), b.len(), "{name}");
        if *exact {
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(bits(a) == bits(b), "{name}: AVX2 and native differ");
        } else {
            // Each within rounding of the f64 product (checked in its process): so within
            // twice that of each other, the sums' size bounded by the operands' (|v| <= 2).
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() <= 2e-6 * 4.0 * 2600.0, "{name}: {x} vs {y}");
            }
        }
    }
}

/// The setting this process runs under, as `OVL_CPU_ISA` names it.
fn ovl_ir_isa() -> &'static str {
    ovl::isa::process().name()
}
