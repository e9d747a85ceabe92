//! gregor-sim: runs whole Gregor clusters in one deterministic process (madsim), injects faults
//! from a seed and checks that nothing acknowledged is lost.
//!
//! - [`runtime`]: `SimRuntime`, gregor-core's `Runtime` on madsim (virtual time, simulated TCP).
//! - [`world`]: one run of a seed on a fresh thread; nodes, kill/restart, partitions, skew.
//! - [`disk`]: `SimDisk`, the disk model of `gregor_core::disk` plus injected faults.
//! - [`seed`]: the per-purpose random streams derived from the scenario seed.
//! - [`history`], [`checker`]: what a workload did, and the anomalies in it.
//! - [`scenario`]: the scenario file format.
//! - [`coverage`]: the hard states a run reached ("sometimes" assertions) and the sweep's table.
//! - [`nemesis`]: plays a scenario's scheduled and random faults, each with its opposite.
//! - [`trace`]: the replay trace of a run: its events hashed, and printed through a filter.
//! - [`bench`]: benchmarks in virtual time (the batching producer against one broker).
//! - [`cli`]: what the `gregor-sim` command line computes (seed lists, parallel runs, verdicts).

pub mod bench;
pub mod checker;
pub mod cli;
pub mod coverage;
pub mod disk;
pub mod history;
pub mod nemesis;
pub mod run;
pub mod runtime;
pub mod scenario;
pub mod seed;
pub mod shrink;
pub mod timeline;
pub mod trace;
pub mod world;
