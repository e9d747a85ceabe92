//! `gregor dev`: a single-node cluster in one process, on one monoio thread: a coordinator (a
//! Raft quorum of one, `gregor_core::coord::server`) and a cluster broker
//! (`gregor_core::node::cluster`), the same code `gregor coordinator` and `gregor broker` run.
//!
//! Contract: it owns its data directory (an exclusive lock on `.lock`; a second instance exits
//! with an error naming the directory), keeps the cluster id in `cluster.id` across restarts,
//! prints exactly one `gregor dev: listening on HOST:PORT ...` line on stdout once the broker is
//! registered and is the controller (clients can create topics, produce and consume), and logs
//! to stderr (`RUST_LOG`, default `info`). On SIGTERM, SIGINT or SIGHUP it stops accepting work,
//! flushes (fsyncs) every partition and exits 0; if a flush fails it exits 1. Startup errors
//! (lock held, port in use, unreadable data) exit 1 with one line saying what is wrong.
//!
//! Layout: partition directories and the broker's files at the top of the data directory (as
//! before), the coordinator's Raft state under `coordinator/`. The coordinator listens on
//! 127.0.0.1 at a port the OS chooses; only the broker in this process is told it (it is never
//! advertised). Sessions the coordinator finds at startup belong to the previous process (no
//! other process has its address) and are expired at once, so a restarted dev takes the
//! controller office without waiting out the old session's timeout.
//!
//! Data directories written by the broker-only dev of earlier versions (partition directories,
//! no `coordinator/`) are adopted: every topic is registered in the coordinator with its
//! existing id, partitions and configs, led by this broker at the epoch its log holds, before
//! the broker starts (a cluster broker removes the replicas of topics the coordinator does not
//! know). A marker file (`coordinator.adopting`) is written first and removed once every topic
//! is registered, so a crash in between resumes the adoption at the next start. Committed
//! offsets of that old layout (the `__consumer_offsets` directory without a partition suffix) are
//! not carried over: such a directory is refused with an error saying what to do.
//!
//! Fault model: a crash (SIGKILL, power loss) skips the final flush; what was not synced before
//! is subject to the disk model's crash rules and recovered by the log's and Raft's CRC scans at
//! the next start.

use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use gregor_core::broker::Broker;
use gregor_core::cluster::{
    partition_path, partition_state_path, partitions_path, topic_path, PartitionState, TopicRecord,
};
use gregor_core::consensus::NodeId;
use gregor_core::controller::BOOTSTRAP_PATHS;
use gregor_core::coord::client::{CoordClient, CoordClientConfig, CoordError};
use gregor_core::coord::server::{start_coordinator_on, CoordNodeConfig, CoordTiming};
use gregor_core::coord::tree::{CreateMode, Op, TreeError};
use gregor_core::disk::Disk;
use gregor_core::group::{Coordination, OFFSETS_TOPIC};
use gregor_core::ids::{BrokerId, LeaderEpoch};
use gregor_core::node::cluster::{start_cluster_broker, ClusterConfig};
use gregor_core::node::{NodeConfig, SharedBroker};
use gregor_core::runtime::Runtime;

use crate::data_dir::{self, DataDirLock};
use crate::runtime::{self, RealRuntime};
use crate::FsDisk;

/// The coordinator's directory inside the data directory.
pub const COORDINATOR_DIR: &str = "coordinator";
/// Present while topics of an old broker-only data directory are being registered.
pub const ADOPT_MARKER: &str = "coordinator.adopting";
/// `offsets.topic.num.partitions` of dev: 1, not Kafka's 50. Every partition is a log the broker
/// opens and recovers at each start; measured on this machine under load (3 runs each, same
/// session): restart after SIGTERM 330 ms with 1 partition against 5983 ms with 50 (the
/// broker-only dev: 365 ms), first consumer-group consume 1136 ms against 4049 ms (1094 ms).
/// One broker gains nothing from more. Fixed for good: a group's partition is its hash modulo
/// this number, so changing it would hide the commits of existing data directories.
pub const OFFSETS_PARTITIONS: i32 = 1;
/// The longest dev waits for its broker to register and take the controller office.
const READY_TIMEOUT_MS: u64 = 30_000;

