//! What the simulation tests share.

/// xorshift64*: small, seedable, reproducible.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    #[allow(dead_code)] // not every test binary that includes this module uses it
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}
