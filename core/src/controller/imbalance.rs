//! `auto.leader.rebalance.enable` as Kafka's controller does it: every
//! `leader.imbalance.check.interval.seconds` ([`ImbalanceSchedule`]), for each broker, the share
//! of the partitions whose preferred (first) replica it is but which another broker (or nobody)
//! leads; when that share exceeds `leader.imbalance.per.broker.percentage`, that broker's
//! preferred leaderships move back ([`Controller::leader_imbalance_elections`]), through the
//! same preferred leader election ElectLeaders runs, so the same safety rules apply (the
//! preferred replica must be live, in the ISR and not restarted since the state was written).
//!
//! Contract: decided from the view alone, like every controller decision; the schedule takes
//! `now` as an argument. As in Kafka, nothing moves while a reassignment is in flight (its own
//! steps move leaderships) and topics queued for deletion are left out of the counts.

use std::collections::BTreeMap;

use super::{ClusterView, Controller, PartitionChange};
use crate::ids::BrokerId;

/// `leader.imbalance.per.broker.percentage`: Kafka's default.
pub const LEADER_IMBALANCE_PER_BROKER_PERCENTAGE_DEFAULT: u32 = 10;
/// `leader.imbalance.check.interval.seconds`: Kafka's default, 300 s.
pub const LEADER_IMBALANCE_CHECK_INTERVAL_MS_DEFAULT: u64 = 300_000;
/// How long after taking office a controller first checks (Kafka's controller schedules its
/// first check 5 s after it becomes controller), or the interval when that is shorter.
const FIRST_CHECK_DELAY_MS: u64 = 5_000;

/// One broker's preferred leaderships: how many partitions name it first, and how many of those
/// it does not lead.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PreferredLeaderships {
    pub preferred: usize,
    pub led_elsewhere: usize,
}

impl PreferredLeaderships {
    /// Kafka's test: `led_elsewhere / preferred > percentage / 100`, in integers.
    fn exceeds(self, percentage: u32) -> bool {
        self.preferred > 0 && (self.led_elsewhere as u128) * 100 > (percentage as u128) * (self.preferred as u128)
    }
}

/// Per broker, its preferred leaderships over the topics not queued for deletion.
pub fn preferred_leaderships(view: &ClusterView) -> BTreeMap<BrokerId, PreferredLeaderships> {
    let mut counts: BTreeMap<BrokerId, PreferredLeaderships> = BTreeMap::new();
    for (name, topic) in &view.topics {
        if view.delete_requests.contains(name) {
            continue;
        }
        for (p, replicas) in &topic.record.assignment {
            let Some(&preferred) = replicas.first() else {
                continue;
            };
            let count = counts.entry(preferred).or_default();
            count.preferred += 1;
            // No state yet, or no leader: not led by its preferred replica (Kafka counts an
            // offline partition, leader -1, the same way).
            if topic.partitions.get(p).and_then(|s| s.value.leader) != Some(preferred) {
                count.led_elsewhere += 1;
            }
        }
    }
    counts
}

impl Controller {
    /// The preferred leader elections of the brokers whose leader imbalance exceeds
    /// `leader.imbalance.per.broker.percentage` (see the module comment); none while a
    /// reassignment is in flight.
    pub fn leader_imbalance_elections(&self, view: &ClusterView) -> Vec<PartitionChange> {
        if view.topics.values().any(|t| !t.record.reassigning.is_empty()) {
            return Vec::new();
        }
        let percentage = self.config.leader_imbalance_per_broker_percentage;
        let imbalanced: Vec<BrokerId> = preferred_leaderships(view)
            .into_iter()
            .filter(|(_, count)| count.exceeds(percentage))
            .map(|(b, _)| b)
            .collect();
        if imbalanced.is_empty() {
            return Vec::new();
        }
        self.preferred_leader_elections(view)
            .into_iter()
            .filter(|change| change.after.leader.is_some_and(|l| imbalanced.contains(&l)))
            .collect()
    }
}

/// When the controller next checks the leader imbalance: `FIRST_CHECK_DELAY_MS` (or the interval,
/// if shorter) after it took office, then every interval. One per term of office.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImbalanceSchedule {
    next_ms: u64,
    interval_ms: u64,
}

impl ImbalanceSchedule {
    /// A schedule for a controller elected at `elected_ms` (monotonic).
    pub fn new(elected_ms: u64, interval_ms: u64) -> ImbalanceSchedule {
        ImbalanceSchedule {
            next_ms: elected_ms.saturating_add(FIRST_CHECK_DELAY_MS.min(interval_ms)),
            interval_ms,
        }
    }

    /// When the next check is due (monotonic ms).
    pub fn next_ms(&self) -> u64 {
        self.next_ms
    }

