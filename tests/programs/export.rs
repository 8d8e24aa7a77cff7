//! Exporting for TensorFlow (`ovl::as_tensorflow`): placeholders, the program's feeds and
//! constants, fusion, the gradient program, the bundle file, and the errors.

use ovl::prelude::*;
use ovl::program::{
    check_program, open_program, run_program, seal_program, MalformedProgram, SealError,
};
use ovl::{Error, ExportError, HostTensor};

#[operator]
fn axpy(x: Tensor<f32>, y: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = 3.0 * x[[i]] + y[[i]];
    out
}

#[operator]
fn negate(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = -x[[i]];
    out
}

fn host(values: &[f32]) -> HostTensor {
    HostTensor::from_vec(&[values.len()], values.to_vec()).unwrap()
}

fn test_options() -> Options {
    let mut o = Options::cpu();
    o.cache_dir = Some(
        std::env::var_os("OVL_CACHE_DIR")
            .map(Into::into)
            .unwrap_or_else(|| std::env::temp_dir().join("ovl-export-test-cache")),
    );
    o
}

#[test]
fn exported_program_runs_like_evaluate_with_constants_baked_in() {
    let x = ovl::placeholder::<f32>("x", &[4]);
    let c = ndarray::array![10.0f32, 20.0, 30.0, 40.0];
    let y = negate(axpy(&x, &c));
    let bundle = ovl::as_tensorflow(&x, &y).name("neg_axpy").build().unwrap();
    let program = &bundle.program;
    check_program(program).unwrap();
    assert_eq!(program.name, "neg_axpy");
    assert_eq!(program.feeds.len(), 1);
    assert_eq!(program.feeds[0].name, "x");
    assert_eq!(program.constants.len(), 1);
    // axpy and negate are merged into one kernel.
    assert_eq!(bundle.kernel_count(), 1);

    let xs = [1.0f32, -2.0, 0.5, 4.0];
    let want = evaluate_with(
        negate(axpy(ndarray::arr1(&xs), &c)),
        &Options::interpreter(),
    )
    .unwrap();
    for options in [Options::interpreter(), test_options()] {
        let got = run_program(program, vec![host(&xs)], &options).unwrap();
        assert_eq!(got, vec![host(want.as_slice().unwrap())]);
    }
}

#[test]
fn feeds_follow_the_order_given_and_may_be_unused() {
    let (a, b, unused) = (
        ovl::placeholder::<f32>("a", &[3]),
        ovl::placeholder::<f32>("b", &[3]),
        ovl::placeholder::<i32>("unused", &[2]),
    );
    let y = axpy(&b, &a);
    let bundle = ovl::as_tensorflow((&unused, &b, &a), &y)
        .options(&Options::interpreter())
        .build()
        .unwrap();
    let names: Vec<&str> = bundle
        .program
        .feeds
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(names, ["unused", "b", "a"]);
    assert_eq!(bundle.program.feeds[0].graph_input, None);
    let ints = HostTensor::from_vec(&[2], vec![0i32, 0]).unwrap();
    let got = run_program(
        &bundle.program,
        vec![ints, host(&[1.0, 2.0, 3.0]), host(&[1.0, 1.0, 1.0])],
        &Options::interpreter(),
    )
    .unwrap();
    assert_eq!(got, vec![host(&[4.0, 7.0, 10.0])]);
}

#[test]
fn a_graph_with_placeholders_cannot_be_evaluated() {
    let x = ovl::placeholder::<f32>("x", &[2]);
    let e = evaluate_with(negate(&x), &Options::interpreter()).unwrap_err();
    assert!(
        matches!(&e, Error::Placeholder { name } if name == "x"),
        "{e}"
    );
    assert!(e.to_string().contains("as_tensorflow"), "{e}");
}

