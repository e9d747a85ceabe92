//! Frame faults: duplicated and corrupted frames on the simulated Kafka connections of a node.
//!
//! The model — what a real network can do to a Kafka connection, and what it cannot:
//! - TCP never delivers a byte twice, and its checksum catches every single-bit error on the
//!   wire. What reaches the application anyway comes from above or beside TCP, and that is what
//!   these faults stand for:
//!   - **Duplication** is a resend by the application: a client that retries a request on the
//!     same connection, or a server that answers twice. The frame a node sends is delivered twice,
//!     back to back, on the same connection. The receiver must cope: a broker dedupes idempotent
//!     produce retries by producer id and sequence; a client reading an answer whose correlation
//!     id it did not ask for drops the connection and retries.
//!   - **Corruption** is a bit flipped where no TCP checksum looks (a NIC, middlebox or memory
//!     error after the checksum was verified or before it was computed). Kafka's only end-to-end
//!     check is the CRC32C of record batches, which covers a batch from its attributes to its end;
//!     every other field of the protocol (topic names, partitions, offsets in answers) has none,
//!     and a flip there goes unnoticed by Kafka as much as by TCP. So a corruption flips one bit
//!     inside the CRC-covered bytes of one record batch of the frame: a broker must refuse such a
//!     produce (CORRUPT_MESSAGE) and a follower or consumer such a fetch answer (Kafka's
//!     `check.crcs`), and the record must never be applied. Frames without a record batch are
//!     left alone.
//! - Frame faults apply only to the Kafka connections (to or from [`KAFKA_PORT`]), not to the
//!   coordinators' internal RPC: that has no retries on a connection and no checksum, like
//!   ZooKeeper's, and relies on TCP.
//! - A node's frame faults hit the frames it sends. Rates are per frame; the draws come from the
//!   node's [`Purpose::Network`] stream and happen only while a rate is set, so a run without
//!   frame faults draws nothing and replays as before.

use bytes::{Bytes, BytesMut};
use gregor_core::record::{validate_batch, HEADER_BYTES};
use rand_chacha::rand_core::RngCore;
use rand_chacha::ChaCha8Rng;

use crate::seed::{self, Purpose};

/// Kafka's port: the connections frame faults apply to (the simulated brokers listen there).
pub const KAFKA_PORT: u16 = 9092;

/// Where a record batch's CRC32C coverage starts: its attributes field.
const CRC_START: usize = 21;

/// The frame fault rates in force on a node. The opposite of setting them is [`FrameFaults::heal`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FrameRates {
    /// Share of sent frames delivered twice, 0..=1.
    pub duplicate: f64,
    /// Share of sent frames with one bit flipped in a record batch (if they carry one), 0..=1.
    pub corrupt: f64,
}

/// What a node's frame faults did, for tests and the trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FrameStats {
    pub duplicated: u64,
    pub corrupted: u64,
}

/// What happens to one frame on its way out.
#[derive(Debug, PartialEq, Eq)]
pub struct Fate {
    /// The frame to send (a corrupted copy, or the frame itself).
    pub frame: Bytes,
    /// One bit of it was flipped.
    pub corrupted: bool,
    /// Send it twice.
    pub duplicate: bool,
}

/// A node's frame faults: rates, the random stream they draw from, and counts.
#[derive(Debug)]
pub struct FrameFaults {
    rates: FrameRates,
    rng: ChaCha8Rng,
    stats: FrameStats,
}

impl FrameFaults {
    pub fn new(seed: u64, node_index: u64) -> FrameFaults {
        FrameFaults {
            rates: FrameRates::default(),
            rng: seed::stream(seed, node_index, Purpose::Network),
            stats: FrameStats::default(),
        }
    }

    /// Sets the rates (each clamped to 0..=1).
    pub fn set(&mut self, rates: FrameRates) {
        self.rates = FrameRates {
            duplicate: rates.duplicate.clamp(0.0, 1.0),
            corrupt: rates.corrupt.clamp(0.0, 1.0),
        };
    }

    /// No more frame faults.
    pub fn heal(&mut self) {
        self.rates = FrameRates::default();
    }

    pub fn rates(&self) -> FrameRates {
        self.rates
    }

    pub fn stats(&self) -> FrameStats {
        self.stats
    }

    /// Decides the fate of one frame the node sends on a Kafka connection.
    pub fn apply(&mut self, frame: Bytes) -> Fate {
        let mut fate = Fate {
            frame,
            corrupted: false,
            duplicate: false,
        };
        if self.rates.corrupt > 0.0 && unit(&mut self.rng) < self.rates.corrupt {
            let pick = self.rng.next_u64();
            if let Some(corrupted) = flip_bit_in_a_batch(&fate.frame, pick) {
                fate.frame = corrupted;
                fate.corrupted = true;
                self.stats.corrupted += 1;
            }
        }
        if self.rates.duplicate > 0.0 && unit(&mut self.rng) < self.rates.duplicate {
            fate.duplicate = true;
            self.stats.duplicated += 1;
        }
        fate
    }
}

