//! `SimRuntime`: gregor-core's [`Runtime`] on madsim, as one simulated node sees it.
//!
//! What it owns: nothing that dies with the node. A [`SimRuntime`] is a view of the node's
//! [`NodeState`] (its disk, its random stream, its clock skew), which the harness
//! (`crate::world`) keeps outside madsim's node so that it survives kill and restart; the
//! runtime itself is rebuilt by the node's init task at every (re)start.
//!
//! Contract (that of `gregor_core::runtime`, bound to madsim):
//! - Time is madsim's virtual time. `now_ms` is the virtual wall clock plus the node's skew
//!   (a fault set by the harness, with its opposite); `monotonic_ms` is virtual time since the
//!   simulation started and is never skewed. Every `sleep` lasts at least 1 ms (madsim).
//!   madsim's own `Sleep` adds a timer to its heap at every poll, and that heap cannot drop one:
//!   each request's 30 s timeout stayed there until it expired. So a `sleep` of 50 ms or more
//!   waits in the incarnation's [`alarms`] queue, which drops it when it is dropped and keeps
//!   about one madsim timer per node pending; a shorter one registers one madsim timer, at its
//!   first poll, however often it is polled again.
//! - `spawn` runs the task on the node of the calling task with madsim's `spawn_local` (core's
//!   futures are not `Send`). A `SimRuntime` is only handed to code running on its own node, so
//!   that is this node; it is asserted. The task dies when the node is killed.
//! - `connect`/`listen` use the run's simulated network ([`net`]): madsim's TCP semantics
//!   (ordered, reliable frames between node IPs, delayed by a per-frame latency drawn from
//!   madsim's generator, stalled (not lost) while a link is clogged; a connect over a clogged link
//!   or to an address nobody listens on is refused) without its byte stream: a frame is moved
//!   whole into the peer's queue. A frame larger than `frame_bytes_max` closes the receiving
//!   connection with [`NetError::FrameTooLarge`] when it arrives; frames over `i32::MAX` bytes
//!   (Kafka's length is an int32) are refused by `send`.
//! - `with_disk` lends the node's [`SimDisk`] under a lock confined to the run's thread: `f` must not
//!   call `with_disk` again (it panics).
//!   The disk adds up the latency its calls would cost (`SimDisk::take_latency_us`); the node's
//!   next outgoing frame waits for it, whole milliseconds at a time (madsim sleeps at least 1 ms;
//!   the remainder carries over). So an answer that followed an fsync leaves after the fsync's
//!   cost, and a node that does more disk work answers later: disk time shows in virtual time.
//! - `random_u64` draws from the node's [`Purpose::Runtime`] stream. The stream continues across
//!   restarts, like the entropy a real process would draw afresh.
//!
//! - Frame faults ([`frame_faults`]): while the harness sets rates on a node, frames the node
//!   sends on Kafka connections may be delivered twice or arrive with one bit flipped inside a
//!   record batch (the model, and why only there, is written in that module).
//!
//! Fault model: what madsim simulates (node kill/restart/pause), what [`net`] simulates (link
//! clogging, latency, sockets closed by a kill), the disk's own faults, and the frame faults
//! above; frames are otherwise never corrupted.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant, UNIX_EPOCH};

use bytes::Bytes;
use gregor_core::runtime::{Connection, Listener, NetError, Runtime};
use madsim::task::NodeId;
use madsim::time::TimeHandle;
use rand_chacha::rand_core::RngCore;
use rand_chacha::ChaCha8Rng;

use crate::disk::SimDisk;
use crate::seed::{self, Purpose};

pub mod alarms;
pub mod confined;
pub mod frame_faults;
pub mod net;
pub mod timer;

use alarms::{AlarmSleep, Alarms};
use confined::Confined;
use frame_faults::{FrameFaults, FrameRates, FrameStats, KAFKA_PORT};
use net::{End, NetListener, SimNet};
use timer::TimerArm;

/// Kafka's default `socket.request.max.bytes` (100 MiB).
pub const FRAME_BYTES_MAX_DEFAULT: u64 = 100 * 1024 * 1024;

/// The largest frame Kafka's int32 length prefix can announce.
const FRAME_BYTES_WIRE_MAX: u64 = i32::MAX as u64;

