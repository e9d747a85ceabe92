//! "Replicas identical below the high watermark": everything below a replica's high watermark
//! is committed, and committed data is the same on every replica that holds it (truncation by
//! leader epoch, KIP-101/279, exists to make this so). Input: per partition, per replica, its log
//! at the end of a run as (offset, batch hash, leader epoch) and its high watermark, plus the
//! final leader's high watermark. Two replicas that hold different batches (hash or epoch) at
//! an offset both hold below the lower of their two high watermarks is `replica-divergence`.
//!
//! The hash is whatever the harness takes of a batch (its CRC32C, or a hash of its bytes);
//! only equality matters. Offsets one replica lacks are not compared (retention, a lagging
//! follower): losing them is the history checker's `lost-write`, not this one's concern.

use std::collections::BTreeMap;

use gregor_core::ids::{BrokerId, LeaderEpoch};

use super::{AnomalyKind, Finding};

/// One batch as a replica holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaEntry {
    pub offset: i64,
    pub hash: u64,
    pub leader_epoch: LeaderEpoch,
}

/// One replica's log and high watermark at the end of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaLog {
    pub broker: BrokerId,
    pub entries: Vec<ReplicaEntry>,
    pub high_watermark: i64,
}

/// One partition's replicas at the end of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionReplicas {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<ReplicaLog>,
    /// The final leader's high watermark (`None` when the partition ended offline).
    pub leader_high_watermark: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplicasReport {
    pub partitions: usize,
    /// Replica pairs compared, and (pair, offset) comparisons made below both high watermarks.
    pub pairs: usize,
    pub offsets_compared: usize,
    pub findings: Vec<Finding>,
}

impl ReplicasReport {
    /// No offset compared (one replica per partition, or nothing committed): proves nothing.
    pub fn compared_nothing(&self) -> bool {
        self.offsets_compared == 0
    }

    pub fn summary(&self) -> String {
        let mut out = format!(
            "replicas below HW: compared {} partitions, {} replica pairs, {} offsets below both high watermarks; {} {}",
            self.partitions,
            self.pairs,
            self.offsets_compared,
            self.findings.len(),
            AnomalyKind::ReplicaDivergence
        );
        if let Some(first) = self.findings.first() {
            out.push_str(&format!(" (first: {})", first.detail));
        }
        out
    }
}

pub fn check(partitions: &[PartitionReplicas]) -> ReplicasReport {
    let mut report = ReplicasReport {
        partitions: partitions.len(),
        ..ReplicasReport::default()
    };
    for p in partitions {
        // Whether each replica's offsets rise strictly, as those of a log read in order do.
        let rising: Vec<bool> = p
            .replicas
            .iter()
            .map(|r| r.entries.windows(2).all(|w| w[0].offset < w[1].offset))
            .collect();
        for (i, a) in p.replicas.iter().enumerate() {
            for (j, b) in p.replicas.iter().enumerate().skip(i + 1) {
                report.pairs += 1;
                let below = a.high_watermark.min(b.high_watermark);
                let mut compare = |offset: i64, ea: &ReplicaEntry, eb: &ReplicaEntry| {
                    report.offsets_compared += 1;
                    if ea.hash != eb.hash || ea.leader_epoch != eb.leader_epoch {
                        report.findings.push(Finding {
                            kind: AnomalyKind::ReplicaDivergence,
                            detail: format!(
                                "{}-{} offset {offset}: broker {} has hash {:x} epoch {}, broker {} has hash {:x} epoch {} (high watermarks {} and {}, final leader's {:?})",
                                p.topic,
                                p.partition,
                                a.broker.0,
                                ea.hash,
                                ea.leader_epoch,
                                b.broker.0,
                                eb.hash,
                                eb.leader_epoch,
                                a.high_watermark,
                                b.high_watermark,
                                p.leader_high_watermark
                            ),
                        });
                    }
                };
                if rising[i] && rising[j] {
                    // One walk of the two, in offset order: the pairs the maps below would give.
                    let (mut x, mut y) = (a.entries.iter().peekable(), b.entries.iter().peekable());
                    while let (Some(ea), Some(eb)) = (x.peek(), y.peek()) {
                        if ea.offset >= below {
                            break;
                        }
                        match ea.offset.cmp(&eb.offset) {
                            std::cmp::Ordering::Less => drop(x.next()),
                            std::cmp::Ordering::Greater => drop(y.next()),
                            std::cmp::Ordering::Equal => {
                                compare(ea.offset, ea, eb);
                                x.next();
                                y.next();
                            }
                        }
                    }
                } else {
                    let lb = by_offset(b);
                    for (&offset, ea) in by_offset(a).range(..below) {
                        if let Some(eb) = lb.get(&offset) {
                            compare(offset, ea, eb);
                        }
                    }
                }
            }
        }
    }
    report
}

