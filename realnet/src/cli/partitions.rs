//! `gregor partitions reassign|status` and `gregor brokers list|decommission`: partition
//! reassignment (AlterPartitionReassignments, ListPartitionReassignments, KIP-455) from the
//! command line, as `kafka-reassign-partitions.sh` does it, and a broker's decommission built on
//! it: the moves that empty the broker ([`gregor_core::controller::balance::evacuate`]) are
//! submitted, then the command waits (bounded by `--timeout-ms`) until none is in progress. The
//! broker may be stopped afterwards; its partitions never went below min ISR meanwhile, because
//! a reassignment only shrinks the ISR once every target replica is in it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Subcommand;
use gregor_core::client::{code, Cluster};
use gregor_core::controller::balance;
use gregor_core::protocol::api::alter_partition_reassignments::{
    AlterPartitionReassignmentsRequest, ReassignablePartition, ReassignableTopic,
};
use gregor_core::protocol::api::list_partition_reassignments::{
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};
use gregor_core::protocol::api::metadata::MetadataResponse;
use gregor_core::protocol::{Request, Response};
use gregor_core::runtime::Runtime;
use gregor_core::BrokerId;

use super::{metadata, ConnectArgs};
use crate::runtime::RealRuntime;

pub const ALTER_PARTITION_REASSIGNMENTS_VERSION: i16 = 1;
pub const LIST_PARTITION_REASSIGNMENTS_VERSION: i16 = 0;
/// Moves one decommission submits at most.
const DECOMMISSION_MOVES_MAX: usize = 10_000;

#[derive(Subcommand, Debug)]
pub enum PartitionsCommand {
    /// Moves a partition to a new replica list (or cancels its move in progress).
    Reassign {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
        /// The new replicas, the preferred leader first: broker ids, comma-separated.
        #[arg(long, value_delimiter = ',', required_unless_present = "cancel")]
        replicas: Vec<i32>,
        /// Cancels the reassignment in progress (back to the original replicas).
        #[arg(long, conflicts_with = "replicas")]
        cancel: bool,
    },
    /// Lists the reassignments in progress.
    Status,
}

#[derive(Subcommand, Debug)]
pub enum BrokersCommand {
    /// Lists the registered brokers with their replica and leader counts.
    List,
    /// Moves every replica off a broker, then waits until the moves are done.
    Decommission {
        id: i32,
        /// How long to wait for the moves (they go on in the cluster if this runs out).
        #[arg(long, default_value_t = 300_000)]
        timeout_ms: u64,
    },
}

pub fn run_partitions(connect: &ConnectArgs, command: PartitionsCommand) -> anyhow::Result<()> {
    let rt = super::client_runtime()?;
    let mut cluster = connect.cluster(&rt)?;
    super::run(async move {
        let out = match command {
            PartitionsCommand::Reassign {
                topic,
                partition,
                replicas,
                cancel,
            } => {
                let target = (!cancel).then_some(replicas);
                alter(&mut cluster, &[(topic.clone(), partition, target.clone())], true).await?;
                match target {
                    Some(r) => format!("Reassignment of {topic}-{partition} to {r:?} started.\n"),
                    None => format!("Reassignment of {topic}-{partition} cancelled.\n"),
                }
            }
            PartitionsCommand::Status => status_text(&list(&mut cluster).await?),
        };
        print!("{out}");
        Ok(())
    })
}

pub fn run_brokers(connect: &ConnectArgs, command: BrokersCommand) -> anyhow::Result<()> {
    let rt = super::client_runtime()?;
    let mut cluster = connect.cluster(&rt)?;
    super::run(async move {
        match command {
            BrokersCommand::List => print!("{}", brokers_text(&metadata(&mut cluster, None).await?)),
            BrokersCommand::Decommission { id, timeout_ms } => decommission(&mut cluster, &rt, id, timeout_ms).await?,
        }
        Ok(())
    })
}

/// Submits reassignments: `(topic, partition, replicas or None to cancel)`. Any refused
/// partition makes the whole command fail, naming the code and message.
pub async fn alter(
    cluster: &mut Cluster<RealRuntime>,
    moves: &[(String, i32, Option<Vec<i32>>)],
    allow_replication_factor_change: bool,
) -> anyhow::Result<()> {
    let mut topics: Vec<ReassignableTopic> = Vec::new();
    for (topic, p, replicas) in moves {
        let partition = ReassignablePartition {
            partition_index: *p,
            replicas: replicas.clone(),
        };
        match topics.iter_mut().find(|t| t.name == *topic) {
            Some(t) => t.partitions.push(partition),
            None => topics.push(ReassignableTopic {
                name: topic.clone(),
                partitions: vec![partition],
            }),
        }
    }
    let request = Request::AlterPartitionReassignments(AlterPartitionReassignmentsRequest {
        topics,
        allow_replication_factor_change,
        ..AlterPartitionReassignmentsRequest::default()
    });
    let Response::AlterPartitionReassignments(resp) = cluster
        .call_any(&request, ALTER_PARTITION_REASSIGNMENTS_VERSION)
        .await
        .context("cannot reach the cluster")?
    else {
        bail!("AlterPartitionReassignments answered with another API");
    };
    if resp.error_code != 0 {
        bail!(
            "reassignment refused: {:?}: {}",
            code(resp.error_code),
            resp.error_message.unwrap_or_default()
        );
    }
    let mut refused = Vec::new();
    for t in &resp.responses {
        for p in &t.partitions {
            if p.error_code != 0 {
                refused.push(format!(
                    "{}-{}: {:?}: {}",
                    t.name,
                    p.partition_index,
                    code(p.error_code),
                    p.error_message.as_deref().unwrap_or("")
                ));
            }
        }
    }
    if !refused.is_empty() {
        bail!("reassignment refused: {}", refused.join("; "));
    }
    Ok(())
}

