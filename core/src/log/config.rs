//! Per-log configuration, with Kafka's topic-config names and defaults.

use super::LogError;

/// Seven days, Kafka's default for `retention.ms` and `segment.ms`.
pub const WEEK_MS: i64 = 7 * 24 * 60 * 60 * 1000;

/// How one partition log rolls, indexes, flushes and retains. Field names follow Kafka's topic
/// configs (`segment.bytes` → `segment_bytes`); `None` stands for Kafka's `-1`/"never".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// `segment.bytes`: roll when the active segment would grow past this. Default 1 GiB.
    pub segment_bytes: u64,
    /// `segment.ms`: roll when the active segment's first batch is this old. Default 7 days.
    pub segment_ms: i64,
    /// `index.interval.bytes`: bytes of batches between two offset-index entries. Default 4096.
    pub index_interval_bytes: u64,
    /// `flush.messages`: sync after this many records. `Some(1)` syncs every batch. Default never.
    pub flush_messages: Option<u64>,
    /// `flush.ms`: sync when unsynced data is this old. Default never.
    pub flush_ms: Option<i64>,
    /// `retention.ms`: delete segments whose newest record is older. Default 7 days.
    pub retention_ms: Option<i64>,
    /// `retention.bytes`: delete oldest segments while the log is larger. Default unlimited.
    pub retention_bytes: Option<u64>,
    /// `max.message.bytes`: the largest batch accepted. Default 1048588, as Kafka.
    pub max_message_bytes: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            segment_ms: WEEK_MS,
            index_interval_bytes: 4096,
            flush_messages: None,
            flush_ms: None,
            retention_ms: Some(WEEK_MS),
            retention_bytes: None,
            max_message_bytes: 1_048_588,
        }
    }
}

impl LogConfig {
    /// Refuses settings the log cannot honour. Positions are stored as u32 in the index, as
    /// Kafka does, so a segment is at most 2 GiB.
    pub fn validate(&self) -> Result<(), LogError> {
        let bad = |what: &str| Err(LogError::Config(what.to_string()));
        if self.segment_bytes < 128 || self.segment_bytes > i32::MAX as u64 {
            return bad("segment.bytes must be between 128 and 2147483647");
        }
        if self.segment_ms < 1 {
            return bad("segment.ms must be at least 1");
        }
        if self.index_interval_bytes == 0 {
            return bad("index.interval.bytes must be at least 1");
        }
        if self.flush_messages == Some(0) {
            return bad("flush.messages must be at least 1");
        }
        if matches!(self.flush_ms, Some(ms) if ms < 0) || matches!(self.retention_ms, Some(ms) if ms < 0) {
            return bad("flush.ms and retention.ms must not be negative (use None for -1)");
        }
        if self.max_message_bytes < crate::record::HEADER_BYTES {
            return bad("max.message.bytes is smaller than a batch header");
        }
        Ok(())
    }
}
