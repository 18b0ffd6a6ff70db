//! Heal crawl statistics of one brick (`cairn volume heal VOL statistics`) and the token
//! bucket of `cluster.heal-bandwidth`: plain data, kept in each `BrickSlot`.

use cairn_proto::mgmt::CrawlInfo;
use std::time::{Duration, Instant};

/// Crawl statistics of one brick (kept in memory; the running crawl and the last finished
/// one of each kind).
#[derive(Default)]
pub struct HealStats {
    pub(crate) current: Option<CrawlInfo>,
    pub(crate) last_index: Option<CrawlInfo>,
    pub(crate) last_full: Option<CrawlInfo>,
    /// Token bucket of `cluster.heal-bandwidth`: bytes available (negative: owed), as of.
    pub(crate) tokens: f64,
    pub(crate) tokens_at: Option<Instant>,
}

impl HealStats {
    /// Newest first: the running crawl, then the last finished ones.
    pub fn crawls(&self) -> Vec<CrawlInfo> {
        let mut v: Vec<CrawlInfo> =
            [&self.last_index, &self.last_full].into_iter().flatten().cloned().collect();
        v.sort_by_key(|c| std::cmp::Reverse(c.ended));
        if let Some(c) = &self.current {
            v.insert(0, c.clone());
        }
        v
    }

    pub fn in_progress(&self) -> bool {
        self.current.is_some()
    }

    /// Take `n` bytes from the bucket (`rate` bytes/s, one second of burst); returns how
    /// long to wait before copying on, and by how much this take pushed back the moment
    /// the bucket is out of debt (summed, that is the crawl's wall time lost to the limit,
    /// however many copies wait side by side).
    pub(crate) fn take(&mut self, rate: u64, n: u64) -> (Duration, Duration) {
        let now = Instant::now();
        let rate = rate as f64;
        let have = match self.tokens_at {
            Some(at) => (self.tokens + now.duration_since(at).as_secs_f64() * rate).min(rate),
            None => rate,
        };
        let owed_before = Duration::from_secs_f64((-have).max(0.0) / rate);
        self.tokens = have - n as f64;
        self.tokens_at = Some(now);
        let wait = Duration::from_secs_f64((-self.tokens).max(0.0) / rate);
        (wait, wait.saturating_sub(owed_before))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_a_second_of_burst_then_paces() {
        let mut st = HealStats::default();
        assert_eq!(st.take(1000, 1000), (Duration::ZERO, Duration::ZERO));
        let (w, a) = st.take(1000, 500);
        assert!(w > Duration::from_millis(400) && w <= Duration::from_millis(500), "{w:?}");
        assert_eq!(w, a);
        // A second copy waiting side by side: it waits longer, the crawl loses 1 s more.
        let (w, a) = st.take(1000, 1000);
        assert!(w > Duration::from_millis(1400), "{w:?}");
        assert!(a > Duration::from_millis(990) && a <= Duration::from_millis(1000), "{a:?}");
    }
}
