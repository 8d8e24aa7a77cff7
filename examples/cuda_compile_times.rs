//! Measures the CUDA backend's compile path on this machine (no GPU needed): a cold NVRTC
//! compilation of an LSTM-cell-like elementwise operator (to PTX and to CUBIN), a ptxas
//! validation of the PTX, and the warm cache (in memory, and from disk in a fresh cache root that
//! holds a copy of the entry, which is what a second process sees).
//!
//! Run with `cargo run --release --example cuda_compile_times` (NVRTC and ptxas come from the
//! project's `.venv`; see README.md).

use ndarray::Array2;
use ovl::cuda::{self, CudaBinary, CudaCompileOptions};
use ovl::prelude::*;
use std::path::Path;
use std::time::{Duration, Instant};

/// The LSTM nonlinearity: gates from a [batch, 4 * hidden] pre-activation and the old cell.
#[operator]
fn lstm_cell(gates: Tensor<f32>, c: Tensor<f32>) -> (Tensor<f32>, Tensor<f32>) {
    let [batch, hidden] = c.dims::<2>();
    let p = position_in([batch, hidden]);
    let (b, j) = (p[0], p[1]);
    let h_out = output_like(&c);
    let c_out = output_like(&c);
    let i = sigmoid(gates[[b, j]]);
    let f = sigmoid(gates[[b, j + hidden]]);
    let o = sigmoid(gates[[b, j + 2 * hidden]]);
    let g = tanh(gates[[b, j + 3 * hidden]]);
    let new_c = f * c[[b, j]] + i * g;
    c_out[[b, j]] = new_c;
    h_out[[b, j]] = o * tanh(new_c);
    (h_out, c_out)
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed())
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        std::fs::copy(e.path(), to.join(e.file_name()))?;
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let (batch, hidden) = (64, 256);
    let gates = Array2::<f32>::zeros((batch, 4 * hidden));
    let c = Array2::<f32>::zeros((batch, hidden));
    let (h, _) = lstm_cell(&gates, &c);
    let graph = ovl::graph(&h)?;
    let dag = &graph.dag.operators[0];
    let nvrtc = cuda::nvrtc_status()?;
    println!(
        "NVRTC {}.{} at {}",
        nvrtc.version.0,
        nvrtc.version.1,
        nvrtc
            .path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "(found by the dynamic loader)".into())
    );
    println!("ptxas at {}", cuda::ptxas_path()?.display());

    // The first NVRTC call of a process also pays for loading libnvrtc: do one throw-away
    // compilation of a trivial operator first, and report it separately.
    let warmup_dir = tempfile::tempdir()?;
    let small = Array2::<f32>::zeros((1, 1));
    let (sh, _) = lstm_cell(Array2::<f32>::zeros((1, 4)), &small);
    let small_graph = ovl::graph(&sh)?;
    let (_, first) = timed(|| {
        cuda::compile(
            &small_graph.dag.operators[0],
            &CudaCompileOptions::default().with_cache_dir(warmup_dir.path()),
        )
    });
    println!("first NVRTC compilation in this process (tiny operator): {first:.1?}");

    let cache = tempfile::tempdir()?;
    let base = CudaCompileOptions::default().with_cache_dir(cache.path());
    let ptx_opts = base.clone().with_target(90, CudaBinary::Ptx);
    let (ptx, cold_ptx) = timed(|| cuda::compile(dag, &ptx_opts));
    let ptx = ptx?;
    let (cubin, cold_cubin) =
        timed(|| cuda::compile(dag, &base.clone().with_target(90, CudaBinary::Cubin)));
    cubin?;
    let (cubin80, cold_cubin80) =
        timed(|| cuda::compile(dag, &base.clone().with_target(80, CudaBinary::Cubin)));
    cubin80?;
    let (v, validate) = timed(|| cuda::validate(dag, 90, &base));
    v?;
    let (w, warm_memory) = timed(|| cuda::compile_with_outcome(dag, &ptx_opts));
    let (_, outcome_memory) = w?;

    // A second process finds the entry on disk: copy it into a fresh root (nothing in memory).
    let other = tempfile::tempdir()?;
    let entry = ptx.binary_path().parent().expect("entry directory");
    let key = entry.file_name().expect("key");
    copy_dir(entry, &other.path().join("v1/cuda").join(key))?;
    let (w, warm_disk) =
        timed(|| cuda::compile_with_outcome(dag, &ptx_opts.clone().with_cache_dir(other.path())));
    let (_, outcome_disk) = w?;

    println!(
        "operator `{}`: workgroup {:?}, {} expressions, {} lines of CUDA",
        dag.name,
        dag.workgroup_shape,
        dag.expressions.len(),
        std::fs::read_to_string(ptx.source_path())?.lines().count()
    );
    println!("cold NVRTC compile to PTX (sm_90):    {cold_ptx:>10.1?}");
    println!("cold NVRTC compile to CUBIN (sm_90):  {cold_cubin:>10.1?}");
    println!("cold NVRTC compile to CUBIN (sm_80):  {cold_cubin80:>10.1?}  (after the sm_90 one)");
    println!("ptxas validation of the PTX (sm_90):  {validate:>10.1?}  (PTX from the cache)");
    println!("warm cache, in memory ({outcome_memory:?}):    {warm_memory:>10.1?}");
    println!("warm cache, from disk ({outcome_disk:?}): {warm_disk:>10.1?}");
    Ok(())
}
