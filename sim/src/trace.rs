//! The replay trace of a run: every `tracing` event the run emits (Gregor's, madsim's, the
//! nemesis's), folded into one stable hash, and optionally printed to stderr through a filter.
//!
//! What it owns: [`Capture`], a subscriber whose events feed a hash, the coverage observer
//! (`crate::coverage`) and (optionally) a printer,
//! and [`capture`], which installs one for the duration of a closure on the calling thread.
//!
//! Contract:
//! - The hash is a pure function of the sequence of events: for each one, its virtual time in ms
//!   (madsim's elapsed time if the event happens inside a simulation, else none), level, target,
//!   the names and fields of the spans around it (outermost first), and its fields in their
//!   declared order, formatted with `Debug` (strings as written). It is 64-bit FNV-1a over those
//!   bytes: no `RandomState`, no addresses, nothing that differs between two runs of one seed.
//!   So "same seed, same trace hash" holds exactly when the runs emitted the same events.
//!   One exception: madsim's task ids come from a process-wide counter, so they differ between
//!   two runs of one seed in one process (or runs in parallel); they are not hashed.
//! - Every event is hashed, whatever the print filter says; the filter only chooses what is
//!   printed (`RUST_LOG` syntax, e.g. `nemesis=info,gregor_core=debug`).
//! - Per thread: [`capture`] uses `tracing::subscriber::with_default`, so parallel runs on their
//!   own threads each hash only their own events. `crate::world::run_seed` hands the caller's
//!   dispatcher to the run's thread, so a capture around `run_seed` covers the whole run; to
//!   capture on another thread, install [`Capture::dispatch`] there yourself.
//!
//! Fault model: none; a field whose `Debug` output is not deterministic (a std `HashMap`, an
//! address) makes the hash differ between runs, which `gregor-sim check-determinism` then shows.

use std::fmt::{self, Write as _};
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Dispatch, Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{EnvFilter, Layer};

use crate::coverage::{Observed, Observer};

/// What a capture saw: the hash of every event and how many there were.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TraceSummary {
    pub hash: u64,
    pub events: u64,
}

/// A print filter that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("trace filter {filter:?}: {why}")]
pub struct FilterError {
    pub filter: String,
    pub why: String,
}

/// The filter used for printing when none is given and `RUST_LOG` is unset.
pub const PRINT_FILTER_DEFAULT: &str = "info";

/// Checks a print filter (`RUST_LOG` syntax) without capturing anything: the CLI refuses a bad
/// one before it runs a seed.
pub fn parse_filter(filter: &str) -> Result<EnvFilter, FilterError> {
    EnvFilter::try_new(filter).map_err(|e| FilterError {
        filter: filter.to_string(),
        why: e.to_string(),
    })
}

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

#[derive(Debug)]
struct Fnv {
    hash: u64,
    events: u64,
}

impl Fnv {
    fn new() -> Self {
        Fnv {
            hash: FNV_OFFSET_BASIS,
            events: 0,
        }
    }

    fn add(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.hash ^= u64::from(b);
            self.hash = self.hash.wrapping_mul(FNV_PRIME);
        }
        self.events += 1;
    }
}

/// The hashing half of a capture: sees every event.
struct HashLayer {
    state: Arc<Mutex<Fnv>>,
}

/// The target of madsim's task module, whose events carry process-wide task ids.
const MADSIM_TASK_TARGET: &str = "madsim::sim::task";

/// A span's fields as formatted at creation (and on `record`), kept in its extensions.
struct SpanFields(String);

/// Formats fields as ` name=value`, strings as written, in the order the callsite declares them,
/// leaving out the field named `skip`.
struct FieldWriter<'a> {
    out: &'a mut String,
    skip: Option<&'static str>,
}

