//! Coverage of hard states ("sometimes" assertions, as FoundationDB and Antithesis call them):
//! which hard-to-reach states a run drove the cluster through, and over a sweep, how many seeds
//! reached each. A sweep that never failed a leader over under load proves less than it seems;
//! this says so, and a scenario's `require` makes it fail.
//!
//! What it owns: [`State`] (the states, by stable kebab-case name), [`Observer`] (a `tracing`
//! layer that classifies the core's structured events while a run is captured), [`Reached`] (the
//! states of one run) and [`Coverage`] (seeds per state over many runs: `add`, `merge`, `render`),
//! which the sweep prints and a campaign can merge across batches.
//!
//! Contract: states are observed from events the core emits anyway, classified by target and
//! field names (never by message text), so nothing in core's logic changes for coverage:
//! - `leader-failover-under-load`: target `controller`, fields `leader`/`previous_leader`: a
//!   partition of a non-internal topic got a leader other than its last one (or its
//!   `previous_leader`), while the workload
//!   was producing (before producers stop, with a send completing at or after it: see
//!   [`Observed::reached`]).
//! - `isr-shrink` / `isr-expand`: an `isr` list (targets `controller`, `replication`) shorter
//!   than the one before it / longer, after a shrink of that partition. The one before: the
//!   event's `previous_isr`, else the last seen, else the topic's `replication_factor`.
//! - `min-isr-rejection`: target `replication`, field `min_insync_replicas` (a produce answered
//!   NOT_ENOUGH_REPLICAS).
//! - `follower-truncation`: target `replication`, `truncated_from` > `truncated_to`.
//! - `controller-failover`: a second `controller_epoch` event (a broker became controller after
//!   another had been).
//! - `coordinator-leader-change`: a coordinator (Raft) node became `Leader` in a later term than
//!   the first leader's.
//! - `group-coordinator-move`: target `groups`, an offsets partition loaded (`partition`,
//!   `epoch`) at a later epoch than its first load: the group coordinator moved.
//! - `group-rebalance-mid-commit`: target `groups`, `commit_refused` (REBALANCE_IN_PROGRESS or
//!   ILLEGAL_GENERATION answered to an offset commit).
//! - `segment-roll`: target `log`, field `base`; `retention-deletion`: target `log`,
//!   `segments_deleted`.
//! - `disk-fault-recovered-by-checksum`: a partition recovered at open with `bytes_cut` or
//!   `segments_dropped` above zero (a torn or corrupt tail found by its checksum and cut).
//!
//! Fault model: none; the observer only reads events. An event the core stops emitting shows as
//! a state no seed reaches (the tests of `sim/tests/coverage.rs` pin the common ones).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

/// A hard state a run may reach.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum State {
    LeaderFailoverUnderLoad,
    IsrShrink,
    IsrExpand,
    MinIsrRejection,
    FollowerTruncation,
    ControllerFailover,
    CoordinatorLeaderChange,
    GroupCoordinatorMove,
    GroupRebalanceMidCommit,
    SegmentRoll,
    RetentionDeletion,
    DiskFaultRecoveredByChecksum,
}

impl State {
    /// Every state, in table order.
    pub const ALL: [State; 12] = [
        State::LeaderFailoverUnderLoad,
        State::IsrShrink,
        State::IsrExpand,
        State::MinIsrRejection,
        State::FollowerTruncation,
        State::ControllerFailover,
        State::CoordinatorLeaderChange,
        State::GroupCoordinatorMove,
        State::GroupRebalanceMidCommit,
        State::SegmentRoll,
        State::RetentionDeletion,
        State::DiskFaultRecoveredByChecksum,
    ];

