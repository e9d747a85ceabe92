//! Long-poll wake-ups: requests that wait on a partition (a Fetch for data past its offset, an
//! acks=all Produce for the high watermark to pass its batch) sleep until the partition changes,
//! as Kafka's purgatory does, instead of re-reading the broker on a short timer.
//!
//! Contract:
//! - A waiter registers [`Interest`]s and awaits [`PartitionWatch::wait`], which completes when a
//!   [`poke`](PartitionWatch::poke) of one of its partitions finds the threshold passed, on
//!   [`poke_all`](PartitionWatch::poke_all), or when its `recheck` sleep ends, whichever is first.
//!   The waiter then re-checks the broker itself: a wake-up is a hint, never an answer.
//! - Whoever changes a partition's log end or high watermark pokes it after the change (with the
//!   borrow of the broker released); whoever changes leadership, ISR or partition state pokes all.
//!   `recheck` bounds the cost of a change that came by a path that does not poke.
//! - Single-threaded (`Rc`): one per node, shared by its tasks.

use std::cell::RefCell;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::task::{Poll, Waker};

use crate::broker::Broker;

/// What a waiter waits for on one partition: its log end or high watermark to pass an offset.
///
/// The topic is kept as a 64-bit hash of its name ([`TopicKey`]), not the name: a wait then
/// allocates nothing for it, and a poke compares two integers. Two names with one hash would
/// only wake a waiter for nothing, which re-checks the broker anyway (see the contract above).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interest {
    pub topic: TopicKey,
    pub partition: i32,
    /// Wake when the log end offset is above this.
    pub log_end_above: Option<i64>,
    /// Wake when the high watermark is above this (or reaches it: see `high_watermark_at_least`).
    pub high_watermark_at_least: Option<i64>,
}

impl Interest {
    /// Wake when `topic`/`partition`'s log end is above `offset` (a follower's fetch).
    pub fn log_end_above(topic: &str, partition: i32, offset: i64) -> Self {
        Interest {
            topic: TopicKey::of(topic),
            partition,
            log_end_above: Some(offset),
            high_watermark_at_least: None,
        }
    }

    /// Wake when `topic`/`partition`'s high watermark is at least `offset` (an acks=all
    /// produce, a consumer's fetch).
    pub fn high_watermark_at_least(topic: &str, partition: i32, offset: i64) -> Self {
        Interest {
            topic: TopicKey::of(topic),
            partition,
            log_end_above: None,
            high_watermark_at_least: Some(offset),
        }
    }
}

/// A topic name's 64-bit FNV-1a hash: deterministic, and cheap for short names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopicKey(u64);

impl TopicKey {
    pub fn of(name: &str) -> Self {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in name.as_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        TopicKey(h)
    }
}

/// One bit of a waiter's [`Waiter::partitions`] mask for `topic`/`partition`.
fn partition_bit(topic: TopicKey, partition: i32) -> u64 {
    // The hash's high bits are its best mixed; the partition number picks among neighbours.
    1 << (((topic.0 >> 58) as u32 ^ partition as u32) & 63)
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    /// A bit for each partition of `interests` ([`partition_bit`]): a poke of a partition whose
    /// bit is clear here skips the waiter without reading its interests. Bits are shared, so a
    /// set bit only says the interests must be read.
    partitions: u64,
    interests: Vec<Interest>,
    woken: bool,
    waker: Option<Waker>,
}

/// At most this many emptied interest lists are kept for the next waits.
const SPARE_LISTS_MAX: usize = 64;

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    /// The waiters in the order they came (ids rise): pokes wake them in that order. A node has
    /// a few at a time (a request's wait, a fetcher manager's), so a vector searched by id.
    waiters: Vec<Waiter>,
    /// Interest lists of finished waits, emptied, for the next waits to fill without allocating.
    spare: Vec<Vec<Interest>>,
    /// The partitions the waiters' interests name, as [`partition_bit`]s (set at each wait,
    /// made again from those left when one ends): a poke has nothing to do when none is set,
    /// and [`PartitionWatch::poke_hosted`] nothing when its partition's is clear. A waiter
    /// without interests (woken only by `poke_all`, as the replica fetcher's manager waits for
    /// new partition state) sets none, and stays out of every poke's way.
    bits: u64,
    /// The wakers a poke gathers, emptied and kept: a poke that wakes anyone (the follower
    /// fetches waiting on a leader's append, the acks=all produce waiting on its high
    /// watermark) gathered them in a new vector, an allocation each time.
    woken: Vec<Waker>,
}

