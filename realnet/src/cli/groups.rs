//! `gregor groups list|describe`: consumer groups as `kafka-consumer-groups.sh` shows them.
//! `list` asks every broker (ListGroups; each broker lists the groups it coordinates) and prints
//! each group once. `describe GROUP` finds the group's coordinator (FindCoordinator), reads its
//! members (DescribeGroups) and committed offsets (OffsetFetch), then each partition's log end
//! offset from its leader (ListOffsets), and prints per partition the committed offset, the log
//! end offset, the lag between them and the member that owns it.
//!
//! A partition with no committed offset shows `-` for the offset and the lag, as Kafka does;
//! an unreadable log end offset shows `-` too, and the command still prints the rest.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context};
use clap::Subcommand;
use gregor_core::client::group::assignor::decode_assignment;
use gregor_core::client::group::PROTOCOL_TYPE;
use gregor_core::client::{code, Cluster, FIND_COORDINATOR_VERSION, LIST_OFFSETS_VERSION, OFFSET_FETCH_VERSION};
use gregor_core::protocol::api::describe_groups::{DescribeGroupsRequest, DescribedGroup};
use gregor_core::protocol::api::find_coordinator::{FindCoordinatorRequest, KEY_TYPE_GROUP};
use gregor_core::protocol::api::list_groups::ListGroupsRequest;
use gregor_core::protocol::api::list_offsets::{ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic};
use gregor_core::protocol::api::offset_fetch::{OffsetFetchGroup, OffsetFetchRequest};
use gregor_core::protocol::{Request, Response};

use super::{metadata, ConnectArgs};
use crate::runtime::RealRuntime;

pub const LIST_GROUPS_VERSION: i16 = 4;
pub const DESCRIBE_GROUPS_VERSION: i16 = 5;
/// ListOffsets' timestamp asking for the log end offset.
const LATEST_TIMESTAMP: i64 = -1;

#[derive(Subcommand, Debug)]
pub enum GroupsCommand {
    /// Lists the consumer groups, one name a line (with `--state`, each group's state too).
    List {
        #[arg(long)]
        state: bool,
    },
    /// Shows a group's partitions: committed offset, log end offset, lag and owner.
    Describe { group: String },
}

pub fn run(connect: &ConnectArgs, command: GroupsCommand) -> anyhow::Result<()> {
    let rt = super::client_runtime()?;
    let mut cluster = connect.cluster(&rt)?;
    super::run(async move {
        let out = match command {
            GroupsCommand::List { state } => list(&mut cluster, state).await?,
            GroupsCommand::Describe { group } => describe(&mut cluster, &group).await?,
        };
        print!("{out}");
        Ok(())
    })
}

/// Every group of every broker: name → state.
pub async fn list(cluster: &mut Cluster<RealRuntime>, with_state: bool) -> anyhow::Result<String> {
    let meta = metadata(cluster, Some(&[])).await?;
    let mut addrs: Vec<String> = meta.brokers.iter().map(|b| format!("{}:{}", b.host, b.port)).collect();
    if addrs.is_empty() {
        addrs = cluster.bootstrap().to_vec();
    }
    let request = Request::ListGroups(ListGroupsRequest::default());
    let mut groups: BTreeMap<String, String> = BTreeMap::new();
    let mut answered = 0;
    for addr in &addrs {
        let result = match cluster.conn(addr).await {
            Ok(conn) => conn.call(&request, LIST_GROUPS_VERSION).await,
            Err(e) => Err(e),
        };
        let resp = match result {
            Ok(Response::ListGroups(resp)) => resp,
            Ok(_) => bail!("ListGroups answered with another API"),
            Err(e) => {
                cluster.drop_conn(addr);
                eprintln!("warning: broker {addr} did not answer ListGroups: {e}");
                continue;
            }
        };
        if resp.error_code != 0 {
            eprintln!("warning: broker {addr}: ListGroups: {:?}", code(resp.error_code));
            continue;
        }
        answered += 1;
        for g in resp.groups {
            groups.insert(g.group_id, g.group_state);
        }
    }
    if answered == 0 {
        bail!("no broker answered ListGroups");
    }
    let mut out = String::new();
    if with_state {
        let width = groups.keys().map(String::len).max().unwrap_or(0).max(5);
        out.push_str(&format!("{:<width$}  STATE\n", "GROUP"));
        for (g, s) in &groups {
            out.push_str(&format!("{g:<width$}  {s}\n"));
        }
    } else {
        for g in groups.keys() {
            out.push_str(&format!("{g}\n"));
        }
    }
    Ok(out)
}

