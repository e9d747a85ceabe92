//! The disk a node sees: its own data directory, and the assumptions Gregor makes about it.
//!
//! # The disk model
//!
//! Gregor's durability arguments rest on these assumptions and on nothing else. Every `Disk`
//! implementation must provide at least these guarantees; [`mem::MemDisk`] (and the simulator's
//! faulty disk on top of it) implements exactly these and no more, so code that is correct on it
//! is correct on any disk that keeps the contract.
//!
//! 1. **Paths** are relative to the node's data directory, `/`-separated, with no `.`/`..`
//!    components. Directories are implicit: creating `a/b` creates `a`; a directory whose last
//!    file is removed may disappear.
//! 2. **Data writes** (`append`, `truncate`) land in a volatile cache. They become durable only
//!    when [`Disk::sync`] of that file returns `Ok`. Reads always see the latest writes.
//! 3. **At a crash**, each file keeps its durable content; of the bytes appended since its last
//!    sync, any prefix may survive, and the surviving tail may be torn (its last bytes garbage).
//!    A truncation not yet synced may be undone: the file may come back with its old durable
//!    bytes. Callers that must not see truncated data again sync after truncating.
//! 4. **Metadata operations** (`create`, `rename`, `remove`) are atomic and durable when they
//!    return `Ok` (realnet fsyncs the parent directory to make this true). `rename` replaces
//!    the target atomically: this is how whole files (checkpoints) are written safely.
//! 5. **A failed sync** (`Err`) leaves the file's durable content unknown: the caller must treat
//!    every unsynced write to it as lost and stop trusting its cache (fsyncgate). Gregor's log
//!    fails the partition rather than retry.
//! 6. **Corruption** (bit flips, misdirected writes) is not prevented by the disk; it is detected
//!    by checksums above it. Reads past the end of a file are errors, never panics.

pub mod contract;
pub mod mem;

use thiserror::Error;

/// An operating error from the disk. Expected, handled, never a panic.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DiskError {
    #[error("no such file: {0}")]
    NotFound(String),
    #[error("file already exists: {0}")]
    AlreadyExists(String),
    #[error("read past the end of {path}: wanted {wanted} bytes at {pos}, file has {len}")]
    UnexpectedEof {
        path: String,
        pos: u64,
        wanted: usize,
        len: u64,
    },
    #[error("no space left on device")]
    NoSpace,
    #[error("I/O error on {path}: {detail}")]
    Io { path: String, detail: String },
}

/// One node's data directory. Synchronous by design: an implementation either works in memory
/// (tests, simulator) or issues the call on the node's I/O thread (realnet), and the latency that
/// matters, fsync, is amortised by the callers' group commit rather than hidden in futures.
pub trait Disk {
    /// Creates an empty file. Fails with `AlreadyExists` if it exists.
    fn create(&mut self, path: &str) -> Result<(), DiskError>;
    /// Current length in bytes (volatile writes included).
    fn len(&self, path: &str) -> Result<u64, DiskError>;
    /// Appends `data` at the end of the file; returns the position it was written at.
    fn append(&mut self, path: &str, data: &[u8]) -> Result<u64, DiskError>;
    /// Fills `buf` from `pos`. Reading past the end is `UnexpectedEof`, and fills nothing.
    fn read_at(&self, path: &str, pos: u64, buf: &mut [u8]) -> Result<(), DiskError>;
    /// The `len` bytes from `pos` in a new vector, as [`Disk::read_at`] into one. A disk that
    /// can copy straight into the vector (`MemDisk`) skips zeroing it first.
    fn read_vec(&self, path: &str, pos: u64, len: usize) -> Result<Vec<u8>, DiskError> {
        let mut buf = vec![0; len];
        self.read_at(path, pos, &mut buf)?;
        Ok(buf)
    }
    /// Makes every write to this file so far durable.
    fn sync(&mut self, path: &str) -> Result<(), DiskError>;
    /// Cuts the file to `len` bytes (no-op when it is already that short).
    fn truncate(&mut self, path: &str, len: u64) -> Result<(), DiskError>;
    /// Atomically and durably moves `from` onto `to`, replacing `to` if it exists.
    fn rename(&mut self, from: &str, to: &str) -> Result<(), DiskError>;
    /// Durably removes a file.
    fn remove(&mut self, path: &str) -> Result<(), DiskError>;
    /// Names (not paths) of the files and directories directly inside `dir` (`""` is the data
    /// directory itself), sorted. A missing directory lists as empty.
    fn list(&self, dir: &str) -> Result<Vec<String>, DiskError>;
    /// Whether a file exists.
    fn exists(&self, path: &str) -> bool;

    /// Reads a whole file.
    fn read_all(&self, path: &str) -> Result<Vec<u8>, DiskError> {
        let len = self.len(path)?;
        let len = usize::try_from(len).map_err(|_| DiskError::Io {
            path: path.to_string(),
            detail: format!("file of {len} bytes does not fit in memory"),
        })?;
        let mut buf = vec![0u8; len];
        self.read_at(path, 0, &mut buf)?;
        Ok(buf)
    }

    /// Replaces `path` with `data` atomically and durably: write a temporary file, sync it,
    /// rename it over the target (model rules 2 and 4).
    fn write_file_atomic(&mut self, path: &str, data: &[u8]) -> Result<(), DiskError> {
        let tmp = format!("{path}.tmp");
        if self.exists(&tmp) {
            self.remove(&tmp)?;
        }
        self.create(&tmp)?;
        self.append(&tmp, data)?;
        self.sync(&tmp)?;
        self.rename(&tmp, path)
    }
}
