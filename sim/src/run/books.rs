//! The workload's books: what it wrote down (the history the checker reads) and the sends still
//! waiting for an outcome, kept by the run's own thread.

use std::cell::RefCell;

use crate::history::{History, Partition, Value};

/// What the workload writes down: the history, and the sends without an outcome yet (a send's
/// outcome updates both).
#[derive(Default)]
pub(super) struct Books {
    pub(super) history: History,
    pub(super) pending: Pending,
}

thread_local! {
    /// This run's books. A run has its own OS thread (`world::run_seed_with`) and every node's
    /// tasks run on it, so the books need no lock: a mutex took two atomic operations at each
    /// of a record's three entries. `simulate` starts them and takes them at its end.
    static BOOKS: RefCell<Books> = RefCell::new(Books::default());
}

/// Runs `f` on this run's books. `f` must not call it again (it is never given a chance to:
/// nothing in it awaits or calls out).
pub(super) fn books<T>(f: impl FnOnce(&mut Books) -> T) -> T {
    BOOKS.with(|b| f(&mut b.borrow_mut()))
}

/// Values handed to a producer, with their partition and whether `send()` had already returned
/// to the application (async), until an outcome is recorded: per producer, by sequence number.
/// A producer numbers its values 0, 1, 2, ... across its restarts ([`Pending::next_seq`]), so
/// each send takes the next place of its producer's list, and its outcome only marks that place:
/// no hashing (a hash map's insert and remove per send were most of recording an outcome).
#[derive(Debug, Default)]
pub(super) struct Pending {
    producers: Vec<Vec<Option<(Partition, bool)>>>,
}

impl Pending {
    /// The sequence number producer `p`'s next value takes: one past the last it was given.
    pub(super) fn next_seq(&self, p: u32) -> u32 {
        let given = self.producers.get(p as usize).map_or(0, Vec::len);
        u32::try_from(given).expect("fewer than 2^32 sends")
    }

    fn place(&mut self, value: Value) -> &mut Option<(Partition, bool)> {
        let (p, seq) = (value.producer() as usize, value.seq() as usize);
        if self.producers.len() <= p {
            self.producers.resize_with(p + 1, Vec::new);
        }
        let places = &mut self.producers[p];
        if places.len() <= seq {
            places.resize(seq + 1, None);
        }
        &mut places[seq]
    }

    pub(super) fn insert(&mut self, value: Value, partition: Partition) {
        *self.place(value) = Some((partition, false));
    }

    /// Notes that `send()` returned for `value` (if it is still pending), with its partition.
    pub(super) fn returned(&mut self, value: Value, partition: Partition) {
        if let Some(entry) = self.place(value) {
            *entry = (partition, true);
        }
    }

    pub(super) fn remove(&mut self, value: Value) {
        *self.place(value) = None;
    }

    /// Every value still pending, in value order, with its partition and whether `send()` had
    /// returned.
    pub(super) fn take(&mut self) -> Vec<(Value, (Partition, bool))> {
        let producers = std::mem::take(&mut self.producers).into_iter().enumerate();
        let values = producers.flat_map(|(p, places)| {
            let p = u32::try_from(p).expect("producer numbers are u32");
            let places = places.into_iter().enumerate();
            places.filter_map(move |(seq, e)| Some((Value::new(p, u32::try_from(seq).ok()?), e?)))
        });
        values.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(index: i32) -> Partition {
        Partition::of_first(index)
    }

    #[test]
    fn pending_sends_are_those_without_an_outcome_in_value_order_with_their_state() {
        let mut pending = Pending::default();
        for _ in 0..4 {
            pending.insert(Value::new(2, pending.next_seq(2)), p(7));
            pending.insert(Value::new(0, pending.next_seq(0)), p(3));
        }
        assert_eq!(
            (pending.next_seq(0), pending.next_seq(1), pending.next_seq(2)),
            (4, 0, 4)
        );
        pending.returned(Value::new(2, 1), p(9));
        pending.returned(Value::new(0, 3), p(4));
        for done in [Value::new(2, 0), Value::new(0, 1), Value::new(0, 2)] {
            pending.remove(done);
        }
        // An outcome learnt after it was taken off (a late callback) leaves nothing behind.
        pending.returned(Value::new(2, 0), p(1));
        assert_eq!(pending.next_seq(2), 4, "numbering goes on after outcomes");
        let left = pending.take();
        assert_eq!(
            left,
            vec![
                (Value::new(0, 0), (p(3), false)),
                (Value::new(0, 3), (p(4), true)),
                (Value::new(2, 1), (p(9), true)),
                (Value::new(2, 2), (p(7), false)),
                (Value::new(2, 3), (p(7), false)),
            ]
        );
        assert!(pending.take().is_empty(), "taking empties it");
    }
}
