//! The balancing planner: a pure function from the replica placement (and each partition's
//! size) to the reassignments that spread it evenly, used when brokers join or leave
//! (decommission, `auto.rebalance.enable`-style balancing).
//!
//! In order, each stage keeping what the previous one achieved:
//! 1. Replicas on brokers outside `brokers` (decommissioned or gone) move to the broker with the
//!    fewest replicas (then fewest bytes, then lowest id) that the partition does not use yet,
//!    in the same position (so a moved preferred leader is replaced as preferred leader).
//! 2. Replica counts: while the most loaded broker holds two or more replicas more than the
//!    least loaded, one replica moves from the former to the latter; of the partitions that
//!    allow it, the one whose size best halves their byte difference.
//! 3. Preferred leaders (first replicas): while some broker leads two or more partitions more
//!    than another replica of one of its partitions, the two swap places in that partition's
//!    list (no data moves; a preferred-leader election then moves leadership).
//!
//! Every loop is bounded by `moves_max` (and by the partition count). The result lists only
//! partitions whose replica list changed, with the new list.

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::BrokerId;

/// A partition: topic and index.
pub type PartitionKey = (String, i32);

/// What the planner proposes: `(partition, new replica list)`.
pub type Plan = BTreeMap<PartitionKey, Vec<BrokerId>>;

struct Load<'a> {
    brokers: &'a BTreeSet<BrokerId>,
    bytes: &'a BTreeMap<PartitionKey, u64>,
    placement: BTreeMap<PartitionKey, Vec<BrokerId>>,
}

impl Load<'_> {
    fn size(&self, p: &PartitionKey) -> u64 {
        self.bytes.get(p).copied().unwrap_or(0)
    }

    /// (replica count, bytes) per target broker.
    fn per_broker(&self) -> BTreeMap<BrokerId, (usize, u64)> {
        let mut out: BTreeMap<BrokerId, (usize, u64)> = self.brokers.iter().map(|&b| (b, (0, 0))).collect();
        for (p, replicas) in &self.placement {
            for r in replicas {
                if let Some(e) = out.get_mut(r) {
                    e.0 += 1;
                    e.1 = e.1.saturating_add(self.size(p));
                }
            }
        }
        out
    }

    fn leaders(&self) -> BTreeMap<BrokerId, usize> {
        let mut out: BTreeMap<BrokerId, usize> = self.brokers.iter().map(|&b| (b, 0)).collect();
        for replicas in self.placement.values() {
            if let Some(n) = replicas.first().and_then(|l| out.get_mut(l)) {
                *n += 1;
            }
        }
        out
    }
}

/// Plans the moves for `placement` over `brokers` (see the module comment). `bytes` is each
/// partition's size (absent: 0). At most `moves_max` replica moves and swaps in all.
pub fn plan(
    brokers: &BTreeSet<BrokerId>,
    placement: &BTreeMap<PartitionKey, Vec<BrokerId>>,
    bytes: &BTreeMap<PartitionKey, u64>,
    moves_max: usize,
) -> Plan {
    let mut load = Load {
        brokers,
        bytes,
        placement: placement.clone(),
    };
    let mut budget = moves_max;
    load.evacuate(&mut budget);
    load.even_replicas(&mut budget);
    load.even_leaders(&mut budget);
    load.changes(placement)
}

/// Stage 1 alone: the moves that empty the brokers outside `brokers` (decommission), leaving
/// every other replica where it is.
pub fn evacuate(
    brokers: &BTreeSet<BrokerId>,
    placement: &BTreeMap<PartitionKey, Vec<BrokerId>>,
    bytes: &BTreeMap<PartitionKey, u64>,
    moves_max: usize,
) -> Plan {
    let mut load = Load {
        brokers,
        bytes,
        placement: placement.clone(),
    };
    let mut budget = moves_max;
    load.evacuate(&mut budget);
    load.changes(placement)
}

