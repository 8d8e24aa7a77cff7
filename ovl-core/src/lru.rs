//! The eviction policy shared by ovl's in-process caches of things built from a graph (the plan
//! cache of `ovl::evaluate`, the backward cache of [`crate::autodiff::backward`]): keep the
//! `capacity` most recently used entries, evict the least recently used one first, and turn the
//! cache off with a capacity of 0. The default capacity is [`DEFAULT_CAPACITY`], or
//! `OVL_PLAN_CACHE_SIZE` when that is set when the cache is first used ([`initial_capacity`]).

use crate::fast_hash::FastBuild;
use std::collections::HashMap;
use std::hash::Hash;

/// How many entries a cache keeps unless `OVL_PLAN_CACHE_SIZE` or a setter says otherwise.
pub const DEFAULT_CAPACITY: usize = 128;

/// The capacity a cache starts with: `OVL_PLAN_CACHE_SIZE` when it is set to a number, else
/// [`DEFAULT_CAPACITY`].
pub fn initial_capacity() -> usize {
    std::env::var("OVL_PLAN_CACHE_SIZE")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_CAPACITY)
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
        }
    }

    /// The most entries kept (0: the cache is off).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The entry of `key` (marked as just used), counting a hit or a miss.
    pub fn get(&mut self, key: &K) -> Option<V> {
        self.clock += 1;
        match self.map.get_mut(key) {
            Some((v, used)) => {
                *used = self.clock;
                self.hits += 1;
                Some(v.clone())
            }
            None => {
                self.misses += 1;
                None
            }
        }
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
    }

    /// The counters and the size.
    pub fn counters(&self) -> LruCounters {
        LruCounters {
            hits: self.hits,
            misses: self.misses,
            evictions: self.evictions,
            entries: self.map.len(),
            capacity: self.capacity,
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
}
