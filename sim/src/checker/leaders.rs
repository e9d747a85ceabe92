//! "One leader per epoch": leader epochs exist so that at most one broker leads a partition in
//! each (KIP-101). Input: observations of brokers acting as leader (accepting a produce, or
//! answering a follower's fetch as leader), each with the epoch it acted in. Two brokers
//! observed leading one partition in one epoch is `two-leaders-one-epoch`, whatever the times:
//! an epoch is handed out once, so even non-overlapping leaderships in one epoch are a bug.
//!
//! The same rule for the controller: [`check_controllers`] takes observations of brokers acting
//! as controller (a fenced write the coordinator accepted) with their controller epoch; two
//! brokers in one epoch is `two-controllers-one-epoch`.
//!
//! Trusts only the observations; the brokers' claims about who else leads are not inputs.

use std::collections::{BTreeMap, BTreeSet};

use gregor_core::ids::{BrokerId, LeaderEpoch};

use super::{AnomalyKind, Finding};

/// A broker seen acting as leader of a partition in an epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderObservation {
    pub broker: BrokerId,
    pub topic: String,
    pub partition: i32,
    pub leader_epoch: LeaderEpoch,
    pub time_ms: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeadersReport {
    pub observations: usize,
    /// Distinct (partition, epoch) pairs compared.
    pub epochs: usize,
    pub findings: Vec<Finding>,
}

impl LeadersReport {
    /// No observation: nothing was compared, which fails rather than passes.
    pub fn compared_nothing(&self) -> bool {
        self.observations == 0
    }

    pub fn summary(&self) -> String {
        let mut out = format!(
            "one leader per epoch: compared {} leader observations over {} (partition, epoch) pairs; {} {}",
            self.observations,
            self.epochs,
            self.findings.len(),
            AnomalyKind::TwoLeadersOneEpoch
        );
        if let Some(first) = self.findings.first() {
            out.push_str(&format!(" (first: {})", first.detail));
        }
        out
    }
}

pub fn check(observations: &[LeaderObservation]) -> LeadersReport {
    // (topic, partition, epoch) -> broker -> first time seen leading
    let mut leaders: BTreeMap<(&str, i32, LeaderEpoch), BTreeMap<BrokerId, u64>> = BTreeMap::new();
    for o in observations {
        let first = leaders
            .entry((o.topic.as_str(), o.partition, o.leader_epoch))
            .or_default()
            .entry(o.broker)
            .or_insert(o.time_ms);
        *first = (*first).min(o.time_ms);
    }
    let mut report = LeadersReport {
        observations: observations.len(),
        epochs: leaders.len(),
        findings: Vec::new(),
    };
    for ((topic, partition, epoch), brokers) in &leaders {
        if brokers.len() > 1 {
            let seen: BTreeSet<String> = brokers
                .iter()
                .map(|(b, t)| format!("broker {} at {t} ms", b.0))
                .collect();
            report.findings.push(Finding {
                kind: AnomalyKind::TwoLeadersOneEpoch,
                detail: format!("{topic}-{partition} epoch {epoch} led by {seen:?}"),
            });
        }
    }
    report
}

/// A broker seen acting as controller (a write of its accepted) in a controller epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControllerObservation {
    pub broker: BrokerId,
    pub controller_epoch: i32,
    pub time_ms: u64,
}

/// One controller per controller epoch; the report's `epochs` counts controller epochs.
pub fn check_controllers(observations: &[ControllerObservation]) -> LeadersReport {
    let mut by_epoch: BTreeMap<i32, BTreeMap<BrokerId, u64>> = BTreeMap::new();
    for o in observations {
        let first = by_epoch
            .entry(o.controller_epoch)
            .or_default()
            .entry(o.broker)
            .or_insert(o.time_ms);
        *first = (*first).min(o.time_ms);
    }
    let mut report = LeadersReport {
        observations: observations.len(),
        epochs: by_epoch.len(),
        findings: Vec::new(),
    };
    for (epoch, brokers) in &by_epoch {
        if brokers.len() > 1 {
            let seen: Vec<String> = brokers
                .iter()
                .map(|(b, t)| format!("broker {} at {t} ms", b.0))
                .collect();
            report.findings.push(Finding {
                kind: AnomalyKind::TwoControllersOneEpoch,
                detail: format!("controller epoch {epoch} held by {seen:?}"),
            });
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(broker: i32, partition: i32, epoch: i32, time_ms: u64) -> LeaderObservation {
        LeaderObservation {
            broker: BrokerId(broker),
            topic: "t".into(),
            partition,
            leader_epoch: LeaderEpoch(epoch),
            time_ms,
        }
    }

    #[test]
    fn one_leader_per_epoch_passes_across_failovers() {
        let r = check(&[
            obs(0, 0, 0, 1),
            obs(0, 0, 0, 5),
            obs(1, 0, 1, 9),
            obs(1, 1, 0, 2),
            obs(0, 0, 2, 12),
        ]);
        println!("{}", r.summary());
        assert!(r.findings.is_empty());
        assert_eq!((r.observations, r.epochs), (5, 4));
        assert!(!r.compared_nothing());
        assert!(check(&[]).compared_nothing());
    }

    #[test]
    fn negative_control_two_brokers_lead_one_epoch() {
        // A deposed leader that never learned of the new epoch and a new one reusing its epoch.
        let r = check(&[obs(0, 0, 3, 1), obs(1, 0, 3, 4), obs(1, 0, 4, 6)]);
        println!("{}", r.summary());
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].kind, AnomalyKind::TwoLeadersOneEpoch);
        assert!(r.findings[0].detail.contains("t-0 epoch 3"), "{}", r.findings[0].detail);
    }

    #[test]
    fn one_controller_per_epoch_and_its_negative_control() {
        let c = |broker, epoch, time_ms| ControllerObservation {
            broker: BrokerId(broker),
            controller_epoch: epoch,
            time_ms,
        };
        let r = check_controllers(&[c(0, 1, 1), c(0, 1, 3), c(2, 2, 9)]);
        assert!(r.findings.is_empty() && r.epochs == 2 && !r.compared_nothing());
        // A deposed controller whose write was accepted after another took its epoch.
        let r = check_controllers(&[c(0, 1, 1), c(2, 1, 9)]);
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].kind, AnomalyKind::TwoControllersOneEpoch);
        assert!(check_controllers(&[]).compared_nothing());
    }
}
