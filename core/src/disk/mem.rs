//! `MemDisk`: an in-memory [`Disk`] that keeps exactly the guarantees of the disk model in
//! `disk.rs` and no more, so tests (and the simulator, which adds faults on top) can crash it.
//!
//! Each file holds its current bytes plus what the disk would hold after a crash: the first
//! `durable_len` current bytes, followed by `undone_tail`, the durable bytes that an unsynced
//! truncation cut away (model rule 3). [`MemDisk::crash`] picks, per file and from a seed, which
//! of the allowed outcomes happens.

use std::cell::Cell;
use std::collections::BTreeMap;

use super::{Disk, DiskError};
// Crash outcomes are picked from the crash's seed.
use crate::seeded::splitmix64 as next;

mod chunks;
use chunks::Chunks;

#[derive(Clone, Debug, Default)]
struct MemFile {
    data: Chunks,
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
///
/// Files live in slots; `index` finds a path's slot, and `hints` remember which slot a caller's
/// path string was last found in. Why: paths share long prefixes ("data/topic-3/000…000.log"),
/// so each search of the map compared a dozen of them byte by byte: ~280 instructions a lookup,
/// and a loaded simulated seed looks up ~250,000. Callers mostly pass the same strings again
/// (a log's segment keeps its paths), so the string's address finds a hint in one step, and a
/// hit costs one comparison of the path with its slot's own.
#[derive(Clone, Debug, Default)]
pub struct MemDisk {
    index: BTreeMap<String, usize>,
    /// Slots by number; `None` when free (then also in `free`).
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    hints: Hints,
}

/// Where a path string was last found: its address and length, and the slot. Only a hint: the
/// slot's own path is compared with the one asked for before it is used, so a stale hint (a
/// string freed and its address reused, a slot freed and reused) costs a map search, never a
/// wrong file.
#[derive(Clone, Copy, Debug, Default)]
struct Hint {
    addr: usize,
    len: usize,
    slot: usize,
}

/// Hints, each in the place its string's address picks.
const HINTS: usize = 64;

#[derive(Clone, Debug)]
struct Hints([Cell<Hint>; HINTS]);

impl Default for Hints {
    fn default() -> Self {
        Hints(std::array::from_fn(|_| Cell::default()))
    }
}

#[derive(Clone, Debug)]
struct Slot {
    path: String,
    file: MemFile,
}

/// `wanted` bytes at `pos` of `path` run past its `len`.
fn eof(path: &str, pos: u64, wanted: usize, len: u64) -> DiskError {
    DiskError::UnexpectedEof {
        path: path.to_string(),
        pos,
        wanted,
        len,
    }
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
        // In path order, as the crash outcomes are drawn from one sequence.
        for &i in self.index.values() {
            let Some(Slot { file, .. }) = self.slots[i].as_mut() else {
                continue;
            };
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
                    for pos in end - garbage..end {
                        if let Some(b) = file.data.byte_mut(pos) {
                            *b = next(&mut state) as u8;
                        }
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
        let pos_in = usize::try_from(pos).unwrap_or(usize::MAX);
        let byte = file.data.byte_mut(pos_in).ok_or_else(|| eof(path, pos, 1, len))?;
        *byte ^= 1 << (bit % 8);
        Ok(())
    }

    /// Overwrites stored bytes in place, durable or not, growing nothing: a misdirected write
    /// (data meant for elsewhere landing here), for checksums to catch.
    pub fn overwrite(&mut self, path: &str, pos: u64, bytes: &[u8]) -> Result<(), DiskError> {
        let file = self.file_mut(path)?;
        let len = file.data.len() as u64;
        let at = usize::try_from(pos).unwrap_or(usize::MAX);
        file.data
            .overwrite(at, bytes)
            .ok_or_else(|| eof(path, pos, bytes.len(), len))
    }

    /// Bytes held in all files (what a capacity limit counts).
    pub fn used_bytes(&self) -> u64 {
        self.slots.iter().flatten().map(|s| s.file.data.len() as u64).sum()
    }

    /// Paths of every file, sorted.
    pub fn paths(&self) -> Vec<String> {
        self.index.keys().cloned().collect()
    }

    /// The slot of `path`: its hint's, if that slot holds `path`, else the index's answer
    /// (which becomes the hint).
    fn slot_of(&self, path: &str) -> Result<usize, DiskError> {
        let addr = path.as_ptr() as usize;
        // Strings are allocated at least 8 bytes apart; fold in higher bits too.
        let cell = &self.hints.0[((addr >> 3) ^ (addr >> 9)) % HINTS];
        let hint = cell.get();
        if hint.addr == addr && hint.len == path.len() {
            if let Some(Some(slot)) = self.slots.get(hint.slot) {
                if slot.path == path {
                    return Ok(hint.slot);
                }
            }
        }
        let &i = self
            .index
            .get(path)
            .ok_or_else(|| DiskError::NotFound(path.to_string()))?;
        cell.set(Hint {
            addr,
            len: path.len(),
            slot: i,
        });
        Ok(i)
    }

    fn file(&self, path: &str) -> Result<&MemFile, DiskError> {
        let i = self.slot_of(path)?;
        match &self.slots[i] {
            Some(slot) => Ok(&slot.file),
            None => Err(DiskError::NotFound(path.to_string())),
        }
    }

    fn file_mut(&mut self, path: &str) -> Result<&mut MemFile, DiskError> {
        let i = self.slot_of(path)?;
        match &mut self.slots[i] {
            Some(slot) => Ok(&mut slot.file),
            None => Err(DiskError::NotFound(path.to_string())),
        }
    }

    /// Frees `path`'s slot and forgets the path; returns its file.
    fn take(&mut self, path: &str) -> Option<MemFile> {
        let i = self.index.remove(path)?;
        self.free.push(i);
        self.slots[i].take().map(|slot| slot.file)
    }

    /// Puts `file` at `path`, in a free slot or a new one.
    fn put(&mut self, path: &str, file: MemFile) {
        let slot = Some(Slot {
            path: path.to_string(),
            file,
        });
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = slot;
                i
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        self.index.insert(path.to_string(), i);
    }
}

impl Disk for MemDisk {
    fn create(&mut self, path: &str) -> Result<(), DiskError> {
        if self.index.contains_key(path) {
            return Err(DiskError::AlreadyExists(path.to_string()));
        }
        self.put(path, MemFile::default());
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
        let at = usize::try_from(pos).unwrap_or(usize::MAX);
        file.data.read(at, buf).ok_or_else(|| eof(path, pos, buf.len(), len))
    }

    fn read_vec(&self, path: &str, pos: u64, len: usize) -> Result<Vec<u8>, DiskError> {
        let file = self.file(path)?;
        let at = usize::try_from(pos).unwrap_or(usize::MAX);
        at.checked_add(len)
            .and_then(|end| file.data.to_vec(at, end))
            .ok_or_else(|| eof(path, pos, len, file.data.len() as u64))
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
            let mut tail = file.data.to_vec(len, file.durable_len).unwrap_or_default();
            tail.extend_from_slice(&file.undone_tail);
            file.undone_tail = tail;
            file.durable_len = len;
        }
        file.data.truncate(len);
        Ok(())
    }

    fn rename(&mut self, from: &str, to: &str) -> Result<(), DiskError> {
        let file = self.take(from).ok_or_else(|| DiskError::NotFound(from.to_string()))?;
        // Over an existing file, as rename(2) does.
        self.take(to);
        self.put(to, file);
        Ok(())
    }

    fn remove(&mut self, path: &str) -> Result<(), DiskError> {
        self.take(path)
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
            .index
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
        self.index.contains_key(path)
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
    fn a_freed_slot_reused_by_another_path_never_answers_for_the_old_one() {
        let mut disk = MemDisk::new();
        for (path, data) in [("d/a", b"aaa"), ("d/b", b"bbb")] {
            disk.create(path).expect("create");
            disk.append(path, data).expect("append");
        }
        // Both found (so hinted), then a's slot freed and taken by c: a's hint now names c's slot.
        assert_eq!(disk.read_all("d/a").expect("read"), b"aaa");
        assert_eq!(disk.read_all("d/b").expect("read"), b"bbb");
        disk.remove("d/a").expect("remove");
        disk.create("d/c").expect("create");
        disk.append("d/c", b"ccc").expect("append");
        assert!(matches!(disk.read_all("d/a"), Err(DiskError::NotFound(_))));
        assert!(!disk.exists("d/a"));
        assert_eq!(disk.read_all("d/c").expect("read"), b"ccc");
        // Renamed over an existing file, as rename(2): the old target is gone, its slot free.
        disk.rename("d/b", "d/c").expect("rename");
        assert!(matches!(disk.len("d/b"), Err(DiskError::NotFound(_))));
        assert_eq!(disk.read_all("d/c").expect("read"), b"bbb");
        disk.create("d/e").expect("create");
        assert_eq!(disk.len("d/e").expect("len"), 0);
        assert_eq!(disk.paths(), vec!["d/c", "d/e"]);
        assert_eq!(disk.used_bytes(), 3);
    }

    #[test]
    fn keeps_the_disk_contract() {
        crate::disk::contract::run_all(&mut MemDisk::new());
    }
}
