//! CreateTopics and DeleteTopics as the controller decides them: validation with Kafka's error
//! codes (nothing is written on a refusal), then one atomic multi laying out the topic's nodes.

use std::collections::BTreeMap;

use super::{assign_replicas, ClusterView, Controller, CreateMode, Op, Write};
use crate::broker::topic::{validate_name, TopicId};
use crate::cluster::{
    partition_path, partition_state_path, partitions_path, topic_path, PartitionState, TopicRecord, DELETE_TOPICS_PATH,
};
use crate::error_code::ErrorCode;
use crate::ids::{BrokerId, LeaderEpoch};

/// Partitions one CreateTopics may ask for: bounds the multi and the tree.
pub const PARTITIONS_PER_TOPIC_MAX: i32 = 10_000;

/// A refused CreateTopics: the Kafka error code and a message for the response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateTopicError {
    pub code: ErrorCode,
    pub message: String,
}

fn refuse(code: ErrorCode, message: String) -> CreateTopicError {
    CreateTopicError { code, message }
}

/// The random choices of one topic creation, drawn by the caller from its seeded stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreateTopicDraw {
    pub topic_id: TopicId,
    pub start_index: usize,
    pub replica_shift: usize,
}

impl Controller {
    /// Decides a CreateTopics for one topic: the topic record with its assignment over the live
    /// brokers, and each partition's initial state (leader = first replica, epoch 0, ISR = all
    /// replicas), in one fenced multi. The coordinator's create of the topic node fails the whole
    /// multi if a racing creation got there first.
    pub fn create_topic(
        &self,
        view: &ClusterView,
        name: &str,
        partitions: i32,
        replication_factor: i32,
        configs: &BTreeMap<String, String>,
        draw: CreateTopicDraw,
    ) -> Result<(TopicRecord, Write), CreateTopicError> {
        validate_name(name).map_err(|m| refuse(ErrorCode::InvalidTopicException, m))?;
        if view.topics.contains_key(name) || view.delete_requests.contains(name) {
            return Err(refuse(
                ErrorCode::TopicAlreadyExists,
                format!("topic {name} already exists"),
            ));
        }
        if !(1..=PARTITIONS_PER_TOPIC_MAX).contains(&partitions) {
            return Err(refuse(
                ErrorCode::InvalidPartitions,
                format!("partitions must be 1 to {PARTITIONS_PER_TOPIC_MAX}, got {partitions}"),
            ));
        }
        let live = view.live_brokers.len();
        let rf = usize::try_from(replication_factor).unwrap_or(0);
        if rf < 1 || rf > live {
            return Err(refuse(
                ErrorCode::InvalidReplicationFactor,
                format!("replication factor {replication_factor}: must be 1 to the {live} live brokers"),
            ));
        }
        if let Some(v) = configs.get("unclean.leader.election.enable") {
            if v != "true" && v != "false" {
                return Err(refuse(
                    ErrorCode::InvalidConfig,
                    format!("unclean.leader.election.enable must be true or false, got {v:?}"),
                ));
            }
        }
        if let Some(v) = configs.get("min.insync.replicas") {
            if !v.parse::<i32>().is_ok_and(|m| m >= 1) {
                return Err(refuse(
                    ErrorCode::InvalidConfig,
                    format!("min.insync.replicas must be a positive integer, got {v:?}"),
                ));
            }
        }
        let brokers: Vec<BrokerId> = view.live_brokers.iter().copied().collect();
        let assignment = assign_replicas(&brokers, partitions, rf, draw.start_index, draw.replica_shift);
        let record = TopicRecord {
            topic_id_hex: draw.topic_id.to_hex(),
            assignment,
            reassigning: BTreeMap::new(),
            configs: configs.clone(),
        };
        let persistent = |path: String, data: Vec<u8>| Op::Create {
            path,
            data,
            mode: CreateMode::Persistent,
        };
        let mut ops = vec![
            persistent(topic_path(name), record.encode()),
            persistent(partitions_path(name), Vec::new()),
        ];
        for (&p, replicas) in &record.assignment {
            let state = PartitionState {
                leader: Some(replicas[0]),
                leader_epoch: LeaderEpoch(0),
                isr: replicas.clone(),
                controller_epoch: self.epoch,
                elr: Vec::new(),
            };
            ops.push(persistent(partition_path(name, p), Vec::new()));
            ops.push(persistent(partition_state_path(name, p), state.encode()));
        }
        let what = format!("create topic {name}: {partitions} partitions, replication factor {rf}");
        Ok((record, self.write(ops, what)))
    }

    /// Kafka's ZooKeeper-mode path for a topic whose record was written without its partition
    /// nodes (by a broker auto-creating it, or an admin): lays out each partition's state, leader
    /// = first live replica, ISR = the live replicas, epoch 0. One write per such topic; a topic
    /// with no live replica waits (no write) until one registers. Racing controllers are safe:
    /// the create of the `partitions` node fails the loser's whole multi.
    pub fn missing_partition_states(&self, view: &ClusterView) -> Vec<Write> {
        let mut writes = Vec::new();
        for (name, topic) in &view.topics {
            if !topic.partitions.is_empty() || view.delete_requests.contains(name) {
                continue;
            }
            let mut ops = vec![Op::Create {
                path: partitions_path(name),
                data: Vec::new(),
                mode: CreateMode::Persistent,
            }];
            let mut all_have_a_live_replica = true;
            for (&p, replicas) in &topic.record.assignment {
                let isr: Vec<BrokerId> = replicas
                    .iter()
                    .copied()
                    .filter(|b| view.live_brokers.contains(b))
                    .collect();
                let Some(&leader) = isr.first() else {
                    all_have_a_live_replica = false;
                    break;
                };
                let state = PartitionState {
                    leader: Some(leader),
                    leader_epoch: LeaderEpoch(0),
                    isr,
                    controller_epoch: self.epoch,
                    elr: Vec::new(),
                };
                for (path, data) in [
                    (partition_path(name, p), Vec::new()),
                    (partition_state_path(name, p), state.encode()),
                ] {
                    ops.push(Op::Create {
                        path,
                        data,
                        mode: CreateMode::Persistent,
                    });
                }
            }
            if all_have_a_live_replica && !topic.record.assignment.is_empty() {
                writes.push(self.write(ops, format!("partition states of new topic {name}")));
            }
        }
        writes
    }

    /// Decides a DeleteTopics: removes the topic's nodes, children first (a node with children
    /// cannot be deleted), and its deletion request if there is one. `None` for an unknown topic
    /// (UNKNOWN_TOPIC_OR_PARTITION to the client).
    pub fn delete_topic(&self, view: &ClusterView, name: &str) -> Option<Write> {
        let topic = view.topics.get(name)?;
        let mut ops = Vec::new();
        for &p in topic.record.assignment.keys() {
            if let Some(state) = topic.partitions.get(&p) {
                ops.push(Op::Delete {
                    path: partition_state_path(name, p),
                    expected_version: Some(state.version),
                });
            }
            ops.push(Op::Delete {
                path: partition_path(name, p),
                expected_version: None,
            });
        }
        ops.push(Op::Delete {
            path: partitions_path(name),
            expected_version: None,
        });
        ops.push(Op::Delete {
            path: topic_path(name),
            expected_version: None,
        });
        if view.delete_requests.contains(name) {
            ops.push(Op::Delete {
                path: format!("{DELETE_TOPICS_PATH}/{name}"),
                expected_version: None,
            });
        }
        Some(self.write(ops, format!("delete topic {name}")))
    }
}
