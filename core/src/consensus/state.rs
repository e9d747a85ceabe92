//! The two small files Raft replaces whole: `state` (current term and vote) and `snapshot` (the
//! app's state as of an index, with that index's term).
//!
//! The snapshot also carries the membership as of its index (version 2; a version 1 file has none,
//! and the node then starts from its configured voters), so that compacting a configuration entry
//! away does not forget it. [`payload`] is the same membership-then-data form that InstallSnapshot
//! streams, so a follower receives the membership with the snapshot.
//!
//! Both are written with `write_file_atomic` (model rule 4), so a crash leaves the old or the new
//! version, never a mix; a CRC32C over the contents still guards against bit rot, and a file that
//! fails it is reported as corrupt rather than silently reset (resetting a vote could let a node
//! vote twice in one term).

use bytes::Bytes;

use super::membership::Membership;
use super::{LogIndex, NodeId, RaftError, Term};
use crate::disk::Disk;

const STATE_VERSION: u8 = 1;
const SNAPSHOT_VERSION_V1: u8 = 1;
const SNAPSHOT_VERSION: u8 = 2;

/// What must survive a crash before any message that depends on it is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct HardState {
    pub term: Term,
    pub voted_for: Option<NodeId>,
}

/// A snapshot: the app's state after applying every entry up to `index`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) struct Snapshot {
    pub index: LogIndex,
    pub term: Term,
    /// The membership as of `index`; `None` for the configured voters (no change before it).
    pub membership: Option<Membership>,
    pub data: Bytes,
}

/// `[membership length u32][membership, empty for none][data]`: the snapshot file's tail and what
/// InstallSnapshot streams.
pub(crate) fn payload(membership: Option<&Membership>, data: &[u8]) -> Bytes {
    let m = membership.map(Membership::encode).unwrap_or_default();
    let mut out = Vec::with_capacity(4 + m.len() + data.len());
    out.extend_from_slice(&u32::try_from(m.len()).expect("bounded by MEMBERS_MAX").to_be_bytes());
    out.extend_from_slice(&m);
    out.extend_from_slice(data);
    Bytes::from(out)
}

/// Splits a [`payload`] back into membership and data.
pub(crate) fn split_payload(bytes: &[u8]) -> Result<(Option<Membership>, Bytes), String> {
    if bytes.len() < 4 {
        return Err("snapshot payload shorter than its header".into());
    }
    let len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
    let rest = &bytes[4..];
    if len > rest.len() {
        return Err("snapshot membership truncated".into());
    }
    let membership = if len == 0 {
        None
    } else {
        Some(Membership::decode(&rest[..len])?)
    };
    Ok((membership, Bytes::copy_from_slice(&rest[len..])))
}

pub(crate) fn state_path(dir: &str) -> String {
    join(dir, "state")
}

pub(crate) fn snapshot_path(dir: &str) -> String {
    join(dir, "snapshot")
}

pub(crate) fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

fn corrupt(path: &str, detail: &str) -> RaftError {
    RaftError::Corrupt {
        path: path.to_string(),
        detail: detail.to_string(),
    }
}

/// Appends a CRC32C of `body` and returns the file bytes.
fn seal(mut body: Vec<u8>) -> Vec<u8> {
    let crc = crate::crc::crc32c(&body);
    body.extend_from_slice(&crc.to_be_bytes());
    body
}

/// Checks and strips the trailing CRC32C.
fn unseal<'a>(path: &str, bytes: &'a [u8]) -> Result<&'a [u8], RaftError> {
    if bytes.len() < 5 {
        return Err(corrupt(path, "shorter than its header"));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let crc = u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if crate::crc::crc32c(body) != crc {
        return Err(corrupt(path, "CRC mismatch"));
    }
    Ok(body)
}

fn u64_at(body: &[u8], pos: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&body[pos..pos + 8]);
    u64::from_be_bytes(a)
}

