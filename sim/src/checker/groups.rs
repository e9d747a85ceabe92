//! Consumer-group checks: `two-owners-one-generation` (two members of one group assigned the
//! same partition in one generation while both held it: a coordinator or assignor bug, both
//! would process it), and `poll-outside-assignment` (a member's poll returned a record of a
//! partition it did not hold then: Kafka's consumer drops what it fetched for a partition
//! revoked meanwhile, so a member never processes a partition another may own). The count of duplicate processings (at-least-once redelivery, not an
//! anomaly) is the main checker's, beside its other per-value tables.
//!
//! A member holds an assignment from when its consumer recorded it until that consumer records
//! its next one (or forever). Generation numbers restart when a coordinator forgets a group
//! whose members all left or expired; a later incarnation's generation 1 does not overlap the
//! earlier one's in time, so it is not mistaken for a second owner.

use std::collections::{BTreeMap, BTreeSet};

use super::{AnomalyKind, Report};
use crate::history::{Assignment, History, Partition};

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
    polls_outside_assignments(h, report);
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
                format!(
                    "group {group} generation {generation}: partition {} assigned to {both:?} at once",
                    h.partition(p)
                ),
            );
        }
    }
}

/// Each poll of a group member's session against the assignment that session started with.
/// A member's polls are recorded under the session of its latest assignment, so a poll of a
/// session that started with no assignment, or of a partition not in it, returned records the
/// member did not hold. Consumers without a group record no assignment and are not judged.
fn polls_outside_assignments(h: &History, report: &mut Report) {
    if h.assignments.is_empty() {
        return;
    }
    let held: BTreeMap<(u32, u32), (&Assignment, BTreeSet<Partition>)> = h
        .assignments
        .iter()
        .map(|a| ((a.consumer, a.session), (a, a.partitions.iter().copied().collect())))
        .collect();
    let judged: BTreeSet<u32> = h.assignments.iter().map(|a| a.consumer).collect();
    // One finding per (consumer, session, partition): the first record polled outside.
    let mut outside: BTreeMap<(u32, u32, Partition), (i64, u64)> = BTreeMap::new();
    for poll in h.polls.iter().filter(|p| judged.contains(&p.consumer)) {
        report.compared.polls_in_assignments += 1;
        let inside = held
            .get(&(poll.consumer, poll.session))
            .is_some_and(|(_, partitions)| partitions.contains(&poll.partition));
        if !inside {
            outside
                .entry((poll.consumer, poll.session, poll.partition))
                .or_insert((poll.offset, poll.at_ms));
        }
    }
    for ((consumer, session, partition), (offset, at_ms)) in outside {
        let under = match held.get(&(consumer, session)) {
            Some((a, partitions)) => {
                let names: Vec<String> = partitions.iter().map(|&p| h.partition(p).to_string()).collect();
                format!(
                    "member {} of group {} holds {{{}}} in generation {}",
                    a.member,
                    a.group,
                    names.join(", "),
                    a.generation
                )
            }
            None => "it holds no assignment in that session".to_string(),
        };
        report.add(
            AnomalyKind::PollOutsideAssignment,
            format!(
                "consumer {consumer} polled partition {} offset {offset} at {at_ms} ms, but {under}",
                h.partition(partition)
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::check as check_all;
    use super::*;
    use crate::history::{Poll, Processed, Value};

    /// An assignment of partitions (indices) of the history's one topic.
    fn assignment(member: &str, generation: i32, partitions: &[i32]) -> Assignment {
        Assignment {
            consumer: 0,
            group: "g".into(),
            member: member.into(),
            generation,
            partitions: partitions.iter().map(|&i| Partition::of_first(i)).collect(),
            at_ms: 0,
            session: 0,
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
        let later = |consumer: u32, member: &str, generation: i32, partitions: &[i32], at_ms: u64| {
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

    /// A member's polls are judged against the assignment their session started with: records
    /// of partitions it held pass; a record of a partition it did not hold (the negative
    /// control), or one polled in a session that started with no assignment, is reported once
    /// per (consumer, session, partition). A consumer of no group is not judged.
    #[test]
    fn a_poll_outside_the_members_assignment_is_found() {
        let poll = |consumer: u32, session: u32, partition: i32, offset: i64| Poll {
            consumer,
            session,
            partition: Partition::of_first(partition),
            offset,
            value: Value::new(0, u32::try_from(offset).expect("small")),
            at_ms: 100,
        };
        let mut h = History {
            assignments: vec![
                Assignment {
                    session: 3,
                    ..assignment("a", 1, &[0, 1])
                },
                Assignment {
                    consumer: 1,
                    session: 4,
                    ..assignment("b", 1, &[2])
                },
                Assignment {
                    session: 5,
                    ..assignment("a", 2, &[1])
                },
            ],
            polls: vec![poll(0, 3, 0, 0), poll(0, 3, 1, 0), poll(1, 4, 2, 0), poll(0, 5, 1, 1)],
            ..History::default()
        };
        let mut report = Report::default();
        check(&h, &mut report);
        assert!(
            report.findings.is_empty(),
            "every record was of a held partition: {:?}",
            report.findings
        );
        assert_eq!(report.compared.polls_in_assignments, 4);

        // Negative controls: a, in generation 2 (session 5), polls partition 0 twice; b polls in
        // a session with no assignment; a consumer of no group (2) polls anything.
        h.polls
            .extend([poll(0, 5, 0, 7), poll(0, 5, 0, 8), poll(1, 9, 2, 1), poll(2, 0, 5, 0)]);
        let mut report = Report::default();
        check(&h, &mut report);
        let found: Vec<&str> = report.findings.iter().map(|f| f.detail.as_str()).collect();
        assert_eq!(
            found,
            [
                "consumer 0 polled partition 0 offset 7 at 100 ms, but member a of group g holds {1} in generation 2",
                "consumer 1 polled partition 2 offset 1 at 100 ms, but it holds no assignment in that session",
            ]
        );
        assert!(report.has(AnomalyKind::PollOutsideAssignment));
        assert_eq!(
            report.compared.polls_in_assignments, 7,
            "consumer 2's poll is not judged"
        );
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
