//! A panic that ovl catches and reports as an error is not printed (issue 31): a gradient
//! function that panics becomes `GradError::BadGradient` without the panic hook running, while
//! a panic ovl does not catch still reaches the hook installed before. One test in this binary:
//! panic hooks are global to the process.

use ndarray::array;
use ovl::prelude::*;
use ovl::{GradError, GradientCall, LazyTensor};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[operator]
fn double(x: Tensor<f32>) -> Tensor<f32> {
    let i = position_in(x.shape())[0];
    let out = output_like(&x);
    out[[i]] = x[[i]] * 2.0;
    out
}

#[test]
fn a_panicking_gradient_is_an_error_and_prints_nothing() {
    // The "user's" hook, installed before ovl's: counts the panics it is asked to report.
    let reported = Arc::new(AtomicUsize::new(0));
    let counter = reported.clone();
    std::panic::set_hook(Box::new(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
    }));

    let x = Lazy::from(array![1.0f32, 2.0]);
    let y = double(&x);
    ovl::set_gradient(&y, |_c: &GradientCall| -> Vec<Option<LazyTensor>> {
        panic!("this gradient is broken")
    });
    let dy = Lazy::from(array![1.0f32, 1.0]);
    match ovl::backward(&[(&y, &dy)], &[&x]) {
        Err(GradError::BadGradient { operator, message }) => {
            assert_eq!(operator, "double");
            assert!(message.contains("this gradient is broken"), "{message}");
        }
        Err(other) => panic!("expected BadGradient, got {other}"),
        Ok(_) => panic!("expected BadGradient, got gradients"),
    }
    assert_eq!(
        reported.load(Ordering::SeqCst),
        0,
        "the caught panic was reported"
    );

    // A panic ovl does not catch still goes to the previous hook, on this thread and others.
    let _ = std::panic::catch_unwind(|| panic!("not ovl's"));
    assert_eq!(reported.load(Ordering::SeqCst), 1);
    let _ = std::thread::spawn(|| panic!("another thread's")).join();
    assert_eq!(reported.load(Ordering::SeqCst), 2);
    let _ = std::panic::take_hook();
}