impl<'a> FieldWriter<'a> {
    /// madsim numbers tasks from one process-wide counter, so a task's `id` depends on every run
    /// the process made before: it is left out of the hash (the printed trace still shows it).
    /// Task ids appear as `id` in madsim's `task` spans and in the events of its task module
    /// (`spawn task`), whose node ids are named `node` instead.
    fn for_event(out: &'a mut String, meta: &tracing::Metadata<'_>) -> Self {
        let task_ids = meta.target() == MADSIM_TASK_TARGET;
        FieldWriter {
            out,
            skip: task_ids.then_some("id"),
        }
    }

    fn for_span(out: &'a mut String, meta: &tracing::Metadata<'_>) -> Self {
        let task_ids = meta.name() == "task" && meta.target().starts_with("madsim");
        FieldWriter {
            out,
            skip: task_ids.then_some("id"),
        }
    }

    fn skips(&self, field: &Field) -> bool {
        self.skip == Some(field.name())
    }
}

impl Visit for FieldWriter<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if !self.skips(field) {
            let _ = write!(self.out, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if !self.skips(field) {
            let _ = write!(self.out, " {}={value:?}", field.name());
        }
    }
}

fn virtual_ms() -> Option<u128> {
    madsim::time::TimeHandle::try_current().map(|t| t.elapsed().as_millis())
}

impl<S> Layer<S> for HashLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = String::new();
        attrs.record(&mut FieldWriter::for_span(&mut fields, attrs.metadata()));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(fields));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            let meta = span.metadata();
            let mut extensions = span.extensions_mut();
            if let Some(SpanFields(fields)) = extensions.get_mut::<SpanFields>() {
                values.record(&mut FieldWriter::for_span(fields, meta));
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut line = event_line_start(event);
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                let extensions = span.extensions();
                let fields = extensions.get::<SpanFields>().map(|SpanFields(f)| f.as_str());
                push_span(&mut line, span.name(), fields);
            }
        }
        hash_event(&self.state, line, event);
    }
}

/// The hashed line of an event up to its spans: virtual time, level, target.
fn event_line_start(event: &Event<'_>) -> String {
    let meta = event.metadata();
    let mut line = String::with_capacity(128);
    match virtual_ms() {
        Some(ms) => {
            let _ = write!(line, "{ms}");
        }
        None => line.push('-'),
    }
    let _ = write!(line, " {} {} ", meta.level(), meta.target());
    line
}

/// One span around an event, in the hashed line (outermost first).
fn push_span(line: &mut String, name: &str, fields: Option<&str>) {
    line.push_str(name);
    if let Some(fields) = fields {
        let _ = write!(line, "{{{fields} }}");
    }
    line.push(':');
}

/// Ends the line with the event's fields and folds it into the hash.
fn hash_event(state: &Mutex<Fnv>, mut line: String, event: &Event<'_>) {
    event.record(&mut FieldWriter::for_event(&mut line, event.metadata()));
    line.push('\n');
    state
        .lock()
        .expect("trace hash lock poisoned: a panic while hashing already failed the run")
        .add(line.as_bytes());
}

/// The subscriber of a capture that prints nothing: the same hash and observations as the
/// registry with [`HashLayer`] and the observer, from a plain slab of spans. madsim enters and
/// leaves its task span around every poll of every task, and the registry's bookkeeping for it
/// (sharded-slab lookups, reference counts, a call per layer) was 5-8% of a loaded run's CPU.
///
/// It keeps the registry's semantics that the hash depends on: a span's parent is the explicit
/// one, else the current span of the thread (none for a root span); an event's spans are its
/// explicit parent, else the current span, and their parents up to the root; the current span
/// is the latest entered one not entered before it on the same thread's stack (re-entries are
/// duplicates, as in the registry's span stack).
///
/// Unlike the registry it forgets no span before the capture ends (one seed): a run creates a
/// few hundred (madsim's node and task spans, each task's living as long as the task), and
/// counting their references cost four lock round trips per task poll (madsim clones and enters
/// the task's span around every poll), ~2% of a loaded run's CPU. A span's id is never reused,
/// so no event can be given a chain that is not its own; ids are not hashed.
struct Quiet {
    /// Tells this subscriber's entries on a thread's stack from another capture's.
    stack_key: usize,
    state: Arc<Mutex<Fnv>>,
    observer: Observer,
    /// Every span of the capture, by id - 1.
    spans: Mutex<Vec<QuietSpan>>,
}

