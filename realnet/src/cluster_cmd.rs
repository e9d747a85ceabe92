//! `gregor coordinator` and `gregor broker`: the processes of a replicated cluster, running the
//! same core the simulator runs (`gregor_core::coord::server`, `gregor_core::node::cluster`).
//!
//! A cluster is N coordinator processes (a Raft quorum holding the ZooKeeper-like tree; 3 is the
//! default size, 1 works) and any number of brokers pointed at them. Each process owns its data
//! directory (an exclusive lock), logs to stderr (`RUST_LOG`, default `info`) and prints one
//! `gregor <kind> <id>: listening on HOST:PORT` line on stdout once it serves. SIGTERM, SIGINT
//! or SIGHUP stop it; SIGKILL is a crash, recovered at the next start by the log's and Raft's
//! CRC scans. A broker stops with Kafka's controlled shutdown: it deregisters, waits (at most
//! `--controlled-shutdown-timeout-ms`) until the controller has moved the leadership of its
//! partitions to other ISR members and removed it from the ISRs, prints what it saw
//! (`gregor broker <id>: controlled shutdown: ...`, then one line per partition), flushes every
//! partition and exits.

use std::cell::RefCell;
use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;

use anyhow::{bail, Context};
use clap::Args;
use gregor_core::consensus::NodeId;
use gregor_core::coord::server::{start_coordinator, CoordNodeConfig, CoordTiming};
use gregor_core::group::Coordination;
use gregor_core::node::authz::NodeAcls;
use gregor_core::node::cluster::{hand_off, start_cluster_broker, ClusterConfig, HandOff};
use gregor_core::node::NodeConfig;
use gregor_core::runtime::Runtime;
use gregor_core::security::acl::{Authorizer, AuthorizerConfig};
use gregor_core::BrokerId;

use crate::data_dir::DataDirLock;
use crate::runtime::{self, RealRuntime};
use crate::server_config::{
    coordinator_secret, inter_broker_credentials, listener, sasl_config, tls_settings, ServerConfig, BROKER_KEYS,
    COORDINATOR_KEYS,
};
use crate::FsDisk;
use gregor_core::security::SecurityProtocol;

/// Flags override the `--config` file's keys (see `server_config` for the key names).
#[derive(Args, Debug)]
pub struct CoordinatorArgs {
    /// A TOML file with server.properties keys: `node.id`, `controller.quorum.voters`, `log.dirs`.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// This node's id (1, 2, 3, ...), one of `--peers` (`node.id`).
    #[arg(long)]
    pub id: Option<u64>,
    /// Every coordinator of the quorum as `id=host:port`, comma-separated, this one included
    /// (`controller.quorum.voters`, written `id@host:port`).
    #[arg(long, value_delimiter = ',')]
    pub peers: Vec<String>,
    /// Data directory, created if missing; one process at a time (`log.dirs`).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// This node joins a running quorum: it starts outside the voters (`--peers` then names the
    /// current members and this node) and waits, never campaigning, until `gregor coordinators
    /// add` adds it. Once a membership change is in its log, the log rules and the flag is moot.
    #[arg(long)]
    pub join: bool,
    /// A file holding the cluster secret that brokers and the other coordinators must prove
    /// before this coordinator serves them (`coordinator.auth.secret.file`; unset: anyone may
    /// connect, with a warning).
    #[arg(long)]
    pub coordinator_auth_secret_file: Option<PathBuf>,
}

