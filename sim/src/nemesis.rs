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
//!   `sync-fail` (fsync EIO)/heal; `clock-skew` (+[`CLOCK_SKEW_MS`])/unskew. Random profiles add
//!   `partition-halves` (the brokers and coordinators cut in two)/repair. A restart only starts a
//!   node that is down, so overlapping faults never kill a node a second time.
//! - `FaultEvent::at_ms` is virtual time since the simulation started, like the history's.

use std::time::Duration;

use rand_chacha::rand_core::RngCore;
use rand_chacha::ChaCha8Rng;

use crate::scenario::{FaultKind, Scenario};
use crate::seed::{self, Purpose};
use crate::world::{Fault, NodeIndex, World};

/// How far a `clock-skew` fault moves a node's wall clock ahead.
pub const CLOCK_SKEW_MS: i64 = 60_000;

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
    },
    Profile {
        name: "partitions",
        interval_s_mean: 10.0,
        fault_s_min: 3.0,
        fault_s_max: 10.0,
        concurrent_max: 1,
        coordinators_too: true,
        weights: &[(RandomFault::Node(FaultKind::Isolate), 2), (RandomFault::Halves, 1)],
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
    },
];

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
    Split(Vec<NodeIndex>, Vec<NodeIndex>),
    Mend(Vec<NodeIndex>, Vec<NodeIndex>),
}

impl Injection {
    fn of(kind: FaultKind, node: NodeIndex) -> Injection {
        match kind {
            FaultKind::Crash => Injection::Crash(node),
            FaultKind::Kill => Injection::Kill(node),
            FaultKind::DiskLost => Injection::DiskLost(node),
            FaultKind::Pause => Injection::Pause(node),
            FaultKind::Isolate => Injection::Isolate(node),
            FaultKind::DiskFull => Injection::DiskFull(node),
            FaultKind::SyncFail => Injection::SyncFail(node),
            FaultKind::ClockSkew => Injection::Skew(node),
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
            Injection::Split(a, b) => Injection::Mend(a.clone(), b.clone()),
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
            Injection::Split(..) => "partition-halves",
            Injection::Mend(..) => "repair-halves",
        }
    }

    /// The nodes it holds while in force.
    fn nodes(&self) -> Vec<NodeIndex> {
        match self {
            Injection::Split(a, b) | Injection::Mend(a, b) => a.iter().chain(b).copied().collect(),
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
            | Injection::Unskew(n) => vec![*n],
        }
    }

    fn apply(&self, world: &World) {
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
            Injection::Isolate(n) => world.inject(&Fault::Isolate(*n)),
            Injection::Rejoin(n) => world.inject(&Fault::Rejoin(*n)),
            Injection::DiskFull(n) => world.with_disk(*n, |disk| {
                let used = disk.inner().used_bytes();
                disk.fill(used);
            }),
            Injection::Drain(n) => world.with_disk(*n, |disk| disk.drain()),
            Injection::SyncFail(n) => world.with_disk(*n, |disk| disk.fail_syncs()),
            Injection::HealSyncs(n) => world.with_disk(*n, |disk| disk.heal_syncs()),
            Injection::Skew(n) => world.inject(&Fault::Skew(*n, CLOCK_SKEW_MS)),
            Injection::Unskew(n) => world.inject(&Fault::Unskew(*n)),
            Injection::Split(a, b) => {
                for &x in a {
                    for &y in b {
                        world.inject(&Fault::Partition(x, y));
                    }
                }
            }
            Injection::Mend(a, b) => {
                for &x in a {
                    for &y in b {
                        world.inject(&Fault::Repair(x, y));
                    }
                }
            }
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

/// A scheduled fault, times in ms after `play` starts.
#[derive(Clone, Debug)]
struct Planned {
    at_ms: u64,
    kind: FaultKind,
    node: String,
    heal_after_ms: Option<u64>,
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

/// Plays one run's faults. Build it with [`Nemesis::new`], run [`Nemesis::play`] next to the
/// workload, read [`Nemesis::events`] afterwards.
#[derive(Debug)]
pub struct Nemesis {
    duration_ms: u64,
    plan: Vec<Planned>,
    profile: &'static Profile,
    targets: Vec<String>,
    rng: ChaCha8Rng,
    pending: Vec<Pending>,
    seq: u64,
    events: Vec<FaultEvent>,
}

impl Nemesis {
    /// The nemesis of `scenario`'s run with `seed`. The scenario must name a known profile (the
    /// scenario parser refuses others).
    pub fn new(scenario: &Scenario, seed: u64) -> Nemesis {
        let name = scenario.faults.profile.as_deref().unwrap_or("none");
        let profile = profile(name).unwrap_or_else(|| panic!("profile {name:?} passed scenario validation"));
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
                }
            })
            .collect();
        // Stable: faults at the same time apply in file order.
        plan.sort_by_key(|p| p.at_ms);
        let mut targets: Vec<String> = (0..scenario.cluster.brokers).map(|i| format!("broker-{i}")).collect();
        if profile.coordinators_too {
            targets.extend((0..scenario.cluster.coordinators).map(|i| format!("coordinator-{i}")));
        }
        Nemesis {
            duration_ms: scenario.duration_s * 1000,
            plan,
            profile,
            targets,
            rng: seed::stream(seed, seed::WORLD, Purpose::Nemesis),
            pending: Vec::new(),
            seq: 0,
            events: Vec::new(),
        }
    }

