//! Judging a scenario by its `[expect]` over the seeds it ran, and the summary table.
//!
//! Rules:
//! - A run that errored (panic, time limit) fails, whatever the scenario expects.
//! - `outcome = "no-anomalies"`: a seed passes when its report has no finding and compared
//!   something (`!Report::compared_nothing()`); the scenario passes when every seed does.
//! - `outcome = "anomaly"` (a negative control): a seed that shows `expect.anomaly` caught it;
//!   one that does not missed it. The scenario passes when no seed failed and at least
//!   `min_share` of its seeds caught the anomaly: a caught negative control passes.
//! - `require = [...]`: the scenario also fails when no seed reached one of the required hard
//!   states (`crate::coverage`); the verdict names each state never reached.
//! - Every failing seed gets one replay line: the failed ones always, the missed ones when too
//!   few seeds caught the anomaly (then they are what to look at).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::RunResult;
use crate::checker::AnomalyKind;
use crate::coverage::{Coverage, State};
use crate::scenario::{Expect, Outcome, Scenario};

/// How one seed did against its scenario's expectation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SeedStatus {
    Pass,
    /// The seed fails, for this reason.
    Fail(String),
    /// A negative control's seed that did not show the anomaly (a failure only in numbers).
    Missed,
}

/// The anomaly a negative control expects, as the checker names it.
fn expected_anomaly(expect: &Expect) -> AnomalyKind {
    let name = expect.anomaly.as_deref().unwrap_or_default();
    AnomalyKind::from_name(name)
        .unwrap_or_else(|| panic!("scenario validation accepts only known anomalies, not {name:?}"))
}

pub fn seed_status(expect: &Expect, result: &RunResult) -> SeedStatus {
    if let Some(error) = &result.error {
        return SeedStatus::Fail(format!("the run failed: {error}"));
    }
    let report = &result.report;
    match expect.outcome {
        Outcome::NoAnomalies => {
            if !report.findings.is_empty() {
                let counts: Vec<String> = report.counts().iter().map(|(k, n)| format!("{k} ×{n}")).collect();
                SeedStatus::Fail(format!("anomalies: {}", counts.join(", ")))
            } else if report.compared_nothing() {
                SeedStatus::Fail(format!("compared nothing: {}", report.summary()))
            } else {
                SeedStatus::Pass
            }
        }
        Outcome::Anomaly => {
            if report.has(expected_anomaly(expect)) {
                SeedStatus::Pass
            } else {
                SeedStatus::Missed
            }
        }
    }
}

/// One scenario over all its seeds.
#[derive(Clone, Debug, PartialEq)]
pub struct ScenarioSummary {
    pub name: String,
    pub seeds_run: usize,
    /// Seeds that fail, with why (missed ones only when the verdict fails), in seed order.
    pub failed: Vec<(u64, String)>,
    /// Per anomaly kind, how many seeds showed it.
    pub anomalies: BTreeMap<AnomalyKind, usize>,
    pub simulated_ms: u64,
    pub wall_ms: u64,
    /// Seeds whose report has any anomaly.
    pub anomaly_seeds: usize,
    /// A negative control's first seed that showed the expected anomaly (for a replay line).
    pub caught_example: Option<u64>,
    pub pass: bool,
    pub verdict: String,
    /// How many seeds reached each hard state.
    pub coverage: Coverage,
    /// The states the scenario requires (`[expect] require`).
    pub required: Vec<State>,
}

impl ScenarioSummary {
    /// Simulated seconds per wall-clock second of one run's thread.
    pub fn speed(&self) -> f64 {
        self.simulated_ms as f64 / self.wall_ms.max(1) as f64
    }
}

