//! `MemDisk`: an in-memory [`Disk`] that keeps exactly the guarantees of the disk model in
//! `disk.rs` and no more, so tests (and the simulator, which adds faults on top) can crash it.
//!
//! Each file holds its current bytes plus what the disk would hold after a crash: the first
//! `durable_len` current bytes, followed by `undone_tail`, the durable bytes that an unsynced
//! truncation cut away (model rule 3). [`MemDisk::crash`] picks, per file and from a seed, which
//! of the allowed outcomes happens.

use std::collections::BTreeMap;

use super::{Disk, DiskError};

#[derive(Clone, Debug, Default)]
struct MemFile {
    data: Vec<u8>,
    /// `data[..durable_len]` is on stable storage.
    durable_len: usize,
    /// Durable bytes beyond `durable_len` that an unsynced truncation removed from `data`.
    undone_tail: Vec<u8>,
}

/// How a crash treats each file's unsynced writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashMode {
    /// Every unsynced write is lost; unsynced truncations are kept (the gentlest crash).
    DropUnsynced,
    /// Per file, chosen from the seed: unsynced appends lost, kept in part (a torn tail whose
    /// last bytes may be garbage), or kept whole; unsynced truncations undone or kept.
    Torn { seed: u64 },
}

/// An in-memory data directory. Cloning it snapshots the whole disk.
#[derive(Clone, Debug, Default)]
pub struct MemDisk {
    files: BTreeMap<String, MemFile>,
}

/// splitmix64: a tiny deterministic generator, enough to pick crash outcomes from a seed.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl MemDisk {
    pub fn new() -> Self {
        Self::default()
    }

    /// Simulates a power loss: every file is reduced to what the disk model allows to survive.
    pub fn crash(&mut self, mode: CrashMode) {
        let mut state = match mode {
            CrashMode::DropUnsynced => 0,
            CrashMode::Torn { seed } => seed,
        };
        for file in self.files.values_mut() {
            let durable = file.durable_len;
            let unsynced = file.data.len().saturating_sub(durable);
            let keep_unsynced = match mode {
                CrashMode::DropUnsynced => 0,
                CrashMode::Torn { .. } => match next(&mut state) % 4 {
                    0 => 0,
                    1 => unsynced,
                    _ => (next(&mut state) as usize) % (unsynced + 1),
                },
            };
            let undo_truncation = matches!(mode, CrashMode::Torn { .. })
                && !file.undone_tail.is_empty()
                && next(&mut state).is_multiple_of(2);
            if undo_truncation {
                file.data.truncate(durable);
                file.data.extend_from_slice(&file.undone_tail);
            } else {
                file.data.truncate(durable + keep_unsynced);
                // A torn tail: the last few surviving unsynced bytes may be garbage.
                if keep_unsynced > 0 && next(&mut state).is_multiple_of(3) {
                    let garbage = 1 + (next(&mut state) as usize) % keep_unsynced.min(16);
                    let end = file.data.len();
                    for b in &mut file.data[end - garbage..] {
                        *b = next(&mut state) as u8;
                    }
                }
            }
            file.durable_len = file.data.len();
            file.undone_tail.clear();
        }
    }

    /// Flips one bit of a file's stored bytes, durable or not (a fault for checksums to catch).
    pub fn flip_bit(&mut self, path: &str, pos: u64, bit: u8) -> Result<(), DiskError> {
        let file = self.file_mut(path)?;
        let len = file.data.len() as u64;
        let byte = file.data.get_mut(pos as usize).ok_or(DiskError::UnexpectedEof {
            path: path.to_string(),
            pos,
            wanted: 1,
            len,
        })?;
        *byte ^= 1 << (bit % 8);
        Ok(())
    }

    /// Overwrites stored bytes in place, durable or not, growing nothing: a misdirected write
    /// (data meant for elsewhere landing here), for checksums to catch.
    pub fn overwrite(&mut self, path: &str, pos: u64, bytes: &[u8]) -> Result<(), DiskError> {
        let file = self.file_mut(path)?;
        let len = file.data.len() as u64;
        let end = pos.checked_add(bytes.len() as u64).filter(|&end| end <= len);
        let Some(end) = end else {
            return Err(DiskError::UnexpectedEof {
                path: path.to_string(),
                pos,
                wanted: bytes.len(),
                len,
            });
        };
        file.data[pos as usize..end as usize].copy_from_slice(bytes);
        Ok(())
    }

    /// Bytes held in all files (what a capacity limit counts).
    pub fn used_bytes(&self) -> u64 {
        self.files.values().map(|f| f.data.len() as u64).sum()
    }

    /// Paths of every file, sorted.
    pub fn paths(&self) -> Vec<String> {
        self.files.keys().cloned().collect()
    }

    fn file(&self, path: &str) -> Result<&MemFile, DiskError> {
        self.files
            .get(path)
            .ok_or_else(|| DiskError::NotFound(path.to_string()))
    }

    fn file_mut(&mut self, path: &str) -> Result<&mut MemFile, DiskError> {
        self.files
            .get_mut(path)
            .ok_or_else(|| DiskError::NotFound(path.to_string()))
    }
}

