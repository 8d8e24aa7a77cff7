//! The operator cache: memory and disk hits, keys, forced recompilation, errors carrying the
//! compiler log, clearing, and concurrent compilation by several processes.

mod common;

use common::*;
use ovl_codegen::{cache_dir, CacheOutcome, CodegenError, CompileOptions};
use ovl_ir::ir::{self, Op};
use ovl_ir::{DType, HostTensor};
use ovl_runtime::{clear_cache_at, compile, compile_with_outcome, Origin};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// out[i] = x[i] * c + 1
fn scale(c: f32) -> ir::ExpressionDag {
    let mut b = Builder::new("scale", &[1000]);
    b.input(DType::F32, &[1000]);
    b.output(DType::F32, &[1000]);
    let i = b.position(0);
    let x = b.read(IN, 0, &[i]);
    let k = b.f32(c);
    let y = b.op(Op::Mul, &[x, k]);
    let one = b.f32(1.0);
    let y = b.op(Op::Add, &[y, one]);
    b.write(OUT, 0, &[i], y);
    b.build()
}

fn check_scale(op: &ovl_runtime::CompiledOperator, c: f32) {
    let x = HostTensor::from_vec(&[1000], (0..1000).map(|v| v as f32).collect::<Vec<_>>()).unwrap();
    let mut out = vec![HostTensor::zeros(DType::F32, &[1000])];
    op.run(&[&x], &mut out, &[], 0).unwrap();
    for (k, &v) in out[0].as_slice::<f32>().unwrap().iter().enumerate() {
        assert_eq!(v, k as f32 * c + 1.0);
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn second_compile_is_served_from_memory() {
    let cache = TestCache::new();
    let dag = scale(2.0);
    // Discover the compiler first so that the cold time is the operator's compilation alone.
    let _ = compile(&scale(-1.0), &cache.options()).unwrap();
    let t0 = Instant::now();
    let (a, first) = compile_with_outcome(&dag, &cache.options()).unwrap();
    let cold = t0.elapsed();
    let t1 = Instant::now();
    let (b, second) = compile_with_outcome(&dag, &cache.options()).unwrap();
    let warm = t1.elapsed();
    let n = 1000;
    let t2 = Instant::now();
    for _ in 0..n {
        let _ = compile_with_outcome(&dag, &cache.options()).unwrap();
    }
    let steady = t2.elapsed() / n;
    println!(
        "cold compile {cold:.3?}, first warm compile {warm:.3?}, steady warm compile {steady:.3?}"
    );
    assert_eq!(
        (first, second),
        (CacheOutcome::Compiled, CacheOutcome::Memory)
    );
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(a.origin(), Origin::Compiled);
    assert!(warm * 20 < cold, "warm {warm:?} vs cold {cold:?}");
    check_scale(&b, 2.0);
    // The layout: <root>/v1/cpu/<key>/{op.cpp, op.so, meta}.
    let dir = cache.dir.path().join("v1").join("cpu").join(a.cache_key());
    assert_eq!(a.source_path(), dir.join("op.cpp"));
    assert_eq!(a.library_path(), dir.join("op.so"));
    assert!(dir.join("op.so").is_file() && dir.join("op.cpp").is_file());
    let meta = std::fs::read_to_string(dir.join("meta")).unwrap();
    assert!(
        meta.contains("operator: scale") && meta.contains("-ffp-contract=off"),
        "{meta}"
    );
    // No temporary file is left behind.
    let stray: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
}

#[test]
fn another_process_would_load_from_disk() {
    // A cache copied to a new root is not in this process's memory: it is loaded from disk
    // without the compiler.
    let a = TestCache::new();
    let dag = scale(3.0);
    let (op, outcome) = compile_with_outcome(&dag, &a.options()).unwrap();
    assert_eq!(outcome, CacheOutcome::Compiled);
    let b = TestCache::new();
    copy_tree(a.dir.path(), b.dir.path());
    let t = Instant::now();
    let (op2, outcome) = compile_with_outcome(&dag, &b.options()).unwrap();
    println!("load from the disk cache: {:.3?}", t.elapsed());
    assert_eq!(outcome, CacheOutcome::DiskCache);
    assert_eq!(op2.origin(), Origin::DiskCache);
    assert_eq!(op.cache_key(), op2.cache_key());
    assert!(op2.library_path().starts_with(b.dir.path()));
    check_scale(&op2, 3.0);
    // Forcing recompilation ignores the disk cache; the recompiled library is then reused.
    let forced = b.options().with_force_recompile(true);
    let (op3, outcome) = compile_with_outcome(&dag, &forced).unwrap();
    assert_eq!(outcome, CacheOutcome::Compiled);
    check_scale(&op3, 3.0);
    check_scale(&op2, 3.0); // the library loaded before stays valid
    let (_, outcome) = compile_with_outcome(&dag, &forced).unwrap();
    assert_eq!(outcome, CacheOutcome::Memory);
}

#[test]
fn a_corrupt_cache_entry_is_recompiled() {
    let a = TestCache::new();
    let dag = scale(5.0);
    let op = compile(&dag, &a.options()).unwrap();
    let b = TestCache::new();
    copy_tree(a.dir.path(), b.dir.path());
    let lib = b
        .dir
        .path()
        .join("v1/cpu")
        .join(op.cache_key())
        .join("op.so");
    std::fs::write(&lib, b"not a library").unwrap();
    let (op2, outcome) = compile_with_outcome(&dag, &b.options()).unwrap();
    assert_eq!(outcome, CacheOutcome::Compiled);
    check_scale(&op2, 5.0);
}

#[test]
fn keys_depend_on_the_operator_only() {
    let a = TestCache::new();
    let b = TestCache::new();
    let k1 = compile(&scale(1.5), &a.options()).unwrap();
    let k2 = compile(&scale(1.25), &a.options()).unwrap();
    let k3 = compile(&scale(1.5), &b.options()).unwrap();
    assert_ne!(
        k1.cache_key(),
        k2.cache_key(),
        "a changed constant changes the key"
    );
    assert_eq!(
        k1.cache_key(),
        k3.cache_key(),
        "the cache root is not part of the key"
    );
    assert_eq!(k1.cache_key().len(), 32);
    check_scale(&k2, 1.25);
    // The source location is not part of the key (ovl_ir::hash ignores it).
    let mut moved = scale(1.5);
    moved.source = Some(ir::SourceLocation {
        file: "elsewhere.rs".into(),
        line: 99,
        column: 1,
    });
    let (k4, outcome) = compile_with_outcome(&moved, &a.options()).unwrap();
    assert_eq!(k4.cache_key(), k1.cache_key());
    assert_eq!(outcome, CacheOutcome::Memory);
    // Extra flags are.
    let k5 = compile(
        &scale(1.5),
        &a.options().with_extra_flag("-fno-unroll-loops"),
    )
    .unwrap();
    assert_ne!(k5.cache_key(), k1.cache_key());
}

#[test]
fn compiler_errors_carry_the_log_and_the_source_path() {
    let cache = TestCache::new();
    let options = cache.options().with_extra_flag("-fno-such-flag-for-ovl");
    let err = compile(&scale(7.0), &options).unwrap_err();
    let msg = err.to_string();
    println!("{msg}");
    let CodegenError::CompileFailed(failure) = &err else {
        panic!("{err:?}")
    };
    let (source_path, command, log) = (&failure.source_path, &failure.command, &failure.log);
    assert!(source_path.is_file(), "the generated source is kept");
    assert!(command.contains("-fno-such-flag-for-ovl") && command.contains("-shared"));
    assert!(log.contains("no-such-flag-for-ovl"), "{log}");
    assert!(
        msg.contains(&source_path.display().to_string()) && msg.contains(log.trim()),
        "{msg}"
    );
    assert!(
        msg.contains("operator `scale`") && msg.contains("src/ops.rs:12"),
        "{msg}"
    );
}

#[test]
fn a_missing_compiler_is_an_error_not_a_panic() {
    let cache = TestCache::new();
    let options = cache.options().with_compiler("/nonexistent/ovl-c++");
    let err = compile(&scale(7.0), &options).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/ovl-c++"), "{err}");
}

#[test]
fn invalid_ir_is_rejected_before_compiling() {
    let cache = TestCache::new();
    let mut dag = scale(1.0);
    dag.expressions[3].operands = vec![1, 7]; // a forward reference
    let err = compile(&dag, &cache.options()).unwrap_err();
    assert!(matches!(err, CodegenError::Invalid(_)), "{err}");
    // The emitter alone reports it too, without panicking.
    let err = ovl_codegen::generate_cpp(&dag, "k").unwrap_err();
    assert!(err.to_string().contains("%7"), "{err}");
}

#[test]
fn clearing_the_cache() {
    let cache = TestCache::new();
    let dag = scale(9.0);
    let op = compile(&dag, &cache.options()).unwrap();
    let v1 = cache.dir.path().join("v1");
    assert!(v1.is_dir());
    std::fs::write(cache.dir.path().join("unrelated.txt"), "keep me").unwrap();
    clear_cache_at(cache.dir.path()).unwrap();
    assert!(!v1.exists());
    assert!(cache.dir.path().join("unrelated.txt").exists());
    check_scale(&op, 9.0); // still loaded
    let (_, outcome) = compile_with_outcome(&dag, &cache.options()).unwrap();
    assert_eq!(outcome, CacheOutcome::Compiled);
    clear_cache_at(&cache.dir.path().join("missing")).unwrap();
}

#[test]
fn dump_source_prints_and_still_compiles() {
    let cache = TestCache::new();
    let op = compile(&scale(4.0), &cache.options().with_dump_source(true)).unwrap();
    check_scale(&op, 4.0);
    assert!(!cache_dir().as_os_str().is_empty());
}

const CHILD_ENV: &str = "OVL_CODEGEN_TEST_CHILD";

/// Run by `processes_compile_the_same_operator_concurrently` in child processes; does nothing
/// in a normal test run.
#[test]
fn child_process_compiles() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    // The cache root comes from OVL_CACHE_DIR (set by the parent): the default options.
    let mut options = CompileOptions::default();
    options.force_recompile = mode == "force";
    let (op, outcome) = compile_with_outcome(&scale(0.75), &options).unwrap();
    assert!(op.library_path().starts_with(cache_dir()));
    check_scale(&op, 0.75);
    // This process runs only this test: the compiler counter is not shared with others. A
    // second request neither runs the compiler nor touches the disk.
    let runs = ovl_codegen::compiler_invocations();
    assert_eq!(runs, u64::from(outcome == CacheOutcome::Compiled));
    let (again, outcome2) = compile_with_outcome(&scale(0.75), &options).unwrap();
    assert_eq!(outcome2, CacheOutcome::Memory);
    assert!(Arc::ptr_eq(&op, &again));
    assert_eq!(ovl_codegen::compiler_invocations(), runs);
    println!("child outcome: {outcome:?}");
}

#[test]
fn processes_compile_the_same_operator_concurrently() {
    let cache = TestCache::new();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = ["normal", "normal", "force", "normal", "force"]
        .iter()
        .map(|mode| {
            std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "child_process_compiles",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, mode)
                .env("OVL_CACHE_DIR", cache.dir.path())
                .env_remove("OVL_FORCE_RECOMPILE")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // All children run at the same time; now wait for each.
    let mut outcomes = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "a child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let outcome = stdout
            .lines()
            .find_map(|l| l.split("child outcome: ").nth(1))
            .expect("the child ran the test")
            .to_string();
        outcomes.push(outcome);
    }
    println!("outcomes: {outcomes:?}");
    assert!(outcomes.iter().any(|o| o == "Compiled"));
}

/// The entry directory of `key` in the cache rooted at `root`.
fn entry_dir(root: &Path, key: &str) -> std::path::PathBuf {
    root.join("v1/cpu").join(key)
}

/// A way a cached file gets damaged: its name, and what it does to the file at a path.
type Damage = (&'static str, fn(&Path));

/// Ways a cached file gets damaged.
fn damages() -> Vec<Damage> {
    vec![
        ("truncated to 4000 bytes", |p| {
            let f = std::fs::OpenOptions::new().write(true).open(p).unwrap();
            assert!(f.metadata().unwrap().len() > 4000);
            f.set_len(4000).unwrap();
        }),
        ("empty", |p| std::fs::write(p, b"").unwrap()),
        ("extended", |p| {
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new().append(true).open(p).unwrap();
            f.write_all(&[0u8; 100]).unwrap();
        }),
        ("bit-flipped", |p| {
            let mut bytes = std::fs::read(p).unwrap();
            // In the middle of the file: code or data, not the ELF header the loader checks.
            let i = bytes.len() / 2;
            bytes[i] ^= 0x01;
            std::fs::write(p, bytes).unwrap();
        }),
    ]
}

#[test]
fn damaged_libraries_are_rebuilt_not_loaded() {
    // Loading a truncated library would kill this process with SIGBUS: each damaged library is
    // detected by its length and digest and recompiled instead. Each case damages a copy of
    // the cache (a fresh root: not in this process's memory, never loaded).
    let a = TestCache::new();
    let dag = scale(6.0);
    let op = compile(&dag, &a.options()).unwrap();
    let key = op.cache_key().to_string();
    let meta = std::fs::read_to_string(entry_dir(a.dir.path(), &key).join("meta")).unwrap();
    let len = std::fs::metadata(op.library_path()).unwrap().len();
    assert!(
        meta.starts_with(&format!("artifact: op.so\nartifact length: {len}\n")),
        "{meta}"
    );
    for (name, damage) in damages() {
        let b = TestCache::new();
        copy_tree(a.dir.path(), b.dir.path());
        let lib = entry_dir(b.dir.path(), &key).join("op.so");
        damage(&lib);
        let (op2, outcome) = compile_with_outcome(&dag, &b.options()).unwrap();
        assert_eq!(outcome, CacheOutcome::Compiled, "{name}");
        assert_eq!(op2.library_path(), lib);
        check_scale(&op2, 6.0);
        // The rebuilt entry is whole again: another process would load it from disk.
        let c = TestCache::new();
        copy_tree(b.dir.path(), c.dir.path());
        let (op3, outcome) = compile_with_outcome(&dag, &c.options()).unwrap();
        assert_eq!(outcome, CacheOutcome::DiskCache, "{name}");
        check_scale(&op3, 6.0);
    }
}

#[test]
fn a_library_recorded_without_a_digest_is_rebuilt() {
    // An entry written by an older version: `meta` has no length and digest.
    let a = TestCache::new();
    let dag = scale(6.5);
    let op = compile(&dag, &a.options()).unwrap();
    let b = TestCache::new();
    copy_tree(a.dir.path(), b.dir.path());
    let meta = entry_dir(b.dir.path(), op.cache_key()).join("meta");
    let old: String = std::fs::read_to_string(&meta)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("artifact"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&meta, old).unwrap();
    let (op2, outcome) = compile_with_outcome(&dag, &b.options()).unwrap();
    assert_eq!(outcome, CacheOutcome::Compiled);
    check_scale(&op2, 6.5);
    assert!(std::fs::read_to_string(&meta)
        .unwrap()
        .contains("artifact sha256: "));
}

/// Sets the permissions of every file (`file_mode`) and directory (`dir_mode`) under `root`.
fn chmod_tree(root: &Path, file_mode: u32, dir_mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    for entry in std::fs::read_dir(root).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            chmod_tree(&entry.path(), file_mode, dir_mode);
        } else {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(file_mode))
                .unwrap();
        }
    }
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(dir_mode)).unwrap();
}