#[test]
fn export_errors_name_the_problem() {
    let x = ovl::placeholder::<f32>("x", &[2]);
    let other = ovl::placeholder::<f32>("other", &[2]);
    let interp = Options::interpreter();
    let message = |r: Result<ovl::Bundle, Error>| match r {
        Err(e @ Error::Export { .. }) => e.to_string(),
        other => panic!("expected an export error, got {other:?}"),
    };

    let host_input = ndarray::array![1.0f32, 2.0];
    let m = message(
        ovl::as_tensorflow(Lazy::from(host_input), negate(&x))
            .options(&interp)
            .build(),
    );
    assert!(m.contains("is not a placeholder"), "{m}");

    let m = message(
        ovl::as_tensorflow(&x, axpy(&x, &other))
            .options(&interp)
            .build(),
    );
    assert!(
        m.contains("placeholder `other`, which is not among the inputs"),
        "{m}"
    );

    let m = message(
        ovl::as_tensorflow((&x, &x), negate(&x))
            .options(&interp)
            .build(),
    );
    assert!(m.contains("listed twice"), "{m}");

    let dy = ovl::placeholder::<f32>("dy", &[3]);
    let m = message(
        ovl::as_tensorflow(&x, negate(&x))
            .gradient(&dy, negate(&dy))
            .options(&interp)
            .build(),
    );
    assert!(
        m.contains("upstream gradient 0 is f32[3], but output 0 is f32[2]"),
        "{m}"
    );

    let dy = ovl::placeholder::<f32>("dy", &[2]);
    let m = message(
        ovl::as_tensorflow(&x, negate(&x))
            .gradient(&dy, (negate(&dy), negate(&dy)))
            .options(&interp)
            .build(),
    );
    assert!(
        m.contains("2 input gradient(s) given for 1 input(s)"),
        "{m}"
    );
}

#[test]
fn gradient_program_is_fed_the_inputs_then_the_upstream_gradients() {
    let x = ovl::placeholder::<f32>("x", &[3]);
    let y = ovl::placeholder::<f32>("y", &[3]);
    let dz = ovl::placeholder::<f32>("dz", &[3]);
    // z = 3x + y: dx = 3 dz (+ a constant zero), dy = dz.
    let dx = axpy(&dz, ndarray::Array1::<f32>::zeros(3));
    let bundle = ovl::as_tensorflow((&x, &y), axpy(&x, &y))
        .gradient(&dz, (&dx, &dz))
        .options(&Options::interpreter())
        .build()
        .unwrap();
    let grad = bundle.gradient.as_ref().unwrap();
    let names: Vec<&str> = grad.feeds.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["x", "y", "dz"]);
    assert_eq!(grad.name, "axpy_grad");
    let ones = host(&[1.0, 2.0, -1.0]);
    let got = run_program(
        grad,
        vec![host(&[0.0; 3]), host(&[0.0; 3]), ones.clone()],
        &Options::interpreter(),
    )
    .unwrap();
    // dy is a feed passed straight through.
    assert_eq!(got, vec![host(&[3.0, 6.0, -3.0]), ones]);
    assert_eq!(grad.constants.len(), 1);
}

#[test]
fn bundle_json_describes_feeds_outputs_and_programs() {
    let flat = ovl::placeholder::<f32>("flat", &[2]);
    let bundle = ovl::as_tensorflow(&flat, negate(&flat))
        .name("neg")
        .options(&Options::interpreter())
        .build()
        .unwrap();
    let json: serde_json::Value = serde_json::from_str(&bundle.to_json()).unwrap();
    assert_eq!(json["format"], ovl::export::BUNDLE_FORMAT);
    assert_eq!(json["version"], ovl::export::BUNDLE_VERSION);
    assert_eq!(json["name"], "neg");
    assert_eq!(json["kernels"], 1);
    assert_eq!(
        json["inputs"],
        serde_json::json!([{"name": "flat", "dtype": "float32", "shape": [2]}])
    );
    assert_eq!(
        json["outputs"],
        serde_json::json!([{"dtype": "float32", "shape": [2]}])
    );
    // The program is sealed: header, digest, protobuf bytes.
    let sealed = base64_decode(json["program"].as_str().unwrap());
    assert!(sealed.starts_with(ovl::program::SEALED_PROGRAM_HEADER));
    assert_eq!(sealed, seal_program(&bundle.program));
    assert_eq!(open_program(&sealed, "neg.json").unwrap(), bundle.program);
    assert!(json["gradient"].is_null());

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("neg.json");
    bundle.write(&path).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), bundle.to_json());
    let e = bundle
        .write(dir.path().join("missing/neg.json"))
        .unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
}

