//! The partition log: an append-only sequence of segments holding Kafka RecordBatch v2 bytes as
//! produced, over the [`Disk`] model.
//!
//! Contract:
//! - Offsets are assigned by the log on the leader ([`Log::append_as_leader`]) and kept as sent
//!   on a follower ([`Log::append_replicated`]); they are contiguous from the log start offset.
//! - A record set is validated whole (magic, lengths, CRC32C, `max.message.bytes`) before any
//!   byte is written: a refused append changes nothing. An append that returns an error wrote
//!   nothing the log counts: a new leader epoch is checkpointed before its first batch is
//!   written, so no step that can fail comes after the batch is in (the broker's producer state
//!   follows the log's answer, and must not miss a batch the log holds).
//! - Reads return whole batches as a file region ([`ReadSlice`]) so a binding can send them with
//!   sendfile/splice; the first batch is the one holding the requested offset, as in Kafka.
//! - Durability is explicit. [`Log::append_as_leader`] reports when the flush policy
//!   (`flush.messages`, `flush.ms`) wants a sync; the caller calls [`Log::flush`], so a driver
//!   can append many producers' batches and sync them once (group commit).
//! - Crash recovery ([`Log::open`]) keeps every batch that was synced, truncates a torn or corrupt
//!   tail at the first bad batch, drops segments after a gap, and rebuilds indexes that are
//!   missing or damaged. Segments below the recovery point (synced at roll) are loaded from their
//!   indexes after checking them; the rest are scanned batch by batch.
//! - A failed sync poisons the log (model rule 5): every later call returns [`LogError::Failed`].

pub mod config;
pub mod epoch;
pub mod index;
pub mod segment;

use std::sync::Arc;

use thiserror::Error;

use crate::disk::{Disk, DiskError};
use crate::ids::{LeaderEpoch, Offset};
use crate::record::{self, BatchError, BatchHeader};

pub use config::LogConfig;
pub use epoch::EpochCache;
use segment::{ScanEnd, Segment};

/// A read walks the headers after its first batch in memory when at most this many bytes of the
/// segment follow it (read at once); else one header read at a time.
const TAIL_WALK_BYTES_MAX: usize = 8 * 1024;

/// The file holding the offset below which every segment was synced with its indexes.
pub const RECOVERY_POINT_FILE: &str = "recovery-point-checkpoint";

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LogError {
    #[error("invalid record set: {0}")]
    Batch(#[from] BatchError),
    #[error("disk: {0}")]
    Disk(#[from] DiskError),
    #[error("offset {requested} is out of range [{start}, {end}]")]
    OffsetOutOfRange {
        requested: Offset,
        start: Offset,
        end: Offset,
    },
    #[error("leader epoch {got} is older than the log's latest epoch {latest}")]
    StaleEpoch { got: LeaderEpoch, latest: LeaderEpoch },
    #[error("replicated batch starts at offset {got}, the log ends at {expected}")]
    NonContiguous { expected: Offset, got: Offset },
    #[error("batch of {size} bytes can never fit in a segment of {segment_bytes} bytes")]
    LargerThanSegment { size: u64, segment_bytes: u64 },
    #[error("invalid log configuration: {0}")]
    Config(String),
    #[error("the log failed after a disk error and accepts no more operations: {0}")]
    Failed(String),
}

/// What an append did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: Offset,
    pub last_offset: Offset,
    /// The flush policy asks for [`Log::flush`] now.
    pub flush_due: bool,
}

/// Whole batches in one segment file: `len` bytes at `position` of `path`. `len == 0` means no
/// data (the request was at the log end, or the limit excluded the next batch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadSlice {
    /// The segment's own path string (see [`Segment::log_path`]).
    pub path: Arc<str>,
    pub position: u64,
    pub len: u64,
    /// Base offset of the first batch returned.
    pub first_offset: Offset,
    /// The offset after the last batch returned.
    pub next_offset: Offset,
    /// The slice's bytes, when the read already held them: a read near the segment's end takes
    /// the whole tail from the first batch on in one read of at most
    /// `TAIL_WALK_BYTES_MAX` bytes to walk its headers. [`Log::read_bytes`] returns these
    /// instead of reading the file again; a binding that sends from the file ignores them.
    pub bytes: Option<Vec<u8>>,
}

