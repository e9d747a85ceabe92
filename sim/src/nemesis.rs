//! The nemesis: plays a scenario's faults against a [`World`] — the explicit `[[faults.schedule]]`
//! entries and the random faults of a named [`Profile`] — and records each fault and each
//! opposite it applied as a [`FaultEvent`] (and a `tracing` event with target `nemesis`, so the
//! replay trace shows them).
//!
//! Contract:
//! - [`Nemesis::play`] runs for the scenario's `duration_s` of virtual time from the moment it
//!   is called, then heals: every fault still in force gets its opposite, in the order the
//!   faults would have healed, so the heal phase that follows has no faults in it. A scheduled
//!   fault happens `at_s` after `play` starts, its opposite `heal_after_s` later (or at the heal).
//! - Random faults draw only from the run's [`Purpose::Nemesis`] stream, and scheduled targets
//!   come from the caller's `resolve`, so the faults of a run are a pure function of its seed
//!   (given a deterministic cluster). Random faults never hit a node some other nemesis fault
//!   still holds, and at most [`Profile::concurrent_max`] of them are in force at once.
//! - Fault kinds and their opposites (scenario names): `crash` = process kill plus power loss
//!   of its disk ([`World::kill`]), opposite restart; `kill` = process kill only, the disk keeps
//!   unsynced writes ([`World::kill_process`]), opposite restart; `disk-lost` = process kill
//!   and an empty disk in place of the old one ([`World::lose_disk`]), opposite restart;
//!   `pause`/resume;
//!   `isolate`/rejoin; `disk-full` (ENOSPC past the disk's current usage)/drain;
//!   `sync-fail` (fsync EIO)/heal; `clock-skew` (+[`CLOCK_SKEW_MS`])/unskew;
//!   `duplicate-frames` and `corrupt-frames` (a share of the node's Kafka frames delivered twice,
//!   or with a bit flipped in a record batch: `crate::runtime::frame_faults`)/heal;
//!   `bridge` (the other brokers and coordinators cut into two halves that only the named node
//!   joins)/repair; `swizzle-clog` (nodes clogged one at a time, every [`SWIZZLE_STEP_MS`], then
//!   unclogged one at a time in another order: each step is its own event, `swizzle-clog` and
//!   `swizzle-unclog`). Random profiles add `partition-halves` (the brokers and coordinators cut
//!   in two)/repair, and draw bridges and swizzles over their targets. A restart only starts a
//!   node that is down, so overlapping faults never kill a node a second time.
//! - Clogging (madsim's) stalls messages, it does not drop them: a swizzle is FoundationDB's
//!   "swizzle-clogging", which finds bugs that depend on the order links come back in.
//! - `FaultEvent::at_ms` is virtual time since the simulation started, like the history's.

use std::time::Duration;

use rand_chacha::rand_core::RngCore;
use rand_chacha::ChaCha8Rng;

use crate::runtime::frame_faults::FrameRates;
use crate::scenario::{FaultKind, Scenario, ScheduledFault, FRAME_FAULT_RATE_DEFAULT};
use crate::seed::{self, Purpose};
use crate::world::{Fault, NodeIndex, World};

/// How far a `clock-skew` fault moves a node's wall clock ahead.
pub const CLOCK_SKEW_MS: i64 = 60_000;

/// The time between two steps of a swizzle (clogging one node, or unclogging one).
pub const SWIZZLE_STEP_MS: u64 = 500;

/// Frame fault rates are held as parts per million (faults are compared, and f64 is not `Eq`).
const PPM: f64 = 1_000_000.0;

/// One fault or opposite the nemesis applied, for the run's result and the replay timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultEvent {
    /// Virtual ms since the simulation started.
    pub at_ms: u64,
    /// The node as the scenario named it, and which node that was (`leader=broker-1`); for a
    /// partition, the two sides (`broker-0,broker-2|broker-1`).
    pub node: String,
    /// The fault or opposite (`crash`, `restart`, ...), or why a scheduled fault was skipped.
    pub what: String,
}

/// The kinds of fault a random profile draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RandomFault {
    /// One of the scenario's fault kinds, on one node.
    Node(FaultKind),
    /// The brokers and coordinators cut into two halves.
    Halves,
    /// One node the only link between two halves of the others.
    Bridge,
    /// Some of the targets clogged one at a time, then unclogged one at a time in another order.
    Swizzle,
}

/// A named random fault profile (`[faults] profile = "..."`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Profile {
    pub name: &'static str,
    /// Mean virtual seconds between two random faults (each gap uniform in 0.5..1.5 of it).
    pub interval_s_mean: f64,
    /// How long a random fault lasts before its opposite.
    pub fault_s_min: f64,
    pub fault_s_max: f64,
    /// Random faults in force at once, at most.
    pub concurrent_max: usize,
    /// Coordinators may be targets too (brokers always are).
    pub coordinators_too: bool,
    /// Kinds with their relative weights; empty draws nothing.
    pub weights: &'static [(RandomFault, u32)],
    /// The share of frames a random `duplicate-frames` or `corrupt-frames` fault hits.
    pub frame_rate: f64,
}

