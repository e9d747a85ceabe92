//! `gregor`: the broker binary. `gregor dev` runs a single-node cluster on one thread (monoio,
//! io_uring) over a data directory; `topics`, `produce`, `consume` and `perf` are clients
//! (`gregor_realnet::cli`) on core's own Kafka client.
//!
//! The contract of `gregor dev` is in `gregor_realnet::dev`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gregor_realnet::cli;

#[derive(Parser, Debug)]
#[command(name = "gregor", version, about = "Gregor: a Kafka-design message broker")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Runs a single-node cluster (coordinator and broker in one process) for development.
    Dev(gregor_realnet::dev::DevArgs),
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
    /// Adds, lists and removes ACLs (as kafka-acls.sh).
    Acls {
        #[command(flatten)]
        connect: cli::ConnectArgs,
        #[command(subcommand)]
        command: cli::acls::AclsCommand,
    },
    /// Adds, deletes and lists SCRAM users (stored in the coordinator).
    Users {
        #[command(flatten)]
        connect: cli::ConnectArgs,
        #[command(subcommand)]
        command: cli::users::UsersCommand,
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
    /// Lists the coordinator quorum's members; adds or removes one (talks to the coordinators).
    Coordinators(cli::coordinators::CoordinatorsArgs),
    /// Bounded load from Gregor's client: records/s, MB/s, latency percentiles.
    Perf {
        #[command(subcommand)]
        command: cli::perf::PerfCommand,
    },
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
        Command::Dev(args) => gregor_realnet::dev::run(args),
        Command::Coordinator(args) => gregor_realnet::cluster_cmd::coordinator(args),
        Command::Broker(args) => gregor_realnet::cluster_cmd::broker(args),
        Command::Topics { connect, command } => cli::topics::run(&connect, command).map(|()| ExitCode::SUCCESS),
        Command::Acls { connect, command } => cli::acls::run(&connect, command).map(|()| ExitCode::SUCCESS),
        Command::Users { connect, command } => cli::users::run(&connect, command).map(|()| ExitCode::SUCCESS),
        Command::Produce { connect, args } => cli::produce::run(&connect, args).map(|()| ExitCode::SUCCESS),
        Command::Consume { connect, args } => cli::consume::run(&connect, args).map(|()| ExitCode::SUCCESS),
        Command::Groups { connect, command } => cli::groups::run(&connect, command).map(|()| ExitCode::SUCCESS),
        Command::Partitions { connect, command } => {
            cli::partitions::run_partitions(&connect, command).map(|()| ExitCode::SUCCESS)
        }
        Command::Brokers { connect, command } => {
            cli::partitions::run_brokers(&connect, command).map(|()| ExitCode::SUCCESS)
        }
        Command::Coordinators(args) => cli::coordinators::run(args).map(|()| ExitCode::SUCCESS),
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
