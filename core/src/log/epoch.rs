//! The leader-epoch cache (KIP-101/279): for each leader epoch, the first offset it wrote.
//!
//! Followers truncate by asking the leader for the end offset of their latest epoch, never by
//! the high watermark, which loses or diverges data across two quick failovers. The cache is
//! persisted as `leader-epoch-checkpoint` (Kafka's text format: version, count, then
//! `epoch start_offset` lines), replaced atomically; when the file is missing or damaged the log
//! rebuilds it from the epochs stamped in its batches.

use crate::ids::{LeaderEpoch, Offset};

pub const FILE: &str = "leader-epoch-checkpoint";

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EpochCache {
    /// (epoch, start offset), both strictly increasing.
    entries: Vec<(LeaderEpoch, Offset)>,
}

impl EpochCache {
    pub fn entries(&self) -> &[(LeaderEpoch, Offset)] {
        &self.entries
    }

    pub fn latest(&self) -> Option<LeaderEpoch> {
        self.entries.last().map(|e| e.0)
    }

    /// Records that `epoch` starts at `start`. Returns whether the cache changed. An epoch older
    /// than the latest is ignored (the caller has already refused it).
    pub fn assign(&mut self, epoch: LeaderEpoch, start: Offset) -> bool {
        match self.entries.last() {
            Some(&(last, _)) if epoch <= last => false,
            Some(&(_, last_start)) if start < last_start => {
                // A newer epoch can only start at or after the previous one's start; anything
                // else means the entries above `start` are stale.
                self.truncate_from_end(start);
                self.entries.push((epoch, start));
                true
            }
            _ => {
                self.entries.push((epoch, start));
                true
            }
        }
    }

    /// Drops epochs that start at or after `end` (the log was truncated to `end`).
    pub fn truncate_from_end(&mut self, end: Offset) -> bool {
        let before = self.entries.len();
        self.entries.retain(|&(_, start)| start < end);
        before != self.entries.len()
    }

    /// The log now starts at `start`: epochs wholly before it go, the one covering it starts there.
    pub fn truncate_from_start(&mut self, start: Offset) -> bool {
        let covering = self.entries.partition_point(|&(_, s)| s <= start);
        if covering <= 1 && self.entries.first().is_none_or(|&(_, s)| s >= start) {
            return false;
        }
        let keep_from = covering.saturating_sub(1);
        self.entries.drain(..keep_from);
        if let Some(first) = self.entries.first_mut() {
            if first.1 < start {
                first.1 = start;
            }
        }
        true
    }

    /// KIP-279's OffsetsForLeaderEpoch answer for `requested`, given the log end offset: the
    /// largest epoch at most `requested`, and the offset where the next epoch starts (or the log
    /// end for the latest epoch). `None` when no known epoch is that old.
    pub fn end_offset_for(&self, requested: LeaderEpoch, log_end: Offset) -> Option<(LeaderEpoch, Offset)> {
        let i = self.entries.partition_point(|&(e, _)| e <= requested);
        let (epoch, _) = *self.entries.get(i.checked_sub(1)?)?;
        let end = self.entries.get(i).map_or(log_end, |&(_, next_start)| next_start);
        Some((epoch, end))
    }

    /// The epoch that wrote `offset`, if known.
    pub fn epoch_for(&self, offset: Offset) -> Option<LeaderEpoch> {
        let i = self.entries.partition_point(|&(_, s)| s <= offset);
        i.checked_sub(1).map(|i| self.entries[i].0)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut s = format!("0\n{}\n", self.entries.len());
        for (e, o) in &self.entries {
            s.push_str(&format!("{} {}\n", e.0, o.0));
        }
        s.into_bytes()
    }

    /// Parses a checkpoint; `None` when it is damaged in any way.
    pub fn decode(bytes: &[u8]) -> Option<EpochCache> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut lines = text.lines();
        if lines.next()? != "0" {
            return None;
        }
        let count: usize = lines.next()?.parse().ok()?;
        let mut cache = EpochCache::default();
        for _ in 0..count {
            let mut parts = lines.next()?.split(' ');
            let epoch = LeaderEpoch(parts.next()?.parse().ok()?);
            let start = Offset(parts.next()?.parse().ok()?);
            if parts.next().is_some() || start.0 < 0 || epoch.0 < 0 {
                return None;
            }
            if cache.entries.last().is_some_and(|&(e, s)| e >= epoch || s > start) {
                return None;
            }
            cache.entries.push((epoch, start));
        }
        if lines.next().is_some() {
            return None;
        }
        Some(cache)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[(i32, i64)]) -> EpochCache {
        EpochCache {
            entries: entries.iter().map(|&(e, o)| (LeaderEpoch(e), Offset(o))).collect(),
        }
    }

    #[test]
    fn end_offsets_follow_kip_279() {
        let c = cache(&[(1, 0), (3, 10), (4, 25)]);
        assert_eq!(c.end_offset_for(LeaderEpoch(0), Offset(40)), None);
        assert_eq!(
            c.end_offset_for(LeaderEpoch(1), Offset(40)),
            Some((LeaderEpoch(1), Offset(10)))
        );
        // Epoch 2 never wrote: the answer is the largest epoch below it and its end.
        assert_eq!(
            c.end_offset_for(LeaderEpoch(2), Offset(40)),
            Some((LeaderEpoch(1), Offset(10)))
        );
        assert_eq!(
            c.end_offset_for(LeaderEpoch(4), Offset(40)),
            Some((LeaderEpoch(4), Offset(40)))
        );
        assert_eq!(
            c.end_offset_for(LeaderEpoch(9), Offset(40)),
            Some((LeaderEpoch(4), Offset(40)))
        );
        assert_eq!(c.epoch_for(Offset(12)), Some(LeaderEpoch(3)));
    }

    #[test]
    fn truncation_and_checkpoint_round_trip() {
        let mut c = cache(&[(1, 0), (3, 10), (4, 25)]);
        assert!(c.truncate_from_end(Offset(25)));
        assert_eq!(c, cache(&[(1, 0), (3, 10)]));
        assert!(c.truncate_from_start(Offset(12)));
        assert_eq!(c, cache(&[(3, 12)]));
        assert!(!c.truncate_from_start(Offset(12)));
        assert_eq!(EpochCache::decode(&c.encode()), Some(c.clone()));
        assert_eq!(EpochCache::decode(b"0\n2\n3 12\n"), None, "short file accepted");
        assert_eq!(
            EpochCache::decode(b"0\n2\n3 12\n2 20\n"),
            None,
            "decreasing epoch accepted"
        );
    }
}