/// A node's state that outlives its process: created by the harness with the node, captured by
/// the node's madsim init closure, shared by every `SimRuntime` of every incarnation.
#[derive(Debug)]
pub struct NodeState {
    index: u64,
    frame_bytes_max: u64,
    /// Confined to the run's thread: the disk is locked for every disk call and frame.
    disk: Confined<SimDisk>,
    rng: Mutex<ChaCha8Rng>,
    skew_ms: AtomicI64,
    frame_faults: Mutex<FrameFaults>,
    /// Whether a frame fault rate is above zero: without one a frame's fate draws nothing, so
    /// sends skip the fault lock (two atomic operations a frame).
    frame_faults_on: AtomicBool,
    /// Disk latency taken from the disk but not yet slept. Taken at the end of every
    /// `with_disk`, so that the node's sends, which ask for it on every frame, need not lock the
    /// disk to learn that it is (nearly always) under 1 ms.
    disk_latency_us: AtomicU64,
    /// Frames this node sent, on every connection of every incarnation (for tests of traffic).
    frames_sent: AtomicU64,
    /// The run's network.
    net: Arc<SimNet>,
}

impl NodeState {
    /// State of node `index` in the run with `seed`.
    pub fn new(seed: u64, index: u64, disk: SimDisk, frame_bytes_max: u64, net: Arc<SimNet>) -> Self {
        NodeState {
            index,
            frame_bytes_max,
            disk: Confined::new(disk),
            rng: Mutex::new(seed::stream(seed, index, Purpose::Runtime)),
            skew_ms: AtomicI64::new(0),
            frame_faults: Mutex::new(FrameFaults::new(seed, index)),
            frame_faults_on: AtomicBool::new(false),
            disk_latency_us: AtomicU64::new(0),
            frames_sent: AtomicU64::new(0),
            net,
        }
    }

    /// Takes the disk latency accrued since the last call, in whole milliseconds; the remainder
    /// below 1 ms carries over to the next call.
    pub fn take_disk_latency_ms(&self) -> u64 {
        let total_us = self.disk_latency_us.load(Ordering::Relaxed);
        if total_us >= 1000 {
            self.disk_latency_us.store(total_us % 1000, Ordering::Relaxed);
        }
        total_us / 1000
    }

    pub fn index(&self) -> u64 {
        self.index
    }

    /// Runs `f` with the node's disk (also from the harness, e.g. to crash it or inject faults).
    pub fn with_disk<T>(&self, f: impl FnOnce(&mut SimDisk) -> T) -> T {
        let mut disk = self.disk.lock();
        let out = f(&mut disk);
        let taken_us = disk.take_latency_us();
        if taken_us > 0 {
            add_on_run_thread(&self.disk_latency_us, taken_us);
        }
        out
    }

    /// Sets how far this node's wall clock is ahead of (positive) or behind (negative) true
    /// virtual time. Its opposite is `set_skew_ms(0)`.
    pub fn set_skew_ms(&self, skew_ms: i64) {
        self.skew_ms.store(skew_ms, Ordering::Relaxed);
    }

    pub fn skew_ms(&self) -> i64 {
        self.skew_ms.load(Ordering::Relaxed)
    }

    fn frame_faults(&self) -> std::sync::MutexGuard<'_, FrameFaults> {
        self.frame_faults
            .lock()
            .expect("frame fault lock poisoned: a panic while drawing already failed the run")
    }

    /// Sets the frame fault rates of the frames this node sends on Kafka connections. Its
    /// opposite is `set_frame_rates(FrameRates::default())`.
    pub fn set_frame_rates(&self, rates: FrameRates) {
        let mut faults = self.frame_faults();
        faults.set(rates);
        let set = faults.rates();
        self.frame_faults_on
            .store(set.corrupt > 0.0 || set.duplicate > 0.0, Ordering::Relaxed);
    }

    pub fn frame_rates(&self) -> FrameRates {
        self.frame_faults().rates()
    }

    /// How many frames this node sent so far, on every connection (a duplicated one once).
    pub fn frames_sent(&self) -> u64 {
        self.frames_sent.load(Ordering::Relaxed)
    }

    /// How many frames this node's frame faults duplicated and corrupted so far.
    pub fn frame_stats(&self) -> FrameStats {
        self.frame_faults().stats()
    }
}