impl Load<'_> {
    fn changes(self, before: &BTreeMap<PartitionKey, Vec<BrokerId>>) -> Plan {
        self.placement
            .into_iter()
            .filter(|(k, v)| before.get(k) != Some(v))
            .collect()
    }

    fn evacuate(&mut self, budget: &mut usize) {
        let brokers = self.brokers;
        let load = self;
        let keys: Vec<PartitionKey> = load.placement.keys().cloned().collect();
        for key in &keys {
            for i in 0..load.placement[key].len() {
                if *budget == 0 {
                    break;
                }
                let current = load.placement[key][i];
                if brokers.contains(&current) {
                    continue;
                }
                let per = load.per_broker();
                let used = &load.placement[key];
                let Some((&to, _)) = per
                    .iter()
                    .filter(|(b, _)| !used.contains(b))
                    .min_by_key(|(b, (n, size))| (*n, *size, **b))
                else {
                    continue; // every wanted broker already holds this partition
                };
                load.placement.get_mut(key).expect("key from placement")[i] = to;
                *budget -= 1;
            }
        }
    }

    fn even_replicas(&mut self, budget: &mut usize) {
        let load = self;
        while *budget > 0 {
            let per = load.per_broker();
            let (Some((&hi, &(hi_n, hi_b))), Some((&lo, &(lo_n, lo_b)))) = (
                per.iter()
                    .max_by_key(|(b, (n, size))| (*n, *size, std::cmp::Reverse(**b))),
                per.iter().min_by_key(|(b, (n, size))| (*n, *size, **b)),
            ) else {
                break;
            };
            if hi_n < lo_n + 2 {
                break;
            }
            let half = hi_b.saturating_sub(lo_b) / 2;
            let candidate = load
                .placement
                .iter()
                .filter(|(_, r)| r.contains(&hi) && !r.contains(&lo))
                .min_by_key(|(p, _)| (load.size(p).abs_diff(half), (*p).clone()))
                .map(|(p, _)| p.clone());
            let Some(key) = candidate else { break };
            let replicas = load.placement.get_mut(&key).expect("chosen from placement");
            for r in replicas.iter_mut() {
                if *r == hi {
                    *r = lo;
                }
            }
            *budget -= 1;
        }
    }

    /// Moves one preferred leadership at a time from a most-leading broker to one leading two or
    /// more fewer, along a chain of swaps found breadth-first: a partition led by the first
    /// broker of the chain names the second as a follower, and so on, so every broker between
    /// gives one leadership and takes one. Stops when no such chain exists.
    fn even_leaders(&mut self, budget: &mut usize) {
        while *budget > 0 {
            let leaders = self.leaders();
            let Some(top) = leaders.values().max().copied() else {
                break;
            };
            let chain = leaders
                .iter()
                .filter(|(_, n)| **n == top)
                .find_map(|(&from, _)| self.leader_chain(&leaders, from, top));
            let Some(chain) = chain else { break };
            for (key, j) in chain {
                self.placement.get_mut(&key).expect("found in placement").swap(0, j);
                *budget = budget.saturating_sub(1);
            }
        }
    }

    /// The swaps `(partition, follower index)` that pass one leadership from `from` (leading
    /// `top`) to a broker leading at most `top - 2`; `None` when none is reachable.
    fn leader_chain(
        &self,
        leaders: &BTreeMap<BrokerId, usize>,
        from: BrokerId,
        top: usize,
    ) -> Option<Vec<(PartitionKey, usize)>> {
        let mut prev: BTreeMap<BrokerId, (BrokerId, PartitionKey, usize)> = BTreeMap::new();
        let mut seen = BTreeSet::from([from]);
        let mut queue = std::collections::VecDeque::from([from]);
        while let Some(b) = queue.pop_front() {
            if leaders.get(&b).is_some_and(|n| n + 2 <= top) {
                let mut chain = Vec::new();
                let mut at = b;
                while at != from {
                    let (back, key, j) = prev.get(&at).cloned().expect("every reached broker has a predecessor");
                    chain.push((key, j));
                    at = back;
                }
                return Some(chain);
            }
            for (key, replicas) in &self.placement {
                if replicas.first() != Some(&b) {
                    continue;
                }
                for (j, r) in replicas.iter().enumerate().skip(1) {
                    if leaders.contains_key(r) && seen.insert(*r) {
                        prev.insert(*r, (b, key.clone(), j));
                        queue.push_back(*r);
                    }
                }
            }
        }
        None
    }
}

