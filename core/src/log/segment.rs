//! One segment: a file of whole batches back to back, starting at offset `base`, with its
//! sparse offset and time indexes held in memory and mirrored to `.index` / `.timeindex`.
//!
//! Fault model: the `.log` file may lose or tear its unsynced tail, or hold flipped bits; the
//! index files may be missing, torn or damaged. [`Segment::recover`] walks the file validating
//! every batch (CRC32C included) and stops at the first bad one; [`Segment::load_trusted`] is the
//! quick path for segments below the recovery point, which were synced, and still checks every
//! index entry it uses.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::disk::{Disk, DiskError};
use crate::ids::Offset;
use crate::record::{self, BatchHeader, HEADER_BYTES};

use super::index::{self, Entry};

/// Batches whose start a segment remembers in memory, newest last ([`Segment::recent_batches`]).
pub const RECENT_BATCHES_MAX: usize = 64;

/// The segment and index file names for a base offset, as Kafka names them.
pub fn file_name(base: Offset, suffix: &str) -> String {
    format!("{:020}.{suffix}", base.0)
}

#[derive(Clone, Debug)]
pub struct Segment {
    pub base: Offset,
    /// The offset after the last batch (`base` when empty).
    pub next: Offset,
    pub size: u64,
    /// Largest batch max-timestamp, -1 when empty.
    pub max_timestamp: i64,
    /// Base offset of the batch holding `max_timestamp`.
    pub offset_of_max_timestamp: i64,
    /// The first batch's max-timestamp: `segment.ms` counts from it (as Kafka's rolling base).
    pub first_timestamp: Option<i64>,
    pub offset_index: Vec<Entry>,
    pub time_index: Vec<Entry>,
    /// Base offset (`key`) and position (`value`) of the last [`RECENT_BATCHES_MAX`] batches
    /// tracked, oldest first: a dense index of the tail, memory only. Followers and consumers
    /// read near the log end, and the sparse index alone made each such read walk up to
    /// `index.interval.bytes` of headers (a disk read each) from the last entry.
    pub recent_batches: VecDeque<Entry>,
    /// Entries already written to the index files.
    pub offset_index_written: usize,
    pub time_index_written: usize,
    pub bytes_since_index: u64,
    /// Holds writes not yet synced.
    pub dirty: bool,
    /// Shared with the [`ReadSlice`](super::ReadSlice)s read from it: a read copies no path,
    /// and the disk sees the same string each time (`MemDisk` finds a file by the string's
    /// address first).
    pub log_path: Arc<str>,
    pub index_path: String,
    pub time_index_path: String,
}

/// How a scan of a segment file ended.
#[derive(Debug, PartialEq, Eq)]
pub enum ScanEnd {
    /// Every byte belongs to a valid batch.
    Clean,
    /// A torn or corrupt batch starts at this position; everything from it on is invalid.
    BadAt(u64),
}

