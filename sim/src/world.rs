//! The world of one simulation run: madsim's runtime, the nodes in it, and the faults applied to
//! them.
//!
//! What it owns: [`run_seed`] (one run on a fresh OS thread: madsim keeps per-thread state, and a
//! reused thread makes runs depend on what ran before), and [`World`], the supervisor's handle
//! that creates nodes and injects [`Fault`]s. Every fault has an opposite ([`Fault::opposite`]):
//! kill/restart, pause/resume, partition/repair, clog/unclog (one way), isolate/rejoin,
//! skew/unskew.
//!
//! Contract:
//! - Node `i` (0-based, in creation order) has IP `10.0.0.{i+1}`, a simulated address only.
//! - A node's [`NodeState`] (disk, random stream, clock skew) lives here, outside madsim's node:
//!   it survives kill and restart. Killing a node crashes its disk (`SimDisk::crash`, seeded
//!   from the node's [`Purpose::DiskCrash`] stream), so writes it had not synced may be lost or
//!   torn; [`World::kill_process`] kills the process only and leaves the disk as it was (the
//!   page cache survives a process kill); restarting re-runs the node's `main` with a fresh
//!   [`SimRuntime`] on the same state.
//! - The run's thread inherits the caller's tracing dispatcher, so a trace capture around
//!   [`run_seed`] sees the run's events.
//! - A run is a pure function of its seed: madsim's scheduler and network draw from madsim's
//!   generator seeded with it, and everything Gregor draws comes from `crate::seed` streams.

use std::cell::RefCell;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use madsim::task::NodeId;
use rand_chacha::rand_core::RngCore;

use crate::disk::{DiskLatency, SimDisk};
use crate::runtime::net::{Clog, SimNet};
use crate::runtime::{NodeState, SimRuntime, FRAME_BYTES_MAX_DEFAULT};
use crate::seed::{self, Purpose};

/// Settings of a whole run.
#[derive(Clone, Debug)]
pub struct WorldConfig {
    /// Virtual time after which the run fails (a guard against runs that never end).
    pub time_limit: Duration,
    /// The one-way latency range of each frame, drawn per frame by the simulated network
    /// (`runtime::net`). madsim's own network, which nothing uses now, is given it too, so that
    /// madsim's configuration (and anything it derives from it) stays as it was.
    pub send_latency: std::ops::Range<Duration>,
}

impl Default for WorldConfig {
    fn default() -> Self {
        WorldConfig {
            time_limit: Duration::from_secs(3600),
            send_latency: Duration::from_millis(1)..Duration::from_millis(10),
        }
    }
}

/// Settings of one node.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub name: String,
    pub disk_latency: DiskLatency,
    pub frame_bytes_max: u64,
}

impl NodeConfig {
    pub fn named(name: impl Into<String>) -> Self {
        NodeConfig {
            name: name.into(),
            disk_latency: DiskLatency::default(),
            frame_bytes_max: FRAME_BYTES_MAX_DEFAULT,
        }
    }
}

/// A node of the world: its index in creation order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeIndex(pub usize);

/// A fault, as a value. Applying a fault and then its [`opposite`](Fault::opposite) returns the
/// world to health (except for what a crash destroyed on disk).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Kill the node's process and crash its disk.
    Kill(NodeIndex),
    /// Start a killed node again from its `main`.
    Restart(NodeIndex),
    /// Stop running the node's tasks; messages to it queue up.
    Pause(NodeIndex),
    Resume(NodeIndex),
    /// Cut the link between two nodes both ways.
    Partition(NodeIndex, NodeIndex),
    Repair(NodeIndex, NodeIndex),
    /// Cut the link one way only (`from` can no longer reach `to`).
    Clog {
        from: NodeIndex,
        to: NodeIndex,
    },
    Unclog {
        from: NodeIndex,
        to: NodeIndex,
    },
    /// Cut the node off from every other node, both ways.
    Isolate(NodeIndex),
    Rejoin(NodeIndex),
    /// Skew the node's wall clock by this many ms.
    Skew(NodeIndex, i64),
    Unskew(NodeIndex),
}

impl Fault {
    pub fn opposite(&self) -> Fault {
        match *self {
            Fault::Kill(n) => Fault::Restart(n),
            Fault::Restart(n) => Fault::Kill(n),
            Fault::Pause(n) => Fault::Resume(n),
            Fault::Resume(n) => Fault::Pause(n),
            Fault::Partition(a, b) => Fault::Repair(a, b),
            Fault::Repair(a, b) => Fault::Partition(a, b),
            Fault::Clog { from, to } => Fault::Unclog { from, to },
            Fault::Unclog { from, to } => Fault::Clog { from, to },
            Fault::Isolate(n) => Fault::Rejoin(n),
            Fault::Rejoin(n) => Fault::Isolate(n),
            Fault::Skew(n, _) => Fault::Unskew(n),
            // The skew it undid is not recorded here; skewing by 0 is the neutral inverse.
            Fault::Unskew(n) => Fault::Skew(n, 0),
        }
    }
}

