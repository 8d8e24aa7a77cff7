//! The program runner shared by `run_program` and the TensorFlow bridge (`LoadedProgram`): raw
//! caller buffers, intermediates, outputs requested twice and passed-through feeds.

use crate::cumsum;

use cumsum::cumsum_rows;
use ovl::prelude::*;
use ovl::program::{LoadedProgram, ProgramError, ProgramMismatch};
use ovl_core::{DType, HostTensor};
use std::ffi::c_void;

fn options(target: Options) -> Options {
    match std::env::var_os("OVL_CACHE_DIR") {
        Some(dir) => Options {
            cache_dir: Some(dir.into()),
            ..target
        },
        None => target,
    }
}

/// Two kernels (a cumsum does not fuse into a cumsum); the intermediate is requested twice and
/// the feed once: written in place, copied, and copied from the feed.
fn exported() -> Vec<u8> {
    let x = ovl::placeholder::<f32>("x", &[2, 3]);
    let c1 = cumsum_rows(&x);
    let c2 = cumsum_rows(&c1);
    let bundle = ovl::as_tensorflow(&x, (&c2, &c1, &c1, &x))
        .options(&Options::interpreter())
        .build()
        .unwrap();
    ovl::program::seal_program(&bundle.program)
}

const INPUT: [f32; 6] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
const C1: [f32; 6] = [1.0, 3.0, 6.0, 4.0, 9.0, 15.0];
const C2: [f32; 6] = [1.0, 4.0, 10.0, 4.0, 13.0, 28.0];

/// What does not fit, for a mismatch error.
fn problem(e: &ProgramError) -> Option<&ProgramMismatch> {
    match e {
        ProgramError::Mismatch { problem, .. } => Some(problem),
        _ => None,
    }
}

#[test]
fn runs_on_caller_buffers_with_intermediates_copies_and_passthrough() {
    for target in [Options::default(), Options::interpreter()] {
        let program = LoadedProgram::load(&exported(), &options(target)).unwrap();
        assert_eq!(program.kernel_count(), 2);
        assert_eq!(program.outputs.len(), 4);
        program.check_feed(0, DType::F32, &[2, 3]).unwrap();
        let e = program.check_feed(0, DType::F32, &[3, 2]).unwrap_err();
        match problem(&e) {
            Some(ProgramMismatch::InputType {
                input: 0,
                name,
                given,
                exported,
            }) => assert_eq!(
                (name.as_str(), given.as_str(), exported.as_str()),
                ("x", "float32[3, 2]", "float32[2, 3]")
            ),
            _ => panic!("not an input type mismatch: {e}"),
        }
        let e = program.check_feed(1, DType::F32, &[2, 3]).unwrap_err();
        assert_eq!(
            problem(&e),
            Some(&ProgramMismatch::NoSuchInput { input: 1 }),
            "{e}"
        );
        let mut outs = vec![[f32::NAN; 6]; 4];
        let out_ptrs: Vec<*mut c_void> = outs.iter_mut().map(|o| o.as_mut_ptr().cast()).collect();
        // SAFETY: each buffer holds the 6 f32 of its declared type.
        unsafe { program.run(&[INPUT.as_ptr().cast()], &out_ptrs, 0) }.unwrap();
        assert_eq!(outs, vec![C2, C1, C1, INPUT]);
    }
}

#[test]
fn runs_on_host_tensors_like_run_program() {
    let x = HostTensor::from_vec(&[2, 3], INPUT.to_vec()).unwrap();
    let want: Vec<HostTensor> = [C2, C1, C1, INPUT]
        .iter()
        .map(|v| HostTensor::from_vec(&[2, 3], v.to_vec()).unwrap())
        .collect();
    let program = LoadedProgram::load(&exported(), &options(Options::default())).unwrap();
    assert_eq!(program.run_host(&[&x], 0).unwrap(), want);
    let decoded = ovl::program::open_program(&exported(), "the test program").unwrap();
    let got = ovl::program::run_program(&decoded, vec![x], &options(Options::default())).unwrap();
    assert_eq!(got, want);
}

#[test]
fn wrong_feeds_are_mismatch_errors() {
    let program = LoadedProgram::load(&exported(), &options(Options::default())).unwrap();
    let y = HostTensor::from_vec(&[3, 2], INPUT.to_vec()).unwrap();
    let e = program.run_host(&[&y], 0).unwrap_err();
    assert!(
        matches!(
            problem(&e),
            Some(ProgramMismatch::InputType { input: 0, .. })
        ),
        "{e}"
    );
    let e = program.run_host(&[], 0).unwrap_err();
    assert_eq!(
        problem(&e),
        Some(&ProgramMismatch::Counts {
            inputs: 0,
            outputs: 4,
            program_inputs: 1,
            program_outputs: 4
        }),
        "{e}"
    );
    // The text TensorFlow users read (the Python tests match it).
    assert!(
        e.to_string()
            .ends_with("`: 0 inputs and 4 outputs given, the program has 1 and 4"),
        "{e}"
    );
}

#[test]
fn garbage_is_reported_as_a_modified_program() {
    let e = LoadedProgram::load(&[0xff, 0x01, 0x02], &Options::default()).unwrap_err();
    assert!(matches!(e, ProgramError::Modified(_)), "{e}");
    assert!(
        e.to_string()
            .starts_with("the `program` attribute: the program was modified or corrupted"),
        "{e}"
    );
}

#[test]
fn every_single_bit_flip_is_refused_before_decoding() {
    let x = ovl::placeholder::<f32>("x", &[2, 3]);
    let bundle = ovl::as_tensorflow(&x, cumsum_rows(&x))
        .options(&Options::interpreter())
        .build()
        .unwrap();
    let sealed = ovl::program::seal_program(&bundle.program);
    let options = options(Options::interpreter());
    assert!(LoadedProgram::load(&sealed, &options).is_ok());
    for bit in 0..sealed.len() * 8 {
        let mut flipped = sealed.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        let e = LoadedProgram::load(&flipped, &options).unwrap_err();
        assert!(matches!(e, ProgramError::Modified(_)), "bit {bit}: {e}");
        assert!(
            e.to_string()
                .contains("the program was modified or corrupted"),
            "bit {bit}: {e}"
        );
    }
}

/// The error of planning `dag` (which must not plan).
fn plan_error(dag: ovl_core::ir::OperatorDag) -> ovl::runner::PlanError {
    match ovl::runner::Plan::new(std::sync::Arc::new(dag)) {
        Err(e) => e,
        Ok(_) => panic!("a malformed graph was planned"),
    }
}

#[test]
fn malformed_wiring_is_a_typed_plan_error() {
    use ovl::runner::{PlanError, Wiring};
    let program = ovl::program::open_program(&exported(), "the test program").unwrap();
    let graph = program.graph.unwrap();

    let mut dag = graph.clone();
    dag.operator_inputs.pop();
    assert_eq!(plan_error(dag), PlanError::Wiring(Wiring::OperatorCount));

    let mut dag = graph.clone();
    let takes = dag.operators[1].inputs.len();
    let first = dag.operator_inputs[1].inputs[0];
    dag.operator_inputs[1].inputs.push(first);
    match plan_error(dag) {
        PlanError::Wiring(Wiring::InputCount {
            operator: 1,
            takes: t,
            wired,
            ..
        }) => assert_eq!((t, wired), (takes, takes + 1)),
        e => panic!("not an input count: {e}"),
    }

    let mut dag = graph;
    dag.outputs[0].source = None;
    assert_eq!(
        plan_error(dag),
        PlanError::Wiring(Wiring::NoSource { output: 0 })
    );
}
