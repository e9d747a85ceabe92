//! A small map from names (topics, mostly) to values, for lookups on the hot path.
//!
//! Why: a broker, a producer or a fetcher holds one or two topics nearly always, and looks one up
//! for every record or request. A `BTreeMap<String, _>` compares bytes (a `memcmp` call) at each
//! step of its search, ~40-60 instructions a lookup even with one entry. Here the entries sit in
//! a vector sorted by name: the first two names are compared for equality where the lookup is
//! (with [`short_eq`], no `memcmp` for names up to 16 bytes; a name of another length costs no
//! byte comparison), the rest in a call, which scans up to [`NameMap::SCAN_MAX`] entries and
//! binary-searches beyond. The whole search inlined made every caller bigger; called, it cost a
//! call frame of six saved registers for a two-name scan (~50 instructions a lookup).
//!
//! Contract: the answers and the iteration order (by name) of a `BTreeMap<String, V>`.

use crate::short_eq;

#[derive(Debug, Clone)]
pub struct NameMap<V> {
    entries: Vec<(String, V)>,
}

impl<V> Default for NameMap<V> {
    fn default() -> Self {
        Self { entries: Vec::new() }
    }
}

impl<V> NameMap<V> {
    /// Up to this many entries, a lookup compares names for equality from the first.
    pub const SCAN_MAX: usize = 8;

    pub fn new() -> Self {
        Self::default()
    }

    /// Where `name` is, or where it would go.
    #[inline]
    pub fn find(&self, name: &str) -> Result<usize, usize> {
        for (at, (known, _)) in self.entries.iter().take(2).enumerate() {
            if short_eq::same(known, name) {
                return Ok(at);
            }
        }
        self.find_past_two(name)
    }

    /// [`Self::find`] when the first two names are not `name`.
    #[inline(never)]
    fn find_past_two(&self, name: &str) -> Result<usize, usize> {
        if self.entries.len() <= Self::SCAN_MAX {
            let mut past_two = self.entries.iter().skip(2);
            if let Some(at) = past_two.position(|(known, _)| short_eq::same(known, name)) {
                return Ok(at + 2);
            }
        }
        self.entries.binary_search_by(|(known, _)| known.as_str().cmp(name))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    #[inline]
    pub fn get(&self, name: &str) -> Option<&V> {
        let at = self.find(name).ok()?;
        Some(&self.entries[at].1)
    }

    #[inline]
    pub fn get_mut(&mut self, name: &str) -> Option<&mut V> {
        let at = self.find(name).ok()?;
        Some(&mut self.entries[at].1)
    }

    /// The value at `at`, a place [`Self::find`] returned `Ok` for.
    #[inline]
    pub fn at_mut(&mut self, at: usize) -> &mut V {
        &mut self.entries[at].1
    }

    /// Puts `name` with `value` at `at`, a place [`Self::find`] returned `Err` for.
    pub fn insert_at(&mut self, at: usize, name: &str, value: V) {
        self.entries.insert(at, (name.to_string(), value));
    }

    /// Sets `name`'s value, returning the one it replaced. The name is copied only when new.
    pub fn insert(&mut self, name: &str, value: V) -> Option<V> {
        match self.find(name) {
            Ok(at) => Some(std::mem::replace(&mut self.entries[at].1, value)),
            Err(at) => {
                self.insert_at(at, name, value);
                None
            }
        }
    }

    /// Removes the entry at `at`, a place [`Self::find`] returned `Ok` for.
    pub fn remove_at(&mut self, at: usize) -> V {
        self.entries.remove(at).1
    }

    pub fn remove(&mut self, name: &str) -> Option<V> {
        let at = self.find(name).ok()?;
        Some(self.remove_at(at))
    }

    /// Every entry in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &V)> {
        self.entries.iter().map(|(name, value)| (name, value))
    }

    /// Every entry in name order, the values mutable.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&String, &mut V)> {
        self.entries.iter_mut().map(|(name, value)| (&*name, value))
    }

    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.iter().map(|(_, value)| value)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::NameMap;

    /// Against `BTreeMap<String, _>`: the same answers to every lookup and the same order, over
    /// inserts and removes drawn from a fixed seed, with few names (scanned) and more than
    /// `SCAN_MAX` (binary search past the first two).
    #[test]
    fn answers_and_orders_as_a_btree_map() {
        let few = ["events", "a", "events-1", "eventz", "__consumer_offsets", ""];
        let many: Vec<String> = (0..12).map(|i| format!("t{}", 11 - i)).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(many.len() > NameMap::<u64>::SCAN_MAX);
        let mut compared = 0;
        for names in [&few[..], &many[..]] {
            let mut ours: NameMap<u64> = NameMap::new();
            let mut theirs: BTreeMap<String, u64> = BTreeMap::new();
            let mut draws = crate::seeded::Draws::new(11);
            let mut draw = |n: u64| draws.below(n);
            for step in 0..3_000u64 {
                let name = names[draw(names.len() as u64) as usize];
                // Phases of mostly inserts and mostly removes, so the map fills and empties.
                let removing = (step / 300) % 2 == 1;
                if (draw(3) == 0) != removing {
                    assert_eq!(ours.remove(name), theirs.remove(name), "remove {name}");
                } else {
                    assert_eq!(
                        ours.insert(name, step),
                        theirs.insert(name.to_string(), step),
                        "insert {name}"
                    );
                }
                for probe in names.iter().copied().chain(["event", "zz", "t"]) {
                    assert_eq!(ours.get(probe), theirs.get(probe), "get {probe} at step {step}");
                    assert_eq!(ours.find(probe).is_ok(), theirs.contains_key(probe));
                    compared += 1;
                }
                if let Some(v) = ours.get_mut(name) {
                    *v += 1;
                    *theirs.get_mut(name).expect("both have it") += 1;
                }
                assert_eq!(ours.len(), theirs.len());
                let a: Vec<(&String, &u64)> = ours.iter().collect();
                let b: Vec<(&String, &u64)> = theirs.iter().collect();
                assert_eq!(a, b, "order after step {step}");
            }
            for (_, v) in ours.iter_mut() {
                *v *= 2;
            }
            assert!(ours.values().zip(theirs.values()).all(|(a, b)| *a == 2 * b));
        }
        println!("{compared} lookups compared");
    }
}
