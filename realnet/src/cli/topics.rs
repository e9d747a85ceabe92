//! `gregor topics create|list|describe|delete`: the admin APIs (CreateTopics, Metadata,
//! DescribeConfigs, DeleteTopics) from the command line, printing what `kafka-topics.sh` prints.
//! A per-topic error code from the broker becomes an error naming the code and its message.

use anyhow::{bail, Context};
use clap::Subcommand;
use gregor_core::client::{code, Cluster, CREATE_TOPICS_VERSION};
use gregor_core::error_code::ErrorCode;
use gregor_core::protocol::api::create_topics::{CreatableTopic, CreateTopicsRequest, TopicConfig};
use gregor_core::protocol::api::delete_topics::{DeleteTopic, DeleteTopicsRequest};
use gregor_core::protocol::api::describe_configs::{
    DescribeConfigsRequest, DescribeConfigsResource, RESOURCE_TYPE_TOPIC,
};
use gregor_core::protocol::{Request, Response, Uuid};

use super::{metadata, ConnectArgs};
use crate::runtime::RealRuntime;

pub const DELETE_TOPICS_VERSION: i16 = 6;
pub const DESCRIBE_CONFIGS_VERSION: i16 = 4;
/// Kafka's `ConfigSource.DYNAMIC_TOPIC_CONFIG`: a topic's own override.
const SOURCE_DYNAMIC_TOPIC_CONFIG: i8 = 1;
/// How long `describe` waits for a topic the answering broker does not know yet, or whose
/// partitions have no leader yet (a creation still reaching every broker's view), before it
/// reports the error, as Kafka's admin client retries such metadata.
const PROPAGATION_WAIT_MS: u64 = 2_000;
const PROPAGATION_POLL_MS: u64 = 50;

#[derive(Subcommand, Debug)]
pub enum TopicsCommand {
    /// Creates a topic.
    Create {
        name: String,
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        #[arg(long, default_value_t = 1)]
        replication_factor: i16,
        /// A topic config override, key=value (repeatable).
        #[arg(long = "config", value_parser = parse_config)]
        configs: Vec<(String, String)>,
    },
    /// Lists the topics, one name a line.
    List,
    /// Shows a topic's partitions and its config overrides.
    Describe { name: String },
    /// Deletes a topic and its data.
    Delete { name: String },
}

fn parse_config(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("{s:?} is not key=value")),
    }
}

pub fn run(connect: &ConnectArgs, command: TopicsCommand) -> anyhow::Result<()> {
    let rt = super::client_runtime()?;
    let mut cluster = connect.cluster(&rt)?;
    super::run(async move {
        let out = match command {
            TopicsCommand::Create {
                name,
                partitions,
                replication_factor,
                configs,
            } => create(&mut cluster, &name, partitions, replication_factor, &configs).await?,
            TopicsCommand::List => list(&mut cluster).await?,
            TopicsCommand::Describe { name } => describe(&mut cluster, &name).await?,
            TopicsCommand::Delete { name } => delete(&mut cluster, &name).await?,
        };
        print!("{out}");
        Ok(())
    })
}

fn broker_error(what: &str, raw: i16, message: Option<&str>) -> anyhow::Error {
    match message.filter(|m| !m.is_empty()) {
        Some(m) => anyhow::anyhow!("{what}: {:?}: {m}", code(raw)),
        None => anyhow::anyhow!("{what}: {:?}", code(raw)),
    }
}

pub async fn create(
    cluster: &mut Cluster<RealRuntime>,
    name: &str,
    partitions: i32,
    replication_factor: i16,
    configs: &[(String, String)],
) -> anyhow::Result<String> {
    let request = Request::CreateTopics(CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: name.to_string(),
            num_partitions: partitions,
            replication_factor,
            assignments: vec![],
            configs: configs
                .iter()
                .map(|(k, v)| TopicConfig {
                    name: k.clone(),
                    value: Some(v.clone()),
                })
                .collect(),
        }],
        timeout_ms: 30_000,
        validate_only: false,
    });
    let Response::CreateTopics(resp) = cluster
        .call_any(&request, CREATE_TOPICS_VERSION)
        .await
        .context("cannot reach the cluster")?
    else {
        bail!("CreateTopics answered with another API");
    };
    let t = resp.topics.first().context("CreateTopics answered for no topic")?;
    if t.error_code != 0 {
        return Err(broker_error(
            &format!("cannot create topic {name}"),
            t.error_code,
            t.error_message.as_deref(),
        ));
    }
    Ok(format!("Created topic {name}.\n"))
}

