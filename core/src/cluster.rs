//! The cluster's shared vocabulary: where each piece of cluster state lives in the coordinator's
//! tree, and the records stored there. The coordinator (`coord`), the controller (`controller`)
//! and the brokers' replication (`broker`) all speak these; none of them owns them.
//!
//! The layout follows Kafka's ZooKeeper mode, so a reader who knows `/brokers/ids` knows this:
//!
//! | path | kind | data |
//! |---|---|---|
//! | `/cluster/id` | persistent | the cluster id (text) |
//! | `/brokers/ids/{id}` | ephemeral (the broker's session) | [`BrokerRegistration`] |
//! | `/controller` | ephemeral (the controller's session) | the controller's broker id (text) |
//! | `/controller_epoch` | persistent | the controller epoch (text); every controller write checks its version |
//! | `/brokers/topics/{topic}` | persistent | [`TopicRecord`] (id, replica assignment, reassignments in progress, configs) |
//! | `/brokers/topics/{topic}/partitions/{p}/state` | persistent | [`PartitionState`] |
//! | `/admin/delete_topics/{topic}` | persistent | empty: a deletion the controller carries out |
//! | `/brokers/log_ends/{id}` | ephemeral (the broker's session) | its offline partitions' [`LogEndReport`]s |
//!
//! Records are encoded as `key=value` lines (text, like Kafka's JSON, and as easy to read in a
//! replay trace). Decoding is total: bad bytes give `None`, never a panic.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::ids::{BrokerId, LeaderEpoch};

pub const CLUSTER_ID_PATH: &str = "/cluster/id";
pub const BROKER_IDS_PATH: &str = "/brokers/ids";
pub const CONTROLLER_PATH: &str = "/controller";
pub const CONTROLLER_EPOCH_PATH: &str = "/controller_epoch";
pub const TOPICS_PATH: &str = "/brokers/topics";
pub const DELETE_TOPICS_PATH: &str = "/admin/delete_topics";
pub const LOG_ENDS_PATH: &str = "/brokers/log_ends";

pub fn log_ends_path(id: BrokerId) -> String {
    format!("{LOG_ENDS_PATH}/{}", id.0)
}

pub fn broker_path(id: BrokerId) -> String {
    format!("{BROKER_IDS_PATH}/{}", id.0)
}

pub fn topic_path(topic: &str) -> String {
    format!("{TOPICS_PATH}/{topic}")
}

pub fn partitions_path(topic: &str) -> String {
    format!("{TOPICS_PATH}/{topic}/partitions")
}

pub fn partition_path(topic: &str, partition: i32) -> String {
    format!("{TOPICS_PATH}/{topic}/partitions/{partition}")
}

pub fn partition_state_path(topic: &str, partition: i32) -> String {
    format!("{TOPICS_PATH}/{topic}/partitions/{partition}/state")
}

/// A live broker, as it registers itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerRegistration {
    pub id: BrokerId,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    /// The creation index (czxid) of the first registration of the broker process whose log
    /// this process still has intact: this process's own first registration when it started
    /// after an unclean shutdown (or on an empty disk), else the value the previous process
    /// left in its clean-shutdown marker. `None` until the broker has learnt it, and in
    /// registrations written before this field existed: the controller then takes this
    /// registration's own czxid, i.e. treats the broker as restarted (see
    /// [`crate::controller::ClusterView::intact_since`]).
    pub intact_since: Option<u64>,
}

/// A topic: its id, where each partition's replicas live (the first is the preferred leader),
/// the reassignments in progress, and its per-topic configs (Kafka names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicRecord {
    /// 32 hex digits.
    pub topic_id_hex: String,
    /// Partition index -> replicas, in preference order. During a reassignment this is the full
    /// set (target first, then the replicas being removed), as in Kafka's KIP-455.
    pub assignment: BTreeMap<i32, Vec<BrokerId>>,
    /// Partition index -> its reassignment in progress; absent when it is not moving.
    pub reassigning: BTreeMap<i32, Reassignment>,
    pub configs: BTreeMap<String, String>,
}

