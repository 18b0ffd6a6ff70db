//! One retry-delay policy for every retry loop in Cairn: the client across fail-overs, a
//! chain head re-forwarding a refused write, `cairnd` re-opening its config watch, the
//! config store's watch.
//!
//! A [`Backoff`] hands out the delay before each next attempt: growing linearly
//! (`step`, `2 step`, ...) or doubling (`first`, `2 first`, `4 first`, ...), never more
//! than `max`, or constant. The loop owns the rest (how many attempts, until when, what
//! ends the wait early), so each keeps its own budget.

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Growth {
    Linear,
    Doubling,
}

/// Delays between attempts; see the module documentation.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    growth: Growth,
    attempt: u32,
}

impl Backoff {
    /// `step`, `2 step`, `3 step`, ..., at most `max`.
    pub const fn linear(step: Duration, max: Duration) -> Backoff {
        Backoff { first: step, max, growth: Growth::Linear, attempt: 0 }
    }

    /// `first`, `2 first`, `4 first`, ..., at most `max`.
    pub const fn doubling(first: Duration, max: Duration) -> Backoff {
        Backoff { first, max, growth: Growth::Doubling, attempt: 0 }
    }

    /// Always `delay` (linear growth from `delay`, capped at `delay`).
    pub const fn constant(delay: Duration) -> Backoff {
        Backoff::linear(delay, delay)
    }

    /// The delay before the next attempt (the first call: before the second attempt).
    pub fn next_delay(&mut self) -> Duration {
        self.attempt = self.attempt.saturating_add(1);
        let d = match self.growth {
            Growth::Linear => self.first.saturating_mul(self.attempt),
            Growth::Doubling => {
                let factor = 1u32.checked_shl(self.attempt - 1).unwrap_or(u32::MAX);
                self.first.saturating_mul(factor)
            }
        };
        d.min(self.max)
    }

    /// Sleep for [`next_delay`](Self::next_delay).
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next_delay()).await;
    }

    /// Delays handed out so far (the retries so far).
    pub fn attempts(&self) -> u32 {
        self.attempt
    }

    /// Start over (after a success): the next delay is the first again.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    fn take(b: &mut Backoff, n: usize) -> Vec<u64> {
        (0..n).map(|_| b.next_delay().as_millis() as u64).collect()
    }

    #[test]
    fn linear_grows_by_its_step_up_to_max() {
        let mut b = Backoff::linear(ms(25), ms(500));
        let v = take(&mut b, 22);
        assert_eq!(&v[..4], &[25, 50, 75, 100]);
        assert_eq!(v[19], 500);
        assert_eq!(v[21], 500);
        assert_eq!(b.attempts(), 22);
        b.reset();
        assert_eq!(b.next_delay(), ms(25));
    }

    #[test]
    fn doubling_up_to_max_and_reset() {
        let mut b = Backoff::doubling(ms(100), Duration::from_secs(5));
        assert_eq!(take(&mut b, 8), vec![100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        b.reset();
        assert_eq!(b.next_delay(), ms(100));
        // No overflow however long it runs.
        let mut b = Backoff::doubling(ms(1), Duration::MAX);
        for _ in 0..100 {
            b.next_delay();
        }
        assert!(b.next_delay() >= Duration::from_secs(1 << 20));
    }

    #[test]
    fn constant_is_constant() {
        let mut b = Backoff::constant(Duration::from_secs(1));
        assert_eq!(take(&mut b, 3), vec![1000, 1000, 1000]);
    }

    #[tokio::test(start_paused = true)]
    async fn wait_sleeps_the_delay() {
        let mut b = Backoff::linear(ms(100), ms(1000));
        let t = tokio::time::Instant::now();
        b.wait().await;
        b.wait().await;
        assert_eq!(t.elapsed(), ms(300));
    }
}
