//! `RealRuntime`: gregor-core's [`Runtime`] on one monoio thread (io_uring, thread-per-core), the
//! node's [`FsDisk`], the system clocks and an entropy-seeded random stream.
//!
//! # What runs where, and why
//!
//! - **Sockets go through io_uring** (monoio's `TcpListener`/`TcpStream`). Measured on these
//!   machines (kernel 6.18): a loopback round trip costs 16 µs on monoio, 15 µs on tokio/epoll, so
//!   io_uring costs nothing here and leaves room for batching submissions later. When io_uring is
//!   unavailable (old kernel, seccomp), [`block_on`] builds monoio's legacy (epoll) driver instead:
//!   same code, same behaviour.
//! - **The disk is [`FsDisk`], called synchronously on this same thread** (`pwrite`, `pread`,
//!   `fdatasync`), not through io_uring. Measured: a buffered 4 KiB write through io_uring costs
//!   ~54 µs, because ext4 punts buffered writes to an io-wq worker, against 1.4 µs for a plain
//!   `pwrite` into the page cache. The expensive call, `fdatasync` (110–160 µs), is rare by design:
//!   the log's flush policy and the broker's group commit amortise it over many producers' batches.
//!   Blocking the ring for those microseconds is cheaper than the hand-off, and it keeps core's
//!   [`Disk`](gregor_core::disk::Disk) trait synchronous, as the simulator needs.
//!
//! # Contract
//!
//! Every method that does I/O or spawns must be called on the thread running [`block_on`]
//! (monoio's runtime is thread-local); a `RealRuntime` is `!Send` for that reason. `now_ms` is
//! `SystemTime` (may jump with the wall clock), `monotonic_ms` counts from this runtime's
//! creation and never goes backwards.
//!
//! # Connections and their fault model
//!
//! Kafka framing: a 4-byte big-endian length, then that many bytes. A declared length above
//! `frame_bytes_max` ([`FRAME_BYTES_MAX_DEFAULT`], Kafka's `socket.request.max.bytes`) fails the
//! connection with [`NetError::FrameTooLarge`] before any byte of the body is read or allocated; a
//! length of zero or below is a protocol error too. The peer closing between frames is `Ok(None)`,
//! closing inside a frame is an error. A connection whose `recv` or `send` was cancelled part-way
//! (its future dropped) has lost its place in the byte stream: every later call on it fails, so
//! frames are never interleaved or misparsed, and the caller drops it. Frames are written whole by
//! one `send` at a time (`&mut self`), so two frames never interleave on the wire.
//!
//! # Zero-copy sends
//!
//! [`Runtime::send_parts`] writes a frame whose record batches are regions of segment files
//! (a Fetch response) with `sendfile(2)` from a `dup` of the file's descriptor taken when the
//! send starts, so the batches go from the page cache to the socket without passing through
//! user space. The socket is non-blocking (io_uring handles that for its own operations);
//! when `sendfile` would block, the send waits for the socket to be writable. A region that
//! turns out shorter than promised (truncated meanwhile) fails the send: the frame's length is
//! already on the wire. `GREGOR_FETCH_ZERO_COPY=0` in the environment turns zero-copy fetch off
//! in `gregor dev` and `gregor broker` ([`fetch_zero_copy_from_env`]): batches are then read and
//! copied into the response, as the simulator always does, for comparing the two.
//!
//! # TLS
//!
//! A runtime given [`TlsSettings`] ([`RealRuntime::with_tls`]) wraps accepted connections in a
//! rustls server session (SSL and SASL_SSL listeners) and outgoing ones in a client session
//! (except to its plaintext addresses). The record layer is rustls' `read_tls`/`write_tls`
//! over the same io_uring reads and writes: ciphertext is read a chunk at a time, decrypted
//! into the frame buffer, and frames are parsed from the plaintext exactly as above (same
//! length checks, same `frame_bytes_max`). A server handshake runs inside the connection's first
//! `recv`, so a slow or silent client holds only its own task, never the accept loop; a client
//! handshake completes inside `connect`. A TLS connection cannot use `sendfile`: the kernel
//! would send the file's plaintext, so `send_parts` reads the regions and sends the copied
//! bytes through rustls. Garbage or plaintext Kafka on a TLS port fails that connection's
//! `recv` (rustls rejects the record) and the node drops it; other connections are untouched.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Buf, Bytes, BytesMut};
use gregor_core::runtime::{Connection, FramePart, Listener, NetError, Runtime};
use monoio::buf::{IoBufMut, SliceMut};
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::{ListenerOpts, TcpListener, TcpStream};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use crate::disk::FsDisk;
use crate::tls::TlsSettings;

/// Kafka's `socket.request.max.bytes` default: 100 MiB.
pub const FRAME_BYTES_MAX_DEFAULT: u64 = gregor_core::protocol::REQUEST_BYTES_MAX as u64;
/// Bytes asked of the kernel per read when no frame length is known yet: many small requests fit
/// in one read; a larger frame grows the buffer to exactly its size.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Responses up to this size are copied behind their length prefix and written with one call;
/// larger ones are written as prefix then body, without the copy.
const COALESCE_BYTES_MAX: usize = 64 * 1024;
/// Bytes one `sendfile` call is asked to move, so one large region does not hold the thread.
const SENDFILE_CHUNK_BYTES: usize = 1 << 20;
/// io_uring submission queue entries.
const RING_ENTRIES: u32 = 1024;

