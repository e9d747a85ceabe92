//! Shrinking a failing seed (`gregor-sim shrink`): from a run that fails, search for a smaller
//! scenario that fails the same way under the same seed, and write it as a scenario of its own.
//!
//! How:
//! 1. Run the scenario with the seed; the failure is the anomaly kind it showed (a negative
//!    control's expected kind first; a run error is a failure of its own kind). A run that shows
//!    nothing is [`ShrinkError::DoesNotFail`].
//! 2. Replace the fault profile by the schedule the nemesis actually played (`RunResult::played`:
//!    every random draw with its time, node, sides and orders) and pin the seed. The seed keeps
//!    driving the network, disks and workload; only the faults become explicit. The profile stays
//!    as a timer (`profile_timer_only`): the nemesis still wakes and draws when it did, plays only
//!    the schedule, and madsim's scheduler sees the same wake-ups, so the replay is the same run
//!    (same trace hash). That replay must fail the same way, or [`ShrinkError::NotReproduced`].
//!    Once shrunk, dropping the timer is tried last (a plainer file, if it still fails).
//! 3. Delta debugging (Zeller's ddmin) over the fault list, then smallest failing values of the
//!    duration, producer count, message rate, consumer count, broker count (down to the replication
//!    factor) and coordinator count, by parallel bisection; repeated while a round shrinks
//!    anything. A candidate is kept iff it fails with the same kind. Every candidate is the
//!    scenario text it would be written as, parsed and validated first (an invalid one is never
//!    run), so what is written is exactly what failed.
//!
//! Bounds: at most `candidates_max` runs and `wall_ms_max` of wall time; when either is spent the
//! smallest case found so far (it failed) is the result.

use std::time::Instant;

use crate::checker::AnomalyKind;
use crate::cli::exec::{run_jobs, Histories, Job};
use crate::cli::{RunOptions, RunResult, Runner};
use crate::scenario::{Outcome, Scenario, ScheduledFault};

/// How a run fails: the kind shrinking keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    Anomaly(AnomalyKind),
    /// The run itself failed (a panic, the time limit).
    Error,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Anomaly(kind) => write!(f, "{kind}"),
            Failure::Error => f.write_str("run-error"),
        }
    }
}

/// How `result` fails, if it does: the negative control's expected anomaly when it shows, else
/// the first kind the checker found, else a run error.
pub fn failure_of(scenario: &Scenario, result: &RunResult) -> Option<Failure> {
    if result.error.is_some() {
        return Some(Failure::Error);
    }
    let expected = scenario
        .expect
        .get_ref()
        .anomaly
        .as_deref()
        .and_then(AnomalyKind::from_name);
    if let Some(kind) = expected.filter(|&k| result.report.has(k)) {
        return Some(Failure::Anomaly(kind));
    }
    result.report.counts().into_keys().next().map(Failure::Anomaly)
}

fn fails_as(failure: Failure, result: &RunResult) -> bool {
    match failure {
        Failure::Error => result.error.is_some(),
        Failure::Anomaly(kind) => result.error.is_none() && result.report.has(kind),
    }
}

/// The size of a case, as `shrink` prints it before and after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Size {
    pub faults: usize,
    pub duration_s: u64,
    /// Sends the workload made (every outcome).
    pub messages: usize,
    /// Brokers, coordinators (a cluster's), producers and consumers.
    pub nodes: u32,
}

impl Size {
    fn of(scenario: &Scenario, faults: usize, result: &RunResult) -> Size {
        let coordinators = if crate::run::cluster::is_cluster(scenario) {
            scenario.cluster.coordinators
        } else {
            0
        };
        Size {
            faults,
            duration_s: scenario.duration_s,
            messages: result.history.sends.len(),
            nodes: scenario.cluster.brokers
                + coordinators
                + scenario.producer.count
                + scenario.consumer.as_ref().map_or(0, |c| c.count),
        }
    }
}

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} fault(s), {} s, {} messages, {} nodes",
            self.faults, self.duration_s, self.messages, self.nodes
        )
    }
}

