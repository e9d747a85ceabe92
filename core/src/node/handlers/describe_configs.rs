//! DescribeConfigs (key 32) answered from the broker: a topic's effective configuration (its
//! overrides over the broker's `log.*` settings) and the broker's own settings, with each entry's
//! source as Kafka reports it: DYNAMIC_TOPIC_CONFIG for a topic override, STATIC_BROKER_CONFIG
//! where the broker's setting differs from Kafka's default, DEFAULT_CONFIG otherwise. Topic
//! entries are writable (CreateTopics takes them); broker entries are read-only (nothing alters
//! them at run time). Errors are per resource: an unknown topic gets UNKNOWN_TOPIC_OR_PARTITION,
//! another broker's id or another resource type INVALID_REQUEST. Keys that are asked for and not
//! known are left out, as Kafka does.

use crate::broker::{Broker, BrokerConfig};
use crate::error_code::ErrorCode;
use crate::log::LogConfig;
use crate::protocol::api::create_topics::CreatableTopicConfigs;
use crate::protocol::api::describe_configs::{
    DescribeConfigsEntry, DescribeConfigsRequest, DescribeConfigsResource, DescribeConfigsResponse,
    DescribeConfigsResult, DescribeConfigsSynonym, RESOURCE_TYPE_BROKER, RESOURCE_TYPE_TOPIC,
};

/// Kafka's `ConfigSource` values.
pub const SOURCE_DYNAMIC_TOPIC_CONFIG: i8 = 1;
pub const SOURCE_STATIC_BROKER_CONFIG: i8 = 4;
pub const SOURCE_DEFAULT_CONFIG: i8 = 5;

/// Kafka's `ConfigType` values (DescribeConfigs v3+).
const TYPE_BOOLEAN: i8 = 1;
const TYPE_INT: i8 = 3;
const TYPE_LONG: i8 = 5;
const TYPE_LIST: i8 = 7;

/// One topic-level setting: its topic name, the broker setting it defaults to, its type, and its
/// value in a given configuration.
struct TopicKey {
    name: &'static str,
    broker_name: &'static str,
    config_type: i8,
    value: fn(&LogConfig, i32) -> String,
}

fn unlimited<T: ToString>(v: Option<T>, none: &str) -> String {
    v.map_or_else(|| none.to_string(), |v| v.to_string())
}

/// The topic configs Gregor honours, in Kafka's alphabetical order.
const TOPIC_KEYS: &[TopicKey] = &[
    TopicKey {
        name: "cleanup.policy",
        broker_name: "log.cleanup.policy",
        config_type: TYPE_LIST,
        value: |_, _| "delete".to_string(),
    },
    TopicKey {
        name: "flush.messages",
        broker_name: "log.flush.interval.messages",
        config_type: TYPE_LONG,
        value: |l, _| unlimited(l.flush_messages, "9223372036854775807"),
    },
    TopicKey {
        name: "flush.ms",
        broker_name: "log.flush.interval.ms",
        config_type: TYPE_LONG,
        value: |l, _| unlimited(l.flush_ms, "9223372036854775807"),
    },
    TopicKey {
        name: "index.interval.bytes",
        broker_name: "log.index.interval.bytes",
        config_type: TYPE_INT,
        value: |l, _| l.index_interval_bytes.to_string(),
    },
    TopicKey {
        name: "max.message.bytes",
        broker_name: "message.max.bytes",
        config_type: TYPE_INT,
        value: |l, _| l.max_message_bytes.to_string(),
    },
    TopicKey {
        name: "min.insync.replicas",
        broker_name: "min.insync.replicas",
        config_type: TYPE_INT,
        value: |_, min_isr| min_isr.to_string(),
    },
    TopicKey {
        name: "retention.bytes",
        broker_name: "log.retention.bytes",
        config_type: TYPE_LONG,
        value: |l, _| unlimited(l.retention_bytes, "-1"),
    },
    TopicKey {
        name: "retention.ms",
        broker_name: "log.retention.ms",
        config_type: TYPE_LONG,
        value: |l, _| unlimited(l.retention_ms, "-1"),
    },
    TopicKey {
        name: "segment.bytes",
        broker_name: "log.segment.bytes",
        config_type: TYPE_INT,
        value: |l, _| l.segment_bytes.to_string(),
    },
    TopicKey {
        name: "segment.ms",
        broker_name: "log.roll.ms",
        config_type: TYPE_LONG,
        value: |l, _| l.segment_ms.to_string(),
    },
];