/// Runs `future` to completion on a new monoio runtime on this thread, with timers, on io_uring
/// when the kernel offers it and on the legacy epoll driver otherwise.
pub fn block_on<F: Future>(future: F) -> io::Result<F::Output> {
    let mut rt = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
        .with_entries(RING_ENTRIES)
        .enable_timer()
        .build()?;
    Ok(rt.block_on(future))
}

/// Whether this kernel lets us use io_uring ([`block_on`] falls back to epoll otherwise).
pub fn io_uring_available() -> bool {
    monoio::utils::detect_uring()
}

/// A seed for [`RealRuntime::new`] from the operating system's entropy.
pub fn entropy_seed() -> u64 {
    rand_core::OsRng.next_u64()
}

/// One node's surroundings on the real machine. Cheap to clone; all clones share the disk, the
/// random stream and the clock origin.
#[derive(Clone)]
pub struct RealRuntime {
    disk: Rc<RefCell<FsDisk>>,
    rng: Rc<RefCell<ChaCha8Rng>>,
    started: Instant,
    frame_bytes_max: u64,
    tls: Rc<TlsSettings>,
}

impl RealRuntime {
    /// A runtime over `disk` whose random stream starts from `seed`.
    pub fn new(disk: Rc<RefCell<FsDisk>>, seed: u64) -> RealRuntime {
        RealRuntime {
            disk,
            rng: Rc::new(RefCell::new(ChaCha8Rng::seed_from_u64(seed))),
            started: Instant::now(),
            frame_bytes_max: FRAME_BYTES_MAX_DEFAULT,
            tls: Rc::new(TlsSettings::default()),
        }
    }

    /// Sets the largest frame a connection accepts (at least 1 byte).
    pub fn with_frame_bytes_max(mut self, frame_bytes_max: u64) -> RealRuntime {
        self.frame_bytes_max = frame_bytes_max.max(1);
        self
    }

    /// Speaks TLS on the connections `tls` says (see the module docs).
    pub fn with_tls(mut self, tls: TlsSettings) -> RealRuntime {
        self.tls = Rc::new(tls);
        self
    }

    /// The node's data directory, shared with every clone.
    pub fn disk(&self) -> Rc<RefCell<FsDisk>> {
        self.disk.clone()
    }
}

impl Runtime for RealRuntime {
    type Disk = FsDisk;
    type Conn = RealConn;
    type Listener = RealListener;

    fn now_ms(&self) -> i64 {
        // A clock set before 1970 reads as the epoch rather than panicking.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    fn monotonic_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + 'static {
        monoio::time::sleep(duration)
    }

    fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        // Dropping the handle detaches the task; it ends with the runtime.
        drop(monoio::spawn(task));
    }

    fn connect(&self, addr: &str) -> impl Future<Output = Result<RealConn, NetError>> {
        let addr = addr.to_string();
        let frame_bytes_max = self.frame_bytes_max;
        let tls = self.tls.client_for(&addr);
        async move {
            let stream = TcpStream::connect(addr.as_str()).await.map_err(|e| match e.kind() {
                io::ErrorKind::ConnectionRefused => NetError::Refused(addr.clone()),
                _ => NetError::Io(format!("connect to {addr}: {e}")),
            })?;
            let mut conn = RealConn::new(stream, frame_bytes_max)?;
            if let Some(config) = tls {
                let name = crate::tls::server_name(&addr)
                    .ok_or_else(|| NetError::Io(format!("{addr}: no host name to check a TLS certificate against")))?;
                let session = rustls::ClientConnection::new(config, name)
                    .map_err(|e| NetError::Io(format!("TLS to {addr}: {e}")))?;
                conn.tls = Some(Box::new(session.into()));
                conn.handshake().await?;
            }
            Ok(conn)
        }
    }

    fn listen(&self, addr: &str) -> impl Future<Output = Result<RealListener, NetError>> {
        // No SO_REUSEPORT (monoio's default turns it on): with it, a second broker on the same
        // port would bind silently and steal half the connections. SO_REUSEADDR stays, so a
        // restarted broker can bind while old connections sit in TIME_WAIT.
        let opts = ListenerOpts::new().reuse_port(false).reuse_addr(true);
        let (addr, frame_bytes_max) = (addr.to_string(), self.frame_bytes_max);
        let tls = self.tls.server.clone();
        async move {
            // A broker that died a moment ago may still hold its port: the kernel tears an
            // io_uring down after the process is gone, and a pending accept keeps the listening
            // socket open until then (seen: EADDRINUSE right after SIGKILL and reaping). So
            // EADDRINUSE is retried for BIND_RETRY_MS before it is reported.
            let deadline = Instant::now() + Duration::from_millis(BIND_RETRY_MS);
            loop {
                match TcpListener::bind_with_config(addr.as_str(), &opts) {
                    Ok(listener) => {
                        return Ok(RealListener {
                            listener,
                            frame_bytes_max,
                            tls,
                        })
                    }
                    Err(e) if e.kind() == io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                        monoio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                        return Err(NetError::Io(format!(
                            "cannot listen on {addr}: address already in use (another broker or program holds it)"
                        )))
                    }
                    Err(e) => return Err(NetError::Io(format!("cannot listen on {addr}: {e}"))),
                }
            }
        }
    }

    fn with_disk<T>(&self, f: impl FnOnce(&mut FsDisk) -> T) -> T {
        f(&mut self.disk.borrow_mut())
    }

    fn send_parts(&self, conn: &mut RealConn, parts: Vec<FramePart>) -> impl Future<Output = Result<(), NetError>> {
        // TLS: the bytes must pass through rustls, so the regions are read and copied.
        if conn.tls.is_some() {
            let frame = gregor_core::runtime::flatten_parts(&*self.disk.borrow(), parts)
                .map_err(|e| NetError::Io(format!("reading a file region to send: {e}")));
            return SendParts::Copied(frame).send(conn);
        }
        SendParts::Pieces(
            parts
                .into_iter()
                .map(|part| match part {
                    FramePart::Bytes(b) => Ok(Piece::Bytes(b)),
                    FramePart::File(r) => self
                        .disk
                        .borrow()
                        .region_file(&r.path, r.position, r.len)
                        .map(|file| Piece::File {
                            file,
                            position: r.position,
                            len: r.len,
                        })
                        .map_err(|e| NetError::Io(format!("opening a file region to send: {e}"))),
                })
                .collect(),
        )
        .send(conn)
    }

    fn random_u64(&self) -> u64 {
        self.rng.borrow_mut().next_u64()
    }
}