#[derive(clap::Args, Debug)]
pub struct DevArgs {
    /// Data directory (created if missing; one process at a time).
    #[arg(long, default_value = "./gregor-data")]
    pub data_dir: PathBuf,
    /// Address to listen on for Kafka clients.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub listen: String,
    /// Host clients are told to connect to (Metadata); the port is the listening port.
    #[arg(long, default_value = "127.0.0.1")]
    pub advertised_host: String,
}

/// A quorum of one elects itself as soon as its election timer fires, so the timer is short:
/// it is most of dev's startup time. The heartbeat must stay below it (Raft's rule); with no
/// peers it only paces the ticker.
fn dev_timing() -> CoordTiming {
    CoordTiming {
        election_timeout_ms_min: 20,
        election_timeout_ms_max: 30,
        heartbeat_interval_ms: 10,
        expire_restored_sessions: true,
        ..CoordTiming::default()
    }
}

pub fn run(args: DevArgs) -> anyhow::Result<ExitCode> {
    // The port goes into Metadata responses, so it must be known before listening: port 0
    // ("any") would advertise a port nobody listens on.
    let addr = args
        .listen
        .to_socket_addrs()
        .with_context(|| format!("--listen {:?} is not a host:port address", args.listen))?
        .next()
        .with_context(|| format!("--listen {:?} resolves to no address", args.listen))?;
    if addr.port() == 0 {
        bail!("--listen needs an explicit port: clients are told it in Metadata responses");
    }
    let port = i32::from(addr.port());

    // FsDisk::open creates a missing data directory and fsyncs its parent, so it comes first;
    // it writes nothing else, so taking the lock right after it is early enough.
    let disk = FsDisk::open(&args.data_dir)
        .with_context(|| format!("cannot open data directory {}", args.data_dir.display()))?;
    let lock = DataDirLock::acquire(&args.data_dir)?;
    let rt = RealRuntime::new(std::rc::Rc::new(std::cell::RefCell::new(disk)), runtime::entropy_seed());
    let cluster_id = data_dir::cluster_id(&mut rt.disk().borrow_mut(), || {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&rt.random_u64().to_le_bytes());
        bytes[8..].copy_from_slice(&rt.random_u64().to_le_bytes());
        data_dir::format_cluster_id(bytes)
    })?;
    let adopting = rt.with_disk(|disk| adoption_needed(disk, &args.data_dir))?;
    let mut config = NodeConfig::single_node(&args.listen, &args.advertised_host, port, &cluster_id);
    config.fetch_zero_copy = runtime::fetch_zero_copy_from_env();
    let rt = rt.with_frame_bytes_max(config.limits.request_bytes_max as u64);
    let driver = if runtime::io_uring_available() {
        "io_uring"
    } else {
        "epoll (io_uring unavailable)"
    };

    let code = runtime::block_on(async move {
        // Before listening, so a signal that arrives once clients can connect is never missed.
        let shutdown = monoio::utils::CtrlC::new().context("cannot install the SIGTERM/SIGINT handler")?;
        let coordinator = start_embedded_coordinator(&rt).await?;
        if adopting {
            adopt_topics(&rt, &coordinator, &config).await?;
        }
        let me = config.broker.broker_id;
        let mut cluster = ClusterConfig::new(vec![coordinator]);
        // One broker: the offsets topic's replication factor is 1 whatever is asked (Kafka caps
        // it at the live brokers too).
        cluster.group_coordination = Coordination::Partitioned {
            partitions: OFFSETS_PARTITIONS,
            replication_factor: 1,
        };
        // Restart detection moves leadership off a restarted broker until the controller has
        // written a state for its new registration, so that another replica takes over from one
        // that may have lost unsynced writes. With one broker there is no other replica: the
        // same broker is elected again, after two coordinator writes per partition on every
        // start, for nothing.
        cluster.detect_restarts = false;
        let (broker, accept_loop) = start_cluster_broker(rt.clone(), config, cluster).await?;
        monoio::spawn(accept_loop);
        wait_ready(&rt, &broker, me).await?;
        println!(
            "gregor dev: listening on {} (cluster {cluster_id}, data {}, {driver})",
            args.listen,
            args.data_dir.display()
        );
        shutdown.await;
        tracing::info!("signal received: flushing every partition, then exiting");
        let failures = rt.with_disk(|disk| broker.borrow_mut().flush_all(disk));
        for (topic, partition, error) in &failures {
            tracing::error!(%topic, partition, %error, "flush failed at shutdown; recent writes may not be durable");
        }
        anyhow::Ok(if failures.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        })
    })
    .context("cannot start the I/O runtime")??;
    tracing::info!(lock = %lock.path().display(), "stopped; releasing the data directory");
    drop(lock);
    Ok(code)
}