/// A partition reassignment in progress (KIP-455's `adding_replicas` / `removing_replicas`,
/// stored in the topic record as Kafka's ZooKeeper mode does). Both lists are subsets of the
/// partition's full replica set: the target is the full set less `removing`, the original the
/// full set less `adding`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reassignment {
    pub adding: Vec<BrokerId>,
    pub removing: Vec<BrokerId>,
}

impl TopicRecord {
    /// The replicas partition `p` is moving to (its assignment when it is not moving).
    pub fn target_replicas(&self, p: i32) -> Vec<BrokerId> {
        let full = self.assignment.get(&p).cloned().unwrap_or_default();
        match self.reassigning.get(&p) {
            Some(r) => full.into_iter().filter(|b| !r.removing.contains(b)).collect(),
            None => full,
        }
    }

    /// The replicas partition `p` had before its reassignment began (its assignment when it is
    /// not moving).
    pub fn original_replicas(&self, p: i32) -> Vec<BrokerId> {
        let full = self.assignment.get(&p).cloned().unwrap_or_default();
        match self.reassigning.get(&p) {
            Some(r) => full.into_iter().filter(|b| !r.adding.contains(b)).collect(),
            None => full,
        }
    }
}

/// One partition's leadership, as the controller (leader, epoch) and the leader (ISR) write it.
/// Writers compare-and-set on the znode's version, so a stale writer's update is rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionState {
    /// `None` when no eligible replica is alive (the partition is offline).
    pub leader: Option<BrokerId>,
    /// Bumped by every leader change; replicas and clients fence on it (KIP-101, KIP-320).
    pub leader_epoch: LeaderEpoch,
    /// In-sync replicas; always contains the leader when there is one.
    pub isr: Vec<BrokerId>,
    /// The controller epoch of the controller that last elected a leader here.
    pub controller_epoch: i32,
    /// Eligible leader replicas (KIP-966): replicas that left the ISR while it was below
    /// `min.insync.replicas`. No acks=all write can be acknowledged while the ISR is that small,
    /// so each of them still holds every acknowledged record and may lead when no ISR member
    /// can. Emptied when the ISR is back at min ISR; never holds an ISR member. See
    /// [`next_elr`].
    pub elr: Vec<BrokerId>,
}

/// The eligible leader replicas after an ISR change from `old_isr` to `new_isr` (KIP-966): empty
/// when the new ISR has at least `min_isr` members; otherwise the old ones plus those the ISR
/// just lost, less the new ISR's members, in id order. Replicas not in `replicas` (moved away by
/// a reassignment) are dropped.
pub fn next_elr(
    old_isr: &[BrokerId],
    old_elr: &[BrokerId],
    new_isr: &[BrokerId],
    min_isr: usize,
    replicas: &[BrokerId],
) -> Vec<BrokerId> {
    if new_isr.len() >= min_isr {
        return Vec::new();
    }
    let mut elr: Vec<BrokerId> = old_elr
        .iter()
        .chain(old_isr)
        .copied()
        .filter(|b| !new_isr.contains(b) && replicas.contains(b))
        .collect();
    elr.sort();
    elr.dedup();
    elr
}

/// What a replica of an offline partition reports about its log (KIP-966's unclean recovery asks
/// replicas the same with GetReplicaLogInfo): the partition state's leader epoch it saw offline,
/// its log's latest leader epoch and its log end offset. While a partition is offline no replica's
/// log changes, so a report for the current state's epoch is current.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogEndReport {
    pub offline_epoch: LeaderEpoch,
    pub last_epoch: LeaderEpoch,
    pub log_end: i64,
}

/// A broker's [`LogEndReport`]s, one per offline partition it hosts, keyed by (topic, partition):
/// the data of its ephemeral `/brokers/log_ends/{id}`.
pub fn encode_log_ends(reports: &BTreeMap<(String, i32), LogEndReport>) -> Vec<u8> {
    let mut s = String::new();
    for ((topic, p), r) in reports {
        // Topic names never hold ':' or '=' (Kafka allows [a-zA-Z0-9._-]).
        let _ = writeln!(s, "{topic}:{p}={},{},{}", r.offline_epoch.0, r.last_epoch.0, r.log_end);
    }
    s.into_bytes()
}