/// Drops, for the calling thread only, the capabilities that let root ignore file
/// permissions (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER). Linux keeps credentials per
/// thread and the raw system call changes only the caller's. Returns whether it succeeded.
fn drop_permission_override_of_this_thread() -> bool {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget/capset with a version-3 header and two data structs, as the kernel
    // expects; pid 0 is the calling thread.
    unsafe {
        if libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) != 0 {
            return false;
        }
        data[0].effective &= !((1 << 1) | (1 << 2) | (1 << 3));
        libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) == 0
    }
}

#[test]
fn a_read_only_cache_with_a_damaged_library_is_a_clear_error() {
    let a = TestCache::new();
    let dag = scale(8.0);
    let op = compile(&dag, &a.options()).unwrap();
    let key = op.cache_key().to_string();
    // Two read-only copies: one whole, one with a truncated library.
    let whole = TestCache::new();
    copy_tree(a.dir.path(), whole.dir.path());
    let damaged = TestCache::new();
    copy_tree(a.dir.path(), damaged.dir.path());
    let lib = entry_dir(damaged.dir.path(), &key).join("op.so");
    damages()[0].1(&lib);
    for root in [whole.dir.path(), damaged.dir.path()] {
        chmod_tree(root, 0o444, 0o555);
    }
    let (whole_root, damaged_root) = (whole.dir.path().to_owned(), damaged.dir.path().to_owned());
    // In a thread of its own: as root, that thread gives up overriding permissions.
    let result = std::thread::spawn(move || {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 && !drop_permission_override_of_this_thread() {
            return None;
        }
        let probe = damaged_root.join("probe");
        if std::fs::write(&probe, b"").is_ok() {
            let _ = std::fs::remove_file(&probe);
            return None;
        }
        let whole = compile_with_outcome(
            &scale(8.0),
            &CompileOptions::default().with_cache_dir(&whole_root),
        );
        let damaged = compile(
            &scale(8.0),
            &CompileOptions::default().with_cache_dir(&damaged_root),
        );
        Some((whole, damaged.map(|_| ())))
    })
    .join()
    .unwrap();
    for root in [whole.dir.path(), damaged.dir.path()] {
        chmod_tree(root, 0o644, 0o755);
    }
    let Some((whole, damaged)) = result else {
        eprintln!(
            "cache.rs: a_read_only_cache_with_a_damaged_library_is_a_clear_error DID NOT RUN its \
             read-only part: this process can write into a read-only directory (root without a \
             way to drop CAP_DAC_OVERRIDE)"
        );
        return;
    };
    // A whole entry in a read-only cache loads as before.
    let (op2, outcome) = whole.unwrap();
    assert_eq!(outcome, CacheOutcome::DiskCache);
    check_scale(&op2, 8.0);
    // A damaged one is not loaded, and the error names it and says what to do.
    let err = damaged.unwrap_err();
    let msg = err.to_string();
    println!("{msg}");
    let CodegenError::DamagedEntry { path, reason, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(path, &lib);
    assert!(reason.contains("4000 bytes"), "{reason}");
    assert!(
        msg.contains(&lib.display().to_string())
            && msg.contains("delete")
            && msg.contains("OVL_CACHE_DIR"),
        "{msg}"
    );
    assert_eq!(
        std::fs::metadata(&lib).unwrap().len(),
        4000,
        "left as it was"
    );
}

#[test]
fn processes_finding_the_same_damaged_library_rebuild_it_once() {
    // A copy of a cache (this process has the original library loaded: truncating it in place
    // would pull pages from under its own mapping) with the library truncated; four processes
    // start on it at once. Each sees the damage, takes the lock in turn, and checks again:
    // one recompiles, the others load what it wrote.
    let a = TestCache::new();
    let op = compile(&scale(0.75), &a.options()).unwrap();
    let b = TestCache::new();
    copy_tree(a.dir.path(), b.dir.path());
    let lib = entry_dir(b.dir.path(), op.cache_key()).join("op.so");
    damages()[0].1(&lib);
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|_| {
            std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "child_process_compiles",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_ENV, "normal")
                .env("OVL_CACHE_DIR", b.dir.path())
                .env_remove("OVL_FORCE_RECOMPILE")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut outcomes = Vec::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "a child failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let outcome = stdout
            .lines()
            .find_map(|l| l.split("child outcome: ").nth(1))
            .expect("the child ran the test")
            .to_string();
        outcomes.push(outcome);
    }
    println!("outcomes: {outcomes:?}");
    let compiled = outcomes.iter().filter(|o| *o == "Compiled").count();
    assert_eq!(compiled, 1, "{outcomes:?}");
    assert!(outcomes.iter().all(|o| o == "Compiled" || o == "DiskCache"));
    assert_eq!(
        std::fs::metadata(&lib).unwrap().len(),
        std::fs::metadata(op.library_path()).unwrap().len()
    );
}

