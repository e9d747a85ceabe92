//! Coverage end to end: real runs of small clusters (`run::run_scenario`) reach the states their
//! faults cause and no others, a `require` nobody reached fails the sweep's verdict, and a swarm
//! profile draws a different subset per seed and the same one on replay.

use super::State;
use crate::cli::verdict::summarize;
use crate::nemesis::{active_profile, SWARM};
use crate::run::{run_scenario, RunOptions, RunResult};
use crate::scenario::Scenario;

/// A 3-broker, 3-coordinator cluster, acks=all and min ISR 2 of 3, with `faults` and `expect`
/// appended (TOML sections).
fn cluster(faults: &str, expect: &str) -> Scenario {
    let source = format!(
        r#"
description = "coverage test"
duration_s = 20
heal_s = 10

[cluster]
brokers = 3
coordinators = 3

[topic]
name = "events"
partitions = 1
"replication.factor" = 3
"min.insync.replicas" = 2

[producer]
count = 2
mode = "sync"
acks = "all"
rate_per_s = 50

[consumer]
count = 1
commit = "none"

{faults}

[expect]
outcome = "no-anomalies"
{expect}
"#
    );
    Scenario::parse(&source, "coverage-test.toml", "coverage-test").expect("the test scenario parses")
}

fn run(scenario: &Scenario, seed: u64) -> RunResult {
    let result = run_scenario(
        scenario,
        &RunOptions {
            seed,
            ..RunOptions::default()
        },
    );
    assert_eq!(result.error, None, "seed {seed} ran");
    assert!(!result.report.compared_nothing(), "{}", result.report.summary());
    println!("seed {seed}: reached {}", result.coverage.names());
    result
}

const LEADER_CRASH: &str = "[[faults.schedule]]\nat_s = 5\nfault = \"crash\"\nnode = \"leader\"\nheal_after_s = 6";

#[test]
fn a_scheduled_leader_crash_reaches_failover_and_an_idle_cluster_reaches_nothing() {
    let crashing = cluster(LEADER_CRASH, "");
    let calm = cluster("", "");
    for seed in 0..2 {
        let crashed = run(&crashing, seed);
        for state in [State::LeaderFailoverUnderLoad, State::IsrShrink] {
            assert!(crashed.coverage.has(state), "seed {seed}: {}", crashed.coverage.names());
        }
        let quiet = run(&calm, seed);
        assert!(
            quiet.coverage.0.is_empty(),
            "no faults, no hard states: seed {seed} reached {}",
            quiet.coverage.names()
        );
    }
}

#[test]
fn a_required_state_no_seed_reached_fails_the_sweep_and_names_it() {
    // Nothing here rolls a segment or deletes one: the sweep must say so.
    let s = cluster(
        LEADER_CRASH,
        "require = [\"leader-failover-under-load\", \"retention-deletion\"]",
    );
    let results: Vec<RunResult> = (0..2).map(|seed| run(&s, seed)).collect();
    let summary = summarize(&s, &results);
    println!("{}", summary.verdict);
    assert!(!summary.pass, "{}", summary.verdict);
    assert!(
        summary.verdict.contains("never reached in 2 seeds: retention-deletion"),
        "{}",
        summary.verdict
    );
    assert!(
        !summary.verdict.contains("leader-failover"),
        "reached, so not named: {}",
        summary.verdict
    );
    let reachable = cluster(LEADER_CRASH, "require = [\"leader-failover-under-load\"]");
    assert!(
        summarize(&reachable, &results).pass,
        "the same runs pass what they reached"
    );
}

#[test]
fn swarm_subsets_vary_across_seeds_and_replay_identically() {
    let s = cluster("[faults]\nprofile = \"swarm\"", "");
    let drawn: Vec<String> = (0..20)
        .map(|seed| active_profile(&s, seed).expect("a profile").describe())
        .collect();
    println!("{}", drawn.join("\n"));
    assert!(drawn.iter().all(|d| d.starts_with(SWARM)));
    let distinct: std::collections::BTreeSet<&String> = drawn.iter().collect();
    assert!(distinct.len() >= 15, "20 seeds drew only {} subsets", distinct.len());
    let kinds = |d: &str| d.split(';').next().unwrap_or_default().split_whitespace().count();
    assert!(
        drawn.iter().any(|d| kinds(d) <= 6) && drawn.iter().any(|d| kinds(d) >= 7),
        "subset sizes vary"
    );
    for seed in [3, 11] {
        assert_eq!(
            active_profile(&s, seed).expect("a profile").describe(),
            drawn[seed as usize]
        );
        let (a, b) = (run(&s, seed), run(&s, seed));
        assert!(!a.faults.is_empty(), "seed {seed} drew faults");
        assert_eq!(
            (a.trace_hash, &a.faults, &a.coverage),
            (b.trace_hash, &b.faults, &b.coverage)
        );
    }
}
