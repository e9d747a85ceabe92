//! Partition reassignment as Kafka does it (KIP-455), decided from the view alone.
//!
//! A reassignment of partition p from its original replicas O to a target T:
//! 1. [`Controller::alter_reassignment`] writes, in one multi that compares-and-sets both the
//!    topic znode and p's state znode, the full replica set `T ++ (O - T)` with
//!    `adding = T - O` and `removing = O - T`. The added replicas see themselves in the
//!    assignment, create their log and fetch from the leader as followers; the leader counts
//!    them as followers (not in the ISR) and adds them to the ISR once caught up, as any
//!    follower. The high watermark never waits on them before that.
//! 2. [`Controller::reassignment_steps`] (run by the controller after every scan) completes p
//!    once every target replica is in the ISR: the assignment becomes T, the ISR loses the
//!    removed replicas and, if the leader is being removed, leadership moves to the first target
//!    replica that is live and in the ISR (epoch bumped). One multi per topic, again compare-and-
//!    set on the topic and state znodes. The removed replicas see the assignment without them
//!    and delete their logs.
//!
//! Safety: the new ISR is a subset of the old one that contains the new leader, so every
//! acknowledged (acks=all) record is on every member of the new ISR; and since completion
//! waits until all of T is in the ISR, the ISR after completion has |T| >= min.insync.replicas
//! members. Nothing is removed from the ISR before that point.
//!
//! A second reassignment of a moving partition **replaces** the first, as in Kafka: the new
//! target is taken relative to the original replicas O (not the first target), replicas the
//! first one was adding and the second does not want are dropped (and leave the ISR) in the same
//! write. A cancel (a null target) is a replacement whose target is O (as in Kafka, O is the
//! full set less `adding`, so the replicas a move kept stay in the target's order). Either is refused when no
//! replica of the resulting set would remain in sync (nothing would hold the acknowledged data).
//!
//! The state lives in the coordinator, so a new controller resumes a reassignment where the old
//! one left it, and a crashed target broker simply joins the ISR later (or the operator cancels).

use super::{ClusterView, Controller, Op, Write};
use crate::cluster::{partition_state_path, topic_path, PartitionState, Reassignment};
use crate::error_code::ErrorCode;
use crate::ids::{BrokerId, LeaderEpoch};

/// Replicas one reassignment may name: bounds what a request can make the controller write.
pub const REPLICAS_PER_PARTITION_MAX: usize = 64;

/// A refused reassignment: Kafka's error code and a message for the response. Nothing was
/// written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReassignError {
    pub code: ErrorCode,
    pub message: String,
}

fn refuse<T>(code: ErrorCode, message: String) -> Result<T, ReassignError> {
    Err(ReassignError { code, message })
}

fn without(list: &[BrokerId], drop: &[BrokerId]) -> Vec<BrokerId> {
    list.iter().copied().filter(|b| !drop.contains(b)).collect()
}

/// The first replica of `order` that is live and in `isr`.
fn first_eligible(order: &[BrokerId], isr: &[BrokerId], view: &ClusterView) -> Option<BrokerId> {
    order
        .iter()
        .copied()
        .find(|b| isr.contains(b) && view.live_brokers.contains(b))
}

/// The partition state once the replica set becomes `full`: the ISR loses replicas outside it
/// and, if the leader is outside it, leadership moves to the first of `full` that is live and in
/// the new ISR (epoch bumped). `None` when nobody in sync would remain to lead.
fn state_for(
    state: &PartitionState,
    full: &[BrokerId],
    view: &ClusterView,
    controller_epoch: i32,
) -> Option<PartitionState> {
    let isr: Vec<BrokerId> = state.isr.iter().copied().filter(|b| full.contains(b)).collect();
    if isr.is_empty() {
        return None;
    }
    // Eligible leader replicas moved away are eligible no more.
    let elr: Vec<BrokerId> = state.elr.iter().copied().filter(|b| full.contains(b)).collect();
    match state.leader {
        Some(l) if full.contains(&l) => Some(PartitionState {
            isr,
            elr,
            ..state.clone()
        }),
        // Offline: the controller's election (reconcile) picks the leader from the new set.
        None => Some(PartitionState {
            isr,
            elr,
            ..state.clone()
        }),
        Some(_) => {
            let leader = first_eligible(full, &isr, view)?;
            Some(PartitionState {
                leader: Some(leader),
                leader_epoch: LeaderEpoch(state.leader_epoch.0.saturating_add(1)),
                isr,
                controller_epoch,
                elr,
            })
        }
    }
}

