//! Extreme inputs end with errors that blame the right party, never with an abort (issue 31):
//! buffers too large to allocate (asked for, refused by the allocator, never touched), shapes
//! whose sizes overflow, and a cache directory that is a regular file.

use ndarray::array;
use ovl::prelude::*;
use ovl_core::{AllocError, DType, HostTensor};

const HUGE: usize = 1 << 40;

/// One worker writes element 0 of a 2^40-element output (4 TiB of f32).
#[operator]
fn huge_output(x: Tensor<f32>) -> Tensor<f32> {
    let _ = position_in([1]);
    let out = output::<f32>([HUGE]);
    out[[0]] = x[[0]];
    out
}

/// 2^40 workers, one per element of its output.
#[operator]
fn huge_workgroup(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in([HUGE])[0];
    let out = output::<f32>([HUGE]);
    out[[i]] = x[[0]];
    out
}

/// An output whose element count does not fit 64 bits.
#[operator]
fn overflowing_output(x: Tensor<f32>) -> Tensor<f32> {
    let _ = position_in([1]);
    let out = output::<f32>([1usize << 32, 1usize << 32]);
    out[[0, 0]] = x[[0]];
    out
}

fn targets() -> [(&'static str, Options); 2] {
    [
        ("interpreter", Options::interpreter()),
        ("C++", Options::cpu()),
    ]
}

fn out_of_memory(what: &str, e: ovl::Error) -> AllocError {
    match e {
        ovl::Error::OutOfMemory(a) => a,
        other => panic!("{what}: expected an out-of-memory error, got {other}"),
    }
}

#[test]
fn an_output_too_large_to_allocate_is_an_error() {
    for (name, options) in targets() {
        let what = format!("huge_output on the {name}");
        let e = ovl::evaluate_with(&huge_output(&array![1.0f32]), &options).expect_err(&what);
        let message = e.to_string();
        let a = out_of_memory(&what, e);
        assert_eq!(
            (a.dtype, a.shape.as_slice()),
            (DType::F32, &[HUGE as u64][..])
        );
        assert_eq!(a.bytes(), Some(4 << 40));
        assert!(
            message.contains("out of memory") && message.contains("4398046511104 bytes"),
            "{what}: {message}"
        );
    }
}

#[test]
fn a_workgroup_of_2_to_the_40_workers_is_an_error() {
    for (name, options) in targets() {
        let what = format!("huge_workgroup on the {name}");
        let e = ovl::evaluate_with(&huge_workgroup(&array![1.0f32]), &options).expect_err(&what);
        assert_eq!(out_of_memory(&what, e).shape, vec![HUGE as u64], "{what}");
    }
}

#[test]
fn broadcasting_to_2_to_the_40_elements_is_an_error() {
    for (name, options) in targets() {
        let what = format!("broadcast_to on the {name}");
        let y = ovl_stdlib::broadcast_to(array![1.0f32], &[HUGE]);
        let e = ovl::evaluate_with(&y, &options).expect_err(&what);
        assert_eq!(out_of_memory(&what, e).shape, vec![HUGE as u64], "{what}");
    }
}

#[test]
fn a_huge_local_tensor_is_an_interpreter_error() {
    use ovl_core::builder::Builder;
    use ovl_core::ir::TensorKind;
    // A hand-built operator (the DSL limits locals to 64 KiB) with a 2^40-element local:
    // out[i] = x[i], the local declared and filled but never used.
    let mut b = Builder::new("huge_local", &[4]);
    b.input(DType::F32, &[4]);
    b.output(DType::F32, &[4]);
    b.local(DType::F32, &[HUGE as u64], ovl_core::Literal::Float(0.0));
    let i = b.position(0);
    let v = b.read(TensorKind::Input, 0, &[i]);
    b.write(TensorKind::Output, 0, &[i], v);
    let dag = b.build();
    let x = HostTensor::from_vec(&[4], vec![1.0f32; 4]).unwrap();
    let mut out = vec![HostTensor::zeros(DType::F32, &[4])];
    match ovl_core::interp::interpret(&dag, &[&x], &mut out) {
        Err(ovl_core::interp::InterpError::OutOfMemory { operator, source }) => {
            assert_eq!(operator, dag.name);
            assert_eq!(source.shape, vec![HUGE as u64]);
        }
        other => panic!("expected an out-of-memory error, got {other:?}"),
    }
}

#[test]
fn an_output_whose_size_overflows_names_the_shape_and_the_limit() {
    for (name, options) in targets() {
        let what = format!("overflowing_output on the {name}");
        let e =
            ovl::evaluate_with(&overflowing_output(&array![1.0f32]), &options).expect_err(&what);
        let ovl::Error::Trace(t) = &e else {
            panic!("{what}: expected a trace error, got {e}")
        };
        let message = t.to_string();
        assert!(
            message.contains("[4294967296, 4294967296]")
                && message.contains(&isize::MAX.to_string())
                && !message.contains("bug in ovl"),
            "{what}: {message}"
        );
    }
}

#[test]
fn from_vec_refuses_a_shape_whose_element_count_overflows() {
    assert_eq!(
        HostTensor::from_vec(&[1 << 32, 1 << 32], Vec::<f32>::new()),
        None
    );
    assert_eq!(HostTensor::from_vec(&[1 << 63, 2], Vec::<u8>::new()), None);
    assert!(HostTensor::from_vec(&[2, 0], Vec::<u8>::new()).is_some());
    let e = HostTensor::try_zeros(DType::F64, &[1 << 32, 1 << 32]).unwrap_err();
    assert_eq!(e.bytes(), None);
    assert!(e.to_string().contains("more than 2^64 bytes"), "{e}");
}

#[test]
fn a_cache_directory_that_is_a_file_is_reported_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"a file").unwrap();
    let options = Options {
        cache_dir: Some(file.clone()),
        ..Options::cpu()
    };
    let e = ovl::evaluate_with(&huge_output(&array![1.0f32]), &options).expect_err("a file");
    match &e {
        ovl::Error::Codegen(ovl_codegen::CodegenError::CacheNotADirectory { path }) => {
            assert_eq!(path, &file)
        }
        other => panic!("expected CacheNotADirectory, got {other}"),
    }
    let message = e.to_string();
    assert!(
        message.contains("is not a directory")
            && message.contains("OVL_CACHE_DIR")
            && !message.contains("damaged"),
        "{message}"
    );
}

