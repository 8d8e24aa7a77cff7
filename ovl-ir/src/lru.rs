//! The one eviction policy of ovl's in-memory caches: keep the `capacity` most recently used
//! entries, evict the least recently used one first, turn the cache off with a capacity of 0,
//! and count hits, misses and evictions. Every process-wide cache of ovl is a [`SharedLru`]
//! (the trace memo, vmap's batched operators and the backward graphs in ovl-core, the fusion
//! results in ovl-fuse, the loaded C++ and CUDA operators in ovl-codegen, the plans of
//! `ovl::evaluate`); `ovl::cache_stats`, `ovl::clear_caches` and `ovl::set_cache_capacity` reach
//! all of them through [`CacheControl`].
//!
//! It lives in ovl-ir, the crate every other one depends on (ovl-fuse and ovl-codegen do not
//! depend on ovl-core), so that there is one policy and one implementation.

use crate::fast_hash::FastBuild;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};

/// How many entries the plan cache and the cache of backward graphs keep unless
/// `OVL_PLAN_CACHE_SIZE` or a setter says otherwise.
pub const DEFAULT_CAPACITY: usize = 128;

/// The environment variable that sets the first capacity of the plan cache and of the cache of
/// backward graphs.
pub const PLAN_CACHE_SIZE_VAR: &str = "OVL_PLAN_CACHE_SIZE";

/// The capacity the plan cache and the cache of backward graphs start with:
/// `OVL_PLAN_CACHE_SIZE` when it is set to a number, else [`DEFAULT_CAPACITY`].
pub fn initial_capacity() -> usize {
    capacity_from_env(PLAN_CACHE_SIZE_VAR, DEFAULT_CAPACITY)
}

/// The value of environment variable `var` when it is set to a number (surrounding spaces
/// allowed), else `default`: how every capacity of ovl's in-memory caches and pools starts.
pub fn capacity_from_env(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// A map that keeps at most `capacity` entries, dropping the least recently used first, with
/// counters of hits, misses and evictions. Keys are compared exactly.
pub struct Lru<K, V> {
    map: HashMap<K, (V, u64), FastBuild>,
    capacity: usize,
    /// Ticks once per lookup or insertion: an entry's tick says when it was last used.
    clock: u64,
    hits: u64,
    misses: u64,
    evictions: u64,
    bypassed: u64,
}

/// Counters of an [`Lru`] since it was created or last cleared, and its size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LruCounters {
    /// Lookups that found their entry.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Entries dropped to stay within the capacity.
    pub evictions: u64,
    /// Entries kept now.
    pub entries: usize,
    /// The most entries kept at once (0: the cache is off).
    pub capacity: usize,
    /// Requests served without the cache because they could not be keyed (counted by the
    /// caches that can meet such requests: the backward graphs').
    pub bypassed: u64,
}

impl<K: Hash + Eq + Clone, V: Clone> Lru<K, V> {
    /// An empty cache keeping at most `capacity` entries.
    pub fn new(capacity: usize) -> Self {
        Lru {
            map: HashMap::default(),
            capacity,
            clock: 0,
            hits: 0,
            misses: 0,
            evictions: 0,
            bypassed: 0,
        }
    }

