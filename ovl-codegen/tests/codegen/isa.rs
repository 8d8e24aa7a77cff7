//! `OVL_CPU_ISA` and the C++ backend: held to AVX2, operators compile with other flags, under
//! another cache key, into code without AVX-512 instructions, and compute the same bits.

use crate::common::{bits, run, TestCache};
use ovl_codegen::cpu::compiler::{compiler_flags_for, cpu_target_for};
use ovl_ir::isa::CpuIsa;
use ovl_runtime::compile_with_outcome;
use ovl_runtime::cpu::cache::target_key;

#[test]
fn avx2_compiles_without_avx512_under_its_own_key() {
    let (native, avx2) = (
        compiler_flags_for(CpuIsa::Native),
        compiler_flags_for(CpuIsa::Avx2),
    );
    #[cfg(target_arch = "x86_64")]
    {
        assert!(avx2.iter().any(|f| f == "-mno-avx512f"), "{avx2:?}");
        assert!(avx2.iter().any(|f| f == "-march=native"), "{avx2:?}");
    }
    assert!(!native.iter().any(|f| f.starts_with("-mno-")), "{native:?}");
    let (cpu_native, cpu_avx2) = (cpu_target_for(CpuIsa::Native), cpu_target_for(CpuIsa::Avx2));
    assert!(!cpu_avx2.contains("avx512"), "{cpu_avx2}");
    assert_ne!(cpu_native, cpu_avx2);
    #[cfg(target_arch = "x86_64")]
    assert_eq!(
        cpu_native.contains("+avx512f"),
        std::arch::is_x86_feature_detected!("avx512f")
    );

    let cache = TestCache::new();
    let fixtures: Vec<_> = ovl_ir::fixtures::all()
        .into_iter()
        .filter(|f| {
            [
                "reductions",
                "column_stats",
                "math_f32",
                "math_f64",
                "fma",
                "stencil",
            ]
            .contains(&f.name)
        })
        .collect();
    assert_eq!(fixtures.len(), 6);
    let mut zmm = Vec::new();
    for f in &fixtures {
        let inputs: Vec<_> = f.inputs.iter().collect();
        let mut outputs = Vec::new();
        let mut keys = Vec::new();
        for isa in [CpuIsa::Native, CpuIsa::Avx2] {
            let options = cache.options().with_isa(isa);
            keys.push(target_key(&f.dag, &options));
            let (op, _) = compile_with_outcome(&f.dag, &options)
                .unwrap_or_else(|e| panic!("{}: {isa:?}: {e}", f.name));
            keys.push(op.cache_key().to_string());
            outputs.push(run(&op, &f.dag, &inputs, 2).expect("runs"));
            let uses = mentions_zmm(op.library_path());
            if isa == CpuIsa::Avx2 {
                zmm.push((f.name, uses));
            } else {
                eprintln!(
                    "{}: the native build uses AVX-512 registers: {uses:?}",
                    f.name
                );
            }
        }
        assert_ne!(keys[0], keys[2], "{}: target keys", f.name);
        assert_ne!(keys[1], keys[3], "{}: cache keys", f.name);
        for (k, (a, b)) in outputs[0].iter().zip(&outputs[1]).enumerate() {
            assert_eq!(bits(a), bits(b), "{}: output {k}", f.name);
        }
    }
    for (name, zmm) in zmm {
        match zmm {
            Some(found) => assert!(!found, "{name}: the AVX2 build uses AVX-512 registers"),
            None => eprintln!("DID NOT RUN: objdump is not on PATH; {name}'s code not checked"),
        }
    }
}

/// Whether the disassembly of `library` names an AVX-512 register (`zmm`, or a mask register
/// `k1`-`k7` as an operand); `None` without objdump.
fn mentions_zmm(library: &std::path::Path) -> Option<bool> {
    let out = std::process::Command::new("objdump")
        .arg("-d")
        .arg(library)
        .output()
        .ok()?;
    assert!(out.status.success(), "objdump -d {}", library.display());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ovl_"), "a disassembly of the operator");
    Some(text.contains("%zmm") || (1..8).any(|k| text.contains(&format!("{{%k{k}}}"))))
}

#[test]
fn an_unknown_setting_is_an_error_that_names_it() {
    let e = ovl_ir::isa::CpuIsa::parse("sse9").unwrap_err();
    let message = ovl_codegen::CodegenError::from(e).to_string();
    assert!(message.contains("OVL_CPU_ISA=\"sse9\""), "{message}");
    assert!(message.contains("C++ compiler's target"), "{message}");
}
