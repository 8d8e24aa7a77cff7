//! A fast, non-cryptographic hasher for the in-process tables on the hot path of a repeated
//! evaluation (node addresses while walking the lazy graph, memo keys). Keys are compared
//! exactly, so a collision costs a comparison, never a wrong answer; the tables hold nothing
//! an attacker chooses, so resistance to flooding is not needed.

use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-rotate over 8-byte words (the scheme of rustc's FxHasher).
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 56));
        }
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// `HashMap<K, V, FastBuild>`: a map hashed by [`FastHasher`].
pub type FastBuild = BuildHasherDefault<FastHasher>;
