//! The C++ compiler driver: finds the compiler the way the `cc` crate does, identifies it (for
//! the cache key), and compiles a generated source into a shared library.

use crate::error::{CodegenError, CompileFailure};
use crate::options::CompileOptions;
use ovl_ir::isa::CpuIsa;
use sha2::{Digest as _, Sha256};
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The flags every operator is compiled with (before [`CompileOptions::extra_flags`]) under
/// the process's setting of `OVL_CPU_ISA` (see [`compiler_flags_for`]).
pub fn compiler_flags() -> Vec<String> {
    compiler_flags_for(ovl_ir::isa::process())
}

/// The flags every operator is compiled with for `isa` (before
/// [`CompileOptions::extra_flags`]):
///
/// - `-O3` and `-march=native` (`-mcpu=native` on ARM): the library is specific to this CPU;
///   the cache key holds the CPU's features. Held to AVX2 ([`CpuIsa::Avx2`]), also
///   `-mno-avx512f` (which turns off every AVX-512 extension): the code is what the compiler
///   makes for a CPU like this one without AVX-512, tuned the same.
/// - `-ffp-contract=off`: no implicit FMA (the IR's semantics; FMA is explicit).
/// - `-fno-math-errno`: the code never reads `errno`; this lets `sqrt` vectorize. Results are
///   unchanged: there is no `-ffast-math`, NaN, infinities and signed zeros behave per IEEE 754.
///   (Not `-fno-trapping-math`: with it GCC 12 rewrites `(float)(int64_t)x` into `truncf(x)`,
///   which turns the cast of `-0.0` into `-0.0` instead of `+0.0`.)
/// - `-fwrapv`: a safety net (the generated code does integer arithmetic in unsigned types).
/// - `-fvisibility=hidden`: only the `ovl_*` entry points are exported.
pub fn compiler_flags_for(isa: CpuIsa) -> Vec<String> {
    let x86 = cfg!(any(target_arch = "x86_64", target_arch = "x86"));
    let march = if x86 { "-march=native" } else { "-mcpu=native" };
    let mut flags: Vec<String> = [
        "-std=c++17",
        "-O3",
        march,
        "-fPIC",
        "-shared",
        "-fwrapv",
        "-ffp-contract=off",
        "-fno-math-errno",
        "-fvisibility=hidden",
        "-w",
        "-pipe",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if x86 && isa == CpuIsa::Avx2 {
        flags.insert(3, "-mno-avx512f".to_string());
    }
    flags
}

/// Libraries linked after the source: the C math library (the generated code calls `sinf`...).
pub const LINK_FLAGS: &[&str] = &["-lm"];

/// A C++ compiler, its flags and the identity that goes into cache keys.
#[derive(Debug)]
pub struct Toolchain {
    /// The compiler executable (as `cc` found it, possibly a bare name looked up in `PATH`).
    pub path: PathBuf,
    /// Environment variables `cc` wants set when running it.
    pub env: Vec<(OsString, OsString)>,
    /// The full command-line flags (without `-o` and the source).
    pub flags: Vec<String>,
    /// The first line of `<compiler> --version`.
    pub version: String,
    /// The CPU the code is compiled for (the detected instruction-set features).
    pub cpu: String,
    /// SHA-256 over all of the above: the toolchain's part of every cache key.
    pub fingerprint: [u8; 32],
}

static COMPILER_RUNS: AtomicU64 = AtomicU64::new(0);

/// How many times this process has run the C++ compiler on an operator (for diagnostics and
/// tests: a warm cache does not increase it).
pub fn compiler_invocations() -> u64 {
    COMPILER_RUNS.load(Ordering::Relaxed)
}

type ToolchainKey = (Option<PathBuf>, Vec<String>, CpuIsa);

fn toolchains() -> &'static Mutex<HashMap<ToolchainKey, Arc<Toolchain>>> {
    static T: OnceLock<Mutex<HashMap<ToolchainKey, Arc<Toolchain>>>> = OnceLock::new();
    T.get_or_init(Default::default)
}

impl Toolchain {
    /// The toolchain for these options, discovered and identified once per process.
    pub fn get(options: &CompileOptions) -> Result<Arc<Toolchain>, CodegenError> {
        let isa = options.resolved_isa()?;
        let key = (options.compiler.clone(), options.extra_flags.clone(), isa);
        let mut map = toolchains().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = map.get(&key) {
            return Ok(t.clone());
        }
        let t = Arc::new(Toolchain::discover(options, isa)?);
        map.insert(key, t.clone());
        Ok(t)
    }

