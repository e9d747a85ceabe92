//! Partition leader election and ISR clean-up when brokers die or return.
//!
//! For each partition, from the view alone (idempotent):
//! - Leader live: dead followers leave the ISR (the live leader stays, so the ISR never empties).
//!   The leader epoch does not change: the leadership did not.
//! - Leader dead: the new leader is the first replica in assignment order that is live and in
//!   the ISR (clean); the new ISR is the old one less dead brokers. Else the first live eligible
//!   leader replica (KIP-966's ELR: replicas that left an ISR below `min.insync.replicas`, so
//!   they hold every acks=all record acknowledged; see [`crate::cluster::next_elr`]), with ISR
//!   = [it]. Replicas leaving the ISR while it is below min ISR join the ELR.
//! - Offline (no leader): KIP-966's unclean recovery ([`recover_offline`]): every replica
//!   reports its log's latest epoch and end for this offline epoch (`/brokers/log_ends`), and
//!   once every ISR and ELR member has (or, with unclean election allowed, every live one), and
//!   every other live replica too, the longest log leads; the first member to return does not
//!   simply lead again.
//! - If there is none and unclean election is allowed (the topic's
//!   `unclean.leader.election.enable`, else the controller default, false), the first live
//!   replica, with ISR = [it], and the change is marked unclean. Otherwise the partition is
//!   offline: leader `None`, the ISR kept as it was (Kafka keeps its last members so a returning
//!   one can lead again with all committed data).
//! - Every leader change, including to `None`, bumps the leader epoch.
//! - A broker that registered again after the partition's state was written and whose log is not
//!   known intact from before it (it started without a clean-shutdown marker: Kafka's broker
//!   epoch, KIP-380, narrowed as in KIP-966; see [`ClusterView::restarted_since`]) counts as
//!   dead for that state: as leader it is replaced, as follower it leaves the ISR, because its
//!   log may have lost unsynced writes. A re-registration after a session expiry, or after a
//!   clean restart, does not count: that log lost nothing. Once the state is rewritten, it is live again and rejoins the
//!   ISR through the leader when it has caught up; if it was the last ISR member the partition
//!   goes offline and its log end report decides, beside the other members' (Kafka's ZooKeeper
//!   controller would simply elect it again). While other members remain in the ISR it leaves the ISR even when none of them is live, so
//!   it cannot lead again once the partition is offline: the partition waits for one of them.

use super::{ClusterView, Controller, Op, PartitionChange, TopicView};
use crate::cluster::{next_elr, partition_state_path, LogEndReport, PartitionState};
use crate::ids::{BrokerId, LeaderEpoch};

