//! The CUDA backend without a GPU: the shape of the generated source, NVRTC compilation and
//! ptxas validation of constructs the conformance suite does not reach (64-bit indexing, huge
//! workgroups, runtime range steps, every literal), the CUDA operator cache, and the errors for
//! a missing GPU and for code NVRTC rejects. With a GPU, a small operator also runs on it.

mod common;

use common::{first_negative_dag, nested_walk_dag, Builder, IN, OUT};
use ovl_codegen::{CacheOutcome, CodegenError};
use ovl_ir::fixtures::{add_2d, gather, literals_and_control};
use ovl_ir::ir::{ExpressionDag, Op};
use ovl_ir::{DType, HostTensor};
use ovl_runtime::cuda::{self, CudaBinary, CudaCompileOptions};

fn options(dir: &std::path::Path) -> CudaCompileOptions {
    CudaCompileOptions::default().with_cache_dir(dir)
}

/// Worker i sums k for k in (0 .. 10).step_by(steps[i]): a runtime step, checked.
fn runtime_step() -> ExpressionDag {
    let mut b = Builder::new("runtime_step", &[4]);
    b.input(DType::I64, &[4]);
    b.output(DType::I64, &[4]);
    let i = b.position(0);
    let zero = b.i64(0);
    let ten = b.i64(10);
    let step = b.read(IN, 0, &[i]);
    let acc = b.var(zero);
    let k = b.range(zero, ten, step);
    let s = b.op(Op::Add, &[acc, k]);
    b.assign(acc, s);
    b.end_range();
    b.write(OUT, 0, &[i], acc);
    b.build()
}