#[derive(Clone, Debug)]
pub struct ShrinkOptions {
    pub seed: u64,
    /// Candidate runs at most (the original run and the recorded replay not counted).
    pub candidates_max: usize,
    pub wall_ms_max: u64,
    /// Candidates run at once.
    pub jobs: usize,
    /// A comment block for the top of the written scenario (where it came from).
    pub header: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ShrinkError {
    #[error("seed {seed} of {scenario} does not fail (no anomaly, no error): nothing to shrink")]
    DoesNotFail { scenario: String, seed: u64 },
    #[error(
        "seed {seed}: replaying the {faults} recorded faults as an explicit schedule does not fail with {failure} \
         (it {got}): the failure depends on the profile's timing, not only on its faults"
    )]
    NotReproduced {
        seed: u64,
        faults: usize,
        failure: Failure,
        got: String,
    },
    #[error("the scenario cannot be written back: {0}")]
    Render(String),
}

/// What shrinking found.
#[derive(Clone, Debug)]
pub struct Shrunk {
    pub failure: Failure,
    pub before: Size,
    /// The recorded schedule replayed with the original faults and workload.
    pub recorded: Size,
    pub after: Size,
    /// Whether the recorded replay ran exactly as the original (same trace hash).
    pub recorded_same_trace: bool,
    pub candidates: usize,
    /// A bound stopped the search before it was done.
    pub bounded: bool,
    /// The shrunk scenario file (it failed with `failure`, as written).
    pub toml: String,
    pub scenario: Scenario,
}

/// The knobs a candidate turns, over the scenario as written.
#[derive(Clone, Debug, PartialEq)]
struct Case {
    faults: Vec<ScheduledFault>,
    duration_s: u64,
    producers: u32,
    rate_per_s: u32,
    consumers: Option<u32>,
    brokers: u32,
    coordinators: u32,
    /// The profile whose timer the nemesis keeps (`profile_timer_only`), if any.
    timer: Option<String>,
}

struct Search<'a> {
    runner: &'a dyn Runner,
    options: &'a ShrinkOptions,
    failure: Failure,
    /// The scenario as TOML, with `seed` set and no profile; a case sets its knobs on it.
    base: toml::Table,
    name: String,
    started: Instant,
    candidates: usize,
    bounded: bool,
    log: &'a mut dyn FnMut(&str),
}

fn set(table: &mut toml::Table, section: &str, key: &str, value: toml::Value) {
    if let Some(toml::Value::Table(t)) = table.get_mut(section) {
        t.insert(key.to_string(), value);
    }
}