/// What `send_parts` sends: one copied frame (TLS) or pieces with file regions (sendfile).
enum SendParts {
    Copied(Result<Bytes, NetError>),
    Pieces(Result<Vec<Piece>, NetError>),
}

impl SendParts {
    async fn send(self, conn: &mut RealConn) -> Result<(), NetError> {
        match self {
            SendParts::Copied(frame) => conn.send(frame?).await,
            SendParts::Pieces(pieces) => conn.send_pieces(pieces?).await,
        }
    }
}

/// How long `listen` retries a port still held by a broker that just died (see `listen`).
const BIND_RETRY_MS: u64 = 3_000;

/// Accepts TCP connections on one address.
pub struct RealListener {
    listener: TcpListener,
    frame_bytes_max: u64,
    tls: Option<Arc<rustls::ServerConfig>>,
}

impl RealListener {
    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }
}

impl Listener for RealListener {
    type Conn = RealConn;

    async fn accept(&mut self) -> Result<RealConn, NetError> {
        let (stream, _) = self
            .listener
            .accept()
            .await
            .map_err(|e| NetError::Io(format!("accept: {e}")))?;
        let mut conn = RealConn::new(stream, self.frame_bytes_max)?;
        if let Some(config) = &self.tls {
            // The handshake itself runs in the connection's first recv (module docs).
            let session = rustls::ServerConnection::new(config.clone())
                .map_err(|e| NetError::Io(format!("TLS session for {}: {e}", conn.peer)))?;
            conn.tls = Some(Box::new(session.into()));
        }
        Ok(conn)
    }
}

/// One framed TCP connection. See the module docs for its fault model.
pub struct RealConn {
    stream: TcpStream,
    /// Bytes read but not yet returned as frames. `None` while a read is in flight (io_uring owns
    /// the buffer until it completes), and for good once a read was cancelled or failed.
    read_buf: Option<BytesMut>,
    /// Set while a frame is being written; still set after a cancelled or failed write.
    writing: bool,
    peer: String,
    frame_bytes_max: u64,
    /// The TLS session on a TLS connection; `read_buf` then holds decrypted bytes.
    tls: Option<Box<rustls::Connection>>,
}

/// `sendfile` on the socket must not block the ring's thread: with O_NONBLOCK it returns
/// EAGAIN instead (io_uring's own operations handle a non-blocking socket by polling).
fn set_nonblocking(stream: &TcpStream) -> Result<(), NetError> {
    let fd = socket_fd(stream);
    let flags = rustix::fs::fcntl_getfl(fd).map_err(|e| io_error("fcntl(F_GETFL)", e.into()))?;
    rustix::fs::fcntl_setfl(fd, flags | rustix::fs::OFlags::NONBLOCK).map_err(|e| io_error("fcntl(F_SETFL)", e.into()))
}

/// The socket's descriptor, borrowed for as long as the stream is (monoio's `TcpStream` has
/// `AsRawFd` but not `AsFd`).
#[allow(unsafe_code)]
fn socket_fd(stream: &TcpStream) -> std::os::fd::BorrowedFd<'_> {
    use std::os::fd::AsRawFd;
    // SAFETY: `stream` owns this open descriptor and closes it only when dropped, which the
    // returned borrow's lifetime (tied to `&stream`) rules out while it is used.
    unsafe { std::os::fd::BorrowedFd::borrow_raw(stream.as_raw_fd()) }
}