    /// The name scenarios use (`require = [...]`).
    pub fn name(self) -> &'static str {
        match self {
            State::LeaderFailoverUnderLoad => "leader-failover-under-load",
            State::IsrShrink => "isr-shrink",
            State::IsrExpand => "isr-expand",
            State::MinIsrRejection => "min-isr-rejection",
            State::FollowerTruncation => "follower-truncation",
            State::ControllerFailover => "controller-failover",
            State::CoordinatorLeaderChange => "coordinator-leader-change",
            State::GroupCoordinatorMove => "group-coordinator-move",
            State::GroupRebalanceMidCommit => "group-rebalance-mid-commit",
            State::SegmentRoll => "segment-roll",
            State::RetentionDeletion => "retention-deletion",
            State::DiskFaultRecoveredByChecksum => "disk-fault-recovered-by-checksum",
        }
    }

    /// A column heading of at most 6 characters for the table (its legend names them).
    pub fn short(self) -> &'static str {
        match self {
            State::LeaderFailoverUnderLoad => "fover",
            State::IsrShrink => "shrink",
            State::IsrExpand => "expand",
            State::MinIsrRejection => "minisr",
            State::FollowerTruncation => "trunc",
            State::ControllerFailover => "ctl",
            State::CoordinatorLeaderChange => "coord",
            State::GroupCoordinatorMove => "gcoord",
            State::GroupRebalanceMidCommit => "midcmt",
            State::SegmentRoll => "roll",
            State::RetentionDeletion => "retain",
            State::DiskFaultRecoveredByChecksum => "cksum",
        }
    }

    pub fn from_name(name: &str) -> Option<State> {
        State::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Every name, for error messages.
    pub fn names() -> Vec<&'static str> {
        State::ALL.iter().map(|s| s.name()).collect()
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The states one run reached.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reached(pub BTreeSet<State>);

impl Reached {
    pub fn has(&self, state: State) -> bool {
        self.0.contains(&state)
    }

    /// `a, b, c` or `none`.
    pub fn names(&self) -> String {
        if self.0.is_empty() {
            return "none".to_string();
        }
        self.0.iter().map(|s| s.name()).collect::<Vec<_>>().join(", ")
    }
}

/// What the observer saw of one run, before the workload's window is known.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    states: BTreeSet<State>,
    /// Virtual ms of each leader failover of a non-internal topic.
    failovers_ms: Vec<u64>,
}

impl Observed {
    /// The run's states, given the workload's window: a failover counts as under load when it
    /// happened before `produce_until_ms` and some send completed at or after it
    /// (`last_send_ms`), i.e. a producer was sending through it.
    pub fn reached(&self, produce_until_ms: u64, last_send_ms: Option<u64>) -> Reached {
        let mut states = self.states.clone();
        let under_load = |t: u64| t < produce_until_ms && last_send_ms.is_some_and(|last| last >= t);
        if self.failovers_ms.iter().any(|&t| under_load(t)) {
            states.insert(State::LeaderFailoverUnderLoad);
        }
        Reached(states)
    }
}

/// What the classifier remembers across events.
#[derive(Debug, Default)]
struct Memory {
    observed: Observed,
    /// Per (topic, partition): the last leader (≥ 0) seen.
    leaders: BTreeMap<(String, i64), i64>,
    /// Per (topic, partition): the last ISR size, and whether it ever shrank.
    isr: BTreeMap<(String, i64), (usize, bool)>,
    /// Per topic: its replication factor, the ISR size of a partition before any change.
    replication_factors: BTreeMap<String, usize>,
    controllers_elected: usize,
    /// The term of the first coordinator leader.
    coordinator_first_leader_term: Option<i64>,
    /// Per offsets partition: the epoch it was first loaded at.
    offsets_loads: BTreeMap<i64, i64>,
}

/// A `tracing` layer that classifies events into [`State`]s. Install it with the run's capture
/// (`crate::trace::Capture` does) and read [`Observer::observed`] afterwards.
#[derive(Clone, Debug, Default)]
pub struct Observer {
    memory: Arc<Mutex<Memory>>,
}