/// Reads [`encode_log_ends`]' bytes; `None` for anything malformed.
pub fn decode_log_ends(bytes: &[u8]) -> Option<BTreeMap<(String, i32), LogEndReport>> {
    let mut out = BTreeMap::new();
    for (k, v) in lines(bytes)? {
        let (topic, p) = k.rsplit_once(':')?;
        let mut it = v.split(',');
        let mut next = || it.next().and_then(|x| x.parse::<i64>().ok());
        let (offline, last, end) = (next()?, next()?, next()?);
        if it.next().is_some() || topic.is_empty() {
            return None;
        }
        let r = LogEndReport {
            offline_epoch: LeaderEpoch(i32::try_from(offline).ok()?),
            last_epoch: LeaderEpoch(i32::try_from(last).ok()?),
            log_end: end,
        };
        out.insert((topic.to_string(), p.parse().ok()?), r);
    }
    Some(out)
}

fn ids_text(ids: &[BrokerId]) -> String {
    ids.iter().map(|b| b.0.to_string()).collect::<Vec<_>>().join(",")
}

fn parse_ids(text: &str) -> Option<Vec<BrokerId>> {
    if text.is_empty() {
        return Some(Vec::new());
    }
    text.split(',').map(|s| s.parse::<i32>().ok().map(BrokerId)).collect()
}

fn lines(bytes: &[u8]) -> Option<BTreeMap<&str, &str>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut map = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let (k, v) = line.split_once('=')?;
        if map.insert(k, v).is_some() {
            return None;
        }
    }
    Some(map)
}

