//! `gregor coordinator` and `gregor broker`: the processes of a replicated cluster, running the
//! same core the simulator runs (`gregor_core::coord::server`, `gregor_core::node::cluster`).
//!
//! A cluster is N coordinator processes (a Raft quorum holding the ZooKeeper-like tree; 3 is the
//! default size, 1 works) and any number of brokers pointed at them. Each process owns its data
//! directory (an exclusive lock), logs to stderr (`RUST_LOG`, default `info`) and prints one
//! `gregor <kind> <id>: listening on HOST:PORT` line on stdout once it serves. SIGTERM, SIGINT
//! or SIGHUP stop it (a broker flushes every partition first); SIGKILL is a crash, recovered at
//! the next start by the log's and Raft's CRC scans.

use std::cell::RefCell;
use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;

use anyhow::{bail, Context};
use clap::Args;
use gregor_core::consensus::NodeId;
use gregor_core::coord::server::{start_coordinator, CoordNodeConfig, CoordTiming};
use gregor_core::node::cluster::{start_cluster_broker, ClusterConfig};
use gregor_core::node::NodeConfig;
use gregor_core::runtime::Runtime;
use gregor_core::BrokerId;

use crate::data_dir::DataDirLock;
use crate::runtime::{self, RealRuntime};
use crate::FsDisk;

#[derive(Args, Debug)]
pub struct CoordinatorArgs {
    /// This node's id (1, 2, 3, ...), one of `--peers`.
    #[arg(long)]
    pub id: u64,
    /// Every coordinator of the quorum as `id=host:port`, comma-separated, this one included.
    #[arg(long, value_delimiter = ',')]
    pub peers: Vec<String>,
    /// Data directory (created if missing; one process at a time).
    #[arg(long)]
    pub data_dir: PathBuf,
}

#[derive(Args, Debug)]
pub struct BrokerArgs {
    /// This broker's id (`broker.id`), unique in the cluster.
    #[arg(long)]
    pub id: i32,
    /// Address to listen on for Kafka clients and follower fetches.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub listen: String,
    /// Host clients are told to connect to (Metadata); the port is the listening port.
    #[arg(long, default_value = "127.0.0.1")]
    pub advertised_host: String,
    /// The coordinators' addresses (`host:port`), comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub coordinators: Vec<String>,
    /// Data directory (created if missing; one process at a time).
    #[arg(long)]
    pub data_dir: PathBuf,
    /// `zookeeper.session.timeout.ms`: how long after its last heartbeat the cluster counts this
    /// broker dead.
    #[arg(long, default_value_t = 6_000)]
    pub session_timeout_ms: u64,
    /// `replica.lag.time.max.ms`
    #[arg(long, default_value_t = 30_000)]
    pub replica_lag_time_max_ms: i64,
}

fn parse_peers(peers: &[String]) -> anyhow::Result<Vec<(NodeId, String)>> {
    let mut out = Vec::new();
    for p in peers {
        let (id, addr) = p
            .split_once('=')
            .with_context(|| format!("--peers entry {p:?} is not id=host:port"))?;
        let id: u64 = id
            .trim()
            .parse()
            .with_context(|| format!("--peers entry {p:?}: {id:?} is not a node id"))?;
        if id == 0 {
            bail!("--peers entry {p:?}: node ids start at 1");
        }
        if out.iter().any(|(n, _): &(NodeId, String)| n.0 == id) {
            bail!("--peers names node {id} twice");
        }
        out.push((NodeId(id), addr.trim().to_string()));
    }
    if out.is_empty() {
        bail!("--peers is empty: name every coordinator, this one included");
    }
    Ok(out)
}

fn explicit_port(listen: &str, flag: &str) -> anyhow::Result<u16> {
    let addr = listen
        .to_socket_addrs()
        .with_context(|| format!("{flag} {listen:?} is not a host:port address"))?
        .next()
        .with_context(|| format!("{flag} {listen:?} resolves to no address"))?;
    if addr.port() == 0 {
        bail!("{flag} needs an explicit port: peers and clients are told it");
    }
    Ok(addr.port())
}

fn open(data_dir: &PathBuf) -> anyhow::Result<(RealRuntime, DataDirLock)> {
    let disk = FsDisk::open(data_dir).with_context(|| format!("cannot open data directory {}", data_dir.display()))?;
    let lock = DataDirLock::acquire(data_dir)?;
    Ok((
        RealRuntime::new(Rc::new(RefCell::new(disk)), runtime::entropy_seed()),
        lock,
    ))
}

pub fn coordinator(args: CoordinatorArgs) -> anyhow::Result<ExitCode> {
    let peers = parse_peers(&args.peers)?;
    let listen = peers
        .iter()
        .find(|(id, _)| id.0 == args.id)
        .map(|(_, addr)| addr.clone())
        .with_context(|| format!("--id {} is not one of --peers", args.id))?;
    explicit_port(&listen, "--peers")?;
    let (rt, lock) = open(&args.data_dir)?;
    let config = CoordNodeConfig {
        id: NodeId(args.id),
        peers,
        listen: listen.clone(),
        dir: "coordinator".into(),
        timing: CoordTiming::default(),
    };
    let id = args.id;
    runtime::block_on(async move {
        let shutdown = monoio::utils::CtrlC::new().context("cannot install the SIGTERM/SIGINT handler")?;
        let serve = start_coordinator(rt, config).context("the coordinator could not start")?;
        println!("gregor coordinator {id}: listening on {listen}");
        monoio::spawn(serve);
        shutdown.await;
        tracing::info!("signal received: exiting");
        anyhow::Ok(())
    })
    .context("cannot start the I/O runtime")??;
    drop(lock);
    Ok(ExitCode::SUCCESS)
}

pub fn broker(args: BrokerArgs) -> anyhow::Result<ExitCode> {
    if args.coordinators.is_empty() {
        bail!("--coordinators is empty: name at least one coordinator address");
    }
    let port = explicit_port(&args.listen, "--listen")?;
    let (rt, lock) = open(&args.data_dir)?;
    let mut config = NodeConfig::single_node(&args.listen, &args.advertised_host, i32::from(port), "gregor");
    config.broker.broker_id = BrokerId(args.id);
    config.broker.replica_lag_time_max_ms = args.replica_lag_time_max_ms;
    let rt = rt.with_frame_bytes_max(config.limits.request_bytes_max as u64);
    let mut cluster = ClusterConfig::new(args.coordinators.clone());
    cluster.session_timeout_ms = args.session_timeout_ms;
    let (id, listen) = (args.id, args.listen.clone());
    let code = runtime::block_on(async move {
        let shutdown = monoio::utils::CtrlC::new().context("cannot install the SIGTERM/SIGINT handler")?;
        let (broker, accept_loop) = start_cluster_broker(rt.clone(), config, cluster).await?;
        println!("gregor broker {id}: listening on {listen}");
        monoio::spawn(accept_loop);
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
    drop(lock);
    Ok(code)
}