    /// The most entries kept (0: the cache is off).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The entry of `key` (marked as just used), counting a hit or a miss.
    pub fn get<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let found = self.find(key);
        if found.is_none() {
            self.misses += 1;
        }
        found
    }

    /// The entry of `key` (marked as just used), counting a hit when there is one and nothing
    /// otherwise: for a cache that counts as misses only what it goes on to keep
    /// ([`Lru::note_miss`]).
    pub fn find<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.clock += 1;
        let (v, used) = self.map.get_mut(key)?;
        *used = self.clock;
        self.hits += 1;
        Some(v.clone())
    }

    /// Counts a miss that [`Lru::find`] did not.
    pub fn note_miss(&mut self) {
        self.misses += 1;
    }

    /// Counts a request served without the cache (it could not be keyed).
    pub fn note_bypass(&mut self) {
        self.bypassed += 1;
    }

    /// Keeps only the entries whose key passes `keep` (not counted as evictions).
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.map.retain(|k, _| keep(k));
    }

    /// Keeps `value` under `key` (replacing an entry of the same key), then evicts the least
    /// recently used entries beyond the capacity. Keeps nothing when the capacity is 0.
    pub fn insert(&mut self, key: K, value: V) {
        if self.capacity == 0 {
            return;
        }
        self.clock += 1;
        self.map.insert(key, (value, self.clock));
        self.shrink_to(self.capacity);
    }

    /// Sets the capacity, evicting least recently used entries beyond it.
    pub fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        self.shrink_to(capacity);
    }

    /// Drops every entry and resets the counters (the capacity stays).
    pub fn clear(&mut self) {
        self.map.clear();
        self.hits = 0;
        self.misses = 0;
        self.evictions = 0;
        self.bypassed = 0;
    }

    /// The counters and the size.
    pub fn counters(&self) -> LruCounters {
        LruCounters {
            hits: self.hits,
            misses: self.misses,
            evictions: self.evictions,
            entries: self.map.len(),
            capacity: self.capacity,
            bypassed: self.bypassed,
        }
    }

    fn shrink_to(&mut self, keep: usize) {
        while self.map.len() > keep {
            // A linear scan: caches hold a few hundred entries at most, and evictions are rare
            // next to lookups.
            let Some(oldest) = self
                .map
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            self.map.remove(&oldest);
            self.evictions += 1;
        }
    }
}

/// What every process-wide cache answers to: its name, counters, clearing and capacity.
pub trait CacheControl: Sync {
    /// The cache's name, as `ovl::CacheStats` spells its field.
    fn name(&self) -> &'static str;
    /// The counters since the cache was created or last cleared, and its size.
    fn counters(&self) -> LruCounters;
    /// Drops every entry and resets the counters (the capacity stays).
    fn clear(&self);
    /// Sets the most entries kept (0: the cache is off), evicting beyond it.
    fn set_capacity(&self, capacity: usize);
}

/// A process-wide [`Lru`] behind a mutex, created on first use: `static X: SharedLru<K, V> =
/// SharedLru::new("name", capacity);`. A poisoned lock is taken over (the map is consistent
/// between statements).
pub struct SharedLru<K, V> {
    name: &'static str,
    default: usize,
    /// Read at first use when set: overrides `default`.
    env: Option<&'static str>,
    inner: Mutex<Option<Lru<K, V>>>,
}

impl<K, V> SharedLru<K, V> {
    /// A cache named `name` that starts with `capacity` entries at most.
    pub const fn new(name: &'static str, capacity: usize) -> Self {
        SharedLru {
            name,
            default: capacity,
            env: None,
            inner: Mutex::new(None),
        }
    }

    /// A cache whose first capacity is the environment variable `var` when it is set to a
    /// number, else `capacity`.
    pub const fn with_env(name: &'static str, capacity: usize, var: &'static str) -> Self {
        SharedLru {
            name,
            default: capacity,
            env: Some(var),
            inner: Mutex::new(None),
        }
    }
}

impl<K: Hash + Eq + Clone, V: Clone> SharedLru<K, V> {
    /// The cache, locked (created on first use).
    pub fn lock(&self) -> impl std::ops::DerefMut<Target = Lru<K, V>> + '_ {
        struct Locked<'a, K, V>(MutexGuard<'a, Option<Lru<K, V>>>);
        impl<K, V> std::ops::Deref for Locked<'_, K, V> {
            type Target = Lru<K, V>;
            fn deref(&self) -> &Lru<K, V> {
                self.0.as_ref().expect("created by `lock`")
            }
        }
        impl<K, V> std::ops::DerefMut for Locked<'_, K, V> {
            fn deref_mut(&mut self) -> &mut Lru<K, V> {
                self.0.as_mut().expect("created by `lock`")
            }
        }
        let mut guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            let capacity = match self.env {
                Some(var) => capacity_from_env(var, self.default),
                None => self.default,
            };
            *guard = Some(Lru::new(capacity));
        }
        Locked(guard)
    }

    /// [`Lru::get`] under the lock.
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.lock().get(key)
    }

    /// [`Lru::insert`] under the lock.
    pub fn insert(&self, key: K, value: V) {
        self.lock().insert(key, value)
    }
}

