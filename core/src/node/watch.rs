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
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::task::{Poll, Waker};

use crate::broker::Broker;

/// What a waiter waits for on one partition: its log end or high watermark to pass an offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interest {
    pub topic: String,
    pub partition: i32,
    /// Wake when the log end offset is above this.
    pub log_end_above: Option<i64>,
    /// Wake when the high watermark is above this (or reaches it: see `high_watermark_at_least`).
    pub high_watermark_at_least: Option<i64>,
}

#[derive(Debug)]
struct Waiter {
    interests: Vec<Interest>,
    woken: bool,
    waker: Option<Waker>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    waiters: BTreeMap<u64, Waiter>,
    /// How many waiters have interests: [`PartitionWatch::poke`] has nothing to do without one.
    /// A waiter with none (woken only by `poke_all`, as the replica fetcher's manager waits for
    /// new partition state) stays out of every poke's way.
    interested: usize,
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
        if inner.waiters.remove(&self.id).is_some_and(|w| !w.interests.is_empty()) {
            inner.interested -= 1;
        }
    }
}

impl PartitionWatch {
    /// Waits until one of `interests` is met, a poke of everything, or `recheck` (a sleep of the
    /// runtime) ends.
    pub async fn wait(&self, interests: Vec<Interest>, recheck: impl Future<Output = ()>) {
        let id = {
            let mut inner = self.0.borrow_mut();
            inner.next_id += 1;
            let id = inner.next_id;
            inner.interested += usize::from(!interests.is_empty());
            inner.waiters.insert(
                id,
                Waiter {
                    interests,
                    woken: false,
                    waker: None,
                },
            );
            id
        };
        let _registration = Registration { watch: self, id };
        let mut sleep = pin!(recheck);
        std::future::poll_fn(|cx| {
            {
                let mut inner = self.0.borrow_mut();
                let Some(w) = inner.waiters.get_mut(&id) else {
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
            Ok((_, high_watermark, log_end)) => self.poke_offsets(topic, partition, log_end.0, high_watermark.0),
            // Gone or failed: whoever waits on it must look.
            Err(_) => self.poke_all(),
        }
    }

    /// Wakes the waiters whose interest in `topic`/`partition` these offsets meet.
    pub fn poke_offsets(&self, topic: &str, partition: i32, log_end: i64, high_watermark: i64) {
        self.wake(|interests| {
            // The partition first: most interests differ there, and it costs no string compare.
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
        self.wake(|_| true);
    }

    /// Whether a waiter has interests a [`poke`](Self::poke) could meet.
    pub fn has_interests(&self) -> bool {
        self.0.borrow().interested > 0
    }

    /// How many requests wait now.
    pub fn waiting(&self) -> usize {
        self.0.borrow().waiters.len()
    }

    fn wake(&self, met: impl Fn(&[Interest]) -> bool) {
        let mut wakers = Vec::new();
        {
            let mut inner = self.0.borrow_mut();
            for w in inner.waiters.values_mut() {
                if !w.woken && met(&w.interests) {
                    w.woken = true;
                    wakers.extend(w.waker.take());
                }
            }
        }
        // Outside the borrow: a waker may run code that registers again.
        for waker in wakers {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Wake};

    use super::*;

    /// Counts its wakes.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn interest(partition: i32, log_end_above: Option<i64>, high_watermark_at_least: Option<i64>) -> Interest {
        Interest {
            topic: "t".into(),
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
        let (again, _) = waiter(&watch, vec![interest(1, Some(0), None)]);
        assert!(watch.has_interests(), "and a new one's arrival");
        drop(again);
        watch.poke_all();
        assert_eq!(wakes(&idle_wakes), 1);
        assert!(done(&mut idle));
        assert_eq!(watch.waiting(), 0);
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
}
