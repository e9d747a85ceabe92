//! Group coordination in a cluster: the broker side of [`Coordination::Partitioned`].
//!
//! Owns the link between the replicated `__consumer_offsets` partitions this broker hosts and
//! the [`crate::group::GroupCoordinator`]: which offsets partitions are loaded follows which
//! ones this broker leads ([`Broker::sync_group_coordination`]), and an OffsetCommit becomes an
//! append to the group's offsets partition that is acknowledged only once the high watermark
//! passes it, with `min.insync.replicas` honoured as for an acks=all produce
//! ([`Broker::begin_offset_commit`], then [`Broker::poll_offset_commit`]).
//!
//! Loading replays the partition's log from its start to its end (Kafka's rule: a new leader's
//! log is the truth, records above its HW included), synchronously, so a broker that leads a
//! partition has loaded it before it answers any group request for it. Losing leadership (or a
//! new leader epoch, which may have rewritten the log under us) drops that partition's groups
//! and offsets; a new epoch reloads.
//!
//! Fault model: the leader may lose leadership while a commit waits for the HW (the commit
//! fails NOT_COORDINATOR, retriable: it may or may not survive, and the client commits again);
//! the ISR may shrink below min ISR (COORDINATOR_NOT_AVAILABLE, retriable); a log that cannot be
//! read leaves the partition unloaded (NOT_COORDINATOR) and is retried on the next request.

use crate::disk::Disk;
use crate::error_code::ErrorCode;
use crate::group::{offsets, CommitEntry, Coordination, OFFSETS_TOPIC};
use crate::ids::{LeaderEpoch, Offset};

use super::replica::AckWait;
use super::Broker;

/// A commit appended to its offsets partition, waiting for the high watermark.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingCommit {
    /// Per entry of the request (accepted ones `None` until the commit settles).
    pub results: Vec<ErrorCode>,
    pub group: String,
    pub entries: Vec<CommitEntry>,
    pub partition: i32,
    pub end_offset: Offset,
    pub epoch: LeaderEpoch,
}

/// A group's generation record appended to its offsets partition, waiting for the high
/// watermark before the group's members get their assignments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingStore {
    pub group: String,
    pub generation: i32,
    pub partition: i32,
    pub end_offset: Offset,
    pub epoch: LeaderEpoch,
}

/// How an OffsetCommit started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommitStart {
    /// Answered at once (refused, or nothing to write).
    Done(Vec<ErrorCode>),
    /// Appended; settle it with [`Broker::poll_offset_commit`].
    Pending(PendingCommit),
}

/// Kafka's mapping of a failed offsets append to an OffsetCommit error
/// (GroupMetadataManager.storeOffsets).
fn commit_error(append: ErrorCode) -> ErrorCode {
    match append {
        ErrorCode::UnknownTopicOrPartition
        | ErrorCode::NotEnoughReplicas
        | ErrorCode::NotEnoughReplicasAfterAppend
        | ErrorCode::RequestTimedOut => ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotLeaderOrFollower | ErrorCode::KafkaStorageError | ErrorCode::FencedLeaderEpoch => {
            ErrorCode::NotCoordinator
        }
        ErrorCode::MessageTooLarge | ErrorCode::RecordListTooLarge => ErrorCode::InvalidCommitOffsetSize,
        _ => ErrorCode::CoordinatorNotAvailable,
    }
}

impl Broker {
    /// The leader epoch of offsets partition `p` if this broker leads it.
    fn offsets_partition_led(&self, p: i32) -> Option<LeaderEpoch> {
        let part = self.partitions.get(OFFSETS_TOPIC, p)?;
        let repl = part.repl.as_ref()?;
        matches!(repl.role, super::replica::Role::Leader { .. }).then_some(part.leader_epoch)
    }

    /// Makes the loaded offsets partitions follow leadership: loads (replaying the log) those
    /// led in an epoch not loaded yet, unloads those no longer led. Cheap when nothing changed;
    /// a no-op in local mode.
    pub fn sync_group_coordination<D: Disk>(&mut self, disk: &mut D) {
        let Coordination::Partitioned { partitions, .. } = self.groups.coordination() else {
            return;
        };
        for p in 0..partitions.max(1) {
            let led = self.offsets_partition_led(p);
            let loaded = self.groups.loaded_partitions().get(&p).copied();
            match (led, loaded) {
                (Some(epoch), Some(l)) if epoch == l => {}
                (Some(epoch), _) => {
                    let part = self.partitions.get(OFFSETS_TOPIC, p).expect("led, so hosted");
                    match offsets::replay(disk, &part.log, part.log.log_end_offset()) {
                        Ok((records, skipped)) => {
                            if skipped > 0 {
                                tracing::warn!(target: "groups", partition = p, skipped, "offsets records that do not decode were skipped");
                            }
                            self.groups.load_partition(p, epoch, records);
                        }
                        Err(e) => {
                            tracing::error!(target: "groups", partition = p, error = %e, "offsets partition could not be loaded");
                            self.groups.unload_partition(p);
                        }
                    }
                }
                (None, Some(_)) => self.groups.unload_partition(p),
                (None, None) => {}
            }
        }
    }

