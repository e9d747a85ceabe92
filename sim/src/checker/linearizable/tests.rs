use super::*;

const P: &str = "/x";

fn op(process: u32, kind: CoordOpKind, invoke_ms: u64, complete_ms: Option<u64>, outcome: CoordOutcome) -> CoordOp {
    CoordOp {
        process,
        path: P.to_string(),
        kind,
        invoke_ms,
        complete_ms,
        outcome,
    }
}

fn create(p: u32, data: &str, t: (u64, u64), outcome: CoordOutcome) -> CoordOp {
    op(p, CoordOpKind::Create { data: data.into() }, t.0, Some(t.1), outcome)
}

fn set(p: u32, data: &str, expected: Option<i32>, t: (u64, u64), outcome: CoordOutcome) -> CoordOp {
    let kind = CoordOpKind::Set {
        data: data.into(),
        expected_version: expected,
    };
    op(p, kind, t.0, Some(t.1), outcome)
}

fn read(p: u32, t: (u64, u64), value: Option<(&str, i32)>) -> CoordOp {
    let seen = value.map(|(d, v)| (d.as_bytes().to_vec(), v));
    op(p, CoordOpKind::Read, t.0, Some(t.1), CoordOutcome::Read(seen))
}

fn run(ops: &[CoordOp]) -> LinReport {
    let report = check(ops, &BTreeMap::new(), STATES_PER_PATH_MAX_DEFAULT);
    println!("{}", report.summary());
    report
}

#[test]
fn sequential_history_passes_and_reports_what_it_compared() {
    let h = vec![
        read(1, (0, 1), None),
        create(1, "a", (2, 3), CoordOutcome::Created),
        set(2, "b", Some(0), (4, 5), CoordOutcome::SetOk { version: 1 }),
        set(1, "c", Some(0), (6, 7), CoordOutcome::BadVersion),
        read(2, (8, 9), Some(("b", 1))),
        op(
            1,
            CoordOpKind::Delete { expected_version: None },
            10,
            Some(11),
            CoordOutcome::Deleted,
        ),
        op(
            2,
            CoordOpKind::Delete { expected_version: None },
            12,
            Some(13),
            CoordOutcome::NoNode,
        ),
    ];
    let r = run(&h);
    assert!(r.ok(), "{}", r.summary());
    assert_eq!((r.ops_checked, r.paths_checked), (7, 1));
}

#[test]
fn concurrent_ops_may_take_effect_in_either_order() {
    // Two overlapping sets on version 0: only one order gives these outcomes (b then c).
    let h = vec![
        create(1, "a", (0, 1), CoordOutcome::Created),
        set(1, "c", None, (2, 10), CoordOutcome::SetOk { version: 2 }),
        set(2, "b", None, (3, 9), CoordOutcome::SetOk { version: 1 }),
        // A read overlapping both may see the middle state.
        read(3, (4, 8), Some(("b", 1))),
        read(3, (11, 12), Some(("c", 2))),
    ];
    assert!(run(&h).ok());
}

#[test]
fn unknown_ops_may_take_effect_late_or_never() {
    let lost = |p, data: &str, t| {
        op(
            p,
            CoordOpKind::Set {
                data: data.into(),
                expected_version: None,
            },
            t,
            None,
            CoordOutcome::Unknown,
        )
    };
    // Took effect, long after its invoke, after a read that did not see it.
    let h = vec![
        create(1, "a", (0, 1), CoordOutcome::Created),
        lost(2, "z", 2),
        read(1, (3, 4), Some(("a", 0))),
        read(1, (20, 21), Some(("z", 1))),
    ];
    let r = run(&h);
    assert!(r.ok(), "{}", r.summary());
    assert_eq!(r.unknown_ops, 1);
    // Never took effect.
    let h = vec![
        create(1, "a", (0, 1), CoordOutcome::Created),
        lost(2, "z", 2),
        read(1, (20, 21), Some(("a", 0))),
    ];
    assert!(run(&h).ok());
    // An op the client saw time out (complete_ms set, outcome Unknown) counts the same.
    let mut timed_out = lost(2, "z", 2);
    timed_out.complete_ms = Some(5);
    let h = vec![
        create(1, "a", (0, 1), CoordOutcome::Created),
        timed_out,
        read(1, (20, 21), Some(("z", 1))),
    ];
    assert!(run(&h).ok());
}

