//! `SimDisk`: the simulator's disk. It is [`MemDisk`] — exactly the disk model of
//! `gregor_core::disk`, crashes included — plus the faults a real disk adds, each a value with
//! its opposite (STYLE: no global failpoints):
//!
//! | fault | opposite | effect |
//! |---|---|---|
//! | `fail_syncs` | `heal_syncs` | `sync` returns EIO and makes nothing durable (model rule 5) |
//! | `fail_reads` | `heal_reads` | `read_at` returns EIO |
//! | `fill(capacity)` | `drain` | writes past `capacity` bytes fail with ENOSPC, after writing what fits (a partial write, as `write(2)` does) |
//! | `flip_bit` | — (permanent damage) | one stored bit changes |
//! | `misdirect` | — (permanent damage) | bytes meant for one place overwrite another |
//! | `crash` | restart of the node | unsynced writes dropped or torn, unsynced truncations maybe undone |
//!
//! Latency: the `Disk` trait is synchronous, so the disk does not sleep; it adds up what each call
//! would have cost (`latency_us_*`), and the node's next outgoing frame waits that long in virtual
//! time (`SimConnection::send` takes it through `NodeState::take_disk_latency_ms`). The disk survives restarts of its node: the simulator keeps it
//! outside the node's state.

use gregor_core::disk::mem::{CrashMode, MemDisk};
use gregor_core::disk::{Disk, DiskError};

/// Modelled cost of each operation, in virtual microseconds (defaults from this machine class:
/// fsync 110–160 µs, sequential writes around 1.5 GB/s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskLatency {
    pub latency_us_sync: u64,
    pub latency_us_per_mib: u64,
    pub latency_us_op: u64,
}

impl Default for DiskLatency {
    fn default() -> Self {
        DiskLatency {
            latency_us_sync: 140,
            latency_us_per_mib: 700,
            latency_us_op: 2,
        }
    }
}

/// Counts of what the disk did and refused, for the run's summary and coverage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskStats {
    pub syncs: u64,
    pub syncs_failed: u64,
    pub reads_failed: u64,
    pub writes_refused_no_space: u64,
    pub bits_flipped: u64,
    pub misdirected_writes: u64,
    pub crashes: u64,
    /// Times the disk was replaced by an empty one (`disk-lost`).
    pub replaced: u64,
}

#[derive(Clone, Debug, Default)]
pub struct SimDisk {
    inner: MemDisk,
    syncs_fail: bool,
    reads_fail: bool,
    capacity_bytes: Option<u64>,
    latency: DiskLatency,
    pending_latency_us: u64,
    stats: DiskStats,
}

fn eio(path: &str, what: &str) -> DiskError {
    DiskError::Io {
        path: path.to_string(),
        detail: format!("EIO (injected {what} fault)"),
    }
}

impl SimDisk {
    pub fn new(latency: DiskLatency) -> Self {
        SimDisk {
            latency,
            ..SimDisk::default()
        }
    }

    pub fn fail_syncs(&mut self) {
        self.syncs_fail = true;
    }
    pub fn heal_syncs(&mut self) {
        self.syncs_fail = false;
    }
    pub fn fail_reads(&mut self) {
        self.reads_fail = true;
    }
    pub fn heal_reads(&mut self) {
        self.reads_fail = false;
    }
    /// Caps the bytes all files may hold (ENOSPC past it).
    pub fn fill(&mut self, capacity_bytes: u64) {
        self.capacity_bytes = Some(capacity_bytes);
    }
    pub fn drain(&mut self) {
        self.capacity_bytes = None;
    }

    pub fn flip_bit(&mut self, path: &str, pos: u64, bit: u8) -> Result<(), DiskError> {
        self.inner.flip_bit(path, pos, bit)?;
        self.stats.bits_flipped += 1;
        Ok(())
    }