/// A compiler that does not exist: compiling is an error, as on a machine without one.
const NO_COMPILER: &str = "/nonexistent/ovl-test-c++";

#[test]
fn an_embedded_library_is_installed_and_loaded_without_a_compiler() {
    use ovl_runtime::cpu::cache::{compile_embedded, embed_library, target_key};
    use sha2::Digest as _;
    let exporter = TestCache::new();
    let dag = scale(3.0);
    let library = embed_library(&dag, 0, &exporter.options()).unwrap();
    assert_eq!(library.operator, 0);
    assert_eq!(library.target_key, target_key(&dag, &exporter.options()));
    assert!(
        library.library.starts_with(b"\x7fELF"),
        "not a shared library"
    );
    // The target key ignores the compiler and the cache, not the flags.
    let elsewhere = TestCache::new().options().with_compiler(NO_COMPILER);
    assert_eq!(target_key(&dag, &elsewhere), library.target_key);
    assert_ne!(
        target_key(&dag, &elsewhere.clone().with_extra_flag("-DOVL_OTHER")),
        library.target_key
    );
    assert_ne!(target_key(&scale(4.0), &elsewhere), library.target_key);

    let receiver = TestCache::new();
    let no_compiler = receiver.options().with_compiler(NO_COMPILER);
    let err = compile(&dag, &no_compiler).unwrap_err();
    assert!(
        matches!(
            err,
            CodegenError::CompilerSpawn { .. } | CodegenError::NoCompiler { .. }
        ),
        "{err:?}"
    );
    // No compiler can run with these options (see the error above), and the origin says the
    // library came from the program. (The process-wide compiler counter is not compared: other
    // tests of this binary compile concurrently.)
    let op = compile_embedded(&dag, &library, &no_compiler).unwrap();
    assert_eq!(op.origin(), Origin::Embedded);
    assert_eq!(op.cache_key(), library.cache_key);
    check_scale(&op, 3.0);
    // It is the cache entry of the exporter's key, recorded in `meta` like a compiled one.
    let entry = receiver
        .options()
        .cache_dir
        .unwrap()
        .join("v1/cpu")
        .join(&library.cache_key);
    assert_eq!(std::fs::read(entry.join("op.so")).unwrap(), library.library);
    let meta = std::fs::read_to_string(entry.join("meta")).unwrap();
    let digest = ovl_ir::hash::hex(&sha2::Sha256::digest(&library.library));
    assert!(
        meta.contains(&format!("artifact length: {}\n", library.library.len()))
            && meta.contains(&format!("artifact sha256: {digest}\n")),
        "{meta}"
    );
    assert!(entry.join("op.cpp").is_file());
}