impl BrokerRegistration {
    pub fn encode(&self) -> Vec<u8> {
        let mut s = format!("id={}\nhost={}\nport={}\n", self.id.0, self.host, self.port);
        if let Some(rack) = &self.rack {
            let _ = writeln!(s, "rack={rack}");
        }
        if let Some(czxid) = self.intact_since {
            let _ = writeln!(s, "intact.since={czxid}");
        }
        s.into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Option<BrokerRegistration> {
        let m = lines(bytes)?;
        Some(BrokerRegistration {
            id: BrokerId(m.get("id")?.parse().ok()?),
            host: m.get("host")?.to_string(),
            port: m.get("port")?.parse().ok()?,
            rack: m.get("rack").map(|r| r.to_string()),
            intact_since: match m.get("intact.since") {
                Some(v) => Some(v.parse().ok()?),
                None => None,
            },
        })
    }
}

impl TopicRecord {
    /// `id=<hex>`, one `p<N>=<replicas>` line per partition, `adding.p<N>=` and `removing.p<N>=`
    /// per moving partition, one `config.<name>=<value>` per config.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = format!("id={}\n", self.topic_id_hex);
        for (p, replicas) in &self.assignment {
            let _ = writeln!(s, "p{p}={}", ids_text(replicas));
        }
        for (p, r) in &self.reassigning {
            let _ = writeln!(s, "adding.p{p}={}", ids_text(&r.adding));
            let _ = writeln!(s, "removing.p{p}={}", ids_text(&r.removing));
        }
        for (k, v) in &self.configs {
            let _ = writeln!(s, "config.{k}={v}");
        }
        s.into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Option<TopicRecord> {
        let m = lines(bytes)?;
        let mut record = TopicRecord {
            topic_id_hex: m.get("id")?.to_string(),
            assignment: BTreeMap::new(),
            reassigning: BTreeMap::new(),
            configs: BTreeMap::new(),
        };
        for (k, v) in m {
            if let Some(name) = k.strip_prefix("config.") {
                record.configs.insert(name.to_string(), v.to_string());
            } else if let Some(p) = k.strip_prefix("adding.p") {
                record.reassigning.entry(p.parse().ok()?).or_default().adding = parse_ids(v)?;
            } else if let Some(p) = k.strip_prefix("removing.p") {
                record.reassigning.entry(p.parse().ok()?).or_default().removing = parse_ids(v)?;
            } else if let Some(p) = k.strip_prefix('p') {
                record.assignment.insert(p.parse().ok()?, parse_ids(v)?);
            } else if k != "id" {
                return None;
            }
        }
        // A reassignment names replicas of its partition only.
        for (p, r) in &record.reassigning {
            let full = record.assignment.get(p)?;
            if !r.adding.iter().chain(&r.removing).all(|b| full.contains(b)) {
                return None;
            }
        }
        Some(record)
    }
}

impl PartitionState {
    pub fn encode(&self) -> Vec<u8> {
        let leader = self.leader.map_or(-1, |b| b.0);
        format!(
            "leader={leader}\nleader_epoch={}\nisr={}\ncontroller_epoch={}\n{}",
            self.leader_epoch.0,
            ids_text(&self.isr),
            self.controller_epoch,
            // Only when there are some: states written before KIP-966 read the same.
            if self.elr.is_empty() {
                String::new()
            } else {
                format!("elr={}\n", ids_text(&self.elr))
            }
        )
        .into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Option<PartitionState> {
        let m = lines(bytes)?;
        let leader: i32 = m.get("leader")?.parse().ok()?;
        Some(PartitionState {
            leader: (leader >= 0).then_some(BrokerId(leader)),
            leader_epoch: LeaderEpoch(m.get("leader_epoch")?.parse().ok()?),
            isr: parse_ids(m.get("isr")?)?,
            controller_epoch: m.get("controller_epoch")?.parse().ok()?,
            elr: match m.get("elr") {
                Some(v) => parse_ids(v)?,
                None => Vec::new(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_bad_bytes_decode_to_none() {
        let reg = BrokerRegistration {
            id: BrokerId(2),
            host: "10.0.0.3".into(),
            port: 9092,
            rack: None,
            intact_since: None,
        };
        assert_eq!(BrokerRegistration::decode(&reg.encode()), Some(reg.clone()));
        let intact = BrokerRegistration {
            intact_since: Some(42),
            ..reg.clone()
        };
        assert_eq!(BrokerRegistration::decode(&intact.encode()), Some(intact));
        // A registration from before the field: decodes, with nothing known intact.
        assert_eq!(
            BrokerRegistration::decode(b"id=2\nhost=10.0.0.3\nport=9092\n"),
            Some(reg)
        );
        assert_eq!(
            BrokerRegistration::decode(b"id=2\nhost=h\nport=1\nintact.since=x\n"),
            None
        );
        let topic = TopicRecord {
            topic_id_hex: "00112233445566778899aabbccddeeff".into(),
            assignment: [
                (0, vec![BrokerId(1), BrokerId(2)]),
                (1, vec![BrokerId(3), BrokerId(2), BrokerId(0)]),
            ]
            .into(),
            reassigning: [(
                1,
                Reassignment {
                    adding: vec![BrokerId(3)],
                    removing: vec![BrokerId(0)],
                },
            )]
            .into(),
            configs: [("min.insync.replicas".to_string(), "2".to_string())].into(),
        };
        assert_eq!(TopicRecord::decode(&topic.encode()), Some(topic.clone()));
        assert_eq!(topic.target_replicas(1), vec![BrokerId(3), BrokerId(2)]);
        assert_eq!(topic.original_replicas(1), vec![BrokerId(2), BrokerId(0)]);
        assert_eq!(topic.target_replicas(0), topic.original_replicas(0));
        let state = PartitionState {
            leader: Some(BrokerId(1)),
            leader_epoch: LeaderEpoch(4),
            isr: vec![BrokerId(1), BrokerId(2)],
            controller_epoch: 3,
            elr: Vec::new(),
        };
        assert_eq!(PartitionState::decode(&state.encode()), Some(state));
        let offline = PartitionState {
            leader: None,
            leader_epoch: LeaderEpoch(5),
            isr: vec![],
            controller_epoch: 3,
            elr: Vec::new(),
        };
        assert_eq!(PartitionState::decode(&offline.encode()), Some(offline));
        for bad in [
            &b"leader=x\n"[..],
            b"\xff\xfe",
            b"leader=1\nleader=2\n",
            b"id=1\nhost=h\n",
        ] {
            assert_eq!(PartitionState::decode(bad), None);
            assert_eq!(BrokerRegistration::decode(bad), None);
        }
        assert_eq!(TopicRecord::decode(b"id=ab\npx=1\n"), None);
        // A reassignment naming a broker outside its partition's replicas.
        assert_eq!(TopicRecord::decode(b"id=ab\np0=1,2\nadding.p0=3\nremoving.p0=\n"), None);
    }
}
