//! Each anomaly from a minimal history that has it (so the checker is shown able to fail), and a
//! clean history that has none.

use super::*;
use crate::history::{Commit, FinalRead, Poll, Processed, Send};

/// Partition 0 of the history's one topic.
const P0: Partition = Partition::of_first(0);

fn v(producer: u32, seq: u32) -> Value {
    Value::new(producer, seq)
}

fn acked(producer: u32, seq: u32, partition: Partition, offset: i64) -> Send {
    Send {
        producer,
        partition,
        value: v(producer, seq),
        outcome: SendOutcome::Acked { offset },
        at_ms: 0,
    }
}

fn poll(consumer: u32, session: u32, offset: i64, value: Value) -> Poll {
    Poll {
        consumer,
        session,
        partition: P0,
        offset,
        value,
        at_ms: 0,
    }
}

fn commit(offset: i64) -> Commit {
    Commit {
        consumer: 1,
        group: "g".into(),
        partition: P0,
        offset,
        at_ms: 0,
    }
}

/// Three acked sends at 0..3 of partition 0, all read back, polled, committed and processed.
fn clean() -> History {
    let sends: Vec<Send> = (0..3).map(|i| acked(1, i, P0, i64::from(i))).collect();
    let records: Vec<(i64, Value)> = (0..3).map(|i| (i64::from(i), v(1, i))).collect();
    History {
        sends,
        polls: records.iter().map(|&(o, val)| poll(1, 0, o, val)).collect(),
        commits: vec![commit(1), commit(3)],
        processed: records
            .iter()
            .map(|&(_, value)| Processed { consumer: 1, value })
            .collect(),
        final_reads: [(
            P0,
            FinalRead {
                log_start_offset: 0,
                high_watermark: 3,
                records,
            },
        )]
        .into(),
        assignments: vec![],
        tracks_processing: true,
        consumers_drained: true,
        leaders: vec![],
        controllers: vec![],
        replicas: vec![],
        balance: None,
        acl: None,
        topics: vec![],
        quorum: None,
    }
}

fn kinds(h: &History) -> Vec<AnomalyKind> {
    let report = check(h);
    let mut kinds: Vec<AnomalyKind> = report.counts().into_keys().collect();
    kinds.sort();
    kinds
}

#[test]
fn a_clean_history_has_no_anomalies_and_says_what_it_compared() {
    let report = check(&clean());
    assert!(report.findings.is_empty(), "{}", report.summary());
    assert!(!report.compared_nothing());
    assert_eq!(report.compared.acked_checked, 3);
    assert!(
        report.summary().starts_with("compared 3 sends (3 acked, 3 checked"),
        "{}",
        report.summary()
    );
    assert!(check(&History::default()).compared_nothing());
}

#[test]
fn lost_write_when_the_final_read_lacks_an_acked_record() {
    let mut h = clean();
    let read = h.final_reads.get_mut(&P0).expect("read");
    read.records.truncate(2);
    read.high_watermark = 2;
    h.polls.truncate(2);
    assert_eq!(kinds(&h), vec![AnomalyKind::LostWrite]);
}

#[test]
fn a_write_polled_before_a_crash_and_gone_after_is_lost() {
    let mut h = clean();
    let read = h.final_reads.get_mut(&P0).expect("read");
    read.records.truncate(2);
    read.high_watermark = 2;
    // The consumer saw offset 2 before the crash; the final read no longer has it.
    let report = check(&h);
    assert!(report.has(AnomalyKind::LostWrite), "{}", report.summary());
}

#[test]
fn unseen_when_retention_deletes_before_anyone_reads_or_consumers_miss_it() {
    let mut h = clean();
    h.polls.clear();
    h.commits.clear();
    let read = h.final_reads.get_mut(&P0).expect("read");
    read.log_start_offset = 2;
    read.records.drain(..2);
    let report = check(&h);
    assert_eq!(
        report.counts().get(&AnomalyKind::Unseen),
        Some(&3),
        "{}",
        report.summary()
    );
    assert!(report.summary().contains("log start now 2"), "{}", report.summary());
    let mut h = clean();
    h.polls.pop();
    assert_eq!(kinds(&h), vec![AnomalyKind::Unseen]);
}