impl Disk for MemDisk {
    fn create(&mut self, path: &str) -> Result<(), DiskError> {
        if self.files.contains_key(path) {
            return Err(DiskError::AlreadyExists(path.to_string()));
        }
        self.files.insert(path.to_string(), MemFile::default());
        Ok(())
    }

    fn len(&self, path: &str) -> Result<u64, DiskError> {
        Ok(self.file(path)?.data.len() as u64)
    }

    fn append(&mut self, path: &str, data: &[u8]) -> Result<u64, DiskError> {
        let file = self.file_mut(path)?;
        let pos = file.data.len() as u64;
        file.data.extend_from_slice(data);
        Ok(pos)
    }

    fn read_at(&self, path: &str, pos: u64, buf: &mut [u8]) -> Result<(), DiskError> {
        let file = self.file(path)?;
        let len = file.data.len() as u64;
        let end = pos.checked_add(buf.len() as u64);
        match end {
            Some(end) if end <= len => {
                buf.copy_from_slice(&file.data[pos as usize..end as usize]);
                Ok(())
            }
            _ => Err(DiskError::UnexpectedEof {
                path: path.to_string(),
                pos,
                wanted: buf.len(),
                len,
            }),
        }
    }

    fn sync(&mut self, path: &str) -> Result<(), DiskError> {
        let file = self.file_mut(path)?;
        file.durable_len = file.data.len();
        file.undone_tail.clear();
        Ok(())
    }

    fn truncate(&mut self, path: &str, len: u64) -> Result<(), DiskError> {
        let file = self.file_mut(path)?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len >= file.data.len() {
            return Ok(());
        }
        if len < file.durable_len {
            let mut tail = file.data[len..file.durable_len].to_vec();
            tail.extend_from_slice(&file.undone_tail);
            file.undone_tail = tail;
            file.durable_len = len;
        }
        file.data.truncate(len);
        Ok(())
    }

    fn rename(&mut self, from: &str, to: &str) -> Result<(), DiskError> {
        let file = self
            .files
            .remove(from)
            .ok_or_else(|| DiskError::NotFound(from.to_string()))?;
        self.files.insert(to.to_string(), file);
        Ok(())
    }

    fn remove(&mut self, path: &str) -> Result<(), DiskError> {
        self.files
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| DiskError::NotFound(path.to_string()))
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, DiskError> {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut names: Vec<String> = self
            .files
            .range(prefix.clone()..)
            .take_while(|(path, _)| path.starts_with(&prefix))
            .map(|(path, _)| {
                let rest = &path[prefix.len()..];
                rest.split('/').next().unwrap_or(rest).to_string()
            })
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    fn exists(&self, path: &str) -> bool {
        self.files.contains_key(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsynced_appends_are_dropped_and_synced_ones_kept() {
        let mut disk = MemDisk::new();
        disk.create("a/f").expect("create");
        disk.append("a/f", b"durable").expect("append");
        disk.sync("a/f").expect("sync");
        disk.append("a/f", b"-volatile").expect("append");
        assert_eq!(disk.read_all("a/f").expect("read"), b"durable-volatile");
        disk.crash(CrashMode::DropUnsynced);
        assert_eq!(disk.read_all("a/f").expect("read"), b"durable");
    }

    #[test]
    fn torn_crash_keeps_durable_prefix_and_may_undo_truncation() {
        let mut undone = 0;
        for seed in 0..200 {
            let mut disk = MemDisk::new();
            disk.create("f").expect("create");
            disk.append("f", b"0123456789").expect("append");
            disk.sync("f").expect("sync");
            disk.truncate("f", 4).expect("truncate");
            disk.append("f", b"abcdef").expect("append");
            disk.crash(CrashMode::Torn { seed });
            let after = disk.read_all("f").expect("read");
            assert_eq!(&after[..4], b"0123", "seed {seed}: durable prefix lost");
            if after == b"0123456789" {
                undone += 1;
            } else {
                assert!(after.len() <= 10, "seed {seed}: grew past what was written");
            }
        }
        assert!(
            undone > 0,
            "no seed undid an unsynced truncation: the model is weaker than promised"
        );
    }

    #[test]
    fn reads_past_the_end_are_errors() {
        let mut disk = MemDisk::new();
        disk.create("f").expect("create");
        disk.append("f", b"abc").expect("append");
        let mut buf = [0u8; 4];
        assert!(matches!(
            disk.read_at("f", 0, &mut buf),
            Err(DiskError::UnexpectedEof { .. })
        ));
        assert!(matches!(
            disk.read_at("f", u64::MAX, &mut buf[..1]),
            Err(DiskError::UnexpectedEof { .. })
        ));
    }

    #[test]
    fn list_shows_direct_children_once() {
        let mut disk = MemDisk::new();
        for p in ["t-0/a.log", "t-0/b.log", "t-1/a.log", "top"] {
            disk.create(p).expect("create");
        }
        assert_eq!(disk.list("").expect("list"), vec!["t-0", "t-1", "top"]);
        assert_eq!(disk.list("t-0").expect("list"), vec!["a.log", "b.log"]);
        assert!(disk.list("nope").expect("list").is_empty());
    }

    #[test]
    fn keeps_the_disk_contract() {
        crate::disk::contract::run_all(&mut MemDisk::new());
    }
}
