//! "Revoked means refused" for `[acl]` scenarios: once a revocation of a principal's Write has
//! been answered and the propagation bound has passed, no record that principal creates may
//! appear in any replica's log, until the driver starts granting Write again. A violation is
//! `revoked-write`, naming the record, the replica and the window.
//!
//! Sound by construction (no false alarms): a record created inside a window was appended, if at
//! all, after the window opened (a record cannot be appended before it exists), and by then every
//! broker that can reach the coordinator must refuse it. The answer to DeleteAcls comes after
//! the coordinator committed it, so "answered + bound" is never earlier than "committed + bound".
//! What it cannot see: a record created before the window and retried into the log inside it
//! (its append time is not kept); such records are left out, not judged.

use std::collections::BTreeMap;

use gregor_core::BrokerId;

use super::{AnomalyKind, Finding};
use crate::history::{Partition, Value};

/// Times a toggled principal must be refused: `[from_ms, until_ms)` in virtual ms since start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RevokedWindow {
    /// The producer whose principal (`User:producer-N`) was revoked.
    pub producer: u32,
    /// When DeleteAcls was issued and answered.
    pub revoke_issued_ms: u64,
    pub revoke_answered_ms: u64,
    /// `revoke_answered_ms` + the propagation bound.
    pub from_ms: u64,
    /// When the next CreateAcls was issued (`u64::MAX`: never granted again).
    pub until_ms: u64,
}

/// What an `[acl]` run observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AclObservation {
    pub bound_ms: u64,
    pub windows: Vec<RevokedWindow>,
    /// When each toggled producer's value was created (handed to its producer).
    pub created_ms: BTreeMap<Value, u64>,
    /// Every record of every live replica's log at the end (all offsets, not only below the
    /// high watermark): (broker, partition, offset, value).
    pub replica_records: Vec<(BrokerId, Partition, i64, Value)>,
}

/// What the check compared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AclCompared {
    pub windows: usize,
    /// Toggled producers' values created inside a window (each must be refused everywhere).
    pub created_in_windows: usize,
    /// Replica records of toggled producers whose creation time was compared with the windows.
    pub records_checked: usize,
    /// The longest a revocation was seen to take: the latest creation time, after a DeleteAcls
    /// was answered and before the next grant, of a record found in a log, minus the answer time
    /// (`None`: no record created after an answer got in). Measured, for the bound's margin.
    pub lag_ms_max: Option<u64>,
}

fn window_of(o: &AclObservation, producer: u32, at_ms: u64) -> Option<&RevokedWindow> {
    o.windows
        .iter()
        .find(|w| w.producer == producer && w.from_ms <= at_ms && at_ms < w.until_ms)
}

pub fn check(o: &AclObservation) -> (AclCompared, Vec<Finding>) {
    let mut compared = AclCompared {
        windows: o.windows.len(),
        ..AclCompared::default()
    };
    compared.created_in_windows = o
        .created_ms
        .iter()
        .filter(|(v, &at)| window_of(o, v.producer(), at).is_some())
        .count();
    let mut findings = Vec::new();
    for &(broker, partition, offset, value) in &o.replica_records {
        let Some(&created) = o.created_ms.get(&value) else {
            continue;
        };
        compared.records_checked += 1;
        let lag = o
            .windows
            .iter()
            .filter(|w| w.producer == value.producer() && w.revoke_answered_ms <= created && created < w.until_ms)
            .map(|w| created - w.revoke_answered_ms)
            .max();
        compared.lag_ms_max = compared.lag_ms_max.max(lag);
        if let Some(w) = window_of(o, value.producer(), created) {
            findings.push(Finding {
                kind: AnomalyKind::RevokedWrite,
                detail: format!(
                    "{}/{} created at {created} ms is in broker {}'s log of partition {} at offset {offset}; User:producer-{}'s Write was revoked (issued {} ms, answered {} ms) and refused from {} ms (bound {} ms) until {}",
                    value.producer(),
                    value.seq(),
                    partition.index,
                    broker.0,
                    w.producer,
                    w.revoke_issued_ms,
                    w.revoke_answered_ms,
                    w.from_ms,
                    o.bound_ms,
                    if w.until_ms == u64::MAX { "the end".to_string() } else { format!("{} ms", w.until_ms) }
                ),
            });
        }
    }
    (compared, findings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observation(created_at: u64) -> AclObservation {
        let v = Value::new(0, 7);
        AclObservation {
            bound_ms: 500,
            windows: vec![RevokedWindow {
                producer: 0,
                revoke_issued_ms: 900,
                revoke_answered_ms: 1_000,
                from_ms: 1_500,
                until_ms: 3_000,
            }],
            created_ms: [(v, created_at), (Value::new(1, 7), 2_000)].into_iter().collect(),
            replica_records: vec![
                (BrokerId(1), Partition::of_first(0), 4, v),
                (BrokerId(2), Partition::of_first(0), 4, Value::new(1, 7)),
            ],
        }
    }

    #[test]
    fn a_record_created_inside_a_window_is_a_revoked_write_outside_is_not() {
        for (created, bad) in [(1_499, false), (1_500, true), (2_999, true), (3_000, false)] {
            let (compared, findings) = check(&observation(created));
            println!("created at {created}: {compared:?} {findings:?}");
            assert_eq!(compared.records_checked, 2);
            assert_eq!(findings.len(), usize::from(bad), "created at {created}");
        }
    }
}