pub fn describe_configs(broker: &Broker, req: &DescribeConfigsRequest) -> DescribeConfigsResponse {
    DescribeConfigsResponse {
        throttle_time_ms: 0,
        results: req
            .resources
            .iter()
            .map(|res| {
                let entries = match res.resource_type {
                    RESOURCE_TYPE_TOPIC => topic_entries(broker, res, req.include_synonyms),
                    RESOURCE_TYPE_BROKER => broker_entries(broker, res),
                    other => Err((
                        ErrorCode::InvalidRequest,
                        format!("resource type {other} is not supported"),
                    )),
                };
                let (error_code, error_message, configs) = match entries {
                    Ok(configs) => (0, None, configs),
                    Err((code, message)) => (code.code(), Some(message), vec![]),
                };
                DescribeConfigsResult {
                    error_code,
                    error_message,
                    resource_type: res.resource_type,
                    resource_name: res.resource_name.clone(),
                    configs,
                }
            })
            .collect(),
    }
}

fn wanted(res: &DescribeConfigsResource, name: &str) -> bool {
    res.configuration_keys
        .as_ref()
        .is_none_or(|keys| keys.iter().any(|k| k == name))
}

type Entries = Result<Vec<DescribeConfigsEntry>, (ErrorCode, String)>;

fn topic_entries(broker: &Broker, res: &DescribeConfigsResource, include_synonyms: bool) -> Entries {
    let unknown = || {
        (
            ErrorCode::UnknownTopicOrPartition,
            format!("no topic {}", res.resource_name),
        )
    };
    let (log_config, min_insync_replicas, overrides) = match broker.topic(&res.resource_name) {
        Some(meta) => (
            meta.log_config.clone(),
            meta.min_insync_replicas,
            meta.overrides.clone(),
        ),
        // Cluster mode, no replica here (never had one, or a move took it away): the coordinator's
        // topic record says, as Kafka answers from metadata on any broker. Before, `gregor topics
        // describe` failed through such a broker.
        None => {
            let (record, _) = broker
                .cluster_view()
                .and_then(|v| v.topics.get(&res.resource_name))
                .ok_or_else(unknown)?;
            let (log_config, min) = broker
                .topic_config(&record.configs)
                .map_err(|why| (ErrorCode::InvalidConfig, why))?;
            (log_config, min, record.configs.clone())
        }
    };
    let ours = broker.config();
    let defaults = BrokerConfig::default();
    Ok(TOPIC_KEYS
        .iter()
        .filter(|k| wanted(res, k.name))
        .map(|k| {
            let value = (k.value)(&log_config, min_insync_replicas);
            let broker_value = (k.value)(&ours.log, ours.min_insync_replicas);
            let broker_source = if broker_value == (k.value)(&defaults.log, defaults.min_insync_replicas) {
                SOURCE_DEFAULT_CONFIG
            } else {
                SOURCE_STATIC_BROKER_CONFIG
            };
            let overridden = overrides.contains_key(k.name);
            let mut synonyms = vec![];
            if include_synonyms {
                if overridden {
                    synonyms.push(DescribeConfigsSynonym {
                        name: k.name.to_string(),
                        value: Some(value.clone()),
                        source: SOURCE_DYNAMIC_TOPIC_CONFIG,
                    });
                }
                synonyms.push(DescribeConfigsSynonym {
                    name: k.broker_name.to_string(),
                    value: Some(broker_value),
                    source: broker_source,
                });
            }
            DescribeConfigsEntry {
                name: k.name.to_string(),
                value: Some(value),
                read_only: false,
                config_source: if overridden {
                    SOURCE_DYNAMIC_TOPIC_CONFIG
                } else {
                    broker_source
                },
                is_sensitive: false,
                synonyms,
                config_type: k.config_type,
                documentation: None,
            }
        })
        .collect())
}

/// A created topic's effective configs for CreateTopics v5+, which Kafka fills in on success
/// (the Java AdminClient dereferences them): the same entries DescribeConfigs gives.
pub fn created_topic_configs(broker: &Broker, name: &str) -> Vec<CreatableTopicConfigs> {
    let resource = DescribeConfigsResource {
        resource_type: RESOURCE_TYPE_TOPIC,
        resource_name: name.to_string(),
        configuration_keys: None,
    };
    topic_entries(broker, &resource, false)
        .unwrap_or_default()
        .into_iter()
        .map(|e| CreatableTopicConfigs {
            name: e.name,
            value: e.value,
            read_only: e.read_only,
            config_source: e.config_source,
            is_sensitive: e.is_sensitive,
        })
        .collect()
}