impl Inner {
    fn find(&mut self, id: u64) -> Option<&mut Waiter> {
        let i = self.waiters.binary_search_by_key(&id, |w| w.id).ok()?;
        Some(&mut self.waiters[i])
    }
}

/// The node's registry of waiting requests. Clones share it.
#[derive(Clone, Debug, Default)]
pub struct PartitionWatch(Rc<RefCell<Inner>>);

/// Removes a waiter when its wait ends, however it ends (woken, timed out, or dropped).
struct Registration<'a> {
    watch: &'a PartitionWatch,
    id: u64,
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut inner = self.watch.0.borrow_mut();
        let Ok(i) = inner.waiters.binary_search_by_key(&self.id, |w| w.id) else {
            return;
        };
        let mut w = inner.waiters.remove(i);
        if w.partitions != 0 {
            inner.bits = inner.waiters.iter().fold(0, |m, w| m | w.partitions);
        }
        if w.interests.capacity() > 0 && inner.spare.len() < SPARE_LISTS_MAX {
            w.interests.clear();
            inner.spare.push(w.interests);
        }
    }
}

impl PartitionWatch {
    /// Waits until one of `interests` is met, a poke of everything, or `recheck` (a sleep of the
    /// runtime) ends. The interests are taken at the first poll.
    pub async fn wait(&self, interests: impl IntoIterator<Item = Interest>, recheck: impl Future<Output = ()>) {
        // Filled outside the registry's borrow: the iterator is the caller's code.
        let mut list = self.0.borrow_mut().spare.pop().unwrap_or_default();
        list.extend(interests);
        let partitions = list.iter().fold(0, |m, i| m | partition_bit(i.topic, i.partition));
        let id = {
            let mut inner = self.0.borrow_mut();
            inner.next_id += 1;
            let id = inner.next_id;
            inner.bits |= partitions;
            inner.waiters.push(Waiter {
                id,
                partitions,
                interests: list,
                woken: false,
                waker: None,
            });
            id
        };
        let _registration = Registration { watch: self, id };
        let mut sleep = pin!(recheck);
        std::future::poll_fn(|cx| {
            {
                let mut inner = self.0.borrow_mut();
                let Some(w) = inner.find(id) else {
                    return Poll::Ready(());
                };
                if w.woken {
                    return Poll::Ready(());
                }
                match &mut w.waker {
                    Some(waker) => waker.clone_from(cx.waker()),
                    None => w.waker = Some(cx.waker().clone()),
                }
            }
            sleep.as_mut().poll(cx)
        })
        .await;
    }

    /// Wakes the waiters whose interest in `topic`/`partition` the broker's offsets now meet.
    pub fn poke(&self, broker: &Broker, topic: &str, partition: i32) {
        if !self.has_interests() {
            return;
        }
        match broker.offsets(topic, partition) {
            Ok((_, high_watermark, log_end)) => {
                self.poke_key(TopicKey::of(topic), partition, log_end.0, high_watermark.0)
            }
            // Gone or failed: whoever waits on it must look.
            Err(_) => self.poke_all(),
        }
    }

    /// [`poke`](Self::poke) of a partition the broker was just seen to have (`hosted`, as the
    /// caller's own lookup of it found): when no waiter names it, returns without asking the
    /// broker again. A follower's appends are poked so on a broker where, most of the time,
    /// only the partitions it leads are waited on. Not hosted: as `poke`.
    pub fn poke_hosted(&self, broker: &Broker, topic: &str, partition: i32, hosted: bool) {
        if hosted && self.0.borrow().bits & partition_bit(TopicKey::of(topic), partition) == 0 {
            return;
        }
        self.poke(broker, topic, partition);
    }

