//! Derived gradients (`ovl_ir::grad::derive`) through the CUDA backend's host emulation: the
//! gradient operators of every fixture with float inputs and outputs (a gather's scatter-add
//! included) and of the row kernels run as generated CUDA and match the reference interpreter:
//! within the math contract's bounds (`ovl_ir::accuracy`) on several grids for one thread per
//! worker, bit for bit in the CUDA order for the gradients a GPU runs with a group of threads
//! per row. (Their values against central differences: `tests/core/autodiff/`.)

use crate::cooperative::emulated_as_interpreted;
use crate::cuda_emulated::{build, emulate_launch};
use crate::fixtures::{assert_same, interpreted_in};
use ovl_ir::accuracy::MathBackend;
use ovl_ir::cooperative::{self, ReductionOrder};
use ovl_ir::fixtures::{all, row_programs, Fixture};
use ovl_ir::grad::{derive, GradInput};
use ovl_ir::ir::ExpressionDag;
use ovl_ir::{DType, HostTensor};

/// Deterministic finite values of `shape` (f32 or f64).
fn values(dtype: DType, shape: &[u64], seed: usize) -> HostTensor {
    let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
    let n: usize = shape.iter().product();
    let v = |i: usize| ((i * 7919 + seed * 104_729) % 1013) as f64 * 0.0021 - 1.05;
    match dtype {
        DType::F64 => HostTensor::from_vec(&shape, (0..n).map(v).collect::<Vec<f64>>()),
        _ => HostTensor::from_vec(&shape, (0..n).map(|i| v(i) as f32).collect::<Vec<f32>>()),
    }
    .expect("shape matches")
}

/// The gradient operators of `dag` for every float input from every float output's adjoint,
/// with inputs: the forward's, then adjoints.
fn gradients(
    dag: &ExpressionDag,
    forward_inputs: &[HostTensor],
) -> Result<Vec<(ExpressionDag, Vec<HostTensor>)>, String> {
    let float = |t: &ovl_ir::ir::TensorType| DType::from_ir(t.dtype).is_some_and(|d| d.is_float());
    let wanted: Vec<bool> = dag.inputs.iter().map(float).collect();
    let seeded: Vec<bool> = dag.outputs.iter().map(float).collect();
    let ops = derive(dag, &wanted, &seeded).map_err(|e| e.to_string())?;
    Ok(ops
        .into_iter()
        .map(|g| {
            let inputs = g
                .inputs
                .iter()
                .enumerate()
                .map(|(k, source)| match source {
                    GradInput::Forward(i) => forward_inputs[*i as usize].clone(),
                    GradInput::Adjoint(_) => {
                        let t = &g.dag.inputs[k];
                        values(DType::from_ir(t.dtype).expect("dtype"), &t.shape, 3 + k)
                    }
                })
                .collect();
            (g.dag, inputs)
        })
        .collect())
}

/// Checks every gradient operator of `dag`; returns how many run with cooperating threads.
fn check(name: &str, dag: &ExpressionDag, inputs: &[HostTensor]) -> Result<usize, String> {
    let mut cooperating = 0;
    for (g, ins) in gradients(dag, inputs)? {
        let refs: Vec<&HostTensor> = ins.iter().collect();
        if cooperative::plan(&g).is_some() {
            emulated_as_interpreted(&g, &refs);
            cooperating += 1;
            continue;
        }
        let f = Fixture {
            name: Box::leak(format!("{name} -> {}", g.name).into_boxed_str()),
            covers: "a derived gradient",
            dag: g,
            inputs: ins,
            f32_ulps: 0,
        };
        let expected = interpreted_in(&f, ReductionOrder::Cuda);
        let emulated = build(&f.dag);
        let refs: Vec<&HostTensor> = f.inputs.iter().collect();
        for (grid, block) in [(1, 1), (3, 4), (2, 32)] {
            let (got, st) = emulate_launch(&emulated, &f.dag, &refs, &[], grid, block, false);
            assert_eq!(st.code, 0, "{}: a fault {st:?}", f.name);
            let what = format!("emulated CUDA, grid {grid} x block {block}");
            assert_same(&f, &what, MathBackend::Cuda, &got, &expected);
        }
    }
    Ok(cooperating)
}

#[test]
fn derived_gradients_run_as_emulated_cuda() {
    let mut derived = Vec::new();
    let mut refused = Vec::new();
    for f in all() {
        let float_in = f
            .dag
            .inputs
            .iter()
            .any(|t| DType::from_ir(t.dtype).is_some_and(|d| d.is_float()));
        if !float_in {
            continue;
        }
        match check(f.name, &f.dag, &f.inputs) {
            Ok(_) => derived.push(f.name),
            Err(e) => refused.push((f.name, e)),
        }
    }
    for (name, e) in &refused {
        println!("not derived (a refused construct): {name}: {e}");
    }
    // What is derivable among the fixtures is pinned: a fixture that stops deriving (or starts)
    // shows here.
    assert_eq!(derived, DERIVED, "refused: {refused:?}");
    let refused: Vec<&str> = refused.iter().map(|(name, _)| *name).collect();
    assert_eq!(refused, REFUSED);

    // The row kernels: their gradients keep the row's reads in the forward's order and run
    // with a group of threads per row.
    for (name, dag) in row_programs() {
        let inputs: Vec<HostTensor> = dag
            .inputs
            .iter()
            .enumerate()
            .map(|(k, t)| values(DType::from_ir(t.dtype).expect("dtype"), &t.shape, k))
            .collect();
        // (`int_rows` has no float input: nothing to differentiate.)
        if !inputs.iter().all(|t| t.dtype().is_float()) {
            continue;
        }
        let cooperating = check(name, &dag, &inputs).unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected = if name == "norm_rows" { 1 } else { 0 };
        assert_eq!(
            cooperating, expected,
            "{name}: cooperating gradient operators"
        );
    }
}

/// The fixtures with a float input whose gradients are derived.
const DERIVED: &[&str] = &[
    "reductions",
    "column_stats",
    "add_2d",
    "casts",
    "math_f32",
    "math_f32_prelude",
    "math_f64",
    "select",
    "fma",
    "stencil",
    "cumsum",
    "matmul",
    "gate_products",
    "reverse_rows",
    "gather",
];

/// The others: none since loops carrying values are derived (`column_stats`'s fold into a
/// variable included).
const REFUSED: &[&str] = &[];
