//! The producer's default partitioner, as Kafka's: a record with a key goes to
//! `toPositive(murmur2(key)) % partitions` (the same partition a Java, librdkafka
//! `murmur2_random` or kafka-python producer picks), and records without a key stick to one
//! partition until its batch is done, then move to another at random (KIP-480 sticky
//! partitioning).
//!
//! Pure: the caller brings randomness (the runtime's seeded `random_u64`), so the simulator stays
//! a function of its seed. No input can make it panic: zero partitions is an error value.

use crate::name_map::NameMap;

/// Kafka's `Utils.murmur2`: MurmurHash2, 32-bit, seed `0x9747b28c`, little-endian words.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = SEED ^ (data.len() as u32);
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        let mut k = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        if tail.len() >= 3 {
            h ^= u32::from(tail[2]) << 16;
        }
        if tail.len() >= 2 {
            h ^= u32::from(tail[1]) << 8;
        }
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Kafka's `Utils.toPositive`: clears the sign bit (not `abs`, which overflows on `i32::MIN`).
pub fn to_positive(n: i32) -> i32 {
    n & 0x7fff_ffff
}

/// The partition of a keyed record; `None` when the topic has no partitions.
pub fn key_partition(key: &[u8], partitions: i32) -> Option<i32> {
    (partitions > 0).then(|| to_positive(murmur2(key)) % partitions)
}

/// The default partitioner's state: the sticky partition of each topic for keyless records, in
/// a [`NameMap`] (every keyless record looks its topic up).
#[derive(Clone, Debug, Default)]
pub struct Partitioner {
    sticky: NameMap<i32>,
}

impl Partitioner {
    /// Where a record goes: by key hash, else the topic's sticky partition. `random` is called
    /// only to choose one (none yet, or the topic shrank below it), as Kafka's partitioner
    /// draws only when it picks: a record that joins the sticky partition draws nothing.
    pub fn partition(
        &mut self,
        topic: &str,
        key: Option<&[u8]>,
        partitions: i32,
        random: impl FnOnce() -> u64,
    ) -> Option<i32> {
        if partitions <= 0 {
            return None;
        }
        if let Some(key) = key {
            return key_partition(key, partitions);
        }
        let pick = |random: u64| (random % partitions as u64) as i32;
        // Looked up by the borrowed name: a record only allocates the topic's entry once.
        match self.sticky.get_mut(topic) {
            Some(sticky) if *sticky < partitions => Some(*sticky),
            Some(sticky) => {
                *sticky = pick(random());
                Some(*sticky)
            }
            None => {
                let chosen = pick(random());
                self.sticky.insert(topic, chosen);
                Some(chosen)
            }
        }
    }

    /// A batch to the sticky partition was completed: keyless records move to another
    /// partition (a different one when there are several), as Kafka's `onNewBatch`.
    pub fn on_new_batch(&mut self, topic: &str, partitions: i32, random: u64) {
        if partitions <= 0 {
            self.sticky.remove(topic);
            return;
        }
        let old = self.sticky.get(topic).copied();
        let next = match old {
            Some(old) if partitions > 1 && (0..partitions).contains(&old) => {
                // Uniform over the other partitions.
                let step = 1 + (random % (partitions as u64 - 1)) as i32;
                (old + step) % partitions
            }
            _ => (random % partitions as u64) as i32,
        };
        self.sticky.insert(topic, next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafkas_utils_test() {
        // Kafka's UtilsTest.testMurmur2 cases.
        let cases: [(&str, i32); 6] = [
            ("21", -973_932_308),
            ("foobar", -790_332_482),
            ("a-little-bit-long-string", -985_981_536),
            ("a-little-bit-longer-string", -1_486_304_829),
            ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
            ("abc", 479_470_107),
        ];
        for (key, hash) in cases {
            assert_eq!(murmur2(key.as_bytes()), hash, "{key}");
        }
        // Every tail length (0..=3 bytes past the words) takes its own path: all hash, none panics.
        let lengths: std::collections::BTreeSet<i32> = (0..8).map(|n| murmur2(&b"abcdefgh"[..n])).collect();
        assert_eq!(lengths.len(), 8, "eight prefixes, eight hashes");
    }

    #[test]
    fn keyed_records_go_where_kafka_sends_them() {
        // toPositive(-973932308) = 1173551340; 1173551340 % 3 = 0; % 7 = 5.
        assert_eq!(to_positive(-973_932_308), 1_173_551_340);
        assert_eq!(key_partition(b"21", 3), Some(1_173_551_340 % 3));
        assert_eq!(key_partition(b"21", 7), Some(1_173_551_340 % 7));
        assert_eq!(to_positive(i32::MIN), 0, "not abs(), which would overflow");
        assert_eq!(key_partition(b"21", 0), None);
        let mut p = Partitioner::default();
        assert_eq!(p.partition("t", Some(b"abc"), 4, || 99), Some(479_470_107 % 4));
    }

    #[test]
    fn keyless_records_stick_until_a_batch_completes_then_move() {
        let mut p = Partitioner::default();
        let draws = std::cell::Cell::new(0);
        let draw = |r: u64| {
            let draws = &draws;
            move || {
                draws.set(draws.get() + 1);
                r
            }
        };
        let first = p.partition("t", None, 5, draw(12)).expect("partitions");
        assert_eq!((first, draws.get()), (2, 1), "the first record picks: 12 % 5");
        for r in 0..10 {
            assert_eq!(p.partition("t", None, 5, draw(r)), Some(first), "sticky within a batch");
        }
        assert_eq!(draws.get(), 1, "records joining the sticky partition draw nothing");
        for r in 0..20 {
            let before = p.partition("t", None, 5, draw(0)).expect("partitions");
            p.on_new_batch("t", 5, r);
            let after = p.partition("t", None, 5, draw(0)).expect("partitions");
            assert_ne!(before, after, "a new batch moves to another partition");
            assert!((0..5).contains(&after));
        }
        assert_eq!(draws.get(), 1, "on_new_batch brings its own draw");
        assert_eq!(
            p.partition("t", None, 2, draw(7)),
            Some(1),
            "the topic shrank: picks again"
        );
        assert_eq!(draws.get(), 2);
        p.on_new_batch("one", 1, 7);
        assert_eq!(p.partition("one", None, 1, draw(3)), Some(0));
    }
}