#[test]
fn corrupt_programs_are_rejected() {
    let x = ovl::placeholder::<f32>("x", &[2]);
    let c = ndarray::array![1.0f32, 2.0];
    let good = ovl::as_tensorflow(&x, axpy(&x, &c))
        .options(&Options::interpreter())
        .build()
        .unwrap()
        .program;
    let mut p = good.clone();
    p.constants[0].data.pop();
    let e = check_program(&p).unwrap_err();
    assert!(
        matches!(
            e,
            MalformedProgram::ConstantLength {
                holds: 7,
                needs: 8,
                ..
            }
        ),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("holds 7 bytes, its type f32[2] needs 8"),
        "{e}"
    );
    // A receiver refuses it with the same typed reason.
    let e = ovl::program::LoadedProgram::new(p, &Options::interpreter()).unwrap_err();
    assert!(
        matches!(
            e,
            ovl::program::ProgramError::Corrupt(MalformedProgram::ConstantLength {
                holds: 7,
                needs: 8,
                ..
            })
        ),
        "{e}"
    );
    let mut p = good.clone();
    p.constants.clear();
    let e = check_program(&p).unwrap_err();
    assert!(
        matches!(e, MalformedProgram::Supplied { supplied: 0, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("not supplied"), "{e}");
    let mut p = good.clone();
    p.version = 99;
    assert!(matches!(
        check_program(&p).unwrap_err(),
        MalformedProgram::Version { found: 99, .. }
    ));
    let mut p = good.clone();
    p.feeds[0].graph_input = Some(7);
    assert!(matches!(
        check_program(&p).unwrap_err(),
        MalformedProgram::NoSuchInput { input: 7, .. }
    ));
    // A graph output naming an operator that does not exist: the validator's typed error.
    let mut p = good;
    let graph = p.graph.as_mut().unwrap();
    let operators = graph.operators.len();
    graph.outputs[0].source = Some(ovl::ir::value_ref::Source::OpOutput(
        ovl::ir::OperatorOutput {
            operator: operators as u32,
            output: 0,
        },
    ));
    let e = check_program(&p).unwrap_err();
    assert!(
        matches!(&e, MalformedProgram::Invalid(v)
            if matches!(**v, ovl_core::validate::ValidationError::Graph { .. })),
        "{e}"
    );
}

/// The reasons an export fails are typed: a gradient tensor too many, or of another type.
#[test]
fn export_errors_are_typed() {
    let x = ovl::placeholder::<f32>("x", &[2]);
    let why = |r: Result<ovl::Bundle, Error>| match r {
        Err(Error::Export { why, .. }) => *why,
        other => panic!("expected an export error, got {other:?}"),
    };
    let dy = ovl::placeholder::<f32>("dy", &[2]);
    let e = why(ovl::as_tensorflow(&x, negate(&x))
        .gradient(&dy, (negate(&dy), negate(&dy)))
        .options(&Options::interpreter())
        .build());
    assert_eq!(
        e,
        ExportError::GradientCount {
            what: "input gradient",
            given: 2,
            of: "input",
            expected: 1
        }
    );
    let dy = ovl::placeholder::<f32>("dy", &[3]);
    let e = why(ovl::as_tensorflow(&x, negate(&x))
        .gradient(&dy, negate(&dy))
        .options(&Options::interpreter())
        .build());
    assert!(
        matches!(&e, ExportError::GradientType { what: "upstream gradient", index: 0, given, expected, .. }
            if given == "f32[3]" && expected == "f32[2]"),
        "{e}"
    );
    let none: &[Lazy<f32>] = &[];
    let e = why(ovl::as_tensorflow(&x, none)
        .options(&Options::interpreter())
        .build());
    assert_eq!(e, ExportError::NoOutput);
}

/// Standard base64 with padding (the bundle's encoding), decoded.
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let mut out = Vec::new();
    for chunk in text.as_bytes().chunks(4) {
        let digits: Vec<u8> = chunk
            .iter()
            .filter(|&&c| c != b'=')
            .map(|&c| value(c))
            .collect();
        let n = digits
            .iter()
            .enumerate()
            .fold(0u32, |n, (k, &d)| n | (u32::from(d) << (18 - 6 * k)));
        out.extend_from_slice(&n.to_be_bytes()[1..digits.len()]);
    }
    out
}

#[test]
fn every_single_bit_flip_of_a_sealed_program_is_refused() {
    let x = ovl::placeholder::<f32>("x", &[2]);
    let c = ndarray::array![1.0f32, 2.0];
    let dy = ovl::placeholder::<f32>("dy", &[2]);
    let bundle = ovl::as_tensorflow(&x, axpy(&x, &c))
        .gradient(&dy, negate(&dy))
        .options(&Options::interpreter())
        .build()
        .unwrap();
    for program in [&bundle.program, bundle.gradient.as_ref().unwrap()] {
        let sealed = seal_program(program);
        assert_eq!(&open_program(&sealed, "axpy.json").unwrap(), program);
        for bit in 0..sealed.len() * 8 {
            let mut flipped = sealed.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            let e = open_program(&flipped, "bundle \"axpy.json\" (program)").unwrap_err();
            let expected_kind = if bit / 8 < ovl::program::SEALED_PROGRAM_HEADER.len() {
                matches!(e, SealError::NoHeader { .. })
            } else {
                matches!(e, SealError::Digest { .. })
            };
            assert!(expected_kind, "bit {bit}: {e:?}");
            let message = e.to_string();
            assert!(
                message.starts_with(
                    "bundle \"axpy.json\" (program): the program was modified or corrupted: "
                ),
                "bit {bit}: {message}"
            );
        }
        // Cut short, or with its digest but not the protobuf bytes an ovl.ir.Program has.
        let header = ovl::program::SEALED_PROGRAM_HEADER.len();
        assert!(matches!(
            open_program(&sealed[..header + 5], "p"),
            Err(SealError::Truncated { len, .. }) if len == header + 5
        ));
        assert!(matches!(
            open_program(&sealed[..sealed.len() - 1], "p"),
            Err(SealError::Digest { .. })
        ));
    }
    let mut forged = ovl::program::SEALED_PROGRAM_HEADER.to_vec();
    let junk = [0xffu8, 0xff, 0xff];
    {
        use sha2::Digest as _;
        forged.extend_from_slice(&sha2::Sha256::digest(junk));
    }
    forged.extend_from_slice(&junk);
    let e = open_program(&forged, "p").unwrap_err();
    assert!(matches!(e, SealError::Decode { .. }), "{e:?}");
}

/// The `meta` of the C++ cache entry `key` under `root`.
fn entry_meta(root: &std::path::Path, key: &str) -> String {
    std::fs::read_to_string(root.join("v1/cpu").join(key).join("meta")).unwrap()
}

#[test]
fn embedded_libraries_run_without_compiling_fall_back_and_are_sealed() {
    use ovl::program::{LoadedProgram, ProgramError};
    let (x, y) = (
        ovl::placeholder::<f32>("x", &[6]),
        ovl::placeholder::<f32>("y", &[6]),
    );
    let dz = ovl::placeholder::<f32>("dz", &[6]);
    let exporter = tempfile::tempdir().unwrap();
    let mut options = Options::cpu();
    options.cache_dir = Some(exporter.path().to_path_buf());
    let bundle = ovl::as_tensorflow((&x, &y), negate(axpy(&x, &y)))
        .gradient(&dz, (&negate(&dz), &negate(&dz)))
        .options(&options)
        .embed_libraries(true)
        .build()
        .unwrap();
    let program = &bundle.program;
    assert_eq!(program.libraries.len(), bundle.kernel_count());
    let gradient = bundle.gradient.as_ref().unwrap();
    assert_eq!(gradient.libraries.len(), bundle.gradient_kernel_count());
    check_program(program).unwrap();

    let xs = host(&[1.0, -2.0, 0.5, 4.0, 0.0, -7.25]);
    let ys = host(&[10.0, 20.0, 30.0, 40.0, 50.0, 60.0]);
    let want = host(&[-13.0, -14.0, -31.5, -52.0, -50.0, -38.25]);
    let run = |sealed: &[u8]| -> (Result<Vec<HostTensor>, ProgramError>, tempfile::TempDir) {
        let receiver = tempfile::tempdir().unwrap();
        let mut options = Options::cpu();
        options.cache_dir = Some(receiver.path().to_path_buf());
        let out = LoadedProgram::load(sealed, &options).and_then(|p| p.run_host(&[&xs, &ys], 0));
        (out, receiver)
    };
    // The library is installed into the receiver's empty cache as the exporter's entry, not
    // compiled (a compiled entry's `meta` names the compiler).
    let (out, receiver) = run(&seal_program(program));
    assert_eq!(out.unwrap(), vec![want.clone()]);
    let meta = entry_meta(receiver.path(), &program.libraries[0].cache_key);
    assert!(meta.contains("embedded in an exported program"), "{meta}");

    // From "another machine" (another target key): compiled here, same results.
    let mut other = program.clone();
    for l in &mut other.libraries {
        l.target_key = "f".repeat(32);
    }
    let (out, receiver) = run(&seal_program(&other));
    assert_eq!(out.unwrap(), vec![want]);
    let meta = entry_meta(receiver.path(), &program.libraries[0].cache_key);
    assert!(meta.contains("compiler version: "), "{meta}");

    // The digest covers the library: a bit flipped inside it is refused before anything runs.
    let sealed = seal_program(program);
    let lib = &program.libraries[0].library;
    let at = sealed
        .windows(64)
        .position(|w| w == &lib[..64])
        .expect("the library is in the sealed bytes");
    for offset in [0, 200, lib.len() - 1] {
        let mut flipped = sealed.clone();
        flipped[at + offset] ^= 0x08;
        let (out, receiver) = run(&flipped);
        let e = out.unwrap_err();
        assert!(
            matches!(e, ProgramError::Modified(SealError::Digest { .. })),
            "offset {offset}: {e:?}"
        );
        assert!(std::fs::read_dir(receiver.path()).unwrap().next().is_none());
    }

    // Invalid: a library for an operator that does not exist, or two for one operator.
    let mut p = program.clone();
    p.libraries[0].operator = 9;
    assert_eq!(
        check_program(&p).unwrap_err(),
        MalformedProgram::NoSuchOperator { operator: 9 }
    );
    let mut p = program.clone();
    p.libraries.push(p.libraries[0].clone());
    assert!(matches!(
        check_program(&p).unwrap_err(),
        MalformedProgram::TwoLibraries { .. }
    ));
    // Only the C++ target has libraries.
    let e = ovl::as_tensorflow(&x, negate(&x))
        .options(&Options::interpreter())
        .embed_libraries(true)
        .build()
        .unwrap_err();
    assert!(
        matches!(&e, Error::Export { why, .. } if **why == ExportError::EmbedNeedsCpu {
            target: ovl::Target::Interpreter,
        }),
        "{e}"
    );
}