#[test]
fn inconsistent_offsets_and_duplicates() {
    let mut h = clean();
    h.polls.push(poll(2, 0, 1, v(9, 9)));
    assert!(kinds(&h).contains(&AnomalyKind::InconsistentOffsets));
    let mut h = clean();
    let read = h.final_reads.get_mut(&P0).expect("read");
    read.records.push((3, v(1, 0)));
    assert_eq!(kinds(&h), vec![AnomalyKind::Duplicate]);
}

/// Each position and each value reported once, with every value or position seen, in order.
#[test]
fn inconsistent_offsets_and_duplicates_name_every_value_and_position_in_order() {
    let mut h = clean();
    h.polls.push(poll(3, 0, 2, v(9, 8)));
    h.polls.push(poll(2, 0, 1, v(9, 9)));
    h.polls.push(poll(4, 0, 1, v(9, 7)));
    h.polls.push(poll(5, 0, 1, v(9, 9)));
    let read = h.final_reads.get_mut(&P0).expect("read");
    read.records.push((4, v(1, 2)));
    read.records.push((3, v(1, 2)));
    let report = check(&h);
    let details: Vec<&str> = report.findings.iter().map(|f| f.detail.as_str()).collect();
    assert_eq!(
        details,
        [
            "partition 0 offset 1 holds {Value(4294967297), Value(38654705671), Value(38654705673)}",
            "partition 0 offset 2 holds {Value(4294967298), Value(38654705672)}",
            "value 1/2 at {(0, 2), (0, 3), (0, 4)}",
        ],
        "{}",
        report.summary()
    );
}

#[test]
fn poll_skip_and_nonmonotonic_poll_within_a_session_only() {
    let mut h = clean();
    h.polls = vec![poll(1, 0, 0, v(1, 0)), poll(1, 0, 2, v(1, 2)), poll(1, 1, 1, v(1, 1))];
    assert_eq!(
        kinds(&h),
        vec![AnomalyKind::PollSkip],
        "a new session may start anywhere"
    );
    let mut h = clean();
    h.polls = vec![
        poll(1, 0, 0, v(1, 0)),
        poll(1, 0, 1, v(1, 1)),
        poll(1, 0, 1, v(1, 1)),
        poll(1, 0, 2, v(1, 2)),
    ];
    assert_eq!(kinds(&h), vec![AnomalyKind::NonmonotonicPoll]);
}

#[test]
fn polls_and_acks_that_alternate_between_keys_are_judged_per_key() {
    // Polls of three sessions interleaved (a poll's key is its consumer, session and
    // partition): each key's last offset must survive the polls of the others in between
    // (session 0 goes back to offset 1, session 1 skips offset 1).
    let mut h = clean();
    h.polls = vec![
        poll(1, 0, 0, v(1, 0)),
        poll(1, 0, 1, v(1, 1)),
        poll(1, 1, 0, v(1, 0)),
        poll(1, 2, 0, v(1, 0)),
        poll(1, 0, 1, v(1, 1)),
        poll(1, 1, 2, v(1, 2)),
    ];
    let report = check(&h);
    let found: Vec<(AnomalyKind, &str)> = report.findings.iter().map(|f| (f.kind, f.detail.as_str())).collect();
    assert_eq!(
        found,
        vec![
            (
                AnomalyKind::NonmonotonicPoll,
                "consumer 1 session 0 partition 0: offset 1 after 1"
            ),
            (
                AnomalyKind::PollSkip,
                "consumer 1 session 1 partition 0: jumped from 0 to 2, skipping offset 1"
            ),
        ]
    );

    // One producer's acks alternating between two partitions, partition 0's going back after
    // partition 1's came between.
    let mut h = clean();
    h.sends = vec![
        acked(1, 0, P0, 0),
        acked(1, 1, P0, 2),
        acked(1, 2, Partition::of_first(1), 0),
        acked(1, 3, P0, 1),
    ];
    let report = check(&h);
    let sends: Vec<&str> = report
        .findings
        .iter()
        .filter(|f| f.kind == AnomalyKind::NonmonotonicSend)
        .map(|f| f.detail.as_str())
        .collect();
    assert_eq!(
        sends,
        vec!["producer 1 partition 0: send 3 acked at 1 after send 1 at 2"]
    );
}

