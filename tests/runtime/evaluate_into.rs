//! `evaluate_into`: results written into an existing array, on both CPU targets.

use ndarray::{array, s, Array2, ArrayD, IxDyn};
use ovl::prelude::*;

#[operator]
fn triad(a: Tensor<f32>, b: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(a.shape())[0];
    let out = output_like(&a);
    out[[i]] = a[[i]] + 1.5 * b[[i]];
    out
}

/// Writes only the even elements: the odd ones must read as zero, as in a fresh output.
#[operator]
fn evens(a: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(a.shape())[0];
    let out = output_like(&a);
    if i % 2 == 0 {
        out[[i]] = a[[i]];
    }
    out
}

/// Each worker writes its row in a loop from column `from`: from 0 it covers the output (no
/// zero-fill is needed), from 1 column 0 is never written.
#[operator]
fn rows_from(x: Tensor<f32>, from: i64) -> Tensor<f32> {
    let [rows, cols] = x.dims::<2>();
    let r = position_in([rows])[0];
    let out = output_like(&x);
    for j in from..cols as i64 {
        out[[r, j]] = x[[r, j]] * 2.0;
    }
    out
}

fn targets() -> [Options; 2] {
    [Options::interpreter(), Options::cpu()]
}

#[test]
fn writes_into_the_given_array_and_reuses_its_memory() {
    let a = array![1.0f32, 2.0, 3.0, 4.0];
    let b = array![0.5f32, -1.0, 2.0, 0.0];
    for options in targets() {
        let mut dest = ArrayD::<f32>::from_elem(IxDyn(&[4]), 99.0);
        let before = dest.as_ptr();
        ovl::evaluate_into(&triad(&a, &b), &mut dest, &options).expect("evaluate_into");
        assert_eq!(dest, array![1.75f32, 0.5, 6.0, 4.0].into_dyn());
        assert_eq!(dest.as_ptr(), before, "the array's buffer is reused");
    }
}

#[test]
fn elements_no_worker_writes_are_zero() {
    let a = array![1.0f32, 2.0, 3.0, 4.0, 5.0];
    for options in targets() {
        let mut dest = ArrayD::<f32>::from_elem(IxDyn(&[5]), 7.0);
        ovl::evaluate_into(&evens(&a), &mut dest, &options).expect("evaluate_into");
        assert_eq!(dest, array![1.0f32, 0.0, 3.0, 0.0, 5.0].into_dyn());
    }
}

#[test]
fn rows_written_by_loops_replace_every_old_value_and_unwritten_ones_are_zero() {
    let x = Array2::from_shape_fn((3, 5), |(i, j)| (i * 5 + j) as f32);
    for options in targets() {
        for from in [0i64, 1] {
            let mut dest = ArrayD::<f32>::from_elem(IxDyn(&[3, 5]), f32::NAN);
            ovl::evaluate_into(&rows_from(&x, from), &mut dest, &options).expect("evaluate_into");
            let want = Array2::from_shape_fn((3, 5), |(i, j)| {
                if j as i64 >= from {
                    x[[i, j]] * 2.0
                } else {
                    0.0
                }
            });
            assert_eq!(dest, want.into_dyn(), "from {from}");
        }
    }
}

#[test]
fn a_wrong_shape_is_an_error_that_keeps_the_shape() {
    let a = array![1.0f32, 2.0, 3.0, 4.0];
    let mut dest = ArrayD::<f32>::zeros(IxDyn(&[2, 2]));
    let err = ovl::evaluate_into(&triad(&a, &a), &mut dest, &Options::cpu())
        .expect_err("a [2, 2] array for a [4] output");
    match &err {
        ovl::Error::OutputMismatch(ovl::Mismatch::Output {
            output: 0,
            given,
            wanted,
        }) => assert_eq!((given.as_str(), wanted.as_str()), ("f32[2, 2]", "f32[4]")),
        other => panic!("not an output mismatch: {other}"),
    }
    assert!(err
        .to_string()
        .ends_with("pass an array of the output's dtype and shape"));
    assert_eq!(dest.shape(), &[2, 2]);
}

#[test]
fn a_strided_array_is_an_error_and_is_left_as_it_was() {
    let a = array![1.0f32, 2.0];
    let mut dest = Array2::<f32>::from_shape_vec((2, 2), vec![1.0, 2.0, 3.0, 4.0])
        .expect("shape")
        .reversed_axes()
        .into_dyn();
    let err = ovl::evaluate_into(&triad(&a, &a), &mut dest, &Options::cpu())
        .expect_err("a transposed array is not row-major");
    assert!(
        matches!(err, ovl::Error::OutputMismatch(ovl::Mismatch::NotRowMajor)),
        "{err}"
    );
    assert_eq!(dest, array![[1.0f32, 3.0], [2.0, 4.0]].into_dyn());

    let mut view_owner = Array2::<f32>::zeros((2, 3));
    view_owner.slice_collapse(s![.., 1..]);
    let mut dest = view_owner.into_dyn();
    assert!(ovl::evaluate_into(&triad(&a, &a), &mut dest, &Options::cpu()).is_err());
}