struct QuietSpan {
    name: &'static str,
    meta: &'static tracing::Metadata<'static>,
    fields: String,
    parent: Option<Id>,
}

/// One entered span on a thread's stack: the capture's key, the span, whether it was already
/// on the stack when entered (a duplicate).
type StackEntry = (usize, u64, bool);

std::thread_local! {
    static QUIET_STACK: std::cell::RefCell<Vec<StackEntry>> = const { std::cell::RefCell::new(Vec::new()) };
}

static QUIET_KEYS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn slot(id: &Id) -> usize {
    usize::try_from(id.into_u64() - 1).expect("span ids come from slab indexes")
}

impl Quiet {
    fn new(state: Arc<Mutex<Fnv>>, observer: Observer) -> Self {
        Quiet {
            stack_key: QUIET_KEYS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            state,
            observer,
            spans: Mutex::new(Vec::new()),
        }
    }

    fn slab(&self) -> std::sync::MutexGuard<'_, Vec<QuietSpan>> {
        self.spans
            .lock()
            .expect("span slab lock poisoned: a panic while tracing already failed the run")
    }

    /// The thread's current span for this capture: the latest entry that is not a duplicate.
    fn current(&self) -> Option<Id> {
        QUIET_STACK.with(|stack| {
            stack
                .borrow()
                .iter()
                .rev()
                .find(|&&(key, _, duplicate)| key == self.stack_key && !duplicate)
                .map(|&(_, id, _)| Id::from_u64(id))
        })
    }
}

impl Subscriber for Quiet {
    fn register_callsite(&self, _meta: &'static tracing::Metadata<'static>) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::always()
    }

    fn enabled(&self, _meta: &tracing::Metadata<'_>) -> bool {
        true
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }

    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        let parent = if attrs.is_root() {
            None
        } else if attrs.is_contextual() {
            self.current()
        } else {
            attrs.parent().cloned()
        };
        let meta = attrs.metadata();
        let mut fields = String::new();
        attrs.record(&mut FieldWriter::for_span(&mut fields, meta));
        let span = QuietSpan {
            name: meta.name(),
            meta,
            fields,
            parent,
        };
        let mut slab = self.slab();
        slab.push(span);
        let index = slab.len() - 1;
        Id::from_u64(index as u64 + 1)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        if let Some(span) = self.slab().get_mut(slot(span)) {
            values.record(&mut FieldWriter::for_span(&mut span.fields, span.meta));
        }
    }

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut line = event_line_start(event);
        let leaf = if event.is_root() {
            None
        } else if event.is_contextual() {
            self.current()
        } else {
            event.parent().cloned()
        };
        if let Some(leaf) = leaf {
            let slab = self.slab();
            let mut chain = Vec::new();
            let mut at = Some(leaf);
            while let Some(span) = at.as_ref().and_then(|id| slab.get(slot(id))) {
                chain.push(span);
                at = span.parent.clone();
            }
            for span in chain.iter().rev() {
                push_span(&mut line, span.name, Some(&span.fields));
            }
        }
        hash_event(&self.state, line, event);
        self.observer.observe(event);
    }

    fn enter(&self, span: &Id) {
        QUIET_STACK.with(|stack| {
            let mut stack = stack.borrow_mut();
            let id = span.into_u64();
            let duplicate = stack.iter().any(|&(key, s, _)| key == self.stack_key && s == id);
            stack.push((self.stack_key, id, duplicate));
        });
    }

    fn exit(&self, span: &Id) {
        QUIET_STACK.with(|stack| {
            let mut stack = stack.borrow_mut();
            let id = span.into_u64();
            let ours = |&(key, s, _): &StackEntry| key == self.stack_key && s == id;
            // Spans are almost always exited in the reverse order of their entering (madsim's
            // task span around every task poll): the last entry, popped without a search.
            if stack.last().is_some_and(ours) {
                stack.pop();
            } else if let Some(at) = stack.iter().rposition(ours) {
                stack.remove(at);
            }
        });
    }

    fn clone_span(&self, id: &Id) -> Id {
        id.clone()
    }

    /// Spans are kept until the capture ends (see the type's notes): none closes here.
    fn try_close(&self, _id: Id) -> bool {
        false
    }
}