/// Adds `n` to one of a node's counters with a load and a store, not an atomic add (a
/// lock-prefixed instruction): only the run's thread touches a node's state.
fn add_on_run_thread(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// gregor-core's `Runtime` for one simulated node.
#[derive(Clone, Debug)]
pub struct SimRuntime {
    state: Arc<NodeState>,
    node: NodeId,
    /// The sleeps of this incarnation (shared by its clones), with their driver task.
    alarms: Alarms,
    /// madsim's clock, looked up once: `TimeHandle::current()` costs a thread-local lookup and
    /// two `Arc` clones, and the core asks for the time on every request. With the `Sleep` that
    /// arms the short sleeps' timers (shared by the clones and the alarm queue).
    timers: Rc<TimerArm>,
    /// madsim's wall clock at virtual time zero, since the Unix epoch: its wall clock is this
    /// base plus the virtual time elapsed, so `now_ms` adds the two instead of asking for a
    /// `SystemTime` and subtracting the epoch from it (a `Timespec` subtraction per call).
    base_since_epoch: Duration,
}

impl SimRuntime {
    /// The runtime of the node the calling task runs on. Call it from the node's init task (it
    /// spawns the driver task of the runtime's sleeps there).
    pub fn attach(state: Arc<NodeState>) -> Self {
        let time = TimeHandle::current();
        let now = time
            .now_time()
            .duration_since(UNIX_EPOCH)
            .expect("madsim's virtual clock starts in 2022, after the epoch");
        let timers = Rc::new(TimerArm::new(&time));
        SimRuntime {
            state,
            node: madsim::plugin::node(),
            alarms: Alarms::spawn(timers.clone()),
            base_since_epoch: now - time.elapsed(),
            timers,
        }
    }

    pub fn node_index(&self) -> u64 {
        self.state.index
    }

    pub fn state(&self) -> &Arc<NodeState> {
        &self.state
    }

    /// How many sleeps of this incarnation are waiting (for tests: a dropped sleep is gone).
    pub fn sleeps_waiting(&self) -> usize {
        self.alarms.waiting()
    }

    /// `(monotonic_ms(), now_ms())` from one reading of madsim's clock, which takes a spin lock
    /// each time: the workload's producer wants both for every record it sends.
    pub fn clock_ms(&self) -> (u64, i64) {
        let elapsed = self.timers.time().elapsed();
        (monotonic_of(elapsed), self.wall_of(elapsed))
    }

    /// The node's wall clock at virtual time `elapsed`.
    fn wall_of(&self, elapsed: Duration) -> i64 {
        let since_epoch = self.base_since_epoch + elapsed;
        let ms = i64::try_from(since_epoch.as_millis()).expect("virtual time within i64 ms");
        ms + self.state.skew_ms()
    }
}

/// Monotonic milliseconds at virtual time `elapsed`.
fn monotonic_of(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_millis()).expect("virtual time within u64 ms")
}

/// Whether `addr` (`host:port`) is on Kafka's port: frame faults apply to those connections.
fn is_kafka(addr: &str) -> bool {
    addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok()) == Some(KAFKA_PORT)
}

impl Runtime for SimRuntime {
    type Disk = SimDisk;
    type Conn = SimConnection;
    type Listener = SimListener;

    fn now_ms(&self) -> i64 {
        self.wall_of(self.timers.time().elapsed())
    }

    fn monotonic_ms(&self) -> u64 {
        monotonic_of(self.timers.time().elapsed())
    }

    fn sleep(&self, duration: Duration) -> impl Future<Output = ()> + 'static {
        if duration < ALARM_QUEUE_MIN {
            SimSleep::Short(OneTimerSleep::new(&self.timers, duration))
        } else {
            SimSleep::Long(self.alarms.sleep(duration))
        }
    }

    fn spawn(&self, task: impl Future<Output = ()> + 'static) {
        assert_eq!(
            madsim::plugin::node(),
            self.node,
            "SimRuntime of node {} used from another node's task",
            self.state.index
        );
        // Detached: dropping a madsim JoinHandle does not cancel the task; killing the node does.
        drop(madsim::task::spawn_local(task));
    }

    async fn connect(&self, addr: &str) -> Result<SimConnection, NetError> {
        let end = self
            .state
            .net
            .connect(self.timers.time(), self.state.index, addr)
            .await?;
        Ok(SimConnection::new(
            end,
            addr.to_string(),
            self.state.clone(),
            is_kafka(addr),
        ))
    }

    async fn listen(&self, addr: &str) -> Result<SimListener, NetError> {
        let listener = self.state.net.listen(self.state.index, addr)?;
        Ok(SimListener {
            listener,
            addr: addr.to_string(),
            state: self.state.clone(),
        })
    }

    fn with_disk<T>(&self, f: impl FnOnce(&mut SimDisk) -> T) -> T {
        self.state.with_disk(f)
    }

    fn random_u64(&self) -> u64 {
        self.state
            .rng
            .lock()
            .expect("rng lock poisoned: a panic while drawing already failed the run")
            .next_u64()
    }
}