/// Every profile a scenario may name.
pub const PROFILES: &[Profile] = &[
    Profile {
        name: "none",
        interval_s_mean: 1.0,
        fault_s_min: 0.0,
        fault_s_max: 0.0,
        concurrent_max: 0,
        coordinators_too: false,
        weights: &[],
        frame_rate: 0.0,
    },
    Profile {
        name: "crashes",
        interval_s_mean: 10.0,
        fault_s_min: 2.0,
        fault_s_max: 8.0,
        concurrent_max: 1,
        coordinators_too: false,
        weights: &[
            (RandomFault::Node(FaultKind::Crash), 3),
            (RandomFault::Node(FaultKind::Kill), 1),
        ],
        frame_rate: 0.0,
    },
    Profile {
        name: "partitions",
        interval_s_mean: 10.0,
        fault_s_min: 3.0,
        fault_s_max: 10.0,
        concurrent_max: 1,
        coordinators_too: true,
        weights: &[(RandomFault::Node(FaultKind::Isolate), 2), (RandomFault::Halves, 1)],
        frame_rate: 0.0,
    },
    Profile {
        name: "disk",
        interval_s_mean: 8.0,
        fault_s_min: 2.0,
        fault_s_max: 8.0,
        concurrent_max: 1,
        coordinators_too: false,
        weights: &[
            (RandomFault::Node(FaultKind::DiskFull), 1),
            (RandomFault::Node(FaultKind::SyncFail), 1),
        ],
        frame_rate: 0.0,
    },
    Profile {
        name: "mixed",
        interval_s_mean: 6.0,
        fault_s_min: 2.0,
        fault_s_max: 8.0,
        concurrent_max: 2,
        coordinators_too: true,
        weights: &[
            (RandomFault::Node(FaultKind::Crash), 2),
            (RandomFault::Node(FaultKind::Kill), 1),
            (RandomFault::Node(FaultKind::Pause), 2),
            (RandomFault::Node(FaultKind::Isolate), 2),
            (RandomFault::Halves, 1),
            (RandomFault::Node(FaultKind::ClockSkew), 1),
        ],
        frame_rate: 0.0,
    },
    // A storm of process faults on brokers, one every ~2 s: many faults per run, for shrinking
    // (`gregor-sim shrink` cuts a run's dozens of faults down to the few that matter).
    Profile {
        name: "crash-storm",
        interval_s_mean: 2.0,
        fault_s_min: 0.5,
        fault_s_max: 2.0,
        concurrent_max: 1,
        coordinators_too: false,
        weights: &[
            (RandomFault::Node(FaultKind::Crash), 3),
            (RandomFault::Node(FaultKind::Kill), 1),
        ],
        frame_rate: 0.0,
    },
    // The network beyond cuts: bridges, swizzles, duplicated and corrupted frames (on brokers;
    // on a coordinator, whose links carry no Kafka frames, those two do nothing).
    Profile {
        name: "network",
        interval_s_mean: 8.0,
        fault_s_min: 3.0,
        fault_s_max: 8.0,
        concurrent_max: 1,
        coordinators_too: true,
        weights: &[
            (RandomFault::Node(FaultKind::Isolate), 1),
            (RandomFault::Halves, 1),
            (RandomFault::Bridge, 2),
            (RandomFault::Swizzle, 2),
            (RandomFault::Node(FaultKind::DuplicateFrames), 2),
            (RandomFault::Node(FaultKind::CorruptFrames), 2),
        ],
        frame_rate: 0.05,
    },
    // Swarm testing (Groce et al.; FoundationDB's BUGGIFY): each seed enables its own random
    // subset of these kinds with its own weights and rates (`ActiveProfile::for_seed`); the
    // numbers here are the pool and the most each kind may weigh. No `disk-lost`: with it a
    // no-loss scenario would need a rule of its own (scenarios/rules/2_*).
    Profile {
        name: SWARM,
        interval_s_mean: 6.0,
        fault_s_min: 1.0,
        fault_s_max: 10.0,
        concurrent_max: 2,
        coordinators_too: true,
        weights: &[
            (RandomFault::Node(FaultKind::Crash), 4),
            (RandomFault::Node(FaultKind::Kill), 4),
            (RandomFault::Node(FaultKind::Pause), 4),
            (RandomFault::Node(FaultKind::Isolate), 4),
            (RandomFault::Halves, 4),
            (RandomFault::Bridge, 4),
            (RandomFault::Swizzle, 4),
            (RandomFault::Node(FaultKind::ClockSkew), 4),
            (RandomFault::Node(FaultKind::DiskFull), 4),
            (RandomFault::Node(FaultKind::SyncFail), 4),
            (RandomFault::Node(FaultKind::DuplicateFrames), 4),
            (RandomFault::Node(FaultKind::CorruptFrames), 4),
        ],
        frame_rate: 0.2,
    },
];

/// The name of the swarm profile.
pub const SWARM: &str = "swarm";

/// The profile a run plays: a named profile as written, or, for [`SWARM`], the seed's own draw.
#[derive(Clone, Debug, PartialEq)]
pub struct ActiveProfile {
    pub name: &'static str,
    pub interval_s_mean: f64,
    pub fault_s_min: f64,
    pub fault_s_max: f64,
    pub concurrent_max: usize,
    pub coordinators_too: bool,
    pub weights: Vec<(RandomFault, u32)>,
    pub frame_rate: f64,
}

impl ActiveProfile {
    /// `profile` as the run with `seed` plays it: a pure function of the two. A swarm profile
    /// enables each kind of its pool with probability 1/2 (at least one), weighs each 1 to its
    /// pool weight, and draws the mean interval (0.5 to 2 of the pool's), fault lengths (within
    /// the pool's), faults at once (1 to the pool's), whether coordinators are targets, and the
    /// frame fault rate (1% to the pool's), all from the seed's [`Purpose::Swarm`] stream.
    pub fn for_seed(profile: &'static Profile, seed: u64) -> ActiveProfile {
        let mut active = ActiveProfile {
            name: profile.name,
            interval_s_mean: profile.interval_s_mean,
            fault_s_min: profile.fault_s_min,
            fault_s_max: profile.fault_s_max,
            concurrent_max: profile.concurrent_max,
            coordinators_too: profile.coordinators_too,
            weights: profile.weights.to_vec(),
            frame_rate: profile.frame_rate,
        };
        if profile.name != SWARM {
            return active;
        }
        let mut rng = seed::stream(seed, seed::WORLD, Purpose::Swarm);
        let mut weights = Vec::new();
        for &(kind, w_max) in profile.weights {
            let on = rng.next_u64().is_multiple_of(2);
            let w = 1 + (rng.next_u64() % u64::from(w_max.max(1))) as u32;
            if on {
                weights.push((kind, w));
            }
        }
        let fallback = (rng.next_u64() % profile.weights.len() as u64) as usize;
        if weights.is_empty() {
            weights.push((profile.weights[fallback].0, 1));
        }
        active.weights = weights;
        active.interval_s_mean = profile.interval_s_mean * (0.5 + 1.5 * unit(&mut rng));
        let span = profile.fault_s_max - profile.fault_s_min;
        let a = profile.fault_s_min + span * unit(&mut rng);
        let b = profile.fault_s_min + span * unit(&mut rng);
        (active.fault_s_min, active.fault_s_max) = (a.min(b), a.max(b));
        active.concurrent_max = 1 + (rng.next_u64() % profile.concurrent_max.max(1) as u64) as usize;
        active.coordinators_too = profile.coordinators_too && rng.next_u64().is_multiple_of(2);
        active.frame_rate = 0.01 + (profile.frame_rate - 0.01).max(0.0) * unit(&mut rng);
        active
    }