/// The simulated IP of node `node`: `10.0.0.{index+1}`.
pub fn node_ip(node: NodeIndex) -> IpAddr {
    let last_octet = u8::try_from(node.0 + 1)
        .ok()
        .filter(|&o| o < 255)
        .expect("at most 254 nodes fit in 10.0.0.0/24");
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, last_octet))
}

struct NodeEntry {
    id: NodeId,
    name: String,
    state: Arc<NodeState>,
    crash_seeds: rand_chacha::ChaCha8Rng,
}

/// The supervisor's handle on a running simulation. Cheap to clone; only valid inside the
/// `run_seed` closure that received it.
#[derive(Clone)]
pub struct World {
    seed: u64,
    handle: madsim::runtime::Handle,
    nodes: Rc<RefCell<Vec<NodeEntry>>>,
    net: Arc<SimNet>,
}

/// Runs one simulation with `seed` on a fresh OS thread and returns what `f`'s future returns. A
/// panic inside the run is re-raised here after printing the seed that replays it.
pub fn run_seed<T, F, Fut>(seed: u64, f: F) -> T
where
    T: Send + 'static,
    F: FnOnce(World) -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
{
    run_seed_with(seed, WorldConfig::default(), f)
}

/// [`run_seed`] with explicit settings.
pub fn run_seed_with<T, F, Fut>(seed: u64, config: WorldConfig, f: F) -> T
where
    T: Send + 'static,
    F: FnOnce(World) -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
{
    // The run's thread traces to the caller's subscriber, so that a trace capture around the
    // call (`crate::trace::capture`) sees every event of the run.
    let dispatch = tracing::dispatcher::get_default(|d| d.clone());
    let thread = std::thread::Builder::new()
        .name(format!("sim-seed-{seed}"))
        .spawn(move || {
            let _trace = tracing::dispatcher::set_default(&dispatch);
            let mut madsim_config = madsim::Config::default();
            madsim_config.net.send_latency = config.send_latency.clone();
            let mut rt = madsim::runtime::Runtime::with_seed_and_config(seed, madsim_config);
            rt.set_time_limit(config.time_limit);
            let world = World {
                seed,
                handle: rt.handle().clone(),
                nodes: Rc::new(RefCell::new(Vec::new())),
                net: SimNet::new(config.send_latency.clone()),
            };
            let ending = world.clone();
            rt.block_on(async move {
                let out = f(world).await;
                // Tasks still pending when the run ends are never dropped by madsim: a task whose
                // waker sits in state its own future owns (a broker's fetch long-poll parked in
                // the broker it holds) keeps itself alive, and with it the node's broker, logs
                // and disk. Every seed leaked 0.5-9 MB so, and a 20-minute campaign on 2 jobs
                // grew to 24 GB and was killed. Killing every node wakes its tasks, and madsim
                // drops a killed node's futures at their next turn, which the sleep gives them.
                ending.end();
                madsim::time::sleep(Duration::from_millis(1)).await;
                out
            })
        })
        .expect("the OS can start a thread for the run");
    match thread.join() {
        Ok(value) => value,
        Err(panic) => {
            eprintln!("simulation failed; replay with seed {seed}");
            std::panic::resume_unwind(panic)
        }
    }
}

