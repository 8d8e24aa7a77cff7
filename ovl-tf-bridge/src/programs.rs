//! The loaded programs of this process's `DynamicLib` kernels, shared by every kernel instance
//! running the same program.
//!
//! A model's graph holds many nodes running one program: a recurrent cell unrolled over the
//! steps, and each forward node's gradient node (built by the Python gradient function) running
//! the same gradient program. Without sharing, each node's kernel would open and check the
//! sealed program, find its compiled operators and bind its fixed shapes again. Here the first
//! kernel of a program does that; the next ones take the loaded program and its fixed binding
//! by cloning an `Arc`. An entry lives while some kernel holds its program.
//!
//! Counters of loads and reuses are exported (`ovl_tf_program_stats`) so that tests observe the
//! sharing.

use crate::compute::Bound;
use ovl::program::{LoadedProgram, ProgramError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// A loaded program with the binding of its fixed shapes (none for a polymorphic program).
pub(crate) struct Shared {
    pub(crate) program: Arc<LoadedProgram>,
    pub(crate) fixed: Option<Arc<Bound>>,
}

type Entries = HashMap<Vec<u8>, (Weak<LoadedProgram>, Option<Arc<Bound>>)>;

static LOADS: AtomicU64 = AtomicU64::new(0);
static REUSES: AtomicU64 = AtomicU64::new(0);
static FIXED_BINDINGS: AtomicU64 = AtomicU64::new(0);

fn entries() -> &'static Mutex<Entries> {
    static ENTRIES: OnceLock<Mutex<Entries>> = OnceLock::new();
    ENTRIES.get_or_init(Default::default)
}

/// The program of the sealed bytes `sealed`: the one a live kernel already loaded, else loaded
/// now (and its fixed shapes bound).
pub(crate) fn load(sealed: &[u8]) -> Result<Shared, ProgramError> {
    if let Some(shared) = find(sealed) {
        REUSES.fetch_add(1, Ordering::Relaxed);
        return Ok(shared);
    }
    // Loaded outside the lock (compiling may take seconds); two kernels loading the same new
    // program at once both load it, and the later one's entry stays.
    let program = Arc::new(LoadedProgram::load(sealed, &ovl::Options::default())?);
    LOADS.fetch_add(1, Ordering::Relaxed);
    let fixed = Bound::fixed(&program).map(Arc::new);
    if fixed.is_some() {
        FIXED_BINDINGS.fetch_add(1, Ordering::Relaxed);
    }
    if let Ok(mut entries) = entries().lock() {
        entries.retain(|_, (p, _)| p.strong_count() > 0);
        entries.insert(sealed.to_vec(), (Arc::downgrade(&program), fixed.clone()));
    }
    Ok(Shared { program, fixed })
}

fn find(sealed: &[u8]) -> Option<Shared> {
    let entries = entries().lock().ok()?;
    let (program, fixed) = entries.get(sealed)?;
    Some(Shared {
        program: program.upgrade()?,
        fixed: fixed.clone(),
    })
}

/// Writes this process's counts of programs loaded by `DynamicLib` kernels, of kernels that
/// reused a program another live kernel loaded, and of fixed-shape bindings made, to
/// `out[0..3]` (for tests and profiling).
///
/// # Safety
/// `out` must point to 3 writable `u64`s.
#[no_mangle]
pub unsafe extern "C" fn ovl_tf_program_stats(out: *mut u64) {
    if out.is_null() {
        return;
    }
    let counts = [
        LOADS.load(Ordering::Relaxed),
        REUSES.load(Ordering::Relaxed),
        FIXED_BINDINGS.load(Ordering::Relaxed),
    ];
    // SAFETY: the caller passes 3 writable u64s.
    unsafe { std::ptr::copy_nonoverlapping(counts.as_ptr(), out, 3) };
}