    /// One line naming the kinds with their weights and the rates: what a failing swarm seed
    /// ran with (`swarm: crash×3 halves×1; a fault every 4.2 s, ...`).
    pub fn describe(&self) -> String {
        let kinds: Vec<String> = self
            .weights
            .iter()
            .map(|&(kind, w)| format!("{}×{w}", random_fault_name(kind)))
            .collect();
        let frames = self.weights.iter().any(|(k, _)| {
            matches!(
                k,
                RandomFault::Node(FaultKind::DuplicateFrames | FaultKind::CorruptFrames)
            )
        });
        format!(
            "{}: {}; a fault every {:.1} s (mean), lasting {:.1}-{:.1} s, at most {} at once{}{}",
            self.name,
            kinds.join(" "),
            self.interval_s_mean,
            self.fault_s_min,
            self.fault_s_max,
            self.concurrent_max,
            if self.coordinators_too {
                ", coordinators too"
            } else {
                ", brokers only"
            },
            if frames {
                format!(", frame faults hit {:.1}%", self.frame_rate * 100.0)
            } else {
                String::new()
            },
        )
    }
}

/// The scenario name of a random fault kind.
fn random_fault_name(kind: RandomFault) -> &'static str {
    match kind {
        RandomFault::Node(kind) => Injection::of(kind, NodeIndex(0), 0.0).name(),
        RandomFault::Halves => "partition-halves",
        RandomFault::Bridge => "bridge",
        RandomFault::Swizzle => "swizzle",
    }
}

/// The fault profile `scenario`'s run with `seed` plays (`None`: it names no profile).
pub fn active_profile(scenario: &Scenario, seed: u64) -> Option<ActiveProfile> {
    let name = scenario.faults.profile.as_deref()?;
    profile(name).map(|p| ActiveProfile::for_seed(p, seed))
}

/// The profile called `name`.
pub fn profile(name: &str) -> Option<&'static Profile> {
    PROFILES.iter().find(|p| p.name == name)
}

/// A fault or opposite with its nodes resolved: what the nemesis applies to the world.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Injection {
    Crash(NodeIndex),
    Kill(NodeIndex),
    DiskLost(NodeIndex),
    Restart(NodeIndex),
    Pause(NodeIndex),
    Resume(NodeIndex),
    Isolate(NodeIndex),
    Rejoin(NodeIndex),
    DiskFull(NodeIndex),
    Drain(NodeIndex),
    SyncFail(NodeIndex),
    HealSyncs(NodeIndex),
    Skew(NodeIndex),
    Unskew(NodeIndex),
    /// Frame fault rates in parts per million.
    DuplicateFrames(NodeIndex, u32),
    HealDuplicates(NodeIndex),
    CorruptFrames(NodeIndex, u32),
    HealCorruption(NodeIndex),
    Split(Vec<NodeIndex>, Vec<NodeIndex>),
    Mend(Vec<NodeIndex>, Vec<NodeIndex>),
    /// Two sides cut from each other; the bridge (not in either) keeps its links to both.
    Bridge(Vec<NodeIndex>, NodeIndex, Vec<NodeIndex>),
    Unbridge(Vec<NodeIndex>, NodeIndex, Vec<NodeIndex>),
    /// A swizzle: clog these nodes one at a time (in this order); its opposite unclogs them one
    /// at a time in the other order. The steps are `Clog`/`Unclog`.
    Swizzle(Vec<NodeIndex>, Vec<NodeIndex>),
    Unswizzle(Vec<NodeIndex>),
    Clog(NodeIndex),
    Unclog(NodeIndex),
}

impl Injection {
    /// A fault on one node; `rate` is for the frame faults.
    fn of(kind: FaultKind, node: NodeIndex, rate: f64) -> Injection {
        let ppm = (rate.clamp(0.0, 1.0) * PPM).round() as u32;
        match kind {
            FaultKind::Crash => Injection::Crash(node),
            FaultKind::Kill => Injection::Kill(node),
            FaultKind::DiskLost => Injection::DiskLost(node),
            FaultKind::Pause => Injection::Pause(node),
            FaultKind::Isolate => Injection::Isolate(node),
            FaultKind::DiskFull => Injection::DiskFull(node),
            FaultKind::SyncFail => Injection::SyncFail(node),
            FaultKind::ClockSkew => Injection::Skew(node),
            FaultKind::DuplicateFrames => Injection::DuplicateFrames(node, ppm),
            FaultKind::CorruptFrames => Injection::CorruptFrames(node, ppm),
            // Faults over many nodes are built by the nemesis; alone, the node is clogged.
            FaultKind::Bridge | FaultKind::SwizzleClog | FaultKind::PartitionHalves => Injection::Clog(node),
        }
    }