#[test]
fn an_embedded_library_for_another_machine_is_compiled_or_a_clear_error() {
    use ovl_runtime::cpu::cache::{compile_embedded, embed_library};
    let dag = scale(5.0);
    let mut library = embed_library(&dag, 0, &TestCache::new().options()).unwrap();
    library.target_key = "0".repeat(32);
    library.target = "riscv64-unknown-linux-gnu +v, compiled by another compiler".into();
    // Without a compiler: an error that says why the library was not used and why compiling
    // failed.
    let cache = TestCache::new();
    let err =
        compile_embedded(&dag, &library, &cache.options().with_compiler(NO_COMPILER)).unwrap_err();
    let msg = err.to_string();
    println!("{msg}");
    let CodegenError::EmbeddedLibraryUnusable {
        operator,
        reason,
        source,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(operator, "scale");
    assert!(
        matches!(&**reason, ovl_codegen::NotEmbedded::OtherTarget { target, .. }
            if target.starts_with("riscv64-unknown-linux-gnu")),
        "{reason}"
    );
    // The message names both targets.
    assert!(
        msg.contains("compiled for riscv64-unknown-linux-gnu"),
        "{msg}"
    );
    assert!(msg.contains("; this machine, "), "{msg}");
    assert!(msg.contains(NO_COMPILER), "{msg}");
    assert!(
        matches!(
            **source,
            CodegenError::CompilerSpawn { .. } | CodegenError::NoCompiler { .. }
        ),
        "{source:?}"
    );
    // Nothing was installed from it.
    assert!(!cache
        .options()
        .cache_dir
        .unwrap()
        .join("v1/cpu")
        .join(&library.cache_key)
        .join("op.so")
        .exists());
    // With a compiler: compiled here.
    let op = compile_embedded(&dag, &library, &TestCache::new().options()).unwrap();
    assert_eq!(op.origin(), Origin::Compiled);
    check_scale(&op, 5.0);
    // A cache key that is not one (it names the entry's directory) is refused before use.
    let mut bad = embed_library(&dag, 0, &TestCache::new().options()).unwrap();
    bad.cache_key = "../../escape".into();
    let reason = ovl_runtime::cpu::cache::load_embedded(&dag, &bad, &TestCache::new().options())
        .unwrap_err();
    assert!(
        matches!(&reason, ovl_codegen::NotEmbedded::BadCacheKey { key } if key == "../../escape"),
        "{reason}"
    );
}

/// `compile_all`: every operator, in order; distinct ones compiled once each (concurrently), the
/// same operator given twice the same library; afterwards every one is served from memory. Each
/// entry keeps its full source, prelude included, whether or not the prelude was precompiled.
#[test]
fn compile_all_compiles_each_distinct_operator_once() {
    let cache = TestCache::new();
    let factors = [2.0, 3.0, 2.0, 4.0];
    let dags: Vec<ir::ExpressionDag> = factors.iter().map(|&c| scale(c)).collect();
    let refs: Vec<&ir::ExpressionDag> = dags.iter().collect();
    let ops: Vec<_> = ovl_runtime::compile_all(&refs, &cache.options())
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    for (op, &c) in ops.iter().zip(&factors) {
        check_scale(op, c);
        let source = std::fs::read_to_string(op.source_path()).unwrap();
        assert!(source.contains(ovl_codegen::CPP_PRELUDE));
    }
    assert!(Arc::ptr_eq(&ops[0], &ops[2]));
    for dag in &dags {
        let (_, outcome) = compile_with_outcome(dag, &cache.options()).unwrap();
        assert_eq!(outcome, CacheOutcome::Memory);
    }
    let entries = std::fs::read_dir(cache.dir.path().join("v1/cpu")).unwrap();
    assert_eq!(entries.count(), 3);
}

/// The precompiled prelude only saves time: with its header and its `.gch` damaged, an
/// operator still compiles (from its full source) and runs.
#[test]
fn a_damaged_precompiled_prelude_costs_time_not_correctness() {
    let cache = TestCache::new();
    check_scale(&compile(&scale(5.0), &cache.options()).unwrap(), 5.0);
    let Ok(headers) = std::fs::read_dir(cache.dir.path().join("v1/cpu-prelude")) else {
        println!("DID NOT RUN: the compiler is not GCC, so there is no precompiled prelude");
        return;
    };
    for dir in headers {
        let dir = dir.unwrap().path();
        std::fs::write(dir.join("ovl_prelude.h.gch"), b"not a precompiled header").unwrap();
        std::fs::write(dir.join("ovl_prelude.h"), b"#error damaged\n").unwrap();
    }
    check_scale(&compile(&scale(6.0), &cache.options()).unwrap(), 6.0);
}