impl Segment {
    pub fn new(dir: &str, base: Offset) -> Segment {
        Segment {
            base,
            next: base,
            size: 0,
            max_timestamp: -1,
            offset_of_max_timestamp: base.0,
            first_timestamp: None,
            offset_index: Vec::new(),
            time_index: Vec::new(),
            recent_batches: VecDeque::new(),
            offset_index_written: 0,
            time_index_written: 0,
            bytes_since_index: 0,
            dirty: false,
            log_path: format!("{dir}/{}", file_name(base, "log")).into(),
            index_path: format!("{dir}/{}", file_name(base, "index")),
            time_index_path: format!("{dir}/{}", file_name(base, "timeindex")),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Accounts for a batch appended at `position` (indexes, sizes, timestamps).
    pub fn track(&mut self, header: &BatchHeader, position: u64, index_interval_bytes: u64) {
        if self.bytes_since_index >= index_interval_bytes {
            self.offset_index.push(Entry {
                key: header.base_offset.0,
                value: position as i64,
            });
            if self.time_index.last().is_none_or(|e| self.max_timestamp > e.key) && self.max_timestamp >= 0 {
                let at = self.offset_of_max_timestamp;
                self.time_index.push(Entry {
                    key: self.max_timestamp,
                    value: at,
                });
            }
            self.bytes_since_index = 0;
        }
        if self.recent_batches.len() == RECENT_BATCHES_MAX {
            self.recent_batches.pop_front();
        }
        self.recent_batches.push_back(Entry {
            key: header.base_offset.0,
            value: position as i64,
        });
        let bytes = header.total_bytes() as u64;
        self.bytes_since_index += bytes;
        self.size = position + bytes;
        self.next = header.next_offset();
        if header.max_timestamp > self.max_timestamp {
            self.max_timestamp = header.max_timestamp;
            self.offset_of_max_timestamp = header.base_offset.0;
        }
        if self.first_timestamp.is_none() {
            self.first_timestamp = Some(header.max_timestamp);
        }
    }
}

/// Reads the batch header at `position` if a whole header fits before `size`.
pub fn read_header<D: Disk>(disk: &D, path: &str, position: u64, size: u64) -> Result<Option<BatchHeader>, DiskError> {
    if position + HEADER_BYTES as u64 > size {
        return Ok(None);
    }
    let mut buf = [0u8; HEADER_BYTES];
    disk.read_at(path, position, &mut buf)?;
    Ok(BatchHeader::parse(&buf).ok())
}

impl Segment {
    /// Rebuilds a segment from its file alone, validating every batch: magic, length, CRC32C,
    /// contiguous offsets from `base`, and a size at most `batch_bytes_max`. Stops at the first
    /// bad batch and reports where; the caller truncates there.
    pub fn recover<D: Disk>(
        disk: &D,
        dir: &str,
        base: Offset,
        index_interval_bytes: u64,
        batch_bytes_max: usize,
        mut on_batch: impl FnMut(&BatchHeader),
    ) -> Result<(Segment, ScanEnd), DiskError> {
        let mut seg = Segment::new(dir, base);
        let file_size = disk.len(&seg.log_path)?;
        let mut position = 0u64;
        let mut buf = Vec::new();
        while position < file_size {
            let Some(header) = read_header(disk, &seg.log_path, position, file_size)? else {
                return Ok((seg, ScanEnd::BadAt(position)));
            };
            let total = header.total_bytes() as u64;
            let fits = header.batch_length >= (HEADER_BYTES - record::LOG_OVERHEAD) as i32
                && header.total_bytes() <= batch_bytes_max
                && position + total <= file_size;
            if !fits || header.base_offset != seg.next {
                return Ok((seg, ScanEnd::BadAt(position)));
            }
            buf.resize(header.total_bytes(), 0);
            disk.read_at(&seg.log_path, position, &mut buf)?;
            if record::validate_batch(&buf).is_err() {
                return Ok((seg, ScanEnd::BadAt(position)));
            }
            on_batch(&header);
            seg.track(&header, position, index_interval_bytes);
            position += total;
        }
        Ok((seg, ScanEnd::Clean))
    }

    /// Loads a synced segment from its index files without reading every batch. Returns `None`
    /// when an index is missing, damaged, or disagrees with the segment file in any checked way;
    /// the caller then falls back to [`Segment::recover`].
    pub fn load_trusted<D: Disk>(
        disk: &D,
        dir: &str,
        base: Offset,
        index_interval_bytes: u64,
    ) -> Result<Option<Segment>, DiskError> {
        let mut seg = Segment::new(dir, base);
        if !disk.exists(&seg.index_path) || !disk.exists(&seg.time_index_path) {
            return Ok(None);
        }
        let size = disk.len(&seg.log_path)?;
        let (Some(offsets), Some(times)) = (
            index::decode(&disk.read_all(&seg.index_path)?),
            index::decode(&disk.read_all(&seg.time_index_path)?),
        ) else {
            return Ok(None);
        };
        // Offset entries: keys above base, positions increasing and inside the file.
        let mut last_position = 0i64;
        for e in &offsets {
            if e.key <= base.0 || e.value <= last_position || e.value as u64 >= size {
                return Ok(None);
            }
            last_position = e.value;
        }
        // Walk from the last indexed batch to the end: it must chain exactly to the file's end.
        let (mut position, mut expected) = match offsets.last() {
            Some(e) => (e.value as u64, Offset(e.key)),
            None => (0, base),
        };
        let mut tail_max_ts = -1i64;
        let mut tail_max_at = base.0;
        let mut first_timestamp = None;
        let mut bytes_since_index = 0;
        while position < size {
            let Some(header) = read_header(disk, &seg.log_path, position, size)? else {
                return Ok(None);
            };
            if header.base_offset != expected
                || header.total_bytes() < HEADER_BYTES
                || position + header.total_bytes() as u64 > size
            {
                return Ok(None);
            }
            if position == 0 {
                first_timestamp = Some(header.max_timestamp);
            }
            if header.max_timestamp > tail_max_ts {
                tail_max_ts = header.max_timestamp;
                tail_max_at = header.base_offset.0;
            }
            expected = header.next_offset();
            position += header.total_bytes() as u64;
            bytes_since_index += header.total_bytes() as u64;
        }
        // Time entries: timestamps increase (decode checked), offsets inside the segment.
        if times.iter().any(|e| e.value < base.0 || e.value >= expected.0)
            || times.windows(2).any(|w| w[0].value > w[1].value)
        {
            return Ok(None);
        }
        if size > 0 && first_timestamp.is_none() {
            match read_header(disk, &seg.log_path, 0, size)? {
                Some(h) if h.base_offset == base => first_timestamp = Some(h.max_timestamp),
                _ => return Ok(None),
            }
        }
        let (index_max_ts, index_max_at) = times.last().map_or((-1, base.0), |e| (e.key, e.value));
        (seg.max_timestamp, seg.offset_of_max_timestamp) = if tail_max_ts > index_max_ts {
            (tail_max_ts, tail_max_at)
        } else {
            (index_max_ts, index_max_at)
        };
        seg.next = expected;
        seg.size = size;
        seg.first_timestamp = first_timestamp;
        seg.offset_index_written = offsets.len();
        seg.time_index_written = times.len();
        seg.offset_index = offsets;
        seg.time_index = times;
        // Only an approximation of the bytes since the last entry matters: it spaces entries.
        seg.bytes_since_index = bytes_since_index.min(index_interval_bytes);
        Ok(Some(seg))
    }

    /// Position and header of the first batch whose last offset is at least `offset`, or `None`
    /// when the segment ends first. The index gives a starting point whose batch must carry the
    /// indexed base offset; if not, the search restarts from the segment's start. A recent batch
    /// at or before `offset` is a closer starting point than the sparse index (checked the same way).
    pub fn find<D: Disk>(&self, disk: &D, offset: Offset) -> Result<Option<(u64, BatchHeader)>, DiskError> {
        let indexed = index::floor(&self.offset_index, offset.0, false)
            .map_or((0, self.base), |e| (e.value as u64, Offset(e.key)));
        let recent = self.recent_batches.partition_point(|e| e.key <= offset.0);
        let start = match recent.checked_sub(1).map(|i| self.recent_batches[i]) {
            Some(e) if e.value as u64 >= indexed.0 => (e.value as u64, Offset(e.key)),
            _ => indexed,
        };
        match self.scan_from(disk, start.0, start.1, |h| h.last_offset() >= offset)? {
            Some(found) => Ok(Some(found)),
            None if start.0 != 0 => self.scan_from(disk, 0, self.base, |h| h.last_offset() >= offset),
            None => Ok(None),
        }
    }

    /// First batch with max-timestamp at least `timestamp`.
    pub fn find_timestamp<D: Disk>(&self, disk: &D, timestamp: i64) -> Result<Option<(u64, BatchHeader)>, DiskError> {
        let from = index::floor(&self.time_index, timestamp, true)
            .and_then(|t| index::floor(&self.offset_index, t.value, false))
            .map_or((0, self.base), |e| (e.value as u64, Offset(e.key)));
        self.scan_from(disk, from.0, from.1, |h| h.max_timestamp >= timestamp)
    }

    /// Walks batch headers from `position` (whose batch must start at `expected`) until `stop`.
    fn scan_from<D: Disk>(
        &self,
        disk: &D,
        mut position: u64,
        mut expected: Offset,
        stop: impl Fn(&BatchHeader) -> bool,
    ) -> Result<Option<(u64, BatchHeader)>, DiskError> {
        while let Some(header) = read_header(disk, &self.log_path, position, self.size)? {
            if header.base_offset != expected || header.total_bytes() < HEADER_BYTES {
                return Ok(None);
            }
            if stop(&header) {
                return Ok(Some((position, header)));
            }
            expected = header.next_offset();
            position += header.total_bytes() as u64;
        }
        Ok(None)
    }

    /// Appends index entries not yet in the index files. They are synced when the segment is
    /// (at roll); until then a crash may lose them and recovery rebuilds them.
    pub fn write_pending_index<D: Disk>(&mut self, disk: &mut D) -> Result<(), DiskError> {
        for (path, entries, written) in [
            (&self.index_path, &self.offset_index, &mut self.offset_index_written),
            (&self.time_index_path, &self.time_index, &mut self.time_index_written),
        ] {
            if *written < entries.len() {
                if !disk.exists(path) {
                    disk.create(path)?;
                }
                disk.append(path, &index::encode(&entries[*written..]))?;
                *written = entries.len();
            }
        }
        Ok(())
    }

    /// Replaces both index files with the in-memory indexes, atomically.
    pub fn rewrite_index<D: Disk>(&mut self, disk: &mut D) -> Result<(), DiskError> {
        disk.write_file_atomic(&self.index_path, &index::encode(&self.offset_index))?;
        disk.write_file_atomic(&self.time_index_path, &index::encode(&self.time_index))?;
        self.offset_index_written = self.offset_index.len();
        self.time_index_written = self.time_index.len();
        Ok(())
    }

    /// Syncs the segment file and its index files.
    pub fn sync_all<D: Disk>(&mut self, disk: &mut D) -> Result<(), DiskError> {
        self.write_pending_index(disk)?;
        disk.sync(&self.log_path)?;
        for path in [&self.index_path, &self.time_index_path] {
            if disk.exists(path) {
                disk.sync(path)?;
            }
        }
        self.dirty = false;
        Ok(())
    }

    /// Removes the segment's files.
    pub fn delete_files<D: Disk>(&self, disk: &mut D) -> Result<(), DiskError> {
        for path in [&*self.log_path, &self.index_path, &self.time_index_path] {
            if disk.exists(path) {
                disk.remove(path)?;
            }
        }
        Ok(())
    }
}