impl Observer {
    pub fn observed(&self) -> Observed {
        self.lock().observed.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        // A panic while classifying already fails the run; what was seen is still worth reading.
        self.memory.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The targets whose events may mark a state: anything else is skipped before its fields are read.
const TARGETS: &[&str] = &[
    "controller",
    "replication",
    "groups",
    "log",
    "gregor_core::broker",
    "gregor_core::coord::server",
];

/// The fields of one event the classifier reads (integers, and `Debug`/string values as text).
#[derive(Default)]
struct Fields {
    ints: Vec<(&'static str, i64)>,
    texts: Vec<(&'static str, String)>,
}

impl Fields {
    fn int(&self, name: &str) -> Option<i64> {
        self.ints.iter().find(|(n, _)| *n == name).map(|&(_, v)| v)
    }

    fn text(&self, name: &str) -> Option<&str> {
        self.texts.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }

    fn has(&self, name: &str) -> bool {
        self.int(name).is_some() || self.text(name).is_some()
    }
}

impl Visit for Fields {
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.ints.push((field.name(), value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.ints.push((field.name(), i64::try_from(value).unwrap_or(i64::MAX)));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.texts.push((field.name(), value.to_string()));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() != "message" {
            self.texts.push((field.name(), value.to_string()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() != "message" {
            self.texts.push((field.name(), format!("{value:?}")));
        }
    }
}

/// The number of elements of a `Debug`-formatted list of numbers (`[0, 2]` → 2, `[]` → 0).
fn list_len(text: &str) -> usize {
    let inner = text.trim().trim_start_matches('[').trim_end_matches(']').trim();
    if inner.is_empty() {
        0
    } else {
        inner.split(',').count()
    }
}

fn virtual_ms() -> u64 {
    madsim::time::TimeHandle::try_current().map_or(0, |t| t.elapsed().as_millis() as u64)
}

impl Memory {
    fn classify(&mut self, target: &str, f: &Fields) {
        let mut reach = |s: State| {
            self.observed.states.insert(s);
        };
        if let Some(rf) = f.int("replication_factor").and_then(|rf| usize::try_from(rf).ok()) {
            // `topic created` (controller) and `offsets topic created` (groups).
            let topic = f.text("topic").unwrap_or("__consumer_offsets");
            self.replication_factors.insert(topic.to_string(), rf);
        }
        match target {
            "controller" if f.has("controller_epoch") => {
                self.controllers_elected += 1;
                if self.controllers_elected >= 2 {
                    reach(State::ControllerFailover);
                }
            }
            "replication" if f.has("min_insync_replicas") => reach(State::MinIsrRejection),
            // A truncation that removed records (`truncated_from` > `truncated_to`).
            "replication"
                if f.int("truncated_from")
                    .zip(f.int("truncated_to"))
                    .is_some_and(|(a, b)| a > b) =>
            {
                reach(State::FollowerTruncation)
            }
            "groups" if f.has("commit_refused") => reach(State::GroupRebalanceMidCommit),
            "groups" => {
                if let (Some(p), Some(epoch)) = (f.int("partition"), f.int("epoch")) {
                    let first = *self.offsets_loads.entry(p).or_insert(epoch);
                    if epoch > first {
                        reach(State::GroupCoordinatorMove);
                    }
                }
            }
            "log" if f.has("segments_deleted") => reach(State::RetentionDeletion),
            "log" if f.has("base") => reach(State::SegmentRoll),
            "gregor_core::broker" => {
                let cut = f.int("bytes_cut").unwrap_or(0) > 0 || f.int("segments_dropped").unwrap_or(0) > 0;
                if cut {
                    reach(State::DiskFaultRecoveredByChecksum);
                }
            }
            "gregor_core::coord::server" if f.text("role") == Some("Leader") => {
                if let Some(term) = f.int("term") {
                    let first = *self.coordinator_first_leader_term.get_or_insert(term);
                    if term > first {
                        reach(State::CoordinatorLeaderChange);
                    }
                }
            }
            _ => {}
        }
        // Leaders and ISRs (controller and replication events carry them).
        let (Some(topic), Some(partition)) = (f.text("topic"), f.int("partition")) else {
            return;
        };
        let key = (topic.to_string(), partition);
        if target == "controller" {
            if let Some(leader) = f.int("leader").filter(|&l| l >= 0) {
                let before = f.int("previous_leader").filter(|&l| l >= 0);
                let last = self.leaders.insert(key.clone(), leader).or(before);
                if last.is_some_and(|l| l != leader) && !topic.starts_with("__") {
                    self.observed.failovers_ms.push(virtual_ms());
                }
            }
        }
        if matches!(target, "controller" | "replication") {
            if let Some(isr) = f.text("isr").map(list_len) {
                // The size before: as the event says, else the last seen, else the whole
                // replica set (a partition starts with every replica in its ISR).
                let rf = self.replication_factors.get(topic).copied();
                let entry = self.isr.entry(key).or_insert((rf.unwrap_or(isr), false));
                let before = f.text("previous_isr").map(list_len).unwrap_or(entry.0);
                if isr < before {
                    entry.1 = true;
                    self.observed.states.insert(State::IsrShrink);
                } else if isr > before && entry.1 {
                    self.observed.states.insert(State::IsrExpand);
                }
                entry.0 = isr;
            }
        }
    }
}

impl Observer {
    /// Looks at one event (a subscriber that is not a layer stack calls it directly).
    pub(crate) fn observe(&self, event: &Event<'_>) {
        let target = event.metadata().target();
        if !TARGETS.contains(&target) {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        self.lock().classify(target, &fields);
    }
}

impl<S: Subscriber> Layer<S> for Observer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        self.observe(event);
    }
}

/// Over many runs of one scenario: how many runs (seeds) reached each state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    pub runs: usize,
    pub seeds: BTreeMap<State, usize>,
}

impl Coverage {
    /// Counts one run.
    pub fn add(&mut self, reached: &Reached) {
        self.runs += 1;
        for &s in &reached.0 {
            *self.seeds.entry(s).or_insert(0) += 1;
        }
    }

    /// Adds another batch of runs of the same scenario (a campaign's next batch).
    pub fn merge(&mut self, other: &Coverage) {
        self.runs += other.runs;
        for (&s, &n) in &other.seeds {
            *self.seeds.entry(s).or_insert(0) += n;
        }
    }

    pub fn seeds_reaching(&self, state: State) -> usize {
        self.seeds.get(&state).copied().unwrap_or(0)
    }

    /// The states of `required` no run reached.
    pub fn missing(&self, required: &[State]) -> Vec<State> {
        required
            .iter()
            .copied()
            .filter(|&s| self.seeds_reaching(s) == 0)
            .collect()
    }

    /// The coverage table: one row per (scenario name, coverage), one column per state (seeds
    /// that reached it, `.` for none, `!` after the count of a required state none reached...
    /// i.e. `0!`), and a legend of the column headings.
    pub fn render(rows: &[(&str, &Coverage, &[State])]) -> String {
        let name_w = rows.iter().map(|(n, _, _)| n.len()).chain([8]).max().unwrap_or(8);
        let mut out = format!("{:<name_w$}  {:>5}", "coverage", "seeds");
        for s in State::ALL {
            let _ = write!(out, "  {:>6}", s.short());
        }
        out.push('\n');
        for (name, coverage, required) in rows {
            let _ = write!(out, "{name:<name_w$}  {:>5}", coverage.runs);
            for s in State::ALL {
                let n = coverage.seeds_reaching(s);
                let mark = if required.contains(&s) { "*" } else { "" };
                let cell = match (n, mark) {
                    (0, "") => ".".to_string(),
                    (0, _) => "0!".to_string(),
                    (n, mark) => format!("{n}{mark}"),
                };
                let _ = write!(out, "  {cell:>6}");
            }
            out.push('\n');
        }
        out.push_str("(seeds that reached each state; * required by the scenario, 0! required and never reached)\n");
        for s in State::ALL {
            let _ = writeln!(out, "  {:<6} {}", s.short(), s.name());
        }
        out
    }
}

#[cfg(test)]
mod run_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn observe(f: impl FnOnce()) -> Observed {
        use tracing_subscriber::layer::SubscriberExt;
        let observer = Observer::default();
        let subscriber = tracing_subscriber::registry().with(observer.clone());
        tracing::subscriber::with_default(subscriber, f);
        observer.observed()
    }

    #[test]
    fn names_round_trip_and_are_unique() {
        for s in State::ALL {
            assert_eq!(State::from_name(s.name()), Some(s));
            assert!(s.short().len() <= 6);
        }
        let names: BTreeSet<&str> = State::ALL.iter().map(|s| s.name()).collect();
        let shorts: BTreeSet<&str> = State::ALL.iter().map(|s| s.short()).collect();
        assert_eq!((names.len(), shorts.len()), (State::ALL.len(), State::ALL.len()));
        assert_eq!(State::from_name("leader-failover"), None);
    }

    #[test]
    fn events_are_classified_by_target_and_fields() {
        let seen = observe(|| {
            let isr = |v: Vec<i32>| tracing::info!(target: "replication", topic = "t", partition = 0, isr = ?v, "x");
            tracing::info!(target: "controller", topic = "t", partition = 0, leader = 0, previous_leader = -1, isr = ?vec![0, 1, 2], "x");
            isr(vec![0, 1]);
            isr(vec![0, 1, 2]);
            tracing::info!(target: "controller", topic = "t", partition = 0, leader = 1, previous_leader = 0, isr = ?vec![1, 2], "x");
            tracing::info!(target: "controller", broker = 0, controller_epoch = 1, "x");
            tracing::debug!(target: "replication", topic = "t", partition = 0, isr_size = 1, min_insync_replicas = 2, "x");
            tracing::info!(target: "replication", topic = "t", partition = 0, truncated_from = 5, truncated_to = 5, "x");
            tracing::debug!(target: "log", dir = "t-0", base = 10, "x");
            // The same fields from another target mark nothing.
            tracing::info!(target: "elsewhere", segments_deleted = 1, commit_refused = "RebalanceInProgress", "x");
        });
        let reached = seen.reached(1_000, Some(1_000));
        let expect = [
            State::LeaderFailoverUnderLoad,
            State::IsrShrink,
            State::IsrExpand,
            State::MinIsrRejection,
            State::SegmentRoll,
        ];
        assert_eq!(reached.0, expect.into_iter().collect(), "{}", reached.names());
        // One controller election is no failover; a truncation that removes nothing is none.
        assert!(!reached.has(State::ControllerFailover) && !reached.has(State::FollowerTruncation));
        // A failover after the producers stopped, or with no send after it, is not under load.
        assert!(!seen.reached(0, Some(1_000)).has(State::LeaderFailoverUnderLoad));
        assert!(!seen.reached(1_000, None).has(State::LeaderFailoverUnderLoad));
    }

    #[test]
    fn second_elections_mark_failovers() {
        #[derive(Debug)]
        enum Role {
            Leader,
        }
        let seen = observe(|| {
            for epoch in [1, 2] {
                tracing::info!(target: "controller", broker = epoch, controller_epoch = epoch, "x");
                tracing::info!(target: "gregor_core::coord::server", node = 0, role = ?Role::Leader, term = epoch, "x");
            }
            tracing::info!(target: "groups", partition = 3, epoch = 1, "loaded");
            tracing::info!(target: "groups", partition = 3, epoch = 4, "loaded");
            tracing::info!(target: "groups", group = "g", commit_refused = ?"IllegalGeneration", "x");
            tracing::info!(target: "log", topic = "t", partition = 0, segments_deleted = 2, "x");
            tracing::info!(target: "gregor_core::broker", partition = "t-0", bytes_cut = 0, segments_dropped = 1, "x");
        });
        let reached = seen.reached(0, None);
        let expect = [
            State::ControllerFailover,
            State::CoordinatorLeaderChange,
            State::GroupCoordinatorMove,
            State::GroupRebalanceMidCommit,
            State::RetentionDeletion,
            State::DiskFaultRecoveredByChecksum,
        ];
        assert_eq!(reached.0, expect.into_iter().collect(), "{}", reached.names());
    }

    #[test]
    fn coverage_adds_merges_and_renders() {
        let mut a = Coverage::default();
        a.add(&Reached([State::IsrShrink].into_iter().collect()));
        a.add(&Reached::default());
        let mut b = Coverage::default();
        b.add(&Reached([State::IsrShrink, State::SegmentRoll].into_iter().collect()));
        a.merge(&b);
        assert_eq!((a.runs, a.seeds_reaching(State::IsrShrink)), (3, 2));
        assert_eq!(
            a.missing(&[State::IsrShrink, State::FollowerTruncation]),
            vec![State::FollowerTruncation]
        );
        let table = Coverage::render(&[("s", &a, &[State::IsrShrink, State::FollowerTruncation])]);
        let row = table.lines().nth(1).expect("a row");
        assert!(
            row.starts_with("s ") && row.contains(" 2*") && row.contains(" 0!"),
            "{table}"
        );
    }
}
