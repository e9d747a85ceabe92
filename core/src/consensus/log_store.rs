//! The consensus log: entries after the last snapshot, in memory and in one append-only file.
//!
//! File format: a sequence of records `[len u32][crc32c u32][term u64][index u64][command]`,
//! where `len` counts the bytes after the CRC and the CRC covers them. Appends and suffix
//! truncations land in the disk cache; [`LogStore::sync`] makes them durable, and the caller syncs
//! before acknowledging anything (Raft's durability rule). Compaction rewrites the retained tail
//! into a new file atomically.
//!
//! Fault model: a crash may leave any prefix of the unsynced appends, torn, and may undo an
//! unsynced truncation (disk model rule 3). Recovery reads records until the first one that is
//! short, fails its CRC or breaks index contiguity, and cuts the file there: everything past it
//! was never synced, so never acknowledged. Entries the snapshot covers are skipped; if the entry
//! at the snapshot's index disagrees with the snapshot's term, the whole tail is stale (a crash
//! between storing an installed snapshot and resetting the log) and is dropped.

use std::collections::VecDeque;

use bytes::Bytes;

use super::messages::COMMAND_BYTES_MAX;
use super::state::join;
use super::{Entry, LogIndex, RaftError, Term};
use crate::disk::Disk;

const RECORD_HEADER_BYTES: usize = 4 + 4 + 8 + 8;

pub(crate) struct LogStore {
    path: String,
    /// Entries `snapshot_index + 1 ..= last_index`, with each record's file position.
    entries: VecDeque<(Entry, u64)>,
    snapshot_index: LogIndex,
    snapshot_term: Term,
    /// End of the last record in the file.
    file_len: u64,
    /// Appends or truncations not synced yet.
    dirty: bool,
}

fn encode_record(e: &Entry, out: &mut Vec<u8>) {
    let len = u32::try_from(16 + e.command.len()).expect("commands bounded by COMMAND_BYTES_MAX");
    let start = out.len();
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&e.term.0.to_be_bytes());
    out.extend_from_slice(&e.index.0.to_be_bytes());
    out.extend_from_slice(&e.command);
    let crc = crate::crc::crc32c(&out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
}

/// Parses the record at `pos`; `None` for a short, torn or corrupt one.
fn decode_record(bytes: &[u8], pos: usize) -> Option<(Entry, usize)> {
    let header = bytes.get(pos..pos.checked_add(RECORD_HEADER_BYTES)?)?;
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    if !(16..=16 + COMMAND_BYTES_MAX).contains(&len) {
        return None;
    }
    let crc = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    let body = bytes.get(pos + 8..pos + 8 + len)?;
    if crate::crc::crc32c(body) != crc {
        return None;
    }
    let mut a = [0u8; 8];
    a.copy_from_slice(&body[0..8]);
    let term = Term(u64::from_be_bytes(a));
    a.copy_from_slice(&body[8..16]);
    let index = LogIndex(u64::from_be_bytes(a));
    let entry = Entry {
        term,
        index,
        command: Bytes::copy_from_slice(&body[16..]),
    };
    Some((entry, pos + 8 + len))
}

impl LogStore {
    /// Recovers the log in `dir` against the snapshot `(snapshot_index, snapshot_term)`.
    pub fn open<D: Disk>(
        disk: &mut D,
        dir: &str,
        snapshot_index: LogIndex,
        snapshot_term: Term,
    ) -> Result<LogStore, RaftError> {
        let path = join(dir, "log");
        if !disk.exists(&path) {
            disk.create(&path)?;
        }
        let bytes = disk.read_all(&path)?;
        let mut entries = VecDeque::new();
        let mut pos = 0usize;
        let mut prev: Option<LogIndex> = None;
        // Where the retained entries end; bytes past it are cut.
        let mut keep_end = 0usize;
        let mut snapshot_entry_matches = None;
        while let Some((entry, next)) = decode_record(&bytes, pos) {
            if prev.is_some_and(|p| p.0.checked_add(1) != Some(entry.index.0)) {
                break;
            }
            prev = Some(entry.index);
            if entry.index == snapshot_index {
                snapshot_entry_matches = Some(entry.term == snapshot_term);
            }
            if entry.index > snapshot_index {
                let contiguous = match entries.back() {
                    Some((last, _)) => {
                        let last: &Entry = last;
                        last.index.0.checked_add(1) == Some(entry.index.0)
                    }
                    None => snapshot_index.0.checked_add(1) == Some(entry.index.0),
                };
                if !contiguous || snapshot_entry_matches == Some(false) {
                    break;
                }
                entries.push_back((entry, pos as u64));
            }
            pos = next;
            keep_end = pos;
        }
        let store = LogStore {
            path,
            entries,
            snapshot_index,
            snapshot_term,
            file_len: keep_end as u64,
            dirty: false,
        };
        if (keep_end as u64) < bytes.len() as u64 {
            // Cut the torn or stale tail before anything is appended after it.
            disk.truncate(&store.path, keep_end as u64)?;
        }
        // Whatever the cache holds (a re-open without a crash) is made durable before the
        // node counts it as its own.
        disk.sync(&store.path)?;
        Ok(store)
    }

