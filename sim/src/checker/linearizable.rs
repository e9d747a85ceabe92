//! The coordinator's client-visible history and a linearizability checker over it.
//!
//! The history format is shared: the coordinator's clients in the simulator record [`CoordOp`]s
//! as they saw them (Jepsen style), and [`check`] decides whether some total order of them, each
//! taking effect at one instant between its invoke and its completion, is legal for a per-path
//! model of the tree. Nothing here trusts what the coordinator says about itself.
//!
//! The search is Wing & Gong's, with Lowe's memoisation (a (linearized set, model state) pair is
//! explored once) and P-compositionality (each path is an independent object, checked on its
//! own: linearizability is local). An op whose outcome is unknown (`complete_ms: None` or
//! `CoordOutcome::Unknown`) may take effect at any time after its invoke with whatever result
//! the model gives, or never (it is placed after everything else). Each path's search is bounded
//! by a budget of explored states; a path past it is reported "too large to check", never hangs.
//!
//! Model per path: absent, or (data, version). Create on absent -> (data, 0) else NodeExists;
//! Set with expected version None or equal -> version + 1 else BadVersion (NoNode when absent);
//! Delete likewise; Read returns the state. Nodes that change without a client op (an
//! ephemeral node removed by session expiry) are outside this model: record them as ops of a
//! pseudo-process, or keep such paths out of the history.

use std::collections::{BTreeMap, BTreeSet};

use super::{AnomalyKind, Finding};

/// One client operation on the coordinator, as a client saw it (Jepsen style).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoordOp {
    pub process: u32,
    pub path: String,
    pub kind: CoordOpKind,
    pub invoke_ms: u64,
    /// None: the outcome is unknown (timeout, connection lost): the op may or may not have taken effect, at any time after invoke.
    pub complete_ms: Option<u64>,
    pub outcome: CoordOutcome,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoordOpKind {
    /// Sync, then get.
    Read,
    Create {
        data: Vec<u8>,
    },
    Set {
        data: Vec<u8>,
        expected_version: Option<i32>,
    },
    Delete {
        expected_version: Option<i32>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoordOutcome {
    /// The data and version read; `None` when the node did not exist.
    Read(Option<(Vec<u8>, i32)>),
    Created,
    SetOk {
        version: i32,
    },
    Deleted,
    NoNode,
    NodeExists,
    BadVersion,
    Unknown,
}

/// Explored states one path's search may use before it gives up ("too large to check").
pub const STATES_PER_PATH_MAX_DEFAULT: usize = 200_000;

/// A node's state in the model: absent, or its data and version.
pub type NodeState = Option<(Vec<u8>, i32)>;

/// The model's step: the state after `kind` and the outcome a correct coordinator returns.
pub fn apply(state: &NodeState, kind: &CoordOpKind) -> (NodeState, CoordOutcome) {
    let matches = |expected: &Option<i32>, version: i32| expected.is_none_or(|e| e == version);
    match (kind, state) {
        (CoordOpKind::Read, s) => (s.clone(), CoordOutcome::Read(s.clone())),
        (CoordOpKind::Create { data }, None) => (Some((data.clone(), 0)), CoordOutcome::Created),
        (CoordOpKind::Create { .. }, s @ Some(_)) => (s.clone(), CoordOutcome::NodeExists),
        (CoordOpKind::Set { .. } | CoordOpKind::Delete { .. }, None) => (None, CoordOutcome::NoNode),
        (CoordOpKind::Set { data, expected_version }, Some((_, v))) if matches(expected_version, *v) => {
            let next = v.saturating_add(1);
            (Some((data.clone(), next)), CoordOutcome::SetOk { version: next })
        }
        (CoordOpKind::Delete { expected_version }, Some((_, v))) if matches(expected_version, *v) => {
            (None, CoordOutcome::Deleted)
        }
        (CoordOpKind::Set { .. } | CoordOpKind::Delete { .. }, s @ Some(_)) => (s.clone(), CoordOutcome::BadVersion),
    }
}

impl CoordOp {
    /// Whether the client never learned what happened: the op may or may not have taken effect.
    pub fn is_unknown(&self) -> bool {
        self.complete_ms.is_none() || self.outcome == CoordOutcome::Unknown
    }
}

/// What one path's search concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathVerdict {
    Linearizable {
        states: usize,
    },
    /// No order explains the ops. `detail` names the furthest the search got.
    Violation {
        detail: String,
    },
    TooLarge {
        states: usize,
    },
}

/// What the checker compared and found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinReport {
    /// Ops and paths whose search finished (linearizable or not).
    pub ops_checked: usize,
    pub unknown_ops: usize,
    pub paths_checked: usize,
    /// Path -> why no order explains its history.
    pub violations: BTreeMap<String, String>,
    /// Paths whose search ran past the budget: neither passed nor failed.
    pub too_large: BTreeSet<String>,
}