    /// The opposite of a fault (only faults are asked: an opposite is applied, never undone).
    fn opposite(&self) -> Injection {
        match self {
            Injection::Crash(n) | Injection::Kill(n) | Injection::DiskLost(n) => Injection::Restart(*n),
            Injection::Pause(n) => Injection::Resume(*n),
            Injection::Isolate(n) => Injection::Rejoin(*n),
            Injection::DiskFull(n) => Injection::Drain(*n),
            Injection::SyncFail(n) => Injection::HealSyncs(*n),
            Injection::Skew(n) => Injection::Unskew(*n),
            Injection::DuplicateFrames(n, _) => Injection::HealDuplicates(*n),
            Injection::CorruptFrames(n, _) => Injection::HealCorruption(*n),
            Injection::Split(a, b) => Injection::Mend(a.clone(), b.clone()),
            Injection::Bridge(a, x, b) => Injection::Unbridge(a.clone(), *x, b.clone()),
            Injection::Swizzle(_, unclog) => Injection::Unswizzle(unclog.clone()),
            Injection::Clog(n) => Injection::Unclog(*n),
            opposite => panic!("{opposite:?} is an opposite, not a fault"),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Injection::Crash(_) => "crash",
            Injection::Kill(_) => "kill",
            Injection::DiskLost(_) => "disk-lost",
            Injection::Restart(_) => "restart",
            Injection::Pause(_) => "pause",
            Injection::Resume(_) => "resume",
            Injection::Isolate(_) => "isolate",
            Injection::Rejoin(_) => "rejoin",
            Injection::DiskFull(_) => "disk-full",
            Injection::Drain(_) => "drain",
            Injection::SyncFail(_) => "sync-fail",
            Injection::HealSyncs(_) => "heal-syncs",
            Injection::Skew(_) => "clock-skew",
            Injection::Unskew(_) => "unskew",
            Injection::DuplicateFrames(..) => "duplicate-frames",
            Injection::HealDuplicates(_) => "heal-duplicates",
            Injection::CorruptFrames(..) => "corrupt-frames",
            Injection::HealCorruption(_) => "heal-corruption",
            Injection::Split(..) => "partition-halves",
            Injection::Mend(..) => "repair-halves",
            Injection::Bridge(..) => "bridge",
            Injection::Unbridge(..) => "repair-bridge",
            Injection::Swizzle(..) => "swizzle",
            Injection::Unswizzle(..) => "unswizzle",
            Injection::Clog(_) => "swizzle-clog",
            Injection::Unclog(_) => "swizzle-unclog",
        }
    }

    /// The nodes it holds while in force.
    fn nodes(&self) -> Vec<NodeIndex> {
        match self {
            Injection::Split(a, b) | Injection::Mend(a, b) => a.iter().chain(b).copied().collect(),
            Injection::Bridge(a, x, b) | Injection::Unbridge(a, x, b) => {
                a.iter().chain(b).chain(std::iter::once(x)).copied().collect()
            }
            Injection::Swizzle(nodes, _) | Injection::Unswizzle(nodes) => nodes.clone(),
            Injection::Crash(n)
            | Injection::Kill(n)
            | Injection::DiskLost(n)
            | Injection::Restart(n)
            | Injection::Pause(n)
            | Injection::Resume(n)
            | Injection::Isolate(n)
            | Injection::Rejoin(n)
            | Injection::DiskFull(n)
            | Injection::Drain(n)
            | Injection::SyncFail(n)
            | Injection::HealSyncs(n)
            | Injection::Skew(n)
            | Injection::Unskew(n)
            | Injection::DuplicateFrames(n, _)
            | Injection::HealDuplicates(n)
            | Injection::CorruptFrames(n, _)
            | Injection::HealCorruption(n)
            | Injection::Clog(n)
            | Injection::Unclog(n) => vec![*n],
        }
    }

    fn apply(&self, world: &World) {
        let cut = |a: &[NodeIndex], b: &[NodeIndex], fault: fn(NodeIndex, NodeIndex) -> Fault| {
            for &x in a {
                for &y in b {
                    world.inject(&fault(x, y));
                }
            }
        };
        let frames = |n: NodeIndex, f: &dyn Fn(&mut FrameRates)| {
            let state = world.state(n);
            let mut rates = state.frame_rates();
            f(&mut rates);
            state.set_frame_rates(rates);
        };
        match self {
            Injection::Crash(n) => world.kill(*n),
            Injection::Kill(n) => world.kill_process(*n),
            Injection::DiskLost(n) => world.lose_disk(*n),
            Injection::Restart(n) => {
                if world.is_down(*n) {
                    world.restart(*n);
                }
            }
            Injection::Pause(n) => world.inject(&Fault::Pause(*n)),
            Injection::Resume(n) => world.inject(&Fault::Resume(*n)),
            Injection::Isolate(n) | Injection::Clog(n) => world.inject(&Fault::Isolate(*n)),
            Injection::Rejoin(n) | Injection::Unclog(n) => world.inject(&Fault::Rejoin(*n)),
            Injection::DiskFull(n) => world.with_disk(*n, |disk| {
                let used = disk.inner().used_bytes();
                disk.fill(used);
            }),
            Injection::Drain(n) => world.with_disk(*n, |disk| disk.drain()),
            Injection::SyncFail(n) => world.with_disk(*n, |disk| disk.fail_syncs()),
            Injection::HealSyncs(n) => world.with_disk(*n, |disk| disk.heal_syncs()),
            Injection::Skew(n) => world.inject(&Fault::Skew(*n, CLOCK_SKEW_MS)),
            Injection::Unskew(n) => world.inject(&Fault::Unskew(*n)),
            Injection::DuplicateFrames(n, ppm) => frames(*n, &|r| r.duplicate = f64::from(*ppm) / PPM),
            Injection::HealDuplicates(n) => frames(*n, &|r| r.duplicate = 0.0),
            Injection::CorruptFrames(n, ppm) => frames(*n, &|r| r.corrupt = f64::from(*ppm) / PPM),
            Injection::HealCorruption(n) => frames(*n, &|r| r.corrupt = 0.0),
            Injection::Split(a, b) | Injection::Bridge(a, _, b) => cut(a, b, Fault::Partition),
            Injection::Mend(a, b) | Injection::Unbridge(a, _, b) => cut(a, b, Fault::Repair),
            // The steps are applied one by one by the nemesis.
            Injection::Swizzle(..) | Injection::Unswizzle(_) => {}
        }
    }
}