pub async fn list(cluster: &mut Cluster<RealRuntime>) -> anyhow::Result<ListPartitionReassignmentsResponse> {
    let request = Request::ListPartitionReassignments(ListPartitionReassignmentsRequest {
        timeout_ms: 30_000,
        topics: None,
    });
    match cluster
        .call_any(&request, LIST_PARTITION_REASSIGNMENTS_VERSION)
        .await
        .context("cannot reach the cluster")?
    {
        Response::ListPartitionReassignments(r) if r.error_code == 0 => Ok(r),
        Response::ListPartitionReassignments(r) => bail!("status refused: {:?}", code(r.error_code)),
        _ => bail!("ListPartitionReassignments answered with another API"),
    }
}

fn join(ids: &[i32]) -> String {
    ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",")
}

pub fn status_text(resp: &ListPartitionReassignmentsResponse) -> String {
    let mut out = String::new();
    for t in &resp.topics {
        for p in &t.partitions {
            out.push_str(&format!(
                "Topic: {}\tPartition: {}\tReplicas: {}\tAdding: {}\tRemoving: {}\n",
                t.name,
                p.partition_index,
                join(&p.replicas),
                join(&p.adding_replicas),
                join(&p.removing_replicas)
            ));
        }
    }
    if out.is_empty() {
        out.push_str("No partition reassignments in progress.\n");
    }
    out
}

fn placement(meta: &MetadataResponse) -> BTreeMap<balance::PartitionKey, Vec<BrokerId>> {
    let mut out = BTreeMap::new();
    for t in &meta.topics {
        let Some(name) = &t.name else { continue };
        for p in &t.partitions {
            let replicas = p.replica_nodes.iter().map(|&b| BrokerId(b)).collect();
            out.insert((name.clone(), p.partition_index), replicas);
        }
    }
    out
}

pub fn brokers_text(meta: &MetadataResponse) -> String {
    let mut replicas: BTreeMap<i32, usize> = BTreeMap::new();
    let mut leaders: BTreeMap<i32, usize> = BTreeMap::new();
    for t in &meta.topics {
        for p in &t.partitions {
            for r in &p.replica_nodes {
                *replicas.entry(*r).or_default() += 1;
            }
            *leaders.entry(p.leader_id).or_default() += 1;
        }
    }
    let mut brokers = meta.brokers.clone();
    brokers.sort_by_key(|b| b.node_id);
    let mut out = String::new();
    for b in &brokers {
        out.push_str(&format!(
            "Broker: {}\tHost: {}:{}\tController: {}\tReplicas: {}\tLeaders: {}\n",
            b.node_id,
            b.host,
            b.port,
            b.node_id == meta.controller_id,
            replicas.get(&b.node_id).copied().unwrap_or(0),
            leaders.get(&b.node_id).copied().unwrap_or(0)
        ));
    }
    out
}

async fn decommission(
    cluster: &mut Cluster<RealRuntime>,
    rt: &RealRuntime,
    id: i32,
    timeout_ms: u64,
) -> anyhow::Result<()> {
    let meta = metadata(cluster, None).await?;
    let registered: BTreeSet<BrokerId> = meta.brokers.iter().map(|b| BrokerId(b.node_id)).collect();
    if !registered.contains(&BrokerId(id)) {
        bail!("broker {id} is not registered");
    }
    let remaining: BTreeSet<BrokerId> = registered.into_iter().filter(|b| *b != BrokerId(id)).collect();
    let moves = balance::evacuate(&remaining, &placement(&meta), &BTreeMap::new(), DECOMMISSION_MOVES_MAX);
    let stuck: Vec<String> = placement(&meta)
        .iter()
        .filter(|(k, r)| r.contains(&BrokerId(id)) && !moves.contains_key(*k))
        .map(|((t, p), _)| format!("{t}-{p}"))
        .collect();
    if !stuck.is_empty() {
        bail!(
            "broker {id}: no other broker can take {} (every broker already holds a replica)",
            stuck.join(", ")
        );
    }
    let submitted: Vec<(String, i32, Option<Vec<i32>>)> = moves
        .iter()
        .map(|((t, p), r)| (t.clone(), *p, Some(r.iter().map(|b| b.0).collect())))
        .collect();
    for (t, p, r) in &submitted {
        println!("Moving {t}-{p} to {:?}", r.as_deref().unwrap_or(&[]));
    }
    if !submitted.is_empty() {
        // KIP-860: a decommission never changes a replication factor.
        alter(cluster, &submitted, false).await?;
    }
    let deadline = rt.monotonic_ms().saturating_add(timeout_ms);
    loop {
        let pending = list(cluster).await?;
        let moving: usize = pending.topics.iter().map(|t| t.partitions.len()).sum();
        let meta = metadata(cluster, None).await?;
        let left: usize = placement(&meta).values().filter(|r| r.contains(&BrokerId(id))).count();
        if moving == 0 && left == 0 {
            println!("Broker {id} holds no replicas; it may be stopped.");
            return Ok(());
        }
        if rt.monotonic_ms() >= deadline {
            bail!("broker {id}: {left} partitions still on it, {moving} moves in progress after {timeout_ms} ms");
        }
        rt.sleep(Duration::from_millis(500)).await;
    }
}
