//! gregor-realnet: binds gregor-core to real disks and sockets.
//!
//! Owns everything that touches the operating system; the logic stays in gregor-core. Today:
//! [`disk::FsDisk`], the data directory on the real file system.

pub mod disk;

pub use disk::FsDisk;
