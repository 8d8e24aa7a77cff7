//! Test helpers shared by the crates of the ovl workspace. Not published: only the tests of the
//! workspace depend on it (as a dev-dependency).
//!
//! - [`golden`]: compare generated text with a committed file, or (re)write the file with
//!   `OVL_BLESS=1`.
//! - [`without_hang`]: run a test body that must terminate.

pub mod golden;

/// Runs `f` on another thread and returns its result, or panics when it has not returned after
/// several minutes: a test of a program that would loop forever fails instead of hanging (no
/// timing is asserted: the limit only turns a hang into a failure).
pub fn without_hang<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = send.send(f());
    });
    match receive.recv_timeout(std::time::Duration::from_secs(300)) {
        Ok(v) => v,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what} did not return: a faulting worker kept running")
        }
        Err(e) => panic!("{what} panicked ({e})"),
    }
}
