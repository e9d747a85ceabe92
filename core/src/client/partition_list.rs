//! The producer accumulator's partitions: `(topic, partition)` keys in one vector, sorted as a
//! `BTreeMap<(String, i32), V>` orders them (name, then partition).
//!
//! Why: the accumulator looks a record's partition up on every append, and each batch's several
//! times (drain, in-flight bookkeeping, acknowledgement). In the `BTreeMap` each lookup compared
//! names through a dynamic key (a `memcmp` call each). The broker's
//! [`PartitionMap`](crate::broker::partition_key::PartitionMap) measured worse here (a call
//! into the topic map and one into the partitions). A producer nearly always writes one topic,
//! whose partitions are numbered from 0 without gaps and, as the accumulator keeps its entries,
//! all here once used: partition `p` of the first topic sits at index `p`. A lookup checks that
//! slot (a number compare and a short name compare, inlined) and searches only when it holds
//! another key.
//!
//! Contract: the answers and the iteration order of a `BTreeMap<(String, i32), V>`.

use std::cmp::Ordering;

use crate::short_eq;

#[derive(Debug, Clone)]
pub struct PartitionList<V> {
    /// Sorted by (name, partition), each key once.
    entries: Vec<((String, i32), V)>,
}

impl<V> Default for PartitionList<V> {
    fn default() -> Self {
        Self { entries: Vec::new() }
    }
}

impl<V> PartitionList<V> {
    /// Up to this many entries, a lookup the guess missed compares keys for equality in turn.
    pub const SCAN_MAX: usize = 16;

    pub fn new() -> Self {
        Self::default()
    }

    /// Where `(topic, partition)` is, or where it would go.
    #[inline(always)]
    fn find(&self, topic: &str, partition: i32) -> Result<usize, usize> {
        if let Ok(at) = usize::try_from(partition) {
            if let Some(((name, p), _)) = self.entries.get(at) {
                if *p == partition && short_eq::same(name, topic) {
                    return Ok(at);
                }
            }
        }
        self.search(topic, partition)
    }