impl LinReport {
    /// A check that finished no path proves nothing, and fails.
    pub fn compared_nothing(&self) -> bool {
        self.ops_checked == 0
    }

    pub fn ok(&self) -> bool {
        self.violations.is_empty() && !self.compared_nothing()
    }

    /// The violations as checker findings (`nonlinearizable`), one per path.
    pub fn findings(&self) -> Vec<Finding> {
        self.violations
            .iter()
            .map(|(path, why)| Finding {
                kind: AnomalyKind::Nonlinearizable,
                detail: format!("{path}: {why}"),
            })
            .collect()
    }

    pub fn summary(&self) -> String {
        let mut out = format!(
            "linearizability: compared {} coordinator ops ({} with unknown outcome) on {} paths; {} not linearizable, {} too large to check",
            self.ops_checked,
            self.unknown_ops,
            self.paths_checked,
            self.violations.len(),
            self.too_large.len()
        );
        for (path, why) in &self.violations {
            out.push_str(&format!("\n  nonlinearizable {path}: {why}"));
        }
        for path in &self.too_large {
            out.push_str(&format!("\n  too large to check: {path}"));
        }
        out
    }
}

/// Checks a whole history path by path. `initial` holds nodes that existed before the history
/// began (other paths start absent); `states_per_path_max` bounds each path's search.
pub fn check(ops: &[CoordOp], initial: &BTreeMap<String, (Vec<u8>, i32)>, states_per_path_max: usize) -> LinReport {
    let mut by_path: BTreeMap<&str, Vec<&CoordOp>> = BTreeMap::new();
    for op in ops {
        by_path.entry(op.path.as_str()).or_default().push(op);
    }
    let mut report = LinReport::default();
    for (path, path_ops) in by_path {
        let init = initial.get(path).cloned();
        match check_path(&path_ops, init, states_per_path_max) {
            PathVerdict::TooLarge { .. } => {
                report.too_large.insert(path.to_string());
                continue;
            }
            PathVerdict::Violation { detail } => {
                report.violations.insert(path.to_string(), detail);
            }
            PathVerdict::Linearizable { .. } => {}
        }
        report.paths_checked += 1;
        report.ops_checked += path_ops.len();
        report.unknown_ops += path_ops.iter().filter(|o| o.is_unknown()).count();
    }
    report
}

const NIL: usize = usize::MAX;

/// The history's calls and returns as a doubly linked list in time order, from which the
/// search lifts an op's pair when it linearizes it and puts it back when it backtracks.
struct Events {
    /// (op index, is_call).
    entries: Vec<(usize, bool)>,
    /// For a call entry, its return entry.
    partner: Vec<usize>,
    prev: Vec<usize>,
    next: Vec<usize>,
    head: usize,
}

impl Events {
    fn new(ops: &[&CoordOp]) -> Events {
        // A return at the same instant as another op's call counts as concurrent with it (calls
        // sort first): the checker errs towards accepting, never towards a false alarm.
        let mut keyed: Vec<(u64, u8, usize)> = Vec::with_capacity(ops.len() * 2);
        for (i, op) in ops.iter().enumerate() {
            keyed.push((op.invoke_ms, 0, i));
            let done = if op.is_unknown() {
                u64::MAX
            } else {
                op.complete_ms.expect("known ops completed").max(op.invoke_ms)
            };
            keyed.push((done, 1, i));
        }
        keyed.sort_unstable();
        let n = keyed.len();
        let entries: Vec<(usize, bool)> = keyed.iter().map(|&(_, k, i)| (i, k == 0)).collect();
        let mut call_at = vec![NIL; ops.len()];
        let mut partner = vec![NIL; n];
        for (e, &(i, is_call)) in entries.iter().enumerate() {
            if is_call {
                call_at[i] = e;
            } else {
                partner[call_at[i]] = e;
            }
        }
        let prev = (0..n).map(|e| if e == 0 { NIL } else { e - 1 }).collect();
        let next = (0..n).map(|e| if e + 1 == n { NIL } else { e + 1 }).collect();
        Events {
            entries,
            partner,
            prev,
            next,
            head: if n == 0 { NIL } else { 0 },
        }
    }