/// Prints the virtual time of the simulation an event happens in (`-` outside one).
struct VirtualTime;

impl FormatTime for VirtualTime {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        match madsim::time::TimeHandle::try_current() {
            Some(t) => {
                let elapsed = t.elapsed();
                write!(w, "{:>5}.{:03}s", elapsed.as_secs(), elapsed.subsec_millis())
            }
            None => write!(w, "{:>10}", "-"),
        }
    }
}

/// A subscriber that hashes every event and prints the ones its filter lets through.
#[derive(Clone)]
pub struct Capture {
    state: Arc<Mutex<Fnv>>,
    observer: Observer,
    dispatch: Dispatch,
}

impl fmt::Debug for Capture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Capture").field("summary", &self.summary()).finish()
    }
}

impl Capture {
    /// A capture that prints to stderr if `print`, through `filter` (or `RUST_LOG`, or
    /// [`PRINT_FILTER_DEFAULT`]).
    pub fn new(print: bool, filter: Option<&str>) -> Result<Capture, FilterError> {
        let state = Arc::new(Mutex::new(Fnv::new()));
        let printer = if print {
            let from_env = std::env::var("RUST_LOG").ok();
            let filter = parse_filter(filter.or(from_env.as_deref()).unwrap_or(PRINT_FILTER_DEFAULT))?;
            Some(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(false)
                    .with_timer(VirtualTime)
                    .with_filter(filter),
            )
        } else {
            None
        };
        let observer = Observer::default();
        let dispatch = match printer {
            Some(printer) => Dispatch::new(
                tracing_subscriber::registry()
                    .with(HashLayer { state: state.clone() })
                    .with(observer.clone())
                    .with(printer),
            ),
            None => Dispatch::new(Quiet::new(state.clone(), observer.clone())),
        };
        Ok(Capture {
            state,
            observer,
            dispatch,
        })
    }

    /// The subscriber, to install on a thread (`tracing::dispatcher::set_default`).
    pub fn dispatch(&self) -> &Dispatch {
        &self.dispatch
    }

    /// The hard states the events seen so far reached (`crate::coverage`).
    pub fn observed(&self) -> Observed {
        self.observer.observed()
    }

    /// The hash and count of the events seen so far.
    pub fn summary(&self) -> TraceSummary {
        let state = self
            .state
            .lock()
            .expect("trace hash lock poisoned: a panic while hashing already failed the run");
        TraceSummary {
            hash: state.hash,
            events: state.events,
        }
    }
}