    /// Wakes the waiters whose interest in `topic`/`partition` these offsets meet.
    pub fn poke_offsets(&self, topic: &str, partition: i32, log_end: i64, high_watermark: i64) {
        self.poke_key(TopicKey::of(topic), partition, log_end, high_watermark);
    }

    fn poke_key(&self, topic: TopicKey, partition: i32, log_end: i64, high_watermark: i64) {
        let bit = partition_bit(topic, partition);
        self.wake(bit, |interests| {
            interests.iter().any(|i| {
                i.partition == partition
                    && i.topic == topic
                    && (i.log_end_above.is_some_and(|o| log_end > o)
                        || i.high_watermark_at_least.is_some_and(|o| high_watermark >= o))
            })
        });
    }

    /// Wakes every waiter (leadership, ISR or partition state changed), those waiting on no
    /// partition included (a Metadata request held until the broker's first cluster scan).
    pub fn poke_all(&self) {
        self.wake(u64::MAX, |_| true);
    }

    /// Whether a waiter has interests a [`poke`](Self::poke) could meet.
    pub fn has_interests(&self) -> bool {
        self.0.borrow().bits != 0
    }

    /// How many requests wait now.
    pub fn waiting(&self) -> usize {
        self.0.borrow().waiters.len()
    }

    /// Wakes the waiters not woken yet that `met` accepts, of those with a bit of `bits` (all
    /// of them when `bits` is `u64::MAX`, those without interests included).
    fn wake(&self, bits: u64, met: impl Fn(&[Interest]) -> bool) {
        let mut wakers = {
            let mut inner = self.0.borrow_mut();
            let mut wakers = std::mem::take(&mut inner.woken);
            for w in &mut inner.waiters {
                if (bits == u64::MAX || w.partitions & bits != 0) && !w.woken && met(&w.interests) {
                    w.woken = true;
                    wakers.extend(w.waker.take());
                }
            }
            if wakers.is_empty() {
                // Nobody to wake (most pokes): the vector goes back untouched.
                inner.woken = wakers;
                return;
            }
            wakers
        };
        // Outside the borrow: a waker may run code that registers (or pokes) again; a poke in
        // there finds no kept vector and makes its own.
        for waker in wakers.drain(..) {
            waker.wake();
        }
        self.0.borrow_mut().woken = wakers;
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::pin::Pin;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::task::{Context, Wake};

    use super::*;
    use crate::coord::Count;

    fn interest(partition: i32, log_end_above: Option<i64>, high_watermark_at_least: Option<i64>) -> Interest {
        Interest {
            topic: TopicKey::of("t"),
            partition,
            log_end_above,
            high_watermark_at_least,
        }
    }

    /// A waiter on `interests` whose recheck never ends, polled once; returns (future, wakes).
    fn waiter(
        watch: &PartitionWatch,
        interests: Vec<Interest>,
    ) -> (Pin<Box<impl Future<Output = ()> + '_>>, Arc<Count>) {
        let count = Arc::new(Count::default());
        let mut f = Box::pin(watch.wait(interests, std::future::pending()));
        let waker = Waker::from(count.clone());
        assert!(f.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());
        (f, count)
    }

    fn done(f: &mut Pin<Box<impl Future<Output = ()>>>) -> bool {
        f.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_ready()
    }

    #[test]
    fn pokes_wake_exactly_the_waiters_whose_threshold_passed() {
        let watch = PartitionWatch::default();
        let (mut follower, follower_wakes) = waiter(&watch, vec![interest(0, Some(5), None)]);
        let (mut acks, acks_wakes) = waiter(&watch, vec![interest(0, None, Some(3))]);
        let (other, other_wakes) = waiter(&watch, vec![interest(1, Some(0), None)]);
        assert_eq!(watch.waiting(), 3);
        let wakes = |c: &Arc<Count>| c.0.load(Ordering::Relaxed);
        let checked = Cell::new(0);
        let expect = |f: usize, a: usize, o: usize| {
            assert_eq!(
                (wakes(&follower_wakes), wakes(&acks_wakes), wakes(&other_wakes)),
                (f, a, o)
            );
            checked.set(checked.get() + 1);
        };

        watch.poke_offsets("t", 0, 5, 2);
        expect(0, 0, 0); // log end not above 5, high watermark below 3
        watch.poke_offsets("u", 0, 9, 9);
        expect(0, 0, 0); // another topic
        watch.poke_offsets("t", 0, 6, 2);
        expect(1, 0, 0);
        watch.poke_offsets("t", 0, 7, 2);
        expect(1, 0, 0); // woken once, until it waits again
        assert!(done(&mut follower));
        watch.poke_offsets("t", 0, 7, 3);
        expect(1, 1, 0);
        assert!(done(&mut acks));
        drop(follower);
        drop(acks);
        assert_eq!(watch.waiting(), 1, "a finished wait leaves the registry");
        drop(other);
        assert_eq!(watch.waiting(), 0, "so does a dropped one");
        println!("checked {} pokes", checked.get());
    }

    /// Logs its number when woken.
    struct Logged(usize, Arc<std::sync::Mutex<Vec<usize>>>);

    impl Wake for Logged {
        fn wake(self: Arc<Self>) {
            self.1.lock().unwrap().push(self.0);
        }
    }

    /// The wakers a poke gathers go into a vector the watch keeps: each poke wakes its own
    /// waiters, once each and in the order they came, and none of an earlier poke's again.
    #[test]
    fn each_poke_wakes_its_waiters_once_in_order_through_the_kept_list() {
        let watch = PartitionWatch::default();
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut rounds = 0;
        for round in 0..3 {
            // Three waiters on partition 0, above a log end that rises each round.
            let above = 10 * round;
            let mut waits: Vec<_> = (0..3)
                .map(|i| {
                    let mut f = Box::pin(watch.wait(vec![interest(0, Some(above), None)], std::future::pending()));
                    let waker = Waker::from(Arc::new(Logged(10 * round as usize + i, log.clone())));
                    assert!(f.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());
                    f
                })
                .collect();
            // A poke below their threshold wakes nobody (the kept vector goes back unused).
            watch.poke_offsets("t", 0, above, 0);
            assert!(
                log.lock().unwrap().is_empty(),
                "round {round}: woken below the threshold"
            );
            watch.poke_offsets("t", 0, above + 1, 0);
            let woken = std::mem::take(&mut *log.lock().unwrap());
            let expected: Vec<usize> = (0..3).map(|i| 10 * round as usize + i).collect();
            assert_eq!(woken, expected, "round {round}");
            for f in &mut waits {
                assert!(done(f));
            }
            rounds += 1;
        }
        assert_eq!(watch.waiting(), 0);
        println!("{rounds} rounds of three waiters, each woken once in order");
    }

    /// A waiter without interests (the replica fetcher's manager) is woken by `poke_all` only,
    /// does not make pokes look at the broker, and does not hide an interested waiter from them.
    #[test]
    fn waiters_without_interests_wake_on_poke_all_only() {
        let watch = PartitionWatch::default();
        let (mut idle, idle_wakes) = waiter(&watch, vec![]);
        assert!(
            !watch.has_interests(),
            "a waiter without interests gives pokes nothing to do"
        );
        let (interested, interested_wakes) = waiter(&watch, vec![interest(0, Some(5), None)]);
        assert!(watch.has_interests());
        watch.poke_offsets("t", 0, 6, 0);
        let wakes = |c: &Arc<Count>| c.0.load(Ordering::Relaxed);
        assert_eq!((wakes(&idle_wakes), wakes(&interested_wakes)), (0, 1));
        drop(interested);
        assert!(!watch.has_interests(), "the interested waiter's leaving is counted");
        // The next waiter fills the list the last one left: with its own interests only.
        let (again, again_wakes) = waiter(&watch, vec![interest(1, Some(0), None)]);
        assert!(watch.has_interests(), "and a new one's arrival");
        watch.poke_offsets("t", 0, 9, 9);
        assert_eq!(
            wakes(&again_wakes),
            0,
            "not woken by the interests of the list it reuses"
        );
        drop(again);
        watch.poke_all();
        assert_eq!(wakes(&idle_wakes), 1);
        assert!(done(&mut idle));
        assert_eq!(watch.waiting(), 0);
    }

    /// Pokes wake waiters in the order they came, whichever left in between (the order in
    /// which a simulated node's tasks become ready is part of its trace).
    #[test]
    fn waiters_are_woken_in_the_order_they_came() {
        /// Appends its number to a shared log when woken.
        struct Logs(usize, Arc<std::sync::Mutex<Vec<usize>>>);
        impl Wake for Logs {
            fn wake(self: Arc<Self>) {
                self.1.lock().unwrap().push(self.0);
            }
        }
        let watch = PartitionWatch::default();
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut waits: Vec<Option<Pin<Box<_>>>> = Vec::new();
        let start = |n: usize, waits: &mut Vec<Option<Pin<Box<_>>>>| {
            let mut f = Box::pin(watch.wait(vec![interest(0, Some(0), None)], std::future::pending()));
            let waker = Waker::from(Arc::new(Logs(n, log.clone())));
            assert!(f.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());
            waits.push(Some(f));
        };
        for n in 0..4 {
            start(n, &mut waits);
        }
        waits[1] = None; // leaves, its list goes spare
        waits[2] = None;
        start(4, &mut waits); // reuses a spare list
        start(5, &mut waits);
        watch.poke_offsets("t", 0, 1, 0);
        assert_eq!(*log.lock().unwrap(), vec![0, 3, 4, 5]);
    }

    /// The skip by partition bit: with more partitions than bits, and two topics, a poke wakes
    /// the waiter on its partition and no other, whichever share its bit.
    #[test]
    fn a_poke_wakes_only_its_partition_among_many_that_share_bits() {
        let watch = PartitionWatch::default();
        let keys: Vec<(&str, i32)> = ["t", "u"]
            .into_iter()
            .flat_map(|t| (0..150).map(move |p| (t, p)))
            .collect();
        let mut waits: Vec<_> = keys
            .iter()
            .map(|&(t, p)| {
                let count = Arc::new(Count::default());
                let interest = Interest::log_end_above(t, p, 0);
                let mut f = Box::pin(watch.wait([interest], std::future::pending()));
                let waker = Waker::from(count.clone());
                assert!(f.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());
                (f, count)
            })
            .collect();
        let shared = keys
            .iter()
            .filter(|&&(t, p)| partition_bit(TopicKey::of(t), p) == partition_bit(TopicKey::of("t"), 0))
            .count();
        assert!(shared > 2, "the test needs waiters that share a bit: {shared}");
        for (n, &(t, p)) in keys.iter().enumerate() {
            watch.poke_offsets(t, p, 1, 0);
            let woken: Vec<usize> = (0..keys.len())
                .filter(|&i| waits[i].1 .0.load(Ordering::Relaxed) > 0)
                .collect();
            assert_eq!(woken, (0..=n).collect::<Vec<_>>(), "after the poke of {t}/{p}");
            assert!(done(&mut waits[n].0));
        }
        println!("{} pokes, {shared} waiters on the bit of t/0", keys.len());
    }

    #[test]
    fn poke_all_wakes_everyone_and_the_recheck_ends_a_wait_too() {
        let watch = PartitionWatch::default();
        let (mut a, a_wakes) = waiter(&watch, vec![interest(0, Some(100), None)]);
        let (mut b, b_wakes) = waiter(&watch, vec![interest(1, None, None)]);
        watch.poke_all();
        assert_eq!(
            (a_wakes.0.load(Ordering::Relaxed), b_wakes.0.load(Ordering::Relaxed)),
            (1, 1)
        );
        assert!(done(&mut a) && done(&mut b));
        let mut timed = Box::pin(watch.wait(vec![interest(0, Some(100), None)], std::future::ready(())));
        assert!(done(&mut timed), "the recheck sleep ended");
    }

    /// A topic the broker of [`broker_with_t`] lacks, whose partition 0 has another bit than
    /// t's (a poke of it meets no interest in t-0 by sharing its bit).
    fn gone_topic() -> &'static str {
        let t0 = partition_bit(TopicKey::of("t"), 0);
        ["gone", "gone2", "gone3"]
            .into_iter()
            .find(|g| partition_bit(TopicKey::of(g), 0) != t0)
            .expect("a name with another bit")
    }