    pub fn snapshot_index(&self) -> LogIndex {
        self.snapshot_index
    }

    pub fn last_index(&self) -> LogIndex {
        self.entries.back().map_or(self.snapshot_index, |(e, _)| e.index)
    }

    pub fn last_term(&self) -> Term {
        self.entries.back().map_or(self.snapshot_term, |(e, _)| e.term)
    }

    /// The term of the entry at `index`, if it is the snapshot's or still in the log.
    pub fn term_at(&self, index: LogIndex) -> Option<Term> {
        if index == self.snapshot_index {
            return Some(self.snapshot_term);
        }
        self.get(index).map(|e| e.term)
    }

    pub fn get(&self, index: LogIndex) -> Option<&Entry> {
        if index <= self.snapshot_index {
            return None;
        }
        let offset = usize::try_from(index.0 - self.snapshot_index.0 - 1).ok()?;
        self.entries.get(offset).map(|(e, _)| e)
    }

    /// Entries from `from`, at most `count_max` and `bytes_max` command bytes (but at least one
    /// when there is one).
    pub fn slice(&self, from: LogIndex, count_max: usize, bytes_max: usize) -> Vec<Entry> {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let mut index = from;
        while out.len() < count_max {
            let Some(e) = self.get(index) else { break };
            let size = e.command.len() + super::messages::ENTRY_HEADER_BYTES;
            if !out.is_empty() && bytes + size > bytes_max {
                break;
            }
            bytes += size;
            out.push(e.clone());
            index = LogIndex(index.0 + 1);
        }
        out
    }

    /// The first index of `term`'s run of entries ending at `index` (a conflict hint).
    pub fn first_index_of_term_run(&self, index: LogIndex, floor: LogIndex) -> LogIndex {
        let Some(term) = self.term_at(index) else {
            return index;
        };
        let mut i = index;
        while i > floor && i.0 > self.snapshot_index.0 + 1 && self.term_at(LogIndex(i.0 - 1)) == Some(term) {
            i = LogIndex(i.0 - 1);
        }
        i
    }

    /// Appends one entry (volatile until [`LogStore::sync`]).
    pub fn append<D: Disk>(&mut self, disk: &mut D, entry: Entry) -> Result<(), RaftError> {
        assert_eq!(entry.index.0, self.last_index().0 + 1, "log entries are contiguous");
        let mut rec = Vec::with_capacity(RECORD_HEADER_BYTES + entry.command.len());
        encode_record(&entry, &mut rec);
        let pos = disk.append(&self.path, &rec)?;
        assert_eq!(pos, self.file_len, "only this store writes the log file");
        self.file_len = pos + rec.len() as u64;
        self.entries.push_back((entry, pos));
        self.dirty = true;
        Ok(())
    }

    /// Removes every entry from `index` on (volatile until synced; may be undone by a crash).
    pub fn truncate_from<D: Disk>(&mut self, disk: &mut D, index: LogIndex) -> Result<(), RaftError> {
        assert!(
            index > self.snapshot_index,
            "snapshotted entries are committed and never cut"
        );
        let Some(offset) = usize::try_from(index.0 - self.snapshot_index.0 - 1).ok() else {
            return Ok(());
        };
        if offset >= self.entries.len() {
            return Ok(());
        }
        let pos = self.entries[offset].1;
        disk.truncate(&self.path, pos)?;
        self.entries.truncate(offset);
        self.file_len = pos;
        self.dirty = true;
        Ok(())
    }

    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    pub fn sync<D: Disk>(&mut self, disk: &mut D) -> Result<(), RaftError> {
        if self.dirty {
            disk.sync(&self.path)?;
            self.dirty = false;
        }
        Ok(())
    }

