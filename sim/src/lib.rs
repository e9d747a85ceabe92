//! gregor-sim: runs whole Gregor clusters in one deterministic process (madsim), injects faults
//! from a seed and checks that nothing acknowledged is lost. The madsim binding lands with the
//! simulator issue; the disk model it implements is `gregor_core::disk::mem::MemDisk`.

pub mod checker;
pub mod disk;
pub mod history;
pub mod scenario;