/// Walks while `x[0]` is non-negative, which on such data never ends; counts its steps.
#[operator]
fn runaway(x: Tensor<f32>, steps: Tensor<i64>) -> Tensor<i64> {
    let _ = position_in([1]);
    let out = output::<i64>([1]);
    let mut j = variable(0i64);
    while x[[0]] >= 0.0 && j != steps[[0]] {
        j += 1;
    }
    out[[0]] = j;
    out
}

fn bounded(options: Options, limit: u64) -> Options {
    Options {
        max_while_iterations: Some(limit),
        ..options
    }
}

#[test]
fn a_while_loop_past_its_bound_ends_with_an_error_naming_the_loop() {
    for (name, options) in targets() {
        let what = format!("runaway on the {name}");
        let options = bounded(options, 1000);
        // -1: the loop ends only when x[0] < 0, so never on this data.
        let e = ovl_testkit::without_hang(&what, move || {
            ovl::evaluate_with(&runaway(&array![1.0f32], &array![-1i64]), &options)
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        let message = e.expect_err(&what);
        assert!(
            message.contains("operator `runaway`")
                && message.contains("while loop %")
                && message.contains("1000 times")
                && message.contains("OVL_MAX_WHILE_ITERATIONS"),
            "{what}: {message}"
        );
    }
}

#[test]
fn the_while_bound_is_typed_exact_and_can_be_lifted() {
    for (name, options) in targets() {
        let what = format!("runaway on the {name}");
        // Exactly at the bound: runs.
        let got = ovl::evaluate_with(
            &runaway(&array![1.0f32], &array![1000i64]),
            &bounded(options.clone(), 1000),
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(got, array![1000i64].into_dyn(), "{what}");
        // One past it: the typed fault.
        let e = ovl::evaluate_with(
            &runaway(&array![1.0f32], &array![1001i64]),
            &bounded(options.clone(), 1000),
        )
        .expect_err(&what);
        match e {
            ovl::Error::Interpreter(ovl_core::interp::InterpError::WhileLimit(fault))
            | ovl::Error::Run(ovl_codegen::RunError::WhileLimit(fault)) => assert_eq!(
                (fault.operator.as_str(), fault.limit, fault.position),
                ("runaway", 1000, vec![0])
            ),
            other => panic!("{what}: expected WhileLimit, got {other}"),
        }
        // No bound (0) and the default bound: a long loop runs.
        for options in [bounded(options.clone(), 0), options.clone()] {
            let got = ovl::evaluate_with(&runaway(&array![1.0f32], &array![5000i64]), &options)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(got, array![5000i64].into_dyn(), "{what}");
        }
    }
}