/// Flags override the `--config` file's keys (see `server_config` for the key names).
#[derive(Args, Debug)]
pub struct BrokerArgs {
    /// A TOML file with server.properties keys (`broker.id`, `listeners`, `log.dirs`,
    /// `zookeeper.connect`, `min.insync.replicas`, `log.retention.ms`, ...).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// This broker's id, unique in the cluster (`broker.id`).
    #[arg(long)]
    pub id: Option<i32>,
    /// Address to listen on for Kafka clients and follower fetches (`listeners`; default
    /// 127.0.0.1:9092).
    #[arg(long)]
    pub listen: Option<String>,
    /// Host clients are told to connect to; the port is the listening port
    /// (`advertised.host.name`; default 127.0.0.1).
    #[arg(long)]
    pub advertised_host: Option<String>,
    /// The coordinators' addresses (`host:port`), comma-separated (`zookeeper.connect`).
    #[arg(long, value_delimiter = ',')]
    pub coordinators: Vec<String>,
    /// Data directory, created if missing; one process at a time (`log.dirs`).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// How long after its last heartbeat the cluster counts this broker dead
    /// (`zookeeper.session.timeout.ms`; default 6000).
    #[arg(long)]
    pub session_timeout_ms: Option<u64>,
    /// `replica.lag.time.max.ms` (default 30000).
    #[arg(long)]
    pub replica_lag_time_max_ms: Option<i64>,
    /// `follower.replication.throttled.rate`: bytes per second this broker fetches for the
    /// partitions a reassignment is adding it to (unset: unthrottled; the server.properties key
    /// of the same name also sets it).
    #[arg(long)]
    pub follower_replication_throttled_rate: Option<u64>,
    /// `leader.replication.throttled.rate`: bytes per second this broker, as leader, serves to
    /// the replicas a reassignment is adding that are not in the ISR yet (unset: unthrottled;
    /// the server.properties key of the same name also sets it).
    #[arg(long)]
    pub leader_replication_throttled_rate: Option<u64>,
    /// A file holding the cluster secret this broker proves to the coordinators
    /// (`coordinator.auth.secret.file`; needed when they have one).
    #[arg(long)]
    pub coordinator_auth_secret_file: Option<PathBuf>,
    /// On SIGTERM, how long to wait for the leadership hand-off before flushing and exiting
    /// anyway (0: exit without handing off).
    #[arg(long, default_value_t = 10_000)]
    pub controlled_shutdown_timeout_ms: u64,
}

fn load(config: &Option<PathBuf>, keys: &[&str]) -> anyhow::Result<ServerConfig> {
    match config {
        Some(path) => ServerConfig::load(path, keys),
        None => Ok(ServerConfig::default()),
    }
}