/// The latest waker of a [`OneTimerSleep`] whose task's waker changed, woken by its second
/// madsim timer.
#[derive(Debug, Default)]
struct ForwardWaker(Mutex<Option<Waker>>);

impl Wake for ForwardWaker {
    fn wake(self: Arc<Self>) {
        let waker = self.0.lock().expect("never poisoned: no code panics holding it").take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// A madsim sleep that adds its timer to madsim's heap once, at the first poll, with that poll's
/// waker; later polls with the same waker only look at the clock. A poll with another waker
/// (the sleep moved to another task) adds one more timer, which wakes whichever waker polled
/// last. The common case allocates nothing beyond madsim's heap entry: an `Arc` forwarder for
/// every sleep was 3.6% of a batched seed's allocations. It makes no madsim `Sleep` either: the
/// runtime's [`TimerArm`] arms the timer.
#[derive(Debug)]
struct OneTimerSleep {
    timers: Rc<TimerArm>,
    /// As `TimeHandle::sleep` computes it: at least 1 ms after the sleep was made.
    deadline: Instant,
    /// Who madsim's timer wakes, once added: the identity of the waker it holds a clone of,
    /// compared with each poll's as `Waker::will_wake` compares, never used to wake. Why not a
    /// clone: two atomic operations per sleep. Sound: the timer's clone keeps that waker's task
    /// allocated until the timer fires, and every poll after that finds the deadline passed, so
    /// no other waker can have taken its address while this is compared.
    armed: Option<WakerIdentity>,
    forward: Option<Arc<ForwardWaker>>,
}

/// A waker's data and vtable pointers: what `Waker::will_wake` compares.
type WakerIdentity = (*const (), *const std::task::RawWakerVTable);

fn identity(waker: &Waker) -> WakerIdentity {
    (waker.data(), waker.vtable())
}

impl OneTimerSleep {
    /// A sleep on the runtime's own clock: `madsim::time::sleep` looked the clock up again
    /// (`TimeHandle::current()`: a thread-local and a clone of its two `Arc`s, then their drop)
    /// and read it twice.
    fn new(timers: &Rc<TimerArm>, duration: Duration) -> Self {
        OneTimerSleep {
            deadline: TimerArm::deadline_after(timers.now(), duration),
            timers: timers.clone(),
            armed: None,
            forward: None,
        }
    }
}

impl Future for OneTimerSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let Some(armed) = this.armed else {
            // The first poll: due already, or armed for this waker.
            let polled = this.timers.arm(this.deadline, cx.waker());
            if polled.is_pending() {
                this.armed = Some(identity(cx.waker()));
            }
            return polled;
        };
        if this.timers.now() >= this.deadline {
            return Poll::Ready(());
        }
        if let Some(forward) = &this.forward {
            *forward.0.lock().expect("never poisoned: no code panics holding it") = Some(cx.waker().clone());
            return Poll::Pending;
        }
        if armed == identity(cx.waker()) {
            return Poll::Pending;
        }
        let forward = Arc::new(ForwardWaker(Mutex::new(Some(cx.waker().clone()))));
        let waker = Waker::from(forward.clone());
        this.forward = Some(forward);
        this.timers.arm(this.deadline, &waker)
    }
}

/// Sleeps shorter than this go straight to madsim's timer heap: they leave it soon anyway, and
/// the alarm queue's bookkeeping costs more than the heap entry (measured: a scenario whose
/// clients poll every few milliseconds took 1.3-2x the CPU with every sleep in the queue).
const ALARM_QUEUE_MIN: Duration = Duration::from_millis(50);