/// What one partition should become, and whether the new leader came from outside the ISR.
/// `None` when the state needs no change. `live` says who may lead or stay in sync (live, and
/// for a partition with a leader not restarted since its state); `report` is a replica's
/// [`LogEndReport`] for this partition, if it sent one.
pub(super) fn next_state(
    state: &PartitionState,
    replicas: &[BrokerId],
    live: &dyn Fn(BrokerId) -> bool,
    unclean_allowed: bool,
    controller_epoch: i32,
    min_isr: usize,
    report: &dyn Fn(BrokerId) -> Option<LogEndReport>,
) -> Option<(PartitionState, bool)> {
    if let Some(leader) = state.leader.filter(|&l| live(l)) {
        let isr: Vec<BrokerId> = state.isr.iter().copied().filter(|&b| b == leader || live(b)).collect();
        if isr == state.isr {
            return None;
        }
        let elr = next_elr(&state.isr, &state.elr, &isr, min_isr, replicas);
        let after = PartitionState {
            isr,
            elr,
            controller_epoch,
            ..state.clone()
        };
        return Some((after, false));
    }
    let bumped = LeaderEpoch(state.leader_epoch.0.saturating_add(1));
    let elected = |leader: BrokerId, isr: Vec<BrokerId>, elr: Vec<BrokerId>| PartitionState {
        leader: Some(leader),
        leader_epoch: bumped,
        isr,
        controller_epoch,
        elr,
    };
    if state.leader.is_none() {
        return recover_offline(state, replicas, live, unclean_allowed, report).map(|(leader, isr, unclean)| {
            // Nobody left outside the new ISR is known to hold every acknowledged record.
            (elected(leader, isr, Vec::new()), unclean)
        });
    }
    let clean = replicas.iter().copied().find(|&b| live(b) && state.isr.contains(&b));
    // KIP-966: with no ISR member to take over, an eligible leader replica may: it left the ISR
    // while no acks=all write could be acknowledged, so it holds every one that was.
    let eligible = replicas.iter().copied().find(|&b| live(b) && state.elr.contains(&b));
    let (after, unclean) = if let Some(leader) = clean {
        let isr: Vec<BrokerId> = state.isr.iter().copied().filter(|&b| live(b)).collect();
        let elr = next_elr(&state.isr, &state.elr, &isr, min_isr, replicas);
        (elected(leader, isr, elr), false)
    } else if let Some(leader) = eligible {
        let elr = next_elr(&state.isr, &state.elr, &[leader], min_isr, replicas);
        (elected(leader, vec![leader], elr), false)
    } else if let Some(leader) = replicas.iter().copied().find(|&b| live(b)).filter(|_| unclean_allowed) {
        (elected(leader, vec![leader], Vec::new()), true)
    } else {
        // Offline. The next pass elects from the replicas' log end reports for this epoch.
        (
            PartitionState {
                leader: None,
                leader_epoch: bumped,
                isr: state.isr.clone(),
                controller_epoch,
                elr: state.elr.clone(),
            },
            false,
        )
    };
    Some((after, unclean))
}

/// An offline partition's new leader, its ISR and whether the election is unclean (KIP-966's
/// unclean recovery, "balanced"): every live replica reports its log's latest epoch and end for
/// this state's epoch, and the longest log leads (highest latest epoch, then highest end; ties in
/// assignment order), with the replicas whose log ends equal its own as the ISR. The first ISR
/// member to return is not simply elected, as Kafka's ZooKeeper controller does: when every
/// member restarted, one after a power loss, that one may be first and lack acknowledged records
/// the others hold (`scenarios/findings/elastic_all_isr_restarted_...`). It waits for every ISR
/// and ELR member (a dead one may be the only holder), unless unclean election is allowed: then
/// the live members suffice, and with none live the first live replica leads.
///
/// Replicas outside the ISR and ELR count too, as in KIP-966 (the controller asks every replica
/// with GetReplicaLogInfo): when the members lost power one after another, a replica that left
/// the ISR because it restarted may be the one that still holds what was acknowledged (a campaign
/// lost 73 records electing the only ISR member, whose log had emptied, over a restarted replica
/// holding all 73: acl race seed 6951782326422116578). This is not an unclean election: logs of
/// the same latest epoch were all copied from that epoch's leader after truncating to its
/// lineage, so the longer holds the shorter, and a later latest epoch is the newer lineage. Live
/// non-members are waited for as well, so that the choice does not depend on whose report the
/// controller read first (a live broker reports an empty log for a replica it cannot open).
fn recover_offline(
    state: &PartitionState,
    replicas: &[BrokerId],
    live: &dyn Fn(BrokerId) -> bool,
    unclean_allowed: bool,
    report: &dyn Fn(BrokerId) -> Option<LogEndReport>,
) -> Option<(BrokerId, Vec<BrokerId>, bool)> {
    let member = |b: &BrokerId| state.isr.contains(b) || state.elr.contains(b);
    let members = replicas.iter().filter(|b| member(b)).count();
    let live_members = replicas.iter().filter(|&&b| member(&b) && live(b)).count();
    if live_members == 0 {
        let leader = replicas
            .iter()
            .copied()
            .find(|&b| live(b))
            .filter(|_| unclean_allowed)?;
        return Some((leader, vec![leader], true));
    }
    if live_members < members && !unclean_allowed {
        return None;
    }
    let mut reports = Vec::with_capacity(replicas.len());
    for &b in replicas.iter().filter(|&&b| live(b)) {
        let r = report(b).filter(|r| r.offline_epoch == state.leader_epoch)?;
        reports.push((b, r));
    }
    let best = reports.iter().map(|(_, r)| (r.last_epoch, r.log_end)).max()?;
    let isr: Vec<BrokerId> = reports
        .iter()
        .filter(|(_, r)| (r.last_epoch, r.log_end) == best)
        .map(|(b, _)| *b)
        .collect();
    Some((*isr.first()?, isr, false))
}

