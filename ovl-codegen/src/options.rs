//! [`CompileOptions`].

use std::path::PathBuf;

/// How to compile an operator. `CompileOptions::default()` uses the default cache directory, the
/// compiler `cc` finds and the environment switches `OVL_FORCE_RECOMPILE=1` and
/// `OVL_DUMP_SOURCE=1`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompileOptions {
    /// The cache root (default: [`crate::cache_dir`], i.e. `$OVL_CACHE_DIR` or the user cache
    /// directory). Tests should set it rather than the process-global environment variable.
    pub cache_dir: Option<PathBuf>,
    /// Compile even if the on-disk cache holds the operator (also `OVL_FORCE_RECOMPILE=1`).
    /// Within one process, a library compiled by this process is reused: the first forced
    /// request compiles, later ones find it in memory.
    pub force_recompile: bool,
    /// Print the generated source and its path to stderr (also `OVL_DUMP_SOURCE=1`) when the
    /// operator is compiled (before the compiler runs, so also when it fails) or loaded from the
    /// on-disk cache; not on in-memory hits, so that a loop of evaluations prints each operator
    /// once.
    pub dump_source: bool,
    /// Use this C++ compiler instead of the one `cc` finds (`$CXX`, else `c++`).
    pub compiler: Option<PathBuf>,
    /// Flags appended to [`crate::compiler_flags`] (part of the cache key).
    pub extra_flags: Vec<String>,
    /// The instruction sets the generated code may use (`None`: the process's setting,
    /// `OVL_CPU_ISA`; see [`ovl_ir::isa`]). Part of the cache key, through the compiler flags
    /// and the CPU features.
    pub isa: Option<ovl_ir::isa::CpuIsa>,
}

impl CompileOptions {
    /// The default options.
    pub fn new() -> CompileOptions {
        CompileOptions::default()
    }

    /// The same options with another cache root.
    pub fn with_cache_dir(mut self, dir: impl Into<PathBuf>) -> CompileOptions {
        self.cache_dir = Some(dir.into());
        self
    }

    /// The same options, forcing recompilation or not.
    pub fn with_force_recompile(mut self, force: bool) -> CompileOptions {
        self.force_recompile = force;
        self
    }

    /// The same options, printing the generated source or not.
    pub fn with_dump_source(mut self, dump: bool) -> CompileOptions {
        self.dump_source = dump;
        self
    }

    /// The same options with another C++ compiler.
    pub fn with_compiler(mut self, compiler: impl Into<PathBuf>) -> CompileOptions {
        self.compiler = Some(compiler.into());
        self
    }

    /// The same options with one more compiler flag.
    pub fn with_extra_flag(mut self, flag: impl Into<String>) -> CompileOptions {
        self.extra_flags.push(flag.into());
        self
    }

    /// The same options, compiling for `isa` whatever `OVL_CPU_ISA` says.
    pub fn with_isa(mut self, isa: ovl_ir::isa::CpuIsa) -> CompileOptions {
        self.isa = Some(isa);
        self
    }

    /// The instruction sets to compile for: [`CompileOptions::isa`], else `OVL_CPU_ISA`'s
    /// (an unknown value of it is an error).
    pub fn resolved_isa(&self) -> Result<ovl_ir::isa::CpuIsa, ovl_ir::isa::IsaError> {
        match self.isa {
            Some(isa) => Ok(isa),
            None => ovl_ir::isa::from_env(),
        }
    }
}