/// A fault in force, waiting for its opposite.
#[derive(Debug)]
struct Pending {
    /// ms after `play` started; `None`: at the heal.
    due_ms: Option<u64>,
    /// Application order among pendings due at the same ms.
    seq: u64,
    opposite: Injection,
    label: String,
    random: bool,
}

/// One step of a fault spread over time (a swizzle's clogs and unclogs), due at `due_ms` after
/// `play` started.
#[derive(Debug)]
struct Step {
    due_ms: u64,
    seq: u64,
    injection: Injection,
    label: String,
}

/// A scheduled fault, times in ms after `play` starts.
#[derive(Clone, Debug)]
struct Planned {
    at_ms: u64,
    kind: FaultKind,
    node: String,
    heal_after_ms: Option<u64>,
    rate: f64,
    sides: Option<[Vec<String>; 2]>,
    order: Option<(Vec<String>, Vec<String>)>,
}

impl Planned {
    /// The fault as a schedule entry played at `now` (ms after `play` started).
    fn played(&self, now: u64) -> ScheduledFault {
        ScheduledFault {
            at_s: ms_to_secs(now),
            fault: self.kind,
            node: self.node.clone(),
            heal_after_s: self.heal_after_ms.map(ms_to_secs),
            rate: self.kind.has_rate().then_some(self.rate),
            sides: self.sides.clone(),
            order: self.order.as_ref().map(|(order, _)| order.clone()),
            unclog: self.order.as_ref().map(|(_, unclog)| unclog.clone()),
        }
    }
}

fn ms_to_secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

fn secs_to_ms(s: f64) -> u64 {
    // Scenario times are validated as non-negative and within the run; clamp anyway.
    (s.max(0.0) * 1000.0).round() as u64
}

