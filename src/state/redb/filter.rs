//! A blocked Bloom filter over the row keys of one state's database table,
//! so that a cache miss on a key the table has never held costs a hash and
//! one cache line instead of a B-tree lookup.
//!
//! Invariant: every row key present in the table (as of any commit the
//! reader can see) was [`insert`](KeyFilter::insert)ed before the write that
//! put it there. Removals never clear bits (the filter only answers "maybe
//! present" too often, never "absent" wrongly); the table owner rebuilds the
//! filter from the table's rows when it holds more keys than it was sized
//! for ([`is_full`](KeyFilter::is_full)).
//!
//! Each key sets [`BITS_PER_KEY_PROBES`] bits in one 512-bit block (one
//! cache line) chosen by its hash: a few per cent false positives when
//! full at 10 bits per key (each costs the B-tree lookup it would have
//! cost anyway), fewer below.

use std::hash::Hasher;

/// Bits set per key, all in the key's block.
const BITS_PER_KEY_PROBES: u32 = 6;
/// Bits of filter per key it is sized for.
const BITS_PER_KEY: usize = 10;
/// `u64` words per block: one 64-byte cache line.
const BLOCK_WORDS: usize = 8;

/// A Bloom filter of row keys (see the module doc).
pub(super) struct KeyFilter {
    /// `BLOCK_WORDS` words per block; the number of blocks is a power of two.
    words: Vec<u64>,
    /// `64 - log2(blocks)`: the block is the top bits of a remixed hash.
    block_shift: u32,
    /// Keys inserted that were not already (maybe) present.
    keys: usize,
    /// Keys it is sized for.
    capacity: usize,
}

/// A 64-bit hash of `bytes`, mixed so that every bit depends on every input
/// bit.
fn hash(bytes: &[u8]) -> u64 {
    let mut h = rustc_hash::FxHasher::default();
    h.write(bytes);
    // murmur3's 64-bit finaliser.
    let mut x = h.finish() ^ bytes.len() as u64;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

impl KeyFilter {
    /// An empty filter sized for `capacity` keys (at least 1,024).
    pub(super) fn with_capacity(capacity: usize) -> Self {
        let capacity = capacity.max(1 << 10);
        let blocks = (capacity * BITS_PER_KEY)
            .div_ceil(64 * BLOCK_WORDS)
            .next_power_of_two();
        KeyFilter {
            words: vec![0; blocks * BLOCK_WORDS],
            block_shift: 64 - blocks.trailing_zeros(),
            keys: 0,
            capacity,
        }
    }

    /// The probes of `bytes`: (word index, bit mask).
    fn probes(&self, bytes: &[u8]) -> [(usize, u64); BITS_PER_KEY_PROBES as usize] {
        let h = hash(bytes);
        // The block from a multiplicative remix of the hash, the probes from
        // its low 54 bits, 9 bits each (word 3 bits, bit 6): independent.
        let block = h
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .checked_shr(self.block_shift)
            .unwrap_or(0) as usize
            * BLOCK_WORDS;
        let mut bits = h;
        let mut out = [(0, 0); BITS_PER_KEY_PROBES as usize];
        for p in &mut out {
            let word = (bits & 7) as usize;
            let bit = (bits >> 3) & 63;
            *p = (block + word, 1u64 << bit);
            bits >>= 9;
        }
        out
    }

    /// Whether `bytes` may have been inserted (`false`: certainly not).
    pub(super) fn may_contain(&self, bytes: &[u8]) -> bool {
        let probes = self.probes(bytes);
        probes.iter().all(|&(w, m)| self.words[w] & m != 0)
    }

    /// Adds `bytes`.
    pub(super) fn insert(&mut self, bytes: &[u8]) {
        let probes = self.probes(bytes);
        let mut new = false;
        for (w, m) in probes {
            new |= self.words[w] & m == 0;
            self.words[w] |= m;
        }
        self.keys += usize::from(new);
    }

    /// More keys were added than it was sized for: false positives grow.
    pub(super) fn is_full(&self) -> bool {
        self.keys > self.capacity
    }

    /// Its memory, in bytes.
    pub(super) fn bytes(&self) -> usize {
        self.words.len() * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let mut f = KeyFilter::with_capacity(100_000);
        for i in 0u64..100_000 {
            f.insert(&i.to_be_bytes());
        }
        for i in 0u64..100_000 {
            assert!(f.may_contain(&i.to_be_bytes()));
        }
        let fp = (100_000u64..200_000)
            .filter(|i| f.may_contain(&i.to_be_bytes()))
            .count();
        // Sized at 10 bits per key (rounded up to a power of two blocks).
        assert!(fp < 5_000, "{fp} false positives in 100,000");
        assert!(!f.is_full());
        f.insert(&u64::MAX.to_be_bytes());
        f.insert(&(u64::MAX - 1).to_be_bytes());
        assert!(f.keys <= 100_002);
    }
}
