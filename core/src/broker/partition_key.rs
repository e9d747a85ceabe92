//! Looking up the broker's `(topic, partition)` maps (and the producer accumulator's) by a
//! borrowed topic name.
//!
//! The maps are keyed by `(String, i32)`, and `BTreeMap::get` wants a `&Q` the key borrows as;
//! building a `(String, i32)` for every lookup allocated and freed the topic name on every
//! produce, fetch and replica step. [`PartitionKey`] is that `Q`: both `(String, i32)` and
//! `(&str, i32)` are one, ordered as the tuples are (name, then partition), so
//! `map.get(&(topic, partition) as &dyn PartitionKey)` finds what `map.get(&(topic.to_string(),
//! partition))` found.

use std::borrow::Borrow;
use std::cmp::Ordering;

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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::PartitionKey;

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
}