impl Search<'_> {
    fn render(&self, case: &Case) -> Result<String, String> {
        let mut t = self.base.clone();
        t.insert("duration_s".into(), toml::Value::Integer(case.duration_s as i64));
        set(&mut t, "producer", "count", toml::Value::Integer(case.producers.into()));
        set(
            &mut t,
            "producer",
            "rate_per_s",
            toml::Value::Integer(case.rate_per_s.into()),
        );
        if let Some(c) = case.consumers {
            set(&mut t, "consumer", "count", toml::Value::Integer(c.into()));
        }
        set(&mut t, "cluster", "brokers", toml::Value::Integer(case.brokers.into()));
        set(
            &mut t,
            "cluster",
            "coordinators",
            toml::Value::Integer(case.coordinators.into()),
        );
        let schedule = toml::Value::try_from(&case.faults).map_err(|e| e.to_string())?;
        let mut faults = toml::Table::new();
        if let Some(profile) = &case.timer {
            faults.insert("profile".into(), toml::Value::String(profile.clone()));
            faults.insert("profile_timer_only".into(), toml::Value::Boolean(true));
        }
        faults.insert("schedule".into(), schedule);
        t.insert("faults".into(), toml::Value::Table(faults));
        Ok(format!("{}{}", self.options.header, in_scenario_order(t)?))
    }

    /// The case as a validated scenario and its text, or `None` if it is not a valid scenario
    /// (e.g. a fault names a broker the case removed).
    fn scenario(&self, case: &Case) -> Option<(Scenario, String)> {
        let text = self.render(case).ok()?;
        let scenario = Scenario::parse(&text, "shrink candidate", &self.name).ok()?;
        Some((scenario, text))
    }

    fn spent(&mut self) -> bool {
        let over = self.candidates >= self.options.candidates_max
            || self.started.elapsed().as_millis() as u64 >= self.options.wall_ms_max;
        self.bounded |= over;
        over
    }

    /// Runs the valid ones of `cases`, `jobs` at a time, in order, and returns the first (in
    /// `cases` order) that fails the same way, with its run. Stops at a bound.
    fn first_failing(&mut self, cases: Vec<Case>) -> Option<(Case, RunResult)> {
        let valid: Vec<(Case, Scenario)> = cases
            .into_iter()
            .filter_map(|c| self.scenario(&c).map(|(s, _)| (c, s)))
            .collect();
        let jobs = self.options.jobs.max(1);
        for chunk in valid.chunks(jobs) {
            if self.spent() {
                return None;
            }
            let room = self.options.candidates_max - self.candidates;
            let chunk = &chunk[..chunk.len().min(room)];
            let scenarios: Vec<Scenario> = chunk.iter().map(|(_, s)| s.clone()).collect();
            let list: Vec<Job> = (0..chunk.len())
                .map(|scenario| Job {
                    scenario,
                    seed: self.options.seed,
                })
                .collect();
            let results = run_jobs(&scenarios, &list, jobs, Histories::Keep, self.runner, &mut |_, _| {});
            self.candidates += chunk.len();
            for ((case, _), result) in chunk.iter().zip(results) {
                if fails_as(self.failure, &result) {
                    return Some((case.clone(), result));
                }
            }
        }
        None
    }

    /// ddmin over the fault list: the smallest sublist found that still fails.
    fn faults(&mut self, best: &mut (Case, RunResult)) {
        let try_faults = |case: &Case, faults: Vec<ScheduledFault>| Case { faults, ..case.clone() };
        if best.0.faults.is_empty() {
            return;
        }
        if let Some(found) = self.first_failing(vec![try_faults(&best.0, Vec::new())]) {
            (self.log)("  no fault at all still fails");
            *best = found;
            return;
        }
        let mut n = 2;
        while best.0.faults.len() >= 2 && !self.spent() {
            let faults = best.0.faults.clone();
            let chunks = split(&faults, n);
            let subsets: Vec<Case> = chunks.iter().map(|c| try_faults(&best.0, c.clone())).collect();
            if let Some(found) = self.first_failing(subsets) {
                (self.log)(&format!(
                    "  faults {} -> {} (a subset)",
                    faults.len(),
                    found.0.faults.len()
                ));
                *best = found;
                n = 2;
                continue;
            }
            if n > 2 {
                let complements: Vec<Case> = (0..chunks.len())
                    .map(|skip| {
                        let rest = chunks
                            .iter()
                            .enumerate()
                            .filter(|&(i, _)| i != skip)
                            .flat_map(|(_, c)| c.iter().cloned())
                            .collect();
                        try_faults(&best.0, rest)
                    })
                    .collect();
                if let Some(found) = self.first_failing(complements) {
                    (self.log)(&format!(
                        "  faults {} -> {} (a complement)",
                        faults.len(),
                        found.0.faults.len()
                    ));
                    *best = found;
                    n = (n - 1).max(2);
                    continue;
                }
            }
            if n >= faults.len() {
                break;
            }
            n = (2 * n).min(faults.len());
        }
    }

    /// The smallest `i` in `lo..=hi` whose case fails, by bisection testing `jobs` points a
    /// round (assuming a smaller value that fails has no larger one that passes in between);
    /// `hi` is the current value, known to fail.
    fn smallest(&mut self, what: &str, best: &mut (Case, RunResult), lo: u64, set: &dyn Fn(&Case, u64) -> Case) {
        let hi_start = knob(&best.0, what);
        let (mut lo, mut hi) = (lo, hi_start);
        while lo < hi && !self.spent() {
            let jobs = self.options.jobs.max(1) as u64;
            let mut points: Vec<u64> = (0..jobs).map(|k| lo + (hi - lo) * k / jobs).collect();
            points.dedup();
            let cases: Vec<Case> = points.iter().map(|&p| set(&best.0, p)).collect();
            match self.first_failing(cases) {
                Some(found) => {
                    let p = knob(&found.0, what);
                    let below = points.iter().rev().find(|&&q| q < p).map_or(lo, |&q| q + 1);
                    *best = found;
                    hi = p;
                    lo = below.min(hi);
                }
                None => lo = points.last().map_or(hi, |&q| q + 1),
            }
        }
        let now = knob(&best.0, what);
        if now < hi_start {
            (self.log)(&format!("  {what} {hi_start} -> {now}"));
        }
    }
}

