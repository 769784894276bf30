//! A filter of the keys a stored run holds (a blocked Bloom filter): asked
//! for a key, "no" is certain and "maybe" wrong a few times in a thousand, so
//! a lookup reads a page of a run only when the run may hold the key. All
//! of a key's bits lie in one 512-bit block, so asking costs one cache
//! line, not one per bit. Written by hand (some 80 lines) because its
//! stored form must stay readable across releases: the hash is XXH3, a
//! fixed specification, and the layout is ours.

use twox_hash::XxHash3_64;

/// Bits set per key, and bits per key: a lookup probes every run's
/// filter, and a wrong "maybe" costs a page read, so with a dozen runs a
/// rate of 1 % (10 bits a key) read a page for one lookup in ten; 16 bits
/// a key (2 bytes) keep it a few in a thousand per run.
const BITS_PER_KEY_SET: u32 = 8;
const BITS_PER_KEY: usize = 16;
/// A block: eight words, one cache line.
const BLOCK_WORDS: usize = 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyFilter {
    words: Vec<u64>,
    /// Bits set per key (stored, so a filter reads as it was written).
    bits_set: u32,
}

impl KeyFilter {
    /// A filter sized for `keys` keys.
    pub fn with_capacity(keys: usize) -> Self {
        let blocks = (keys.max(1) * BITS_PER_KEY).div_ceil(BLOCK_WORDS * 64);
        KeyFilter {
            words: vec![0; blocks * BLOCK_WORDS],
            bits_set: BITS_PER_KEY_SET,
        }
    }

    /// The hash the filter takes (computed once for a lookup in many runs).
    pub fn hash(key: &[u8]) -> u64 {
        XxHash3_64::oneshot(key)
    }

    /// The block and the bits of `hash`: the block from its high half, a
    /// bit per step of the low half (double hashing within the block).
    fn positions(&self, hash: u64) -> (usize, impl Iterator<Item = usize>) {
        let blocks = (self.words.len() / BLOCK_WORDS) as u64;
        let block = (((hash >> 32) * blocks) >> 32) as usize * BLOCK_WORDS;
        let first = hash as u32;
        let step = (first >> 17) | 1;
        let bits = (0..self.bits_set).map(move |i| (first.wrapping_add(i * step) % 512) as usize);
        (block, bits)
    }

    pub fn insert(&mut self, key: &[u8]) {
        let (block, bits) = self.positions(Self::hash(key));
        for bit in bits {
            self.words[block + bit / 64] |= 1 << (bit % 64);
        }
    }

    /// False when no key with this hash was inserted.
    pub fn may_hold(&self, hash: u64) -> bool {
        if self.words.is_empty() {
            return false;
        }
        let (block, mut bits) = self.positions(hash);
        bits.all(|bit| self.words[block + bit / 64] & (1 << (bit % 64)) != 0)
    }

    pub fn memory_bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// Appends its stored form: bits set per key (u8), the word count
    /// (u32 BE), then the words (u64 LE).
    pub fn encode_into(&self, bytes: &mut Vec<u8>) {
        bytes.push(self.bits_set as u8);
        bytes.extend_from_slice(&(self.words.len() as u32).to_be_bytes());
        for word in &self.words {
            bytes.extend_from_slice(&word.to_le_bytes());
        }
    }

    /// The filter `encode_into` wrote (all of `bytes`), None if damaged.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let (&bits_set, bytes) = bytes.split_first()?;
        let (count, rest) = bytes.split_at_checked(4)?;
        let count = u32::from_be_bytes(count.try_into().ok()?) as usize;
        if rest.len() != count * 8 || count % BLOCK_WORDS != 0 || !(1..=16).contains(&bits_set) {
            return None;
        }
        let words = rest
            .chunks_exact(8)
            .map(|word| u64::from_le_bytes(word.try_into().expect("8 bytes")))
            .collect();
        Some(KeyFilter {
            words,
            bits_set: u32::from(bits_set),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_inserted_key_is_held_and_few_others_seem_to_be() {
        let mut filter = KeyFilter::with_capacity(100_000);
        for i in 0..100_000u32 {
            filter.insert(&i.to_be_bytes());
        }
        assert!((0..100_000u32).all(|i| filter.may_hold(KeyFilter::hash(&i.to_be_bytes()))));
        let wrong = (100_000..200_000u32)
            .filter(|i| filter.may_hold(KeyFilter::hash(&i.to_be_bytes())))
            .count();
        assert!(wrong < 600, "{wrong} of 100000 absent keys seem held");
        let mut stored = Vec::new();
        filter.encode_into(&mut stored);
        assert_eq!(KeyFilter::decode(&stored), Some(filter));
        assert_eq!(KeyFilter::decode(&stored[..stored.len() - 1]), None);
    }

    #[test]
    fn an_empty_filter_holds_nothing() {
        let filter = KeyFilter::with_capacity(0);
        assert!(!filter.may_hold(KeyFilter::hash(b"x")));
    }
}