fn parse_peers(peers: &[String]) -> anyhow::Result<Vec<(NodeId, String)>> {
    let mut out = Vec::new();
    for p in peers {
        let (NodeId(id), addr) = crate::cli::coordinators::parse_node(p).context("--peers entry")?;
        if out.iter().any(|(n, _): &(NodeId, String)| n.0 == id) {
            bail!("--peers names node {id} twice");
        }
        out.push((NodeId(id), addr));
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
    let file = load(&args.config, COORDINATOR_KEYS)?;
    let peers = if args.peers.is_empty() {
        let voters = file.text("controller.quorum.voters").unwrap_or_default();
        let as_flags: Vec<String> = voters
            .split(',')
            .filter(|v| !v.trim().is_empty())
            .map(|v| v.replacen('@', "=", 1))
            .collect();
        parse_peers(&as_flags).context("controller.quorum.voters (or --peers)")?
    } else {
        parse_peers(&args.peers)?
    };
    let id = match args.id {
        Some(id) => id,
        None => file.number("node.id")?.context("give --id or node.id")?,
    };
    let data_dir = args
        .data_dir
        .or_else(|| file.text("log.dirs").map(PathBuf::from))
        .context("give --data-dir or log.dirs")?;
    let listen = peers
        .iter()
        .find(|(n, _)| n.0 == id)
        .map(|(_, addr)| addr.clone())
        .with_context(|| format!("node {id} is not one of --peers"))?;
    if args.join && peers.len() < 2 {
        bail!("--join needs --peers to name the running quorum's members as well as this node");
    }
    explicit_port(&listen, "--peers")?;
    let secret = coordinator_secret(args.coordinator_auth_secret_file.as_deref(), &file)?;
    let (rt, lock) = open(&data_dir)?;
    let config = CoordNodeConfig {
        id: NodeId(id),
        voters: args
            .join
            .then(|| peers.iter().map(|(n, _)| *n).filter(|n| n.0 != id).collect()),
        peers,
        listen: listen.clone(),
        dir: "coordinator".into(),
        timing: CoordTiming::default(),
        secret,
    };
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
    let file = load(&args.config, BROKER_KEYS)?;
    let id = match args.id {
        Some(id) => id,
        None => file.number("broker.id")?.context("give --id or broker.id")?,
    };
    let map = file.text("listener.security.protocol.map");
    let (listen, protocol) = match (args.listen, file.text("listeners")) {
        (Some(l), _) => listener(&l, map)?,
        (None, Some(l)) => listener(l, map)?,
        (None, None) => ("127.0.0.1:9092".to_string(), SecurityProtocol::Plaintext),
    };
    let advertised_host = args
        .advertised_host
        .or_else(|| file.text("advertised.host.name").map(str::to_string))
        .unwrap_or_else(|| "127.0.0.1".to_string());
    let coordinators: Vec<String> = if args.coordinators.is_empty() {
        file.text("zookeeper.connect")
            .unwrap_or_default()
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    } else {
        args.coordinators
    };
    if coordinators.is_empty() {
        bail!("no coordinators: give --coordinators or zookeeper.connect");
    }
    let data_dir = args
        .data_dir
        .or_else(|| file.text("log.dirs").map(PathBuf::from))
        .context("give --data-dir or log.dirs")?;
    let port = explicit_port(&listen, "--listen")?;
    let mut config = NodeConfig::single_node(&listen, &advertised_host, i32::from(port), "gregor");
    config.broker.broker_id = BrokerId(id);
    config.fetch_zero_copy = runtime::fetch_zero_copy_from_env();
    config.leader_throttle = match args.leader_replication_throttled_rate {
        Some(rate) => Some(rate),
        None => file.number("leader.replication.throttled.rate")?,
    }
    .filter(|&rate| rate > 0)
    .map(|rate| Rc::new(RefCell::new(gregor_core::node::throttle::Throttle::new(rate))));
    if protocol.uses_sasl() {
        config.sasl = Some(Rc::new(sasl_config(&file)?));
    }
    config.broker.replica_lag_time_max_ms = match args.replica_lag_time_max_ms {
        Some(ms) => ms,
        None => file.number("replica.lag.time.max.ms")?.unwrap_or(30_000),
    };
    if let Some(n) = file.number("min.insync.replicas")? {
        config.broker.min_insync_replicas = n;
    }
    if let Some(n) = file.number("num.partitions")? {
        config.broker.num_partitions = n;
    }
    for (key, value) in file.log_overrides() {
        config
            .broker
            .log
            .apply(key, value)
            .map_err(|why| anyhow::anyhow!("{}: log.{key}: {why}", file.file))?;
    }
    // Kafka's authorizer settings: any authorizer.class.name turns the ACL checks on.
    if file.text("authorizer.class.name").is_some_and(|c| !c.trim().is_empty()) {
        let allow_everyone = match file.text("allow.everyone.if.no.acl.found").map(str::trim) {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => bail!(
                "{}: allow.everyone.if.no.acl.found must be true or false, not {other:?}",
                file.file
            ),
        };
        config.acls = Some(NodeAcls::new(Authorizer::new(AuthorizerConfig {
            super_users: AuthorizerConfig::parse_super_users(file.text("super.users").unwrap_or("")),
            allow_everyone_if_no_acl_found: allow_everyone,
        })));
    }
    let session_timeout_ms = match args.session_timeout_ms {
        Some(ms) => ms,
        None => file.number("zookeeper.session.timeout.ms")?.unwrap_or(6_000),
    };
    // Before the data directory is touched: a bad certificate or key fails startup at once.
    let tls = tls_settings(&file, protocol, &coordinators)?;
    let (rt, lock) = open(&data_dir)?;
    let mut rt = rt.with_frame_bytes_max(config.limits.request_bytes_max as u64);
    if let Some(tls) = tls {
        rt = rt.with_tls(tls);
    }
    let mut cluster = ClusterConfig::new(coordinators);
    cluster.session_timeout_ms = session_timeout_ms;
    cluster.inter_broker_sasl = inter_broker_credentials(&file);
    cluster.coordinator_secret = coordinator_secret(args.coordinator_auth_secret_file.as_deref(), &file)?;
    cluster.follower_throttled_rate_bytes_per_s = match args.follower_replication_throttled_rate {
        Some(rate) => Some(rate),
        None => file.number("follower.replication.throttled.rate")?,
    }
    .filter(|&rate| rate > 0);
    if protocol.uses_sasl() && cluster.inter_broker_sasl.is_none() {
        tracing::warn!("SASL listener without sasl.inter.broker.username/password: followers cannot fetch from this broker's peers");
    }
    // The controller balances replicas over the live brokers itself when they change (a broker
    // joins, a decommissioned one stops); off unless set.
    let auto_rebalance: bool = file.number("auto.rebalance.enable")?.unwrap_or(false);
    cluster.controller.auto_rebalance = auto_rebalance;
    // Kafka's default is true; off unless set, so a returning broker takes its leaderships back
    // only when asked (`auto.leader.rebalance.enable = true`, or ElectLeaders). On by default
    // with `auto.rebalance.enable`: the planner's leader moves take effect through it.
    cluster.controller.auto_leader_rebalance = file.number("auto.leader.rebalance.enable")?.unwrap_or(auto_rebalance);
    // Kafka's defaults (10%, every 300 s) unless set.
    if let Some(percentage) = file.number("leader.imbalance.per.broker.percentage")? {
        cluster.controller.leader_imbalance_per_broker_percentage = percentage;
    }
    if let Some(interval_s) = file.number::<u64>("leader.imbalance.check.interval.seconds")? {
        if interval_s < 1 {
            bail!(
                "{}: leader.imbalance.check.interval.seconds must be at least 1",
                file.file
            );
        }
        cluster.controller.leader_imbalance_check_interval_ms = interval_s.saturating_mul(1_000);
    }
    // Kafka's defaults: 50 partitions, replication factor 3 (capped at the live brokers when the
    // topic is created on the first FindCoordinator).
    let offsets_partitions: i32 = file.number("offsets.topic.num.partitions")?.unwrap_or(50);
    let offsets_rf: i16 = file.number("offsets.topic.replication.factor")?.unwrap_or(3);
    if !(1..=1_000).contains(&offsets_partitions) || offsets_rf < 1 {
        bail!(
            "{}: offsets.topic.num.partitions must be 1 to 1000 and offsets.topic.replication.factor at least 1",
            file.file
        );
    }
    cluster.group_coordination = Coordination::Partitioned {
        partitions: offsets_partitions,
        replication_factor: offsets_rf,
    };
    let controlled = cluster.shutdown.clone();
    let hand_off_ms = args.controlled_shutdown_timeout_ms;
    let code = runtime::block_on(async move {
        let shutdown = monoio::utils::CtrlC::new().context("cannot install the SIGTERM/SIGINT handler")?;
        let (broker, accept_loop) = start_cluster_broker(rt.clone(), config, cluster).await?;
        println!("gregor broker {id}: listening on {listen}");
        monoio::spawn(accept_loop);
        shutdown.await;
        if hand_off_ms > 0 {
            tracing::info!("signal received: controlled shutdown (handing off leadership)");
            let result = hand_off(&rt, &broker, &controlled, hand_off_ms).await;
            report_hand_off(id, &result);
        }
        tracing::info!("flushing every partition, then exiting");
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

/// Prints (stdout, for operators and tests) and logs what the controlled shutdown achieved.
fn report_hand_off(id: i32, r: &HandOff) {
    let outcome = if r.is_done() { "handed off" } else { "timed out" };
    let names = |v: &[(String, i32)]| v.iter().map(|(t, p)| format!("{t}-{p}")).collect::<Vec<_>>();
    println!(
        "gregor broker {id}: controlled shutdown: {outcome}; deregistered {}, still leading {:?}, still in ISR of {:?}, sole replica of {:?}",
        r.deregistered,
        names(&r.still_leading),
        names(&r.still_in_isr),
        names(&r.sole_replica),
    );
    for (topic, p, leader, isr) in &r.states {
        let isr: Vec<i32> = isr.iter().map(|b| b.0).collect();
        println!(
            "gregor broker {id}: controlled shutdown: {topic}-{p} leader {} isr {isr:?}",
            leader.map_or(-1, |l| l.0)
        );
    }
    if r.is_done() {
        tracing::info!(
            broker = id,
            "controlled shutdown: leadership handed off, out of every ISR"
        );
    } else {
        tracing::warn!(broker = id, still_leading = ?r.still_leading, still_in_isr = ?r.still_in_isr,
            "controlled shutdown timed out; exiting anyway");
    }
}