/// What recovery found, for logs and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segments scanned batch by batch.
    pub segments_scanned: usize,
    /// Segments loaded from their (checked) indexes.
    pub segments_trusted: usize,
    /// Bytes cut from a torn or corrupt tail.
    pub bytes_truncated: u64,
    /// Whole segments dropped after a gap or a corrupt tail.
    pub segments_dropped: usize,
    /// Index file pairs rewritten because they were missing or differed from the segment.
    pub indexes_rebuilt: usize,
    /// The leader-epoch checkpoint was missing or damaged and rebuilt from the batches.
    pub epochs_rebuilt: bool,
}

/// One partition's log.
pub struct Log {
    dir: String,
    config: LogConfig,
    /// In ascending base order, each base once; never empty. The last is the active segment.
    /// A vector, not a map: the log end (the last segment's end) and start (the first's base)
    /// are read on every fetch, append and HW check, where a `BTreeMap` walked to its ends
    /// (~2M instructions a batched benchmark seed).
    segments: Vec<Segment>,
    epochs: EpochCache,
    unflushed_records: u64,
    /// `now_ms` of the first append since the last flush.
    unflushed_since_ms: Option<i64>,
    /// `now_ms` of the first roll whose closed segment is not yet synced.
    closed_unsynced_since_ms: Option<i64>,
    /// The recovery point last written to the checkpoint.
    recovery_point: Offset,
    failed: Option<String>,
    recovery: RecoveryReport,
}

fn parse_segment_name(name: &str) -> Option<Offset> {
    let digits = name.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(Offset)
}

impl Log {
    /// Opens (creating if needed) the log in `dir`, recovering it after a crash.
    pub fn open<D: Disk>(disk: &mut D, dir: &str, config: LogConfig) -> Result<Log, LogError> {
        config.validate()?;
        let names = disk.list(dir)?;
        for name in &names {
            // Leftovers of an interrupted atomic write, and indexes whose segment is gone.
            let orphan_index = [".index", ".timeindex"].iter().any(|suffix| {
                name.strip_suffix(suffix)
                    .is_some_and(|stem| !names.contains(&format!("{stem}.log")))
            });
            if name.ends_with(".tmp") || orphan_index {
                disk.remove(&format!("{dir}/{name}"))?;
            }
        }
        let bases: Vec<Offset> = names.iter().filter_map(|n| parse_segment_name(n)).collect();
        let recovery_point = disk
            .read_all(&format!("{dir}/{RECOVERY_POINT_FILE}"))
            .ok()
            .and_then(|b| std::str::from_utf8(&b).ok()?.trim().parse::<i64>().ok())
            .map_or(Offset(0), Offset);
        let checkpoint = disk
            .read_all(&format!("{dir}/{}", epoch::FILE))
            .ok()
            .and_then(|b| EpochCache::decode(&b));

        let mut report = RecoveryReport::default();
        let mut segments: Vec<Segment> = Vec::new();
        let mut scanned_epochs = EpochCache::default();
        let mut end: Option<Offset> = None; // where the previous segment ended
        let mut broken = false;
        for (i, &base) in bases.iter().enumerate() {
            let mut seg = Segment::new(dir, base);
            if broken || end.is_some_and(|e| e != base) {
                seg.delete_files(disk)?;
                report.segments_dropped += 1;
                broken = true;
                continue;
            }
            let below_recovery_point = bases.get(i + 1).is_some_and(|&next| next <= recovery_point);
            let trusted = if below_recovery_point {
                Segment::load_trusted(disk, dir, base, config.index_interval_bytes)?
            } else {
                None
            };
            if let Some(t) = trusted {
                report.segments_trusted += 1;
                seg = t;
            } else {
                let (recovered, scan_end) =
                    Segment::recover(disk, dir, base, config.index_interval_bytes, usize::MAX, |h| {
                        scanned_epochs.assign(h.partition_leader_epoch, h.base_offset);
                    })?;
                report.segments_scanned += 1;
                seg = recovered;
                if let ScanEnd::BadAt(position) = scan_end {
                    report.bytes_truncated += disk.len(&seg.log_path)? - position;
                    disk.truncate(&seg.log_path, position)?;
                    broken = true;
                }
                let on_disk = (
                    disk.read_all(&seg.index_path).ok().and_then(|b| index::decode(&b)),
                    disk.read_all(&seg.time_index_path).ok().and_then(|b| index::decode(&b)),
                );
                if on_disk != (Some(seg.offset_index.clone()), Some(seg.time_index.clone())) {
                    seg.rewrite_index(disk)?;
                    report.indexes_rebuilt += 1;
                }
                // What survived is now the truth; make it durable before trusting it later.
                seg.offset_index_written = seg.offset_index.len();
                seg.time_index_written = seg.time_index.len();
                seg.sync_all(disk)?;
            }
            end = Some(seg.next);
            segments.push(seg);
        }
        // In base order, as a map keyed by base held them: `Disk::list` sorts, and a name of
        // exactly 20 digits gives each base once, so this only guards against a disk that does not.
        segments.sort_by_key(|s| s.base);
        if segments.is_empty() {
            let seg = Segment::new(dir, Offset(0));
            disk.create(&seg.log_path)?;
            segments.push(seg);
        }
        let mut log = Log {
            dir: dir.to_string(),
            config,
            segments,
            epochs: EpochCache::default(),
            unflushed_records: 0,
            unflushed_since_ms: None,
            closed_unsynced_since_ms: None,
            recovery_point: Offset(-1),
            failed: None,
            recovery: RecoveryReport::default(),
        };
        let all_scanned = report.segments_trusted == 0;
        log.epochs = match checkpoint {
            Some(cp) => cp,
            None if all_scanned => EpochCache::default(),
            None => {
                report.epochs_rebuilt = true;
                log.epochs_from_batches(disk)?
            }
        };
        for &(e, start) in scanned_epochs.entries() {
            log.epochs.assign(e, start);
        }
        let (start, end) = (log.log_start_offset(), log.log_end_offset());
        log.epochs.truncate_from_end(end);
        log.epochs.truncate_from_start(start);
        log.write_epochs(disk)?;
        // Every segment kept was synced above or trusted: the recovery point is the active one.
        let active = log.active().base;
        log.write_recovery_point(disk, active)?;
        log.recovery = report;
        Ok(log)
    }

