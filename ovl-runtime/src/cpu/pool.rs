//! The threads every CPU kernel and library kernel of the process runs on: one per core besides
//! the calling thread, which stay awake for a short while after each job.
//!
//! A graph runs its kernels back to back, many of them short (an LSTM layer's forward +
//! backward at T = 35 runs about 150, the smallest taking tens of microseconds), with stretches
//! on the calling thread alone between them (kernels too small to split). A thread that sleeps
//! as soon as it has nothing to do must be woken by the kernel system for the next job, which
//! takes longer than such a kernel on a virtual machine. So a helper, after a job, spins for
//! [`SPIN`] waiting for the next one (as OpenMP runtimes' threads do for their "block time"),
//! after [`SPIN_ALONE`] offering its core to other threads ready to run at every check, and
//! only then sleeps on a condition variable.
//!
//! One job runs at a time: a caller that finds the pool taken (another thread's run, as
//! TensorFlow runs ops from several threads, or a job started from inside a job) runs its
//! work alone on its own thread. A job is a function every participating thread calls once
//! (each taking tasks from a shared counter until none is left); the caller returns when every
//! helper that joined has returned, and a panic in a helper is raised again in the caller.

use std::any::Any;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Condvar, Mutex, OnceLock, PoisonError, TryLockError};
use std::time::{Duration, Instant};

/// How long a helper waits for the next job, spinning, before it sleeps.
pub const SPIN: Duration = Duration::from_micros(200);

/// How long of [`SPIN`] a helper spins on the core alone; after that it offers the core to
/// any other thread ready to run (TensorFlow's, between two ovl ops) at every check.
pub const SPIN_ALONE: Duration = Duration::from_micros(20);

/// A job: the function each thread runs, and how many more helpers may join.
struct Job<'a> {
    work: &'a (dyn Fn() + Sync),
    open_slots: AtomicUsize,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

/// What the caller and the helpers share.
struct Shared {
    /// Held by the thread whose job the pool runs.
    submit: Mutex<()>,
    /// The job running (null between jobs); it lives on its caller's stack.
    job: AtomicPtr<Job<'static>>,
    /// Incremented for every job: what a waiting helper watches.
    epoch: AtomicU64,
    /// Helpers between noticing a job and being done with it: the caller waits for 0.
    active: AtomicUsize,
    /// Helpers asleep (changed under `sleep`'s lock).
    sleeping: AtomicUsize,
    sleep: Mutex<()>,
    wake: Condvar,
}

/// The pool: `helpers` threads besides each caller.
pub struct Pool {
    shared: &'static Shared,
    helpers: usize,
}

impl Pool {
    /// The process's pool, with a helper per core but one (started on first use).
    pub fn get() -> Option<&'static Pool> {
        static POOL: OnceLock<Option<Pool>> = OnceLock::new();
        POOL.get_or_init(|| Pool::start(cpu_count().max(2) - 1))
            .as_ref()
    }

    /// Starts `helpers` threads; `None` if the system refuses a thread (the callers then run
    /// alone).
    fn start(helpers: usize) -> Option<Pool> {
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            submit: Mutex::new(()),
            job: AtomicPtr::new(std::ptr::null_mut()),
            epoch: AtomicU64::new(0),
            active: AtomicUsize::new(0),
            sleeping: AtomicUsize::new(0),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
        }));
        for i in 0..helpers {
            std::thread::Builder::new()
                .name(format!("ovl-cpu-{i}"))
                // Generated kernels keep their locals on the stack.
                .stack_size(16 << 20)
                .spawn(move || helper(shared))
                .ok()?;
        }
        Some(Pool { shared, helpers })
    }

    /// Runs `work` on the calling thread and on up to `threads - 1` helpers at once, and
    /// returns when every one of them has returned from it. `work` takes its tasks from a
    /// counter it shares, so that it is done when any one call of it returns having found
    /// none left; helpers that come late find none.
    pub fn run(&self, threads: usize, work: &(dyn Fn() + Sync)) {
        let shared = self.shared;
        let helpers = threads.saturating_sub(1).min(self.helpers);
        let guard = match shared.submit.try_lock() {
            Ok(guard) if helpers > 0 => guard,
            Err(TryLockError::Poisoned(poisoned)) if helpers > 0 => poisoned.into_inner(),
            // Taken (another thread's job, or this one's from inside its own job): alone.
            _ => return work(),
        };
        let job = Job {
            work,
            open_slots: AtomicUsize::new(helpers),
            panic: Mutex::new(None),
        };
        // The helpers see the job only between this store and the store of null below, and
        // the caller returns only once none of them is inside it (`active`).
        let pointer = (&job as *const Job<'_>).cast_mut().cast::<Job<'static>>();
        shared.job.store(pointer, SeqCst);
        shared.epoch.fetch_add(1, SeqCst);
        if shared.sleeping.load(SeqCst) > 0 {
            let _lock = shared.sleep.lock().unwrap_or_else(PoisonError::into_inner);
            shared.wake.notify_all();
        }
        let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
        shared.job.store(std::ptr::null_mut(), SeqCst);
        while shared.active.load(SeqCst) != 0 {
            std::hint::spin_loop();
        }
        drop(guard);
        if let Err(payload) = mine {
            std::panic::resume_unwind(payload);
        }
        let helper_panic = job
            .panic
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(payload) = helper_panic {
            std::panic::resume_unwind(payload);
        }
    }
}

