//! Runs (scenario, seed) jobs on a fixed number of worker threads and hands back every result in
//! job order, whatever order they finished in.
//!
//! Contract: each job is one [`Runner::run`] call; a runner that panics yields a result whose
//! `error` holds the panic message (a failing seed, not a failing CLI). Worker threads are plain
//! std threads outside any simulation; each run makes its own simulation thread (`run_seed`), so
//! madsim state never leaks between seeds. `on_done` is called on the calling thread, once per
//! job, as results arrive (for a progress bar). Under [`Histories::Drop`] each result's history
//! is freed on its worker as its run ends, so that a sweep of many seeds holds verdicts only.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use super::{failed_run, RunOptions, RunResult, Runner};
use crate::history::History;
use crate::scenario::Scenario;

/// One run to make: which scenario (index into the list), which seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    pub scenario: usize,
    pub seed: u64,
}

/// The most worker threads, whatever `--jobs` says.
pub const JOBS_MAX: usize = 256;

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

/// Runs one job, turning a panic into a failed run.
pub fn run_one(runner: &dyn Runner, scenario: &Scenario, options: &RunOptions) -> RunResult {
    catch_unwind(AssertUnwindSafe(|| runner.run(scenario, options))).unwrap_or_else(|panic| {
        failed_run(
            scenario,
            options.seed,
            format!("panicked: {}", panic_message(panic.as_ref())),
        )
    })
}

/// Whether [`run_jobs`] hands back each run's [`History`](crate::history::History).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Histories {
    /// Every result keeps the history its verdict was checked from (shrinking counts and keeps
    /// the messages of the case it settles on).
    Keep,
    /// Each result comes back with an empty history; its report, trace hash and coverage were
    /// taken before. A batched benchmark seed's history is ~9 MB: a `run` over 300 seeds that
    /// kept them grew to 2.7 GB, and each seed ran in freshly faulted memory (a quarter of its
    /// CPU time in the kernel zeroing pages, see BENCHMARKS.md).
    Drop,
}

/// How many worker threads [`run_jobs`] starts for `jobs` jobs asked to run `parallel` at a time.
pub fn workers(parallel: usize, jobs: usize) -> usize {
    parallel.clamp(1, JOBS_MAX).min(jobs.max(1))
}

