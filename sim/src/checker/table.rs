//! Tables for the checker's per-record lookups: a slot for each key a history is expected to
//! hold, found by arithmetic, and a hash map for every other key.
//!
//! Why: the checker looked every final record, poll and acknowledgement up in hash maps, four
//! passes of tens of thousands of lookups a seed, 7% of a benchmark run's time. The keys it looks
//! up are dense: a partition's final read holds offsets from its first record to its last, and a
//! producer numbers its values from 0 up. A [`Layout`] gives each such key a slot of its own; a
//! key with none (a corrupted value, an offset outside the final read) goes to the hash map.
//! Answers are those of one hash map of every key, whatever the history holds; only their cost
//! depends on it.

use std::collections::hash_map::Entry;
use std::hash::Hash;

use fxhash::FxHashMap;

use crate::history::{Partition, Value};

/// A key that names a group (a partition, a producer) and a place in it (an offset, a sequence
/// number), or that has no group.
pub(super) trait Dense: Copy + Eq + Hash {
    fn group_and_place(self) -> Option<(usize, i64)>;
}

impl Dense for (Partition, i64) {
    /// A group per (topic, partition index below 128): the topic's place times 128 plus the index.
    fn group_and_place(self) -> Option<(usize, i64)> {
        let index = usize::try_from(self.0.index).ok().filter(|&i| i < 128)?;
        Some((usize::from(self.0.topic) << 7 | index, self.1))
    }
}

impl Dense for Value {
    fn group_and_place(self) -> Option<(usize, i64)> {
        Some((usize::try_from(self.producer()).ok()?, i64::from(self.seq())))
    }
}

/// Groups numbered this high or higher get no slots (a corrupted producer number could be
/// anything up to 2^32).
const GROUPS_MAX: usize = 1 << 16;

/// Which keys have slots: per group, the places from `first` to `end` (excluded).
#[derive(Debug, Default)]
pub(super) struct Layout {
    groups: Vec<Option<Span>>,
    slots: usize,
}

#[derive(Clone, Copy, Debug)]
struct Span {
    first: i64,
    end: i64,
    base: usize,
}

impl Layout {
    /// Slots for every place of each group between the lowest and highest place `keys` name in
    /// it. A group whose span is more than twice its keys plus 64 (a corrupt key far off) gets
    /// none: its keys all go to the hash map.
    pub(super) fn covering<K: Dense>(keys: impl Iterator<Item = K>) -> Layout {
        // Per group: lowest place, highest place, keys seen.
        let mut seen: Vec<Option<(i64, i64, usize)>> = Vec::new();
        for (group, place) in keys.filter_map(Dense::group_and_place) {
            if group >= GROUPS_MAX {
                continue;
            }
            if seen.len() <= group {
                seen.resize(group + 1, None);
            }
            let s = seen[group].get_or_insert((place, place, 0));
            *s = (s.0.min(place), s.1.max(place), s.2 + 1);
        }
        let mut layout = Layout::default();
        for s in seen {
            let span = s.and_then(|(first, last, keys)| {
                let width = usize::try_from(last.checked_sub(first)?.checked_add(1)?).ok()?;
                let end = last.checked_add(1)?;
                (width <= keys.saturating_mul(2).saturating_add(64)).then_some((first, end, width))
            });
            layout.groups.push(span.map(|(first, end, width)| {
                let span = Span {
                    first,
                    end,
                    base: layout.slots,
                };
                layout.slots += width;
                span
            }));
        }
        layout
    }

    #[inline]
    fn slot(&self, key: impl Dense) -> Option<usize> {
        let (group, place) = key.group_and_place()?;
        let span = (*self.groups.get(group)?)?;
        if place < span.first || place >= span.end {
            return None;
        }
        Some(span.base + usize::try_from(place - span.first).ok()?)
    }
}

/// A map from keys to values, laid out by a [`Layout`]: a key with a slot lives there (no other
/// key has that slot: a layout maps the keys it covers one to one), any other in a hash map.
#[derive(Debug)]
pub(super) struct Table<'a, K, V> {
    layout: &'a Layout,
    slots: Vec<Option<V>>,
    rest: FxHashMap<K, V>,
}

impl<'a, K: Dense, V: Copy> Table<'a, K, V> {
    pub(super) fn new(layout: &'a Layout) -> Self {
        Table {
            layout,
            slots: vec![None; layout.slots],
            rest: FxHashMap::default(),
        }
    }

    /// Keeps `value` for `key` unless `key` already has one; returns the one it had. The slot
    /// path inline, the hash map's in a call.
    #[inline]
    pub(super) fn first(&mut self, key: K, value: V) -> Option<V> {
        match self.layout.slot(key) {
            Some(i) => {
                let had = self.slots[i];
                self.slots[i] = had.or(Some(value));
                had
            }
            None => self.first_in_rest(key, value),
        }
    }