    fn epochs_from_batches<D: Disk>(&self, disk: &D) -> Result<EpochCache, LogError> {
        let mut cache = EpochCache::default();
        self.for_each_batch_header(disk, |h| {
            cache.assign(h.partition_leader_epoch, h.base_offset);
        })?;
        Ok(cache)
    }

    /// Calls `f` with the header of every batch in the log, oldest first, offsets as written.
    /// Read-only: for state kept beside the log and derived from it, such as the idempotent
    /// producers' sequence numbers, rebuilt at startup. Reads one header per batch.
    pub fn for_each_batch_header<D: Disk>(&self, disk: &D, mut f: impl FnMut(&BatchHeader)) -> Result<(), LogError> {
        for seg in &self.segments {
            let mut position = 0;
            while let Some(h) = segment::read_header(disk, &seg.log_path, position, seg.size)? {
                f(&h);
                position += h.total_bytes() as u64;
            }
        }
        Ok(())
    }

    pub fn dir(&self) -> &str {
        &self.dir
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    pub fn log_start_offset(&self) -> Offset {
        self.segments.first().expect("a log always has a segment").base
    }

    pub fn log_end_offset(&self) -> Offset {
        self.active().next
    }

    /// Bytes in all segments.
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
    }

    /// Base offsets of the segments, oldest first.
    pub fn segment_bases(&self) -> Vec<Offset> {
        self.segments.iter().map(|s| s.base).collect()
    }

    pub fn epochs(&self) -> &EpochCache {
        &self.epochs
    }