impl World {
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Adds a node with default settings that runs `main` (again at every restart).
    pub fn add_node<M, Fut>(&self, name: &str, main: M) -> NodeIndex
    where
        M: Fn(SimRuntime) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        self.add_node_with(NodeConfig::named(name), main)
    }

    /// Adds a node that runs `main` with its runtime; `main` runs again at every restart, and the
    /// node's process exits when it returns.
    pub fn add_node_with<M, Fut>(&self, config: NodeConfig, main: M) -> NodeIndex
    where
        M: Fn(SimRuntime) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + 'static,
    {
        let mut nodes = self.nodes.borrow_mut();
        let index = nodes.len();
        let ip = node_ip(NodeIndex(index));
        let state = Arc::new(NodeState::new(
            self.seed,
            index as u64,
            SimDisk::new(config.disk_latency),
            config.frame_bytes_max,
            self.net.clone(),
        ));
        self.net.add_node(index as u64, ip);
        let init_state = state.clone();
        let main = Arc::new(main);
        let name = config.name.clone();
        let node = self
            .handle
            .create_node()
            .name(config.name)
            .ip(ip)
            .init(move || {
                let state = init_state.clone();
                let main = main.clone();
                async move { main(SimRuntime::attach(state)).await }
            })
            .build();
        nodes.push(NodeEntry {
            id: node.id(),
            name,
            state,
            crash_seeds: seed::stream(self.seed, index as u64, Purpose::DiskCrash),
        });
        NodeIndex(index)
    }

    /// Runs `f` with the node's runtime as a task on that node (next to its `main`), e.g. a test
    /// client. The task dies with the node: the handle then yields an error.
    pub fn spawn_on<T, F, Fut>(&self, node: NodeIndex, f: F) -> madsim::task::JoinHandle<T>
    where
        T: Send + 'static,
        F: FnOnce(SimRuntime) -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
    {
        let state = self.state(node);
        let handle = self
            .handle
            .get_node(self.id(node))
            .expect("every NodeIndex names a madsim node");
        // madsim's NodeHandle only spawns Send futures; core's are not. This Send shim runs on the
        // node and hands the real future to spawn_local there, without holding it across an await.
        handle.spawn(async move {
            madsim::task::spawn_local(f(SimRuntime::attach(state)))
                .await
                .expect("the inner task dies only with the node, and then so does this one")
        })
    }

    pub fn node_count(&self) -> usize {
        self.nodes.borrow().len()
    }

    /// The name the node was added with.
    pub fn name(&self, node: NodeIndex) -> String {
        self.nodes.borrow()[node.0].name.clone()
    }

    pub fn ip(&self, node: NodeIndex) -> IpAddr {
        node_ip(node)
    }

    /// `ip:port` of a node, as `Runtime::connect` takes it (also for a node not yet added).
    pub fn addr(&self, node: NodeIndex, port: u16) -> String {
        format!("{}:{port}", node_ip(node))
    }

    /// The node's surviving state: its disk and clock skew.
    pub fn state(&self, node: NodeIndex) -> Arc<NodeState> {
        self.nodes.borrow()[node.0].state.clone()
    }

    /// Runs `f` with the node's disk (to inspect it or inject disk faults).
    pub fn with_disk<T>(&self, node: NodeIndex, f: impl FnOnce(&mut SimDisk) -> T) -> T {
        self.state(node).with_disk(f)
    }

    /// Whether the node's process is down (killed, or its `main` returned).
    pub fn is_down(&self, node: NodeIndex) -> bool {
        self.handle.is_exit(self.id(node))
    }

    /// Kills every node's process (no disk fault): the end of a run.
    fn end(&self) {
        let count = self.nodes.borrow().len();
        for i in 0..count {
            self.kill_process(NodeIndex(i));
        }
    }

    fn id(&self, node: NodeIndex) -> NodeId {
        self.nodes.borrow()[node.0].id
    }

    /// Applies a fault (or its opposite, which is a fault too).
    pub fn inject(&self, fault: &Fault) {
        let clog = |c: Clog, clogged: bool| self.net.set_clog(c, clogged);
        let n = |node: NodeIndex| node.0 as u64;
        match *fault {
            Fault::Kill(node) => self.kill(node),
            Fault::Restart(node) => self.restart(node),
            Fault::Pause(node) => self.handle.pause(self.id(node)),
            Fault::Resume(node) => self.handle.resume(self.id(node)),
            Fault::Partition(a, b) | Fault::Repair(a, b) => {
                let clogged = matches!(fault, Fault::Partition(..));
                clog(Clog::Link(n(a), n(b)), clogged);
                clog(Clog::Link(n(b), n(a)), clogged);
            }
            Fault::Clog { from, to } => clog(Clog::Link(n(from), n(to)), true),
            Fault::Unclog { from, to } => clog(Clog::Link(n(from), n(to)), false),
            // Clogged nodes are kept apart from clogged links (as madsim kept them): Rejoin undoes
            // exactly Isolate and leaves partitions made by other faults in place.
            Fault::Isolate(node) | Fault::Rejoin(node) => {
                let clogged = matches!(fault, Fault::Isolate(_));
                clog(Clog::In(n(node)), clogged);
                clog(Clog::Out(n(node)), clogged);
            }
            Fault::Skew(node, skew_ms) => self.state(node).set_skew_ms(skew_ms),
            Fault::Unskew(node) => self.state(node).set_skew_ms(0),
        }
    }

    /// madsim's kill of the node's process: its tasks go (at their next turn), and with
    /// [`SimNet::reset_node`] its sockets at once.
    fn kill_node(&self, node: NodeIndex) {
        self.handle.kill(self.id(node));
        self.net.reset_node(node.0 as u64);
    }

    /// Kills the node's process (its tasks and sockets are gone) and crashes its disk. A node
    /// already down is left as it is.
    pub fn kill(&self, node: NodeIndex) {
        let id = self.id(node);
        if self.handle.is_exit(id) {
            return;
        }
        // The kill also closes the node's sockets; restart alone would leave them bound.
        self.kill_node(node);
        let crash_seed = self.nodes.borrow_mut()[node.0].crash_seeds.next_u64();
        self.with_disk(node, |disk| disk.crash(crash_seed));
    }

    /// Kills the node and replaces its disk by an empty one: the machine comes back (at
    /// [`restart`](World::restart)) with nothing it ever wrote, synced or not.
    pub fn lose_disk(&self, node: NodeIndex) {
        if !self.handle.is_exit(self.id(node)) {
            self.kill_node(node);
        }
        self.with_disk(node, |disk| disk.replace());
    }

    /// Kills the node's process but not its machine: the disk keeps every write, synced or not,
    /// as the page cache survives a process kill. [`restart`](World::restart) is its opposite too.
    /// A node already down is left as it is.
    pub fn kill_process(&self, node: NodeIndex) {
        if !self.handle.is_exit(self.id(node)) {
            self.kill_node(node);
        }
    }

    /// Restarts a process whose `main` returned by itself, its disk as it is (as a supervisor
    /// restarts a process that exited; the page cache kept every write). madsim's kill comes
    /// first even so: a returned `main` leaves the node's sockets bound.
    pub fn restart_exited(&self, node: NodeIndex) {
        self.kill_node(node);
        self.handle.restart(self.id(node));
    }

    /// Starts the node's `main` again on its surviving state; a node still up is killed first.
    pub fn restart(&self, node: NodeIndex) {
        self.kill(node);
        self.handle.restart(self.id(node));
    }

    pub fn pause(&self, node: NodeIndex) {
        self.inject(&Fault::Pause(node));
    }

    pub fn resume(&self, node: NodeIndex) {
        self.inject(&Fault::Resume(node));
    }

    pub fn partition(&self, a: NodeIndex, b: NodeIndex) {
        self.inject(&Fault::Partition(a, b));
    }

    pub fn repair(&self, a: NodeIndex, b: NodeIndex) {
        self.inject(&Fault::Repair(a, b));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fault_has_an_opposite_that_undoes_it() {
        let (a, b) = (NodeIndex(0), NodeIndex(1));
        let faults = [
            Fault::Kill(a),
            Fault::Pause(a),
            Fault::Partition(a, b),
            Fault::Clog { from: a, to: b },
            Fault::Isolate(a),
            Fault::Skew(a, 0),
        ];
        for fault in faults {
            assert_ne!(fault.opposite(), fault);
            assert_eq!(fault.opposite().opposite(), fault);
        }
    }

    /// A task that parks with its waker in state its own future owns (as a broker's fetch
    /// long-poll does) is dropped when the run ends, and with it what it holds: before, every
    /// such task outlived its seed and a campaign grew by megabytes a seed until it was killed.
    #[test]
    fn tasks_pending_at_the_end_of_a_run_are_dropped() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::task::{Poll, Waker};

        struct Dropped(Arc<AtomicUsize>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let dropped = Arc::new(AtomicUsize::new(0));
        let counter = dropped.clone();
        run_seed_with(7, WorldConfig::default(), move |world| async move {
            let counter = counter.clone();
            world.add_node("parked", move |_rt| {
                let guard = Dropped(counter.clone());
                async move {
                    // The task's own waker, kept where only this future can reach it: a cycle.
                    let own: Rc<RefCell<Option<Waker>>> = Rc::default();
                    let _guard = guard;
                    std::future::poll_fn(|cx| {
                        *own.borrow_mut() = Some(cx.waker().clone());
                        Poll::<()>::Pending
                    })
                    .await;
                }
            });
            madsim::time::sleep(Duration::from_millis(10)).await;
        });
        println!(
            "parked tasks dropped at the end of the run: {}",
            dropped.load(Ordering::Relaxed)
        );
        assert_eq!(dropped.load(Ordering::Relaxed), 1, "the parked task outlived its run");
    }

    #[test]
    fn node_ips_follow_creation_order() {
        assert_eq!(node_ip(NodeIndex(0)).to_string(), "10.0.0.1");
        assert_eq!(node_ip(NodeIndex(253)).to_string(), "10.0.0.254");
    }
}