    /// Partitioned mode, OffsetCommit's first half: checks the commit, then appends its
    /// records to the group's offsets partition as an acks=all produce (refused below
    /// `min.insync.replicas`).
    pub fn begin_offset_commit<D: Disk>(
        &mut self,
        disk: &mut D,
        group_id: &str,
        generation_id: i32,
        member_id: &str,
        entries: Vec<CommitEntry>,
        now_ms: i64,
    ) -> CommitStart {
        self.sync_group_coordination(disk);
        let (mut results, accepted) = self
            .groups
            .prepare_commit(group_id, generation_id, member_id, entries, now_ms);
        if accepted.is_empty() {
            return CommitStart::Done(results);
        }
        let partition = self
            .groups
            .partition_of(group_id)
            .expect("prepare_commit accepted: partitioned mode");
        let mut batch = offsets::commit_batch(group_id, &accepted, now_ms);
        match self.produce(disk, OFFSETS_TOPIC, partition, &mut batch, -1, now_ms) {
            Ok(ok) => CommitStart::Pending(PendingCommit {
                results,
                group: group_id.to_string(),
                entries: accepted,
                partition,
                end_offset: ok.end_offset,
                epoch: ok.leader_epoch,
            }),
            Err(code) => {
                let code = commit_error(code);
                tracing::info!(target: "groups", group = group_id, partition, ?code, "offset commit not appended");
                for r in results.iter_mut().filter(|r| **r == ErrorCode::None) {
                    *r = code;
                }
                CommitStart::Done(results)
            }
        }
    }

    /// Partitioned mode, OffsetCommit's second half: `None` while the high watermark is below
    /// the commit (and not `timed_out`); otherwise the answer, the commit applied when it
    /// succeeded.
    pub fn poll_offset_commit(&mut self, pending: &PendingCommit, timed_out: bool) -> Option<Vec<ErrorCode>> {
        let status = self.acks_all_status(OFFSETS_TOPIC, pending.partition, pending.end_offset, pending.epoch);
        let outcome = match status {
            AckWait::Done => ErrorCode::None,
            AckWait::Pending if !timed_out => return None,
            AckWait::Pending => commit_error(ErrorCode::RequestTimedOut),
            AckWait::Failed(code) => commit_error(code),
        };
        if outcome == ErrorCode::None {
            self.groups
                .apply_commit(pending.partition, pending.epoch, &pending.group, &pending.entries);
        }
        let mut results = pending.results.clone();
        for r in results.iter_mut().filter(|r| **r == ErrorCode::None) {
            *r = outcome;
        }
        Some(results)
    }

    /// Partitioned mode, after a leader's SyncGroup: appends the group's generation record if
    /// the group wants it stored. `None` when there is nothing to wait for (nothing wanted, or
    /// the append failed and the group was told).
    pub fn begin_group_store<D: Disk>(&mut self, disk: &mut D, group_id: &str, now_ms: i64) -> Option<PendingStore> {
        let stored = self.groups.take_store(group_id)?;
        let partition = self.groups.partition_of(group_id)?;
        let mut batch = offsets::group_batch(group_id, &stored, now_ms);
        match self.produce(disk, OFFSETS_TOPIC, partition, &mut batch, -1, now_ms) {
            Ok(ok) => Some(PendingStore {
                group: group_id.to_string(),
                generation: stored.generation,
                partition,
                end_offset: ok.end_offset,
                epoch: ok.leader_epoch,
            }),
            Err(code) => {
                self.groups
                    .finish_store(group_id, stored.generation, commit_error(code), now_ms);
                None
            }
        }
    }

    /// Partitioned mode: settles a [`PendingStore`] once the HW passes it, leadership is lost or
    /// `timed_out`; `true` when settled.
    pub fn poll_group_store(&mut self, pending: &PendingStore, timed_out: bool, now_ms: i64) -> bool {
        let status = self.acks_all_status(OFFSETS_TOPIC, pending.partition, pending.end_offset, pending.epoch);
        let code = match status {
            AckWait::Done => ErrorCode::None,
            AckWait::Pending if !timed_out => return false,
            AckWait::Pending => commit_error(ErrorCode::RequestTimedOut),
            AckWait::Failed(code) => commit_error(code),
        };
        self.groups
            .finish_store(&pending.group, pending.generation, code, now_ms);
        true
    }

    /// Partitioned mode: a FindCoordinator found no `__consumer_offsets` topic; the cluster
    /// task creates it ([`Broker::take_offsets_topic_wanted`]).
    pub fn want_offsets_topic(&mut self) {
        self.offsets_topic_wanted = true;
    }

    /// Whether a FindCoordinator asked for the offsets topic since the last call.
    pub fn take_offsets_topic_wanted(&mut self) -> bool {
        std::mem::take(&mut self.offsets_topic_wanted)
    }

    pub fn offsets_topic_wanted(&self) -> bool {
        self.offsets_topic_wanted
    }
}