/// Judges `scenario` by `results`, its runs (one per seed).
pub fn summarize(scenario: &Scenario, results: &[RunResult]) -> ScenarioSummary {
    let expect = scenario.expect.get_ref();
    let mut failed = Vec::new();
    let mut missed = Vec::new();
    let mut caught_example = None;
    let mut anomaly_seeds = 0;
    let mut anomalies: BTreeMap<AnomalyKind, usize> = BTreeMap::new();
    let mut sorted: Vec<&RunResult> = results.iter().collect();
    sorted.sort_by_key(|r| r.seed);
    let mut coverage = Coverage::default();
    for r in &sorted {
        coverage.add(&r.coverage);
        if !r.report.findings.is_empty() {
            anomaly_seeds += 1;
        }
        for kind in r.report.counts().into_keys() {
            *anomalies.entry(kind).or_insert(0) += 1;
        }
        match seed_status(expect, r) {
            SeedStatus::Pass if expect.outcome == Outcome::Anomaly => {
                caught_example.get_or_insert(r.seed);
            }
            SeedStatus::Pass => {}
            SeedStatus::Fail(why) => failed.push((r.seed, why)),
            SeedStatus::Missed => missed.push(r.seed),
        }
    }
    let n = results.len();
    let required = expect.required();
    let (pass, verdict) = if n == 0 {
        (false, "FAIL: no seeds ran".to_string())
    } else {
        match expect.outcome {
            Outcome::NoAnomalies if failed.is_empty() => (true, "pass".to_string()),
            Outcome::NoAnomalies => (false, format!("FAIL: {} of {n} seeds failed", failed.len())),
            Outcome::Anomaly => {
                let caught = n - failed.len() - missed.len();
                let share_ok = caught as f64 >= expect.min_share * n as f64 - 1e-9;
                let text = format!(
                    "{} caught in {caught}/{n} seeds (at least {}% expected)",
                    expected_anomaly(expect),
                    expect.min_share * 100.0
                );
                match (failed.is_empty(), share_ok) {
                    (true, true) => (true, format!("pass: {text}")),
                    (no_errors, share_ok) => {
                        if !share_ok {
                            failed.extend(missed.iter().map(|&s| (s, "the anomaly was not caught".to_string())));
                            failed.sort_by_key(|&(s, _)| s);
                        }
                        let errors = if no_errors { "" } else { "runs failed; " };
                        (false, format!("FAIL: {errors}{text}"))
                    }
                }
            }
        }
    };
    let missing = coverage.missing(&required);
    let (pass, verdict) = match (pass, missing.is_empty()) {
        (_, true) => (pass, verdict),
        (true, false) => (false, format!("FAIL: {}", never_reached(&missing, n))),
        (false, false) => (false, format!("{verdict}; {}", never_reached(&missing, n))),
    };
    ScenarioSummary {
        name: scenario.name.clone(),
        seeds_run: n,
        failed,
        anomalies,
        simulated_ms: sorted.iter().map(|r| r.simulated_ms).sum(),
        wall_ms: sorted.iter().map(|r| r.wall_ms).sum(),
        caught_example,
        anomaly_seeds,
        pass,
        verdict,
        coverage,
        required,
    }
}

fn never_reached(missing: &[State], seeds: usize) -> String {
    let names: Vec<&str> = missing.iter().map(|s| s.name()).collect();
    format!("required state(s) never reached in {seeds} seeds: {}", names.join(", "))
}

/// The coverage table of `summaries` (`crate::coverage::Coverage::render`).
pub fn coverage_table(summaries: &[ScenarioSummary]) -> String {
    let rows: Vec<(&str, &Coverage, &[State])> = summaries
        .iter()
        .map(|s| (s.name.as_str(), &s.coverage, s.required.as_slice()))
        .collect();
    Coverage::render(&rows)
}