fn io_error(what: &str, e: io::Error) -> NetError {
    match e.kind() {
        io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe | io::ErrorKind::UnexpectedEof => NetError::Closed,
        _ => NetError::Io(format!("{what}: {e}")),
    }
}

impl RealConn {
    fn new(stream: TcpStream, frame_bytes_max: u64) -> Result<RealConn, NetError> {
        // Kafka answers one request at a time per connection: Nagle would hold each small
        // response back for the peer's delayed ACK.
        stream.set_nodelay(true).map_err(|e| io_error("set TCP_NODELAY", e))?;
        set_nonblocking(&stream)?;
        let peer = stream
            .peer_addr()
            .map_or_else(|_| "unknown peer".to_string(), |a| a.to_string());
        Ok(RealConn {
            stream,
            read_buf: Some(BytesMut::with_capacity(READ_CHUNK_BYTES)),
            writing: false,
            peer,
            frame_bytes_max,
            tls: None,
        })
    }

    /// The length of the frame at the head of `buf`, once its 4-byte prefix is there.
    fn frame_len(&self, buf: &[u8]) -> Result<Option<usize>, NetError> {
        let Some(prefix) = buf.first_chunk::<4>() else {
            return Ok(None);
        };
        let declared = i32::from_be_bytes(*prefix);
        if declared <= 0 {
            return Err(NetError::Io(format!(
                "frame length {declared} from {}: must be positive",
                self.peer
            )));
        }
        let len = u64::from(declared.unsigned_abs());
        if len > self.frame_bytes_max {
            return Err(NetError::FrameTooLarge {
                len,
                max: self.frame_bytes_max,
            });
        }
        Ok(Some(
            usize::try_from(len).expect("a positive i32 fits in usize on every target we build"),
        ))
    }
}

/// A part of an outgoing frame, its file open.
enum Piece {
    Bytes(Bytes),
    File {
        file: std::fs::File,
        position: u64,
        len: u64,
    },
}

impl Piece {
    fn len(&self) -> u64 {
        match self {
            Piece::Bytes(b) => b.len() as u64,
            Piece::File { len, .. } => *len,
        }
    }
}

/// Whether a node serves Fetch with zero-copy sends (`NodeConfig::fetch_zero_copy`): yes,
/// unless `GREGOR_FETCH_ZERO_COPY=0` is set (to compare with the copying path).
pub fn fetch_zero_copy_from_env() -> bool {
    std::env::var("GREGOR_FETCH_ZERO_COPY").as_deref() != Ok("0")
}

impl RealConn {
    /// One frame of `pieces`: the length prefix and the bytes pieces written by io_uring (
    /// coalesced up to the next file piece), each file piece by `sendfile`.
    async fn send_pieces(&mut self, pieces: Vec<Piece>) -> Result<(), NetError> {
        if self.writing {
            return Err(NetError::Io(format!(
                "an earlier send to {} stopped part-way; the stream is unusable",
                self.peer
            )));
        }
        let total: u64 = pieces.iter().map(Piece::len).sum();
        let len = i32::try_from(total)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| NetError::Io(format!("cannot frame {total} bytes: must be 1..=i32::MAX")))?;
        self.writing = true;
        let mut pending: Vec<u8> = len.to_be_bytes().to_vec();
        for piece in pieces {
            match piece {
                Piece::Bytes(b) => pending.extend_from_slice(&b),
                Piece::File { file, position, len } => {
                    if !pending.is_empty() {
                        let (result, _) = self.stream.write_all(std::mem::take(&mut pending)).await;
                        result.map_err(|e| io_error("send", e))?;
                    }
                    self.sendfile(&file, position, len).await?;
                }
            }
        }
        if !pending.is_empty() {
            let (result, _) = self.stream.write_all(pending).await;
            result.map_err(|e| io_error("send", e))?;
        }
        self.writing = false;
        Ok(())
    }

    /// `len` bytes of `file` from `position` to the socket, waiting for room when it is full.
    async fn sendfile(&mut self, file: &std::fs::File, position: u64, len: u64) -> Result<(), NetError> {
        let mut offset = position;
        let end = position.saturating_add(len);
        while offset < end {
            let chunk = usize::try_from(end - offset)
                .unwrap_or(usize::MAX)
                .min(SENDFILE_CHUNK_BYTES);
            match rustix::fs::sendfile(socket_fd(&self.stream), file, Some(&mut offset), chunk) {
                Ok(0) => {
                    return Err(NetError::Io(format!(
                        "file region ended {} bytes early (truncated?); the frame to {} is cut",
                        end - offset,
                        self.peer
                    )))
                }
                Ok(_) => {}
                Err(rustix::io::Errno::AGAIN) => {
                    self.stream
                        .writable(false)
                        .await
                        .map_err(|e| io_error("waiting to send", e))?;
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(io_error("sendfile", e.into())),
            }
        }
        Ok(())
    }
}

