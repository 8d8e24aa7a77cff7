//! The instruction sets ovl uses on an x86-64 CPU, and the one switch that holds it to fewer.
//!
//! `OVL_CPU_ISA` in the environment (read once per process) says which vector instructions ovl
//! may use, everywhere at once: its run-time dispatch (the GEMM kernels, the transposing copy
//! of the layout conversions) and the C++ compiler's target for generated operators
//! (`ovl_codegen`'s flags and the CPU features of the operator cache's key).
//!
//! - unset, empty or `native`: everything this CPU has (AVX-512 where present);
//! - `avx2`: at most AVX2 + FMA, as on a CPU without AVX-512 (the code paths of most laptops,
//!   desktops and many cloud instances, measurable on an AVX-512 machine). On a CPU without
//!   AVX2 it changes nothing: ovl never uses what the CPU lacks.
//!
//! Any other value is [`IsaError`]: compiling an operator reports it, and the run-time
//! dispatch, which cannot fail, uses what the CPU has meanwhile.

/// The environment variable that holds ovl to an instruction set.
pub const ENV: &str = "OVL_CPU_ISA";

/// Which vector instructions ovl may use on the CPU (see the module's documentation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CpuIsa {
    /// Everything the CPU has.
    #[default]
    Native,
    /// At most AVX2 and FMA: no AVX-512.
    Avx2,
}

/// An `OVL_CPU_ISA` value ovl does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{ENV}={value:?} names no instruction set ovl knows: set it to `avx2` (at most AVX2 + FMA, \
     no AVX-512) or `native` (everything this CPU has), or unset it"
)]
pub struct IsaError {
    /// The value found.
    pub value: String,
}

impl CpuIsa {
    /// The setting `value` names (case and surrounding spaces ignored; empty: `Native`).
    pub fn parse(value: &str) -> Result<CpuIsa, IsaError> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "native" => Ok(CpuIsa::Native),
            "avx2" => Ok(CpuIsa::Avx2),
            _ => Err(IsaError {
                value: value.to_string(),
            }),
        }
    }

    /// The name `OVL_CPU_ISA` takes for this setting.
    pub fn name(self) -> &'static str {
        match self {
            CpuIsa::Native => "native",
            CpuIsa::Avx2 => "avx2",
        }
    }

    /// Whether ovl may use AVX-512F (and so its own AVX-512 kernels) under this setting: the
    /// CPU has it and the setting allows it.
    pub fn avx512f(self) -> bool {
        self == CpuIsa::Native && detected::avx512f()
    }

    /// Whether ovl may use AVX-512F and DQ under this setting.
    pub fn avx512dq(self) -> bool {
        self.avx512f() && detected::avx512dq()
    }

    /// Whether ovl may use AVX2 and FMA (the CPU has both; every setting allows them).
    pub fn avx2_fma(self) -> bool {
        detected::avx2_fma()
    }
}

/// The process's setting: `OVL_CPU_ISA`, read once.
pub fn from_env() -> Result<CpuIsa, IsaError> {
    static SETTING: std::sync::OnceLock<Result<CpuIsa, IsaError>> = std::sync::OnceLock::new();
    SETTING
        .get_or_init(|| CpuIsa::parse(&std::env::var(ENV).unwrap_or_default()))
        .clone()
}

/// The process's setting for the run-time dispatch: [`from_env`], or `Native` where the value
/// is not one ovl knows (compiling an operator reports that).
pub fn process() -> CpuIsa {
    from_env().unwrap_or_default()
}

/// What the CPU has, detected once.
mod detected {
    #[cfg(target_arch = "x86_64")]
    pub(super) fn avx512f() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(target_arch = "x86_64")]
    pub(super) fn avx512dq() -> bool {
        std::arch::is_x86_feature_detected!("avx512dq")
    }
    #[cfg(target_arch = "x86_64")]
    pub(super) fn avx2_fma() -> bool {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    pub(super) fn avx512f() -> bool {
        false
    }
    #[cfg(not(target_arch = "x86_64"))]
    pub(super) fn avx512dq() -> bool {
        false
    }
    #[cfg(not(target_arch = "x86_64"))]
    pub(super) fn avx2_fma() -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_and_unknown_ones_are_errors() {
        assert_eq!(CpuIsa::parse("avx2"), Ok(CpuIsa::Avx2));
        assert_eq!(CpuIsa::parse(" AVX2 \n"), Ok(CpuIsa::Avx2));
        assert_eq!(CpuIsa::parse("native"), Ok(CpuIsa::Native));
        assert_eq!(CpuIsa::parse(""), Ok(CpuIsa::Native));
        let e = CpuIsa::parse("avx512").unwrap_err();
        assert_eq!(e.value, "avx512");
        let message = e.to_string();
        assert!(message.contains("OVL_CPU_ISA=\"avx512\""), "{message}");
        assert!(message.contains("`avx2`"), "{message}");
        for isa in [CpuIsa::Native, CpuIsa::Avx2] {
            assert_eq!(CpuIsa::parse(isa.name()), Ok(isa));
        }
    }

    #[test]
    fn avx2_never_allows_avx512() {
        assert!(!CpuIsa::Avx2.avx512f());
        assert!(!CpuIsa::Avx2.avx512dq());
        assert_eq!(CpuIsa::Avx2.avx2_fma(), CpuIsa::Native.avx2_fma());
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            CpuIsa::Native.avx512f(),
            std::arch::is_x86_feature_detected!("avx512f")
        );
    }
}
