//! `gregor`: the broker binary. `gregor dev` runs a single-node cluster on one thread (monoio,
//! io_uring) over a data directory; `topics`, `produce`, `consume` and `perf` are clients
//! (`gregor_realnet::cli`) on core's own Kafka client.
//!
//! Contract of `gregor dev`: it owns its data directory (an exclusive lock on `.lock`; a second
//! instance exits with an error naming the directory), keeps the cluster id in `cluster.id`
//! across restarts, prints exactly one `gregor dev: listening on HOST:PORT ...` line on stdout
//! once clients can connect, and logs to stderr (`RUST_LOG`, default `info`). On SIGTERM, SIGINT
//! or SIGHUP it stops accepting work, flushes (fsyncs) every partition and exits 0; if a flush
//! fails it exits 1, so an operator knows the last writes may not be durable. Startup errors
//! (lock held, port in use, unreadable data) exit 1 with one line saying what is wrong.
//!
//! Fault model: a crash (SIGKILL, power loss) skips the final flush; what was not synced before
//! is subject to the disk model's crash rules and recovered by the log's CRC scan at next start.

use std::cell::RefCell;
use std::net::ToSocketAddrs;
use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use gregor_core::node::{start_broker, NodeConfig};
use gregor_core::runtime::Runtime;
use gregor_realnet::cli;
use gregor_realnet::data_dir::{self, DataDirLock};
use gregor_realnet::runtime::{self, RealRuntime};
use gregor_realnet::FsDisk;

#[derive(Parser, Debug)]
#[command(name = "gregor", version, about = "Gregor: a Kafka-design message broker")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Runs a single-node broker for development.
    Dev(DevArgs),
    /// Runs one node of the coordinator quorum of a replicated cluster.
    Coordinator(gregor_realnet::cluster_cmd::CoordinatorArgs),
    /// Runs one broker of a replicated cluster.
    Broker(gregor_realnet::cluster_cmd::BrokerArgs),
    /// Creates, lists, describes and deletes topics.
    Topics {
        #[command(flatten)]
        connect: cli::ConnectArgs,
        #[command(subcommand)]
        command: cli::topics::TopicsCommand,
    },
    /// Produces one record per line of standard input.
    Produce {
        #[command(flatten)]
        connect: cli::ConnectArgs,
        #[command(flatten)]
        args: cli::produce::ProduceArgs,
    },
    /// Prints the values of a topic's records, one a line.
    Consume {
        #[command(flatten)]
        connect: cli::ConnectArgs,
        #[command(flatten)]
        args: cli::consume::ConsumeArgs,
    },
    /// Lists consumer groups and describes one: offsets, lag and owners per partition.
    Groups {
        #[command(flatten)]
        connect: cli::ConnectArgs,
        #[command(subcommand)]
        command: cli::groups::GroupsCommand,
    },
    /// Moves partitions between brokers (reassign) and shows the moves in progress (status).
    Partitions {
        #[command(flatten)]
        connect: cli::ConnectArgs,
        #[command(subcommand)]
        command: cli::partitions::PartitionsCommand,
    },
    /// Lists the brokers; decommissions one (moves its replicas away first).
    Brokers {
        #[command(flatten)]
        connect: cli::ConnectArgs,
        #[command(subcommand)]
        command: cli::partitions::BrokersCommand,
    },
    /// Bounded load from Gregor's client: records/s, MB/s, latency percentiles.
    Perf {
        #[command(subcommand)]
        command: cli::perf::PerfCommand,
    },
}

#[derive(clap::Args, Debug)]
struct DevArgs {
    /// Data directory (created if missing; one process at a time).
    #[arg(long, default_value = "./gregor-data")]
    data_dir: PathBuf,
    /// Address to listen on for Kafka clients.
    #[arg(long, default_value = "127.0.0.1:9092")]
    listen: String,
    /// Host clients are told to connect to (Metadata); the port is the listening port.
    #[arg(long, default_value = "127.0.0.1")]
    advertised_host: String,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A client's stderr is for its errors; a broker logs what it does.
    init_logging(
        if matches!(
            cli.command,
            Command::Dev(_) | Command::Coordinator(_) | Command::Broker(_)
        ) {
            "info"
        } else {
            "warn"
        },
    );
    let result = match cli.command {
        Command::Dev(args) => dev(args),
        Command::Coordinator(args) => gregor_realnet::cluster_cmd::coordinator(args),
        Command::Broker(args) => gregor_realnet::cluster_cmd::broker(args),
        Command::Topics { connect, command } => cli::topics::run(&connect, command).map(|()| ExitCode::SUCCESS),
        Command::Produce { connect, args } => cli::produce::run(&connect, args).map(|()| ExitCode::SUCCESS),
        Command::Consume { connect, args } => cli::consume::run(&connect, args).map(|()| ExitCode::SUCCESS),
        Command::Groups { connect, command } => cli::groups::run(&connect, command).map(|()| ExitCode::SUCCESS),
        Command::Partitions { connect, command } => {
            cli::partitions::run_partitions(&connect, command).map(|()| ExitCode::SUCCESS)
        }
        Command::Brokers { connect, command } => {
            cli::partitions::run_brokers(&connect, command).map(|()| ExitCode::SUCCESS)
        }
        Command::Perf { command } => cli::perf::run(command).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("gregor: error: {}", error_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// One line for an error and its causes, leaving out a cause whose text its parent already
/// quotes (core's error enums print their source inside their own message).
fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
    }
    line
}

fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn dev(args: DevArgs) -> anyhow::Result<ExitCode> {
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
    let rt = RealRuntime::new(Rc::new(RefCell::new(disk)), runtime::entropy_seed());
    let cluster_id = data_dir::cluster_id(&mut rt.disk().borrow_mut(), || {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&rt.random_u64().to_le_bytes());
        bytes[8..].copy_from_slice(&rt.random_u64().to_le_bytes());
        data_dir::format_cluster_id(bytes)
    })?;
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
        let (broker, accept_loop) = start_broker(rt.clone(), config).await?;
        println!(
            "gregor dev: listening on {} (cluster {cluster_id}, data {}, {driver})",
            args.listen,
            args.data_dir.display()
        );
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
    tracing::info!(lock = %lock.path().display(), "stopped; releasing the data directory");
    drop(lock);
    Ok(code)
}