/// A helper thread: waits for each job (spinning for [`SPIN`], then asleep) and joins it.
fn helper(shared: &'static Shared) {
    let mut seen = shared.epoch.load(SeqCst);
    loop {
        seen = wait_for_job(shared, seen);
        shared.active.fetch_add(1, SeqCst);
        let pointer = shared.job.load(SeqCst);
        // SAFETY: a non-null job stays alive while `active` counts this thread: its caller
        // stores null before it waits for `active` to reach 0, and this load comes after the
        // increment (both sequentially consistent).
        if let Some(job) = unsafe { pointer.as_ref() } {
            let joined = job
                .open_slots
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if joined {
                let work = std::panic::AssertUnwindSafe(job.work);
                if let Err(payload) = std::panic::catch_unwind(work) {
                    let mut slot = job.panic.lock().unwrap_or_else(PoisonError::into_inner);
                    slot.get_or_insert(payload);
                }
            }
        }
        shared.active.fetch_sub(1, SeqCst);
    }
}

/// Waits until the epoch differs from `seen` (a new job) and returns it: spinning for [`SPIN`]
/// (yielding the core after [`SPIN_ALONE`]), then asleep until a caller wakes the helpers.
fn wait_for_job(shared: &Shared, seen: u64) -> u64 {
    let start = Instant::now();
    let mut spins = 0u32;
    let mut alone = true;
    loop {
        let epoch = shared.epoch.load(SeqCst);
        if epoch != seen {
            return epoch;
        }
        if alone {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
        spins = spins.wrapping_add(1);
        if !alone || spins.is_multiple_of(64) {
            let waited = start.elapsed();
            if waited >= SPIN {
                break;
            }
            alone = waited < SPIN_ALONE;
        }
    }
    let mut lock = shared.sleep.lock().unwrap_or_else(PoisonError::into_inner);
    shared.sleeping.fetch_add(1, SeqCst);
    loop {
        let epoch = shared.epoch.load(SeqCst);
        if epoch != seen {
            shared.sleeping.fetch_sub(1, SeqCst);
            return epoch;
        }
        lock = shared
            .wake
            .wait(lock)
            .unwrap_or_else(PoisonError::into_inner);
    }
}

/// The number of CPUs this process may use (computed once: it costs a system call): what a
/// run on 0 threads ("one per core") uses, here and in the facade's library-call kernels.
pub fn cpu_count() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| num_cpus::get().max(1))
}

/// Runs `work(i)` for every `i` in `0..tasks` on the calling thread and up to `threads - 1`
/// threads (0: one per core) of the pool the generated kernels run on, each taking the next
/// task until none is left. Library kernels (the facade's GEMM) use this so that one pool of
/// threads serves every kernel of a run: two pools on the same cores would each keep threads
/// awake after their kernels end and take the cores from the other's next kernel.
pub fn for_each_parallel(tasks: usize, threads: usize, work: &(dyn Fn(usize) + Sync)) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = match threads {
        0 => cpu_count(),
        t => t,
    }
    .min(tasks);
    let pool = (threads > 1).then(Pool::get).flatten();
    let next = AtomicUsize::new(0);
    let drain = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        if i >= tasks {
            break;
        }
        work(i);
    };
    match pool {
        Some(pool) => pool.run(threads, &drain),
        None => drain(),
    }
}

/// Runs `warm` once per distinct operator of `dags` (by `key`), the largest first, on one
/// thread per core (compilations, not kernels: they run beside the pool): what
/// [`crate::compile_all`] and [`crate::cuda::load_all`] do before they collect their results in
/// order from the memory cache. Nothing happens with one core or one operator.
pub(crate) fn warm_concurrently<K: Eq + std::hash::Hash>(
    dags: &[&ovl_ir::ir::ExpressionDag],
    key: impl Fn(&ovl_ir::ir::ExpressionDag) -> K,
    warm: impl Fn(&ovl_ir::ir::ExpressionDag) + Sync,
) {
    let mut seen = std::collections::HashSet::new();
    let mut distinct: Vec<&ovl_ir::ir::ExpressionDag> = dags
        .iter()
        .copied()
        .filter(|dag| seen.insert(key(dag)))
        .collect();
    // The largest first: started last, it would end the batch alone.
    distinct.sort_by_key(|dag| std::cmp::Reverse(dag.expressions.len()));
    let threads = cpu_count().min(distinct.len());
    if threads > 1 {
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(dag) = distinct.get(k) else { break };
                    warm(dag);
                });
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::Pool;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Every task runs once, jobs after jobs (with pauses longer than the spin, so that the
    /// helpers sleep and are woken), from several threads at once, and nested.
    #[test]
    fn every_task_runs_once() {
        let pool = Pool::get().expect("a pool");
        let job = |tasks: usize, threads: usize| {
            let next = AtomicUsize::new(0);
            let counts: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
            pool.run(threads, &|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= tasks {
                    break;
                }
                counts[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(counts.iter().all(|c| c.load(Ordering::Relaxed) == 1));
        };
        for round in 0..50 {
            job(round * 7 + 1, 1 + round % 4);
            if round % 10 == 0 {
                std::thread::sleep(super::SPIN * 3);
            }
        }
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| (0..50).for_each(|r| job(r * 3 + 1, 2)));
            }
        });
        pool.run(2, &|| job(10, 2));
    }

    /// A panic in the work reaches the caller, and the pool runs the next job.
    #[test]
    fn a_panic_reaches_the_caller() {
        let pool = Pool::get().expect("a pool");
        let calls = AtomicUsize::new(0);
        let result = std::panic::catch_unwind(|| {
            pool.run(2, &|| {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("first");
                }
            })
        });
        assert!(result.is_err());
        let after = AtomicUsize::new(0);
        pool.run(2, &|| {
            after.fetch_add(1, Ordering::SeqCst);
        });
        assert!(after.load(Ordering::SeqCst) >= 1);
    }
}
