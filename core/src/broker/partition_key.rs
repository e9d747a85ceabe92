//! Looking up `(topic, partition)` maps by a borrowed topic name.
//!
//! The broker's partitions live in a [`PartitionMap`] (a map per topic). The producer
//! accumulator's maps are keyed by `(String, i32)`, and `BTreeMap::get` wants a `&Q` the key
//! borrows as; building a `(String, i32)` for every lookup allocated and freed the topic name on
//! every record. [`PartitionKey`] is that `Q`: both `(String, i32)` and
//! `(&str, i32)` are one, ordered as the tuples are (name, then partition), so
//! `map.get(&(topic, partition) as &dyn PartitionKey)` finds what `map.get(&(topic.to_string(),
//! partition))` found.

use std::borrow::Borrow;
use std::cmp::Ordering;

use crate::name_map::NameMap;

/// A partition's map key, owned or borrowed.
pub trait PartitionKey {
    fn parts(&self) -> (&str, i32);
}

impl PartitionKey for (String, i32) {
    fn parts(&self) -> (&str, i32) {
        (&self.0, self.1)
    }
}

impl PartitionKey for (&str, i32) {
    fn parts(&self) -> (&str, i32) {
        (self.0, self.1)
    }
}

impl<'a> Borrow<dyn PartitionKey + 'a> for (String, i32) {
    fn borrow(&self) -> &(dyn PartitionKey + 'a) {
        self
    }
}

impl PartialEq for dyn PartitionKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn PartitionKey + '_ {}

impl PartialOrd for dyn PartitionKey + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn PartitionKey + '_ {
    fn cmp(&self, other: &Self) -> Ordering {
        self.parts().cmp(&other.parts())
    }
}

/// A map keyed by `(topic, partition)`, ordered as a `BTreeMap<(String, i32), V>` is (name,
/// then partition), held as one map per topic: a lookup compares the topic's name with the few
/// topics' names once and then partition numbers, where the flat map compared names (through
/// [`PartitionKey`]'s dynamic calls) at every step of its search. The broker looks a partition up
/// several times per request (26 name comparisons a request with the flat map, measured).
///
/// The topics are a [`NameMap`]: a broker has a few (the benchmark's: its topic and
/// `__consumer_offsets`), so a lookup looks for an equal name from the first, and a name of
/// another length costs no byte comparison.
#[derive(Debug, Clone)]
pub struct PartitionMap<V> {
    topics: NameMap<Partitions<V>>,
}

/// One topic's partitions, sorted by number. A topic's partitions are numbered from 0 without
/// gaps (Kafka creates them so), so partition `p` is almost always at index `p`: a lookup checks
/// that slot first and searches only when it holds another partition (a gap or a negative number,
/// which only a test or a bad request makes). Why: the inner `BTreeMap<i32, V>` cost a search
/// of its node per lookup, and the broker looks partitions up ~74,000 times in a batched seed of
/// the benchmark (BENCHMARKS.md).
#[derive(Debug, Clone)]
struct Partitions<V> {
    sorted: Vec<(i32, V)>,
}

impl<V> Partitions<V> {
    /// Where `partition` is, or where it would go.
    fn find(&self, partition: i32) -> Result<usize, usize> {
        if let Ok(at) = usize::try_from(partition) {
            if self.sorted.get(at).is_some_and(|&(p, _)| p == partition) {
                return Ok(at);
            }
        }
        self.sorted.binary_search_by_key(&partition, |&(p, _)| p)
    }

    fn get(&self, partition: i32) -> Option<&V> {
        let at = self.find(partition).ok()?;
        Some(&self.sorted[at].1)
    }

    fn get_mut(&mut self, partition: i32) -> Option<&mut V> {
        let at = self.find(partition).ok()?;
        Some(&mut self.sorted[at].1)
    }

    fn insert(&mut self, partition: i32, value: V) -> Option<V> {
        match self.find(partition) {
            Ok(at) => Some(std::mem::replace(&mut self.sorted[at].1, value)),
            Err(at) => {
                self.sorted.insert(at, (partition, value));
                None
            }
        }
    }

    fn remove(&mut self, partition: i32) -> Option<V> {
        let at = self.find(partition).ok()?;
        Some(self.sorted.remove(at).1)
    }
}

impl<V> Default for PartitionMap<V> {
    fn default() -> Self {
        Self { topics: NameMap::new() }
    }
}

impl<V> PartitionMap<V> {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many partitions (a sum over the topics: asked only when a topic is created).
    pub fn len(&self) -> usize {
        self.topics.values().map(|parts| parts.sorted.len()).sum()
    }

    pub fn get(&self, topic: &str, partition: i32) -> Option<&V> {
        self.topics.get(topic)?.get(partition)
    }

    pub fn get_mut(&mut self, topic: &str, partition: i32) -> Option<&mut V> {
        self.topics.get_mut(topic)?.get_mut(partition)
    }

    pub fn contains_key(&self, topic: &str, partition: i32) -> bool {
        self.get(topic, partition).is_some()
    }

    /// Whether any partition of `topic` is here.
    pub fn has_topic(&self, topic: &str) -> bool {
        self.topics.find(topic).is_ok()
    }