    fn discover(options: &CompileOptions, isa: CpuIsa) -> Result<Toolchain, CodegenError> {
        let (path, env) = match &options.compiler {
            Some(p) => (p.clone(), Vec::new()),
            None => find_compiler()?,
        };
        let mut flags = compiler_flags_for(isa);
        flags.extend(options.extra_flags.iter().cloned());
        let version = identify(&path, &env)?;
        let cpu = cpu_target_for(isa);
        let mut h = Sha256::new();
        let mut field = |s: &[u8]| {
            h.update((s.len() as u64).to_le_bytes());
            h.update(s);
        };
        field(path.as_os_str().as_encoded_bytes());
        for (k, v) in &env {
            field(k.as_encoded_bytes());
            field(v.as_encoded_bytes());
        }
        field(version.as_bytes());
        for f in flags
            .iter()
            .map(String::as_str)
            .chain(LINK_FLAGS.iter().copied())
        {
            field(f.as_bytes());
        }
        field(cpu.as_bytes());
        Ok(Toolchain {
            path,
            env,
            flags,
            version,
            cpu,
            fingerprint: h.finalize().into(),
        })
    }

    /// The command line that compiles `source` into the shared library `output`.
    fn command(&self, source: &Path, output: &Path) -> Command {
        let mut c = Command::new(&self.path);
        c.args(&self.flags)
            .arg("-o")
            .arg(output)
            .arg(source)
            .args(LINK_FLAGS);
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    /// The command line as text, for error messages.
    pub fn command_line(&self, source: &Path, output: &Path) -> String {
        let mut s = self.path.display().to_string();
        for f in &self.flags {
            s.push(' ');
            s.push_str(f);
        }
        s.push_str(&format!(" -o {} {}", output.display(), source.display()));
        for f in LINK_FLAGS {
            s.push(' ');
            s.push_str(f);
        }
        s
    }

    /// Compiles `source` into the shared library `output`. `operator` and `defined_at` name
    /// the operator in errors, which carry the command, the compiler's output and the source
    /// path.
    ///
    /// With `prelude` (the precompiled prelude's header, `super::pch`) the source is compiled
    /// from a stub that includes it, and again from the full source if that fails.
    pub fn compile(
        &self,
        source: &Path,
        output: &Path,
        operator: &str,
        defined_at: &str,
        prelude: Option<&Path>,
    ) -> Result<(), CodegenError> {
        if let Some(header) = prelude {
            let stub = std::fs::read_to_string(source)
                .ok()
                .and_then(|s| stub(&s, header));
            let stub_path = output.with_extension("stub.cpp");
            if stub.is_some_and(|s| std::fs::write(&stub_path, s).is_ok()) {
                COMPILER_RUNS.fetch_add(1, Ordering::Relaxed);
                let out = self.command(&stub_path, output).output();
                let _ = std::fs::remove_file(&stub_path);
                if out.is_ok_and(|o| o.status.success()) {
                    return Ok(());
                }
            }
        }
        let command = self.command_line(source, output);
        COMPILER_RUNS.fetch_add(1, Ordering::Relaxed);
        let out = self.command(source, output).output().map_err(|source| {
            CodegenError::CompilerSpawn {
                command: command.clone(),
                source,
            }
        })?;
        if out.status.success() {
            return Ok(());
        }
        let mut log = String::from_utf8_lossy(&out.stderr).into_owned();
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !stdout.trim().is_empty() {
            log.push_str(&stdout);
        }
        Err(CodegenError::CompileFailed(Box::new(CompileFailure {
            operator: operator.to_string(),
            defined_at: defined_at.to_string(),
            status: out.status.to_string(),
            command,
            source_path: source.to_path_buf(),
            log,
        })))
    }
}

/// What `cc` reports while it finds the compiler. By default it prints its warnings (a failed
/// compiler family detection, say) and the stderr of its probes as `cargo:warning=` lines on
/// stdout, for Cargo; here it runs inside the user's process (a TensorFlow kernel, a Python
/// interpreter), so they are kept instead, and shown only in the error when no compiler is
/// found.
#[derive(Default)]
struct CcMessages(std::sync::Mutex<Vec<String>>);

impl cc::BuildMessageLogger for CcMessages {
    fn log(&self, kind: cc::BuildMessageKind, msg: cc::BuildMessage<'_>, _: &dyn std::any::Any) {
        if let Ok(mut m) = self.0.lock() {
            m.push(format!("{kind:?}: {msg}"));
        }
    }
}

/// `source` (a generated translation unit) with its prelude replaced by an `#include` of
/// `header`, or `None` when the prelude is not in it once.
pub fn stub(source: &str, header: &Path) -> Option<String> {
    let at = source.find(crate::shared::prelude::CPP)?;
    if source[at + crate::shared::prelude::CPP.len()..].contains(crate::shared::prelude::CPP) {
        return None;
    }
    let include = format!("#include \"{}\"\n", header.display());
    Some(
        [
            &source[..at],
            &include,
            &source[at + crate::shared::prelude::CPP.len()..],
        ]
        .concat(),
    )
}

/// The target triple this crate was built for (what `cc` needs to find the C++ compiler at run
/// time, outside a build script); part of the cache's target key.
pub const TARGET_TRIPLE: &str = env!("OVL_CODEGEN_TARGET");

/// The C++ compiler `cc` finds (honouring `$CXX`), without a build script's environment and
/// without printing anything.
fn find_compiler() -> Result<(PathBuf, Vec<(OsString, OsString)>), CodegenError> {
    let target = TARGET_TRIPLE;
    let messages = std::sync::Arc::new(CcMessages::default());
    let mut b = cc::Build::new();
    b.cpp(true)
        .cargo_metadata(false)
        .cargo_warnings(false)
        .cargo_debug(false)
        .cargo_output(false)
        .message_logger(Some(messages.clone()))
        .warnings(false)
        .debug(false)
        .opt_level(3);
    if !target.is_empty() {
        b.target(target).host(target);
    }
    let tool = b.try_get_compiler().map_err(|e| {
        let mut message = e.to_string();
        if let Ok(m) = messages.0.lock() {
            for line in m.iter() {
                message.push_str("\n  ");
                message.push_str(line);
            }
        }
        CodegenError::NoCompiler { message }
    })?;
    let env = tool
        .get_envs()
        .map(|(k, v)| (k.to_os_string(), v.to_os_string()))
        .collect();
    Ok((tool.path().to_path_buf(), env))
}

/// The first line of `<compiler> --version`.
fn identify(path: &Path, env: &[(OsString, OsString)]) -> Result<String, CodegenError> {
    let mut c = Command::new(path);
    c.arg("--version");
    for (k, v) in env {
        c.env(k, v);
    }
    let command = format!("{} --version", path.display());
    let out = c.output().map_err(|source| CodegenError::CompilerSpawn {
        command: command.clone(),
        source,
    })?;
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap_or("").trim().to_string();
    if !out.status.success() || first.is_empty() {
        return Err(CodegenError::NoCompiler {
            message: format!(
                "`{command}` failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(first)
}

/// The instruction-set features of this CPU that generated code may use under the process's
/// setting of `OVL_CPU_ISA`, as one string: the CPU's part of the cache key.
pub fn cpu_target() -> String {
    cpu_target_for(ovl_ir::isa::process())
}

/// The instruction-set features of this CPU that `-march=native` may use under `isa` (held to
/// AVX2: none of AVX-512's), as one string: the CPU's part of the cache key.
pub fn cpu_target_for(isa: CpuIsa) -> String {
    static CPU: OnceLock<String> = OnceLock::new();
    let all = CPU.get_or_init(|| {
        #[allow(unused_mut)]
        let mut s = format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS);
        #[cfg(target_arch = "x86_64")]
        {
            macro_rules! features {
                ($($f:tt),*) => {
                    $(if std::arch::is_x86_feature_detected!($f) {
                        s.push('+');
                        s.push_str($f);
                    })*
                };
            }
            features!(
                "sse3",
                "ssse3",
                "sse4.1",
                "sse4.2",
                "popcnt",
                "avx",
                "avx2",
                "fma",
                "f16c",
                "bmi1",
                "bmi2",
                "lzcnt",
                "movbe",
                "adx",
                "aes",
                "pclmulqdq",
                "sha",
                "rdrand",
                "rdseed",
                "xsave",
                "avx512f",
                "avx512cd",
                "avx512dq",
                "avx512bw",
                "avx512vl",
                "avx512ifma",
                "avx512vbmi",
                "avx512vbmi2",
                "avx512vnni",
                "avx512bitalg",
                "avx512vpopcntdq",
                "avx512bf16",
                "avx512fp16",
                "gfni",
                "vaes",
                "vpclmulqdq",
                "avxvnni"
            );
        }
        s
    });
    match isa {
        CpuIsa::Native => all.clone(),
        CpuIsa::Avx2 => {
            let mut kept: Vec<&str> = all
                .split('+')
                .filter(|f| !f.starts_with("avx512"))
                .collect();
            kept.push("held-to-avx2");
            kept.join("+")
        }
    }
}