/// One row of `describe`.
struct Row {
    topic: String,
    partition: i32,
    committed: Option<i64>,
    log_end: Option<i64>,
    owner: Option<(String, String, String)>,
}

async fn coordinator(cluster: &mut Cluster<RealRuntime>, group: &str) -> anyhow::Result<String> {
    let request = Request::FindCoordinator(FindCoordinatorRequest {
        key_type: KEY_TYPE_GROUP,
        keys: vec![group.to_string()],
    });
    let Response::FindCoordinator(resp) = cluster
        .call_any(&request, FIND_COORDINATOR_VERSION)
        .await
        .context("cannot reach the cluster")?
    else {
        bail!("FindCoordinator answered with another API");
    };
    let c = resp
        .coordinators
        .first()
        .context("FindCoordinator answered for no group")?;
    if c.error_code != 0 {
        bail!(
            "no coordinator for group {group}: {:?} {}",
            code(c.error_code),
            c.error_message.as_deref().unwrap_or("")
        );
    }
    Ok(format!("{}:{}", c.host, c.port))
}

async fn call(
    cluster: &mut Cluster<RealRuntime>,
    addr: &str,
    request: &Request,
    version: i16,
) -> anyhow::Result<Response> {
    let result = match cluster.conn(addr).await {
        Ok(conn) => conn.call(request, version).await,
        Err(e) => Err(e),
    };
    result.map_err(|e| {
        cluster.drop_conn(addr);
        anyhow::anyhow!("broker {addr}: {e}")
    })
}

async fn describe_group(cluster: &mut Cluster<RealRuntime>, addr: &str, group: &str) -> anyhow::Result<DescribedGroup> {
    let request = Request::DescribeGroups(DescribeGroupsRequest {
        groups: vec![group.to_string()],
        include_authorized_operations: false,
    });
    let Response::DescribeGroups(resp) = call(cluster, addr, &request, DESCRIBE_GROUPS_VERSION).await? else {
        bail!("DescribeGroups answered with another API");
    };
    let g = resp
        .groups
        .into_iter()
        .next()
        .context("DescribeGroups answered for no group")?;
    if g.error_code != 0 {
        bail!("cannot describe group {group}: {:?}", code(g.error_code));
    }
    Ok(g)
}

async fn committed_offsets(
    cluster: &mut Cluster<RealRuntime>,
    addr: &str,
    group: &str,
) -> anyhow::Result<BTreeMap<(String, i32), i64>> {
    let request = Request::OffsetFetch(OffsetFetchRequest {
        groups: vec![OffsetFetchGroup {
            group_id: group.to_string(),
            topics: None,
        }],
        require_stable: false,
    });
    let Response::OffsetFetch(resp) = call(cluster, addr, &request, OFFSET_FETCH_VERSION).await? else {
        bail!("OffsetFetch answered with another API");
    };
    let g = resp
        .groups
        .into_iter()
        .next()
        .context("OffsetFetch answered for no group")?;
    if g.error_code != 0 {
        bail!("cannot read the offsets of group {group}: {:?}", code(g.error_code));
    }
    let mut out = BTreeMap::new();
    for t in g.topics {
        for p in t.partitions {
            if p.error_code == 0 && p.committed_offset >= 0 {
                out.insert((t.name.clone(), p.partition_index), p.committed_offset);
            }
        }
    }
    Ok(out)
}