    fn unlink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p] = n;
        }
        if n != NIL {
            self.prev[n] = p;
        }
    }

    fn relink(&mut self, e: usize) {
        let (p, n) = (self.prev[e], self.next[e]);
        if p == NIL {
            self.head = e;
        } else {
            self.next[p] = e;
        }
        if n != NIL {
            self.prev[n] = e;
        }
    }

    /// Removes a call and its return (the return first: put back in the reverse order).
    fn lift(&mut self, call: usize) {
        self.unlink(call);
        self.unlink(self.partner[call]);
    }

    fn unlift(&mut self, call: usize) {
        self.relink(self.partner[call]);
        self.relink(call);
    }
}

/// One path's search.
pub fn check_path(ops: &[&CoordOp], initial: NodeState, states_max: usize) -> PathVerdict {
    let mut events = Events::new(ops);
    let mut known_left = ops.iter().filter(|o| !o.is_unknown()).count();
    let words = ops.len().div_ceil(64);
    let mut linearized = vec![0u64; words];
    let mut state = initial;
    let mut seen: BTreeSet<(Vec<u64>, NodeState)> = BTreeSet::new();
    // (call entry, state before it)
    let mut stack: Vec<(usize, NodeState)> = Vec::new();
    let mut deepest: (usize, NodeState, Option<usize>) = (0, state.clone(), None);
    let mut cur = events.head;
    let mut steps = 0usize;
    while known_left > 0 {
        steps += 1;
        if steps > states_max {
            return PathVerdict::TooLarge { states: seen.len() };
        }
        if cur == NIL {
            // Unreachable while known ops are left: their returns (finite times) sort before
            // the end of the list. Counted as a pass only if it were reached with none left.
            break;
        }
        let (i, is_call) = events.entries[cur];
        if is_call {
            let op = ops[i];
            let (after, outcome) = apply(&state, &op.kind);
            // An unknown op that would change nothing here is no different from one that never
            // took effect (always allowed): placing it would only multiply the states searched.
            let pointless = op.is_unknown() && after == state;
            if !pointless && (op.is_unknown() || outcome == op.outcome) {
                let mut bits = linearized.clone();
                bits[i / 64] |= 1 << (i % 64);
                if seen.insert((bits.clone(), after.clone())) {
                    stack.push((cur, std::mem::replace(&mut state, after)));
                    linearized = bits;
                    if !op.is_unknown() {
                        known_left -= 1;
                    }
                    events.lift(cur);
                    if stack.len() > deepest.0 {
                        deepest = (stack.len(), state.clone(), None);
                    }
                    cur = events.head;
                    continue;
                }
            }
            cur = events.next[cur];
        } else {
            // An op returned before it could be placed: undo the last choice.
            if stack.len() == deepest.0 && deepest.2.is_none() {
                deepest.2 = Some(i);
            }
            let Some((call, before)) = stack.pop() else {
                let (depth, at, stuck) = deepest;
                let stuck = stuck.map_or("?".to_string(), |s| format!("{:?}", ops[s]));
                return PathVerdict::Violation {
                    detail: format!(
                        "no order of its {} ops is legal; the longest legal prefix placed {depth} ops, reaching state {}, and then could not place {stuck}",
                        ops.len(),
                        show_state(&at)
                    ),
                };
            };
            let j = events.entries[call].0;
            linearized[j / 64] &= !(1 << (j % 64));
            if !ops[j].is_unknown() {
                known_left += 1;
            }
            state = before;
            events.unlift(call);
            cur = events.next[call];
        }
    }
    PathVerdict::Linearizable { states: seen.len() }
}

fn show_state(s: &NodeState) -> String {
    match s {
        None => "absent".to_string(),
        Some((data, version)) => format!("{:?} at version {version}", String::from_utf8_lossy(data)),
    }
}

#[cfg(test)]
mod tests;
