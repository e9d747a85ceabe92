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
    /// How long after a roll the closed segment is synced (Gregor's; Kafka syncs it at once on a
    /// background thread). By 30 s the kernel has usually written the pages back itself
    /// (`vm.dirty_expire_centisecs`), so the sync is cheap and does not stall the node.
    pub closed_segment_sync_delay_ms: i64,
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
            closed_segment_sync_delay_ms: 30_000,
        }
    }
}

impl LogConfig {
    /// Applies one topic-config override by its Kafka name (`-1` means "none" where Kafka
    /// allows it). Unknown keys and bad values are errors naming the key.
    pub fn apply(&mut self, key: &str, value: &str) -> Result<(), String> {
        fn num<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, String> {
            value
                .trim()
                .parse()
                .map_err(|_| format!("{key}: {value:?} is not a valid number"))
        }
        fn optional<T: std::str::FromStr>(key: &str, value: &str) -> Result<Option<T>, String> {
            if value.trim() == "-1" || value.trim() == "9223372036854775807" {
                Ok(None)
            } else {
                num(key, value).map(Some)
            }
        }
        match key {
            "segment.bytes" => self.segment_bytes = num(key, value)?,
            "segment.ms" => self.segment_ms = num(key, value)?,
            "index.interval.bytes" => self.index_interval_bytes = num(key, value)?,
            "flush.messages" => self.flush_messages = optional(key, value)?,
            "flush.ms" => self.flush_ms = optional(key, value)?,
            "retention.ms" => self.retention_ms = optional(key, value)?,
            "retention.bytes" => self.retention_bytes = optional(key, value)?,
            "max.message.bytes" => self.max_message_bytes = num(key, value)?,
            "cleanup.policy" if value == "delete" => {}
            "cleanup.policy" => return Err(format!("cleanup.policy={value} is not supported (only delete)")),
            _ => return Err(format!("unknown or unsupported topic config {key:?}")),
        }
        self.validate().map_err(|e| e.to_string())
    }

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
