//! The narrow surroundings a node runs in: clock and timers, task spawning, framed network
//! connections, its data directory and a seeded random stream.
//!
//! `gregor-sim` implements [`Runtime`] on madsim (virtual time, simulated TCP, crashes);
//! `gregor-realnet` on io_uring and real sockets. The node drivers in core are generic over it
//! and never name either binding, so a failing seed runs the code production runs.
//!
//! Contract for implementations:
//! - `now_ms` is wall-clock milliseconds since the Unix epoch as this node believes it (the
//!   simulator may skew it per node); `monotonic_ms` never goes backwards and drives timeouts.
//! - Futures are driven on one thread per node: nothing here requires `Send`.
//! - A [`Connection`] carries whole frames of at most `frame_bytes_max` bytes (Kafka's 4-byte
//!   big-endian length prefix on the wire). A larger frame arriving closes the connection with
//!   [`NetError::FrameTooLarge`]; it is never buffered.
//! - `random_u64` draws from a stream seeded by the binding (the scenario seed in the simulator),
//!   never from ambient entropy in core.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use thiserror::Error;

use crate::disk::Disk;

/// A network operating error.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NetError {
    #[error("connection refused by {0}")]
    Refused(String),
    #[error("connection closed")]
    Closed,
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    FrameTooLarge { len: u64, max: u64 },
    #[error("network I/O error: {0}")]
    Io(String),
}

/// A region of a file in the node's data directory (`Disk` path), sent as part of a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRegion {
    pub path: String,
    pub position: u64,
    pub len: u64,
}

/// One piece of an outgoing frame: bytes, or a file region (a fetch's record batches, exactly as
/// stored), which a binding may send without copying it through user space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FramePart {
    Bytes(Bytes),
    File(FileRegion),
}

impl FramePart {
    pub fn len(&self) -> u64 {
        match self {
            FramePart::Bytes(b) => b.len() as u64,
            FramePart::File(r) => r.len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The frame `parts` make, with file regions read from `disk`: what [`Runtime::send_parts`]
/// sends by default. A region that cannot be read in full is an error.
pub fn flatten_parts<D: Disk>(disk: &D, parts: Vec<FramePart>) -> Result<Bytes, crate::disk::DiskError> {
    let total: u64 = parts.iter().map(FramePart::len).sum();
    let mut out = bytes::BytesMut::with_capacity(usize::try_from(total).unwrap_or(0));
    for part in parts {
        match part {
            FramePart::Bytes(b) => out.extend_from_slice(&b),
            FramePart::File(r) => {
                let start = out.len();
                let len = usize::try_from(r.len).map_err(|_| crate::disk::DiskError::Io {
                    path: r.path.clone(),
                    detail: "region larger than memory".into(),
                })?;
                out.resize(start + len, 0);
                disk.read_at(&r.path, r.position, &mut out[start..])?;
            }
        }
    }
    Ok(out.freeze())
}

/// A framed, ordered, reliable byte-stream connection (TCP in both bindings).
pub trait Connection {
    /// Sends one frame (the binding adds the length prefix).
    fn send(&mut self, frame: Bytes) -> impl Future<Output = Result<(), NetError>>;
    /// Receives the next frame; `Ok(None)` when the peer closed cleanly.
    fn recv(&mut self) -> impl Future<Output = Result<Option<Bytes>, NetError>>;
    /// The peer's address, for logs and ACL host checks.
    fn peer(&self) -> String;
}

/// Accepts incoming connections on one address.
pub trait Listener {
    type Conn: Connection;
    fn accept(&mut self) -> impl Future<Output = Result<Self::Conn, NetError>>;
}

/// Everything a node may use of the world around it.
pub trait Runtime: Clone + 'static {
    type Disk: Disk;
    type Conn: Connection + 'static;
    type Listener: Listener<Conn = Self::Conn> + 'static;

    /// Wall-clock time in ms since the Unix epoch (record timestamps, retention).
    fn now_ms(&self) -> i64;
    /// Monotonic time in ms (timeouts, linger, session expiry).
    fn monotonic_ms(&self) -> u64;
    /// Completes after `duration` of this runtime's time. The future borrows nothing from the
    /// runtime, so a caller may hold it beside a mutable borrow of what owns the runtime.
    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + 'static;
    /// Runs `task` concurrently on this node; it dies with the node.
    fn spawn(&self, task: impl Future<Output = ()> + 'static);
    /// Opens a connection to `addr` (`host:port`).
    fn connect(&self, addr: &str) -> impl Future<Output = Result<Self::Conn, NetError>>;
    /// Listens on `addr` (`host:port`).
    fn listen(&self, addr: &str) -> impl Future<Output = Result<Self::Listener, NetError>>;
    /// Runs `f` with this node's data directory.
    fn with_disk<T>(&self, f: impl FnOnce(&mut Self::Disk) -> T) -> T;
    /// The next number of this node's seeded random stream.
    fn random_u64(&self) -> u64;

    /// Sends one frame made of `parts`, in order, on `conn`. By default the file regions are read
    /// now (through [`Runtime::with_disk`]) and one copied frame is sent; a binding may instead
    /// send them straight from the file (sendfile), as long as the peer receives the same bytes.
    /// A region that cannot be read in full fails the send.
    fn send_parts(&self, conn: &mut Self::Conn, parts: Vec<FramePart>) -> impl Future<Output = Result<(), NetError>> {
        let frame = self
            .with_disk(|disk| flatten_parts(disk, parts))
            .map_err(|e| NetError::Io(format!("reading a file region to send: {e}")));
        async move { conn.send(frame?).await }
    }
}