pub async fn list(cluster: &mut Cluster<RealRuntime>) -> anyhow::Result<String> {
    let meta = metadata(cluster, None).await?;
    let mut names: Vec<String> = meta.topics.iter().filter_map(|t| t.name.clone()).collect();
    names.sort();
    Ok(names.iter().map(|n| format!("{n}\n")).collect())
}

pub async fn describe(cluster: &mut Cluster<RealRuntime>, name: &str) -> anyhow::Result<String> {
    let started = std::time::Instant::now();
    let meta = loop {
        let meta = metadata(cluster, Some(&[name])).await?;
        let settled = meta.topics.iter().any(|t| {
            t.name.as_deref() == Some(name)
                && t.error_code != ErrorCode::UnknownTopicOrPartition.code()
                && t.error_code != ErrorCode::LeaderNotAvailable.code()
                && t.partitions.iter().all(|p| p.leader_id >= 0)
        });
        if settled || started.elapsed() >= std::time::Duration::from_millis(PROPAGATION_WAIT_MS) {
            break meta;
        }
        monoio::time::sleep(std::time::Duration::from_millis(PROPAGATION_POLL_MS)).await;
    };
    let t = meta
        .topics
        .iter()
        .find(|t| t.name.as_deref() == Some(name))
        .with_context(|| format!("metadata lacks topic {name}"))?;
    if t.error_code != 0 {
        return Err(broker_error(&format!("topic {name}"), t.error_code, None));
    }
    let request = Request::DescribeConfigs(DescribeConfigsRequest {
        resources: vec![DescribeConfigsResource {
            resource_type: RESOURCE_TYPE_TOPIC,
            resource_name: name.to_string(),
            configuration_keys: None,
        }],
        include_synonyms: false,
        include_documentation: false,
    });
    let Response::DescribeConfigs(configs) = cluster
        .call_any(&request, DESCRIBE_CONFIGS_VERSION)
        .await
        .context("cannot reach the cluster")?
    else {
        bail!("DescribeConfigs answered with another API");
    };
    let res = configs
        .results
        .first()
        .context("DescribeConfigs answered for no resource")?;
    if res.error_code != 0 {
        return Err(broker_error(
            &format!("configs of {name}"),
            res.error_code,
            res.error_message.as_deref(),
        ));
    }
    let overrides: Vec<String> = res
        .configs
        .iter()
        .filter(|c| c.config_source == SOURCE_DYNAMIC_TOPIC_CONFIG)
        .map(|c| format!("{}={}", c.name, c.value.as_deref().unwrap_or("")))
        .collect();
    let mut partitions = t.partitions.clone();
    partitions.sort_by_key(|p| p.partition_index);
    let replication_factor = partitions.first().map_or(0, |p| p.replica_nodes.len());
    let join = |ids: &[i32]| ids.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    let mut out = format!(
        "Topic: {name}\tTopicId: {}\tPartitionCount: {}\tReplicationFactor: {replication_factor}\tConfigs: {}\n",
        hex(t.topic_id),
        partitions.len(),
        overrides.join(",")
    );
    for p in &partitions {
        out.push_str(&format!(
            "\tTopic: {name}\tPartition: {}\tLeader: {}\tReplicas: {}\tIsr: {}\n",
            p.partition_index,
            p.leader_id,
            join(&p.replica_nodes),
            join(&p.isr_nodes)
        ));
    }
    Ok(out)
}

fn hex(id: Uuid) -> String {
    id.0.iter().map(|b| format!("{b:02x}")).collect()
}

pub async fn delete(cluster: &mut Cluster<RealRuntime>, name: &str) -> anyhow::Result<String> {
    let request = Request::DeleteTopics(DeleteTopicsRequest {
        topics: vec![DeleteTopic {
            name: Some(name.to_string()),
            topic_id: Uuid::ZERO,
        }],
        timeout_ms: 30_000,
    });
    let Response::DeleteTopics(resp) = cluster
        .call_any(&request, DELETE_TOPICS_VERSION)
        .await
        .context("cannot reach the cluster")?
    else {
        bail!("DeleteTopics answered with another API");
    };
    let t = resp.responses.first().context("DeleteTopics answered for no topic")?;
    if t.error_code != 0 {
        return Err(broker_error(
            &format!("cannot delete topic {name}"),
            t.error_code,
            t.error_message.as_deref(),
        ));
    }
    Ok(format!("Deleted topic {name}.\n"))
}