    /// [`Self::find`] past the guess: up to [`Self::SCAN_MAX`] entries compared for equality
    /// (numbers first: a name is compared only where the number matches), and a binary search
    /// for a longer list or a key not here (its place).
    #[inline(never)]
    fn search(&self, topic: &str, partition: i32) -> Result<usize, usize> {
        if self.entries.len() <= Self::SCAN_MAX {
            let found = (self.entries.iter()).position(|((name, p), _)| *p == partition && short_eq::same(name, topic));
            if let Some(at) = found {
                return Ok(at);
            }
        }
        self.entries
            .binary_search_by(|((name, p), _)| match name.as_str().cmp(topic) {
                Ordering::Equal => p.cmp(&partition),
                other => other,
            })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    #[inline]
    pub fn get(&self, topic: &str, partition: i32) -> Option<&V> {
        let at = self.find(topic, partition).ok()?;
        Some(&self.entries[at].1)
    }

    #[inline]
    pub fn get_mut(&mut self, topic: &str, partition: i32) -> Option<&mut V> {
        let at = self.find(topic, partition).ok()?;
        Some(&mut self.entries[at].1)
    }

    /// `(topic, partition)`'s value, made by `make` in its place when it has none (the name is
    /// copied then only).
    // Always: inlined where it is asked, the call's frame was a third of a lookup's cost.
    #[inline(always)]
    pub fn get_or_insert_with(&mut self, topic: &str, partition: i32, make: impl FnOnce() -> V) -> &mut V {
        let at = match self.find(topic, partition) {
            Ok(at) => at,
            Err(at) => self.insert_at(at, topic, partition, make()),
        };
        &mut self.entries[at].1
    }

    /// Sets `(topic, partition)`'s value, returning the one it replaced.
    pub fn insert(&mut self, topic: &str, partition: i32, value: V) -> Option<V> {
        match self.find(topic, partition) {
            Ok(at) => Some(std::mem::replace(&mut self.entries[at].1, value)),
            Err(at) => {
                self.insert_at(at, topic, partition, value);
                None
            }
        }
    }

    /// Puts a new key at `at`, where [`Self::find`] said it goes: out of line, so a lookup that
    /// finds its key carries none of the copy's code.
    #[cold]
    #[inline(never)]
    fn insert_at(&mut self, at: usize, topic: &str, partition: i32, value: V) -> usize {
        self.entries.insert(at, ((topic.to_string(), partition), value));
        at
    }

    pub fn remove(&mut self, topic: &str, partition: i32) -> Option<V> {
        let at = self.find(topic, partition).ok()?;
        Some(self.entries.remove(at).1)
    }

    /// Every entry in (name, partition) order.
    pub fn iter(&self) -> impl Iterator<Item = (&(String, i32), &V)> {
        self.entries.iter().map(|(key, value)| (key, value))
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|(_, value)| value)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.entries.iter_mut().map(|(_, value)| value)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::PartitionList;

    /// Against the map it stands for: the same answers to every lookup and the same order, over
    /// a run of inserts, gets-or-inserts and removes drawn from a fixed seed, with partitions
    /// numbered from 0 (the guessed slot right), with gaps and negative (the guess wrong), and
    /// names before and after each other.
    #[test]
    fn answers_and_orders_as_the_map_it_stands_for() {
        let names = ["events", "a", "events-1", "eventz", "__consumer_offsets", ""];
        let mut map: BTreeMap<(String, i32), u64> = BTreeMap::new();
        let mut list: PartitionList<u64> = PartitionList::new();
        let mut draws = crate::seeded::Draws::new(11);
        let mut draw = |n: u64| draws.below(n);
        let (mut lookups, mut hits, mut removed) = (0, 0, 0);
        for step in 0..3_000u64 {
            // The first name most of the time, as a producer of one topic.
            let name = if draw(2) == 0 {
                names[0]
            } else {
                names[draw(names.len() as u64) as usize]
            };
            let p = draw(8) as i32 - 1;
            match draw(5) {
                0 => {
                    let expected = map.remove(&(name.to_string(), p));
                    removed += usize::from(expected.is_some());
                    assert_eq!(list.remove(name, p), expected, "remove {name}/{p}");
                }
                1 | 2 => {
                    let theirs = *map.entry((name.to_string(), p)).or_insert(step);
                    let ours = list.get_or_insert_with(name, p, || step);
                    assert_eq!(*ours, theirs, "get_or_insert {name}/{p}");
                    *ours += 1;
                    *map.get_mut(&(name.to_string(), p)).expect("there") += 1;
                }
                _ => assert_eq!(
                    list.insert(name, p, step),
                    map.insert((name.to_string(), p), step),
                    "insert {name}/{p}"
                ),
            }
            for probe in names.iter().copied().chain(["event", "zz"]) {
                for q in -2..9 {
                    let expected = map.get(&(probe.to_string(), q)).copied();
                    assert_eq!(list.get(probe, q).copied(), expected, "get {probe}/{q}");
                    assert_eq!(list.get_mut(probe, q).map(|v| *v), expected, "get_mut {probe}/{q}");
                    lookups += 1;
                    hits += usize::from(expected.is_some());
                }
            }
            assert_eq!((list.len(), list.is_empty()), (map.len(), map.is_empty()));
            let ours: Vec<_> = list.iter().map(|(k, v)| (k.clone(), *v)).collect();
            let theirs: Vec<_> = map.iter().map(|(k, v)| (k.clone(), *v)).collect();
            assert_eq!(ours, theirs, "order after step {step}");
        }
        for v in list.values_mut() {
            *v += 1;
        }
        assert!(list.values().zip(map.values()).all(|(a, b)| *a == b + 1));
        assert_eq!(list.values().count(), map.len());
        println!("{lookups} lookups ({hits} found) and {removed} removals compared");
        assert!(
            hits > 0 && hits < lookups && removed > 0,
            "found and missed both, and removed"
        );
    }
}