/// A scenario table as TOML, sections in the order the format documents them (`toml` would sort
/// them by name): top-level values, then cluster, broker, topic, producer, consumer, faults,
/// expect, then anything else.
fn in_scenario_order(mut t: toml::Table) -> Result<String, String> {
    let sections = ["cluster", "broker", "topic", "producer", "consumer", "faults", "expect"];
    let mut tables: Vec<(String, toml::Value)> = Vec::new();
    for name in sections {
        if let Some(v) = t.remove(name) {
            tables.push((name.to_string(), v));
        }
    }
    let rest: Vec<String> = t.iter().filter(|(_, v)| v.is_table()).map(|(k, _)| k.clone()).collect();
    for name in rest {
        if let Some(v) = t.remove(&name) {
            tables.push((name, v));
        }
    }
    let mut text = toml::to_string(&t).map_err(|e| e.to_string())?;
    for (name, value) in tables {
        let mut one = toml::Table::new();
        one.insert(name, value);
        text.push('\n');
        text.push_str(&toml::to_string(&one).map_err(|e| e.to_string())?);
    }
    Ok(text)
}

/// The value of the knob called `what`.
fn knob(case: &Case, what: &str) -> u64 {
    match what {
        "duration_s" => case.duration_s,
        "producers" => case.producers.into(),
        "rate_per_s" => case.rate_per_s.into(),
        "consumers" => case.consumers.unwrap_or(0).into(),
        "brokers" => case.brokers.into(),
        "coordinators" => case.coordinators.into(),
        _ => unreachable!("a knob shrink knows: {what}"),
    }
}

/// `items` in `n` contiguous chunks of (nearly) equal size.
fn split<T: Clone>(items: &[T], n: usize) -> Vec<Vec<T>> {
    let n = n.clamp(1, items.len().max(1));
    (0..n)
        .map(|i| items[i * items.len() / n..(i + 1) * items.len() / n].to_vec())
        .filter(|c| !c.is_empty())
        .collect()
}

