//! The consumer protocol's bytes and the leader's assignors, as Kafka defines them, so that
//! Gregor's group consumer and real Kafka clients can share one group.
//!
//! - Subscription (JoinGroup protocol metadata): `version i16, topics [string], user_data
//!   bytes` (v0; later versions append owned partitions, generation and rack, which a decoder of
//!   an older version ignores, as Kafka's do).
//! - Assignment (SyncGroup): `version i16, partitions [topic string, [i32]], user_data bytes`.
//! - `range`: per topic, members sorted by id, each gets a contiguous run of `n / m` partitions,
//!   the first `n % m` members one more (Kafka's `RangeAssignor`).
//! - `roundrobin`: every (topic, partition) sorted, dealt in turn to the sorted members that
//!   subscribe to its topic (Kafka's `RoundRobinAssignor`).
//!
//! Fault model: the bytes come from other members through the broker: decoding is bounded and
//! returns errors, never panics.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::protocol::{DecodeError, Limits, Reader, Writer};

/// One partition of one topic.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.to_string(),
            partition,
        }
    }
}

/// `partition.assignment.strategy`: the assignors a member offers, in preference order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Assignor {
    Range,
    RoundRobin,
}

impl Assignor {
    /// The protocol name in JoinGroup, as Kafka's clients spell it.
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Range => "range",
            Assignor::RoundRobin => "roundrobin",
        }
    }

    pub fn from_name(name: &str) -> Option<Assignor> {
        match name {
            "range" => Some(Assignor::Range),
            "roundrobin" => Some(Assignor::RoundRobin),
            _ => None,
        }
    }

    /// Assigns the partitions of the subscribed topics (`partitions`: topic → partition count)
    /// to `members` (member id → subscribed topics). Every member gets an entry, maybe empty.
    pub fn assign(
        self,
        members: &BTreeMap<String, Vec<String>>,
        partitions: &BTreeMap<String, i32>,
    ) -> BTreeMap<String, BTreeSet<TopicPartition>> {
        let mut out: BTreeMap<String, BTreeSet<TopicPartition>> =
            members.keys().map(|m| (m.clone(), BTreeSet::new())).collect();
        match self {
            Assignor::Range => {
                for (topic, &count) in partitions {
                    let subscribed: Vec<&String> = members
                        .iter()
                        .filter(|(_, topics)| topics.contains(topic))
                        .map(|(m, _)| m)
                        .collect();
                    if subscribed.is_empty() || count <= 0 {
                        continue;
                    }
                    let m = subscribed.len() as i32;
                    let (per, extra) = (count / m, count % m);
                    for (i, member) in subscribed.into_iter().enumerate() {
                        let i = i as i32;
                        let start = i * per + i.min(extra);
                        let len = per + i32::from(i < extra);
                        let set = out.get_mut(member).expect("every member has an entry");
                        set.extend((start..start + len).map(|p| TopicPartition::new(topic, p)));
                    }
                }
            }
            Assignor::RoundRobin => {
                let ids: Vec<&String> = members.keys().collect();
                if ids.is_empty() {
                    return out;
                }
                let mut next = 0usize;
                for (topic, &count) in partitions {
                    for p in 0..count.max(0) {
                        // The next member (in turn) that subscribes to this topic.
                        for _ in 0..ids.len() {
                            let member = ids[next % ids.len()];
                            next = next.wrapping_add(1);
                            if members[member].contains(topic) {
                                out.get_mut(member)
                                    .expect("every member has an entry")
                                    .insert(TopicPartition::new(topic, p));
                                break;
                            }
                        }
                    }
                }
            }
        }
        out
    }
}

/// Kafka's ConsumerProtocol subscription, v0 (what this client sends).
pub fn encode_subscription(topics: &[String]) -> Bytes {
    let mut w = Writer::new();
    w.i16(0);
    w.array(false, topics, |w, t| w.string(false, t));
    w.nullable_bytes(false, None);
    w.finish()
}

/// The topics of a member's subscription, any version (later fields are ignored).
pub fn decode_subscription(bytes: &Bytes) -> Result<Vec<String>, DecodeError> {
    let mut r = Reader::new(bytes, Limits::default());
    let _version = r.i16()?;
    r.array(false, 2, |r| r.string(false, "subscription.topics"))
}

/// Kafka's ConsumerProtocol assignment, v0.
pub fn encode_assignment(partitions: &BTreeSet<TopicPartition>) -> Bytes {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    let topics: Vec<(&str, Vec<i32>)> = by_topic.into_iter().collect();
    let mut w = Writer::new();
    w.i16(0);
    w.array(false, &topics, |w, (t, ps)| {
        w.string(false, t);
        w.array(false, ps, |w, p| w.i32(*p));
    });
    w.nullable_bytes(false, None);
    w.finish()
}