    /// A poke of a partition no waiter names wakes nobody; one of a partition the broker no
    /// longer has wakes everyone, even waiters that name other partitions (the simulator's
    /// traces depend on that order of wakes).
    #[test]
    fn a_poke_nobody_names_wakes_nobody_unless_the_partition_is_gone() {
        let broker = broker_with_t();
        let watch = PartitionWatch::default();
        let (_a, a_wakes) = waiter(&watch, vec![interest(0, Some(5), None)]);
        let wakes = |c: &Arc<Count>| c.0.load(Ordering::Relaxed);
        watch.poke(&broker, "t", 1);
        assert_eq!(wakes(&a_wakes), 0, "a poke of t-1 woke the waiter on t-0");
        let gone = gone_topic();
        watch.poke(&broker, gone, 0);
        assert_eq!(
            wakes(&a_wakes),
            1,
            "a poke of a partition the broker lacks wakes everyone"
        );
        println!("a poke of t-1 woke nobody, one of {gone}-0 (not on the broker) the waiter on t-0");
    }

    /// A broker with partitions 0 and 1 of `t`, each with one record (log end 1).
    fn broker_with_t() -> Broker {
        let mut disk = crate::disk::mem::MemDisk::new();
        let mut broker = Broker::open(&mut disk, crate::broker::BrokerConfig::default(), 0).expect("open");
        let id = crate::broker::TopicId::from_random(1, 2);
        broker
            .create_topic(&mut disk, "t", 2, 1, &[], id, false)
            .expect("create");
        for p in 0..2 {
            let record = crate::record::NewRecord {
                timestamp: 0,
                key: None,
                value: Some(vec![1]),
            };
            let mut batch = crate::record::build_batch(&[record], crate::record::ProducerFields::none());
            broker.produce(&mut disk, "t", p, &mut batch, 1, 0).expect("produce");
        }
        broker
    }

