//! The checker: reads a [`History`] and reports anomalies by Jepsen's names (the Kafka test in
//! jepsen-io/jepsen uses the same words), plus the commit and processing checks of the five
//! no-loss rules. It trusts nothing the brokers say about themselves: only what clients saw and
//! what a final read returned.
//!
//! | anomaly | meaning |
//! |---|---|
//! | `lost-write` | acknowledged at (partition, offset), and the final read, which covers that offset, does not hold it |
//! | `unseen` | acknowledged, never read by any consumer: deleted by retention first (the log start that passed it is named), or never delivered although consumers drained |
//! | `inconsistent-offsets` | two different values observed at one (partition, offset) |
//! | `duplicate` | one value at two positions of the log |
//! | `poll-skip` | one consumer session read offset a, then b > a+1, though an offset between them holds a record |
//! | `nonmonotonic-poll` | one consumer session read offset a, then b <= a |
//! | `nonmonotonic-send` | one producer's later send to a partition was acknowledged at a lower offset |
//! | `committed-offset-regression` | a group's committed offset for a partition went backwards |
//! | `acked-never-processed` | acknowledged, below the group's final committed offset, never processed |
//! | `two-owners-one-generation` | two members of a group were assigned one partition in the same generation |
//! | `poll-outside-assignment` | a group member's poll returned a record of a partition it was not assigned at the time (Kafka's consumer hands over records of assigned partitions only) |
//! | `lost-in-buffer` | an asynchronous send the application saw return, never acknowledged, not in the log: the producer's buffer died with its process (not an acknowledged write: told apart from `lost-write`) |
//! | `two-leaders-one-epoch` | two brokers acted as leader of one partition in one leader epoch ([`leaders`]) |
//! | `two-controllers-one-epoch` | two brokers acted as controller in one controller epoch ([`leaders`]) |
//! | `replica-divergence` | two replicas hold different batches at an offset below both their high watermarks ([`replicas`]) |
//! | `unbalanced` | elastic scenarios: afterwards the target brokers' replica or leader counts differ by more than one, or replicas remain outside the target ([`balance`]) |
//! | `revoked-write` | `[acl]` scenarios: a record its principal created after a revocation was answered plus the propagation bound is in a replica's log ([`acl`]) |
//! | `lost-coordinator-write` | `[quorum]` scenarios: a coordinator write acknowledged to the probe client is not in the tree at the end ([`coordinator`]) |
//! | `quorum-change-unfinished` | `[quorum]` scenarios: the coordinator replacement did not complete ([`coordinator`]) |
//! | `nonlinearizable` | no order of the coordinator's client-visible ops explains what clients saw ([`linearizable`]) |
//!
//! Processing duplicates (a value processed more than once) are counted, not reported: at-least-
//! once delivery shows them after every crash or rebalance with commit-after-processing.
//!
//! A report says what it compared; [`Report::compared_nothing`] makes a run that compared
//! nothing a failure rather than a pass.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

// Hash maps and sets of the checker's own keys (values, positions, small tuples of integers):
// rustc's Fx hash in place of SipHash, whose guard against chosen keys the checker does not need.
// Only looked up: no report iterates one, so their order never reaches a finding.
use fxhash::{FxHashMap, FxHashSet};

use crate::history::{History, Partition, SendOutcome, Value};

pub mod acl;
pub mod balance;
pub mod coordinator;
pub mod leaders;
pub mod linearizable;
pub mod replicas;
mod table;

use table::{Dense, Layout, Table};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AnomalyKind {
    LostWrite,
    Unseen,
    InconsistentOffsets,
    Duplicate,
    PollSkip,
    NonmonotonicPoll,
    NonmonotonicSend,
    CommittedOffsetRegression,
    AckedNeverProcessed,
    LostInBuffer,
    TwoLeadersOneEpoch,
    TwoControllersOneEpoch,
    ReplicaDivergence,
    Nonlinearizable,
    TwoOwnersOneGeneration,
    PollOutsideAssignment,
    Unbalanced,
    RevokedWrite,
    LostCoordinatorWrite,
    QuorumChangeUnfinished,
}

