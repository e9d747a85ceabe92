//! A leader's followers of one partition, by broker id.
//!
//! A partition has replication-factor-minus-one followers: two or three. The leader looks one up
//! on every follower fetch and walks the ISR through them on every HW check (each follower fetch
//! and each append). In a `BTreeMap` each lookup was a node search of ~50 instructions, and the
//! HW check ~190 instructions a call (callgrind, a batched benchmark seed: 21,000 calls, 1.3% of
//! the seed); in a vector kept in id order it is a scan of a few entries. Iteration and `Debug`
//! are in id order, as the map's were.

use std::fmt;

use crate::ids::BrokerId;

#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Followers<V> {
    /// In ascending id order, each id once.
    entries: Vec<(BrokerId, V)>,
}

impl<V> Followers<V> {
    pub(crate) fn get(&self, id: &BrokerId) -> Option<&V> {
        self.entries.iter().find(|(k, _)| k == id).map(|(_, v)| v)
    }

    pub(crate) fn get_mut(&mut self, id: &BrokerId) -> Option<&mut V> {
        self.entries.iter_mut().find(|(k, _)| k == id).map(|(_, v)| v)
    }

    pub(crate) fn contains_key(&self, id: &BrokerId) -> bool {
        self.entries.iter().any(|(k, _)| k == id)
    }

    /// Keeps the followers `keep` accepts.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&BrokerId, &mut V) -> bool) {
        self.entries.retain_mut(|(k, v)| keep(k, v));
    }

    /// `id`'s entry, made by `make` (in its place in id order) if it has none.
    pub(crate) fn get_or_insert_with(&mut self, id: BrokerId, make: impl FnOnce() -> V) -> &mut V {
        let at = match self.entries.binary_search_by_key(&id, |(k, _)| *k) {
            Ok(at) => at,
            Err(at) => {
                self.entries.insert(at, (id, make()));
                at
            }
        };
        &mut self.entries[at].1
    }

    /// In ascending id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&BrokerId, &V)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }
}

/// As a map collects: in id order, the last value of an id given twice.
impl<V> FromIterator<(BrokerId, V)> for Followers<V> {
    fn from_iter<I: IntoIterator<Item = (BrokerId, V)>>(iter: I) -> Self {
        let mut entries: Vec<(BrokerId, V)> = iter.into_iter().collect();
        // Stable: of equal ids, the one given last stays last, and is the one kept.
        entries.sort_by_key(|(k, _)| *k);
        let mut kept: Vec<(BrokerId, V)> = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            match kept.last_mut() {
                Some(last) if last.0 == k => last.1 = v,
                _ => kept.push((k, v)),
            }
        }
        Followers { entries: kept }
    }
}

/// As a map prints (`{BrokerId(1): …}`).
impl<V: fmt::Debug> fmt::Debug for Followers<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Every operation the leader uses, against a `BTreeMap` given the same steps: the same
    /// lookups, the same order, the same `Debug`.
    #[test]
    fn behaves_as_the_map_it_replaced() {
        let given = [(3, 'a'), (1, 'b'), (3, 'c'), (2, 'd')];
        let mut f: Followers<char> = given.iter().map(|&(k, v)| (BrokerId(k), v)).collect();
        let mut m: BTreeMap<BrokerId, char> = given.iter().map(|&(k, v)| (BrokerId(k), v)).collect();
        let same = |f: &Followers<char>, m: &BTreeMap<BrokerId, char>| {
            assert_eq!(f.iter().collect::<Vec<_>>(), m.iter().collect::<Vec<_>>());
            assert_eq!(format!("{f:?}"), format!("{m:?}"));
            for id in 0..6 {
                let id = BrokerId(id);
                assert_eq!(
                    (f.get(&id), f.contains_key(&id)),
                    (m.get(&id), m.contains_key(&id)),
                    "{id:?}"
                );
            }
        };
        same(&f, &m);
        *f.get_mut(&BrokerId(2)).expect("2") = 'x';
        *m.get_mut(&BrokerId(2)).expect("2") = 'x';
        assert_eq!(f.get_mut(&BrokerId(9)), None);
        same(&f, &m);
        for id in [0, 5, 2] {
            *f.get_or_insert_with(BrokerId(id), || 'n') = 'y';
            *m.entry(BrokerId(id)).or_insert('n') = 'y';
        }
        same(&f, &m);
        f.retain(|k, v| k.0 != 1 && *v != 'c');
        m.retain(|k, v| k.0 != 1 && *v != 'c');
        same(&f, &m);
        println!("{f:?}");
        assert_eq!(f.iter().map(|(k, _)| k.0).collect::<Vec<_>>(), [0, 2, 5]);
    }
}