/// Runs `f` with a fresh [`Capture`] as this thread's subscriber and returns what `f` returned
/// with the hash of every event it emitted (on this thread, or in a `run_seed` it called).
pub fn capture<T>(print: bool, filter: Option<&str>, f: impl FnOnce() -> T) -> Result<(T, TraceSummary), FilterError> {
    let capture = Capture::new(print, filter)?;
    let value = tracing::dispatcher::with_default(capture.dispatch(), f);
    Ok((value, capture.summary()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emit(value: u64, other_target: bool) {
        let span = tracing::info_span!("node", name = "broker-0");
        let _entered = span.enter();
        tracing::info!(target: "nemesis", node = "broker-1", "crash");
        if other_target {
            tracing::debug!(target: "elsewhere", value, "checked");
        } else {
            tracing::debug!(target: "nemesis", value, "checked");
        }
    }

    fn hash_of(f: impl FnOnce()) -> TraceSummary {
        capture(false, None, f).expect("no filter to parse").1
    }

    #[test]
    fn same_events_give_the_same_hash() {
        let a = hash_of(|| emit(7, false));
        let b = hash_of(|| emit(7, false));
        assert_eq!(a, b);
        assert_eq!(a.events, 2);
        assert_ne!(a.hash, FNV_OFFSET_BASIS, "events were hashed");
    }

    #[test]
    fn a_different_event_gives_a_different_hash() {
        let base = hash_of(|| emit(7, false));
        assert_ne!(base.hash, hash_of(|| emit(8, false)).hash, "a field value");
        assert_ne!(base.hash, hash_of(|| emit(7, true)).hash, "a target");
        let spanless = hash_of(|| {
            tracing::info!(target: "nemesis", node = "broker-1", "crash");
            tracing::debug!(target: "nemesis", value = 7u64, "checked");
        });
        assert_ne!(base.hash, spanless.hash, "the span around the events");
        let reordered = hash_of(|| {
            tracing::debug!(target: "nemesis", value = 7u64, "checked");
            tracing::info!(target: "nemesis", node = "broker-1", "crash");
        });
        assert_ne!(spanless.hash, reordered.hash, "the order of events");
    }

    #[test]
    fn events_inside_a_simulation_are_hashed_with_their_virtual_time() {
        let run = |sleep_ms: u64| {
            capture(false, None, || {
                crate::world::run_seed(1, move |_world| async move {
                    madsim::time::sleep(std::time::Duration::from_millis(sleep_ms)).await;
                    tracing::info!(target: "nemesis", "tick");
                })
            })
            .expect("no filter")
            .1
        };
        let (a, b) = (run(1500), run(1500));
        assert_eq!(a, b, "same run, same hash");
        assert!(a.events >= 1, "the run thread's events reach the capture: {a:?}");
        assert_ne!(a.hash, run(2500).hash, "the same event at another virtual time");
    }

    /// The quiet subscriber (no printer) and the registry (a printer that prints nothing) hash
    /// and observe a whole cluster run alike: madsim's node and task spans, instrumented
    /// connects, explicit and contextual parents, spans entered again while entered.
    #[test]
    fn quiet_and_registry_captures_agree_on_a_cluster_run() {
        for file in [
            "replication/acks_all_min_isr2_broker_crashes_no_loss.toml",
            "replication/acks_all_min_isr2_swarm_faults_no_loss.toml",
            "bench/three_brokers_three_coordinators_1000_per_s.toml",
        ] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../scenarios")
                .join(file);
            let mut scenario = crate::scenario::Scenario::load(&path).expect("the scenario loads");
            scenario.duration_s = scenario.duration_s.min(12);
            let run = |print_trace: bool| {
                let options = crate::run::RunOptions {
                    seed: 3,
                    print_trace,
                    trace_filter: Some("off".to_string()),
                };
                let result = crate::run::run_scenario(&scenario, &options);
                assert!(result.error.is_none(), "{file}: {:?}", result.error);
                (result.trace_hash, result.coverage, result.report.counts())
            };
            let quiet = run(false);
            assert_eq!(quiet, run(true), "{file}: quiet vs registry capture");
            assert_ne!(quiet.0, 0, "{file}");
        }
    }

    #[test]
    fn the_filter_chooses_what_is_printed_not_what_is_hashed() {
        let quiet = hash_of(|| emit(7, false));
        let printed = capture(true, Some("nemesis=info"), || emit(7, false))
            .expect("filter parses")
            .1;
        assert_eq!(quiet, printed);
        assert!(capture(true, Some("nemesis=loud"), || ()).is_err());
    }
}