/// Binds 127.0.0.1 at a port the OS picks, starts the coordinator on it and returns its address.
async fn start_embedded_coordinator(rt: &RealRuntime) -> anyhow::Result<String> {
    let listener = rt
        .listen("127.0.0.1:0")
        .await
        .context("the embedded coordinator cannot listen on 127.0.0.1")?;
    let addr = listener
        .local_addr()
        .context("the embedded coordinator's listening address")?
        .to_string();
    let config = CoordNodeConfig {
        id: NodeId(1),
        peers: vec![(NodeId(1), addr.clone())],
        voters: None,
        listen: addr.clone(),
        dir: COORDINATOR_DIR.into(),
        timing: dev_timing(),
        secret: None,
    };
    let serve =
        start_coordinator_on(rt.clone(), config, listener).context("the embedded coordinator could not start")?;
    monoio::spawn(serve);
    tracing::debug!(%addr, "embedded coordinator listening");
    Ok(addr)
}

/// Waits until the broker sees itself registered and holding the controller office, and leads
/// every partition assigned to it: from then on clients can create topics, produce and consume.
/// Partitions still without a leader after the timeout are named in a warning and dev serves
/// anyway (the others work); a broker that never registered is an error.
async fn wait_ready(rt: &RealRuntime, broker: &SharedBroker, me: BrokerId) -> anyhow::Result<()> {
    let deadline = rt.monotonic_ms().saturating_add(READY_TIMEOUT_MS);
    loop {
        let (registered, unled) = {
            let b = broker.borrow();
            match b.cluster_view() {
                Some(v) if v.controller == Some(me) && v.brokers.iter().any(|r| r.id == me) => {
                    let unled: Vec<String> = v
                        .topics
                        .iter()
                        .flat_map(|(name, (record, _))| {
                            record
                                .assignment
                                .iter()
                                .filter(|(_, replicas)| replicas.contains(&me))
                                .map(move |(p, _)| (name, *p))
                        })
                        .filter(|(name, p)| !b.replica_state(name, *p).is_some_and(|r| r.2))
                        .map(|(name, p)| format!("{name}-{p}"))
                        .collect();
                    (true, unled)
                }
                _ => (false, Vec::new()),
            }
        };
        if registered && unled.is_empty() {
            return Ok(());
        }
        if rt.monotonic_ms() >= deadline {
            if !registered {
                bail!("the broker did not register with the embedded coordinator within {READY_TIMEOUT_MS} ms");
            }
            tracing::warn!(partitions = ?unled, "not led yet after {READY_TIMEOUT_MS} ms; serving the others");
            return Ok(());
        }
        rt.sleep(Duration::from_millis(2)).await;
    }
}

/// Whether the topics on disk must be registered in the coordinator: an adoption was under way,
/// or the directory holds partitions but no coordinator state (written by the broker-only dev).
/// Writes the marker before the coordinator creates its directory. Refuses a directory whose old
/// local offsets store holds commits, which this version cannot carry over.
fn adoption_needed(disk: &mut FsDisk, shown: &std::path::Path) -> anyhow::Result<bool> {
    if disk.exists(ADOPT_MARKER) {
        return Ok(true);
    }
    let top = disk.list("").context("listing the data directory")?;
    let coordinator_state = !disk
        .list(COORDINATOR_DIR)
        .context("listing the coordinator's directory")?
        .is_empty();
    if coordinator_state {
        return Ok(false);
    }
    if !disk
        .list(OFFSETS_TOPIC)
        .context("listing the old offsets store")?
        .is_empty()
    {
        bail!(
            "{} was written by an older `gregor dev` and holds committed consumer offsets in {}/{OFFSETS_TOPIC}, \
             which this version cannot carry over; run the older gregor to finish with them, or start with a \
             new --data-dir (moving {OFFSETS_TOPIC} aside keeps the topics and drops the commits)",
            shown.display(),
            shown.display()
        );
    }
    let partitions = top
        .iter()
        .any(|name| gregor_core::broker::topic::parse_partition_dir(name).is_some());
    if !partitions {
        return Ok(false);
    }
    disk.write_file_atomic(
        ADOPT_MARKER,
        b"topics of a broker-only data directory are being registered\n",
    )
    .context("writing the adoption marker")?;
    tracing::info!("data directory written by a broker-only gregor dev: registering its topics with the coordinator");
    Ok(true)
}

