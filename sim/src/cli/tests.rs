//! The CLI's pieces end to end with a runner made of the real parts except the cluster: a
//! simulation of idle nodes (`run_seed`), the nemesis playing the scenario's profile, and the
//! trace capture around it, run on parallel worker threads. It is also a model of how
//! `run::run_scenario` wires the nemesis and the trace together.

use std::time::Instant;

use super::exec::{run_jobs, Histories, Job};
use super::*;
use crate::nemesis::Nemesis;
use crate::world::{run_seed, NodeIndex};

/// Brokers `broker-0..`; no workload, so the report stays empty.
fn idle_cluster_runner(scenario: &Scenario, options: &RunOptions) -> RunResult {
    let wall = Instant::now();
    let s = scenario.clone();
    let seed = options.seed;
    let ((faults, simulated_ms), trace) =
        crate::trace::capture(options.print_trace, options.trace_filter.as_deref(), || {
            run_seed(seed, move |world| async move {
                for i in 0..s.cluster.brokers {
                    world.add_node(&format!("broker-{i}"), |_rt| std::future::pending::<()>());
                }
                let brokers = s.cluster.brokers as usize;
                let resolve = move |name: &str| {
                    name.strip_prefix("broker-")
                        .and_then(|i| i.parse::<usize>().ok())
                        .filter(|&i| i < brokers)
                        .map(NodeIndex)
                };
                let mut nemesis = Nemesis::new(&s, seed);
                nemesis.play(&world, &resolve).await;
                let elapsed = madsim::time::TimeHandle::current().elapsed().as_millis() as u64;
                (nemesis.into_events(), elapsed)
            })
        })
        .expect("the test's filter parses");
    RunResult {
        trace_hash: trace.hash,
        simulated_ms,
        wall_ms: wall.elapsed().as_millis() as u64,
        faults,
        error: None,
        ..failed_run(scenario, seed, String::new())
    }
}

fn crashes_scenario() -> Scenario {
    let source = r#"
description = "idle brokers under random crashes"
duration_s = 60
[cluster]
brokers = 3
[topic]
[producer]
mode = "sync"
[faults]
profile = "crashes"
[expect]
outcome = "no-anomalies"
"#;
    Scenario::parse(source, "crashes.toml", "crashes").expect("parses")
}

#[test]
fn parallel_runs_of_one_seed_are_identical_and_seeds_differ() {
    let scenarios = vec![crashes_scenario()];
    // Each seed twice, interleaved, on three threads: the two runs of a seed run concurrently
    // with other seeds, each under its own trace capture.
    let jobs: Vec<Job> = [0u64, 1, 2, 0, 1, 2]
        .iter()
        .map(|&seed| Job { scenario: 0, seed })
        .collect();
    let runner = idle_cluster_runner;
    let results = run_jobs(&scenarios, &jobs, 3, Histories::Drop, &runner, &mut |_, _| {});
    for i in 0..3 {
        let (a, b) = (&results[i], &results[i + 3]);
        assert_eq!(differences(a, b), Vec::<String>::new(), "seed {i}");
        assert!(!a.faults.is_empty(), "60 s of crashes: {a:?}");
        assert_eq!(a.simulated_ms, 60_000);
    }
    assert_ne!(results[0].trace_hash, results[1].trace_hash);
    assert_ne!(results[0].faults, results[1].faults);
    let d = differences(&results[0], &results[1]);
    assert!(d.iter().any(|x| x.starts_with("trace hash")) && d.iter().any(|x| x.starts_with("fault timelines")));
}

#[test]
fn the_nemesis_events_are_in_the_trace() {
    let scenario = crashes_scenario();
    let quiet = idle_cluster_runner(
        &scenario,
        &RunOptions {
            seed: 4,
            ..RunOptions::default()
        },
    );
    let printed = idle_cluster_runner(
        &scenario,
        &RunOptions {
            seed: 4,
            print_trace: true,
            trace_filter: Some("nemesis=info".into()),
        },
    );
    assert_eq!(
        quiet.trace_hash, printed.trace_hash,
        "printing does not change the hash"
    );
    // The same run without its nemesis events would hash differently: the events are hashed.
    let mut no_faults = scenario.clone();
    no_faults.faults.profile = Some("none".into());
    let calm = idle_cluster_runner(
        &no_faults,
        &RunOptions {
            seed: 4,
            ..RunOptions::default()
        },
    );
    assert!(calm.faults.is_empty());
    assert_ne!(calm.trace_hash, quiet.trace_hash);
}

#[test]
fn replay_lines_name_scenario_seed_and_commit() {
    assert_eq!(
        replay_line("scenarios/acks_all.toml", 17, "abc1234"),
        "gregor-sim replay scenarios/acks_all.toml --seed 17  # commit abc1234"
    );
}
