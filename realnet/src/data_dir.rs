//! The data directory as a whole: who owns it ([`DataDirLock`]) and which cluster it belongs to
//! ([`cluster_id`]).
//!
//! Contract: one process owns a data directory at a time ([`FsDisk`] caches file lengths and
//! assumes no other writer). The owner holds an exclusive `flock(2)` on `<data dir>/.lock` for
//! as long as it lives; a second process fails to take it at once, with an error naming the
//! directory. The kernel drops the lock when the process dies, however it dies, so a crash never
//! leaves a stale lock behind (unlike a pid file). The lock is advisory and local: it does not
//! protect against another host on a network file system.
//!
//! The cluster id is created once, stored durably in `cluster.id` (atomic replace through the
//! disk model's rule 4), and read back unchanged on every later start. A file that does not hold a
//! valid id is an error, never silently replaced: a new id would make it a different cluster.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use gregor_core::disk::{Disk, DiskError};
use rustix::fs::{flock, FlockOperation};

use crate::disk::FsDisk;

/// The lock file's name inside the data directory.
pub const LOCK_FILE: &str = ".lock";
/// The cluster id's file name inside the data directory.
pub const CLUSTER_ID_FILE: &str = "cluster.id";
/// Longest cluster id accepted from the file (Kafka's are 22 characters).
pub const CLUSTER_ID_BYTES_MAX: usize = 64;

#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error("data directory {dir} is in use by another process (it holds {dir}/{LOCK_FILE})")]
    InUse { dir: String },
    #[error("cannot lock data directory {dir}: {source}")]
    Lock { dir: String, source: io::Error },
    #[error("{path}: {detail}")]
    BadClusterId { path: String, detail: String },
    #[error("cluster id: {0}")]
    Disk(#[from] DiskError),
}

/// Exclusive ownership of a data directory, held until dropped (or the process dies).
#[derive(Debug)]
pub struct DataDirLock {
    // Closing the file releases the flock.
    _file: File,
    path: PathBuf,
}

impl DataDirLock {
    /// Takes the lock on `dir` (which must exist), failing at once if another process holds it.
    pub fn acquire(dir: &Path) -> Result<DataDirLock, DataDirError> {
        let shown = dir.display().to_string();
        let path = dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|source| DataDirError::Lock {
                dir: shown.clone(),
                source,
            })?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(DataDirLock { _file: file, path }),
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => Err(DataDirError::InUse { dir: shown }),
            Err(e) => Err(DataDirError::Lock {
                dir: shown,
                source: e.into(),
            }),
        }
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Reads the data directory's cluster id, creating it with `new_id` on first start.
pub fn cluster_id(disk: &mut FsDisk, new_id: impl FnOnce() -> String) -> Result<String, DataDirError> {
    let path = disk.root().join(CLUSTER_ID_FILE).display().to_string();
    if disk.exists(CLUSTER_ID_FILE) {
        let bytes = disk.read_all(CLUSTER_ID_FILE)?;
        let text = std::str::from_utf8(&bytes).map_err(|_| DataDirError::BadClusterId {
            path: path.clone(),
            detail: "not UTF-8".to_string(),
        })?;
        let id = text.trim();
        return if valid_cluster_id(id) {
            Ok(id.to_string())
        } else {
            Err(DataDirError::BadClusterId {
                path,
                detail: format!("{id:?} is not a cluster id (1 to {CLUSTER_ID_BYTES_MAX} of A-Z a-z 0-9 _ -)"),
            })
        };
    }
    let id = new_id();
    assert!(valid_cluster_id(&id), "generated cluster id {id:?} is invalid");
    disk.write_file_atomic(CLUSTER_ID_FILE, format!("{id}\n").as_bytes())?;
    Ok(id)
}

fn valid_cluster_id(id: &str) -> bool {
    (1..=CLUSTER_ID_BYTES_MAX).contains(&id.len())
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A cluster id in Kafka's format: 16 random bytes as unpadded base64url (22 characters).
pub fn format_cluster_id(random: [u8; 16]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(22);
    for chunk in random.chunks(3) {
        let mut group = [0u8; 3];
        group[..chunk.len()].copy_from_slice(chunk);
        let n = u32::from(group[0]) << 16 | u32::from(group[1]) << 8 | u32::from(group[2]);
        // 3 bytes give 4 characters; a final chunk of 1 byte gives 2.
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_on_the_same_directory_fails_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = DataDirLock::acquire(dir.path()).expect("first lock");
        assert!(matches!(
            DataDirLock::acquire(dir.path()),
            Err(DataDirError::InUse { .. })
        ));
        drop(first);
        DataDirLock::acquire(dir.path()).expect("lock after release");
    }

    #[test]
    fn cluster_id_is_created_once_and_kept() {
        let dir = tempfile::tempdir().expect("temp dir");
        let id = {
            let mut disk = FsDisk::open(dir.path()).expect("disk");
            cluster_id(&mut disk, || format_cluster_id([7; 16])).expect("create")
        };
        assert_eq!(id.len(), 22);
        let mut disk = FsDisk::open(dir.path()).expect("disk");
        let again = cluster_id(&mut disk, || panic!("must not generate a second id")).expect("read");
        assert_eq!(id, again);
    }

    #[test]
    fn a_garbled_cluster_id_file_is_an_error_not_a_new_cluster() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join(CLUSTER_ID_FILE), "not an id!\n").expect("write");
        let mut disk = FsDisk::open(dir.path()).expect("disk");
        assert!(matches!(
            cluster_id(&mut disk, || panic!("must not regenerate")),
            Err(DataDirError::BadClusterId { .. })
        ));
    }

    #[test]
    fn cluster_id_format_matches_kafka_base64url() {
        // Kafka's Uuid.toString of 16 zero bytes.
        assert_eq!(format_cluster_id([0; 16]), "AAAAAAAAAAAAAAAAAAAAAA");
        assert_eq!(format_cluster_id([0xff; 16]), "_____________________w");
    }
}