/// Plaintext bytes handed to rustls per write, so one large frame is encrypted and sent in
/// pieces rather than buffered whole a second time.
const TLS_WRITE_CHUNK_BYTES: usize = 64 * 1024;
/// Round trips a TLS handshake may take before the connection is given up (TLS 1.2 needs two).
const TLS_HANDSHAKE_READS_MAX: usize = 64;

/// TLS connections (see the module docs): rustls between the frames and the socket.
impl RealConn {
    fn tls_session(&mut self) -> &mut rustls::Connection {
        self.tls.as_mut().expect("called on TLS connections only")
    }

    /// Sends whatever rustls has queued (handshake messages, alerts, encrypted records).
    async fn flush_tls(&mut self) -> Result<(), NetError> {
        while self.tls_session().wants_write() {
            let mut out = Vec::with_capacity(TLS_WRITE_CHUNK_BYTES);
            self.tls_session()
                .write_tls(&mut out)
                .map_err(|e| io_error("TLS encrypt", e))?;
            let (result, _) = self.stream.write_all(out).await;
            result.map_err(|e| io_error("send", e))?;
        }
        Ok(())
    }

    /// Reads one chunk of ciphertext, hands it to rustls, and appends what it decrypts to `buf`.
    /// `Ok(false)` when the peer closed the TCP connection.
    async fn read_tls_chunk(&mut self, buf: &mut BytesMut) -> Result<bool, NetError> {
        let (result, cipher) = self.stream.read(Vec::with_capacity(READ_CHUNK_BYTES)).await;
        if result.map_err(|e| io_error("receive", e))? == 0 {
            return Ok(false);
        }
        let peer = self.peer.clone();
        let tls = self.tls_session();
        let mut rest: &[u8] = &cipher;
        while !rest.is_empty() {
            tls.read_tls(&mut rest).map_err(|e| io_error("TLS receive", e))?;
            let state = tls
                .process_new_packets()
                .map_err(|e| NetError::Io(format!("TLS from {peer}: {e}")))?;
            let ready = state.plaintext_bytes_to_read();
            if ready > 0 {
                let start = buf.len();
                buf.resize(start + ready, 0);
                io::Read::read_exact(&mut tls.reader(), &mut buf[start..]).map_err(|e| io_error("TLS decrypt", e))?;
            }
        }
        Ok(true)
    }

    /// Completes a client handshake (the server's runs inside its first `recv`).
    async fn handshake(&mut self) -> Result<(), NetError> {
        let mut buf = self.read_buf.take().expect("a fresh connection holds its buffer");
        for _ in 0..TLS_HANDSHAKE_READS_MAX {
            self.flush_tls().await?;
            if !self.tls_session().is_handshaking() {
                self.read_buf = Some(buf);
                return Ok(());
            }
            if !self.read_tls_chunk(&mut buf).await? {
                return Err(NetError::Io(format!(
                    "{} closed the connection during the TLS handshake",
                    self.peer
                )));
            }
        }
        Err(NetError::Io(format!("TLS handshake with {} did not finish", self.peer)))
    }

    async fn send_tls(&mut self, frame: Bytes) -> Result<(), NetError> {
        if self.writing {
            return Err(NetError::Io(format!(
                "an earlier send to {} stopped part-way; the stream is unusable",
                self.peer
            )));
        }
        let len = i32::try_from(frame.len())
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| NetError::Io(format!("cannot frame {} bytes: must be 1..=i32::MAX", frame.len())))?;
        self.writing = true;
        let prefix = len.to_be_bytes();
        for piece in [&prefix[..], &frame[..]] {
            for chunk in piece.chunks(TLS_WRITE_CHUNK_BYTES) {
                let mut rest = chunk;
                while !rest.is_empty() {
                    let n = io::Write::write(&mut self.tls_session().writer(), rest)
                        .map_err(|e| io_error("TLS encrypt", e))?;
                    if n == 0 && !self.tls_session().wants_write() {
                        return Err(NetError::Io(format!(
                            "TLS session with {} takes no more data",
                            self.peer
                        )));
                    }
                    rest = &rest[n..];
                    self.flush_tls().await?;
                }
            }
        }
        self.flush_tls().await?;
        self.writing = false;
        Ok(())
    }

    async fn recv_tls(&mut self) -> Result<Option<Bytes>, NetError> {
        let mut buf = self.read_buf.take().ok_or_else(|| {
            NetError::Io(format!(
                "an earlier receive from {} stopped part-way; the stream is unusable",
                self.peer
            ))
        })?;
        loop {
            match self.frame_len(&buf)? {
                Some(len) if buf.len() >= 4 + len => {
                    buf.advance(4);
                    let frame = buf.split_to(len).freeze();
                    self.read_buf = Some(buf);
                    return Ok(Some(frame));
                }
                Some(len) => buf.reserve(4 + len - buf.len()),
                None => {}
            }
            // Handshake replies (a server's first recv) go out before we wait for more.
            if self.tls_session().wants_write() {
                if self.writing {
                    return Err(NetError::Io(format!(
                        "an earlier send to {} stopped part-way; the stream is unusable",
                        self.peer
                    )));
                }
                self.writing = true;
                self.flush_tls().await?;
                self.writing = false;
            }
            if !self.read_tls_chunk(&mut buf).await? {
                // TCP closed (with or without close_notify): clean only between frames.
                if buf.is_empty() {
                    return Ok(None);
                }
                return Err(NetError::Io(format!(
                    "{} closed the connection inside a frame ({} bytes unread)",
                    self.peer,
                    buf.len()
                )));
            }
        }
    }
}