impl AnomalyKind {
    pub const ALL: [AnomalyKind; 20] = [
        AnomalyKind::LostWrite,
        AnomalyKind::Unseen,
        AnomalyKind::InconsistentOffsets,
        AnomalyKind::Duplicate,
        AnomalyKind::PollSkip,
        AnomalyKind::NonmonotonicPoll,
        AnomalyKind::NonmonotonicSend,
        AnomalyKind::CommittedOffsetRegression,
        AnomalyKind::AckedNeverProcessed,
        AnomalyKind::LostInBuffer,
        AnomalyKind::TwoLeadersOneEpoch,
        AnomalyKind::TwoControllersOneEpoch,
        AnomalyKind::ReplicaDivergence,
        AnomalyKind::Nonlinearizable,
        AnomalyKind::TwoOwnersOneGeneration,
        AnomalyKind::PollOutsideAssignment,
        AnomalyKind::Unbalanced,
        AnomalyKind::RevokedWrite,
        AnomalyKind::LostCoordinatorWrite,
        AnomalyKind::QuorumChangeUnfinished,
    ];

    pub fn name(self) -> &'static str {
        match self {
            AnomalyKind::LostWrite => "lost-write",
            AnomalyKind::Unseen => "unseen",
            AnomalyKind::InconsistentOffsets => "inconsistent-offsets",
            AnomalyKind::Duplicate => "duplicate",
            AnomalyKind::PollSkip => "poll-skip",
            AnomalyKind::NonmonotonicPoll => "nonmonotonic-poll",
            AnomalyKind::NonmonotonicSend => "nonmonotonic-send",
            AnomalyKind::CommittedOffsetRegression => "committed-offset-regression",
            AnomalyKind::AckedNeverProcessed => "acked-never-processed",
            AnomalyKind::LostInBuffer => "lost-in-buffer",
            AnomalyKind::TwoLeadersOneEpoch => "two-leaders-one-epoch",
            AnomalyKind::TwoControllersOneEpoch => "two-controllers-one-epoch",
            AnomalyKind::ReplicaDivergence => "replica-divergence",
            AnomalyKind::Nonlinearizable => "nonlinearizable",
            AnomalyKind::TwoOwnersOneGeneration => "two-owners-one-generation",
            AnomalyKind::PollOutsideAssignment => "poll-outside-assignment",
            AnomalyKind::Unbalanced => "unbalanced",
            AnomalyKind::RevokedWrite => "revoked-write",
            AnomalyKind::LostCoordinatorWrite => "lost-coordinator-write",
            AnomalyKind::QuorumChangeUnfinished => "quorum-change-unfinished",
        }
    }

    pub fn from_name(name: &str) -> Option<AnomalyKind> {
        AnomalyKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl fmt::Display for AnomalyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub kind: AnomalyKind,
    pub detail: String,
}

/// What the checker looked at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Compared {
    pub sends: usize,
    pub acked: usize,
    pub acked_checked: usize,
    pub unknown: usize,
    pub failed: usize,
    pub polls: usize,
    pub commits: usize,
    pub processed: usize,
    /// Processings of a value beyond its first (at-least-once redelivery).
    pub processed_duplicates: usize,
    /// Group assignments compared for `two-owners-one-generation`.
    pub assignments: usize,
    /// Polled records of group members checked against their assignment at the time
    /// (`poll-outside-assignment`).
    pub polls_in_assignments: usize,
    pub partitions_read: usize,
    pub final_records: usize,
    /// acks=0 sends: successful to the application, never answered by a broker.
    pub sent_unacknowledged: usize,
    /// Replicated clusters: leader observations and replica offsets compared.
    pub leader_observations: usize,
    pub replica_offsets: usize,
    /// Elastic scenarios: brokers whose final replica and leader counts were compared.
    pub balance_brokers: usize,
    /// `[acl]` scenarios: revocation windows, values created inside them, replica records judged.
    pub acl: Option<acl::AclCompared>,
    /// `[quorum]` scenarios: acknowledged coordinator writes compared with the final tree.
    pub coordinator_writes: Option<usize>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub compared: Compared,
    pub findings: Vec<Finding>,
}