    /// Every fault and opposite applied so far, in order.
    pub fn events(&self) -> &[FaultEvent] {
        &self.events
    }

    pub fn into_events(self) -> Vec<FaultEvent> {
        self.events
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
            // Opposites first: a node freed at `now` may take a new fault at `now`.
            while let Some(i) = self.next_due(now) {
                let p = self.pending.remove(i);
                self.record(world, &p.opposite, &p.label);
            }
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
            ]
            .into_iter()
            .flatten()
            .min()
            .expect("the duration is always a wake-up time");
            madsim::time::sleep(Duration::from_millis(wake.saturating_sub(now).max(1))).await;
        }
        self.heal(world);
    }

    /// Applies the opposite of every fault still in force, in the order they were due (those
    /// due "at the heal" last, in the order they were applied).
    pub fn heal(&mut self, world: &World) {
        let mut pending = std::mem::take(&mut self.pending);
        pending.sort_by_key(|p| (p.due_ms.unwrap_or(u64::MAX), p.seq));
        for p in pending {
            self.record(world, &p.opposite, &p.label);
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

    fn play_planned(&mut self, world: &World, resolve: &dyn Fn(&str) -> Option<NodeIndex>, fault: &Planned, now: u64) {
        let Some(node) = resolve(&fault.node) else {
            let what = format!(
                "{} skipped: no such node now",
                Injection::of(fault.kind, NodeIndex(0)).name()
            );
            tracing::info!(target: "nemesis", node = %fault.node, "{what}");
            self.events.push(FaultEvent {
                at_ms: now_ms(),
                node: fault.node.clone(),
                what,
            });
            return;
        };
        let label = label(world, &fault.node, node);
        let injection = Injection::of(fault.kind, node);
        self.record(world, &injection, &label);
        self.hold(injection, label, fault.heal_after_ms.map(|after| now + after), false);
    }

    fn play_random(&mut self, world: &World, resolve: &dyn Fn(&str) -> Option<NodeIndex>, now: u64) {
        // Always the same draws, whatever happens next, so one choice never shifts the others.
        let kind_draw = self.rng.next_u64();
        let target_draw = self.rng.next_u64();
        let fault_ms = self.draw_fault_ms();
        let shuffle_seed = self.rng.next_u64();
        if self.pending.iter().filter(|p| p.random).count() >= self.profile.concurrent_max {
            return;
        }
        let total: u64 = self.profile.weights.iter().map(|&(_, w)| u64::from(w)).sum();
        let mut pick = kind_draw % total.max(1);
        let mut kind = self.profile.weights[0].0;
        for &(k, w) in self.profile.weights {
            if pick < u64::from(w) {
                kind = k;
                break;
            }
            pick -= u64::from(w);
        }
        let held: Vec<NodeIndex> = self.pending.iter().flat_map(|p| p.opposite.nodes()).collect();
        // Resolved in target order, each node once (two names may share a node).
        let mut candidates: Vec<(String, NodeIndex)> = Vec::new();
        for name in &self.targets {
            if let Some(node) = resolve(name) {
                if !candidates.iter().any(|&(_, n)| n == node) {
                    candidates.push((name.clone(), node));
                }
            }
        }
        let (injection, label) = match kind {
            RandomFault::Node(kind) => {
                let free: Vec<&(String, NodeIndex)> = candidates.iter().filter(|(_, n)| !held.contains(n)).collect();
                if free.is_empty() {
                    return;
                }
                let (name, node) = free[(target_draw % free.len() as u64) as usize];
                (Injection::of(kind, *node), label(world, name, *node))
            }
            RandomFault::Halves => {
                if candidates.len() < 2 || candidates.iter().any(|(_, n)| held.contains(n)) {
                    return;
                }
                let mut rng = seed::stream(shuffle_seed, seed::WORLD, Purpose::Nemesis);
                for i in (1..candidates.len()).rev() {
                    let j = (rng.next_u64() % (i as u64 + 1)) as usize;
                    candidates.swap(i, j);
                }
                let (a, b) = candidates.split_at(candidates.len() / 2);
                let names =
                    |side: &[(String, NodeIndex)]| side.iter().map(|(s, _)| s.as_str()).collect::<Vec<_>>().join(",");
                let label = format!("{}|{}", names(a), names(b));
                let nodes = |side: &[(String, NodeIndex)]| side.iter().map(|&(_, n)| n).collect::<Vec<_>>();
                (Injection::Split(nodes(a), nodes(b)), label)
            }
        };
        self.record(world, &injection, &label);
        self.hold(injection, label, Some(now + fault_ms), true);
    }

    fn hold(&mut self, fault: Injection, label: String, due_ms: Option<u64>, random: bool) {
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
        let p = self.profile;
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
