//! "Balanced afterwards" for elastic scenarios: once brokers joined or left and the planner's
//! moves completed, the target brokers' replica counts differ by at most one, and so do their
//! leader counts; no replica is left outside the target and no move is still in progress. A
//! violation is `unbalanced`, naming the counts.

use std::collections::BTreeMap;

use gregor_core::BrokerId;

use super::{AnomalyKind, Finding};

/// The final placement of the scenario's topic, as the harness read it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BalanceObservation {
    pub brokers: Vec<BrokerId>,
    pub replicas: BTreeMap<BrokerId, usize>,
    pub leaders: BTreeMap<BrokerId, usize>,
    pub partitions: usize,
    /// (partition, broker) for replicas on brokers outside the target.
    pub outside: Vec<(i32, BrokerId)>,
    /// Partitions still being reassigned.
    pub moving: Vec<i32>,
}

fn spread(counts: &BTreeMap<BrokerId, usize>) -> usize {
    let max = counts.values().max().copied().unwrap_or(0);
    let min = counts.values().min().copied().unwrap_or(0);
    max - min
}

fn show(counts: &BTreeMap<BrokerId, usize>) -> String {
    counts
        .iter()
        .map(|(b, n)| format!("{}:{n}", b.0))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Returns the number of brokers compared and the findings.
pub fn check(o: &BalanceObservation) -> (usize, Vec<Finding>) {
    let mut findings = Vec::new();
    let detail = format!(
        "{} partitions over brokers {:?}: replicas {}, leaders {}",
        o.partitions,
        o.brokers.iter().map(|b| b.0).collect::<Vec<_>>(),
        show(&o.replicas),
        show(&o.leaders)
    );
    if spread(&o.replicas) > 1 || spread(&o.leaders) > 1 || !o.outside.is_empty() || !o.moving.is_empty() {
        findings.push(Finding {
            kind: AnomalyKind::Unbalanced,
            detail: format!(
                "{detail}; outside the target {:?}; still moving {:?}",
                o.outside, o.moving
            ),
        });
    }
    (o.brokers.len(), findings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(replicas: &[usize], leaders: &[usize]) -> BalanceObservation {
        let ids = |v: &[usize]| v.iter().enumerate().map(|(i, n)| (BrokerId(i as i32), *n)).collect();
        BalanceObservation {
            brokers: (0..replicas.len() as i32).map(BrokerId).collect(),
            replicas: ids(replicas),
            leaders: ids(leaders),
            partitions: 6,
            ..BalanceObservation::default()
        }
    }

    #[test]
    fn spreads_over_one_are_unbalanced() {
        let (compared, ok) = check(&obs(&[4, 4, 4, 3, 3], &[2, 1, 1, 1, 1]));
        assert_eq!((compared, ok.len()), (5, 0));
        let (_, bad) = check(&obs(&[6, 6, 6, 0, 0], &[2, 2, 2, 0, 0]));
        println!("{}", bad[0].detail);
        assert_eq!(bad.len(), 1);
        let (_, leaders) = check(&obs(&[4, 4, 4, 3, 3], &[3, 1, 1, 1, 0]));
        assert_eq!(leaders.len(), 1, "leaders 3 vs 0");
    }
}