    #[inline(never)]
    fn first_in_rest(&mut self, key: K, value: V) -> Option<V> {
        match self.rest.entry(key) {
            Entry::Occupied(e) => Some(*e.get()),
            Entry::Vacant(e) => {
                e.insert(value);
                None
            }
        }
    }

    /// Sets `key`'s value to `value`, as `HashMap::insert` does.
    #[inline]
    pub(super) fn insert(&mut self, key: K, value: V) {
        match self.layout.slot(key) {
            Some(i) => self.slots[i] = Some(value),
            None => {
                self.rest.insert(key, value);
            }
        }
    }

    #[inline]
    pub(super) fn get(&self, key: K) -> Option<V> {
        match self.layout.slot(key) {
            Some(i) => self.slots[i],
            None => self.get_in_rest(key),
        }
    }

    /// Out of line, as [`Self::first_in_rest`]: hashing a (topic, partition, offset) key inline
    /// made `get` too large to inline into the checker's loops.
    #[inline(never)]
    fn get_in_rest(&self, key: K) -> Option<V> {
        self.rest.get(&key).copied()
    }

    #[inline]
    pub(super) fn contains(&self, key: K) -> bool {
        self.get(key).is_some()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use madsim::rand::Rng;
    use rand_chacha::rand_core::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// A random key: mostly near the dense range a layout covers, sometimes far off or in a
    /// group with no slots, so slots, their edges and the hash map are all exercised.
    fn p(index: i32) -> Partition {
        Partition::of_first(index)
    }

    fn key(rng: &mut ChaCha8Rng) -> (Partition, i64) {
        match rng.gen_range(0..10) {
            0 => (p(rng.gen_range(-2..3)), rng.gen_range(-1_000..1_000_000)),
            1 => (p(i32::MAX), rng.gen_range(0..50)),
            2 => (
                Partition {
                    topic: 1,
                    index: rng.gen_range(0..3),
                },
                rng.gen_range(0..60),
            ),
            _ => (p(rng.gen_range(0..3)), rng.gen_range(0..60)),
        }
    }

    #[test]
    fn a_table_answers_as_a_hash_map_of_every_key_does() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut compared = 0;
        for round in 0..200 {
            // The layout from some keys; the table then sees others too.
            let layout_keys: Vec<_> = (0..rng.gen_range(0..80)).map(|_| key(&mut rng)).collect();
            let layout = Layout::covering(layout_keys.iter().copied());
            let (mut first, mut last) = (Table::new(&layout), Table::new(&layout));
            let (mut first_model, mut last_model) = (HashMap::new(), HashMap::new());
            for step in 0..300u32 {
                let (k, v) = (key(&mut rng), round * 1_000 + step);
                assert_eq!(first.first(k, v), first_model.get(&k).copied(), "first({k:?})");
                first_model.entry(k).or_insert(v);
                last.insert(k, v);
                last_model.insert(k, v);
                let probe = key(&mut rng);
                assert_eq!(first.get(probe), first_model.get(&probe).copied(), "get({probe:?})");
                assert_eq!(last.get(probe), last_model.get(&probe).copied(), "get({probe:?})");
                assert_eq!(last.contains(probe), last_model.contains_key(&probe));
                compared += 3;
            }
            // Every key either model holds, asked of both tables.
            for k in first_model.keys().chain(last_model.keys()) {
                assert_eq!(first.get(*k), first_model.get(k).copied(), "get({k:?})");
                assert_eq!(last.get(*k), last_model.get(k).copied(), "get({k:?})");
                compared += 2;
            }
        }
        println!("compared {compared} answers with a hash map's");
        assert!(compared > 0);
    }

    #[test]
    fn dense_keys_get_slots_and_a_far_off_key_leaves_its_group_to_the_hash_map() {
        let layout = Layout::covering([(p(0), 10), (p(0), 12), (p(2), 0)].into_iter());
        assert_eq!(layout.slots, 3 + 1);
        assert_eq!(layout.slot((p(0), 11)), Some(1));
        assert_eq!(layout.slot((p(2), 0)), Some(3));
        assert_eq!(layout.slot((p(0), 13)), None);
        assert_eq!(layout.slot((p(1), 0)), None);
        assert_eq!(layout.slot((p(-1), 0)), None);
        let far = Layout::covering([(p(0), 0), (p(0), 1_000_000), (p(1), 5)].into_iter());
        assert_eq!((far.slot((p(0), 0)), far.slot((p(1), 5))), (None, Some(0)));
        // Keys at the ends of i64 (a corrupted offset) get no slots and no overflow.
        let edge = Layout::covering([(p(0), i64::MAX), (p(1), i64::MIN), (p(1), i64::MIN + 1)].into_iter());
        assert_eq!(
            (edge.slot((p(0), i64::MAX)), edge.slot((p(1), i64::MIN + 1))),
            (None, Some(1))
        );
        let values = Layout::covering([Value::new(1, 0), Value::new(1, 1), Value::new(u32::MAX, 0)].into_iter());
        assert_eq!(values.slots, 2);
        assert_eq!(values.slot(Value::new(1, 1)), Some(1));
    }
}