/// A sleep of a [`SimRuntime`]: short ones on madsim's heap, long ones in the alarm queue.
#[derive(Debug)]
enum SimSleep {
    Short(OneTimerSleep),
    Long(AlarmSleep),
}

impl Future for SimSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.get_mut() {
            SimSleep::Short(sleep) => Pin::new(sleep).poll(cx),
            SimSleep::Long(sleep) => Pin::new(sleep).poll(cx),
        }
    }
}

/// Accepts simulated TCP connections on one address.
#[derive(Debug)]
pub struct SimListener {
    listener: NetListener,
    addr: String,
    state: Arc<NodeState>,
}

impl Listener for SimListener {
    type Conn = SimConnection;

    async fn accept(&mut self) -> Result<SimConnection, NetError> {
        let (end, peer) = self.listener.accept().await?;
        Ok(SimConnection::new(
            end,
            peer.to_string(),
            self.state.clone(),
            is_kafka(&self.addr),
        ))
    }
}

/// One framed simulated TCP connection. After an error it is closed for good: every later call
/// returns [`NetError::Closed`].
#[derive(Debug)]
pub struct SimConnection {
    /// `None` once closed: dropping the end closes it, and the peer reads end-of-stream.
    end: Option<End>,
    peer: String,
    frame_bytes_max: u64,
    /// The node this end lives on: its disk latency delays this end's sends.
    state: Arc<NodeState>,
    /// A Kafka connection: the node's frame faults apply to what this end sends.
    kafka: bool,
}

impl SimConnection {
    fn new(end: End, peer: String, state: Arc<NodeState>, kafka: bool) -> Self {
        SimConnection {
            end: Some(end),
            peer,
            frame_bytes_max: state.frame_bytes_max,
            state,
            kafka,
        }
    }

    fn close(&mut self) {
        self.end = None;
    }

    /// Synchronous: queueing a frame never waits (an `async fn` here was one more state machine
    /// for every frame sent).
    fn send_inner(&mut self, frame: Bytes) -> Result<(), NetError> {
        let len = frame.len() as u64;
        if len > FRAME_BYTES_WIRE_MAX {
            return Err(NetError::FrameTooLarge {
                len,
                max: FRAME_BYTES_WIRE_MAX,
            });
        }
        if self.end.is_none() {
            return Err(NetError::Closed);
        }
        let (frame, duplicate) = if self.kafka && self.state.frame_faults_on.load(Ordering::Relaxed) {
            let fate = self.state.frame_faults().apply(frame);
            if fate.corrupted {
                tracing::debug!(target: "net", peer = %self.peer, bytes = len, "frame corrupted");
            }
            if fate.duplicate {
                tracing::debug!(target: "net", peer = %self.peer, bytes = len, "frame duplicated");
            }
            (fate.frame, fate.duplicate)
        } else {
            (frame, false)
        };
        let end = self.end.as_ref().ok_or(NetError::Closed)?;
        if duplicate {
            end.send(frame.clone())?;
        }
        end.send(frame)?;
        Ok(())
    }
}

impl Connection for SimConnection {
    async fn send(&mut self, frame: Bytes) -> Result<(), NetError> {
        let disk_ms = self.state.take_disk_latency_ms();
        if disk_ms > 0 {
            madsim::time::sleep(Duration::from_millis(disk_ms)).await;
        }
        let result = self.send_inner(frame);
        if result.is_ok() {
            add_on_run_thread(&self.state.frames_sent, 1);
        }
        // An oversized outgoing frame is refused without touching the stream; it stays usable.
        if matches!(result, Err(ref e) if !matches!(e, NetError::FrameTooLarge { .. })) {
            self.close();
        }
        result
    }

    async fn recv(&mut self) -> Result<Option<Bytes>, NetError> {
        // One state machine around `End::recv`'s (no inner `async fn`): see `net::Recv`.
        let result = match &self.end {
            None => Err(NetError::Closed),
            Some(end) => match end.recv().await {
                Some(frame) if frame.len() as u64 <= self.frame_bytes_max => return Ok(Some(frame)),
                Some(frame) => Err(NetError::FrameTooLarge {
                    len: frame.len() as u64,
                    max: self.frame_bytes_max,
                }),
                None => Ok(None),
            },
        };
        self.close();
        result
    }

    fn peer(&self) -> String {
        self.peer.clone()
    }
}
