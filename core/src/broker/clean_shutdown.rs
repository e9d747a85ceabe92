//! The clean-shutdown marker: how a restarted broker knows whether its log can have lost writes.
//!
//! Contract: [`write`] is called only after every partition was synced at shutdown, and nothing
//! is written after it; [`take`] is called at startup, before any write, and removes the marker
//! durably (disk model rule 4), so a later crash of this process finds none. A start without a
//! marker (a crash, a power loss, an empty or replaced disk, a failed sync at shutdown) is
//! unclean: a process crash without power loss may well have lost nothing, but the broker
//! cannot tell, so it says it may have.
//!
//! Why a marker and not the log recovery's cut bytes: a power loss can drop a whole unsynced
//! tail that ends on a batch boundary, leaving nothing to cut; only a positive record of a
//! finished sync proves nothing was lost (Kafka's `.kafka_cleanshutdown`, KIP-966).
//!
//! The marker holds the creation index of the registration since which the log has been
//! intact ([`crate::cluster::BrokerRegistration::intact_since`]): a clean restart carries the
//! previous process's claim over, so a clean restart after an unclean one still says "restarted
//! uncleanly at that registration" to a controller that has not yet acted on it.

use crate::disk::{Disk, DiskError};

/// At the data directory's top level; no partition directory parses to this name.
pub const MARKER_FILE: &str = "clean-shutdown";

/// Reads and durably removes the marker: `Some(intact_since)` after a clean shutdown, `None`
/// after any other (or when the marker does not parse: unclean, the safe side).
pub fn take<D: Disk>(disk: &mut D) -> Result<Option<u64>, DiskError> {
    if !disk.exists(MARKER_FILE) {
        return Ok(None);
    }
    let parsed = disk.read_all(MARKER_FILE).ok().and_then(|bytes| {
        let text = std::str::from_utf8(&bytes).ok()?;
        text.strip_prefix("intact.since=")?.trim_end().parse().ok()
    });
    disk.remove(MARKER_FILE)?;
    Ok(parsed)
}

/// Writes the marker, durably, after a shutdown that synced everything.
pub fn write<D: Disk>(disk: &mut D, intact_since: u64) -> Result<(), DiskError> {
    disk.write_file_atomic(MARKER_FILE, format!("intact.since={intact_since}\n").as_bytes())
}
