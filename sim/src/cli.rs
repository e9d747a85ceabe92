//! What the `gregor-sim` command line computes, apart from its arguments and terminal output
//! (those live in `src/bin/gregor-sim.rs`): seed lists ([`seeds`]), running scenario × seed jobs
//! in parallel ([`exec`]), and judging each scenario by its `[expect]` ([`verdict`]).
//!
//! Contract: the CLI reaches the simulator only through [`Runner`], one call per (scenario,
//! seed); anything implementing it (the real `run::run_scenario`, or a fake in tests) can be
//! judged the same way.

pub mod campaign;
pub mod corpus;
pub mod cpu;
pub mod exec;
pub mod seeds;
pub mod verdict;

use crate::checker::Report;
use crate::scenario::Scenario;

pub use crate::run::{RunOptions, RunResult};

/// The result of a run that failed before it produced anything (e.g. its runner panicked).
pub fn failed_run(scenario: &Scenario, seed: u64, error: String) -> RunResult {
    RunResult {
        scenario: scenario.name.clone(),
        seed,
        report: Report::default(),
        trace_hash: 0,
        simulated_ms: 0,
        wall_ms: 0,
        faults: Vec::new(),
        played: Vec::new(),
        history: crate::history::History::default(),
        error: Some(error),
        coverage: crate::coverage::Reached::default(),
    }
}

/// Runs one seed of one scenario. `Sync`: the CLI calls it from several worker threads at once.
pub trait Runner: Sync {
    fn run(&self, scenario: &Scenario, options: &RunOptions) -> RunResult;
}

/// Any function with `run_scenario`'s signature is a runner (so is a test's closure).
impl<F> Runner for F
where
    F: Fn(&Scenario, &RunOptions) -> RunResult + Sync,
{
    fn run(&self, scenario: &Scenario, options: &RunOptions) -> RunResult {
        self(scenario, options)
    }
}

/// How two runs of one seed differ (empty: they do not): trace hash, report, faults, error.
pub fn differences(a: &RunResult, b: &RunResult) -> Vec<String> {
    let mut diffs = Vec::new();
    if a.trace_hash != b.trace_hash {
        diffs.push(format!("trace hash {:016x} vs {:016x}", a.trace_hash, b.trace_hash));
    }
    if a.report != b.report {
        diffs.push(format!(
            "reports differ:\n{}\n  vs\n{}",
            a.report.summary(),
            b.report.summary()
        ));
    }
    if a.faults != b.faults {
        let first = a.faults.iter().zip(&b.faults).position(|(x, y)| x != y);
        diffs.push(format!(
            "fault timelines differ ({} vs {} events, first difference at event {})",
            a.faults.len(),
            b.faults.len(),
            first.unwrap_or(a.faults.len().min(b.faults.len()))
        ));
    }
    if a.error != b.error {
        diffs.push(format!("errors differ: {:?} vs {:?}", a.error, b.error));
    }
    diffs
}

/// The one line that replays a failing seed.
pub fn replay_line(scenario_path: &str, seed: u64, commit: &str) -> String {
    format!("gregor-sim replay {scenario_path} --seed {seed}  # commit {commit}")
}

#[cfg(test)]
mod tests;