impl Connection for RealConn {
    async fn send(&mut self, frame: Bytes) -> Result<(), NetError> {
        if self.tls.is_some() {
            return self.send_tls(frame).await;
        }
        if self.writing {
            return Err(NetError::Io(format!(
                "an earlier send to {} stopped part-way; the stream is unusable",
                self.peer
            )));
        }
        let len = i32::try_from(frame.len())
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| NetError::Io(format!("cannot frame {} bytes: must be 1..=i32::MAX", frame.len())))?;
        self.writing = true;
        if frame.len() <= COALESCE_BYTES_MAX {
            let mut out = Vec::with_capacity(4 + frame.len());
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(&frame);
            let (result, _) = self.stream.write_all(out).await;
            result.map_err(|e| io_error("send", e))?;
        } else {
            let (result, _) = self.stream.write_all(len.to_be_bytes().to_vec()).await;
            result.map_err(|e| io_error("send", e))?;
            let (result, _) = self.stream.write_all(frame).await;
            result.map_err(|e| io_error("send", e))?;
        }
        self.writing = false;
        Ok(())
    }

    async fn recv(&mut self) -> Result<Option<Bytes>, NetError> {
        if self.tls.is_some() {
            return self.recv_tls().await;
        }
        let mut buf = self.read_buf.take().ok_or_else(|| {
            NetError::Io(format!(
                "an earlier receive from {} stopped part-way; the stream is unusable",
                self.peer
            ))
        })?;
        loop {
            match self.frame_len(&buf)? {
                Some(len) if buf.len() >= 4 + len => {
                    buf.advance(4);
                    let frame = buf.split_to(len).freeze();
                    self.read_buf = Some(buf);
                    return Ok(Some(frame));
                }
                // Room for exactly the rest of this frame (the limit was checked above).
                Some(len) => buf.reserve(4 + len - buf.len()),
                None => buf.reserve(READ_CHUNK_BYTES),
            }
            let filled = buf.len();
            let spare_end = buf.capacity();
            let (result, slice): (_, SliceMut<BytesMut>) = self.stream.read(buf.slice_mut(filled..spare_end)).await;
            buf = slice.into_inner();
            match result {
                Ok(0) if buf.is_empty() => return Ok(None),
                Ok(0) => {
                    return Err(NetError::Io(format!(
                        "{} closed the connection inside a frame ({} bytes unread)",
                        self.peer,
                        buf.len()
                    )))
                }
                Ok(_) => {}
                Err(e) => return Err(io_error("receive", e)),
            }
        }
    }

    fn peer(&self) -> String {
        self.peer.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> (tempfile::TempDir, RealRuntime) {
        let dir = tempfile::tempdir().expect("temp dir");
        let disk = FsDisk::open(dir.path()).expect("open disk");
        (dir, RealRuntime::new(Rc::new(RefCell::new(disk)), 7))
    }

    /// A listener on a free loopback port and a raw client socket connected to it.
    async fn pair(rt: &RealRuntime) -> (RealConn, TcpStream) {
        let mut listener = rt.listen("127.0.0.1:0").await.expect("listen");
        let addr = listener.local_addr().expect("local addr");
        let client = TcpStream::connect(addr).await.expect("connect");
        let server = listener.accept().await.expect("accept");
        (server, client)
    }

    async fn write_raw(stream: &mut TcpStream, bytes: Vec<u8>) {
        let (result, _) = stream.write_all(bytes).await;
        result.expect("write");
    }

    #[test]
    fn frames_round_trip_in_order_whatever_their_size() {
        let (_dir, rt) = runtime();
        block_on(async move {
            let (mut server, client) = pair(&rt).await;
            let mut client = RealConn::new(client, FRAME_BYTES_MAX_DEFAULT).expect("client conn");
            let sizes = [
                1usize,
                3,
                4,
                5,
                1000,
                COALESCE_BYTES_MAX,
                COALESCE_BYTES_MAX + 1,
                3 * READ_CHUNK_BYTES + 7,
            ];
            let frames: Vec<Bytes> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| Bytes::from((0..n).map(|b| (b * 31 + i) as u8).collect::<Vec<u8>>()))
                .collect();
            let sent = frames.clone();
            monoio::spawn(async move {
                for f in sent {
                    client.send(f).await.expect("send");
                }
            });
            for f in &frames {
                assert_eq!(server.recv().await.expect("recv").as_ref(), Some(f));
            }
            assert_eq!(server.recv().await.expect("clean close"), None);
        })
        .expect("runtime");
    }

    #[test]
    fn frames_round_trip_on_the_epoll_fallback_driver_too() {
        let (_dir, rt) = runtime();
        let mut legacy = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .expect("legacy runtime");
        legacy.block_on(async move {
            let (mut server, client) = pair(&rt).await;
            let mut client = RealConn::new(client, FRAME_BYTES_MAX_DEFAULT).expect("client conn");
            let big = Bytes::from(vec![7u8; COALESCE_BYTES_MAX * 2]);
            client.send(Bytes::from_static(b"hello")).await.expect("send");
            client.send(big.clone()).await.expect("send");
            assert_eq!(server.recv().await.expect("recv"), Some(Bytes::from_static(b"hello")));
            assert_eq!(server.recv().await.expect("recv"), Some(big));
            rt.sleep(Duration::from_millis(1)).await;
        });
    }

    #[test]
    fn frames_split_across_reads_and_packed_into_one_read_both_parse() {
        let (_dir, rt) = runtime();
        block_on(async move {
            let (mut server, mut client) = pair(&rt).await;
            // Two whole frames in one write, then a third dribbled out a byte at a time.
            write_raw(&mut client, vec![0, 0, 0, 2, b'a', b'b', 0, 0, 0, 1, b'c']).await;
            assert_eq!(server.recv().await.expect("recv"), Some(Bytes::from_static(b"ab")));
            assert_eq!(server.recv().await.expect("recv"), Some(Bytes::from_static(b"c")));
            let slow = monoio::spawn(async move {
                for b in [0u8, 0, 0, 3, b'x', b'y', b'z'] {
                    write_raw(&mut client, vec![b]).await;
                    monoio::time::sleep(Duration::from_millis(1)).await;
                }
                client
            });
            assert_eq!(server.recv().await.expect("recv"), Some(Bytes::from_static(b"xyz")));
            drop(slow.await);
        })
        .expect("runtime");
    }

    #[test]
    fn oversized_frame_is_refused_before_its_body_arrives() {
        let (_dir, rt) = runtime();
        let rt = rt.with_frame_bytes_max(1024);
        block_on(async move {
            let (mut server, mut client) = pair(&rt).await;
            // Only the prefix is sent: recv must fail on it alone, not wait for 1025 bytes.
            write_raw(&mut client, 1025i32.to_be_bytes().to_vec()).await;
            assert_eq!(
                server.recv().await,
                Err(NetError::FrameTooLarge { len: 1025, max: 1024 })
            );
            assert!(server.recv().await.is_err(), "a failed connection stays failed");
        })
        .expect("runtime");
    }

    #[test]
    fn zero_and_negative_lengths_are_errors() {
        let (_dir, rt) = runtime();
        block_on(async move {
            for prefix in [0i32, -1, i32::MIN] {
                let (mut server, mut client) = pair(&rt).await;
                write_raw(&mut client, prefix.to_be_bytes().to_vec()).await;
                assert!(matches!(server.recv().await, Err(NetError::Io(_))), "prefix {prefix}");
            }
        })
        .expect("runtime");
    }

    #[test]
    fn close_inside_a_frame_is_an_error_and_between_frames_is_none() {
        let (_dir, rt) = runtime();
        block_on(async move {
            let (mut server, mut client) = pair(&rt).await;
            write_raw(&mut client, vec![0, 0, 0, 5, 1, 2]).await;
            drop(client);
            assert!(matches!(server.recv().await, Err(NetError::Io(_))));
        })
        .expect("runtime");
    }

    #[test]
    fn second_listener_on_a_bound_port_fails_clearly() {
        let (_dir, rt) = runtime();
        block_on(async move {
            let listener = rt.listen("127.0.0.1:0").await.expect("listen");
            let addr = listener.local_addr().expect("addr").to_string();
            match rt.listen(&addr).await {
                Err(NetError::Io(message)) => assert!(message.contains("already in use"), "{message}"),
                Err(e) => panic!("unexpected error {e}"),
                Ok(_) => panic!("a second listener bound {addr}"),
            }
        })
        .expect("runtime");
    }

    /// A runtime whose listener and client speak TLS with a fresh test PKI.
    fn tls_runtimes(
        client_auth: bool,
        client_identity: bool,
        client_ca_is_other: bool,
    ) -> (tempfile::TempDir, RealRuntime, RealRuntime) {
        let (dir, rt) = runtime();
        let pki = crate::tls::test_certs::make(dir.path());
        let server = crate::tls::server_config(&pki.server_cert, &pki.server_key, Some(&pki.ca), client_auth)
            .expect("server config");
        let ca = if client_ca_is_other { &pki.other_ca } else { &pki.ca };
        let identity = client_identity.then_some((pki.client_cert.as_path(), pki.client_key.as_path()));
        let client = crate::tls::client_config(ca, identity).expect("client config");
        let server_rt = rt.clone().with_tls(TlsSettings {
            server: Some(server),
            ..TlsSettings::default()
        });
        let client_rt = rt.with_tls(TlsSettings {
            client: Some(client),
            ..TlsSettings::default()
        });
        (dir, server_rt, client_rt)
    }

    #[test]
    fn tls_frames_round_trip_both_ways_whatever_their_size() {
        let (_dir, server_rt, client_rt) = tls_runtimes(false, false, false);
        block_on(async move {
            let mut listener = server_rt.listen("127.0.0.1:0").await.expect("listen");
            let addr = listener.local_addr().expect("addr").to_string();
            let sizes = [1usize, 5, 1000, TLS_WRITE_CHUNK_BYTES + 1, 3 * READ_CHUNK_BYTES + 7];
            let frames: Vec<Bytes> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| Bytes::from((0..n).map(|b| (b * 31 + i) as u8).collect::<Vec<u8>>()))
                .collect();
            let sent = frames.clone();
            let client = monoio::spawn(async move {
                let mut conn = client_rt.connect(&addr).await.expect("TLS connect");
                for f in sent {
                    conn.send(f.clone()).await.expect("send");
                    assert_eq!(conn.recv().await.expect("echo"), Some(f));
                }
            });
            let mut server = listener.accept().await.expect("accept");
            for f in &frames {
                let got = server.recv().await.expect("recv").expect("a frame");
                assert_eq!(&got, f);
                server.send(got).await.expect("echo");
            }
            client.await;
            assert_eq!(server.recv().await.expect("clean close"), None);
            println!("{} frames round-tripped over TLS, sizes {sizes:?}", frames.len());
        })
        .expect("runtime");
    }

    #[test]
    fn garbage_and_plaintext_on_a_tls_port_fail_only_that_connection() {
        let (_dir, server_rt, client_rt) = tls_runtimes(false, false, false);
        block_on(async move {
            let mut listener = server_rt.listen("127.0.0.1:0").await.expect("listen");
            let addr = listener.local_addr().expect("addr").to_string();
            let good_addr = addr.clone();
            let good = monoio::spawn(async move {
                let mut conn = client_rt.connect(&good_addr).await.expect("TLS connect");
                conn.send(Bytes::from_static(b"first")).await.expect("send");
                conn.recv().await.expect("recv")
            });
            let mut tls_server = listener.accept().await.expect("accept");
            // A plaintext Kafka frame (ApiVersions v0 header) and random garbage.
            let plaintext = vec![0, 0, 0, 10, 0, 18, 0, 0, 0, 0, 0, 1, 0xff, 0xff];
            let garbage: Vec<u8> = (0..300u32).map(|i| (i * 7919 % 251) as u8).collect();
            for bad in [plaintext, garbage] {
                let mut raw = TcpStream::connect(addr.as_str()).await.expect("connect");
                write_raw(&mut raw, bad).await;
                let mut bad_server = listener.accept().await.expect("accept");
                let result = bad_server.recv().await;
                assert!(result.is_err(), "a TLS port took non-TLS bytes: {result:?}");
            }
            let frame = tls_server.recv().await.expect("the TLS client still works");
            assert_eq!(frame, Some(Bytes::from_static(b"first")));
            tls_server.send(Bytes::from_static(b"reply")).await.expect("send");
            assert_eq!(good.await, Some(Bytes::from_static(b"reply")));
        })
        .expect("runtime");
    }

    #[test]
    fn tls_clients_check_the_server_and_mutual_tls_checks_the_client() {
        for (client_auth, identity, other_ca, ok) in [
            (false, false, true, false),
            (true, false, false, false),
            (true, true, false, true),
        ] {
            let (_dir, server_rt, client_rt) = tls_runtimes(client_auth, identity, other_ca);
            block_on(async move {
                let mut listener = server_rt.listen("127.0.0.1:0").await.expect("listen");
                let addr = listener.local_addr().expect("addr").to_string();
                let server = monoio::spawn(async move {
                    let mut conn = listener.accept().await.expect("accept");
                    let frame = conn.recv().await;
                    if let Ok(Some(f)) = &frame {
                        conn.send(f.clone()).await.expect("echo");
                    }
                    frame
                });
                let client = async {
                    let mut conn = client_rt.connect(&addr).await?;
                    conn.send(Bytes::from_static(b"hi")).await?;
                    conn.recv().await
                };
                let client = client.await;
                let server = server.await;
                println!("client auth {client_auth}, identity {identity}, other CA {other_ca}: client {client:?}, server {server:?}");
                assert_eq!(client.is_ok() && server.is_ok(), ok);
            })
            .expect("runtime");
        }
    }

    #[test]
    fn clocks_and_random_stream_behave() {
        let (_dir, rt) = runtime();
        block_on(async move {
            let t0 = rt.monotonic_ms();
            rt.sleep(Duration::from_millis(20)).await;
            assert!(rt.monotonic_ms() >= t0 + 20);
            assert!(rt.now_ms() > 1_600_000_000_000);
            let (_dir2, other) = runtime();
            let a: Vec<u64> = (0..4).map(|_| rt.random_u64()).collect();
            let b: Vec<u64> = (0..4).map(|_| other.random_u64()).collect();
            assert_eq!(a, b, "same seed, same stream");
            let spawned = Rc::new(RefCell::new(false));
            let flag = spawned.clone();
            rt.spawn(async move { *flag.borrow_mut() = true });
            rt.sleep(Duration::from_millis(1)).await;
            assert!(*spawned.borrow());
        })
        .expect("runtime");
    }
}
