//! `catch_unwind` without the panic message: a panic that ovl catches and reports as an error
//! (a gradient function that panics becomes `GradError::BadGradient`) must not also print the
//! default hook's message and backtrace into the user's stderr.
//!
//! The first call installs, once per process, a panic hook that stays silent while the
//! panicking thread is inside [`catch_quietly`] and otherwise calls the hook that was installed
//! before it (the default one, or the user's). Quietness is per thread: a panic on another
//! thread, which this `catch_unwind` cannot catch, is reported as usual. A hook the user
//! installs later replaces this one (then caught panics print again, as they did before).

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    /// How many [`catch_quietly`] calls the current thread is inside.
    static QUIET: Cell<u32> = const { Cell::new(0) };
}

static INSTALL: Once = Once::new();

/// Runs `f`, catching a panic as `catch_unwind` does, without printing it.
pub fn catch_quietly<R>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.with(Cell::get) == 0 {
                previous(info);
            }
        }));
    });
    /// Leaves the quiet region even when `f` unwinds.
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            QUIET.with(|q| q.set(q.get() - 1));
        }
    }
    QUIET.with(|q| q.set(q.get() + 1));
    let _leave = Leave;
    catch_unwind(AssertUnwindSafe(f))
}