fn u32_of(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// Shrinks seed `options.seed` of `scenario`. `log` gets one line per step.
pub fn shrink(
    scenario: &Scenario,
    runner: &dyn Runner,
    options: &ShrinkOptions,
    log: &mut dyn FnMut(&str),
) -> Result<Shrunk, ShrinkError> {
    let seed = options.seed;
    let run = |s: &Scenario| {
        crate::cli::exec::run_one(
            runner,
            s,
            &RunOptions {
                seed,
                ..RunOptions::default()
            },
        )
    };
    let original = run(scenario);
    let Some(failure) = failure_of(scenario, &original) else {
        return Err(ShrinkError::DoesNotFail {
            scenario: scenario.name.clone(),
            seed,
        });
    };
    let before = Size::of(scenario, original.played.len(), &original);
    log(&format!("seed {seed} fails with {failure}: {before}"));

    // The scenario with its profile replaced by what was played, and the seed pinned.
    let mut pinned = scenario.clone();
    pinned.seed = Some(seed);
    pinned.rule = None;
    pinned.description = format!("shrunk from {} seed {seed}: {}", scenario.name, scenario.description);
    pinned.faults.profile = None;
    pinned.faults.schedule.clear();
    let mut base = toml::Table::try_from(&pinned).map_err(|e| ShrinkError::Render(e.to_string()))?;
    base.remove("faults");
    let mut search = Search {
        runner,
        options,
        failure,
        base,
        name: format!("{}-seed-{seed}-shrunk", scenario.name),
        started: Instant::now(),
        candidates: 0,
        bounded: false,
        log,
    };
    let case = Case {
        faults: original.played.clone(),
        duration_s: scenario.duration_s,
        producers: scenario.producer.count,
        rate_per_s: scenario.producer.rate_per_s,
        consumers: scenario.consumer.as_ref().map(|c| c.count),
        brokers: scenario.cluster.brokers,
        coordinators: scenario.cluster.coordinators,
        // The nemesis keeps waking when the profile would draw, so the replay is the same run.
        timer: scenario.faults.profile.clone().filter(|p| p != "none"),
    };
    let text = search.render(&case).map_err(ShrinkError::Render)?;
    let recorded_scenario = Scenario::parse(&text, "the recorded schedule", &search.name)
        .map_err(|e| ShrinkError::Render(format!("{e}\n{text}")))?;
    let replayed = run(&recorded_scenario);
    if !fails_as(failure, &replayed) {
        let got = match failure_of(&recorded_scenario, &replayed) {
            Some(other) => format!("fails with {other} instead"),
            None => "does not fail".into(),
        };
        return Err(ShrinkError::NotReproduced {
            seed,
            faults: case.faults.len(),
            failure,
            got,
        });
    }
    let recorded = Size::of(&recorded_scenario, case.faults.len(), &replayed);
    let recorded_same_trace = replayed.trace_hash == original.trace_hash;
    (search.log)(&format!(
        "the recorded schedule replays the failure ({}): {recorded}",
        if recorded_same_trace {
            "same trace hash"
        } else {
            "another trace, same failure"
        }
    ));

    let mut best = (case, replayed);
    let rf = u64::from(
        scenario
            .topics
            .iter()
            .map(|t| t.get_ref().replication_factor)
            .max()
            .unwrap_or(1),
    );
    for round in 1..=3 {
        let start = best.0.clone();
        (search.log)(&format!("round {round}"));
        search.faults(&mut best);
        // The duration must keep the last fault's start inside the run.
        let last_s = best.0.faults.iter().map(|f| f.at_s.ceil() as u64).max().unwrap_or(0);
        search.smallest("duration_s", &mut best, last_s.max(1), &|c, v| Case {
            duration_s: v,
            ..c.clone()
        });
        search.smallest("producers", &mut best, 1, &|c, v| Case {
            producers: u32_of(v),
            ..c.clone()
        });
        search.smallest("rate_per_s", &mut best, 1, &|c, v| Case {
            rate_per_s: u32_of(v),
            ..c.clone()
        });
        if best.0.consumers.is_some() {
            search.smallest("consumers", &mut best, 1, &|c, v| Case {
                consumers: Some(u32_of(v)),
                ..c.clone()
            });
        }
        search.smallest("brokers", &mut best, rf.max(1), &|c, v| Case {
            brokers: u32_of(v),
            ..c.clone()
        });
        // Coordinators come in odd numbers (at most 7): the smallest that fails.
        let now = best.0.coordinators;
        let fewer: Vec<Case> = (1..now)
            .step_by(2)
            .map(|coordinators| Case {
                coordinators,
                ..best.0.clone()
            })
            .collect();
        if let Some(found) = search.first_failing(fewer) {
            (search.log)(&format!("  coordinators {now} -> {}", found.0.coordinators));
            best = found;
        }
        if best.0 == start || search.spent() {
            break;
        }
    }
    // Without the profile's timer the file is plainer; keep that if it still fails.
    if best.0.timer.is_some() {
        let plain = Case {
            timer: None,
            ..best.0.clone()
        };
        match search.first_failing(vec![plain]) {
            Some(found) => {
                (search.log)("  the profile's timer is not needed: dropped");
                best = found;
            }
            None => (search.log)("  the failure needs the profile's timer (the nemesis's wake-ups): kept"),
        }
    }
    let (scenario_after, toml) = search
        .scenario(&best.0)
        .ok_or_else(|| ShrinkError::Render("the shrunk case does not parse".into()))?;
    let after = Size::of(&scenario_after, best.0.faults.len(), &best.1);
    Ok(Shrunk {
        failure,
        before,
        recorded,
        after,
        recorded_same_trace,
        candidates: search.candidates,
        bounded: search.bounded,
        toml,
        scenario: scenario_after,
    })
}

/// Whether `scenario`'s verdict on a run that fails with `failure` is a failing exit: a safe
/// scenario fails, a negative control that expects this anomaly passes (it caught it).
pub fn expects(scenario: &Scenario, failure: Failure) -> bool {
    let e = scenario.expect.get_ref();
    e.outcome == Outcome::Anomaly && matches!(failure, Failure::Anomaly(k) if Some(k.name()) == e.anomaly.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_makes_n_contiguous_chunks_covering_everything() {
        let items: Vec<u32> = (0..7).collect();
        let chunks = split(&items, 3);
        assert_eq!(chunks, vec![vec![0, 1], vec![2, 3], vec![4, 5, 6]]);
        assert_eq!(split(&items, 20).len(), 7);
        assert_eq!(split(&items[..1], 2), vec![vec![0]]);
    }
}