    pub fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.epochs.latest()
    }

    /// KIP-279's OffsetsForLeaderEpoch answer (see [`EpochCache::end_offset_for`]).
    pub fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, Offset)> {
        self.epochs.end_offset_for(epoch, self.log_end_offset())
    }

    fn active(&self) -> &Segment {
        self.segments.last().expect("a log always has a segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments.last_mut().expect("a log always has a segment")
    }

    fn check_failed(&self) -> Result<(), LogError> {
        match &self.failed {
            Some(why) => Err(LogError::Failed(why.clone())),
            None => Ok(()),
        }
    }

    /// Appends a producer's record set: validates it whole, assigns offsets from the log end,
    /// stamps `epoch` into each batch (rewriting `records` in place) and writes it.
    pub fn append_as_leader<D: Disk>(
        &mut self,
        disk: &mut D,
        records: &mut [u8],
        epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        self.check_failed()?;
        let headers = record::validate_record_set(records, self.config.max_message_bytes)?;
        self.append_validated_as_leader(disk, records, &headers, epoch, now_ms)
    }

    /// [`append_as_leader`](Self::append_as_leader) of a record set the caller validated:
    /// `headers` is what `record::validate_record_set(records, max.message.bytes)` returned for
    /// it (the broker validates an idempotent producer's set before its sequence checks, and
    /// the log need not check its CRCs a second time).
    pub fn append_validated_as_leader<D: Disk>(
        &mut self,
        disk: &mut D,
        records: &mut [u8],
        headers: &[BatchHeader],
        epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        self.check_failed()?;
        if let Some(latest) = self.epochs.latest() {
            if epoch < latest {
                return Err(LogError::StaleEpoch { got: epoch, latest });
            }
        }
        let mut next = self.log_end_offset();
        let mut at = 0;
        for h in headers {
            record::set_offset_and_epoch(&mut records[at..], next, epoch);
            next = next.plus(i64::from(h.last_offset_delta) + 1);
            at += h.total_bytes();
        }
        self.write(disk, records, now_ms)
    }

    /// Appends batches copied from the leader, keeping their offsets and epochs. They must start
    /// at this log's end and be contiguous.
    pub fn append_replicated<D: Disk>(
        &mut self,
        disk: &mut D,
        records: &[u8],
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        self.check_failed()?;
        let mut expected = self.log_end_offset();
        let mut latest = self.epochs.latest();
        let mut at = 0;
        if records.is_empty() {
            return Err(BatchError::Empty.into());
        }
        while at < records.len() {
            let h = record::validate_batch(&records[at..])?;
            if h.total_bytes() > self.config.max_message_bytes {
                return Err(BatchError::TooLarge {
                    size: h.total_bytes(),
                    max: self.config.max_message_bytes,
                }
                .into());
            }
            if h.base_offset != expected {
                return Err(LogError::NonContiguous {
                    expected,
                    got: h.base_offset,
                });
            }
            if let Some(l) = latest.filter(|&l| h.partition_leader_epoch < l) {
                return Err(LogError::StaleEpoch {
                    got: h.partition_leader_epoch,
                    latest: l,
                });
            }
            latest = Some(h.partition_leader_epoch);
            expected = h.next_offset();
            at += h.total_bytes();
        }
        self.write(disk, records, now_ms)
    }

    /// Writes validated batches (offsets and epochs final) at the log end.
    fn write<D: Disk>(&mut self, disk: &mut D, records: &[u8], now_ms: i64) -> Result<AppendInfo, LogError> {
        let total = records.len() as u64;
        if total > self.config.segment_bytes {
            return Err(LogError::LargerThanSegment {
                size: total,
                segment_bytes: self.config.segment_bytes,
            });
        }
        // The callers validated every batch. Its headers are parsed again at each use rather
        // than collected: a record set is nearly always one batch, and the vector cost more than
        // the parses.
        let headers = || {
            let mut at = 0usize;
            std::iter::from_fn(move || {
                let h = BatchHeader::parse(records.get(at..)?).ok()?;
                let found = (at, h);
                at += h.total_bytes();
                Some(found)
            })
        };
        let incoming_max_timestamp = headers().map(|(_, h)| h.max_timestamp).max().unwrap_or(-1);
        if self.should_roll(total, incoming_max_timestamp) {
            self.roll(disk, now_ms)?;
        }
        // A new leader epoch goes into the checkpoint before its first batch goes into the
        // segment (Kafka's order: `assign` before `segment.append`). The other order let an
        // append whose checkpoint write failed (EIO) report an error with its batch already in
        // the log: the broker then left that batch out of its producer state, and the producer's
        // retry was written a second time. A checkpoint entry past the log end, if the data
        // write then fails, is harmless: recovery drops epochs that start at or after the end.
        // Only a batch of an epoch newer than the latest changes the cache (`assign`): without
        // one, the cache is neither copied nor written.
        let latest = self.epochs.latest();
        let new_epoch = headers().any(|(_, h)| latest.is_none_or(|l| h.partition_leader_epoch > l));
        let mut changed_epochs = None;
        if new_epoch {
            let mut epochs = self.epochs.clone();
            let mut epochs_changed = false;
            for (_, h) in headers() {
                epochs_changed |= epochs.assign(h.partition_leader_epoch, h.base_offset);
            }
            if epochs_changed {
                disk.write_file_atomic(&format!("{}/{}", self.dir, epoch::FILE), &epochs.encode())?;
            }
            changed_epochs = Some(epochs);
        }
        let interval = self.config.index_interval_bytes;
        let seg = self.segments.last_mut().expect("a log always has a segment");
        let position = match disk.append(&seg.log_path, records) {
            Ok(p) => p,
            Err(e) => {
                // A partial write must not stay behind the log's back.
                if disk.truncate(&seg.log_path, seg.size).is_err() {
                    self.failed = Some(format!("append failed ({e}) and the partial write could not be cut"));
                }
                return Err(e.into());
            }
        };
        if position != seg.size {
            let why = format!("disk appended at {position}, log expected {}", seg.size);
            self.failed = Some(why.clone());
            return Err(LogError::Failed(why));
        }
        // From here nothing can fail: the batches are in the log, and the append must say so.
        seg.dirty = true;
        let mut span: Option<(Offset, Offset)> = None;
        for (at, h) in headers() {
            seg.track(&h, position + at as u64, interval);
            self.unflushed_records += u64::from(h.record_count.max(0).unsigned_abs());
            span = Some((span.map_or(h.base_offset, |s| s.0), h.last_offset()));
        }
        let (base_offset, last_offset) = span.expect("a validated record set has a batch");
        if let Some(epochs) = changed_epochs {
            self.epochs = epochs;
        }
        self.unflushed_since_ms.get_or_insert(now_ms);
        Ok(AppendInfo {
            base_offset,
            last_offset,
            flush_due: self.flush_due(now_ms),
        })
    }

    /// Kafka's rule: roll by size, or when the incoming records are `segment.ms` newer than the
    /// segment's first batch (record time, not the clock: a replay of old records must not roll
    /// a segment per append).
    fn should_roll(&self, incoming: u64, incoming_max_timestamp: i64) -> bool {
        let seg = self.active();
        !seg.is_empty()
            && (seg.size + incoming > self.config.segment_bytes
                || seg
                    .first_timestamp
                    .filter(|&t| t >= 0)
                    .is_some_and(|t| incoming_max_timestamp.saturating_sub(t) >= self.config.segment_ms))
    }

    /// Whether the flush policy wants a sync now.
    pub fn flush_due(&self, now_ms: i64) -> bool {
        self.unflushed_records > 0
            && (self.config.flush_messages.is_some_and(|n| self.unflushed_records >= n)
                || self
                    .config
                    .flush_ms
                    .is_some_and(|ms| self.unflushed_since_ms.is_some_and(|t| now_ms.saturating_sub(t) >= ms)))
    }

    /// When the flush policy's `flush.ms` will next want a sync (for the driver's timer).
    /// None once the log failed: nothing can be synced any more, and a deadline in the past
    /// would have the driver's timer retry at once, for ever (a livelock in virtual time).
    pub fn flush_deadline_ms(&self) -> Option<i64> {
        if self.failed.is_some() {
            return None;
        }
        let since = self.unflushed_since_ms?;
        self.config.flush_ms.map(|ms| since.saturating_add(ms))
    }

    /// When the segments closed by a roll should be synced (for the driver's timer).
    pub fn closed_sync_deadline_ms(&self) -> Option<i64> {
        if self.failed.is_some() {
            return None;
        }
        self.closed_unsynced_since_ms
            .map(|t| t.saturating_add(self.config.closed_segment_sync_delay_ms))
    }

    /// Makes every appended batch durable.
    pub fn flush<D: Disk>(&mut self, disk: &mut D) -> Result<(), LogError> {
        self.check_failed()?;
        self.sync_segments(disk, true)?;
        self.unflushed_records = 0;
        self.unflushed_since_ms = None;
        Ok(())
    }

    /// Syncs the segments closed by rolls (with their indexes) and moves the recovery point past
    /// them, leaving the active segment as the flush policy has it.
    pub fn sync_closed<D: Disk>(&mut self, disk: &mut D) -> Result<(), LogError> {
        self.check_failed()?;
        self.sync_segments(disk, false)
    }

    fn sync_segments<D: Disk>(&mut self, disk: &mut D, include_active: bool) -> Result<(), LogError> {
        let active = self.active().base;
        let mut result = Ok(());
        for seg in self.segments.iter_mut().filter(|s| s.dirty) {
            let synced = if seg.base == active {
                if !include_active {
                    continue;
                }
                seg.write_pending_index(disk).and_then(|()| disk.sync(&seg.log_path))
            } else {
                seg.sync_all(disk)
            };
            if let Err(e) = synced {
                result = Err(e);
                break;
            }
            seg.dirty = false;
        }
        if let Err(e) = result {
            self.failed = Some(format!("sync failed: {e}"));
            return Err(e.into());
        }
        self.closed_unsynced_since_ms = None;
        self.update_recovery_point(disk)
    }

    /// Closes the active segment and starts a new one at the log end. The closed segment is not
    /// synced here: a sync of up to `segment.bytes` on the append path would stall producers
    /// (measured: appends fell to 0.22 of a plain write loop with flush off). It is synced by the
    /// next [`Log::flush`] or [`Log::sync_closed`] (the driver calls it at
    /// [`Log::closed_sync_deadline_ms`]); until then the recovery point stays before it, so
    /// recovery scans it rather than trusting it.
    pub fn roll<D: Disk>(&mut self, disk: &mut D, now_ms: i64) -> Result<(), LogError> {
        self.check_failed()?;
        if self.active().is_empty() {
            return Ok(());
        }
        let base = self.log_end_offset();
        tracing::debug!(target: "log", dir = %self.dir, base = base.0, "segment rolled");
        let closing = self.active_mut();
        closing.write_pending_index(disk)?;
        // Dirty until synced with its indexes, even if its data was flushed.
        closing.dirty = true;
        let seg = Segment::new(&self.dir, base);
        disk.create(&seg.log_path)?;
        // After every other: `base` is the active segment's end, past its (non-empty) start.
        self.segments.push(seg);
        self.closed_unsynced_since_ms.get_or_insert(now_ms);
        Ok(())
    }

    /// The recovery point is the base of the first segment not yet synced with its indexes (the
    /// active one at best); the checkpoint is rewritten when it moves.
    fn update_recovery_point<D: Disk>(&mut self, disk: &mut D) -> Result<(), LogError> {
        let active = self.active().base;
        let point = self
            .segments
            .iter()
            .find(|s| s.dirty && s.base != active)
            .map_or(active, |s| s.base);
        if point != self.recovery_point {
            self.write_recovery_point(disk, point)?;
        }
        Ok(())
    }

    fn write_recovery_point<D: Disk>(&mut self, disk: &mut D, point: Offset) -> Result<(), LogError> {
        disk.write_file_atomic(
            &format!("{}/{RECOVERY_POINT_FILE}", self.dir),
            point.0.to_string().as_bytes(),
        )?;
        self.recovery_point = point;
        Ok(())
    }

    fn write_epochs<D: Disk>(&mut self, disk: &mut D) -> Result<(), LogError> {
        disk.write_file_atomic(&format!("{}/{}", self.dir, epoch::FILE), &self.epochs.encode())?;
        Ok(())
    }

    /// Reads whole batches from `offset`: the batch holding `offset` first, then following
    /// batches of the same segment while they fit in `max_bytes` (at least one batch is returned
    /// whatever its size, as KIP-74) and end at or before `max_offset` (the high watermark for
    /// consumers).
    pub fn read<D: Disk>(
        &self,
        disk: &D,
        offset: Offset,
        max_bytes: u64,
        max_offset: Option<Offset>,
    ) -> Result<ReadSlice, LogError> {
        let (start, end) = (self.log_start_offset(), self.log_end_offset());
        if offset < start || offset > end {
            return Err(LogError::OffsetOutOfRange {
                requested: offset,
                start,
                end,
            });
        }
        let limit = max_offset.unwrap_or(end).min(end);
        // The last segment based at or below `offset`.
        let at = self.segments.partition_point(|s| s.base <= offset);
        let seg = &self.segments[at.checked_sub(1).expect("offset >= log start has a segment")];
        let empty = |at: Offset| ReadSlice {
            path: seg.log_path.clone(),
            position: 0,
            len: 0,
            first_offset: at,
            next_offset: at,
            bytes: None,
        };
        let seg = if offset >= seg.next {
            // Only possible at the end of a segment whose successor is empty, or at the log end.
            // The first segment based at or above `offset`.
            let from = self.segments.partition_point(|s| s.base < offset);
            match self.segments.get(from) {
                Some(s) if s.base == offset => s,
                _ => return Ok(empty(offset)),
            }
        } else {
            seg
        };
        let Some((position, first)) = seg.find(disk, offset)? else {
            return Ok(empty(offset));
        };
        if first.next_offset() > limit {
            return Ok(empty(offset));
        }
        let mut len = first.total_bytes() as u64;
        let mut next = first.next_offset();
        // The following batches while they fit. Near the segment's end (a follower or consumer
        // that keeps up), the rest of the file is read once and its headers walked in memory: one
        // read instead of one per header. The walk and where it stops are the same either way.
        // When the first batch fits in that read too, the read starts at it and its bytes are
        // kept for the answer (`ReadSlice::bytes`): the caller that needs them reads nothing
        // again (a fetch served the same bytes from two reads, the second into a zeroed buffer).
        let from = position + len;
        let rest = seg.size.saturating_sub(from);
        let keep = len + rest <= TAIL_WALK_BYTES_MAX as u64;
        // Takes the next batch if it continues the read and fits; false ends the walk.
        let mut take = |h: &BatchHeader| {
            let fits = h.base_offset == next && h.next_offset() <= limit && len + h.total_bytes() as u64 <= max_bytes;
            if fits {
                len += h.total_bytes() as u64;
                next = h.next_offset();
            }
            fits
        };
        let mut bytes = None;
        if rest <= TAIL_WALK_BYTES_MAX as u64 {
            let start = if keep { position } else { from };
            let tail_len = (seg.size - start) as usize;
            // Too short for a header (and not kept): nothing to walk, nothing to read.
            let mut tail = if keep || rest >= record::HEADER_BYTES as u64 {
                disk.read_vec(&seg.log_path, start, tail_len)?
            } else {
                Vec::new()
            };
            let mut at = (from - start) as usize;
            while let Some(h) = tail
                .get(at..at.saturating_add(record::HEADER_BYTES))
                .and_then(|b| BatchHeader::parse(b).ok())
            {
                if !take(&h) {
                    break;
                }
                at = at.saturating_add(h.total_bytes());
            }
            if keep {
                tail.truncate(len as usize);
                bytes = Some(tail);
            }
        } else {
            let mut at = from;
            while let Some(h) = segment::read_header(disk, &seg.log_path, at, seg.size)? {
                if !take(&h) {
                    break;
                }
                at += h.total_bytes() as u64;
            }
        }
        Ok(ReadSlice {
            path: seg.log_path.clone(),
            position,
            len,
            first_offset: first.base_offset,
            next_offset: next,
            bytes,
        })
    }

    /// The bytes of a slice (for bindings that cannot send from the file, and for tests): the
    /// ones the read kept, else read from the file.
    pub fn read_bytes<D: Disk>(disk: &D, slice: ReadSlice) -> Result<Vec<u8>, LogError> {
        if let Some(bytes) = slice.bytes {
            return Ok(bytes);
        }
        let len = usize::try_from(slice.len).map_err(|_| LogError::Config("slice too large".into()))?;
        Ok(disk.read_vec(&slice.path, slice.position, len)?)
    }

    /// The record batch holding the largest timestamp (ListOffsets' MAX_TIMESTAMP, KIP-734):
    /// its base offset and that timestamp. `None` for an empty log.
    pub fn max_timestamp(&self) -> Option<(Offset, i64)> {
        self.segments
            .iter()
            .filter(|s| !s.is_empty())
            .max_by_key(|s| s.max_timestamp)
            .map(|s| (Offset(s.offset_of_max_timestamp), s.max_timestamp))
    }

    /// ListOffsets by timestamp: the first offset whose record timestamp is at least
    /// `timestamp`, with that timestamp. For a compressed batch the batch's base offset and max
    /// timestamp are returned (records are not decompressed in the log). `None` past the end.
    pub fn offset_for_timestamp<D: Disk>(&self, disk: &D, timestamp: i64) -> Result<Option<(Offset, i64)>, LogError> {
        for seg in self.segments.iter().filter(|s| s.max_timestamp >= timestamp) {
            let Some((position, h)) = seg.find_timestamp(disk, timestamp)? else {
                continue;
            };
            let mut buf = vec![0u8; h.total_bytes()];
            disk.read_at(&seg.log_path, position, &mut buf)?;
            let exact = record::records(&buf).and_then(|recs| {
                recs.iter()
                    .find(|r| r.timestamp >= timestamp)
                    .map(|r| (r.offset, r.timestamp))
            });
            return Ok(Some(exact.unwrap_or((h.base_offset, h.max_timestamp))));
        }
        Ok(None)
    }

    /// Removes every batch at or after the one holding `offset` (follower truncation by leader
    /// epoch). The log end becomes that batch's base offset. Durable before it returns: an undone
    /// truncation could resurrect divergent data. Returns the new log end offset.
    pub fn truncate_to<D: Disk>(&mut self, disk: &mut D, offset: Offset) -> Result<Offset, LogError> {
        self.check_failed()?;
        if offset >= self.log_end_offset() {
            return Ok(self.log_end_offset());
        }
        if offset <= self.log_start_offset() {
            self.truncate_fully_and_start_at(disk, offset)?;
            return Ok(offset);
        }
        // The segments based at or above `offset`, oldest first (each out of the log before its
        // files go).
        let keep = self.segments.partition_point(|s| s.base < offset);
        while self.segments.len() > keep {
            let seg = self.segments.remove(keep);
            seg.delete_files(disk)?;
        }
        let (dir, interval) = (self.dir.clone(), self.config.index_interval_bytes);
        let seg = self.active_mut();
        if let Some((position, _)) = seg.find(disk, offset)? {
            disk.truncate(&seg.log_path, position)?;
            // Re-scan rather than patch timestamps and indexes: truncation is rare (a follower
            // after a leader change) and the scan is the code recovery already trusts.
            let (rebuilt, _) = Segment::recover(disk, &dir, seg.base, interval, usize::MAX, |_| {})?;
            *seg = rebuilt;
        }
        let seg = self.active_mut();
        if let Err(e) = disk.sync(&seg.log_path) {
            self.failed = Some(format!("sync after truncation failed: {e}"));
            return Err(e.into());
        }
        seg.rewrite_index(disk)?;
        let end = self.log_end_offset();
        if self.epochs.truncate_from_end(end) {
            self.write_epochs(disk)?;
        }
        self.update_recovery_point(disk)?;
        Ok(end)
    }

    /// Deletes every segment and starts an empty log at `offset` (a follower far behind, or one
    /// whose whole log diverged).
    pub fn truncate_fully_and_start_at<D: Disk>(&mut self, disk: &mut D, offset: Offset) -> Result<(), LogError> {
        self.check_failed()?;
        for seg in std::mem::take(&mut self.segments) {
            seg.delete_files(disk)?;
        }
        let seg = Segment::new(&self.dir, offset);
        disk.create(&seg.log_path)?;
        self.segments.push(seg);
        self.epochs = EpochCache::default();
        self.unflushed_records = 0;
        self.unflushed_since_ms = None;
        self.closed_unsynced_since_ms = None;
        self.write_epochs(disk)?;
        self.write_recovery_point(disk, offset)
    }

    /// Deletes whole segments by `retention.ms` (newest timestamp older than `now_ms -
    /// retention.ms`) and `retention.bytes` (oldest first while the log stays at least that big),
    /// never past `upper_bound` (the high watermark: unreplicated data is not retention's to
    /// drop). Rolls first when the active segment itself is due. Returns segments deleted.
    pub fn apply_retention<D: Disk>(
        &mut self,
        disk: &mut D,
        now_ms: i64,
        upper_bound: Offset,
    ) -> Result<usize, LogError> {
        self.check_failed()?;
        let mut excess = self
            .config
            .retention_bytes
            .map(|max| self.size_bytes() as i128 - max as i128);
        let mut doomed = Vec::new();
        for seg in &self.segments {
            if seg.is_empty() || seg.next > upper_bound {
                break;
            }
            let expired = self
                .config
                .retention_ms
                .is_some_and(|ms| now_ms.saturating_sub(seg.max_timestamp) > ms);
            let oversize = excess.is_some_and(|x| x - seg.size as i128 >= 0);
            if !(expired || oversize) {
                break;
            }
            if let Some(x) = excess.as_mut() {
                *x -= seg.size as i128;
            }
            doomed.push(seg.base);
        }
        if doomed.is_empty() {
            return Ok(0);
        }
        if doomed.len() == self.segments.len() {
            self.roll(disk, now_ms)?;
        }
        for base in &doomed {
            let at = self
                .segments
                .iter()
                .position(|s| s.base == *base)
                .expect("listed above");
            let seg = self.segments.remove(at);
            seg.delete_files(disk)?;
        }
        if self.segments.len() == 1 {
            self.closed_unsynced_since_ms = None;
        }
        self.update_recovery_point(disk)?;
        if self.epochs.truncate_from_start(self.log_start_offset()) {
            self.write_epochs(disk)?;
        }
        Ok(doomed.len())
    }
}

#[cfg(test)]
mod tests;