impl Controller {
    /// Decides an AlterPartitionReassignments for one partition: `target` is the new replica
    /// list, `None` cancels the reassignment in progress. `Ok(None)` when nothing needs writing
    /// (the partition already has exactly that replica set). The write compares-and-sets the
    /// topic and state znodes, so a racing reassignment or ISR change makes it fail unapplied.
    ///
    /// Refused with INVALID_REPLICA_ASSIGNMENT (writing nothing): an empty or oversized list, a
    /// duplicated replica, a broker that is not registered (replicas already in the partition's
    /// set may be down), fewer replicas than the topic's `min.insync.replicas`, or no replica of
    /// the resulting set in sync. UNKNOWN_TOPIC_OR_PARTITION for an unknown (or deleted, or not
    /// yet laid out) partition; NO_REASSIGNMENT_IN_PROGRESS for a cancel with nothing to cancel.
    pub fn alter_reassignment(
        &self,
        view: &ClusterView,
        topic: &str,
        partition: i32,
        target: Option<&[BrokerId]>,
    ) -> Result<Option<Write>, ReassignError> {
        let unknown = || format!("no partition {topic}-{partition}");
        let Some(t) = view.topics.get(topic).filter(|_| !view.delete_requests.contains(topic)) else {
            return refuse(ErrorCode::UnknownTopicOrPartition, unknown());
        };
        let (Some(full), Some(state)) = (t.record.assignment.get(&partition), t.partitions.get(&partition)) else {
            return refuse(ErrorCode::UnknownTopicOrPartition, unknown());
        };
        if Controller::isr_restarted(view, topic, partition, &state.value) {
            return refuse(
                ErrorCode::LeaderNotAvailable,
                format!("{topic}-{partition}: an ISR member restarted; retry once the controller re-elected"),
            );
        }
        let moving = t.record.reassigning.contains_key(&partition);
        let original = t.record.original_replicas(partition);
        let target: Vec<BrokerId> = match target {
            Some(target) => target.to_vec(),
            None if moving => original.clone(),
            None => {
                return refuse(
                    ErrorCode::NoReassignmentInProgress,
                    format!("{topic}-{partition} is not being reassigned"),
                )
            }
        };
        let invalid = |m: String| refuse(ErrorCode::InvalidReplicaAssignment, m);
        if target.is_empty() || target.len() > REPLICAS_PER_PARTITION_MAX {
            return invalid(format!(
                "{topic}-{partition}: 1 to {REPLICAS_PER_PARTITION_MAX} replicas, got {}",
                target.len()
            ));
        }
        for (i, r) in target.iter().enumerate() {
            if target[..i].contains(r) {
                return invalid(format!("{topic}-{partition}: replica {} named twice", r.0));
            }
            if !view.live_brokers.contains(r) && !full.contains(r) {
                return invalid(format!("{topic}-{partition}: broker {} is not registered", r.0));
            }
        }
        let min_isr = self.min_isr(&t.record);
        if target.len() < min_isr {
            return invalid(format!(
                "{topic}-{partition}: {} replicas, fewer than min.insync.replicas {min_isr}",
                target.len()
            ));
        }
        let mut new_full = target.clone();
        new_full.extend(without(&original, &target));
        let reassignment = Reassignment {
            adding: without(&target, &original),
            removing: without(&original, &target),
        };
        let mut record = t.record.clone();
        if reassignment.adding.is_empty() && reassignment.removing.is_empty() {
            // Back to (or still) the original set, possibly reordered: nothing in flight.
            record.reassigning.remove(&partition);
            new_full = target.clone();
        } else {
            record.reassigning.insert(partition, reassignment);
        }
        record.assignment.insert(partition, new_full.clone());
        if record == t.record {
            return Ok(None);
        }
        let added = without(&target, &original);
        if self.config.mutant_switch_before_isr && !added.is_empty() {
            // The negative control, at once: the target replaces the replica set in the very
            // write that starts the move, declared in sync, an added replica (with nothing
            // fetched) leading. Done at the controller's next step instead, the switch could
            // come after the added replicas caught up (a race with the admin's next write
            // delays it), and the control would lose nothing.
            let live = |b: &&BrokerId| view.live_brokers.contains(b);
            if let Some(&leader) = added.iter().find(live) {
                let after = mutant_switched(&state.value, &target, leader, self.epoch);
                record.assignment.insert(partition, target.clone());
                record.reassigning.remove(&partition);
                let what = format!(
                    "{topic}-{partition}: reassign {:?} -> {:?} at once, {} leading (MUTANT: before the ISR)",
                    ids(&original),
                    ids(&target),
                    leader.0
                );
                return Ok(Some(self.write(
                    vec![
                        Op::Set {
                            path: topic_path(topic),
                            data: record.encode(),
                            expected_version: Some(t.record_version),
                        },
                        Op::Set {
                            path: partition_state_path(topic, partition),
                            data: after.encode(),
                            expected_version: Some(state.version),
                        },
                    ],
                    what,
                )));
            }
        }
        let Some(after) = state_for(&state.value, &new_full, view, self.epoch) else {
            return invalid(format!(
                "{topic}-{partition}: no replica of {:?} is in sync (ISR {:?}); try again once one is",
                ids(&new_full),
                ids(&state.value.isr)
            ));
        };
        let what = match (moving, record.reassigning.get(&partition)) {
            (_, None) => format!(
                "{topic}-{partition}: reassignment cancelled, replicas {:?}",
                ids(&new_full)
            ),
            (false, Some(r)) => format!(
                "{topic}-{partition}: reassign {:?} -> {:?} (adding {:?}, removing {:?})",
                ids(&original),
                ids(&target),
                ids(&r.adding),
                ids(&r.removing)
            ),
            (true, Some(_)) => format!(
                "{topic}-{partition}: reassignment replaced, {:?} -> {:?}",
                ids(&original),
                ids(&target)
            ),
        };
        let checks = if after == state.value {
            Vec::new()
        } else {
            view.registration_checks(&new_full, &after)
        };
        Ok(Some(
            self.write(
                [
                    Op::Set {
                        path: topic_path(topic),
                        data: record.encode(),
                        expected_version: Some(t.record_version),
                    },
                    // Rewritten only when its content changes: a new version of an unchanged state
                    // would hide a restart of an ISR member that registered after this view was
                    // read (KIP-380 compares the state's write with the registration). Replicas
                    // pick the new replica set up from the topic record alone.
                    if after == state.value {
                        Op::Check {
                            path: partition_state_path(topic, partition),
                            version: state.version,
                        }
                    } else {
                        Op::Set {
                            path: partition_state_path(topic, partition),
                            data: after.encode(),
                            expected_version: Some(state.version),
                        }
                    },
                ]
                .into_iter()
                .chain(checks)
                .collect(),
                what,
            ),
        ))
    }