impl Controller {
    /// Elects leaders for partitions whose leader is dead or absent and removes dead followers
    /// from ISRs. One write per changed partition, each fenced by the controller epoch and
    /// compare-and-set on that partition's state version, so one lost race costs one partition
    /// a re-read, not the whole batch.
    pub fn reconcile(&self, view: &ClusterView) -> Vec<PartitionChange> {
        let live = |b: BrokerId| view.live_brokers.contains(&b);
        let mut changes = Vec::new();
        for (name, topic) in &view.topics {
            if view.delete_requests.contains(name) {
                continue;
            }
            let restarts = Restarts { view };
            restarts.reconcile_topic(self, name, topic, &live, &mut changes);
        }
        changes
    }
}

/// What the view knows of broker restarts (see the module comment).
struct Restarts<'a> {
    view: &'a ClusterView,
}

impl Restarts<'_> {
    fn reconcile_topic(
        &self,
        controller: &Controller,
        name: &str,
        topic: &TopicView,
        live: &dyn Fn(BrokerId) -> bool,
        changes: &mut Vec<PartitionChange>,
    ) {
        let this = controller;
        let unclean_allowed = this.unclean_allowed(&topic.record);
        for (&p, state) in &topic.partitions {
            let replicas = topic.record.assignment.get(&p).map_or(&[][..], Vec::as_slice);
            let written_at = self.view.state_written_at.get(&(name.to_string(), p)).copied();
            // Restarted uncleanly since this state was written: not the incarnation the state
            // names. A broker that only re-registered (session expiry, clean restart) still is.
            let bounced = |b: BrokerId| written_at.is_some_and(|w| self.view.restarted_since(b, w));
            // Only while the partition has a leader: once offline, a returning ISR member is the
            // best there is, and leads again (as in Kafka).
            let has_leader = state.value.leader.is_some();
            let live_here = |b: BrokerId| live(b) && !(has_leader && bounced(b) && state.value.isr.contains(&b));
            // A restarted ISR member also leaves the ISR itself when others remain in it, even if
            // none of them is live now: kept there, it would lead again as "the best there is"
            // once the partition went offline, and that write would hide its restart. Found by a
            // swarm campaign (a restarted leader whose followers looked dead to a new controller
            // led again with a log missing an acknowledged record).
            let mut electing = state.value.clone();
            if has_leader {
                let kept: Vec<BrokerId> = electing.isr.iter().copied().filter(|&b| !bounced(b)).collect();
                if !kept.is_empty() {
                    electing.isr = kept;
                }
                // An eligible leader replica that restarted may have lost unsynced writes: no
                // longer eligible (KIP-966 removes it at its registration).
                electing.elr.retain(|&b| !bounced(b));
            }
            let min_isr = controller.min_isr(&topic.record);
            let report = |b: BrokerId| {
                self.view
                    .log_ends
                    .get(&b)
                    .and_then(|m| m.get(&(name.to_string(), p)))
                    .copied()
            };
            // `next_state` compares against the ISR it is given: with a live leader it finds
            // nothing to do once the restarted followers were filtered out above, so that
            // removal is written here (a campaign seed lost 133 records: a restarted follower
            // stayed in the ISR, later came back as the only eligible member besides a leader
            // that lost power, and the partition went offline and elected that leader; and every
            // reassignment of such a partition was refused: issue #9's grow seed 8026039648405865606).
            let decided = next_state(
                &electing,
                replicas,
                &live_here,
                unclean_allowed,
                this.epoch,
                min_isr,
                &report,
            )
            .or_else(|| {
                (electing.isr != state.value.isr || electing.elr != state.value.elr).then(|| {
                    let after = PartitionState {
                        controller_epoch: this.epoch,
                        ..electing.clone()
                    };
                    (after, false)
                })
            })
            .map(|(mut after, unclean)| {
                if has_leader {
                    after.elr.retain(|&b| !bounced(b));
                }
                if this.config.mutant_reuse_leader_epoch {
                    after.leader_epoch = state.value.leader_epoch;
                }
                (after, unclean)
            });
            let Some((after, unclean)) = decided else {
                continue;
            };
            let ids = |v: &[BrokerId]| v.iter().map(|b| b.0).collect::<Vec<_>>();
            let what = format!(
                "{name}-{p}: leader {:?} -> {:?}, epoch {} -> {}, isr {:?} -> {:?}, elr {:?} -> {:?}{}",
                state.value.leader.map(|b| b.0),
                after.leader.map(|b| b.0),
                state.value.leader_epoch,
                after.leader_epoch,
                ids(&state.value.isr),
                ids(&after.isr),
                ids(&state.value.elr),
                ids(&after.elr),
                if unclean {
                    " (UNCLEAN: leader outside the ISR)"
                } else {
                    ""
                }
            );
            let mut ops = vec![Op::Set {
                path: partition_state_path(name, p),
                data: after.encode(),
                expected_version: Some(state.version),
            }];
            ops.extend(self.view.registration_checks(replicas, &after));
            let write = this.write(ops, what);
            changes.push(PartitionChange {
                topic: name.to_string(),
                partition: p,
                before: state.value.clone(),
                after,
                unclean,
                write,
            });
        }
    }
}

