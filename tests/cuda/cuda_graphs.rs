//! Device runs replayed as CUDA graphs (`Compiled::run_device_into` from its second call on,
//! `src/runner/device_graph.rs`): new inputs at every call give the interpreter's values, the
//! graph's own data is read in place, outputs belong to the caller (a later call does not
//! change an earlier call's outputs), a fault in a replay is reported and the next replay
//! works, and cuBLAS products are recorded with the kernels. Without a GPU each test says it
//! did not run.

use crate::gather_op;
use crate::gemm_values;
use crate::lstm_small_ops;

use gather_op::{gather, say};
use gemm_values::{options, values};
use ndarray::{ArrayD, IxDyn};
use ovl::cuda::DeviceTensor;
use ovl::prelude::*;
use ovl::HostTensor;

fn gpu(test: &str) -> bool {
    match ovl::cuda::gpu_status() {
        Ok(_) => true,
        Err(e) => {
            say(&format!("{test}: did not run: no GPU ({e})"));
            false
        }
    }
}

fn upload(a: &ArrayD<f32>) -> DeviceTensor {
    let host = HostTensor::from_vec(a.shape(), a.iter().copied().collect()).expect("host");
    DeviceTensor::upload(&host).expect("upload")
}

fn download(t: &DeviceTensor) -> Vec<f32> {
    t.to_host()
        .expect("download")
        .as_slice::<f32>()
        .expect("f32")
        .to_vec()
}

fn graphs_enabled() -> bool {
    std::env::var("OVL_CUDA_GRAPHS").map_or(true, |v| v.trim() != "0")
}

/// The LSTM step (two products through cuBLAS, a bias the graph holds, the fused cell) called
/// six times with new inputs: every call equals the interpreter's values; from the second call
/// on it replays a graph; each call's outputs stay as they were after later calls.
#[test]
fn replays_give_the_interpreters_values_for_new_inputs_at_every_call() {
    if !gpu("replays_give_the_interpreters_values") {
        return;
    }
    let (batch, input, hidden) = (5, 24, 40);
    let x = ovl::placeholder::<f32>("x", &[batch, input]);
    let h = ovl::placeholder::<f32>("h", &[batch, hidden]);
    let c = ovl::placeholder::<f32>("c", &[batch, hidden]);
    let w = Lazy::from(values(&[input, 4 * hidden], 4).mapv(|v| v as f32 * 0.3));
    let u = Lazy::from(values(&[hidden, 4 * hidden], 5).mapv(|v| v as f32 * 0.3));
    let b = Lazy::from(values(&[4 * hidden], 6).mapv(|v| v as f32));
    let z = ovl_stdlib::add(
        ovl_stdlib::add(ovl_stdlib::matmul(&x, &w), ovl_stdlib::matmul(&h, &u)),
        &b,
    );
    let (new_c, new_h) = lstm_small_ops::lstm_cell(&z, &c, 1.0);
    let interp = ovl::compile(
        (&x, &h, &c),
        (&new_c, &new_h),
        &options(Options::interpreter()),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let compiled = ovl::compile((&x, &h, &c), (&new_c, &new_h), &options(Options::cuda()))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut kept: Vec<(Vec<DeviceTensor>, Vec<ArrayD<f32>>)> = Vec::new();
    for call in 0..6u64 {
        let feeds: Vec<ArrayD<f32>> = [
            (vec![batch, input], 10 + call),
            (vec![batch, hidden], 20 + call),
            (vec![batch, hidden], 30 + call),
        ]
        .iter()
        .map(|(s, seed)| values(s, *seed).mapv(|v| v as f32))
        .collect();
        let mut want = vec![ArrayD::zeros(IxDyn(&[batch, hidden])); 2];
        let lazies: Vec<Lazy<f32>> = feeds.iter().map(|f| Lazy::from(f.clone())).collect();
        interp
            .run_into((&lazies[0], &lazies[1], &lazies[2]), &mut want)
            .unwrap_or_else(|e| panic!("{e}"));
        let uploads: Vec<DeviceTensor> = feeds.iter().map(upload).collect();
        let refs: Vec<&DeviceTensor> = uploads.iter().collect();
        let outs = compiled
            .run_device(&refs)
            .unwrap_or_else(|e| panic!("call {call}: {e}"));
        assert_eq!(
            compiled.runs_as_cuda_graph(),
            graphs_enabled() && call >= 1,
            "call {call}"
        );
        kept.push((outs, want));
        for (k, (outs, want)) in kept.iter().enumerate() {
            for (out, want) in outs.iter().zip(want) {
                for (p, q) in download(out).iter().zip(want) {
                    assert!(
                        (p - q).abs() <= 1e-5,
                        "call {k}'s output after call {call}: {p} vs {q}"
                    );
                }
            }
        }
    }
    say("replays_give_the_interpreters_values: ran on the GPU");
}

/// A kernel that can fault, replayed: a bad index in the third call is an error naming the
/// operator and the worker; the fourth call (good indices again) gives the right values.
#[test]
fn a_fault_in_a_replay_is_reported_and_the_next_replay_works() {
    if !gpu("a_fault_in_a_replay") {
        return;
    }
    let xv = ovl::placeholder::<f32>("x", &[4]);
    let iv = ovl::placeholder::<i32>("idx", &[3]);
    let g =
        ovl::compile((&xv, &iv), gather(&xv, &iv), &options(Options::cuda())).expect("compiles");
    let x = upload(&ndarray::arr1(&[1.0f32, 2.0, 3.0, 4.0]).into_dyn());
    let indices = |v: Vec<i32>| DeviceTensor::upload(&HostTensor::from_vec(&[3], v).unwrap());
    let good = indices(vec![3, 1, 0]).unwrap();
    let bad = indices(vec![3, 7, 0]).unwrap();
    let mut out = g.run_device(&[&x, &good]).expect("eager");
    g.run_device_into(&[&x, &good], &mut out)
        .expect("recorded and replayed");
    assert_eq!(g.runs_as_cuda_graph(), graphs_enabled());
    assert_eq!(download(&out[0]), [4.0, 2.0, 1.0]);
    let err = g
        .run_device_into(&[&x, &bad], &mut out)
        .expect_err("index 7 of 4");
    let msg = err.to_string();
    assert!(
        msg.contains("gather") && msg.contains("index 7") && msg.contains("[1]"),
        "{msg}"
    );
    let other = indices(vec![2, 2, 1]).unwrap();
    g.run_device_into(&[&x, &other], &mut out)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(download(&out[0]), [3.0, 3.0, 2.0]);
    say("a_fault_in_a_replay: ran on the GPU");
}
