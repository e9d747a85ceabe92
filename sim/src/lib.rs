//! gregor-sim: runs whole Gregor clusters in one deterministic process (madsim), injects faults
//! from a seed and checks that nothing acknowledged is lost.
//!
//! - [`runtime`]: `SimRuntime`, gregor-core's `Runtime` on madsim (virtual time, simulated TCP).
//! - [`world`]: one run of a seed on a fresh thread; nodes, kill/restart, partitions, skew.
//! - [`disk`]: `SimDisk`, the disk model of `gregor_core::disk` plus injected faults.
//! - [`seed`]: the per-purpose random streams derived from the scenario seed.

pub mod disk;
pub mod runtime;
pub mod seed;
pub mod world;