/// A uniform draw in [0, 1) from 53 random bits: the same on every platform.
fn unit(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// The byte ranges CRC32C protects in every valid record batch found in `frame`.
pub fn crc_covered_ranges(frame: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    let mut at = 0;
    while at + HEADER_BYTES <= frame.len() {
        // A v2 batch has magic 2 at byte 16; the CRC check makes a false find negligible.
        if frame[at + 16] == 2 {
            if let Ok(h) = validate_batch(&frame[at..]) {
                ranges.push(at + CRC_START..at + h.total_bytes());
                at += h.total_bytes();
                continue;
            }
        }
        at += 1;
    }
    ranges
}

/// A copy of `frame` with one bit flipped in the CRC-covered bytes of one of its record batches
/// (chosen by `pick`), or `None` if it carries none.
pub fn flip_bit_in_a_batch(frame: &Bytes, pick: u64) -> Option<Bytes> {
    let ranges = crc_covered_ranges(frame);
    let bits: u64 = ranges.iter().map(|r| r.len() as u64 * 8).sum();
    if bits == 0 {
        return None;
    }
    let mut bit = pick % bits;
    let mut copy = BytesMut::from(&frame[..]);
    for r in ranges {
        let len_bits = r.len() as u64 * 8;
        if bit < len_bits {
            let byte = r.start + (bit / 8) as usize;
            copy[byte] ^= 1 << (bit % 8);
            return Some(copy.freeze());
        }
        bit -= len_bits;
    }
    unreachable!("bit < the sum of the ranges' bits")
}

#[cfg(test)]
mod tests {
    use super::*;
    use gregor_core::record::{build_batch, NewRecord, ProducerFields};

    fn batch(value: &[u8]) -> Vec<u8> {
        build_batch(
            &[NewRecord {
                key: None,
                value: Some(value.to_vec()),
                timestamp: 0,
            }],
            ProducerFields::none(),
        )
    }

    /// A frame shaped like a produce request: some header bytes, then two batches, then a tail.
    fn frame() -> Bytes {
        let mut f = vec![0u8, 0, 0, 9, 1, 2, 3];
        f.extend(batch(b"first"));
        f.extend(batch(b"second value"));
        f.extend([7u8, 7]);
        Bytes::from(f)
    }

    #[test]
    fn finds_every_batch_and_only_the_crc_covered_bytes() {
        let f = frame();
        let ranges = crc_covered_ranges(&f);
        let first = batch(b"first").len();
        assert_eq!(
            ranges,
            vec![7 + CRC_START..7 + first, 7 + first + CRC_START..f.len() - 2]
        );
        assert!(crc_covered_ranges(b"no batch in here, just bytes of a metadata request").is_empty());
    }

    #[test]
    fn every_flip_breaks_a_crc_and_touches_nothing_else() {
        let f = frame();
        let ranges = crc_covered_ranges(&f);
        let bits: u64 = ranges.iter().map(|r| r.len() as u64 * 8).sum();
        let mut checked = 0;
        for pick in 0..bits {
            let c = flip_bit_in_a_batch(&f, pick).expect("the frame has batches");
            let diff: Vec<usize> = (0..f.len()).filter(|&i| f[i] != c[i]).collect();
            assert_eq!(diff.len(), 1, "one byte changed");
            assert_eq!((f[diff[0]] ^ c[diff[0]]).count_ones(), 1, "one bit flipped");
            assert!(ranges.iter().any(|r| r.contains(&diff[0])));
            // The batch holding the flip no longer validates: Kafka's CRC catches it.
            assert_eq!(crc_covered_ranges(&c).len(), 1, "pick {pick}");
            checked += 1;
        }
        println!("checked {checked} single-bit flips");
        assert!(checked > 100);
        assert_eq!(flip_bit_in_a_batch(&Bytes::from_static(b"metadata"), 3), None);
    }

    #[test]
    fn rates_decide_per_frame_and_nothing_is_drawn_when_healed() {
        let mut faults = FrameFaults::new(1, 0);
        for _ in 0..100 {
            let fate = faults.apply(frame());
            assert_eq!(
                fate,
                Fate {
                    frame: frame(),
                    corrupted: false,
                    duplicate: false
                }
            );
        }
        assert_eq!(faults.stats(), FrameStats::default());
        faults.set(FrameRates {
            duplicate: 0.5,
            corrupt: 0.25,
        });
        let (mut dup, mut bad) = (0, 0);
        for _ in 0..1000 {
            let fate = faults.apply(frame());
            dup += u64::from(fate.duplicate);
            bad += u64::from(fate.frame != frame());
        }
        println!("of 1000 frames: {dup} duplicated, {bad} corrupted");
        assert_eq!(
            faults.stats(),
            FrameStats {
                duplicated: dup,
                corrupted: bad
            }
        );
        assert!((400..600).contains(&dup) && (175..325).contains(&bad));
        faults.heal();
        assert!(!faults.apply(frame()).duplicate);
        // A run with the same seed draws the same fates.
        let mut again = FrameFaults::new(1, 0);
        again.set(FrameRates {
            duplicate: 0.5,
            corrupt: 0.25,
        });
        let dups = (0..1000).filter(|_| again.apply(frame()).duplicate).count() as u64;
        assert_eq!(dups, dup);
    }
}