/// A tensor with more than 2^31 elements (64-bit index arithmetic), never allocated here.
fn huge_tensor() -> ExpressionDag {
    let n = (1u64 << 31) + 5;
    let mut b = Builder::new("huge_tensor", &[n]);
    b.input(DType::U8, &[n]);
    b.output(DType::U8, &[n]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    b.write(OUT, 0, &[i], x);
    b.build()
}

#[test]
fn generated_source_has_a_grid_stride_loop_and_narrow_indices() {
    let src = cuda::generate_cuda(&add_2d(3, 5), "k").expect("CUDA source");
    assert!(
        src.contains("extern \"C\" __global__ void ovl_kernel("),
        "{src}"
    );
    assert!(src.contains("ovl_w += ovl_stride"), "{src}");
    // 15 workers fit 32 bits: the position is decomposed in 32-bit arithmetic.
    assert!(src.contains("uint32_t ovl_r = (uint32_t)ovl_w;"), "{src}");
    // Small tensors are indexed in 32-bit arithmetic, and proven indices are not checked.
    assert!(src.contains("in0[(int32_t)v0 * 5 + (int32_t)v1]"), "{src}");
    assert!(!src.contains("ovl::oob(ovl_st"), "{src}");

    let src = cuda::generate_cuda(&huge_tensor(), "k").expect("CUDA source");
    assert!(
        src.contains("in0[v0]"),
        "64-bit index of a huge tensor: {src}"
    );
    let src = cuda::generate_cuda(&add_2d(1 << 17, 1 << 17), "k").expect("CUDA source");
    assert!(src.contains("uint64_t ovl_r = (uint64_t)ovl_w;"), "{src}");
    assert!(src.contains("in0[v0 * 131072LL + v1]"), "{src}");

    let src = cuda::generate_cuda(&gather(10, 4), "k").expect("CUDA source");
    assert!(src.contains("ovl::oob(ovl_st, "), "{src}");
    assert!(src.contains("ovl::report(ovl_gst, &ovl_ls)"), "{src}");
    // A fault ends the worker: out of its loops, to the end of the grid-stride loop's body.
    assert!(
        src.contains("goto ovl_stop;") && src.contains("ovl_stop:;"),
        "{src}"
    );
    let src = cuda::generate_cuda(&add_2d(3, 5), "k").expect("CUDA source");
    assert!(!src.contains("ovl_stop"), "no fault, no label: {src}");
}

#[test]
fn nvrtc_and_ptxas_accept_every_construct() {
    let cache = tempfile::tempdir().expect("a temporary directory");
    let dags = [
        add_2d(3, 5),
        add_2d(1 << 17, 1 << 17),
        gather(10, 4),
        runtime_step(),
        literals_and_control(),
        huge_tensor(),
        first_negative_dag(4, 4),
        nested_walk_dag(5, 8),
    ];
    for dag in &dags {
        for arch in [80, 90] {
            let a =
                cuda::validate(dag, arch, &options(cache.path())).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(a.arch(), arch);
            assert_eq!(a.binary(), CudaBinary::Ptx);
            let ptx = String::from_utf8_lossy(a.bytes());
            assert!(ptx.contains(".entry ovl_kernel"), "{ptx}");
            assert!(
                ptx.contains(&format!(".target sm_{arch}")),
                "PTX for sm_{arch}"
            );
        }
    }
}

#[test]
fn cache_layout_hits_and_forced_recompilation() {
    let cache = tempfile::tempdir().expect("a temporary directory");
    let dag = add_2d(4, 4);
    let opts = options(cache.path()).with_target(90, CudaBinary::Ptx);
    let (a, outcome) = cuda::compile_with_outcome(&dag, &opts).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(outcome, CacheOutcome::Compiled);
    let dir = a
        .binary_path()
        .parent()
        .expect("entry directory")
        .to_path_buf();
    assert_eq!(
        dir.parent().expect("cuda"),
        cache.path().join("v1").join("cuda")
    );
    assert_eq!(dir.file_name().unwrap().len(), 32);
    for f in ["op.cu", "op.ptx", "meta"] {
        assert!(dir.join(f).is_file(), "{f} in {}", dir.display());
    }
    let meta = std::fs::read_to_string(dir.join("meta")).expect("meta");
    assert!(
        meta.contains("arch: sm_90") && meta.contains("--fmad=false"),
        "{meta}"
    );

    // In memory, then (in another cache root holding a copy) from disk, then forced.
    let (_, outcome) = cuda::compile_with_outcome(&dag, &opts).expect("warm");
    assert_eq!(outcome, CacheOutcome::Memory);
    let copy = tempfile::tempdir().expect("a temporary directory");
    let copied = copy.path().join("v1/cuda").join(dir.file_name().unwrap());
    std::fs::create_dir_all(&copied).expect("copy");
    for f in ["op.cu", "op.ptx", "meta"] {
        std::fs::copy(dir.join(f), copied.join(f)).expect("copy");
    }
    let before = cuda::thread_stats().nvrtc_compiles;
    let (b, outcome) =
        cuda::compile_with_outcome(&dag, &opts.clone().with_cache_dir(copy.path())).expect("disk");
    assert_eq!(outcome, CacheOutcome::DiskCache);
    assert_eq!(b.bytes(), a.bytes());
    assert_eq!(cuda::thread_stats().nvrtc_compiles, before, "no NVRTC run");
    let (_, outcome) = cuda::compile_with_outcome(
        &dag,
        &opts
            .clone()
            .with_cache_dir(copy.path())
            .with_force_recompile(true),
    )
    .expect("forced");
    assert_eq!(outcome, CacheOutcome::Compiled);

    // Another architecture or output kind is another key; CUBIN is an ELF image.
    let cubin = cuda::compile(&dag, &opts.clone().with_target(80, CudaBinary::Cubin))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(cubin.cache_key(), a.cache_key());
    assert!(cubin.bytes().starts_with(b"\x7fELF"));
    assert!(cubin.binary_path().ends_with("op.cubin"));
}

#[test]
fn nvrtc_rejection_carries_the_log_and_the_source_path() {
    let cache = tempfile::tempdir().expect("a temporary directory");
    let mut opts = options(cache.path());
    opts.extra_options.push("--no-such-nvrtc-option".into());
    let err = cuda::compile(&add_2d(2, 2), &opts).expect_err("a bad option");
    let CodegenError::CudaCompileFailed(f) = &err else {
        panic!("unexpected error: {err}");
    };
    assert_eq!(f.tool, "NVRTC");
    assert!(f.source_path.ends_with("op.cu") && f.source_path.is_file());
    let msg = err.to_string();
    assert!(
        msg.contains("add_2d") && msg.contains("--no-such-nvrtc-option"),
        "{msg}"
    );
}

#[test]
fn without_a_gpu_loading_says_what_is_missing() {
    let cache = tempfile::tempdir().expect("a temporary directory");
    match cuda::gpu_status() {
        Err(e) => {
            let msg = e.to_string();
            assert!(matches!(e, CodegenError::NoGpu { .. }), "{msg}");
            assert!(msg.contains("driver") && msg.contains("libcuda"), "{msg}");
            let err = cuda::load(&add_2d(2, 2), &options(cache.path())).expect_err("no GPU");
            assert!(matches!(err, CodegenError::NoGpu { .. }), "{err}");
            let mut out = std::io::stderr();
            let _ = std::io::Write::write_all(
                &mut out,
                format!("cuda.rs: no GPU here, GPU execution did not run: {msg}\n").as_bytes(),
            );
        }
        Ok(gpu) => {
            // A GPU: run gather with a faulting index, as the C++ backend would report it.
            let op =
                cuda::load(&gather(4, 3), &options(cache.path())).unwrap_or_else(|e| panic!("{e}"));
            let x = HostTensor::from_vec(&[4], vec![1.0f32, 2.0, 3.0, 4.0]).unwrap();
            let idx = HostTensor::from_vec(&[3], vec![3i32, 7, 0]).unwrap();
            let mut out = vec![HostTensor::zeros(DType::F32, &[3])];
            let err = op
                .run(&[&x, &idx], &mut out, &[])
                .expect_err("index 7 of 4");
            let msg = err.to_string();
            assert!(msg.contains("index 7") && msg.contains("[1]"), "{msg}");
            assert_eq!(out[0].as_slice::<f32>().unwrap(), &[4.0, 0.0, 1.0]);
            let mut out = std::io::stderr();
            let _ = std::io::Write::write_all(
                &mut out,
                format!("cuda.rs: ran on {} (sm_{})\n", gpu.name, gpu.arch).as_bytes(),
            );
        }
    }
}

/// Copies the files of a cache entry directory into the same entry of another cache root.
fn copy_entry(dir: &std::path::Path, root: &std::path::Path) -> std::path::PathBuf {
    let to = root.join("v1/cuda").join(dir.file_name().expect("key"));
    std::fs::create_dir_all(&to).expect("copy");
    for f in std::fs::read_dir(dir).expect("entry") {
        let f = f.expect("entry");
        std::fs::copy(f.path(), to.join(f.file_name())).expect("copy");
    }
    to
}

#[test]
fn damaged_ptx_and_cubin_are_recompiled() {
    // The cache-module tests (ovl-codegen/src/shared/cache_entry.rs) check the same damages
    // without NVRTC; this runs them through NVRTC.
    if let Err(e) = cuda::nvrtc_status() {
        eprintln!("cuda.rs: damaged_ptx_and_cubin_are_recompiled DID NOT RUN: no NVRTC: {e}");
        return;
    }
    type Damage = (&'static str, fn(&std::path::Path));
    let damages: [Damage; 4] = [
        ("truncated", |p| {
            let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
            let len = f.metadata().unwrap().len();
            f.set_len(len / 2).unwrap();
        }),
        ("empty", |p| std::fs::write(p, b"").unwrap()),
        ("extended", |p| {
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new().append(true).open(p).unwrap();
            f.write_all(b"\n// appended\n").unwrap();
        }),
        ("bit-flipped", |p| {
            let mut bytes = std::fs::read(p).unwrap();
            let i = bytes.len() / 2;
            bytes[i] ^= 0x01;
            std::fs::write(p, bytes).unwrap();
        }),
    ];
    let dag = add_2d(4, 4);
    let cache = tempfile::tempdir().expect("a temporary directory");
    for (arch, binary) in [(90, CudaBinary::Ptx), (80, CudaBinary::Cubin)] {
        let opts = options(cache.path()).with_target(arch, binary);
        let a = cuda::compile(&dag, &opts).unwrap_or_else(|e| panic!("{e}"));
        let dir = a.binary_path().parent().expect("entry").to_path_buf();
        for (name, damage) in damages {
            let b = tempfile::tempdir().expect("a temporary directory");
            let entry = copy_entry(&dir, b.path());
            damage(&entry.join(binary.file_name()));
            let at_b = opts.clone().with_cache_dir(b.path());
            let before = cuda::thread_stats().nvrtc_compiles;
            let (rebuilt, outcome) =
                cuda::compile_with_outcome(&dag, &at_b).unwrap_or_else(|e| panic!("{e}"));
            let what = format!("{} {name}", binary.file_name());
            assert_eq!(outcome, CacheOutcome::Compiled, "{what}");
            assert_eq!(cuda::thread_stats().nvrtc_compiles, before + 1, "{what}");
            match binary {
                CudaBinary::Ptx => {
                    let ptx = String::from_utf8_lossy(rebuilt.bytes());
                    assert!(ptx.contains(".entry ovl_kernel"), "{what}: {ptx}");
                    // ptxas accepts the rebuilt file on disk (the artifact is in memory now).
                    match cuda::ptxas_path() {
                        Ok(_) => {
                            cuda::validate(&dag, arch, &at_b).unwrap_or_else(|e| panic!("{e}"));
                        }
                        Err(e) => eprintln!(
                            "cuda.rs: damaged_ptx_and_cubin_are_recompiled: no ptxas, the \
                             rebuilt PTX was not assembled: {e}"
                        ),
                    }
                }
                CudaBinary::Cubin => assert!(rebuilt.bytes().starts_with(b"\x7fELF"), "{what}"),
            }
            assert_eq!(
                std::fs::read(rebuilt.binary_path()).expect("rebuilt"),
                rebuilt.bytes(),
                "{what}"
            );
            // The rebuilt entry is whole: another process finds it on disk.
            let c = tempfile::tempdir().expect("a temporary directory");
            copy_entry(&entry, c.path());
            let (found, outcome) =
                cuda::compile_with_outcome(&dag, &opts.clone().with_cache_dir(c.path()))
                    .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(outcome, CacheOutcome::DiskCache, "{what}");
            assert_eq!(found.bytes(), rebuilt.bytes(), "{what}");
        }
    }
}

/// The ptxas that belongs with an NVRTC library (same wheel family or toolkit), if present:
/// ptxas rejects PTX of a newer ISA than its own, so each NVRTC's PTX is assembled by its own.
fn ptxas_beside(lib: &std::path::Path) -> Option<std::path::PathBuf> {
    let dir = lib.parent()?;
    let up = dir.parent()?;
    [
        up.join("bin/ptxas"),                     // nvidia/cu13/lib -> nvidia/cu13/bin
        up.parent()?.join("cuda_nvcc/bin/ptxas"), // nvidia/cuda_nvrtc/lib -> nvidia/cuda_nvcc
        up.parent()?.parent()?.join("bin/ptxas"), // <cuda>/targets/x86_64-linux/lib
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// Each NVRTC present (the CUDA 12 and 13 wheels in the test environment, a toolkit) is loaded
/// by ovl's own binding, side by side in one process, and compiles operators to PTX for sm_80
/// and sm_90 and to CUBIN for sm_90; its own ptxas, where present, assembles the PTX.
/// `OVL_REQUIRE_NVRTC=12,13` (scripts/test.sh sets it) makes a missing major version a failure.
#[test]
fn every_nvrtc_present_compiles_for_sm_80_and_sm_90() {
    let libraries = cuda::nvrtc_libraries();
    let mut majors = Vec::new();
    let dags = [
        add_2d(3, 5),
        gather(10, 4),
        runtime_step(),
        literals_and_control(),
    ];
    for lib in &libraries {
        let nvrtc = cuda::Nvrtc::open(lib).unwrap_or_else(|e| panic!("{e}"));
        let (major, minor) = nvrtc.info().version;
        assert!(major >= 12, "{}: NVRTC {major}.{minor}", lib.display());
        majors.push(major);
        let ptxas = ptxas_beside(lib);
        for dag in &dags {
            let src = cuda::generate_cuda(dag, "k").expect("CUDA source");
            for arch in [80, 90] {
                let ptx = nvrtc
                    .compile(&src, arch, CudaBinary::Ptx)
                    .unwrap_or_else(|e| panic!("NVRTC {major}.{minor}: {e}"));
                let text = String::from_utf8_lossy(&ptx);
                assert!(text.contains(".entry ovl_kernel"), "{text}");
                assert!(text.contains(&format!(".target sm_{arch}")), "{text}");
                if let Some(ptxas) = &ptxas {
                    let dir = tempfile::tempdir().expect("a temporary directory");
                    let file = dir.path().join("op.ptx");
                    std::fs::write(&file, &ptx).expect("write PTX");
                    let out = std::process::Command::new(ptxas)
                        .arg(format!("-arch=sm_{arch}"))
                        .arg("-o")
                        .arg(dir.path().join("op.cubin"))
                        .arg(&file)
                        .output()
                        .expect("run ptxas");
                    assert!(
                        out.status.success(),
                        "{} on NVRTC {major}.{minor}'s PTX for sm_{arch}: {}",
                        ptxas.display(),
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            }
            let cubin = nvrtc
                .compile(&src, 90, CudaBinary::Cubin)
                .unwrap_or_else(|e| panic!("NVRTC {major}.{minor}: {e}"));
            assert!(cubin.starts_with(b"\x7fELF"), "CUBIN of {}", dag.name);
        }
        // A rejection carries NVRTC's log.
        let err = nvrtc
            .compile(
                "extern \"C\" __global__ void k() { undeclared(); }",
                90,
                CudaBinary::Ptx,
            )
            .expect_err("undeclared identifier");
        assert!(err.to_string().contains("undeclared"), "{err}");
        eprintln!(
            "cuda.rs: NVRTC {major}.{minor} at {} compiled for sm_80/sm_90{}",
            lib.display(),
            match &ptxas {
                Some(p) => format!(", assembled by {}", p.display()),
                None => ", no ptxas beside it: PTX not assembled".into(),
            }
        );
    }
    // Not NVRTC at all: a clear error, not a crash.
    let err = cuda::Nvrtc::open(std::path::Path::new("/nonexistent/libnvrtc.so.13"))
        .expect_err("no such library");
    assert!(
        matches!(err, CodegenError::NvrtcNotFound { .. })
            && err.to_string().contains("nonexistent"),
        "{err}"
    );
    let required = std::env::var("OVL_REQUIRE_NVRTC").unwrap_or_default();
    for want in required.split(',').filter(|s| !s.trim().is_empty()) {
        let want: i32 = want
            .trim()
            .parse()
            .expect("OVL_REQUIRE_NVRTC: major versions");
        assert!(
            majors.contains(&want),
            "OVL_REQUIRE_NVRTC asks for NVRTC {want}; found {majors:?} in {libraries:?}"
        );
    }
    if libraries.is_empty() {
        eprintln!(
            "cuda.rs: every_nvrtc_present_compiles_for_sm_80_and_sm_90 DID NOT RUN: no NVRTC \
             library found (scripts/python-env.sh installs the CUDA 12 and 13 wheels into .venv)"
        );
    }
}
