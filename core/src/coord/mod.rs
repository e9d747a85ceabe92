//! The coordinator: Gregor's ZooKeeper. A quorum of nodes (3, or 1 in dev mode) agrees on a log
//! of [`tree::Command`]s through `crate::consensus` (Raft) and applies it to a [`tree::Tree`].
//!
//! - [`codec`]: the bounded byte codec shared by commands, snapshots and the RPC.
//! - [`tree`]: the data tree, sessions and watches, as a deterministic state machine.

pub mod codec;
pub mod tree;