#[test]
fn nonmonotonic_send() {
    let mut h = clean();
    h.sends[1].outcome = SendOutcome::Acked { offset: 2 };
    h.sends[2].outcome = SendOutcome::Acked { offset: 1 };
    assert!(kinds(&h).contains(&AnomalyKind::NonmonotonicSend), "{:?}", kinds(&h));
}

#[test]
fn committed_offsets_never_go_back_and_commits_imply_processing() {
    let mut h = clean();
    h.commits.push(commit(2));
    assert_eq!(kinds(&h), vec![AnomalyKind::CommittedOffsetRegression]);
    let mut h = clean();
    h.processed.remove(1);
    assert_eq!(kinds(&h), vec![AnomalyKind::AckedNeverProcessed]);
    h.tracks_processing = false;
    assert!(kinds(&h).is_empty());
}

#[test]
fn unknown_sends_may_or_may_not_appear() {
    let mut h = clean();
    h.sends.push(Send {
        producer: 1,
        partition: P0,
        value: v(1, 3),
        outcome: SendOutcome::Unknown,
        at_ms: 0,
    });
    h.sends.push(Send {
        producer: 1,
        partition: P0,
        value: v(1, 4),
        outcome: SendOutcome::Failed,
        at_ms: 0,
    });
    assert!(kinds(&h).is_empty());
}

#[test]
fn lost_in_buffer_is_told_apart_from_lost_write() {
    let mut h = clean();
    h.sends.push(Send {
        producer: 1,
        partition: P0,
        value: v(1, 7),
        outcome: SendOutcome::Abandoned,
        at_ms: 0,
    });
    assert_eq!(kinds(&h), vec![AnomalyKind::LostInBuffer]);
    // Abandoned but written after all (the sender got it out before dying): no loss.
    let read = h.final_reads.get_mut(&P0).expect("read");
    read.records.push((3, v(1, 7)));
    h.polls.push(poll(1, 0, 3, v(1, 7)));
    h.processed.push(Processed {
        consumer: 1,
        value: v(1, 7),
    });
    assert!(kinds(&h).is_empty(), "{:?}", kinds(&h));
}

#[test]
fn an_acks0_send_missing_from_the_log_is_lost_and_one_present_is_not() {
    let sent = |seq: u32| Send {
        outcome: SendOutcome::SentUnacknowledged,
        ..acked(2, seq, P0, -1)
    };
    // Present: value 1/0 is at offset 0 of the clean history's log.
    let mut present = clean();
    present.sends.push(Send {
        value: v(1, 0),
        ..sent(0)
    });
    let report = check(&present);
    assert_eq!(report.compared.sent_unacknowledged, 1);
    assert!(kinds(&present).is_empty(), "{}", report.summary());
    // Missing: 2/7 was never written (negative control: the checker must see it).
    let mut missing = clean();
    missing.sends.push(sent(7));
    let report = check(&missing);
    println!("{}", report.summary());
    assert_eq!(kinds(&missing), vec![AnomalyKind::LostWrite]);
    assert!(report.summary().contains("acks=0"), "{}", report.summary());
}