impl Report {
    /// A run whose checker had no acknowledged write to check against a final read proves
    /// nothing, and fails.
    pub fn compared_nothing(&self) -> bool {
        self.compared.acked_checked == 0
            || self.compared.partitions_read == 0
            || self
                .compared
                .acl
                .is_some_and(|a| a.windows == 0 || a.created_in_windows == 0 || a.records_checked == 0)
            || self.compared.coordinator_writes == Some(0)
    }

    pub fn counts(&self) -> BTreeMap<AnomalyKind, usize> {
        let mut counts = BTreeMap::new();
        for f in &self.findings {
            *counts.entry(f.kind).or_insert(0) += 1;
        }
        counts
    }

    pub fn has(&self, kind: AnomalyKind) -> bool {
        self.findings.iter().any(|f| f.kind == kind)
    }

    /// One line of what was compared, then one per anomaly kind found.
    pub fn summary(&self) -> String {
        let c = &self.compared;
        let mut out = format!(
            "compared {} sends ({} acked, {} checked against the final read, {} unknown, {} failed), {} polls, {} commits, {} processed, {} partitions read in full ({} records)",
            c.sends, c.acked, c.acked_checked, c.unknown, c.failed, c.polls, c.commits, c.processed, c.partitions_read, c.final_records
        );
        if c.sent_unacknowledged > 0 {
            out.push_str(&format!(
                ", {} sent with acks=0 (checked against the final read)",
                c.sent_unacknowledged
            ));
        }
        if c.leader_observations > 0 || c.replica_offsets > 0 {
            out.push_str(&format!(
                ", {} leader and controller observations, {} replica offsets below the high watermarks",
                c.leader_observations, c.replica_offsets
            ));
        }
        if c.balance_brokers > 0 {
            out.push_str(&format!(", replica and leader counts of {} brokers", c.balance_brokers));
        }
        if let Some(a) = c.acl {
            out.push_str(&format!(
                ", {} revocation windows ({} values created inside them), {} replica records of toggled principals judged (latest write after an answered revocation: {})",
                a.windows,
                a.created_in_windows,
                a.records_checked,
                a.lag_ms_max.map_or("none".to_string(), |ms| format!("{ms} ms after"))
            ));
        }
        if let Some(n) = c.coordinator_writes {
            out.push_str(&format!(", {n} acknowledged coordinator writes read back"));
        }
        if c.assignments > 0 || c.processed_duplicates > 0 {
            out.push_str(&format!(
                "; {} group assignments, {} polled records checked against them, {} duplicate processings",
                c.assignments, c.polls_in_assignments, c.processed_duplicates
            ));
        }
        for (kind, n) in self.counts() {
            out.push_str(&format!("\n  {kind}: {n}"));
            if let Some(first) = self.findings.iter().find(|f| f.kind == kind) {
                out.push_str(&format!(" (first: {})", first.detail));
            }
        }
        out
    }

    pub(crate) fn add(&mut self, kind: AnomalyKind, detail: String) {
        self.findings.push(Finding { kind, detail });
    }
}

