//! Key groups: the unit in which keyed state is partitioned and redistributed.
//!
//! A key maps to one of `max_parallelism` key groups through a stable hash — the
//! same in every build, process and machine (never `RandomState`) — and each
//! subtask owns a contiguous range of key groups, as in Flink:
//! `subtask = key_group * parallelism / max_parallelism`.

use std::hash::{Hash, Hasher};
use std::ops::Range;

/// The default maximum parallelism (number of key groups).
pub const DEFAULT_MAX_PARALLELISM: u32 = 128;

/// A deterministic, platform-independent 64-bit hasher: bytes are consumed
/// eight at a time as little-endian words (multiply-rotate mixing), integers
/// are fed as little-endian values, and a murmur3 finaliser spreads the result.
#[derive(Clone, Copy, Debug)]
pub struct StableHasher {
    state: u64,
}

const SEED: u64 = 0xcbf2_9ce4_8422_2325;
const MUL: u64 = 0x9e37_79b9_7f4a_7c15;

impl Default for StableHasher {
    fn default() -> Self {
        StableHasher { state: SEED }
    }
}

impl StableHasher {
    #[inline]
    fn mix(&mut self, word: u64) {
        self.state = (self.state ^ word).wrapping_mul(MUL).rotate_left(29);
    }
}

impl Hasher for StableHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.mix(u64::from_le_bytes(c.try_into().expect("8-byte chunk")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            // The length keeps "a" and "a\0" apart.
            self.mix(tail_word(rest) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.mix(u64::from(i));
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.mix(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.mix(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        // usize is hashed as u64 so 32- and 64-bit builds agree.
        self.write_u64(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        fmix64(self.state)
    }
}

/// The 1–7 bytes of `rest` as a little-endian word padded with zeros, the
/// value `u64::from_le_bytes` gives for them copied into a zeroed `[u8; 8]`,
/// read with at most two loads and no copy: a short key (most words) is all
/// tail, and the copy's call and store-to-load stall cost more than the
/// hash itself. Overlapping reads put the same bytes in the same places.
#[inline]
fn tail_word(rest: &[u8]) -> u64 {
    let n = rest.len();
    debug_assert!((1..8).contains(&n));
    if n >= 4 {
        let lo = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
        let hi = u32::from_le_bytes([rest[n - 4], rest[n - 3], rest[n - 2], rest[n - 1]]);
        u64::from(lo) | (u64::from(hi) << (8 * (n - 4)))
    } else {
        u64::from(rest[0])
            | (u64::from(rest[n / 2]) << (8 * (n / 2)))
            | (u64::from(rest[n - 1]) << (8 * (n - 1)))
    }
}

/// murmur3's 64-bit finaliser: spreads every input bit over the output.
#[inline]
pub fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

/// The stable hash of a key.
#[inline]
pub fn stable_hash<K: Hash + ?Sized>(key: &K) -> u64 {
    let mut h = StableHasher::default();
    key.hash(&mut h);
    h.finish()
}

/// The key group of a key hash: the high 32 bits of the hash scaled to
/// `0..max_parallelism` (a multiply and a shift, no division).
#[inline]
pub fn key_group_of_hash(hash: u64, max_parallelism: u32) -> u32 {
    (((hash >> 32) * u64::from(max_parallelism)) >> 32) as u32
}

/// The key group of a key.
#[inline]
pub fn key_group<K: Hash + ?Sized>(key: &K, max_parallelism: u32) -> u32 {
    key_group_of_hash(stable_hash(key), max_parallelism)
}

/// The subtask (operator index) that owns a key group.
#[inline]
pub fn subtask_for_key_group(key_group: u32, max_parallelism: u32, parallelism: u32) -> u32 {
    (u64::from(key_group) * u64::from(parallelism) / u64::from(max_parallelism)) as u32
}

/// The contiguous range of key groups a subtask owns.
pub fn key_group_range(subtask: u32, max_parallelism: u32, parallelism: u32) -> Range<u32> {
    let (s, m, p) = (
        u64::from(subtask),
        u64::from(max_parallelism),
        u64::from(parallelism),
    );
    // Smallest key group g with g * p / m >= s, i.e. ceil(s * m / p).
    let start = (s * m).div_ceil(p);
    let end = ((s + 1) * m).div_ceil(p);
    (start as u32)..(end as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hash_is_stable_across_builds() {
        // Pinned values: a change here would move every key to another key group
        // and break restoring state written by an earlier build.
        assert_eq!(stable_hash("hello"), 0x4134_14de_d020_7742);
        assert_eq!(stable_hash(&42u64), 0x6683_66a6_7ecb_e7ad);
        assert_eq!(stable_hash(&(1u32, "ab")), 0xc420_d6df_dcd5_1e13);
        assert_eq!(stable_hash("hello"), stable_hash(&"hello".to_string()));
        assert_ne!(stable_hash("a"), stable_hash("a\0"));
        assert_ne!(stable_hash("a"), stable_hash("b"));
    }

    /// The padded copy `tail_word` stands for: the oracle.
    fn tail_word_by_copy(rest: &[u8]) -> u64 {
        let mut buf = [0u8; 8];
        buf[..rest.len()].copy_from_slice(rest);
        u64::from_le_bytes(buf)
    }

    #[test]
    fn tail_word_is_the_zero_padded_copy() {
        let bytes: Vec<u8> = (0..7u8).map(|b| 0x81 ^ b.wrapping_mul(37)).collect();
        for n in 1..8 {
            assert_eq!(
                tail_word(&bytes[..n]),
                tail_word_by_copy(&bytes[..n]),
                "{n} bytes"
            );
        }
    }

    proptest! {
        #[test]
        fn tail_word_matches_the_copy(rest in proptest::collection::vec(any::<u8>(), 1..8)) {
            prop_assert_eq!(tail_word(&rest), tail_word_by_copy(&rest));
        }

        #[test]
        fn key_group_in_range(key in any::<u64>(), maxp in 1u32..4096) {
            prop_assert!(key_group(&key, maxp) < maxp);
        }

        #[test]
        fn ranges_partition_key_groups(maxp in 1u32..1024, p_seed in any::<u32>()) {
            let p = 1 + p_seed % maxp;
            let mut next = 0;
            for s in 0..p {
                let r = key_group_range(s, maxp, p);
                prop_assert_eq!(r.start, next);
                for g in r.clone() {
                    prop_assert_eq!(subtask_for_key_group(g, maxp, p), s);
                }
                next = r.end;
            }
            prop_assert_eq!(next, maxp);
        }
    }
}
