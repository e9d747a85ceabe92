//! The coordinator: Gregor's ZooKeeper. A quorum of nodes (3, or 1 in dev mode) agrees on a log
//! of [`tree::Command`]s through `crate::consensus` (Raft) and applies it to a [`tree::Tree`].
//!
//! - [`codec`]: the bounded byte codec shared by commands, snapshots and the RPC.
//! - [`tree`]: the data tree, sessions and watches, as a deterministic state machine.
//! - [`server`]: one coordinator node (Raft, tree, client RPC) on a `Runtime`.
//! - [`client`]: `CoordClient`, a session with the quorum.
//! - [`wire`]: the client RPC and peer framing on the shared listener.
//! - [`auth`]: the cluster-secret handshake that opens every connection to that listener.

pub mod auth;
#[cfg(test)]
mod auth_tests;
pub mod client;
pub mod codec;
pub mod server;
pub mod tree;
mod wait;
pub mod wire;

pub use auth::{AuthRole, ClusterSecret};
pub use client::{CoordClient, CoordClientConfig, CoordError};
pub use server::{start_coordinator, CoordNodeConfig, CoordTiming, StartError};
#[cfg(test)]
pub(crate) use wait::Count;
pub use wait::Doorbell;