/// The log end offset of a partition from its leader; `None` when it cannot be read.
async fn log_end_offset(cluster: &mut Cluster<RealRuntime>, topic: &str, partition: i32) -> Option<i64> {
    let (addr, epoch) = match cluster.leader(topic, partition).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("warning: no leader for {topic}-{partition}: {e}");
            return None;
        }
    };
    let request = Request::ListOffsets(ListOffsetsRequest {
        replica_id: -1,
        isolation_level: 0,
        topics: vec![ListOffsetsTopic {
            name: topic.to_string(),
            partitions: vec![ListOffsetsPartition {
                partition_index: partition,
                current_leader_epoch: epoch,
                timestamp: LATEST_TIMESTAMP,
            }],
        }],
    });
    let p = match call(cluster, &addr, &request, LIST_OFFSETS_VERSION).await {
        Ok(Response::ListOffsets(resp)) => resp.topics.into_iter().next()?.partitions.into_iter().next()?,
        Ok(_) => return None,
        Err(e) => {
            eprintln!("warning: log end offset of {topic}-{partition}: {e}");
            return None;
        }
    };
    if p.error_code != 0 {
        eprintln!(
            "warning: log end offset of {topic}-{partition}: {:?}",
            code(p.error_code)
        );
        return None;
    }
    Some(p.offset)
}

pub async fn describe(cluster: &mut Cluster<RealRuntime>, group: &str) -> anyhow::Result<String> {
    let addr = coordinator(cluster, group).await?;
    let described = describe_group(cluster, &addr, group).await?;
    if described.group_state == "Dead" {
        bail!("consumer group {group} does not exist");
    }
    let committed = committed_offsets(cluster, &addr, group).await?;
    // Who owns what, for consumer groups (other protocols' assignments are opaque).
    let mut owners: BTreeMap<(String, i32), (String, String, String)> = BTreeMap::new();
    if described.protocol_type == PROTOCOL_TYPE {
        for m in &described.members {
            let Ok(assigned) = decode_assignment(&m.member_assignment) else {
                eprintln!("warning: member {} has an assignment that does not decode", m.member_id);
                continue;
            };
            for tp in assigned {
                let owner = (m.member_id.clone(), m.client_host.clone(), m.client_id.clone());
                owners.insert((tp.topic, tp.partition), owner);
            }
        }
    }
    let partitions: BTreeSet<(String, i32)> = committed.keys().chain(owners.keys()).cloned().collect();
    let mut rows = Vec::with_capacity(partitions.len());
    for (topic, partition) in partitions {
        let log_end = log_end_offset(cluster, &topic, partition).await;
        rows.push(Row {
            committed: committed.get(&(topic.clone(), partition)).copied(),
            owner: owners.get(&(topic.clone(), partition)).cloned(),
            topic,
            partition,
            log_end,
        });
    }
    let mut out = String::new();
    if described.members.is_empty() {
        out.push_str(&format!("Consumer group '{group}' has no active members.\n\n"));
    }
    out.push_str(&table(group, &rows));
    Ok(out)
}

fn table(group: &str, rows: &[Row]) -> String {
    let dash = || "-".to_string();
    let cells: Vec<[String; 9]> = rows
        .iter()
        .map(|r| {
            let lag = match (r.committed, r.log_end) {
                (Some(c), Some(e)) => (e - c).max(0).to_string(),
                _ => dash(),
            };
            let (member, host, client) = r.owner.clone().unwrap_or_else(|| (dash(), dash(), dash()));
            [
                group.to_string(),
                r.topic.clone(),
                r.partition.to_string(),
                r.committed.map_or_else(dash, |c| c.to_string()),
                r.log_end.map_or_else(dash, |e| e.to_string()),
                lag,
                member,
                host,
                client,
            ]
        })
        .collect();
    let header = [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ];
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            cells
                .iter()
                .map(|c| c[i].len())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |fields: Vec<&str>| {
        let padded: Vec<String> = fields.iter().zip(&widths).map(|(f, w)| format!("{f:<w$}")).collect();
        format!("{}\n", padded.join(" ").trim_end())
    };
    let mut out = line(header.to_vec());
    for c in &cells {
        out.push_str(&line(c.iter().map(String::as_str).collect()));
    }
    out
}