#[test]
fn an_acl_run_without_revocation_windows_or_judged_records_compared_nothing() {
    let mut h = clean();
    h.acl = Some(super::acl::AclObservation::default());
    let report = check(&h);
    println!("{}", report.summary());
    assert!(
        report.compared_nothing(),
        "no window, no record: nothing about revocations was compared"
    );
}

/// `inconsistent-offsets` and `duplicate` against a model that keeps every (position, value)
/// pair it is shown (the final read's, the polls', the acknowledgements'; values' positions
/// from the first two), over random histories in which most polls repeat the final read's pair
/// and some do not: the checker skips a poll's second lookup when its pair was seen first at
/// that position, which must change no finding.
#[test]
fn conflicts_match_a_model_of_every_pair_seen() {
    use madsim::rand::Rng;
    use rand_chacha::rand_core::SeedableRng;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let (mut findings, mut histories) = (0, 0);
    for _ in 0..300 {
        let mut h = clean();
        h.polls.clear();
        h.sends.clear();
        let mut records: Vec<(i64, Value)> = Vec::new();
        for o in 0..rng.gen_range(0..12) {
            // Mostly each value once; sometimes one already used (a duplicate).
            let seq = if rng.gen_range(0..8) == 0 {
                rng.gen_range(0..4)
            } else {
                100 + o as u32
            };
            records.push((o, v(1, seq)));
            // Two at one offset, now and then.
            if rng.gen_range(0..12) == 0 {
                records.push((o, v(2, rng.gen_range(0..3))));
            }
        }
        for _ in 0..rng.gen_range(0..20) {
            let (o, value) = match (rng.gen_range(0..4), records.is_empty()) {
                (0, _) | (_, true) => (rng.gen_range(0..14), v(rng.gen_range(1..3), rng.gen_range(0..4))),
                _ => records[rng.gen_range(0..records.len())],
            };
            h.polls.push(poll(1, 0, o, value));
            if rng.gen_range(0..3) == 0 {
                h.sends.push(acked(value.producer(), value.seq(), P0, o));
            }
        }
        h.final_reads.get_mut(&P0).expect("partition 0").records = records.clone();
        // The model: every pair, in ordered maps.
        let mut at: BTreeMap<(Partition, i64), BTreeSet<Value>> = BTreeMap::new();
        let mut of: BTreeMap<Value, BTreeSet<(Partition, i64)>> = BTreeMap::new();
        let shown = records
            .iter()
            .copied()
            .chain(h.polls.iter().map(|p| (p.offset, p.value)));
        for (o, value) in shown {
            at.entry((P0, o)).or_default().insert(value);
            of.entry(value).or_default().insert((P0, o));
        }
        for s in &h.sends {
            if let SendOutcome::Acked { offset } = s.outcome {
                at.entry((P0, offset)).or_default().insert(s.value);
            }
        }
        let mut expected: Vec<String> = at
            .iter()
            .filter(|(_, values)| values.len() > 1)
            .map(|((p, o), values)| format!("partition {} offset {o} holds {values:?}", p.index))
            .collect();
        expected.extend(
            of.iter()
                .filter(|(_, positions)| positions.len() > 1)
                .map(|(value, positions)| {
                    let places: BTreeSet<(i32, i64)> = positions.iter().map(|&(p, o)| (p.index, o)).collect();
                    format!("value {}/{} at {places:?}", value.producer(), value.seq())
                }),
        );
        let report = check(&h);
        let got: Vec<&str> = report
            .findings
            .iter()
            .filter(|f| matches!(f.kind, AnomalyKind::InconsistentOffsets | AnomalyKind::Duplicate))
            .map(|f| f.detail.as_str())
            .collect();
        assert_eq!(got, expected, "polls {:?}, final {records:?}", h.polls);
        findings += expected.len();
        histories += 1;
    }
    println!("{histories} histories, {findings} findings compared with the model");
    assert!(
        findings > 100,
        "the histories must hold conflicts to compare: {findings}"
    );
}
