//! gregor-core: every piece of Gregor's logic, written once against abstract surroundings.
//!
//! Nothing here reads a clock, touches a file or socket, starts a thread or draws ambient
//! randomness: time arrives as an argument (`now_ms`), disk I/O through [`disk::Disk`], and
//! everything else through [`runtime::Runtime`]. The simulator (`gregor-sim`) and the production
//! binding (`gregor-realnet`) swap only what lies under these traits. `core/clippy.toml` and
//! `.ci/run` enforce the boundary.

pub mod broker;
pub mod client;
pub mod cluster;
pub mod consensus;
pub mod controller;
pub mod coord;
pub mod crc;
pub mod disk;
pub mod error_code;
pub mod group;
pub mod ids;
pub mod log;
pub mod name_map;
pub mod node;
pub mod protocol;
pub mod record;
pub mod runtime;
pub mod security;
pub mod seeded;
pub mod short_eq;

pub use error_code::ErrorCode;
pub use ids::{BrokerId, LeaderEpoch, Offset, PartitionId};
