//! A whole LSTM layer on the GPU, ovl side (issue 32): the layer of `benches/lstm_layer.rs`
//! (`common/lstm_layer_model.rs`: T steps unrolled in one lazy graph, the products as library
//! calls, which run through cuBLAS) compiled once for `Target::Cuda` and called on device
//! tensors (`Compiled::run_device_into`, inputs uploaded once), forward and forward + backward,
//! at the three sizes. Times: the GPU's time of a call between CUDA events (best and median of
//! the repetitions) and the host's wall time of a call with its synchronization.
//!
//! Calls from the second on replay a CUDA graph of the whole call (`Compiled::runs_as_cuda_graph`;
//! `OVL_CUDA_GRAPHS=0` measures kernels launched one by one). Fusion runs at the library's
//! default level (3) unless `--opt N` says otherwise.
//!
//! `cargo bench --bench lstm_layer_gpu -- [--quick] [--opt N] [--tf32] [--out DIR]` writes
//! `DIR/ovl_gpu.json` (with `--tf32`, products on TF32 tensor cores: `DIR/ovl_gpu_tf32.json`) and
//! the outputs of one call (`DIR/ovl_gpu[_tf32]_TxBxH_{h,dx,dw,du,db}.f32`) that
//! `benches/lstm_layer_gpu_peers.py` checks against its NumPy reference before timing PyTorch
//! and JAX on the same GPU. Without a GPU it says that it did not run.

mod common;
#[path = "common/lstm_layer_model.rs"]
mod model;

use common::{device_calls, Args};
use model::{graph, inputs, write_f32, SIZES};
use ovl::Options;
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse("target/lstm-layer-bench");
    std::fs::create_dir_all(&args.out_dir)?;
    let info = match ovl::cuda::gpu_status() {
        Ok(info) => info,
        Err(e) => {
            println!("LSTM layer on the GPU: DID NOT RUN: {e}");
            return Ok(());
        }
    };
    let cublas = match ovl::cuda::cublas_status() {
        Ok(c) => format!("cuBLAS {} ({})", c.version, c.path.display()),
        Err(e) => format!("no cuBLAS, products as generated kernels: {e}"),
    };
    println!(
        "LSTM layer, ovl on {} (sm_{}), {cublas}",
        info.name, info.arch
    );
    let reps = if args.quick { 10 } else { 30 };
    let sizes = if args.quick { &SIZES[..1] } else { &SIZES[..] };
    let all: Vec<String> = std::env::args().collect();
    let opt = all
        .iter()
        .position(|a| a == "--opt")
        .and_then(|i| all.get(i + 1))
        .map_or(3, |s| s.parse().expect("--opt N"));
    let tf32 = args.flag("--tf32");
    let options = Options {
        cache_dir: Some(args.out_dir.join("operator-cache-gpu")),
        ..Options::cuda().with_opt_level(opt).with_cuda_tf32(tf32)
    };
    let tag = if tf32 { "ovl_gpu_tf32" } else { "ovl_gpu" };
    let mut rows = Vec::new();
    for &(t, b, h) in sizes {
        let data = inputs(t, b, h);
        let mut row = json!({ "t": t, "b": b, "h": h });
        for backward in [false, true] {
            let start = std::time::Instant::now();
            let (ins, outs) = graph(t, b, h, backward);
            let compiled = ovl::compile(&ins[..], &outs[..], &options)?;
            let compile_s = start.elapsed().as_secs_f64();
            let feeds: Vec<&ndarray::ArrayD<f32>> = data[..ins.len()].iter().collect();
            let call = device_calls(&compiled, &feeds, 3, reps)?;
            let name = format!("{tag}_{t}x{b}x{h}");
            if backward {
                for (k, which) in ["dx", "dw", "du", "db"].iter().enumerate() {
                    write_f32(
                        &args.out_dir.join(format!("{name}_{which}.f32")),
                        [&call.outputs[k]],
                    );
                }
            } else {
                write_f32(&args.out_dir.join(format!("{name}_h.f32")), &call.outputs);
            }
            let pass = if backward { "backward" } else { "forward" };
            println!(
                "T={t} B={b} H=I={h} {pass}: GPU {:.0} us (median {:.0}), wall {:.0} us, \
                 {} kernels{}, compile {compile_s:.2} s",
                call.gpu.best.as_secs_f64() * 1e6,
                call.gpu.median.as_secs_f64() * 1e6,
                call.wall.best.as_secs_f64() * 1e6,
                compiled.kernel_count(),
                if compiled.runs_as_cuda_graph() {
                    " replayed as a CUDA graph"
                } else {
                    " launched one by one"
                },
            );
            row[format!("{pass}_us")] = json!(call.gpu.best.as_secs_f64() * 1e6);
            row[format!("{pass}_median_us")] = json!(call.gpu.median.as_secs_f64() * 1e6);
            row[format!("{pass}_wall_us")] = json!(call.wall.best.as_secs_f64() * 1e6);
            row[format!("{pass}_kernels")] = json!(compiled.kernel_count());
            row[format!("{pass}_compile_s")] = json!(compile_s);
            row[format!("{pass}_cuda_graph")] = json!(compiled.runs_as_cuda_graph());
        }
        rows.push(row);
    }
    let report = json!({
        "gpu": info.name,
        "arch": info.arch,
        "cublas": cublas,
        "reps": reps,
        "opt_level": opt,
        "tf32": tf32,
        "sizes": rows,
    });
    let path = args.out_dir.join(format!("{tag}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    println!("wrote {}", path.display());
    Ok(())
}