/// One topic found on disk, as it is registered.
struct Found {
    name: String,
    record: TopicRecord,
    epochs: Vec<(i32, LeaderEpoch)>,
}

/// Registers every topic on disk in the coordinator with its id, partitions and configs, led by
/// this broker; a topic already registered with the same id counts as done (a resumed adoption).
async fn adopt_topics(rt: &RealRuntime, coordinator: &str, config: &NodeConfig) -> anyhow::Result<()> {
    let me = config.broker.broker_id;
    let found = {
        let mut broker_config = config.broker.clone();
        broker_config.group.coordination = Coordination::partitioned_default();
        let now = rt.now_ms();
        let broker = rt
            .with_disk(|disk| Broker::open(disk, broker_config, now))
            .context("reading the topics to adopt")?;
        broker
            .topics()
            .iter()
            .map(|(name, meta)| Found {
                name: name.clone(),
                record: TopicRecord {
                    topic_id_hex: meta.id.to_hex(),
                    assignment: (0..meta.partitions).map(|p| (p, vec![me])).collect(),
                    reassigning: Default::default(),
                    configs: meta.overrides.clone(),
                },
                epochs: (0..meta.partitions)
                    .map(|p| {
                        let epoch = broker.log(name, p).and_then(|l| l.latest_epoch()).unwrap_or_default();
                        (p, epoch)
                    })
                    .collect(),
            })
            .collect::<Vec<_>>()
    };
    let client = CoordClient::connect(rt.clone(), CoordClientConfig::new(vec![coordinator.to_string()]))
        .await
        .map_err(|e| anyhow::anyhow!("adoption: no session with the embedded coordinator: {e}"))?;
    for path in BOOTSTRAP_PATHS {
        match client.create(path, &[], CreateMode::Persistent).await {
            Ok(_) | Err(CoordError::Tree(TreeError::NodeExists)) => {}
            Err(e) => bail!("adoption: creating {path}: {e}"),
        }
    }
    for t in &found {
        let persistent = |path: String, data: Vec<u8>| Op::Create {
            path,
            data,
            mode: CreateMode::Persistent,
        };
        let mut ops = vec![
            persistent(topic_path(&t.name), t.record.encode()),
            persistent(partitions_path(&t.name), Vec::new()),
        ];
        for &(p, epoch) in &t.epochs {
            let state = PartitionState {
                leader: Some(me),
                leader_epoch: epoch,
                isr: vec![me],
                controller_epoch: 0,
                elr: Vec::new(),
            };
            ops.push(persistent(partition_path(&t.name, p), Vec::new()));
            ops.push(persistent(partition_state_path(&t.name, p), state.encode()));
        }
        match client.multi(ops).await {
            Ok(_) => {
                tracing::info!(topic = %t.name, partitions = t.epochs.len(), id = %t.record.topic_id_hex, "adopted topic");
            }
            Err(CoordError::MultiFailed {
                index: 0,
                error: TreeError::NodeExists,
            }) => {
                let (data, _) = client
                    .get(&topic_path(&t.name), false, true)
                    .await
                    .map_err(|e| anyhow::anyhow!("adoption: reading topic {}: {e}", t.name))?;
                let registered = TopicRecord::decode(&data).map(|r| r.topic_id_hex);
                if registered.as_deref() != Some(t.record.topic_id_hex.as_str()) {
                    bail!(
                        "adoption: topic {} is registered with id {registered:?}, but its partitions on disk have id {}",
                        t.name,
                        t.record.topic_id_hex
                    );
                }
            }
            Err(e) => bail!("adoption: registering topic {}: {e}", t.name),
        }
    }
    // Best effort: an unclosed session expires at the coordinator's next start anyway.
    let _ = client.close().await;
    rt.with_disk(|disk| disk.remove(ADOPT_MARKER))
        .context("removing the adoption marker")?;
    tracing::info!(topics = found.len(), "adoption done: every topic on disk is registered");
    Ok(())
}