    /// Copies `len` bytes from (`from_path`, `from_pos`) over (`to_path`, `to_pos`): a write that
    /// landed in the wrong place.
    pub fn misdirect(
        &mut self,
        from_path: &str,
        from_pos: u64,
        to_path: &str,
        to_pos: u64,
        len: usize,
    ) -> Result<(), DiskError> {
        let mut buf = vec![0u8; len];
        self.inner.read_at(from_path, from_pos, &mut buf)?;
        self.inner.overwrite(to_path, to_pos, &buf)?;
        self.stats.misdirected_writes += 1;
        Ok(())
    }

    /// A power loss under this disk (the node is killed with it).
    pub fn crash(&mut self, seed: u64) {
        self.inner.crash(CrashMode::Torn { seed });
        self.stats.crashes += 1;
    }

    /// The drive is replaced by an empty one: every file, synced or not, is gone (a lost disk, a
    /// machine rebuilt from scratch). Fault settings stay; the node is killed with it.
    pub fn replace(&mut self) {
        self.inner = MemDisk::new();
        self.stats.replaced += 1;
    }

    /// Virtual time the calls since the last take would have cost.
    pub fn take_latency_us(&mut self) -> u64 {
        std::mem::take(&mut self.pending_latency_us)
    }

    pub fn stats(&self) -> DiskStats {
        self.stats
    }

    /// The fault-free disk underneath (for checkers that inspect files).
    pub fn inner(&self) -> &MemDisk {
        &self.inner
    }

    fn charge(&mut self, bytes: usize) {
        self.pending_latency_us +=
            self.latency.latency_us_op + bytes as u64 * self.latency.latency_us_per_mib / (1 << 20);
    }
}

impl Disk for SimDisk {
    fn create(&mut self, path: &str) -> Result<(), DiskError> {
        self.charge(0);
        self.inner.create(path)
    }

    fn len(&self, path: &str) -> Result<u64, DiskError> {
        self.inner.len(path)
    }

    fn append(&mut self, path: &str, data: &[u8]) -> Result<u64, DiskError> {
        self.charge(data.len());
        if let Some(capacity) = self.capacity_bytes {
            let room = capacity.saturating_sub(self.inner.used_bytes());
            if (data.len() as u64) > room {
                self.stats.writes_refused_no_space += 1;
                // write(2) writes what fits before ENOSPC: the caller must cut it away.
                if self.inner.exists(path) {
                    self.inner.append(path, &data[..room as usize])?;
                }
                return Err(DiskError::NoSpace);
            }
        }
        self.inner.append(path, data)
    }

    fn read_at(&self, path: &str, pos: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        if self.reads_fail {
            return Err(eio(path, "read"));
        }
        self.inner.read_at(path, pos, buf)
    }

    fn read_vec(&self, path: &str, pos: u64, len: usize) -> Result<Vec<u8>, DiskError> {
        if self.reads_fail {
            return Err(eio(path, "read"));
        }
        self.inner.read_vec(path, pos, len)
    }

    fn sync(&mut self, path: &str) -> Result<(), DiskError> {
        self.pending_latency_us += self.latency.latency_us_sync;
        if self.syncs_fail {
            self.stats.syncs_failed += 1;
            return Err(eio(path, "sync"));
        }
        self.stats.syncs += 1;
        self.inner.sync(path)
    }

    fn truncate(&mut self, path: &str, len: u64) -> Result<(), DiskError> {
        self.charge(0);
        self.inner.truncate(path, len)
    }

    fn rename(&mut self, from: &str, to: &str) -> Result<(), DiskError> {
        self.charge(0);
        self.inner.rename(from, to)
    }

    fn remove(&mut self, path: &str) -> Result<(), DiskError> {
        self.charge(0);
        self.inner.remove(path)
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, DiskError> {
        self.inner.list(dir)
    }

    fn exists(&self, path: &str) -> bool {
        self.inner.exists(path)
    }
}

#[cfg(test)]
mod tests;
