//! Campaign mode: runs scenarios with fresh seeds until a wall-clock budget is spent.
//!
//! Contract: run `i` of a campaign is scenario `i % scenarios.len()` with seed
//! [`derive_seed`]`(campaign_seed, i)`, so a campaign seed names the whole sequence of runs (how
//! far it gets depends on the machine). Worker threads take the next run until the budget is
//! spent (runs already started finish; each is bounded by its own time limit) or [`RUNS_MAX`]
//! runs were taken; each run makes its own simulation thread (`world::run_seed`), so madsim state
//! never leaks between seeds. `on_done` is called on the calling thread, once per run, as results
//! arrive.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::exec::{run_one, JOBS_MAX};
use super::{RunOptions, RunResult, Runner};
use crate::scenario::Scenario;

/// The most runs one campaign makes, whatever its budget.
pub const RUNS_MAX: usize = 10_000_000;

/// Seed `i` of the campaign with `campaign_seed` (SplitMix64, top bit dropped: a seed must fit
/// TOML's signed 64-bit integers, or a failing seed could not be written to the corpus nor pinned
/// with `seed =`; the first campaign that found a failure lost it that way).
pub fn derive_seed(campaign_seed: u64, i: u64) -> u64 {
    let mut z = campaign_seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) >> 1
}

/// A budget as the command line writes it: `90s`, `10m`, `1h`, or plain seconds.
pub fn parse_budget(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (number, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (write 90s, 10m or 1h)"))?;
    let secs = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        _ => return Err(format!("{s:?}: the unit must be s, m or h")),
    };
    if secs == 0 || secs > 7 * 24 * 3600 {
        return Err(format!("{s:?} is not between 1 s and a week"));
    }
    Ok(Duration::from_secs(secs))
}

/// One run of the campaign, as `on_done` sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CampaignRun {
    pub index: usize,
    pub scenario: usize,
    pub seed: u64,
}

/// Runs scenario × fresh seed jobs on `jobs` threads until `budget` is spent; returns how many
/// runs were made and the wall time they took.
pub fn run_campaign(
    scenarios: &[Scenario],
    campaign_seed: u64,
    budget: Duration,
    jobs: usize,
    runner: &dyn Runner,
    on_done: &mut dyn FnMut(CampaignRun, &RunResult),
) -> (usize, Duration) {
    let started = Instant::now();
    if scenarios.is_empty() {
        return (0, started.elapsed());
    }
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<(CampaignRun, RunResult)>();
    let workers = jobs.clamp(1, JOBS_MAX);
    let mut done = 0;
    std::thread::scope(|scope| {
        for w in 0..workers {
            let tx = tx.clone();
            let next = &next;
            std::thread::Builder::new()
                .name(format!("gregor-campaign-{w}"))
                .spawn_scoped(scope, move || loop {
                    if started.elapsed() >= budget {
                        return;
                    }
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= RUNS_MAX {
                        return;
                    }
                    let run = CampaignRun {
                        index,
                        scenario: index % scenarios.len(),
                        seed: derive_seed(campaign_seed, index as u64),
                    };
                    let options = RunOptions {
                        seed: run.seed,
                        ..RunOptions::default()
                    };
                    let result = run_one(runner, &scenarios[run.scenario], &options);
                    if tx.send((run, result)).is_err() {
                        return;
                    }
                })
                .expect("the OS can start a worker thread");
        }
        drop(tx);
        for (run, result) in rx {
            done += 1;
            // A panicking callback must not leave the workers blocked on a dropped receiver.
            let _ = std::panic::catch_unwind(AssertUnwindSafe(|| on_done(run, &result)));
        }
    });
    (done, started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::failed_run;

    #[test]
    fn budgets_parse_with_units_and_bad_ones_say_why() {
        assert_eq!(parse_budget("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_budget("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_budget("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_budget("45"), Ok(Duration::from_secs(45)));
        for bad in ["", "m", "10x", "0s", "-5s", "9999h"] {
            assert!(parse_budget(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn derived_seeds_are_distinct_and_a_function_of_the_campaign_seed() {
        let seeds: std::collections::BTreeSet<u64> = (0..10_000).map(|i| derive_seed(42, i)).collect();
        assert_eq!(seeds.len(), 10_000);
        assert_eq!(derive_seed(42, 7), derive_seed(42, 7));
        assert_ne!(derive_seed(42, 7), derive_seed(43, 7));
        let top = seeds.iter().max().copied().unwrap_or(0);
        println!("largest of 10,000 derived seeds: {top}");
        assert!(top <= i64::MAX as u64, "a derived seed does not fit TOML: {top}");
        assert!(top > i64::MAX as u64 / 2, "seeds use the whole 63 bits: {top}");
    }

    #[test]
    fn a_campaign_runs_scenarios_in_turn_until_its_budget_is_spent() {
        let source =
            "description = \"t\"\n[topic]\n[producer]\nmode = \"sync\"\n[expect]\noutcome = \"no-anomalies\"\n";
        let scenarios: Vec<Scenario> = ["a", "b"]
            .iter()
            .map(|n| Scenario::parse(source, "t.toml", n).expect("parses"))
            .collect();
        let runner = |s: &Scenario, o: &RunOptions| {
            std::thread::sleep(Duration::from_millis(5));
            RunResult {
                error: None,
                ..failed_run(s, o.seed, String::new())
            }
        };
        let mut seen = Vec::new();
        let (runs, _) = run_campaign(&scenarios, 1, Duration::from_secs(1), 2, &runner, &mut |run, r| {
            assert_eq!(r.seed, run.seed);
            assert_eq!(r.scenario, ["a", "b"][run.index % 2]);
            seen.push(run.index);
        });
        println!("{runs} runs in the budget");
        assert!(runs >= 1, "something ran within the budget");
        seen.sort_unstable();
        assert_eq!(seen, (0..runs).collect::<Vec<_>>(), "every index once, none skipped");
    }
}
