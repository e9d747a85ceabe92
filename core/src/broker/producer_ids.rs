//! Producer ids for InitProducerId: unique for the broker's lifetime and across restarts and
//! crashes.
//!
//! Ids are handed out from blocks of [`BLOCK_SIZE`], as Kafka's `ProducerIdManager` does with
//! blocks it claims in ZooKeeper. The file [`FILE`] in the data directory holds the end of the
//! last block claimed; it is rewritten with [`Disk::write_file_atomic`] (synced, then renamed:
//! disk model rules 2 and 4) *before* any id of a new block is handed out. After a restart or a
//! crash, allocation starts at that end, so an id handed out before is never handed out again;
//! what is lost is at most the unused rest of one block.
//!
//! A file that exists but does not parse stops the broker from opening: starting from 0 could
//! repeat ids, and the file is only ever replaced whole, so damage means a disk fault.
//!
//! These are local ids: the broker places them in its own range (`broker.id` times
//! `PRODUCER_IDS_PER_BROKER`, see `Broker::allocate_producer_id`), so brokers of one cluster
//! never hand out the same id.

use crate::disk::{Disk, DiskError};
use crate::ids::ProducerId;

/// The file holding the end of the last claimed block, as decimal text.
pub const FILE: &str = "producer-id-block";
/// Ids claimed per write of [`FILE`] (Kafka's `PidBlockSize`).
pub const BLOCK_SIZE: i64 = 1000;
/// A block end above this is taken for a damaged file: 2^62 ids are never handed out.
const BLOCK_END_MAX: i64 = 1 << 62;

/// Hands out producer ids from claimed blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerIdAllocator {
    next: i64,
    /// The end of the claimed block (exclusive), as durably recorded in [`FILE`].
    block_end: i64,
}

impl ProducerIdAllocator {
    /// Reads the last claimed block end; nothing is claimed until the first id is asked for.
    pub fn open<D: Disk>(disk: &D) -> Result<ProducerIdAllocator, String> {
        let end = match disk.read_all(FILE) {
            Err(DiskError::NotFound(_)) => 0,
            Err(e) => return Err(format!("{FILE}: {e}")),
            Ok(bytes) => std::str::from_utf8(&bytes)
                .ok()
                .and_then(|s| s.trim().parse::<i64>().ok())
                .filter(|n| (0..=BLOCK_END_MAX).contains(n))
                .ok_or_else(|| format!("{FILE}: damaged (not a block end between 0 and {BLOCK_END_MAX})"))?,
        };
        Ok(ProducerIdAllocator {
            next: end,
            block_end: end,
        })
    }

    /// A fresh producer id, claiming (durably) a new block first when the current one is used
    /// up. On a disk error nothing is handed out and the next call tries again.
    pub fn allocate<D: Disk>(&mut self, disk: &mut D) -> Result<ProducerId, DiskError> {
        assert!(
            self.next <= self.block_end,
            "ids are handed out only from a claimed block"
        );
        if self.next == self.block_end {
            let end = self.block_end + BLOCK_SIZE;
            disk.write_file_atomic(FILE, end.to_string().as_bytes())?;
            self.block_end = end;
        }
        let id = ProducerId(self.next);
        self.next += 1;
        Ok(id)
    }
}