fn broker_entries(broker: &Broker, res: &DescribeConfigsResource) -> Entries {
    let ours = broker.config();
    let id = ours.broker_id.0.to_string();
    // "" is the cluster-wide default resource; any other name must be this broker's id.
    if !res.resource_name.is_empty() && res.resource_name != id {
        return Err((
            ErrorCode::InvalidRequest,
            format!("this is broker {id}, not {}", res.resource_name),
        ));
    }
    let defaults = BrokerConfig::default();
    let general = |c: &BrokerConfig| {
        vec![
            (
                "auto.create.topics.enable",
                TYPE_BOOLEAN,
                c.auto_create_topics.to_string(),
            ),
            ("broker.id", TYPE_INT, c.broker_id.0.to_string()),
            ("num.partitions", TYPE_INT, c.num_partitions.to_string()),
        ]
    };
    let topic_level = |c: &BrokerConfig| {
        TOPIC_KEYS
            .iter()
            .map(|k| (k.broker_name, k.config_type, (k.value)(&c.log, c.min_insync_replicas)))
            .collect::<Vec<_>>()
    };
    let mine: Vec<_> = general(ours).into_iter().chain(topic_level(ours)).collect();
    let theirs: Vec<_> = general(&defaults).into_iter().chain(topic_level(&defaults)).collect();
    let mut entries: Vec<DescribeConfigsEntry> = mine
        .into_iter()
        .zip(theirs)
        .filter(|((name, _, _), _)| wanted(res, name))
        .map(|((name, config_type, value), (_, _, default))| DescribeConfigsEntry {
            name: name.to_string(),
            config_source: if value == default {
                SOURCE_DEFAULT_CONFIG
            } else {
                SOURCE_STATIC_BROKER_CONFIG
            },
            value: Some(value),
            read_only: true,
            is_sensitive: false,
            synonyms: vec![],
            config_type,
            documentation: None,
        })
        .collect();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::TopicId;
    use crate::disk::mem::MemDisk;

    fn resource(resource_type: i8, name: &str, keys: Option<&[&str]>) -> DescribeConfigsResource {
        DescribeConfigsResource {
            resource_type,
            resource_name: name.into(),
            configuration_keys: keys.map(|k| k.iter().map(|s| s.to_string()).collect()),
        }
    }

    fn entry<'a>(res: &'a DescribeConfigsResult, name: &str) -> &'a DescribeConfigsEntry {
        res.configs
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("{name} missing from {:?}", res.configs))
    }

    #[test]
    fn topic_configs_show_overrides_over_broker_defaults() {
        let mut disk = MemDisk::new();
        let config = BrokerConfig {
            min_insync_replicas: 2,
            ..BrokerConfig::default()
        };
        let mut broker = Broker::open(&mut disk, config, 0).expect("open");
        let overrides = [("retention.ms".to_string(), "1000".to_string())];
        broker
            .create_topic(&mut disk, "t", 1, 1, &overrides, TopicId::from_random(1, 2), false)
            .expect("create");
        let req = DescribeConfigsRequest {
            resources: vec![
                resource(RESOURCE_TYPE_TOPIC, "t", None),
                resource(RESOURCE_TYPE_TOPIC, "t", Some(&["retention.ms", "no.such.key"])),
                resource(RESOURCE_TYPE_TOPIC, "missing", None),
                resource(RESOURCE_TYPE_BROKER, "0", None),
                resource(RESOURCE_TYPE_BROKER, "7", None),
                resource(3, "x", None),
            ],
            include_synonyms: true,
            include_documentation: false,
        };
        let resp = describe_configs(&broker, &req);
        let codes: Vec<i16> = resp.results.iter().map(|r| r.error_code).collect();
        let (unknown, invalid) = (
            ErrorCode::UnknownTopicOrPartition.code(),
            ErrorCode::InvalidRequest.code(),
        );
        assert_eq!(codes, [0, 0, unknown, 0, invalid, invalid]);

        let all = &resp.results[0];
        assert_eq!(all.configs.len(), TOPIC_KEYS.len());
        let retention = entry(all, "retention.ms");
        assert_eq!(retention.value.as_deref(), Some("1000"));
        assert_eq!(retention.config_source, SOURCE_DYNAMIC_TOPIC_CONFIG);
        assert!(!retention.read_only);
        let synonyms: Vec<(&str, i8)> = retention.synonyms.iter().map(|s| (&*s.name, s.source)).collect();
        assert_eq!(
            synonyms,
            [("retention.ms", 1), ("log.retention.ms", SOURCE_DEFAULT_CONFIG)]
        );
        let segment = entry(all, "segment.bytes");
        assert_eq!(segment.value.as_deref(), Some("1073741824"));
        assert_eq!(segment.config_source, SOURCE_DEFAULT_CONFIG);
        let min_isr = entry(all, "min.insync.replicas");
        assert_eq!(
            (min_isr.value.as_deref(), min_isr.config_source),
            (Some("2"), SOURCE_STATIC_BROKER_CONFIG)
        );
        assert_eq!(entry(all, "cleanup.policy").value.as_deref(), Some("delete"));
        assert_eq!(entry(all, "retention.bytes").value.as_deref(), Some("-1"));

        let filtered: Vec<&str> = resp.results[1].configs.iter().map(|c| &*c.name).collect();
        assert_eq!(filtered, ["retention.ms"]);

        let broker_res = &resp.results[3];
        assert!(broker_res.configs.iter().all(|c| c.read_only));
        assert_eq!(
            entry(broker_res, "log.retention.ms").value.as_deref(),
            Some("604800000")
        );
        assert_eq!(
            entry(broker_res, "min.insync.replicas").config_source,
            SOURCE_STATIC_BROKER_CONFIG
        );
        assert_eq!(entry(broker_res, "broker.id").config_source, SOURCE_DEFAULT_CONFIG);
        // Every version encodes what was answered.
        for v in 1..=4 {
            assert!(!resp.encode(v).is_empty());
        }
    }

    #[test]
    fn a_broker_without_a_replica_answers_from_the_cluster_view() {
        use crate::broker::replica::ClusterView;
        use crate::cluster::TopicRecord;
        let mut disk = MemDisk::new();
        let mut broker = Broker::open(&mut disk, BrokerConfig::default(), 0).expect("open");
        let req = DescribeConfigsRequest {
            resources: vec![resource(RESOURCE_TYPE_TOPIC, "moved", None)],
            include_synonyms: false,
            include_documentation: false,
        };
        let before = describe_configs(&broker, &req);
        assert_eq!(before.results[0].error_code, ErrorCode::UnknownTopicOrPartition.code());
        let record = TopicRecord {
            topic_id_hex: TopicId::from_random(1, 2).to_hex(),
            assignment: [(0, vec![crate::ids::BrokerId(1)])].into(),
            reassigning: Default::default(),
            configs: [("retention.ms".to_string(), "1000".to_string())].into(),
        };
        let mut view = ClusterView::default();
        view.topics.insert("moved".to_string(), (record, Default::default()));
        broker.set_cluster_view(view);
        let after = describe_configs(&broker, &req);
        println!("answered from the cluster view: {:?}", after.results[0].error_code);
        assert_eq!(after.results[0].error_code, 0);
        let retention = entry(&after.results[0], "retention.ms");
        assert_eq!(retention.value.as_deref(), Some("1000"));
        assert_eq!(retention.config_source, SOURCE_DYNAMIC_TOPIC_CONFIG);
    }

    #[test]
    fn create_topics_answers_the_created_topics_configs() {
        use crate::protocol::api::create_topics::{CreatableTopic, CreateTopicsRequest, TopicConfig};
        let mut disk = MemDisk::new();
        let mut broker = Broker::open(&mut disk, BrokerConfig::default(), 0).expect("open");
        let req = CreateTopicsRequest {
            topics: vec![CreatableTopic {
                name: "t".into(),
                num_partitions: 1,
                replication_factor: 1,
                assignments: vec![],
                configs: vec![TopicConfig {
                    name: "retention.ms".into(),
                    value: Some("5".into()),
                }],
            }],
            timeout_ms: 1000,
            validate_only: false,
        };
        let mut n = 0;
        let resp = crate::node::handlers::create_topics(&mut broker, &mut disk, &req, || {
            n += 1;
            TopicId::from_random(n, n)
        });
        let configs = resp.topics[0].configs.as_ref().expect("configs on success");
        assert_eq!(configs.len(), TOPIC_KEYS.len());
        let retention = configs.iter().find(|c| c.name == "retention.ms").expect("retention.ms");
        assert_eq!(
            (retention.value.as_deref(), retention.config_source),
            (Some("5"), SOURCE_DYNAMIC_TOPIC_CONFIG)
        );
    }
}