impl<K: Hash + Eq + Clone + Send, V: Clone + Send> CacheControl for SharedLru<K, V> {
    fn name(&self) -> &'static str {
        self.name
    }

    fn counters(&self) -> LruCounters {
        self.lock().counters()
    }

    fn clear(&self) {
        self.lock().clear()
    }

    fn set_capacity(&self, capacity: usize) {
        self.lock().set_capacity(capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_most_recently_used() {
        let mut lru: Lru<u32, &str> = Lru::new(2);
        lru.insert(1, "a");
        lru.insert(2, "b");
        assert_eq!(lru.get(&1), Some("a")); // 1 is now more recent than 2
        lru.insert(3, "c"); // evicts 2
        assert_eq!(lru.get(&2), None);
        assert_eq!(lru.get(&1), Some("a"));
        assert_eq!(lru.get(&3), Some("c"));
        let c = lru.counters();
        assert_eq!((c.hits, c.misses, c.evictions, c.entries), (3, 1, 1, 2));
        lru.set_capacity(1);
        assert_eq!(lru.counters().entries, 1);
        assert_eq!(lru.get(&3), Some("c"), "the most recent entry stays");
        lru.set_capacity(0);
        lru.insert(4, "d");
        assert_eq!(lru.counters().entries, 0, "capacity 0 keeps nothing");
        lru.clear();
        assert_eq!(lru.counters(), LruCounters::default());
    }

    #[test]
    fn evicts_in_order_of_last_use() {
        let mut lru: Lru<u32, u32> = Lru::new(3);
        for k in 0..3 {
            lru.insert(k, k);
        }
        // Use order now: 0, 1, 2; touching 0 and then 1 leaves 2 the least recently used.
        assert_eq!(lru.get(&0), Some(0));
        assert_eq!(lru.get(&1), Some(1));
        lru.insert(3, 3); // evicts 2
        lru.insert(4, 4); // evicts 0
        lru.insert(1, 10); // replaces 1: no eviction, 1 is the most recent
        lru.insert(5, 5); // evicts 3
        let mut kept: Vec<u32> = (0..6).filter(|k| lru.find(k).is_some()).collect();
        kept.sort();
        assert_eq!(kept, vec![1, 4, 5]);
        assert_eq!(lru.counters().evictions, 3);
    }

    #[test]
    fn find_counts_only_hits_and_note_miss_counts_misses() {
        let mut lru: Lru<Vec<u8>, u8> = Lru::new(2);
        assert_eq!(lru.find(b"a".as_slice()), None);
        assert_eq!(lru.counters().misses, 0);
        lru.note_miss();
        lru.insert(b"a".to_vec(), 1);
        assert_eq!(lru.find(b"a".as_slice()), Some(1));
        let c = lru.counters();
        assert_eq!((c.hits, c.misses, c.entries), (1, 1, 1));
        lru.retain(|k| k != b"a");
        assert_eq!(lru.counters().entries, 0);
    }

    #[test]
    fn a_shared_cache_is_created_on_first_use_and_controlled_through_the_trait() {
        static CACHE: SharedLru<u32, u32> = SharedLru::new("test", 2);
        let control: &dyn CacheControl = &CACHE;
        assert_eq!(control.name(), "test");
        assert_eq!(control.counters().capacity, 2);
        CACHE.insert(1, 1);
        CACHE.insert(2, 2);
        CACHE.insert(3, 3);
        assert_eq!(CACHE.get(&1), None);
        assert_eq!(CACHE.get(&3), Some(3));
        let c = control.counters();
        assert_eq!((c.hits, c.misses, c.evictions, c.entries), (1, 1, 1, 2));
        control.set_capacity(1);
        assert_eq!(control.counters().entries, 1);
        control.clear();
        assert_eq!(
            control.counters(),
            LruCounters {
                capacity: 1,
                ..LruCounters::default()
            }
        );
    }
}
