//! "No committed coordinator write lost" for `[quorum]` scenarios: while coordinator nodes join,
//! are promoted and one is removed and stopped, a probe client creates one znode after another;
//! every create the coordinator acknowledged must be in the tree a linearizable read returns at
//! the end (`lost-coordinator-write`), and the replacement itself must have completed
//! (`quorum-change-unfinished`, naming the steps the driver saw).

use std::collections::BTreeSet;

use super::{AnomalyKind, Finding};

/// What the `[quorum]` driver saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuorumObservation {
    /// Probe znodes (by number) whose create was acknowledged.
    pub acked: BTreeSet<u64>,
    /// The probe znodes a synced read found at the end; `None` if it could not be read.
    pub read: Option<BTreeSet<u64>>,
    /// Each membership request and its answer, in order.
    pub changes: Vec<String>,
    /// Whether the final membership is the target (joiners voting, the removed node gone).
    pub finished: bool,
}

/// Returns the number of acknowledged writes compared and the findings.
pub fn check(o: &QuorumObservation) -> (usize, Vec<Finding>) {
    let mut findings = Vec::new();
    if !o.finished {
        findings.push(Finding {
            kind: AnomalyKind::QuorumChangeUnfinished,
            detail: format!("membership steps: {}", o.changes.join("; ")),
        });
    }
    let Some(read) = &o.read else {
        findings.push(Finding {
            kind: AnomalyKind::LostCoordinatorWrite,
            detail: format!(
                "the final read of the probe znodes failed ({} acknowledged)",
                o.acked.len()
            ),
        });
        return (0, findings);
    };
    let lost: Vec<u64> = o.acked.difference(read).copied().collect();
    if !lost.is_empty() {
        findings.push(Finding {
            kind: AnomalyKind::LostCoordinatorWrite,
            detail: format!(
                "{} of {} acknowledged probe creates missing at the end, first {:?}",
                lost.len(),
                o.acked.len(),
                &lost[..lost.len().min(5)]
            ),
        });
    }
    (o.acked.len(), findings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_acknowledged_write_or_an_unfinished_change_is_reported() {
        let ok = QuorumObservation {
            acked: [1, 2, 3].into(),
            read: Some([1, 2, 3, 4].into()),
            changes: vec!["done".into()],
            finished: true,
        };
        assert_eq!(check(&ok), (3, vec![]));
        let lost = QuorumObservation {
            read: Some([1, 3].into()),
            ..ok.clone()
        };
        let (compared, findings) = check(&lost);
        assert_eq!(compared, 3);
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].kind, AnomalyKind::LostCoordinatorWrite);
        assert!(findings[0].detail.contains("[2]"), "{}", findings[0].detail);
        let unfinished = QuorumObservation {
            finished: false,
            ..ok.clone()
        };
        assert_eq!(check(&unfinished).1[0].kind, AnomalyKind::QuorumChangeUnfinished);
        println!("compared: clean, one lost of three, unfinished");
    }
}
