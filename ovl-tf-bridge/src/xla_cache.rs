//! The cache of the programs that the XLA custom call prepared ([`crate::xla`]), found by a
//! 64-bit key of their opaque bytes.
//!
//! A key only says where to look: an entry is used only when its bytes are the caller's (the
//! custom call's hexadecimal text, compared in full), so two programs whose keys collide each
//! run their own, the one not in the cache prepared again from its text. The key function is a
//! field, so that a test can make every key collide.

use ovl_core::hash::{hex, unhex};
use ovl_core::lru::SharedLru;
use std::cell::RefCell;
use std::sync::Arc;
use std::thread::LocalKey;

/// A value prepared from opaque bytes, with its key and the bytes as hexadecimal text.
pub(crate) struct Entry<T> {
    pub(crate) key: u64,
    /// The hexadecimal text of the opaque bytes: what the custom call's attribute holds.
    pub(crate) text: Box<[u8]>,
    pub(crate) value: T,
}

/// A thread's last entry (the fast path: no lock).
pub(crate) type Last<T> = RefCell<Option<Arc<Entry<T>>>>;

/// The message of attributes that are not the text of bytes with their key.
pub(crate) const DAMAGED: &str = "the custom call's attributes are damaged";

/// Prepared values by key, the least recently used evicted first, and each thread's last one.
pub(crate) struct PreparedCache<T: 'static> {
    key_of: fn(&[u8]) -> u64,
    lru: SharedLru<u64, Arc<Entry<T>>>,
    last: &'static LocalKey<Last<T>>,
}

impl<T: Send + Sync + 'static> PreparedCache<T> {
    /// A cache of `capacity` entries (`name` in its counters) keyed by `key_of`, whose threads
    /// keep their last entry in `last`.
    pub(crate) const fn new(
        name: &'static str,
        capacity: usize,
        key_of: fn(&[u8]) -> u64,
        last: &'static LocalKey<Last<T>>,
    ) -> Self {
        PreparedCache {
            key_of,
            lru: SharedLru::new(name, capacity),
            last,
        }
    }

    /// Keeps `value`, prepared from `opaque`, under the key of `opaque`, and returns its entry.
    pub(crate) fn insert(&self, opaque: &[u8], value: T) -> Arc<Entry<T>> {
        let entry = Arc::new(Entry {
            key: (self.key_of)(opaque),
            text: hex(opaque).into_bytes().into_boxed_slice(),
            value,
        });
        self.lru.insert(entry.key, entry.clone());
        entry
    }

    /// The entry of `key` whose text is `text`: the thread's last one, else the cache's, else
    /// one `prepare`d now from the bytes of `text` (which must have the key `key`) and kept.
    pub(crate) fn find(
        &self,
        key: u64,
        text: &[u8],
        prepare: impl FnOnce(&[u8]) -> Result<T, String>,
    ) -> Result<Arc<Entry<T>>, String> {
        let same = |e: &Arc<Entry<T>>| e.key == key && *e.text == *text;
        if let Some(e) = self.last.with(|l| l.borrow().clone()).filter(same) {
            return Ok(e);
        }
        let e = match self.lru.get(&key).filter(same) {
            Some(e) => e,
            None => {
                let opaque = unhex(text)
                    .filter(|o| (self.key_of)(o) == key)
                    .ok_or(DAMAGED)?;
                let value = prepare(&opaque)?;
                self.insert(&opaque, value)
            }
        };
        self.last.with(|l| *l.borrow_mut() = Some(e.clone()));
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ovl::program::{Binding, LoadedProgram};
    use std::cell::Cell;
    use std::ffi::c_void;

    /// A loaded program bound to one input of shape `[4]`.
    struct Bound {
        program: LoadedProgram,
        binding: Binding,
    }

    fn sealed(f: fn(&ovl::Lazy<f32>) -> ovl::Lazy<f32>) -> Vec<u8> {
        let x = ovl::placeholder::<f32>("x", &[4]);
        let bundle = ovl::as_tensorflow(&x, f(&x))
            .options(&ovl::Options::interpreter())
            .build()
            .unwrap();
        ovl::program::seal_program(&bundle.program)
    }

    thread_local! {
        static PREPARED: Cell<usize> = const { Cell::new(0) };
        static LAST: Last<Bound> = const { RefCell::new(None) };
    }

    fn prepare(sealed: &[u8]) -> Result<Bound, String> {
        PREPARED.with(|n| n.set(n.get() + 1));
        let program =
            LoadedProgram::load(sealed, &ovl::Options::interpreter()).map_err(|e| e.to_string())?;
        let binding = program.bind(&[&[4]]).map_err(|e| e.to_string())?;
        Ok(Bound { program, binding })
    }

    fn run(entry: &Entry<Bound>, x: &[f32; 4]) -> [f32; 4] {
        let mut y = [0f32; 4];
        let (ins, outs) = (
            [x.as_ptr().cast::<c_void>()],
            [y.as_mut_ptr().cast::<c_void>()],
        );
        // SAFETY: one f32 input and one f32 output of 4 elements, as bound.
        unsafe {
            entry
                .value
                .program
                .run_bound(&entry.value.binding, &ins, &outs, 1)
        }
        .unwrap();
        y
    }

    /// Every program has the same key.
    static COLLIDING: PreparedCache<Bound> =
        PreparedCache::new("test programs whose keys collide", 4, |_| 7, &LAST);

    #[test]
    fn programs_whose_keys_collide_each_run_their_own() {
        let x = [-1.5f32, 0.0, 0.5, 2.0];
        let tanh = sealed(|x| ovl_stdlib::tanh(x));
        let exp = sealed(|x| ovl_stdlib::exp(x));
        let want = |f: fn(f32) -> f32| x.map(f);
        let close = |got: [f32; 4], want: [f32; 4], what: &str| {
            for (g, w) in got.iter().zip(want) {
                assert!(
                    (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                    "{what}: {got:?} {want:?}"
                );
            }
        };
        let a = COLLIDING.insert(&tanh, prepare(&tanh).unwrap());
        let b = COLLIDING.insert(&exp, prepare(&exp).unwrap());
        assert_eq!(a.key, b.key);
        assert_eq!(PREPARED.with(Cell::get), 2);
        // The cache holds `exp` under the key: `tanh` is prepared again from its text, then
        // each call alternates (neither the thread's last entry nor the cache's is the other's).
        for round in 0..3 {
            let e = COLLIDING.find(7, &a.text, prepare).unwrap();
            close(
                run(&e, &x),
                want(f32::tanh),
                &format!("tanh, round {round}"),
            );
            let e = COLLIDING.find(7, &b.text, prepare).unwrap();
            close(run(&e, &x), want(f32::exp), &format!("exp, round {round}"));
        }
        assert_eq!(PREPARED.with(Cell::get), 2 + 6);
        // The same text again is the thread's last entry: nothing is prepared.
        let e = COLLIDING.find(7, &b.text, prepare).unwrap();
        close(run(&e, &x), want(f32::exp), "exp again");
        assert_eq!(PREPARED.with(Cell::get), 8);
        // Text that is not hexadecimal, or bytes of another key, is refused.
        for text in [&b"zz"[..], b"abc", hex(&tanh).as_bytes()] {
            let key = if text.len() > 3 { 8 } else { 7 };
            assert_eq!(
                COLLIDING.find(key, text, prepare).err().as_deref(),
                Some(DAMAGED)
            );
        }
    }
}