    /// Forgets entries up to `index` (now covered by a stored snapshot), and rewrites the log
    /// file atomically with what follows. When the entry at `index` does not have `term`, the
    /// whole log is stale (an installed snapshot replaced it) and is dropped.
    pub fn compact<D: Disk>(&mut self, disk: &mut D, index: LogIndex, term: Term) -> Result<(), RaftError> {
        let keep_suffix = self.term_at(index) == Some(term);
        let kept: Vec<Entry> = if keep_suffix {
            self.entries
                .iter()
                .filter(|(e, _)| e.index > index)
                .map(|(e, _)| e.clone())
                .collect()
        } else {
            Vec::new()
        };
        let mut bytes = Vec::new();
        let mut positioned = VecDeque::with_capacity(kept.len());
        for e in kept {
            let pos = bytes.len() as u64;
            encode_record(&e, &mut bytes);
            positioned.push_back((e, pos));
        }
        disk.write_file_atomic(&self.path, &bytes)?;
        self.entries = positioned;
        self.snapshot_index = index;
        self.snapshot_term = term;
        self.file_len = bytes.len() as u64;
        self.dirty = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::mem::{CrashMode, MemDisk};

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            term: Term(term),
            index: LogIndex(index),
            command: Bytes::from(format!("cmd{index}")),
        }
    }

    #[test]
    fn synced_entries_survive_and_torn_tails_are_cut() {
        let mut kept = 0;
        for seed in 0..200 {
            let mut disk = MemDisk::new();
            let mut log = LogStore::open(&mut disk, "r", LogIndex(0), Term(0)).unwrap();
            for i in 1..=5 {
                log.append(&mut disk, entry(i, 1)).unwrap();
            }
            log.sync(&mut disk).unwrap();
            for i in 6..=9 {
                log.append(&mut disk, entry(i, 2)).unwrap();
            }
            disk.crash(CrashMode::Torn { seed });
            let mut log = LogStore::open(&mut disk, "r", LogIndex(0), Term(0)).unwrap();
            assert!(log.last_index() >= LogIndex(5), "seed {seed}: synced entries lost");
            for i in 1..=log.last_index().0 {
                assert_eq!(log.get(LogIndex(i)), Some(&entry(i, if i <= 5 { 1 } else { 2 })));
            }
            kept += log.last_index().0 - 5;
            // The store can append after a recovered tail and read it back.
            let next = log.last_index().0 + 1;
            log.append(&mut disk, entry(next, 3)).unwrap();
            log.sync(&mut disk).unwrap();
            let log = LogStore::open(&mut disk, "r", LogIndex(0), Term(0)).unwrap();
            assert_eq!(log.last_index(), LogIndex(next));
        }
        println!("unsynced entries that survived torn crashes: {kept}");
        assert!(
            kept > 0,
            "no torn crash kept anything: the test compared nothing beyond the synced prefix"
        );
    }

    #[test]
    fn truncate_and_compact() {
        let mut disk = MemDisk::new();
        let mut log = LogStore::open(&mut disk, "r", LogIndex(0), Term(0)).unwrap();
        for i in 1..=10 {
            log.append(&mut disk, entry(i, 1)).unwrap();
        }
        log.truncate_from(&mut disk, LogIndex(8)).unwrap();
        log.append(&mut disk, entry(8, 2)).unwrap();
        log.sync(&mut disk).unwrap();
        log.compact(&mut disk, LogIndex(4), Term(1)).unwrap();
        assert_eq!(log.term_at(LogIndex(4)), Some(Term(1)));
        assert_eq!(log.get(LogIndex(4)), None);
        assert_eq!(log.last_index(), LogIndex(8));
        let log = LogStore::open(&mut disk, "r", LogIndex(4), Term(1)).unwrap();
        assert_eq!(log.last_index(), LogIndex(8));
        assert_eq!(log.get(LogIndex(8)).unwrap().term, Term(2));
        // A stale log against a snapshot whose term disagrees at its index is dropped.
        let log = LogStore::open(&mut disk, "r", LogIndex(6), Term(9)).unwrap();
        assert_eq!(log.last_index(), LogIndex(6));
    }
}