/// Anomaly kinds with the number of seeds that showed each, or `-`.
fn anomaly_cell(s: &ScenarioSummary) -> String {
    if s.anomalies.is_empty() {
        "-".to_string()
    } else {
        s.anomalies
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The summary table: one row per scenario.
pub fn table(summaries: &[ScenarioSummary]) -> String {
    let name_w = summaries.iter().map(|s| s.name.len()).chain([8]).max().unwrap_or(8);
    let anomaly_w = summaries
        .iter()
        .map(|s| anomaly_cell(s).len())
        .chain([17])
        .max()
        .unwrap_or(17);
    let mut out = format!(
        "{:<name_w$}  {:>5}  {:>6}  {:<anomaly_w$}  {:>12}  verdict\n",
        "scenario", "seeds", "failed", "anomalies (seeds)", "sim s/wall s"
    );
    for s in summaries {
        let _ = writeln!(
            out,
            "{:<name_w$}  {:>5}  {:>6}  {:<anomaly_w$}  {:>12.1}  {}",
            s.name,
            s.seeds_run,
            s.failed.len(),
            anomaly_cell(s),
            s.speed(),
            s.verdict
        );
    }
    out
}

/// One row of the rules table: a scenario, its file and how it did.
pub struct RuleRow<'a> {
    pub scenario: &'a Scenario,
    pub path: String,
    pub summary: &'a ScenarioSummary,
}

/// The rules table in Markdown (the README's): rule, configuration, expectation, seeds run,
/// seeds with an anomaly, anomalies by kind, and a replay line for one seed of a negative control
/// that caught its anomaly. `commit` goes into the replay lines.
pub fn markdown_table(rows: &[RuleRow<'_>], commit: &str) -> String {
    let mut out = String::from(
        "| rule | scenario | configuration | expects | seeds | seeds with an anomaly | anomalies (seeds) | replay one |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let s = row.summary;
        let expect = row.scenario.expect.get_ref();
        let expects = match expect.outcome {
            Outcome::NoAnomalies => "no anomalies".to_string(),
            Outcome::Anomaly => format!("{} (control)", expected_anomaly(expect)),
        };
        let with_anomaly = s.anomaly_seeds;
        let kinds = anomaly_cell(s);
        let replay = s.caught_example.map_or("-".to_string(), |seed| {
            format!("`{}`", super::replay_line(&row.path, seed, commit))
        });
        let verdict = if s.pass { "" } else { " **FAIL**" };
        let _ = writeln!(
            out,
            "| {} | `{}` | {} | {expects}{verdict} | {} | {with_anomaly} | {kinds} | {replay} |",
            row.scenario.rule.as_deref().unwrap_or("-"),
            s.name,
            row.scenario.description.replace('|', "\\|"),
            s.seeds_run,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::{Compared, Finding, Report};
    use crate::cli::failed_run;

    fn scenario(expect: &str) -> Scenario {
        let source = format!("description = \"t\"\n[topic]\n[producer]\nmode = \"sync\"\n[expect]\n{expect}\n");
        Scenario::parse(&source, "t.toml", "t").expect("parses")
    }

    fn no_anomalies() -> Scenario {
        scenario("outcome = \"no-anomalies\"")
    }

    fn negative_control(min_share: f64) -> Scenario {
        scenario(&format!(
            "outcome = \"anomaly\"\nanomaly = \"lost-write\"\nmin_share = {min_share}"
        ))
    }

    /// A run that compared 10 acknowledged writes and found `anomalies`.
    fn run(seed: u64, anomalies: &[AnomalyKind]) -> RunResult {
        RunResult {
            report: Report {
                compared: Compared {
                    sends: 10,
                    acked: 10,
                    acked_checked: 10,
                    partitions_read: 1,
                    ..Compared::default()
                },
                findings: anomalies
                    .iter()
                    .map(|&kind| Finding {
                        kind,
                        detail: "x".into(),
                    })
                    .collect(),
            },
            simulated_ms: 30_000,
            wall_ms: 100,
            error: None,
            ..failed_run(&no_anomalies(), seed, String::new())
        }
    }

    fn errored(seed: u64) -> RunResult {
        RunResult {
            error: Some("panicked at 'boom'".into()),
            ..run(seed, &[])
        }
    }

    fn compared_nothing(seed: u64) -> RunResult {
        RunResult {
            report: Report::default(),
            ..run(seed, &[])
        }
    }

    const LOST: AnomalyKind = AnomalyKind::LostWrite;

    #[test]
    fn no_anomalies_passes_only_when_every_seed_is_clean_and_compared_something() {
        let s = no_anomalies();
        let clean = summarize(&s, &[run(0, &[]), run(1, &[])]);
        assert!(clean.pass, "{clean:?}");
        assert!(clean.failed.is_empty());
        assert_eq!(clean.speed(), 300.0);

        let one_anomaly = summarize(&s, &[run(0, &[]), run(1, &[LOST, LOST, AnomalyKind::Duplicate])]);
        assert!(!one_anomaly.pass);
        assert_eq!(one_anomaly.failed.len(), 1);
        assert_eq!(one_anomaly.failed[0].0, 1);
        assert!(
            one_anomaly.failed[0].1.contains("lost-write ×2"),
            "{:?}",
            one_anomaly.failed
        );
        assert_eq!(one_anomaly.anomalies[&LOST], 1, "counted in seeds, not findings");

        let nothing = summarize(&s, &[run(0, &[]), compared_nothing(1)]);
        assert!(!nothing.pass);
        assert!(nothing.failed[0].1.contains("compared nothing"), "{:?}", nothing.failed);

        let error = summarize(&s, &[errored(3), run(0, &[])]);
        assert!(!error.pass);
        assert_eq!(
            error.failed,
            vec![(3, "the run failed: panicked at 'boom'".to_string())]
        );

        assert!(!summarize(&s, &[]).pass, "no seeds proves nothing");
    }

    #[test]
    fn a_negative_control_passes_when_caught_in_enough_seeds() {
        let s = negative_control(0.75);
        let caught = summarize(&s, &[run(0, &[LOST]), run(1, &[LOST]), run(2, &[LOST]), run(3, &[])]);
        assert!(caught.pass, "{caught:?}");
        assert!(
            caught.failed.is_empty(),
            "a miss within the share is not a failing seed"
        );
        assert!(caught.verdict.contains("3/4"), "{}", caught.verdict);

        let too_few = summarize(&s, &[run(0, &[LOST]), run(1, &[LOST]), run(2, &[]), run(3, &[])]);
        assert!(!too_few.pass);
        let seeds: Vec<u64> = too_few.failed.iter().map(|&(s, _)| s).collect();
        assert_eq!(seeds, vec![2, 3], "the missed seeds are the ones to replay");

        let other_anomaly = summarize(&negative_control(1.0), &[run(0, &[AnomalyKind::Duplicate])]);
        assert!(!other_anomaly.pass, "another anomaly does not catch the expected one");
    }

    #[test]
    fn a_required_state_no_seed_reached_fails_the_scenario_and_is_named() {
        let s = scenario("outcome = \"no-anomalies\"\nrequire = [\"isr-shrink\", \"follower-truncation\"]");
        let reaching = |seed, states: &[State]| RunResult {
            coverage: crate::coverage::Reached(states.iter().copied().collect()),
            ..run(seed, &[])
        };
        let short = summarize(&s, &[reaching(0, &[State::IsrShrink]), reaching(1, &[])]);
        assert!(!short.pass, "{short:?}");
        assert!(
            short.verdict.contains("never reached in 2 seeds: follower-truncation")
                && !short.verdict.contains("isr-shrink"),
            "{}",
            short.verdict
        );
        assert_eq!(short.coverage.seeds_reaching(State::IsrShrink), 1);
        let both = [State::IsrShrink, State::FollowerTruncation];
        let full = summarize(&s, &[reaching(0, &[State::IsrShrink]), reaching(1, &both)]);
        assert!(full.pass, "{}", full.verdict);
        let table = coverage_table(&[short, full]);
        assert!(table.lines().nth(1).is_some_and(|l| l.contains("0!")), "{table}");
    }

    #[test]
    fn a_negative_control_fails_when_a_run_errors() {
        let s = negative_control(0.5);
        let summary = summarize(&s, &[run(0, &[LOST]), run(1, &[LOST]), errored(2)]);
        assert!(!summary.pass);
        assert_eq!(summary.failed.len(), 1);
        assert!(summary.verdict.contains("runs failed"), "{}", summary.verdict);
    }

    #[test]
    fn the_table_has_a_row_per_scenario() {
        let s = no_anomalies();
        let table = table(&[summarize(&s, &[run(0, &[]), run(1, &[LOST])])]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2, "{table}");
        assert!(lines[1].starts_with("t ") && lines[1].contains("lost-write 1") && lines[1].contains("FAIL"));
    }

    #[test]
    fn the_markdown_table_names_rule_counts_and_a_replay_of_a_caught_seed() {
        let source = "description = \"acks=1 | a crash\"\nrule = \"1 acknowledgement\"\n[topic]\n[producer]\nmode = \"sync\"\n[expect]\noutcome = \"anomaly\"\nanomaly = \"lost-write\"\nmin_share = 0.5\n";
        let control = Scenario::parse(source, "c.toml", "c").expect("parses");
        let clean = no_anomalies();
        let c = summarize(
            &control,
            &[run(4, &[]), run(7, &[LOST, AnomalyKind::Duplicate]), run(9, &[LOST])],
        );
        let n = summarize(&clean, &[run(0, &[]), run(1, &[])]);
        let rows = [
            RuleRow {
                scenario: &control,
                path: "scenarios/rules/c.toml".into(),
                summary: &c,
            },
            RuleRow {
                scenario: &clean,
                path: "scenarios/rules/t.toml".into(),
                summary: &n,
            },
        ];
        let md = markdown_table(&rows, "abc1234");
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines.len(), 4, "{md}");
        assert_eq!(
            lines[2],
            "| 1 acknowledgement | `c` | acks=1 \\| a crash | lost-write (control) | 3 | 2 | lost-write 2, duplicate 1 | `gregor-sim replay scenarios/rules/c.toml --seed 7  # commit abc1234` |"
        );
        assert_eq!(lines[3], "| - | `t` | t | no anomalies | 2 | 0 | - | - |");
    }
}