impl Controller {
    /// Moves leadership back to each partition's preferred (first) replica when it is live, in
    /// the ISR and has not restarted since the state was written (Kafka's preferred leader
    /// election: ElectLeaders; `auto.leader.rebalance.enable` runs it for the imbalanced brokers
    /// only, [`Controller::leader_imbalance_elections`]), bumping the epoch.
    pub fn preferred_leader_elections(&self, view: &ClusterView) -> Vec<PartitionChange> {
        let mut changes = Vec::new();
        for (name, topic) in &view.topics {
            for (&p, state) in &topic.partitions {
                let Some(&preferred) = topic.record.assignment.get(&p).and_then(|r| r.first()) else {
                    continue;
                };
                let s = &state.value;
                // Restarted since this state was written: its log may lack what the ISR holds
                // (KIP-380); it rejoins the ISR through the leader first.
                let written_at = view.state_written_at.get(&(name.clone(), p));
                let bounced = written_at.is_some_and(|&w| view.restarted_since(preferred, w));
                if bounced
                    || Controller::isr_restarted(view, name, p, s)
                    || view.delete_requests.contains(name)
                    || s.leader == Some(preferred)
                    || s.leader.is_none()
                    || !view.live_brokers.contains(&preferred)
                    || !s.isr.contains(&preferred)
                {
                    continue;
                }
                let after = PartitionState {
                    leader: Some(preferred),
                    leader_epoch: LeaderEpoch(s.leader_epoch.0.saturating_add(1)),
                    isr: s.isr.clone(),
                    controller_epoch: self.epoch,
                    elr: s.elr.clone(),
                };
                let mut ops = vec![Op::Set {
                    path: partition_state_path(name, p),
                    data: after.encode(),
                    expected_version: Some(state.version),
                }];
                ops.extend(
                    view.registration_checks(topic.record.assignment.get(&p).map_or(&[][..], Vec::as_slice), &after),
                );
                let write = self.write(
                    ops,
                    format!(
                        "{name}-{p}: preferred leader {} (epoch {})",
                        preferred.0, after.leader_epoch
                    ),
                );
                changes.push(PartitionChange {
                    topic: name.clone(),
                    partition: p,
                    before: s.clone(),
                    after,
                    unclean: false,
                    write,
                });
            }
        }
        changes
    }
}
