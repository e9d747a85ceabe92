//! `gregor_sim::shrink` end to end on the real simulator: a one-broker acks=1 cluster without
//! fsync under a storm of random crashes loses acknowledged records; shrinking one failing seed
//! within a bounded number of candidates gives a scenario file with an explicit schedule of a few
//! faults and the seed pinned, which, parsed back from its text and run, still loses records. A
//! seed that does not fail is an error, not an empty result.

use gregor_sim::checker::AnomalyKind;
use gregor_sim::cli::exec::run_one;
use gregor_sim::cli::RunOptions;
use gregor_sim::run::run_scenario;
use gregor_sim::scenario::Scenario;
use gregor_sim::shrink::{failure_of, shrink, Failure, ShrinkError, ShrinkOptions};

fn storm(profile: &str) -> Scenario {
    let source = format!(
        r#"
description = "one broker, acks=1, no fsync, crashes: acknowledged records are lost"
duration_s = 20
heal_s = 10
[topic]
name = "events"
partitions = 1
[producer]
count = 2
mode = "sync"
acks = "1"
retries = 0
rate_per_s = 40
[consumer]
commit = "none"
[faults]
profile = "{profile}"
[expect]
outcome = "anomaly"
anomaly = "lost-write"
"#
    );
    Scenario::parse(&source, "storm.toml", "storm").expect("the test scenario parses")
}

fn options(seed: u64) -> ShrinkOptions {
    ShrinkOptions {
        seed,
        candidates_max: 40,
        wall_ms_max: 600_000,
        jobs: 2,
        header: "# test\n".into(),
    }
}

#[test]
fn a_failing_seed_shrinks_to_a_few_faults_that_still_lose_writes_on_their_own() {
    let scenario = storm("crash-storm");
    let lost = Failure::Anomaly(AnomalyKind::LostWrite);
    let run = |s: &Scenario, seed| {
        run_one(
            &run_scenario,
            s,
            &RunOptions {
                seed,
                ..RunOptions::default()
            },
        )
    };
    // The first of a few seeds that loses writes (a storm of crashes without fsync nearly always does).
    let seed = (0..5)
        .find(|&seed| failure_of(&scenario, &run(&scenario, seed)) == Some(lost))
        .expect("one of five seeds loses acknowledged writes");
    let mut log = Vec::new();
    let shrunk = shrink(&scenario, &run_scenario, &options(seed), &mut |l| {
        log.push(l.to_string())
    })
    .expect("a failing seed shrinks");
    println!("{}", log.join("\n"));
    println!(
        "seed {seed}: before {}, after {}, {} candidates",
        shrunk.before, shrunk.after, shrunk.candidates
    );
    assert_eq!(shrunk.failure, lost);
    assert!(
        shrunk.recorded_same_trace,
        "the recorded schedule on the profile's timer replays the very same run"
    );
    assert_eq!(
        shrunk.recorded, shrunk.before,
        "same faults, duration, messages and nodes"
    );
    assert!(shrunk.candidates <= 40, "the bound holds: {}", shrunk.candidates);
    assert!(shrunk.before.faults >= 5, "a storm: {}", shrunk.before);
    assert!(shrunk.after.faults <= 3, "a few faults are left: {}", shrunk.after);
    assert!(shrunk.after.messages < shrunk.before.messages, "{}", shrunk.after);

    // The file as written: explicit schedule, pinned seed; run on its own it loses writes again.
    let written = Scenario::parse(&shrunk.toml, "shrunk.toml", "shrunk").expect("the written scenario parses");
    assert_eq!(written.seed, Some(seed));
    assert!(
        written.faults.profile.is_none() || written.faults.profile_timer_only,
        "no random fault: at most the profile's timer"
    );
    assert_eq!(written.faults.schedule.len(), shrunk.after.faults);
    let again = run(&written, seed);
    println!("the written scenario, run: {}", again.report.summary());
    assert_eq!(failure_of(&written, &again), Some(lost));
}

#[test]
fn a_seed_that_does_not_fail_is_an_error() {
    let quiet = storm("none");
    match shrink(&quiet, &run_scenario, &options(1), &mut |_| {}) {
        Err(ShrinkError::DoesNotFail { seed, .. }) => assert_eq!(seed, 1),
        other => panic!("expected DoesNotFail, got {other:?}"),
    }
}
