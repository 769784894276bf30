//! Helpers for unit tests across modules.

/// A small deterministic generator (xorshift), so a failing seed replays.
pub struct Random(pub u64);

impl Random {
    /// A number in `0..bound`.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % bound
    }
}