pub fn check(h: &History) -> Report {
    let mut report = Report::default();
    if !h.leaders.is_empty() || !h.replicas.is_empty() {
        let leaders = leaders::check(&h.leaders);
        let controllers = leaders::check_controllers(&h.controllers);
        let replicas = replicas::check(&h.replicas);
        report.compared.leader_observations = leaders.observations + controllers.observations;
        report.findings.extend(controllers.findings);
        report.compared.replica_offsets = replicas.offsets_compared;
        report.findings.extend(leaders.findings);
        report.findings.extend(replicas.findings);
    }
    if let Some(o) = &h.balance {
        let (brokers, findings) = balance::check(o);
        report.compared.balance_brokers = brokers;
        report.findings.extend(findings);
    }
    if let Some(o) = &h.quorum {
        let (compared, findings) = coordinator::check(o);
        report.compared.coordinator_writes = Some(compared);
        report.findings.extend(findings);
    }
    if let Some(o) = &h.acl {
        let (compared, findings) = acl::check(o);
        report.compared.acl = Some(compared);
        report.findings.extend(findings);
    }
    let c = &mut report.compared;
    c.sends = h.sends.len();
    c.polls = h.polls.len();
    c.commits = h.commits.len();
    c.processed = h.processed.len();
    c.partitions_read = h.final_reads.len();
    c.final_records = h.final_reads.values().map(|r| r.records.len()).sum();
    for s in &h.sends {
        match s.outcome {
            SendOutcome::Acked { .. } => c.acked += 1,
            SendOutcome::Unknown | SendOutcome::Abandoned => c.unknown += 1,
            SendOutcome::Failed => c.failed += 1,
            SendOutcome::SentUnacknowledged => c.sent_unacknowledged += 1,
        }
    }

    // Every value observed at each log position, and every position each value was seen at
    // (the final read and the polls; acknowledgements name positions too): one lookup per
    // observation against the first seen, an ordered set only where two differ.
    // The final read's records as (partition, offset, value).
    let finals = || {
        let reads = h.final_reads.iter();
        reads.flat_map(|(&p, r)| r.records.iter().map(move |&(o, v)| (p, o, v)))
    };
    // Positions and values are dense (`table`): a slot for each offset of a partition's final
    // read and for each value a producer sent, a hash map for any other.
    let final_records = c.final_records;
    let position_slots = Layout::covering(finals().map(|(p, o, _)| (p, o)));
    let value_slots = Layout::covering(h.sends.iter().map(|s| s.value));
    // One plain loop per source rather than one chain of iterators over all three: the chain
    // tested which of its parts it was in at every step, and cost about as much as the lookups.
    // Each loop also fills the tables later checks read from the same records: the value the
    // final read holds at each position (of two at one offset, the last) and the values polled.
    let mut at_position = Conflicts::new(&position_slots);
    let mut positions_of = Conflicts::new(&value_slots);
    let mut final_at: Table<(Partition, i64), Value> = Table::new(&position_slots);
    for (&p, r) in &h.final_reads {
        for &(o, v) in &r.records {
            at_position.see((p, o), v);
            positions_of.see(v, (p, o));
            final_at.insert((p, o), v);
        }
    }
    let mut polled: Table<Value, ()> = Table::new(&value_slots);
    for poll in &h.polls {
        let position = (poll.partition, poll.offset);
        // A poll of the value first seen at its position (nearly every poll: the final read's)
        // repeats a pair both maps have: it adds nothing to `positions_of` either, which has
        // been shown every pair `at_position` has so far (acknowledgements come after).
        if at_position.see_new(position, poll.value) {
            positions_of.see(poll.value, position);
        }
        polled.first(poll.value, ());
    }
    for s in &h.sends {
        if let SendOutcome::Acked { offset } = s.outcome {
            at_position.see((s.partition, offset), s.value);
        }
    }
    for ((p, o), values) in at_position.found {
        report.add(
            AnomalyKind::InconsistentOffsets,
            format!("partition {pn} offset {o} holds {values:?}", pn = h.partition(p)),
        );
    }
    for (v, positions) in positions_of.found {
        report.add(
            AnomalyKind::Duplicate,
            format!(
                "value {}/{} at {{{}}}",
                v.producer(),
                v.seq(),
                positions
                    .iter()
                    .map(|&(p, o)| format!("({}, {o})", h.partition(p)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }

    // The final read's records as `final_at` keeps them (of two at one offset, the last).
    let final_kept = || finals().filter(|&(p, o, v)| final_at.get((p, o)) == Some(v));
    // Where the final read holds each value: a write is lost when the log no longer has it,
    // whatever a consumer saw before a crash. Built at its first use: a run whose acknowledged
    // writes all sit where they were acknowledged, and that has no acks=0 send, never asks.
    let in_final_set = std::cell::OnceCell::new();
    let in_final = || {
        in_final_set.get_or_init(|| {
            let mut set: FxHashSet<(Value, Partition)> = set_with_room(final_records);
            set.extend(final_kept().map(|(p, _, v)| (v, p)));
            set
        })
    };
    // Each partition's final read, looked for at its number's place first (the first topic's
    // partitions are numbered from 0, so that is where it is), else in the map: once an
    // acknowledged send.
    let reads: Vec<(Partition, &crate::history::FinalRead)> = h.final_reads.iter().map(|(&p, r)| (p, r)).collect();
    let first_topic = |p: Partition| (p.topic == 0).then_some(p.index);
    let final_read = |p: Partition| match first_topic(p)
        .and_then(|i| usize::try_from(i).ok())
        .and_then(|i| reads.get(i))
    {
        Some(&(q, read)) if q == p => Some(read),
        _ => h.final_reads.get(&p),
    };
    for s in &h.sends {
        let SendOutcome::Acked { offset } = s.outcome else {
            continue;
        };
        let Some(read) = final_read(s.partition) else {
            continue;
        };
        report.compared.acked_checked += 1;
        let (p, v) = (s.partition, s.value);
        if final_at.get((p, offset)) == Some(v) {
            if h.consumers_drained && !polled.contains(v) {
                report.add(
                    AnomalyKind::Unseen,
                    format!(
                        "{}/{} acked at partition {pn} offset {offset}, in the log, never delivered to a consumer",
                        v.producer(),
                        v.seq(),
                        pn = h.partition(p)
                    ),
                );
            }
        } else if offset < read.log_start_offset {
            if !polled.contains(v) {
                report.add(
                    AnomalyKind::Unseen,
                    format!(
                        "{}/{} acked at partition {pn} offset {offset}, deleted by retention (log start now {}) before any consumer read it",
                        v.producer(),
                        v.seq(),
                        read.log_start_offset,
                        pn = h.partition(p)
                    ),
                );
            }
        } else if !in_final().contains(&(v, p)) {
            let there = final_at
                .get((p, offset))
                .map_or("nothing".to_string(), |x| format!("{}/{}", x.producer(), x.seq()));
            report.add(
                AnomalyKind::LostWrite,
                format!(
                    "{}/{} acked at partition {pn} offset {offset}; the final read (log start {}, high watermark {}) has {there} there",
                    v.producer(),
                    v.seq(),
                    read.log_start_offset,
                    read.high_watermark,
                    pn = h.partition(p)
                ),
            );
        }
    }

    // acks=0: the application was told the send succeeded; the record must be in the log,
    // somewhere in its partition (no offset was ever known).
    for s in h.sends.iter().filter(|s| s.outcome == SendOutcome::SentUnacknowledged) {
        let Some(read) = h.final_reads.get(&s.partition) else {
            continue;
        };
        report.compared.acked_checked += 1;
        let (p, v) = (s.partition, s.value);
        let in_partition = in_final().contains(&(v, p));
        // Absent but read by a consumer while retention has since moved the log start: maybe
        // deleted by retention, not lost (its offset, unknown, may lie below the log start).
        let maybe_deleted = read.log_start_offset > 0 && polled.contains(v);
        if !in_partition && !maybe_deleted {
            report.add(
                AnomalyKind::LostWrite,
                format!(
                    "{}/{} sent with acks=0 to partition {pn} (a success to the application); the final read (log start {}, high watermark {}) does not hold it",
                    v.producer(),
                    v.seq(),
                    read.log_start_offset,
                    read.high_watermark,
                    pn = h.partition(p)
                ),
            );
        }
    }

    // Every value the final read holds, built at its first use as `in_final` is: only for a
    // send abandoned in a dead producer's buffer.
    let in_log_set = std::cell::OnceCell::new();
    for s in h.sends.iter().filter(|s| s.outcome == SendOutcome::Abandoned) {
        let in_log = in_log_set.get_or_init(|| {
            let mut set: FxHashSet<Value> = set_with_room(final_records);
            set.extend(final_kept().map(|(_, _, v)| v));
            set
        });
        if !in_log.contains(&s.value) && !polled.contains(s.value) {
            report.add(
                AnomalyKind::LostInBuffer,
                format!(
                    "{}/{} to partition {}: send() had returned, the producer died with it buffered",
                    s.value.producer(),
                    s.value.seq(),
                    h.partition(s.partition)
                ),
            );
        }
    }

    // Polls: within one consumer session and partition, offsets rise by one, skipping only
    // offsets that hold no record.
    let existing: BTreeMap<Partition, Vec<i64>> = h
        .final_reads
        .iter()
        .map(|(&p, r)| {
            let mut offsets: Vec<i64> = r.records.iter().map(|&(o, _)| o).collect();
            offsets.sort_unstable();
            (p, offsets)
        })
        .collect();
    // Each (consumer, session, partition)'s last offset polled: the key of the poll before in
    // `recent` (a fetch's records come in a run from one partition), every other key's in `last`.
    let mut last: FxHashMap<(u32, u32, Partition), i64> = FxHashMap::default();
    let mut recent: Option<((u32, u32, Partition), i64)> = None;
    for poll in &h.polls {
        let key = (poll.consumer, poll.session, poll.partition);
        let before = match recent {
            Some((k, offset)) if k == key => Some(offset),
            Some((k, offset)) => {
                last.insert(k, offset);
                last.get(&key).copied()
            }
            None => None,
        };
        if let Some(prev) = before {
            if poll.offset <= prev {
                report.add(
                    AnomalyKind::NonmonotonicPoll,
                    format!(
                        "consumer {} session {} partition {}: offset {} after {prev}",
                        poll.consumer,
                        poll.session,
                        h.partition(poll.partition),
                        poll.offset
                    ),
                );
            } else if let Some(missed) = (poll.offset > prev + 1)
                // Only a jump past the next offset can skip a record: no lookup for the rest.
                .then(|| existing.get(&poll.partition))
                .flatten()
                .and_then(|offsets| {
                    let first_after = offsets.partition_point(|&o| o <= prev);
                    offsets.get(first_after).copied().filter(|&o| o < poll.offset)
                })
            {
                report.add(
                    AnomalyKind::PollSkip,
                    format!(
                        "consumer {} session {} partition {}: jumped from {prev} to {}, skipping offset {missed}",
                        poll.consumer,
                        poll.session,
                        h.partition(poll.partition),
                        poll.offset
                    ),
                );
            }
        }
        recent = Some((key, poll.offset));
    }

    // Sends: one producer's acks to a partition rise with its sequence numbers.
    // The lists by (producer, partition), in that order; the list of the send before kept at
    // hand (one producer's acks come in runs to one partition) rather than looked up.
    let mut lists: Vec<Vec<(u32, i64)>> = Vec::new();
    // Looked up by hash (a send's partition changes with nearly every send under round robin:
    // a tree's search per send), then walked in key order for the findings.
    let mut index: FxHashMap<(u32, Partition), usize> = FxHashMap::default();
    let mut recent: Option<((u32, Partition), usize)> = None;
    for s in &h.sends {
        if let SendOutcome::Acked { offset } = s.outcome {
            let key = (s.producer, s.partition);
            let i = match recent {
                Some((k, i)) if k == key => i,
                _ => *index.entry(key).or_insert_with(|| {
                    lists.push(Vec::new());
                    lists.len() - 1
                }),
            };
            recent = Some((key, i));
            lists[i].push((s.value.seq(), offset));
        }
    }
    let mut index: Vec<((u32, Partition), usize)> = index.into_iter().collect();
    index.sort_unstable();
    for ((producer, p), i) in index {
        let list = &mut lists[i];
        list.sort_unstable();
        for w in list.windows(2) {
            if w[1].1 <= w[0].1 {
                report.add(
                    AnomalyKind::NonmonotonicSend,
                    format!(
                        "producer {producer} partition {pn}: send {} acked at {} after send {} at {}",
                        w[1].0,
                        w[1].1,
                        w[0].0,
                        w[0].1,
                        pn = h.partition(p)
                    ),
                );
            }
        }
    }

    // Commits never go backwards; below the final one, every acked record was processed.
    // In the order the coordinator answered them: a consumer hands its commits to the history
    // in batches, so the history's order is not the commits' order.
    let mut commits: Vec<&crate::history::Commit> = h.commits.iter().collect();
    commits.sort_by_key(|c| c.at_ms);
    let mut committed: BTreeMap<(&str, Partition), i64> = BTreeMap::new();
    for commit in commits {
        let key = (commit.group.as_str(), commit.partition);
        if let Some(&prev) = committed.get(&key) {
            if commit.offset < prev {
                report.add(
                    AnomalyKind::CommittedOffsetRegression,
                    format!(
                        "group {} partition {}: committed {} after {prev}",
                        commit.group,
                        h.partition(commit.partition),
                        commit.offset
                    ),
                );
            }
        }
        let entry = committed.entry(key).or_insert(commit.offset);
        *entry = (*entry).max(commit.offset);
    }
    // Every value processed, and how many processings were of a value already processed
    // (at-least-once redelivery: counted, not an anomaly).
    let mut processed: Table<Value, ()> = Table::new(&value_slots);
    let distinct = h
        .processed
        .iter()
        .filter(|p| processed.first(p.value, ()).is_none())
        .count();
    report.compared.processed_duplicates = h.processed.len() - distinct;
    if h.tracks_processing {
        for s in &h.sends {
            let SendOutcome::Acked { offset } = s.outcome else {
                continue;
            };
            let below_commit = committed.iter().any(|(&(_, p), &c)| p == s.partition && offset < c);
            if below_commit && !processed.contains(s.value) {
                report.add(
                    AnomalyKind::AckedNeverProcessed,
                    format!(
                        "{}/{} acked at partition {} offset {offset}, below the committed offset, never processed",
                        s.value.producer(),
                        s.value.seq(),
                        h.partition(s.partition)
                    ),
                );
            }
        }
    }
    groups::check(h, &mut report);
    report
}

mod groups;

/// The keys seen with more than one distinct value, with every value each was seen with, in
/// order: what a `BTreeMap<K, BTreeSet<V>>` of all the pairs holds with two or more values,
/// whatever the order the pairs come in. Each pair costs one lookup of its key in `first`
/// against the first value seen; only conflicting keys (rare: each is an anomaly) go to the
/// ordered map.
struct Conflicts<'a, K, V> {
    first: Table<'a, K, V>,
    found: BTreeMap<K, BTreeSet<V>>,
}

impl<'a, K, V> Conflicts<'a, K, V>
where
    K: Dense + Ord,
    V: Ord + Copy,
{
    fn new(layout: &'a Layout) -> Self {
        Conflicts {
            first: Table::new(layout),
            found: BTreeMap::new(),
        }
    }

    /// Inlined where it is called (five times a record): called, its frame was sized for the
    /// conflict path (a map and a set) and cost a third of its ~50 instructions.
    #[inline]
    fn see(&mut self, k: K, v: V) {
        match self.first.first(k, v) {
            Some(had) if had != v => self.conflict(k, had, v),
            _ => {}
        }
    }

    /// [`see`](Self::see), and whether the pair may be new: `false` when `v` is the value first
    /// seen at `k` (the pair was seen then, and seeing it again changes nothing).
    #[inline]
    fn see_new(&mut self, k: K, v: V) -> bool {
        match self.first.first(k, v) {
            Some(had) if had == v => false,
            Some(had) => {
                self.conflict(k, had, v);
                true
            }
            None => true,
        }
    }

    /// A second value at `k` (an anomaly: rare).
    #[cold]
    #[inline(never)]
    fn conflict(&mut self, k: K, had: V, v: V) {
        self.found.entry(k).or_insert_with(|| BTreeSet::from([had])).insert(v);
    }
}

/// An empty Fx hash set with room for `n` entries.
fn set_with_room<T>(n: usize) -> FxHashSet<T> {
    FxHashSet::with_capacity_and_hasher(n, Default::default())
}

#[cfg(test)]
mod tests;