pub(crate) fn load_hard_state<D: Disk>(disk: &D, dir: &str) -> Result<HardState, RaftError> {
    let path = state_path(dir);
    if !disk.exists(&path) {
        return Ok(HardState::default());
    }
    let bytes = disk.read_all(&path)?;
    let body = unseal(&path, &bytes)?;
    if body.len() != 1 + 8 + 1 + 8 || body[0] != STATE_VERSION {
        return Err(corrupt(&path, "unknown version or length"));
    }
    let term = Term(u64_at(body, 1));
    let voted_for = match body[9] {
        0 => None,
        1 => Some(NodeId(u64_at(body, 10))),
        _ => return Err(corrupt(&path, "vote flag")),
    };
    Ok(HardState { term, voted_for })
}

pub(crate) fn store_hard_state<D: Disk>(disk: &mut D, dir: &str, hs: HardState) -> Result<(), RaftError> {
    let mut body = Vec::with_capacity(18);
    body.push(STATE_VERSION);
    body.extend_from_slice(&hs.term.0.to_be_bytes());
    body.push(u8::from(hs.voted_for.is_some()));
    body.extend_from_slice(&hs.voted_for.unwrap_or_default().0.to_be_bytes());
    disk.write_file_atomic(&state_path(dir), &seal(body))?;
    Ok(())
}

pub(crate) fn load_snapshot<D: Disk>(disk: &D, dir: &str) -> Result<Option<Snapshot>, RaftError> {
    let path = snapshot_path(dir);
    if !disk.exists(&path) {
        return Ok(None);
    }
    let bytes = disk.read_all(&path)?;
    let body = unseal(&path, &bytes)?;
    if body.len() < 17 || !(body[0] == SNAPSHOT_VERSION || body[0] == SNAPSHOT_VERSION_V1) {
        return Err(corrupt(&path, "unknown version or length"));
    }
    let (membership, data) = if body[0] == SNAPSHOT_VERSION_V1 {
        (None, Bytes::copy_from_slice(&body[17..]))
    } else {
        split_payload(&body[17..]).map_err(|e| corrupt(&path, &e))?
    };
    Ok(Some(Snapshot {
        index: LogIndex(u64_at(body, 1)),
        term: Term(u64_at(body, 9)),
        membership,
        data,
    }))
}

pub(crate) fn store_snapshot<D: Disk>(disk: &mut D, dir: &str, snap: &Snapshot) -> Result<(), RaftError> {
    let mut body = Vec::with_capacity(17 + snap.data.len() + 4);
    body.push(SNAPSHOT_VERSION);
    body.extend_from_slice(&snap.index.0.to_be_bytes());
    body.extend_from_slice(&snap.term.0.to_be_bytes());
    body.extend_from_slice(&payload(snap.membership.as_ref(), &snap.data));
    disk.write_file_atomic(&snapshot_path(dir), &seal(body))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::mem::MemDisk;

    #[test]
    fn hard_state_and_snapshot_round_trip_and_detect_rot() {
        let mut disk = MemDisk::new();
        assert_eq!(load_hard_state(&disk, "raft").unwrap(), HardState::default());
        let hs = HardState {
            term: Term(7),
            voted_for: Some(NodeId(3)),
        };
        store_hard_state(&mut disk, "raft", hs).unwrap();
        assert_eq!(load_hard_state(&disk, "raft").unwrap(), hs);
        let snap = Snapshot {
            index: LogIndex(9),
            term: Term(2),
            membership: Some(Membership::voters_only([NodeId(1), NodeId(4)])),
            data: Bytes::from_static(b"app"),
        };
        store_snapshot(&mut disk, "raft", &snap).unwrap();
        assert_eq!(load_snapshot(&disk, "raft").unwrap(), Some(snap));
        disk.flip_bit("raft/state", 3, 1).unwrap();
        assert!(matches!(load_hard_state(&disk, "raft"), Err(RaftError::Corrupt { .. })));
    }
}