    /// Completes the reassignments whose target replicas are all in the ISR (see the module
    /// comment). One write per topic with such partitions; idempotent (a view with nothing to
    /// complete gives no write).
    pub fn reassignment_steps(&self, view: &ClusterView) -> Vec<Write> {
        let mut writes = Vec::new();
        for (name, t) in &view.topics {
            if t.record.reassigning.is_empty() || view.delete_requests.contains(name) {
                continue;
            }
            let mut record = t.record.clone();
            let mut ops = Vec::new();
            let mut done = Vec::new();
            for &p in t.record.reassigning.keys() {
                let Some(state) = t.partitions.get(&p) else { continue };
                if Controller::isr_restarted(view, name, p, &state.value) {
                    continue; // the election first (see `isr_restarted`)
                }
                let target = t.record.target_replicas(p);
                if self.config.mutant_switch_before_isr {
                    // The negative control: switch now, declaring the target in sync, an added
                    // replica (which has fetched little or nothing) leading when there is one.
                    let adding = &t.record.reassigning[&p].adding;
                    let live = |b: &&BrokerId| view.live_brokers.contains(b);
                    let Some(&leader) = adding.iter().find(live).or_else(|| target.iter().find(live)) else {
                        continue;
                    };
                    let after = mutant_switched(&state.value, &target, leader, self.epoch);
                    record.assignment.insert(p, target.clone());
                    record.reassigning.remove(&p);
                    ops.push(Op::Set {
                        path: partition_state_path(name, p),
                        data: after.encode(),
                        expected_version: Some(state.version),
                    });
                    done.push(format!("{p} -> {:?} (MUTANT: before the ISR)", ids(&target)));
                    continue;
                }
                if !target.iter().all(|b| state.value.isr.contains(b)) {
                    continue;
                }
                // All of the target is in sync, so a live leader can always be chosen from it
                // unless every target replica is dead (then wait for one to return).
                let Some(after) = state_for(&state.value, &target, view, self.epoch) else {
                    continue;
                };
                if after.leader.is_some_and(|l| !view.live_brokers.contains(&l)) {
                    continue;
                }
                record.assignment.insert(p, target.clone());
                record.reassigning.remove(&p);
                ops.push(Op::Set {
                    path: partition_state_path(name, p),
                    data: after.encode(),
                    expected_version: Some(state.version),
                });
                ops.extend(view.registration_checks(&target, &after));
                done.push(format!(
                    "{p} -> {:?} leader {:?}",
                    ids(&target),
                    after.leader.map(|b| b.0)
                ));
            }
            if ops.is_empty() {
                continue;
            }
            ops.insert(
                0,
                Op::Set {
                    path: topic_path(name),
                    data: record.encode(),
                    expected_version: Some(t.record_version),
                },
            );
            writes.push(self.write(ops, format!("{name}: reassignment complete: {}", done.join("; "))));
        }
        writes
    }
}

/// The reassignment mutant's state: `target` declared in sync at once, `leader` leading in a new
/// epoch (a negative control: it loses acknowledged records).
fn mutant_switched(
    state: &PartitionState,
    target: &[BrokerId],
    leader: BrokerId,
    controller_epoch: i32,
) -> PartitionState {
    PartitionState {
        leader: Some(leader),
        leader_epoch: LeaderEpoch(state.leader_epoch.0.saturating_add(1)),
        isr: target.to_vec(),
        controller_epoch,
        elr: Vec::new(),
    }
}

fn ids(list: &[BrokerId]) -> Vec<i32> {
    list.iter().map(|b| b.0).collect()
}
