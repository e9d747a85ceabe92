//! gregor-realnet: binds gregor-core to real disks and sockets.
//!
//! Owns everything that touches the operating system; the logic stays in gregor-core.
//! [`disk::FsDisk`] is the data directory on the real file system, [`data_dir`] its lock and
//! cluster id, [`runtime::RealRuntime`] core's `Runtime` on monoio (io_uring) sockets and timers.
//! [`cli`] holds the client subcommands, [`cluster_cmd`] `gregor coordinator` and `gregor broker`, [`dev`] `gregor dev`. The `gregor` binary (`src/main.rs`) puts them together.

pub mod cli;
pub mod cluster_cmd;
pub mod data_dir;
pub mod dev;
pub mod disk;
pub mod runtime;
pub mod server_config;
pub mod tls;

pub use disk::FsDisk;
pub use runtime::RealRuntime;