#[test]
fn negative_control_stale_read_after_completed_write() {
    let h = vec![
        create(1, "a", (0, 1), CoordOutcome::Created),
        set(1, "b", None, (2, 3), CoordOutcome::SetOk { version: 1 }),
        read(2, (4, 5), Some(("a", 0))),
    ];
    let r = run(&h);
    assert!(!r.ok());
    assert!(r.violations[P].contains("could not place"), "{}", r.summary());
    assert_eq!(r.findings()[0].kind, crate::checker::AnomalyKind::Nonlinearizable);
}

#[test]
fn negative_control_two_cas_winners_from_one_version() {
    let h = vec![
        create(1, "a", (0, 1), CoordOutcome::Created),
        set(1, "b", Some(0), (2, 6), CoordOutcome::SetOk { version: 1 }),
        set(2, "c", Some(0), (3, 7), CoordOutcome::SetOk { version: 1 }),
    ];
    assert!(!run(&h).ok());
    // Two creators both told Created.
    let h = vec![
        create(1, "a", (0, 5), CoordOutcome::Created),
        create(2, "b", (1, 6), CoordOutcome::Created),
    ];
    assert!(!run(&h).ok());
}

#[test]
fn negative_control_read_of_a_value_never_written() {
    let h = vec![
        create(1, "a", (0, 1), CoordOutcome::Created),
        // Concurrent with an unknown write of "z": "q" was never written by anyone.
        op(
            2,
            CoordOpKind::Set {
                data: b"z".to_vec(),
                expected_version: None,
            },
            2,
            None,
            CoordOutcome::Unknown,
        ),
        read(1, (3, 4), Some(("q", 1))),
    ];
    assert!(!run(&h).ok());
}

#[test]
fn paths_are_checked_separately_and_initial_nodes_count() {
    let mut other = read(9, (0, 1), Some(("boot", 3)));
    other.path = "/y".into();
    let h = vec![create(1, "a", (0, 1), CoordOutcome::Created), other];
    let initial: BTreeMap<String, (Vec<u8>, i32)> = [("/y".to_string(), (b"boot".to_vec(), 3))].into();
    let r = check(&h, &initial, STATES_PER_PATH_MAX_DEFAULT);
    assert!(r.ok(), "{}", r.summary());
    assert_eq!(r.paths_checked, 2);
    // Without the initial node, the read of /y is unexplained.
    assert!(check(&h, &BTreeMap::new(), STATES_PER_PATH_MAX_DEFAULT)
        .violations
        .contains_key("/y"));
}

#[test]
fn empty_history_compared_nothing_and_budget_reports_too_large() {
    let r = run(&[]);
    assert!(r.compared_nothing() && !r.ok());
    // Many concurrent unknown sets and reads that need a search: a tiny budget gives up.
    let mut h = vec![create(1, "a", (0, 1), CoordOutcome::Created)];
    for i in 0..12u32 {
        h.push(op(
            i + 2,
            CoordOpKind::Set {
                data: vec![b'a' + u8::try_from(i).expect("small")],
                expected_version: None,
            },
            2,
            None,
            CoordOutcome::Unknown,
        ));
    }
    h.push(read(1, (3, 100), Some(("a", 0))));
    h.push(read(1, (101, 102), Some(("l", 12))));
    let r = check(&h, &BTreeMap::new(), 50);
    println!("{}", r.summary());
    assert!(r.too_large.contains(P));
    assert!(
        r.compared_nothing(),
        "a path too large to check is not counted as compared"
    );
    // With the default budget it finishes: memoisation keeps it small.
    assert!(run(&h).ok());
}