/// The partitions of an assignment, any version. Empty bytes (a member the leader gave nothing,
/// as some brokers send it) are an empty assignment.
pub fn decode_assignment(bytes: &Bytes) -> Result<BTreeSet<TopicPartition>, DecodeError> {
    if bytes.is_empty() {
        return Ok(BTreeSet::new());
    }
    let mut r = Reader::new(bytes, Limits::default());
    let _version = r.i16()?;
    let topics = r.array(false, 6, |r| {
        let topic = r.string(false, "assignment.topic")?;
        let partitions = r.array(false, 4, |r| r.i32())?;
        Ok((topic, partitions))
    })?;
    Ok(topics
        .into_iter()
        .flat_map(|(t, ps)| ps.into_iter().map(move |p| TopicPartition::new(&t, p)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(list: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        list.iter()
            .map(|(m, ts)| (m.to_string(), ts.iter().map(|t| t.to_string()).collect()))
            .collect()
    }

    fn parts(list: &[(&str, i32)]) -> BTreeMap<String, i32> {
        list.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    fn names(set: &BTreeSet<TopicPartition>) -> Vec<String> {
        set.iter().map(|tp| format!("{}{}", tp.topic, tp.partition)).collect()
    }

    #[test]
    fn range_gives_contiguous_runs_and_the_remainder_to_the_first_members() {
        // Kafka's RangeAssignorTest: two consumers, topics t1 (3 partitions) and t2 (3).
        let m = members(&[("c0", &["t1", "t2"]), ("c1", &["t1", "t2"])]);
        let out = Assignor::Range.assign(&m, &parts(&[("t1", 3), ("t2", 3)]));
        assert_eq!(names(&out["c0"]), ["t10", "t11", "t20", "t21"]);
        assert_eq!(names(&out["c1"]), ["t12", "t22"]);
    }

    #[test]
    fn roundrobin_deals_partitions_in_turn_to_subscribers_only() {
        let m = members(&[("c0", &["t1", "t2"]), ("c1", &["t1"])]);
        let out = Assignor::RoundRobin.assign(&m, &parts(&[("t1", 3), ("t2", 2)]));
        assert_eq!(names(&out["c0"]), ["t10", "t12", "t20", "t21"]);
        assert_eq!(names(&out["c1"]), ["t11"]);
    }

    #[test]
    fn assignors_cover_every_partition_exactly_once() {
        let m = members(&[("a", &["x"]), ("b", &["x"]), ("c", &["x"])]);
        for assignor in [Assignor::Range, Assignor::RoundRobin] {
            for n in 0..10 {
                let out = assignor.assign(&m, &parts(&[("x", n)]));
                let all: Vec<&TopicPartition> = out.values().flatten().collect();
                let unique: BTreeSet<&TopicPartition> = all.iter().copied().collect();
                assert_eq!(all.len(), n as usize, "{assignor:?} n={n}");
                assert_eq!(unique.len(), n as usize, "{assignor:?} n={n}: no partition twice");
            }
        }
    }

    #[test]
    fn subscription_and_assignment_bytes_are_kafkas() {
        // Bytes as Kafka's ConsumerProtocol v0 writes them.
        let sub = encode_subscription(&["ab".to_string()]);
        assert_eq!(&sub[..], b"\x00\x00\x00\x00\x00\x01\x00\x02ab\xff\xff\xff\xff");
        assert_eq!(decode_subscription(&sub), Ok(vec!["ab".to_string()]));
        let set: BTreeSet<TopicPartition> = [TopicPartition::new("t", 1), TopicPartition::new("t", 4)].into();
        let a = encode_assignment(&set);
        assert_eq!(
            &a[..],
            b"\x00\x00\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x04\xff\xff\xff\xff"
        );
        assert_eq!(decode_assignment(&a), Ok(set));
        // A v1 subscription (owned partitions appended) decodes to its topics.
        let mut v1 = sub.to_vec();
        v1[1] = 1;
        v1.extend_from_slice(b"\x00\x00\x00\x00");
        assert_eq!(decode_subscription(&Bytes::from(v1)), Ok(vec!["ab".to_string()]));
        // Garbage is an error, not a panic.
        assert!(decode_assignment(&Bytes::from_static(b"\x00\x00\x7f\xff\xff\xff")).is_err());
        assert!(decode_subscription(&Bytes::from_static(b"\x00")).is_err());
    }
}