    /// Whether a check is due at `now_ms`; when it is, the next one is an interval later.
    pub fn due(&mut self, now_ms: u64) -> bool {
        if now_ms < self.next_ms {
            return false;
        }
        self.next_ms = now_ms.saturating_add(self.interval_ms);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::topic::TopicId;
    use crate::cluster::{PartitionState, Reassignment, TopicRecord};
    use crate::controller::tests::{b, controller, fenced};
    use crate::controller::{ControllerConfig, TopicView, Versioned};
    use crate::ids::LeaderEpoch;

    /// Topic `t`: 20 partitions on brokers 0..4 (rotated, rf 3), so each broker is the preferred
    /// replica of 5; all brokers live, every replica in the ISR, each partition led by its
    /// preferred replica except those in `moved`, led by their second replica.
    fn view_with_moved(moved: &[i32]) -> ClusterView {
        let assignment: BTreeMap<i32, Vec<BrokerId>> =
            (0..20).map(|p| (p, b(&[p % 4, (p + 1) % 4, (p + 2) % 4]))).collect();
        let partitions = assignment
            .iter()
            .map(|(&p, r)| {
                let leader = if moved.contains(&p) { r[1] } else { r[0] };
                let value = PartitionState {
                    leader: Some(leader),
                    leader_epoch: LeaderEpoch(3),
                    isr: r.clone(),
                    controller_epoch: 6,
                    elr: Vec::new(),
                };
                (p, Versioned { value, version: 4 })
            })
            .collect();
        let record = TopicRecord {
            topic_id_hex: TopicId::from_random(1, 2).to_hex(),
            assignment,
            reassigning: BTreeMap::new(),
            configs: BTreeMap::new(),
        };
        ClusterView {
            live_brokers: b(&[0, 1, 2, 3]).into_iter().collect(),
            topics: [(
                "t".to_string(),
                TopicView {
                    record,
                    record_version: 2,
                    partitions,
                },
            )]
            .into(),
            ..ClusterView::default()
        }
    }

    fn with_percentage(percentage: u32) -> Controller {
        Controller {
            config: ControllerConfig {
                leader_imbalance_per_broker_percentage: percentage,
                ..ControllerConfig::default()
            },
            ..controller()
        }
    }

    fn moved_partitions(changes: &[PartitionChange]) -> Vec<i32> {
        changes.iter().map(|c| c.partition).collect()
    }

    #[test]
    fn only_brokers_above_the_percentage_get_their_leaderships_back() {
        // Broker 0 prefers partitions 0, 4, 8, 12, 16; broker 1 prefers 1, 5, 9, 13, 17.
        // Broker 0 lost one of five (20%), broker 1 two of five (40%).
        let view = view_with_moved(&[0, 1, 5]);
        let counts = preferred_leaderships(&view);
        println!("preferred leaderships: {counts:?}");
        assert_eq!(
            counts[&BrokerId(0)],
            PreferredLeaderships {
                preferred: 5,
                led_elsewhere: 1
            }
        );
        assert_eq!(counts[&BrokerId(1)].led_elsewhere, 2);
        // 10% (Kafka's default): both exceed it, all three move back.
        let all = with_percentage(10).leader_imbalance_elections(&view);
        println!("at 10%: {:?}", moved_partitions(&all));
        assert_eq!(moved_partitions(&all), [0, 1, 5]);
        assert!(all
            .iter()
            .all(|c| fenced(&c.write) && c.after.leader == Some(BrokerId(c.partition % 4))));
        assert!(all.iter().all(|c| c.after.leader_epoch == LeaderEpoch(4)));
        // 20%: broker 0 is at 20%, not above it: only broker 1's two move.
        let above = with_percentage(20).leader_imbalance_elections(&view);
        println!("at 20%: {:?}", moved_partitions(&above));
        assert_eq!(moved_partitions(&above), [1, 5]);
        // 40%: nobody is above it: nothing moves.
        let none = with_percentage(40).leader_imbalance_elections(&view);
        println!("at 40%: {:?}", moved_partitions(&none));
        assert!(none.is_empty());
        // A balanced cluster: nothing at any percentage.
        assert!(with_percentage(0)
            .leader_imbalance_elections(&view_with_moved(&[]))
            .is_empty());
    }

    #[test]
    fn nothing_moves_while_a_reassignment_is_in_flight_and_the_safety_rules_hold() {
        let mut view = view_with_moved(&[0, 4, 8]);
        view.topics.get_mut("t").expect("t").record.reassigning.insert(
            3,
            Reassignment {
                adding: b(&[0]),
                removing: b(&[3]),
            },
        );
        let moving = with_percentage(10).leader_imbalance_elections(&view);
        println!("with a move in flight: {:?}", moved_partitions(&moving));
        assert!(moving.is_empty());
        // Broker 0 (60% imbalanced) out of partition 4's ISR: 0 and 8 move, 4 cannot.
        let mut view = view_with_moved(&[0, 4, 8]);
        view.topics
            .get_mut("t")
            .expect("t")
            .partitions
            .get_mut(&4)
            .expect("p4")
            .value
            .isr = b(&[1, 2]);
        let changes = with_percentage(10).leader_imbalance_elections(&view);
        println!("broker 0 out of 4's ISR: {:?}", moved_partitions(&changes));
        assert_eq!(moved_partitions(&changes), [0, 8]);
    }

    #[test]
    fn checks_five_seconds_after_election_then_every_interval() {
        let mut s = ImbalanceSchedule::new(1_000, 300_000);
        let due: Vec<u64> = [1_000, 5_999, 6_000, 6_001, 305_999, 306_000, 306_001]
            .into_iter()
            .filter(|&now| s.due(now))
            .collect();
        println!("due at {due:?}");
        assert_eq!(due, [6_000, 306_000]);
        // An interval shorter than the first delay is used from the start.
        let mut short = ImbalanceSchedule::new(0, 1_000);
        let due: Vec<u64> = (0..=3_000).step_by(500).filter(|&now| short.due(now)).collect();
        println!("1 s interval, due at {due:?}");
        assert_eq!(due, [1_000, 2_000, 3_000]);
    }
}
