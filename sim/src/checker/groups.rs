//! Consumer-group checks: `two-owners-one-generation` (two members of one group assigned the
//! same partition in one generation while both held it: a coordinator or assignor bug, both
//! would process it). The count of duplicate processings (at-least-once redelivery, not an
//! anomaly) is the main checker's, beside its other per-value tables.
//!
//! A member holds an assignment from when its consumer recorded it until that consumer records
//! its next one (or forever). Generation numbers restart when a coordinator forgets a group
//! whose members all left or expired; a later incarnation's generation 1 does not overlap the
//! earlier one's in time, so it is not mistaken for a second owner.

use std::collections::{BTreeMap, BTreeSet};

use super::{AnomalyKind, Report};
use crate::history::{History, Partition};

/// (group, generation, partition) → every (member, held from ms, held until ms).
type Holdings<'a> = BTreeMap<(&'a str, i32, Partition), Vec<(&'a str, u64, u64)>>;

pub(super) fn check(h: &History, report: &mut Report) {
    report.compared.assignments = h.assignments.len();
    let mut owners: Holdings<'_> = BTreeMap::new();
    for (i, a) in h.assignments.iter().enumerate() {
        let until = h.assignments[i + 1..]
            .iter()
            .find(|b| b.consumer == a.consumer)
            .map_or(u64::MAX, |b| b.at_ms);
        for &p in &a.partitions {
            owners
                .entry((a.group.as_str(), a.generation, p))
                .or_default()
                .push((a.member.as_str(), a.at_ms, until));
        }
    }
    for ((group, generation, p), held) in owners {
        let mut both: BTreeSet<&str> = BTreeSet::new();
        for (i, x) in held.iter().enumerate() {
            for y in &held[i + 1..] {
                if x.0 != y.0 && x.1 < y.2 && y.1 < x.2 {
                    both.extend([x.0, y.0]);
                }
            }
        }
        if !both.is_empty() {
            report.add(
                AnomalyKind::TwoOwnersOneGeneration,
                format!("group {group} generation {generation}: partition {p} assigned to {both:?} at once"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::check as check_all;
    use super::*;
    use crate::history::{Assignment, Processed, Value};

    fn assignment(member: &str, generation: i32, partitions: &[Partition]) -> Assignment {
        Assignment {
            consumer: 0,
            group: "g".into(),
            member: member.into(),
            generation,
            partitions: partitions.to_vec(),
            at_ms: 0,
        }
    }

    #[test]
    fn two_owners_in_one_generation_is_found_and_a_clean_split_is_not() {
        // Negative control: b also owns partition 1 in generation 2.
        let mut h = History {
            assignments: vec![
                assignment("a", 1, &[0, 1]),
                assignment("a", 2, &[0, 1]),
                Assignment {
                    consumer: 1,
                    ..assignment("b", 2, &[1, 2])
                },
            ],
            ..History::default()
        };
        let mut report = Report::default();
        check(&h, &mut report);
        assert_eq!(report.compared.assignments, 3);
        let found: Vec<&str> = report.findings.iter().map(|f| f.detail.as_str()).collect();
        assert_eq!(
            found,
            ["group g generation 2: partition 1 assigned to {\"a\", \"b\"} at once"]
        );

        // The same partition owned by different members in different generations is a handover;
        // a generation number reused by a later incarnation of the group (after the first one's
        // members all moved on) is not a second owner either.
        let later = |consumer: u32, member: &str, generation: i32, partitions: &[Partition], at_ms: u64| {
            let mut a = assignment(member, generation, partitions);
            a.consumer = consumer;
            a.at_ms = at_ms;
            a
        };
        h.assignments = vec![
            later(0, "a", 1, &[0, 1], 0),
            later(1, "b", 2, &[1], 10),
            later(0, "a", 2, &[0], 10),
            later(0, "c", 1, &[0, 1], 50),
            later(1, "d", 1, &[2], 50),
        ];
        let report = check_all(&h);
        assert!(!report.has(AnomalyKind::TwoOwnersOneGeneration), "{}", report.summary());
        assert_eq!(report.compared.assignments, 5);
    }

    #[test]
    fn duplicate_processings_are_counted_not_reported() {
        let value = Value::new(0, 7);
        let h = History {
            processed: vec![
                Processed { consumer: 0, value },
                Processed { consumer: 1, value },
                Processed { consumer: 1, value },
                Processed {
                    consumer: 1,
                    value: Value::new(0, 8),
                },
            ],
            ..History::default()
        };
        let report = check_all(&h);
        assert_eq!(report.compared.processed, 4);
        assert_eq!(report.compared.processed_duplicates, 2);
        assert!(report.findings.is_empty(), "{}", report.summary());
    }
}