/// A replica's entries by offset (the last entry of an offset wins).
fn by_offset(r: &ReplicaLog) -> BTreeMap<i64, &ReplicaEntry> {
    r.entries.iter().map(|e| (e.offset, e)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(broker: i32, batches: &[(i64, u64, i32)], hw: i64) -> ReplicaLog {
        ReplicaLog {
            broker: BrokerId(broker),
            entries: batches
                .iter()
                .map(|&(offset, hash, epoch)| ReplicaEntry {
                    offset,
                    hash,
                    leader_epoch: LeaderEpoch(epoch),
                })
                .collect(),
            high_watermark: hw,
        }
    }

    fn partition(replicas: Vec<ReplicaLog>) -> PartitionReplicas {
        PartitionReplicas {
            topic: "t".into(),
            partition: 0,
            replicas,
            leader_high_watermark: Some(3),
        }
    }

    #[test]
    fn identical_prefixes_pass_and_tails_above_hw_may_differ() {
        let p = partition(vec![
            log(0, &[(0, 10, 0), (1, 11, 0), (2, 12, 1), (3, 99, 1)], 3),
            log(1, &[(0, 10, 0), (1, 11, 0), (2, 12, 1), (3, 77, 2)], 3),
            // A lagging follower: fewer offsets, lower HW.
            log(2, &[(0, 10, 0)], 1),
        ]);
        let r = check(&[p]);
        println!("{}", r.summary());
        assert!(r.findings.is_empty(), "{}", r.summary());
        assert_eq!(r.pairs, 3);
        assert_eq!(r.offsets_compared, 3 + 1 + 1);
        assert!(check(&[partition(vec![log(0, &[(0, 1, 0)], 1)])]).compared_nothing());
    }

    #[test]
    fn negative_control_divergence_below_both_hws() {
        // A follower that truncated to its HW instead of by epoch and refetched a different
        // batch at offset 2, then advanced its HW: committed data differs.
        let p = partition(vec![
            log(0, &[(0, 10, 0), (1, 11, 0), (2, 12, 0)], 3),
            log(1, &[(0, 10, 0), (1, 11, 0), (2, 55, 1)], 3),
        ]);
        let r = check(&[p]);
        println!("{}", r.summary());
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].kind, AnomalyKind::ReplicaDivergence);
        assert!(r.findings[0].detail.contains("offset 2"), "{}", r.findings[0].detail);
        // Same bytes, different epoch stamped: also divergence.
        let p = partition(vec![log(0, &[(0, 10, 0)], 1), log(1, &[(0, 10, 1)], 1)]);
        assert_eq!(check(&[p]).findings.len(), 1);
    }

    /// The check as it was before the walk of rising logs: every replica's entries in a map by
    /// offset, each pair compared by lookups. The walk must give the same report.
    fn check_by_maps(partitions: &[PartitionReplicas]) -> ReplicasReport {
        let mut report = ReplicasReport {
            partitions: partitions.len(),
            ..ReplicasReport::default()
        };
        for p in partitions {
            let logs: Vec<BTreeMap<i64, &ReplicaEntry>> = p.replicas.iter().map(by_offset).collect();
            for i in 0..logs.len() {
                for j in i + 1..logs.len() {
                    report.pairs += 1;
                    let below = p.replicas[i].high_watermark.min(p.replicas[j].high_watermark);
                    for (&offset, ea) in logs[i].range(..below) {
                        let Some(eb) = logs[j].get(&offset) else { continue };
                        report.offsets_compared += 1;
                        if ea.hash != eb.hash || ea.leader_epoch != eb.leader_epoch {
                            report.findings.push(Finding {
                                kind: AnomalyKind::ReplicaDivergence,
                                detail: format!("offset {offset}: differs"),
                            });
                        }
                    }
                }
            }
        }
        report
    }

    #[test]
    fn the_walk_of_rising_logs_reports_what_maps_by_offset_do() {
        use madsim::rand::Rng;
        use rand_chacha::rand_core::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let (mut compared, mut divergent, mut unordered) = (0, 0, 0);
        for _ in 0..500 {
            // Three replicas of one log with gaps, different tails and high watermarks, and now
            // and then a log out of order or with an offset twice (the maps' path).
            let replicas: Vec<ReplicaLog> = (0..3)
                .map(|b| {
                    let mut entries = Vec::new();
                    for offset in 0..rng.gen_range(0..40i64) {
                        if rng.gen_range(0..4) > 0 {
                            let hash = if rng.gen_range(0..30) == 0 { 99 } else { offset as u64 };
                            entries.push(ReplicaEntry {
                                offset,
                                hash,
                                leader_epoch: LeaderEpoch(0),
                            });
                        }
                    }
                    if !entries.is_empty() && rng.gen_range(0..10) == 0 {
                        let i = rng.gen_range(0..entries.len());
                        entries.push(entries[i]);
                    }
                    ReplicaLog {
                        entries,
                        ..log(b, &[], rng.gen_range(0..45))
                    }
                })
                .collect();
            unordered += usize::from(
                replicas
                    .iter()
                    .any(|r| !r.entries.windows(2).all(|w| w[0].offset < w[1].offset)),
            );
            let parts = [partition(replicas)];
            let (walked, mapped) = (check(&parts), check_by_maps(&parts));
            assert_eq!(
                (walked.pairs, walked.offsets_compared, walked.findings.len()),
                (mapped.pairs, mapped.offsets_compared, mapped.findings.len())
            );
            let offsets = |r: &ReplicasReport| -> Vec<String> {
                r.findings
                    .iter()
                    .map(|f| {
                        let from = f.detail.find("offset ").map_or(0, |i| i + "offset ".len());
                        f.detail[from..].split(':').next().unwrap_or("").to_string()
                    })
                    .collect()
            };
            assert_eq!(offsets(&walked), offsets(&mapped));
            compared += walked.offsets_compared;
            divergent += walked.findings.len();
        }
        println!("compared {compared} offsets, {divergent} divergent, {unordered} histories through the maps");
        assert!(compared > 1_000 && divergent > 0 && unordered > 0);
    }
}