    /// Inserts `value` at `(topic, partition)`, returning the value it replaced.
    pub fn insert(&mut self, topic: &str, partition: i32, value: V) -> Option<V> {
        match self.topics.find(topic) {
            Ok(at) => self.topics.at_mut(at).insert(partition, value),
            Err(at) => {
                let parts = Partitions {
                    sorted: vec![(partition, value)],
                };
                self.topics.insert_at(at, topic, parts);
                None
            }
        }
    }

    pub fn remove(&mut self, topic: &str, partition: i32) -> Option<V> {
        let at = self.topics.find(topic).ok()?;
        let parts = self.topics.at_mut(at);
        let old = parts.remove(partition)?;
        if parts.sorted.is_empty() {
            self.topics.remove_at(at);
        }
        Some(old)
    }

    /// Every entry in `(topic, partition)` order.
    pub fn iter(&self) -> impl Iterator<Item = ((&String, &i32), &V)> {
        self.topics
            .iter()
            .flat_map(|(topic, parts)| parts.sorted.iter().map(move |(p, v)| ((topic, p), v)))
    }

    /// Every entry in `(topic, partition)` order, mutable.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = ((&String, &i32), &mut V)> {
        self.topics
            .iter_mut()
            .flat_map(|(topic, parts)| parts.sorted.iter_mut().map(move |(p, v)| ((topic, &*p), v)))
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.topics
            .values()
            .flat_map(|parts| parts.sorted.iter().map(|(_, v)| v))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{PartitionKey, PartitionMap};

    #[test]
    fn borrowed_keys_find_what_owned_keys_find() {
        let names = ["a", "events", "events-1", "eventz", "__consumer_offsets"];
        let mut map = BTreeMap::new();
        for (i, name) in names.iter().enumerate() {
            for p in [-1, 0, 1, 10] {
                map.insert((name.to_string(), p), i32::try_from(i).expect("small") * 100 + p);
            }
        }
        for name in names.iter().copied().chain(["", "event", "events-0", "zz"]) {
            for p in [-2, -1, 0, 1, 2, 10, 11] {
                let owned = map.get(&(name.to_string(), p));
                assert_eq!(map.get(&(name, p) as &dyn PartitionKey), owned, "{name}/{p}");
            }
        }
    }

    /// The two-level map against the flat map it replaced: the same answers to every lookup and
    /// the same order, over a run of inserts and removes drawn from a fixed seed.
    #[test]
    fn partition_map_answers_and_orders_as_the_flat_map_does() {
        // Few topics (found by comparing names from the first) and more than `NameMap::SCAN_MAX`
        // (a binary search).
        compare_with_the_flat_map(&["a", "events", "events-1", "eventz", "__consumer_offsets", ""]);
        let many: Vec<String> = (0..12).map(|i| format!("t{}", 11 - i)).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(many.len() > crate::name_map::NameMap::<u64>::SCAN_MAX);
        compare_with_the_flat_map(&many);
    }

    fn compare_with_the_flat_map(names: &[&str]) {
        let mut flat: BTreeMap<(String, i32), u64> = BTreeMap::new();
        let mut map: PartitionMap<u64> = PartitionMap::new();
        let mut draws = crate::seeded::Draws::new(7);
        let mut draw = |n: u64| draws.below(n);
        let (mut lookups, mut removed, mut emptied) = (0, 0, 0);
        for step in 0..4_000u64 {
            let name = names[draw(names.len() as u64) as usize];
            let p = draw(6) as i32 - 1;
            // Phases of mostly inserts and mostly removes, so topics fill up and empty again.
            let removing = (step / 500) % 2 == 1;
            if (draw(3) == 0) != removing {
                let expected = flat.remove(&(name.to_string(), p));
                removed += usize::from(expected.is_some());
                assert_eq!(map.remove(name, p), expected, "remove {name}/{p}");
                emptied += usize::from(expected.is_some() && !flat.keys().any(|(t, _)| t == name));
            } else {
                assert_eq!(
                    map.insert(name, p, step),
                    flat.insert((name.to_string(), p), step),
                    "insert {name}/{p}"
                );
            }
            for probe in names.iter().copied().chain(["event", "zz"]) {
                assert_eq!(
                    map.has_topic(probe),
                    flat.keys().any(|(t, _)| t == probe),
                    "has {probe}"
                );
                for q in -2..12 {
                    let expected = flat.get(&(probe.to_string(), q));
                    assert_eq!(map.get(probe, q), expected, "get {probe}/{q}");
                    assert_eq!(map.contains_key(probe, q), expected.is_some());
                    lookups += 1;
                }
            }
            assert_eq!(map.len(), flat.len());
            let ours: Vec<_> = map.iter().map(|((t, p), v)| (t.clone(), *p, *v)).collect();
            let theirs: Vec<_> = flat.iter().map(|((t, p), v)| (t.clone(), *p, *v)).collect();
            assert_eq!(ours, theirs, "order after step {step}");
        }
        for (_, v) in map.iter_mut() {
            *v += 1;
        }
        assert!(map.values().zip(flat.values()).all(|(a, b)| *a == b + 1));
        println!("{lookups} lookups, {removed} removals and {emptied} emptied topics compared");
        assert!(
            emptied > 0 && !flat.is_empty(),
            "the run both emptied topics and kept entries"
        );
    }
}
