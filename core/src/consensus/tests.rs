//! The deterministic cluster harness and its checkers (filled in below).

use bytes::Bytes;

use super::*;
use crate::disk::mem::MemDisk;

#[test]
fn single_voter_elects_itself_and_commits() {
    let mut disk = MemDisk::new();
    let config = RaftConfig::new(NodeId(1), vec![NodeId(1)], "raft");
    let mut raft = Raft::open(&mut disk, config, 0, 7).unwrap();
    raft.handle_timeout(&mut disk, raft.poll_timeout());
    assert_eq!(raft.role(), Role::Leader);
    let (_, index) = raft.propose(&mut disk, Bytes::from_static(b"x"), 1).unwrap();
    assert_eq!(raft.poll_timeout(), 0, "a sync is pending");
    raft.handle_timeout(&mut disk, 1);
    let mut applied = Vec::new();
    while let Some(o) = raft.poll_output() {
        if let Output::Apply { index, command, .. } = o {
            applied.push((index, command));
        }
    }
    assert_eq!(applied.last(), Some(&(index, Bytes::from_static(b"x"))));
}