/// Two outputs of different dtypes from one worker.
#[operator]
fn halves(x: Tensor<i32>) -> (Tensor<i32>, Tensor<f64>) {
    let i = position_in(x.shape())[0];
    let (q, h) = (output_like(&x), output::<f64>(x.shape()));
    q[[i]] = x[[i]] / 2;
    h[[i]] = x[[i]].cast::<f64>() / 2.0;
    (q, h)
}

#[test]
fn outputs_of_mixed_dtypes_go_into_arrays_of_their_dtypes_and_host_tensors() {
    use ndarray::Array1;
    use ovl::{DType, Destination, HostTensor};
    let x = array![1, 4, 7, -3];
    for options in targets() {
        let (q, h) = halves(&x);
        let mut quotients = Array1::<i32>::from_elem(4, 99);
        let mut exact = ArrayD::<f64>::from_elem(IxDyn(&[4]), f64::NAN);
        let (qp, hp) = (quotients.as_ptr(), exact.as_ptr());
        let mut dests = [
            Destination::from(&mut quotients),
            Destination::from(&mut exact),
        ];
        ovl::evaluate_into_all((&q, &h), &mut dests, &options).expect("evaluate_into_all");
        assert_eq!(quotients, array![0, 2, 3, -1]);
        assert_eq!(exact, array![0.5, 2.0, 3.5, -1.5].into_dyn());
        assert_eq!((quotients.as_ptr(), exact.as_ptr()), (qp, hp), "no copy");

        // Host tensors: the same results, each of its own dtype.
        let mut tensors = vec![
            HostTensor::zeros(DType::I32, &[4]),
            HostTensor::zeros(DType::F64, &[4]),
        ];
        ovl::evaluate_into_all((&q, &h), &mut tensors, &options).expect("host tensors");
        assert_eq!(tensors[0].as_slice::<i32>(), Some(&[0, 2, 3, -1][..]));
        assert_eq!(
            tensors[1].as_slice::<f64>(),
            Some(&[0.5, 2.0, 3.5, -1.5][..])
        );

        // A list of untyped handles, into a mixed list.
        let untyped = [q.untyped().clone(), h.untyped().clone()];
        let mut fresh_q = Array1::<i32>::zeros(4);
        let mut fresh_h = HostTensor::zeros(DType::F64, &[4]);
        let mut dests = vec![
            Destination::from(&mut fresh_q),
            Destination::from(&mut fresh_h),
        ];
        ovl::evaluate_into_all(&untyped[..], &mut dests, &options).expect("untyped");
        assert_eq!(fresh_q, quotients);
        assert_eq!(fresh_h, tensors[1]);
    }
}

#[test]
fn a_destination_of_another_dtype_or_count_is_a_mismatch_and_keeps_its_shape() {
    use ovl::Destination;
    let (q, h) = halves(&array![1, 2]);
    let mut q_dest = ndarray::Array1::<i32>::zeros(2);
    let mut wrong = ndarray::Array1::<f32>::from_elem(2, 5.0);
    let mut dests = [
        Destination::from(&mut q_dest),
        Destination::from(&mut wrong),
    ];
    let err = ovl::evaluate_into_all((&q, &h), &mut dests, &Options::interpreter())
        .expect_err("an f32 array for an f64 output");
    match &err {
        ovl::Error::OutputMismatch(ovl::Mismatch::Output {
            output: 1,
            given,
            wanted,
        }) => assert_eq!((given.as_str(), wanted.as_str()), ("f32[2]", "f64[2]")),
        other => panic!("not an output mismatch: {other}"),
    }
    assert_eq!((q_dest.shape(), wrong.shape()), (&[2][..], &[2][..]));

    let mut one = [ndarray::Array1::<i32>::zeros(2)];
    let err = ovl::evaluate_into_all((&q, &h), &mut one, &Options::interpreter()).unwrap_err();
    assert!(
        matches!(
            err,
            ovl::Error::OutputMismatch(ovl::Mismatch::OutputCount {
                outputs: 2,
                arrays: 1
            })
        ),
        "{err}"
    );
}

#[test]
fn a_refused_destination_gives_the_ones_taken_before_it_back_untouched() {
    use ovl::Destination;
    let a = array![1.0f32, 2.0];
    let y = triad(&a, &a);
    let mut first = ArrayD::<f32>::from_elem(IxDyn(&[2]), 3.0);
    let mut second = ArrayD::<f32>::from_elem(IxDyn(&[2]), 4.0);
    let mut transposed = Array2::<f32>::zeros((2, 2)).reversed_axes().into_dyn();
    let mut dests = [
        Destination::from(&mut first),
        Destination::from(&mut second),
        Destination::from(&mut transposed),
    ];
    let err = ovl::evaluate_into_all((&y, &y, &y), &mut dests, &Options::interpreter())
        .expect_err("a transposed array is not row-major");
    assert!(
        matches!(err, ovl::Error::OutputMismatch(ovl::Mismatch::NotRowMajor)),
        "{err}"
    );
    assert_eq!(
        first,
        array![3.0f32, 3.0].into_dyn(),
        "the arrays before it are untouched"
    );
    assert_eq!(second, array![4.0f32, 4.0].into_dyn());
}