    /// `poke_hosted` trusts the caller that the broker has the partition: when no waiter names
    /// it, it returns without asking (a partition the broker lacks would have woken everyone).
    /// Not hosted, it pokes as `poke` does. And when one waiter leaves, the others' partitions
    /// still count: a hosted poke of theirs wakes them.
    #[test]
    fn a_hosted_poke_nobody_names_asks_nothing_and_a_leaving_waiter_keeps_the_others() {
        let broker = broker_with_t();
        let watch = PartitionWatch::default();
        let wakes = |c: &Arc<Count>| c.0.load(Ordering::Relaxed);
        let gone = gone_topic();
        let (_a, a_wakes) = waiter(&watch, vec![interest(0, Some(5), None)]);
        watch.poke_hosted(&broker, gone, 0, true);
        assert_eq!(wakes(&a_wakes), 0, "a hosted poke nobody names asked the broker");
        watch.poke_hosted(&broker, gone, 0, false);
        assert_eq!(
            wakes(&a_wakes),
            1,
            "not hosted, a partition the broker lacks wakes everyone"
        );

        let (first, first_wakes) = waiter(&watch, vec![interest(0, Some(0), None)]);
        let (_second, second_wakes) = waiter(&watch, vec![interest(1, Some(0), None)]);
        drop(first);
        watch.poke_hosted(&broker, "t", 1, true);
        assert_eq!(
            (wakes(&first_wakes), wakes(&second_wakes)),
            (0, 1),
            "the waiter on t-1 (log end 1, above 0) was not woken after t-0's left"
        );
        println!(
            "hosted poke of {gone}-0 woke nobody, not hosted woke the t-0 waiter; t-1's waiter woken after t-0's left"
        );
    }
}