/// A uniform draw in [0, 1) from 53 random bits: the same on every platform.
fn unit(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

fn now_ms() -> u64 {
    u64::try_from(madsim::time::TimeHandle::current().elapsed().as_millis()).expect("virtual time within u64 ms")
}

/// Shuffles `items` in place (Fisher-Yates) with draws from `rng`.
fn shuffle<T>(items: &mut [T], rng: &mut ChaCha8Rng) {
    for i in (1..items.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}

/// The order a swizzle unclogs `clogged` in: a shuffle that differs from the clogging order
/// (rotated by one if the shuffle happened to give the same order back).
fn unclog_order(clogged: &[NodeIndex], rng: &mut ChaCha8Rng) -> Vec<NodeIndex> {
    let mut order = clogged.to_vec();
    shuffle(&mut order, rng);
    if order == clogged {
        order.rotate_left(1);
    }
    order
}

/// Names of nodes as the world calls them.
fn world_names(world: &World, nodes: &[NodeIndex]) -> Vec<String> {
    nodes.iter().map(|&n| world.name(n)).collect()
}

/// Names of nodes, comma-separated, for labels.
fn names(world: &World, nodes: &[NodeIndex]) -> String {
    nodes.iter().map(|&n| world.name(n)).collect::<Vec<_>>().join(",")
}

/// Plays one run's faults. Build it with [`Nemesis::new`], run [`Nemesis::play`] next to the
/// workload, read [`Nemesis::events`] afterwards.
#[derive(Debug)]
pub struct Nemesis {
    duration_ms: u64,
    plan: Vec<Planned>,
    profile: ActiveProfile,
    targets: Vec<String>,
    /// Every broker and coordinator by name: the nodes bridges and scheduled swizzles work on.
    servers: Vec<String>,
    rng: ChaCha8Rng,
    plan_rng: ChaCha8Rng,
    pending: Vec<Pending>,
    steps: Vec<Step>,
    seq: u64,
    events: Vec<FaultEvent>,
    played: Vec<ScheduledFault>,
    /// `profile_timer_only`: draw at the profile's times, play no random fault.
    timer_only: bool,
}

impl Nemesis {
    /// The nemesis of `scenario`'s run with `seed`. The scenario must name a known profile (the
    /// scenario parser refuses others).
    pub fn new(scenario: &Scenario, seed: u64) -> Nemesis {
        let name = scenario.faults.profile.as_deref().unwrap_or("none");
        let profile = profile(name).unwrap_or_else(|| panic!("profile {name:?} passed scenario validation"));
        let profile = ActiveProfile::for_seed(profile, seed);
        if profile.name == SWARM {
            tracing::info!(target: "nemesis", profile = %profile.describe(), "swarm profile drawn");
        }
        let mut plan: Vec<Planned> = scenario
            .faults
            .schedule
            .iter()
            .map(|f| {
                let f = f.get_ref();
                Planned {
                    at_ms: secs_to_ms(f.at_s),
                    kind: f.fault,
                    node: f.node.clone(),
                    heal_after_ms: f.heal_after_s.map(secs_to_ms),
                    rate: f.rate.unwrap_or(FRAME_FAULT_RATE_DEFAULT),
                    sides: f.sides.clone(),
                    order: f.order.clone().zip(f.unclog.clone()),
                }
            })
            .collect();
        // Stable: faults at the same time apply in file order.
        plan.sort_by_key(|p| p.at_ms);
        let brokers: Vec<String> = (0..scenario.cluster.brokers).map(|i| format!("broker-{i}")).collect();
        let coordinators: Vec<String> = (0..scenario.cluster.coordinators)
            .map(|i| format!("coordinator-{i}"))
            .collect();
        let mut targets = brokers.clone();
        if profile.coordinators_too {
            targets.extend(coordinators.iter().cloned());
        }
        Nemesis {
            duration_ms: scenario.duration_s * 1000,
            plan,
            profile,
            targets,
            servers: brokers.into_iter().chain(coordinators).collect(),
            rng: seed::stream(seed, seed::WORLD, Purpose::Nemesis),
            plan_rng: seed::stream(seed, seed::WORLD, Purpose::NemesisPlan),
            pending: Vec::new(),
            steps: Vec::new(),
            seq: 0,
            events: Vec::new(),
            played: Vec::new(),
            timer_only: scenario.faults.profile_timer_only,
        }
    }

    /// Every fault and opposite applied so far, in order.
    pub fn events(&self) -> &[FaultEvent] {
        &self.events
    }

    pub fn into_events(self) -> Vec<FaultEvent> {
        self.events
    }

    /// Every fault played so far (scheduled or drawn at random, skipped ones included), as an
    /// explicit schedule: times since `play` started, nodes by the names they were chosen by,
    /// the sides and orders a random draw picked. Played as a scenario's `[[faults.schedule]]`
    /// with the same seed, it applies the same faults to the same nodes at the same times (the
    /// nemesis wakes less often without a profile, so madsim's scheduler, and with it the rest
    /// of the run, may still go another way: `gregor-sim shrink` checks the failure comes back).
    pub fn played(&self) -> &[ScheduledFault] {
        &self.played
    }

    /// Plays the faults for the scenario's duration, then heals. `resolve` maps a scenario's
    /// node name (`leader`, `controller`, `broker-N`, `coordinator-N`) to the node it means now,
    /// or `None` if there is none (a scheduled fault on it is then skipped and recorded so).
    pub async fn play(&mut self, world: &World, resolve: &dyn Fn(&str) -> Option<NodeIndex>) {
        let start_ms = now_ms();
        let mut planned = 0;
        let mut random_next_ms = (!self.profile.weights.is_empty()).then(|| self.draw_interval_ms());
        loop {
            let now = now_ms() - start_ms;
            // Steps and opposites first: a node freed at `now` may take a new fault at `now`.
            self.apply_due(world, now);
            if now >= self.duration_ms {
                break;
            }
            while planned < self.plan.len() && self.plan[planned].at_ms <= now {
                let fault = self.plan[planned].clone();
                planned += 1;
                self.play_planned(world, resolve, &fault, now);
            }
            if let Some(at) = random_next_ms.filter(|&at| at <= now) {
                self.play_random(world, resolve, now);
                random_next_ms = Some(at + self.draw_interval_ms());
            }
            let wake = [
                Some(self.duration_ms),
                self.plan.get(planned).map(|p| p.at_ms),
                random_next_ms,
                self.pending.iter().filter_map(|p| p.due_ms).min(),
                self.steps.iter().map(|s| s.due_ms).min(),
            ]
            .into_iter()
            .flatten()
            .min()
            .expect("the duration is always a wake-up time");
            madsim::time::sleep(Duration::from_millis(wake.saturating_sub(now).max(1))).await;
        }
        self.heal(world);
    }

    /// Applies every step and opposite due at `now`, in due order (steps before opposites due at
    /// the same ms, so a swizzle has clogged every node before it starts unclogging).
    fn apply_due(&mut self, world: &World, now: u64) {
        loop {
            let step = self
                .steps
                .iter()
                .enumerate()
                .filter(|(_, s)| s.due_ms <= now)
                .min_by_key(|(_, s)| (s.due_ms, s.seq))
                .map(|(i, s)| (i, s.due_ms));
            let pending = self
                .next_due(now)
                .map(|i| (i, self.pending[i].due_ms.unwrap_or(u64::MAX)));
            match (step, pending) {
                (Some((i, due)), p) if p.is_none_or(|(_, p_due)| due <= p_due) => {
                    let s = self.steps.remove(i);
                    self.record(world, &s.injection, &s.label);
                }
                (_, Some((i, _))) => {
                    let p = self.pending.remove(i);
                    self.release(world, p, Some(now));
                }
                _ => return,
            }
        }
    }

    /// Applies the opposite of every fault still in force, in the order they were due (those
    /// due "at the heal" last, in the order they were applied). Steps still to come are applied
    /// first, all at once.
    pub fn heal(&mut self, world: &World) {
        let mut steps = std::mem::take(&mut self.steps);
        steps.sort_by_key(|s| (s.due_ms, s.seq));
        for s in steps {
            self.record(world, &s.injection, &s.label);
        }
        let mut pending = std::mem::take(&mut self.pending);
        pending.sort_by_key(|p| (p.due_ms.unwrap_or(u64::MAX), p.seq));
        for p in pending {
            self.release(world, p, None);
        }
    }

    /// Applies a pending fault's opposite; an unswizzle unclogs its first node now and the
    /// others one step apart (all at once at the heal, `now` = `None`).
    fn release(&mut self, world: &World, p: Pending, now: Option<u64>) {
        match (&p.opposite, now) {
            (Injection::Unswizzle(order), Some(now)) => {
                for (i, &n) in order.iter().enumerate() {
                    let step = Injection::Unclog(n);
                    let label = world.name(n);
                    if i == 0 {
                        self.record(world, &step, &label);
                    } else {
                        self.seq += 1;
                        self.steps.push(Step {
                            due_ms: now + i as u64 * SWIZZLE_STEP_MS,
                            seq: self.seq,
                            injection: step,
                            label,
                        });
                    }
                }
            }
            (Injection::Unswizzle(order), None) => {
                for &n in order {
                    self.record(world, &Injection::Unclog(n), &world.name(n));
                }
            }
            _ => self.record(world, &p.opposite, &p.label),
        }
    }

    fn next_due(&self, now: u64) -> Option<usize> {
        self.pending
            .iter()
            .enumerate()
            .filter(|(_, p)| p.due_ms.is_some_and(|due| due <= now))
            .min_by_key(|(_, p)| (p.due_ms, p.seq))
            .map(|(i, _)| i)
    }

    /// The brokers and coordinators as they resolve now, each node once, without `except`.
    fn servers(&self, resolve: &dyn Fn(&str) -> Option<NodeIndex>, except: NodeIndex) -> Vec<NodeIndex> {
        let mut nodes = Vec::new();
        for name in &self.servers {
            if let Some(node) = resolve(name) {
                if node != except && !nodes.contains(&node) {
                    nodes.push(node);
                }
            }
        }
        nodes
    }

    /// Records a scheduled fault that cannot be played now (`why`).
    fn skip(&mut self, fault: &Planned, why: &str) {
        let what = format!(
            "{} skipped: {why}",
            Injection::of(fault.kind, NodeIndex(0), fault.rate).name()
        );
        let what = what.replace("swizzle-clog skipped", "swizzle skipped");
        tracing::info!(target: "nemesis", node = %fault.node, "{what}");
        self.events.push(FaultEvent {
            at_ms: now_ms(),
            node: fault.node.clone(),
            what,
        });
    }

    fn play_planned(&mut self, world: &World, resolve: &dyn Fn(&str) -> Option<NodeIndex>, fault: &Planned, now: u64) {
        let mut played = fault.played(now);
        self.play_planned_recording(world, resolve, fault, now, &mut played);
        self.played.push(played);
    }

    /// Plays a scheduled fault; what it chose (a bridge's sides, a swizzle's orders) goes into
    /// `played`.
    fn play_planned_recording(
        &mut self,
        world: &World,
        resolve: &dyn Fn(&str) -> Option<NodeIndex>,
        fault: &Planned,
        now: u64,
        played: &mut ScheduledFault,
    ) {
        let Some(node) = resolve(&fault.node) else {
            return self.skip(fault, "no such node now");
        };
        let label = label(world, &fault.node, node);
        let due = fault.heal_after_ms.map(|after| now + after);
        // Names as recorded, resolved now, each node once.
        let resolve_all = |names: &[String], except: Option<NodeIndex>| {
            let mut nodes: Vec<NodeIndex> = Vec::new();
            for n in names.iter().filter_map(|name| resolve(name)) {
                if Some(n) != except && !nodes.contains(&n) {
                    nodes.push(n);
                }
            }
            nodes
        };
        match (fault.kind, &fault.sides, &fault.order) {
            (FaultKind::PartitionHalves | FaultKind::Bridge, Some([a_names, b_names]), _) => {
                let bridge = (fault.kind == FaultKind::Bridge).then_some(node);
                let (a, b) = (resolve_all(a_names, bridge), resolve_all(b_names, bridge));
                if a.is_empty() || b.is_empty() || a.iter().any(|n| b.contains(n)) {
                    return self.skip(fault, "its sides do not resolve to two groups of nodes now");
                }
                let (a_label, b_label) = (a_names.join(","), b_names.join(","));
                match bridge {
                    Some(x) => {
                        let label = format!("{a_label}|{label}|{b_label}");
                        self.start(world, Injection::Bridge(a, x, b), label, due, false, now);
                    }
                    None => {
                        let label = format!("{a_label}|{b_label}");
                        self.start(world, Injection::Split(a, b), label, due, false, now);
                    }
                }
            }
            (FaultKind::PartitionHalves, None, _) => self.skip(fault, "no sides"),
            (FaultKind::Bridge, None, _) => {
                // The others alternate between the sides, in node order.
                let others = self.servers(resolve, node);
                let (a, b): (Vec<_>, Vec<_>) = others.iter().enumerate().partition(|(i, _)| i % 2 == 0);
                let side = |v: Vec<(usize, &NodeIndex)>| v.into_iter().map(|(_, &n)| n).collect::<Vec<_>>();
                let (a, b) = (side(a), side(b));
                played.sides = Some([world_names(world, &a), world_names(world, &b)]);
                let label = format!("{}|{label}|{}", names(world, &a), names(world, &b));
                self.start(world, Injection::Bridge(a, node, b), label, due, false, now);
            }
            (FaultKind::SwizzleClog, _, Some((order_names, unclog_names))) => {
                let (order, unclog) = (resolve_all(order_names, None), resolve_all(unclog_names, None));
                let (mut sorted_order, mut sorted_unclog) = (order.clone(), unclog.clone());
                sorted_order.sort();
                sorted_unclog.sort();
                if order.len() < 2 || sorted_order != sorted_unclog {
                    return self.skip(fault, "its nodes do not resolve to two nodes or more now");
                }
                let label = order_names.join(",");
                self.start(world, Injection::Swizzle(order, unclog), label, due, false, now);
            }
            (FaultKind::SwizzleClog, _, None) => {
                // The named node first, then the other brokers in node order.
                let brokers: Vec<NodeIndex> = self
                    .servers(resolve, node)
                    .into_iter()
                    .filter(|&n| world.name(n).starts_with("broker-"))
                    .collect();
                let order: Vec<NodeIndex> = std::iter::once(node).chain(brokers).collect();
                let unclog = unclog_order(&order, &mut self.plan_rng);
                // As names: the named node by its scenario name, so the order starts with `node`.
                let name = |n: NodeIndex| if n == node { fault.node.clone() } else { world.name(n) };
                played.order = Some(order.iter().map(|&n| name(n)).collect());
                played.unclog = Some(unclog.iter().map(|&n| name(n)).collect());
                self.start(world, Injection::Swizzle(order, unclog), label, due, false, now);
            }
            (kind, _, _) => {
                let injection = Injection::of(kind, node, fault.rate);
                self.start(world, injection, label, due, false, now);
            }
        }
    }

    fn play_random(&mut self, world: &World, resolve: &dyn Fn(&str) -> Option<NodeIndex>, now: u64) {
        // Always the same draws, whatever happens next, so one choice never shifts the others.
        let kind_draw = self.rng.next_u64();
        let target_draw = self.rng.next_u64();
        let fault_ms = self.draw_fault_ms();
        let shuffle_seed = self.rng.next_u64();
        if self.timer_only || self.pending.iter().filter(|p| p.random).count() >= self.profile.concurrent_max {
            return;
        }
        let total: u64 = self.profile.weights.iter().map(|&(_, w)| u64::from(w)).sum();
        let mut pick = kind_draw % total.max(1);
        let mut kind = self.profile.weights[0].0;
        for &(k, w) in &self.profile.weights {
            if pick < u64::from(w) {
                kind = k;
                break;
            }
            pick -= u64::from(w);
        }
        let held: Vec<NodeIndex> = self
            .pending
            .iter()
            .flat_map(|p| p.opposite.nodes())
            .chain(self.steps.iter().flat_map(|s| s.injection.nodes()))
            .collect();
        // Resolved in target order, each node once (two names may share a node).
        let mut candidates: Vec<(String, NodeIndex)> = Vec::new();
        for name in &self.targets {
            if let Some(node) = resolve(name) {
                if !candidates.iter().any(|&(_, n)| n == node) {
                    candidates.push((name.clone(), node));
                }
            }
        }
        let all_free = candidates.iter().all(|(_, n)| !held.contains(n));
        let mut rng = seed::stream(shuffle_seed, seed::WORLD, Purpose::Nemesis);
        let nodes = |side: &[(String, NodeIndex)]| side.iter().map(|&(_, n)| n).collect::<Vec<_>>();
        let side_names =
            |side: &[(String, NodeIndex)]| side.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>().join(",");
        let side_list = |side: &[(String, NodeIndex)]| side.iter().map(|(s, _)| s.clone()).collect::<Vec<_>>();
        // The draw as a schedule entry (`gregor-sim shrink` replays it without the profile).
        let mut played = ScheduledFault {
            at_s: ms_to_secs(now),
            fault: FaultKind::Crash,
            node: String::new(),
            heal_after_s: Some(ms_to_secs(fault_ms)),
            rate: None,
            sides: None,
            order: None,
            unclog: None,
        };
        let (injection, label) = match kind {
            RandomFault::Node(kind) => {
                let free: Vec<&(String, NodeIndex)> = candidates.iter().filter(|(_, n)| !held.contains(n)).collect();
                if free.is_empty() {
                    return;
                }
                let (name, node) = free[(target_draw % free.len() as u64) as usize];
                played.fault = kind;
                played.node = name.clone();
                played.rate = kind.has_rate().then_some(self.profile.frame_rate);
                (
                    Injection::of(kind, *node, self.profile.frame_rate),
                    label(world, name, *node),
                )
            }
            RandomFault::Halves => {
                if candidates.len() < 2 || !all_free {
                    return;
                }
                shuffle(&mut candidates, &mut rng);
                let (a, b) = candidates.split_at(candidates.len() / 2);
                let label = format!("{}|{}", side_names(a), side_names(b));
                played.fault = FaultKind::PartitionHalves;
                played.node = a[0].0.clone();
                played.sides = Some([side_list(a), side_list(b)]);
                (Injection::Split(nodes(a), nodes(b)), label)
            }
            RandomFault::Bridge => {
                if candidates.len() < 3 || !all_free {
                    return;
                }
                shuffle(&mut candidates, &mut rng);
                let (bridge, rest) = candidates.split_first().expect("three candidates or more");
                let (a, b) = rest.split_at(rest.len() / 2);
                let label = format!("{}|{}|{}", side_names(a), bridge.0, side_names(b));
                played.fault = FaultKind::Bridge;
                played.node = bridge.0.clone();
                played.sides = Some([side_list(a), side_list(b)]);
                (Injection::Bridge(nodes(a), bridge.1, nodes(b)), label)
            }
            RandomFault::Swizzle => {
                let mut free: Vec<(String, NodeIndex)> =
                    candidates.into_iter().filter(|(_, n)| !held.contains(n)).collect();
                if free.len() < 2 {
                    return;
                }
                shuffle(&mut free, &mut rng);
                let count = 2 + (rng.next_u64() % (free.len() as u64 - 1)) as usize;
                let order = nodes(&free[..count]);
                let unclog = unclog_order(&order, &mut rng);
                let name = |n: &NodeIndex| free.iter().find(|(_, m)| m == n).map(|(s, _)| s.clone());
                played.fault = FaultKind::SwizzleClog;
                played.node = free[0].0.clone();
                played.order = Some(side_list(&free[..count]));
                played.unclog = Some(unclog.iter().filter_map(name).collect());
                (Injection::Swizzle(order, unclog), side_names(&free[..count]))
            }
        };
        self.played.push(played);
        self.start(world, injection, label, Some(now + fault_ms), true, now);
    }

    /// Applies a fault (a swizzle: its first clog now, the others as steps) and holds it until
    /// its opposite is due.
    fn start(&mut self, world: &World, fault: Injection, label: String, due_ms: Option<u64>, random: bool, now: u64) {
        let mut due_ms = due_ms;
        if let Injection::Swizzle(order, _) = &fault {
            for (i, &n) in order.iter().enumerate() {
                let step = Injection::Clog(n);
                if i == 0 {
                    self.record(world, &step, &world.name(n));
                } else {
                    self.seq += 1;
                    self.steps.push(Step {
                        due_ms: now + i as u64 * SWIZZLE_STEP_MS,
                        seq: self.seq,
                        injection: step,
                        label: world.name(n),
                    });
                }
            }
            // Unclogging starts only once every node has been clogged.
            let clogged_ms = now + (order.len() as u64 - 1) * SWIZZLE_STEP_MS;
            due_ms = due_ms.map(|d| d.max(clogged_ms));
        } else {
            self.record(world, &fault, &label);
        }
        self.seq += 1;
        self.pending.push(Pending {
            due_ms,
            seq: self.seq,
            opposite: fault.opposite(),
            label,
            random,
        });
    }

    fn record(&mut self, world: &World, injection: &Injection, label: &str) {
        injection.apply(world);
        let what = injection.name();
        tracing::info!(target: "nemesis", node = %label, "{what}");
        self.events.push(FaultEvent {
            at_ms: now_ms(),
            node: label.to_string(),
            what: what.to_string(),
        });
    }

    fn draw_interval_ms(&mut self) -> u64 {
        secs_to_ms(self.profile.interval_s_mean * (0.5 + unit(&mut self.rng))).max(1)
    }

    fn draw_fault_ms(&mut self) -> u64 {
        let p = &self.profile;
        secs_to_ms(p.fault_s_min + (p.fault_s_max - p.fault_s_min) * unit(&mut self.rng)).max(1)
    }
}

/// `broker-1`, or `leader=broker-1` when the scenario named the node by its role.
fn label(world: &World, named: &str, node: NodeIndex) -> String {
    let name = world.name(node);
    if name == named {
        name
    } else {
        format!("{named}={name}")
    }
}

#[cfg(test)]
mod tests;