/// The spread a placement has over `brokers`: (max - min) of replica counts and of preferred
/// leader counts, for checkers and tests.
pub fn spread(brokers: &BTreeSet<BrokerId>, placement: &BTreeMap<PartitionKey, Vec<BrokerId>>) -> (usize, usize) {
    let empty = BTreeMap::new();
    let load = Load {
        brokers,
        bytes: &empty,
        placement: placement.clone(),
    };
    let counts: Vec<usize> = load.per_broker().values().map(|(n, _)| *n).collect();
    let leaders: Vec<usize> = load.leaders().values().copied().collect();
    let range = |v: &[usize]| v.iter().max().copied().unwrap_or(0) - v.iter().min().copied().unwrap_or(0);
    (range(&counts), range(&leaders))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::controller::assign_replicas;

    fn ids(n: i32) -> BTreeSet<BrokerId> {
        (0..n).map(BrokerId).collect()
    }

    fn placement(brokers: i32, partitions: i32, rf: usize) -> BTreeMap<PartitionKey, Vec<BrokerId>> {
        let list: Vec<BrokerId> = ids(brokers).into_iter().collect();
        assign_replicas(&list, partitions, rf, 0, 0)
            .into_iter()
            .map(|(p, r)| (("t".to_string(), p), r))
            .collect()
    }

    fn apply(
        mut placement: BTreeMap<PartitionKey, Vec<BrokerId>>,
        plan: &Plan,
    ) -> BTreeMap<PartitionKey, Vec<BrokerId>> {
        for (k, v) in plan {
            placement.insert(k.clone(), v.clone());
        }
        placement
    }

    #[test]
    fn growing_three_to_five_brokers_evens_replicas_and_leaders() {
        let before = placement(3, 10, 3);
        let five = ids(5);
        println!("3 brokers -> 5: spread before {:?}", spread(&five, &before));
        let moves = plan(&five, &before, &BTreeMap::new(), 1_000);
        let after = apply(before.clone(), &moves);
        println!(
            "{} partitions change; spread after {:?}",
            moves.len(),
            spread(&five, &after)
        );
        assert!(spread(&five, &before).0 > 1, "the control: unbalanced before");
        let (replicas, leaders) = spread(&five, &after);
        assert!(replicas <= 1 && leaders <= 1, "spread {replicas} {leaders}");
        assert!(
            plan(&five, &after, &BTreeMap::new(), 1_000).is_empty(),
            "a balanced plan is stable"
        );
    }

    #[test]
    fn a_decommissioned_broker_is_emptied_without_reusing_a_replica() {
        let before = placement(5, 12, 3);
        let remaining: BTreeSet<BrokerId> = ids(5).into_iter().filter(|b| *b != BrokerId(4)).collect();
        let after = apply(before.clone(), &plan(&remaining, &before, &BTreeMap::new(), 1_000));
        for (k, r) in &after {
            assert!(!r.contains(&BrokerId(4)), "{k:?} still on broker 4");
            let distinct: BTreeSet<_> = r.iter().collect();
            assert_eq!(distinct.len(), 3, "{k:?} {r:?}");
        }
        let (replicas, leaders) = spread(&remaining, &after);
        println!("5 -> 4 brokers: spread after {replicas} {leaders}");
        assert!(replicas <= 1 && leaders <= 1);
    }

    #[test]
    fn bytes_decide_between_equal_counts() {
        // Two brokers hold 2 replicas each, a third none: the move takes the partition whose size
        // best halves the byte gap.
        let placement: BTreeMap<PartitionKey, Vec<BrokerId>> = [
            (("t".to_string(), 0), vec![BrokerId(0)]),
            (("t".to_string(), 1), vec![BrokerId(0)]),
            (("t".to_string(), 2), vec![BrokerId(1)]),
        ]
        .into();
        let bytes = [(("t".to_string(), 0), 100), (("t".to_string(), 1), 900)].into();
        let moves = plan(&ids(2), &placement, &bytes, 10);
        assert_eq!(moves.len(), 0, "counts 2 vs 1 are already within one");
        let moves = plan(&ids(3), &placement, &bytes, 10);
        println!("{moves:?}");
        assert_eq!(moves.get(&("t".to_string(), 0)), Some(&vec![BrokerId(2)]));
    }

    proptest! {
        #[test]
        fn any_placement_ends_within_one(brokers in 2i32..7, partitions in 1i32..40, rf in 1usize..4, shrink in any::<bool>()) {
            let rf = rf.min(usize::try_from(brokers).expect("positive") - usize::from(shrink));
            prop_assume!(rf >= 1);
            let before = placement(brokers, partitions, rf);
            let target: BTreeSet<BrokerId> = if shrink { ids(brokers - 1) } else { ids(brokers + 1) };
            let after = apply(before.clone(), &plan(&target, &before, &BTreeMap::new(), 10_000));
            for r in after.values() {
                prop_assert!(r.iter().all(|b| target.contains(b)));
                prop_assert_eq!(r.iter().collect::<BTreeSet<_>>().len(), rf);
            }
            let (replicas, leaders) = spread(&target, &after);
            prop_assert!(replicas <= 1, "replica spread {}", replicas);
            prop_assert!(leaders <= 1, "leader spread {}", leaders);
        }
    }
}