/// Random histories made by running the model itself, each op taking effect at a known instant
/// inside its [invoke, complete] window (unknown ops at an instant, or never): every one must
/// pass. Then one read per history is made to return a value nobody wrote: every one must fail.
#[test]
fn random_histories_from_the_model_pass_and_tampered_ones_fail() {
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
    let mut below = |n: u64| rng.next_u64() % n;
    let (mut passed, mut caught, mut searched_states) = (0, 0, 0);
    for _trial in 0..200 {
        let mut state: NodeState = None;
        let mut ops = Vec::new();
        let n = 4 + below(10);
        for k in 0..n {
            let at = 100 * (k + 1);
            let data = vec![b'a' + u8::try_from(below(3)).expect("small")];
            let version = state.as_ref().map_or(0, |s| s.1);
            let expected = match below(3) {
                0 => None,
                1 => Some(version),
                _ => Some(version + 1),
            };
            let kind = match below(5) {
                0 => CoordOpKind::Create { data },
                1 | 2 => CoordOpKind::Set {
                    data,
                    expected_version: expected,
                },
                3 => CoordOpKind::Delete {
                    expected_version: expected,
                },
                _ => CoordOpKind::Read,
            };
            let unknown = below(6) == 0;
            let took_effect = !unknown || below(2) == 0;
            let outcome = if took_effect {
                let (after, outcome) = apply(&state, &kind);
                state = after;
                outcome
            } else {
                CoordOutcome::Unknown
            };
            // Windows up to 1.5 linearization gaps wide on each side: neighbours overlap.
            let invoke_ms = at - below(150).min(at);
            let (complete_ms, outcome) = if unknown {
                (None, CoordOutcome::Unknown)
            } else {
                (Some(at + below(150)), outcome)
            };
            ops.push(op(
                u32::try_from(k).expect("small"),
                kind,
                invoke_ms,
                complete_ms,
                outcome,
            ));
        }
        let good: Vec<&CoordOp> = ops.iter().collect();
        match check_path(&good, None, STATES_PER_PATH_MAX_DEFAULT) {
            PathVerdict::Linearizable { states } => {
                passed += 1;
                searched_states += states;
            }
            other => panic!("a history made by the model was refused: {other:?}\n{ops:#?}"),
        }
        let mut bad = ops.clone();
        bad.push(read(99, (100 * (n + 1), 100 * (n + 1) + 1), Some(("never", 7))));
        if matches!(
            check_path(&bad.iter().collect::<Vec<_>>(), None, STATES_PER_PATH_MAX_DEFAULT),
            PathVerdict::Violation { .. }
        ) {
            caught += 1;
        }
    }
    println!("random histories: {passed} passed ({searched_states} states searched), {caught} tampered caught");
    assert_eq!((passed, caught), (200, 200));
}

/// A coordinator-like history (clients doing CAS loops, some answers lost in crashes) on one hot
/// path: the search must finish well inside the default budget.
#[test]
fn a_long_history_with_many_unknown_ops_stays_within_budget() {
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let mut below = |n: u64| rng.next_u64() % n;
    let mut state: NodeState = Some((b"0".to_vec(), 0));
    let mut ops = Vec::new();
    for k in 0..300u64 {
        let at = 10 * (k + 3);
        let version = state.as_ref().map_or(0, |s| s.1);
        let kind = if below(3) == 0 {
            CoordOpKind::Read
        } else {
            CoordOpKind::Set {
                data: k.to_string().into_bytes(),
                expected_version: Some(if below(4) == 0 {
                    version.saturating_sub(1)
                } else {
                    version
                }),
            }
        };
        let unknown = below(8) == 0;
        let (after, outcome) = apply(&state, &kind);
        if !unknown || below(2) == 0 {
            state = after;
        }
        let invoke_ms = at - below(25);
        let (complete_ms, outcome) = if unknown {
            (None, CoordOutcome::Unknown)
        } else {
            (Some(at + below(25)), outcome)
        };
        ops.push(op(
            u32::try_from(k % 7).expect("small"),
            kind,
            invoke_ms,
            complete_ms,
            outcome,
        ));
    }
    let initial: BTreeMap<String, (Vec<u8>, i32)> = [(P.to_string(), (b"0".to_vec(), 0))].into();
    let r = check(&ops, &initial, STATES_PER_PATH_MAX_DEFAULT);
    println!("{}", r.summary());
    assert!(r.ok(), "{}", r.summary());
    assert!(r.unknown_ops > 10, "{}", r.summary());
}
