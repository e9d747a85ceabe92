//! The replication throttle for reassignment catch-up (Kafka's `follower.replication.throttled.rate`
//! with the throttled replicas being exactly those a reassignment is adding, as
//! `kafka-reassign-partitions.sh --throttle` sets them): a token bucket of bytes per second
//! shared by every throttled partition this broker follows.
//!
//! Contract: after each throttled fetch the fetcher reports the bytes it got
//! ([`Throttle::fetched`]) and waits the returned milliseconds before that partition's next fetch;
//! it asks for at most [`Throttle::fetch_bytes_max`] bytes. Over any run the bytes fetched are then at
//! most `rate * seconds + burst + one batch` (a Fetch returns at least one whole batch, KIP-74,
//! even when it is larger than the limit asked for). Time is an argument (`now_ms`), so the
//! bucket is testable without a runtime. Replicas already in the assignment (not being added) are
//! never throttled: they carry the ISR and so the producers' acks=all latency.

/// A token bucket of bytes; `rate_bytes_per_s` > 0.
#[derive(Clone, Debug)]
pub struct Throttle {
    rate_bytes_per_s: u64,
    /// What may be fetched at once after a quiet spell: a tenth of a second's worth (at least
    /// one byte), so a burst stays small against the rate.
    burst_bytes: u64,
    /// Bytes available now; negative after a fetch larger than what was available (that debt is
    /// paid by waiting).
    tokens: i64,
    last_ms: Option<u64>,
}

impl Throttle {
    pub fn new(rate_bytes_per_s: u64) -> Throttle {
        let rate_bytes_per_s = rate_bytes_per_s.max(1);
        let burst_bytes = (rate_bytes_per_s / 10).max(1);
        Throttle {
            rate_bytes_per_s,
            burst_bytes,
            tokens: i64::try_from(burst_bytes).unwrap_or(i64::MAX),
            last_ms: None,
        }
    }

    pub fn rate_bytes_per_s(&self) -> u64 {
        self.rate_bytes_per_s
    }

    fn refill(&mut self, now_ms: u64) {
        let elapsed_ms = self.last_ms.map_or(0, |last| now_ms.saturating_sub(last));
        self.last_ms = Some(now_ms.max(self.last_ms.unwrap_or(0)));
        let earned = u128::from(elapsed_ms) * u128::from(self.rate_bytes_per_s) / 1_000;
        let cap = i128::from(self.burst_bytes);
        let tokens = (i128::from(self.tokens) + i128::try_from(earned).unwrap_or(i128::MAX)).min(cap);
        self.tokens = i64::try_from(tokens).unwrap_or(i64::MAX);
    }

    /// The most bytes the next throttled fetch should ask for (at least 1: the leader still
    /// returns one whole batch).
    pub fn fetch_bytes_max(&mut self, now_ms: u64) -> i32 {
        self.refill(now_ms);
        let available = u64::try_from(self.tokens.max(1)).unwrap_or(1);
        i32::try_from(available.min(self.burst_bytes)).unwrap_or(i32::MAX)
    }

    /// Records `bytes` fetched at `now_ms`; returns how long to wait before the next throttled
    /// fetch (0 when the bucket still holds tokens).
    pub fn fetched(&mut self, now_ms: u64, bytes: u64) -> u64 {
        self.refill(now_ms);
        self.tokens = self.tokens.saturating_sub(i64::try_from(bytes).unwrap_or(i64::MAX));
        if self.tokens >= 0 {
            return 0;
        }
        let debt = u128::from(self.tokens.unsigned_abs());
        let wait = (debt * 1_000).div_ceil(u128::from(self.rate_bytes_per_s));
        u64::try_from(wait).unwrap_or(u64::MAX)
    }

    /// How long to wait before fetching at all (a debt from another partition's fetch).
    pub fn wait_ms(&mut self, now_ms: u64) -> u64 {
        self.refill(now_ms);
        if self.tokens > 0 {
            return 0;
        }
        let debt = u128::from(self.tokens.unsigned_abs()) + 1;
        u64::try_from((debt * 1_000).div_ceil(u128::from(self.rate_bytes_per_s))).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A follower catching up on a leader with far more data than the cap allows: each fetch
    /// returns what was asked for, rounded up to whole 16 KiB batches (a batch is never split),
    /// and takes 2 ms. Over every 5-second window the bytes fetched stay under the cap plus the
    /// burst and one batch; unthrottled, the same follower fetches far more.
    #[test]
    fn a_throttled_follower_stays_under_the_cap() {
        const BATCH: u64 = 16 * 1024;
        let rate = 200_000u64;
        let mut t = Throttle::new(rate);
        let mut now = 0u64;
        let mut log: Vec<(u64, u64)> = Vec::new(); // (ms, bytes)
        for _ in 0..100_000 {
            if now > 60_000 {
                break;
            }
            now += t.wait_ms(now);
            let ask = u64::try_from(t.fetch_bytes_max(now)).expect("positive");
            let got = ask.div_ceil(BATCH) * BATCH;
            now += 2;
            log.push((now, got));
            now += t.fetched(now, got);
        }
        let total: u64 = log.iter().map(|(_, b)| b).sum();
        let window_ms = 5_000;
        let mut worst = 0u64;
        for start in (0..55_000).step_by(250) {
            let bytes: u64 = log
                .iter()
                .filter(|(ms, _)| (start..start + window_ms).contains(ms))
                .map(|(_, b)| b)
                .sum();
            worst = worst.max(bytes);
        }
        let bound = rate * window_ms / 1_000 + rate / 10 + BATCH;
        println!(
            "throttled: {} fetches, {total} bytes in {now} ms ({} B/s against a cap of {rate}); \
             worst 5 s window {worst} bytes, bound {bound}",
            log.len(),
            total * 1_000 / now
        );
        assert!(log.len() > 10, "compared too few fetches");
        assert!(worst <= bound, "worst window {worst} > {bound}");
        assert!(total * 1_000 / now <= rate + rate / 20);
        // Unthrottled, 2 ms per 1 MiB fetch would be ~500 MB/s: the cap is what held it.
        assert!(total < 60 * rate * 2);
    }

    #[test]
    fn fetched_within_the_burst_waits_nothing_and_debt_waits_in_proportion() {
        let mut t = Throttle::new(1_000);
        assert_eq!(t.fetch_bytes_max(0), 100);
        assert_eq!(t.fetched(0, 50), 0);
        // 50 left; 550 more puts it 500 in debt: half a second at 1000 B/s.
        assert_eq!(t.fetched(0, 550), 500);
        assert!(t.wait_ms(250) > 0);
        assert_eq!(t.wait_ms(501), 0);
        // A clock that goes backwards earns nothing and does not panic.
        assert_eq!(t.fetched(100, 0), 0);
        let mut zero = Throttle::new(0);
        assert_eq!(zero.rate_bytes_per_s(), 1);
        assert!(zero.fetched(0, u64::MAX) > 0);
    }
}
