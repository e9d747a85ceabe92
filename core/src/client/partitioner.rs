//! The producer's default partitioner, as Kafka's: a record with a key goes to
//! `toPositive(murmur2(key)) % partitions` (the same partition a Java, librdkafka
//! `murmur2_random` or kafka-python producer picks), and records without a key stick to one
//! partition until `batch.size` bytes went there, then move to one drawn at random (KIP-794's
//! built-in partitioner, Kafka's default since 3.3; its adaptive weighting by queue sizes and
//! `partitioner.availability.timeout.ms` are not here: every partition is drawn alike).
//!
//! Why KIP-794 and not KIP-480 (Kafka 2.4-3.2, which moved on at each new batch): it is what
//! Kafka's clients do now, and it keeps batches whole where KIP-480 sent more records to slower
//! brokers (KAFKA-10888). The rule, as Kafka's `BuiltInPartitioner.updatePartitionInfo`: after
//! a keyless record is appended to the sticky partition, move on once at least `batch.size`
//! bytes went there and its last batch is full (no batch is left half filled), or at least
//! twice `batch.size` in any case (batches that leave by `linger.ms` never fill).
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
    sticky: NameMap<Sticky>,
}

/// A topic's sticky partition (Kafka's `StickyPartitionInfo`).
#[derive(Clone, Copy, Debug)]
struct Sticky {
    partition: i32,
    /// Bytes of keyless records appended to it since it was chosen.
    produced: usize,
    /// The topic's partition count when a record last asked: the draw when it moves on.
    partitions: i32,
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
            Some(sticky) if sticky.partition < partitions => {
                sticky.partitions = partitions;
                Some(sticky.partition)
            }
            Some(sticky) => {
                *sticky = Sticky::new(pick(random()), partitions);
                Some(sticky.partition)
            }
            None => {
                let chosen = pick(random());
                self.sticky.insert(topic, Sticky::new(chosen, partitions));
                Some(chosen)
            }
        }
    }

    /// A keyless record of `bytes` (as counted against `batch.size`) was appended to
    /// `partition` of `topic`; `batch_full`: the batch it joined is full (none of the partition's
    /// batches is open to appends). Moves the topic's sticky partition on, drawing with `random`,
    /// once `batch_size` bytes went to it and `batch_full`, or twice `batch_size` in any case
    /// (KIP-794). A record whose partition is no longer the sticky one (it was chosen before a
    /// wait for buffer room, and others moved the topic on meanwhile) counts nothing: Kafka
    /// chooses such a record's partition again instead, which a buffered record here cannot.
    pub fn appended(
        &mut self,
        topic: &str,
        partition: i32,
        bytes: usize,
        batch_size: usize,
        batch_full: bool,
        random: impl FnOnce() -> u64,
    ) {
        let Some(sticky) = self.sticky.get_mut(topic) else {
            return;
        };
        if sticky.partition != partition {
            return;
        }
        sticky.produced = sticky.produced.saturating_add(bytes);
        let enough = sticky.produced >= batch_size && batch_full;
        if (enough || sticky.produced >= batch_size.saturating_mul(2)) && sticky.partitions > 0 {
            let partitions = sticky.partitions;
            *sticky = Sticky::new((random() % partitions as u64) as i32, partitions);
        }
    }
}

impl Sticky {
    fn new(partition: i32, partitions: i32) -> Self {
        Sticky {
            partition,
            produced: 0,
            partitions,
        }
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
    fn keyless_records_stick_until_batch_size_bytes_then_move() {
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
            assert_eq!(p.partition("t", None, 5, draw(r)), Some(first), "sticky");
        }
        assert_eq!(draws.get(), 1, "records joining the sticky partition draw nothing");
        // batch.size 100: 99 bytes with the batch full, and 199 with it open, stay.
        p.appended("t", first, 99, 100, true, draw(0));
        p.appended("t", first, 100, 100, false, draw(0));
        assert_eq!(
            p.partition("t", None, 5, draw(0)),
            Some(first),
            "199 bytes, the batch open: stays"
        );
        assert_eq!(draws.get(), 1);
        // Another partition's record (chosen before a wait) counts nothing.
        p.appended("t", 4, 1_000, 100, true, draw(0));
        assert_eq!(p.partition("t", None, 5, draw(0)), Some(first));
        // The 200th byte: twice batch.size, full or not.
        p.appended("t", first, 1, 100, false, draw(8));
        assert_eq!(
            (p.partition("t", None, 5, draw(0)), draws.get()),
            (Some(3), 2),
            "moved: 8 % 5"
        );
        // Counting starts again: batch.size bytes with the batch full move it on.
        p.appended("t", 3, 60, 100, true, draw(0));
        assert_eq!(p.partition("t", None, 5, draw(0)), Some(3), "60 bytes: stays");
        p.appended("t", 3, 40, 100, true, draw(14));
        assert_eq!(
            (p.partition("t", None, 5, draw(0)), draws.get()),
            (Some(4), 3),
            "100 bytes, full: 14 % 5"
        );
        // The draw may land on the same partition (uniform over all, as Kafka's nextPartition).
        p.appended("t", 4, 100, 100, true, draw(9));
        assert_eq!(p.partition("t", None, 5, draw(0)), Some(4), "9 % 5");
        assert_eq!(
            p.partition("t", None, 2, draw(7)),
            Some(1),
            "the topic shrank: picks again"
        );
        assert_eq!(draws.get(), 5);
        // The draw is over the count the last record saw.
        p.appended("t", 1, 200, 100, false, draw(5));
        assert_eq!(p.partition("t", None, 2, draw(0)), Some(1), "5 % 2");
        p.appended("nobody-asked", 0, 1_000, 100, true, draw(0));
        assert_eq!(
            draws.get(),
            6,
            "a topic never asked for has no sticky partition to move"
        );
        assert_eq!(p.partition("one", None, 1, draw(3)), Some(0));
    }
}