/// Runs every job, `parallel` at a time (clamped to 1..=[`JOBS_MAX`]); result `i` is job `i`'s.
pub fn run_jobs(
    scenarios: &[Scenario],
    jobs: &[Job],
    parallel: usize,
    histories: Histories,
    runner: &dyn Runner,
    on_done: &mut dyn FnMut(usize, &RunResult),
) -> Vec<RunResult> {
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<(usize, RunResult)>();
    let workers = workers(parallel, jobs.len());
    let mut results: Vec<Option<RunResult>> = vec![None; jobs.len()];
    std::thread::scope(|scope| {
        for w in 0..workers {
            let tx = tx.clone();
            let next = &next;
            std::thread::Builder::new()
                .name(format!("gregor-sim-worker-{w}"))
                .spawn_scoped(scope, move || loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else {
                        return;
                    };
                    let options = RunOptions {
                        seed: job.seed,
                        ..RunOptions::default()
                    };
                    let mut result = run_one(runner, &scenarios[job.scenario], &options);
                    if histories == Histories::Drop {
                        result.history = History::default();
                    }
                    if tx.send((i, result)).is_err() {
                        return;
                    }
                })
                .expect("the OS can start a worker thread");
        }
        drop(tx);
        for (i, result) in rx {
            on_done(i, &result);
            results[i] = Some(result);
        }
    });
    results
        .into_iter()
        .map(|r| r.expect("every job sent its result before the workers ended"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn scenarios() -> Vec<Scenario> {
        ["a", "b"]
            .iter()
            .map(|name| {
                let source =
                    "description = \"t\"\n[topic]\n[producer]\nmode = \"sync\"\n[expect]\noutcome = \"no-anomalies\"\n";
                Scenario::parse(source, "t.toml", name).expect("parses")
            })
            .collect()
    }

    #[test]
    fn every_job_runs_once_and_results_come_back_in_job_order() {
        let scenarios = scenarios();
        let jobs: Vec<Job> = (0..20)
            .map(|i| Job {
                scenario: i % 2,
                seed: i as u64,
            })
            .collect();
        let threads = Mutex::new(std::collections::HashSet::new());
        let runner = |s: &Scenario, o: &RunOptions| {
            threads.lock().expect("lock").insert(std::thread::current().id());
            // Later seeds finish first, so arrival order differs from job order.
            std::thread::sleep(std::time::Duration::from_millis(20 - o.seed));
            RunResult {
                trace_hash: o.seed * 7,
                error: None,
                ..failed_run(s, o.seed, String::new())
            }
        };
        let mut done = Vec::new();
        let results = run_jobs(&scenarios, &jobs, 4, Histories::Keep, &runner, &mut |i, _| done.push(i));
        assert_eq!(results.len(), 20);
        for (i, r) in results.iter().enumerate() {
            assert_eq!((r.seed, r.scenario.as_str()), (i as u64, ["a", "b"][i % 2]));
        }
        done.sort_unstable();
        assert_eq!(done, (0..20).collect::<Vec<_>>());
        assert_eq!(threads.lock().expect("lock").len(), 4, "four workers ran jobs");
    }

    /// A runner whose history has one acknowledged send per seed number (and none for seed 0),
    /// checked as `run_scenario` checks its runs.
    fn sends_runner(s: &Scenario, o: &RunOptions) -> RunResult {
        let mut history = History::default();
        for seq in 0..o.seed {
            history.sends.push(crate::history::Send {
                producer: 0,
                partition: crate::history::Partition::of_first(0),
                value: crate::history::Value::new(0, seq as u32),
                outcome: crate::history::SendOutcome::Acked { offset: seq as i64 },
                at_ms: seq,
            });
        }
        RunResult {
            report: crate::checker::check(&history),
            history,
            error: None,
            ..failed_run(s, o.seed, String::new())
        }
    }

    #[test]
    fn dropped_histories_come_back_empty_with_the_verdicts_taken_from_them() {
        let scenarios = scenarios();
        let jobs: Vec<Job> = (0..6).map(|seed| Job { scenario: 0, seed }).collect();
        let kept = run_jobs(&scenarios, &jobs, 2, Histories::Keep, &sends_runner, &mut |_, _| {});
        let mut seen_at_done = Vec::new();
        let dropped = run_jobs(&scenarios, &jobs, 2, Histories::Drop, &sends_runner, &mut |_, r| {
            seen_at_done.push(r.history.sends.len())
        });
        let kept_sends: Vec<usize> = kept.iter().map(|r| r.history.sends.len()).collect();
        assert_eq!(kept_sends, vec![0, 1, 2, 3, 4, 5], "Keep hands back every history");
        for (k, d) in kept.iter().zip(&dropped) {
            assert_eq!(
                d.history,
                History::default(),
                "seed {}: Drop empties the history",
                d.seed
            );
            assert_eq!(
                k.report, d.report,
                "seed {}: the report was taken before the drop",
                d.seed
            );
        }
        // The verdicts differ from seed to seed, so equal reports compared something.
        assert_ne!(kept[1].report, kept[5].report);
        assert_eq!(seen_at_done, vec![0; 6], "the progress callback sees the slim result");
    }

    #[test]
    fn a_panicking_run_is_a_failed_seed() {
        let scenarios = scenarios();
        let runner = |s: &Scenario, o: &RunOptions| {
            assert!(o.seed != 3, "seed three breaks");
            RunResult {
                error: None,
                ..failed_run(s, o.seed, String::new())
            }
        };
        let jobs: Vec<Job> = (0..5).map(|seed| Job { scenario: 0, seed }).collect();
        let results = run_jobs(&scenarios, &jobs, 2, Histories::Keep, &runner, &mut |_, _| {});
        let errors: Vec<(u64, &str)> = results
            .iter()
            .filter_map(|r| r.error.as_deref().map(|e| (r.seed, e)))
            .collect();
        assert_eq!(errors, vec![(3, "panicked: seed three breaks")]);
    }
}
