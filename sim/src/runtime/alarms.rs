//! Alarms: the sleeps of one node incarnation, kept in a queue that can drop them, behind at most
//! a few madsim timers.
//!
//! Why: madsim's timer heap (naive-timer) cannot remove an entry. Every request timeout (30 s),
//! fetch wait and recheck a node arms would sit in that heap until it expires, finished or not:
//! under load the heap held tens of thousands of dead entries and every timer push and pop paid
//! for them (BENCHMARKS.md, "The simulator"). Here a sleep that is dropped (its request answered)
//! leaves the queue at once, and madsim's heap holds one timer for the queue's earliest deadline
//! (plus stale ones left when an earlier deadline arrived, at most one per deadline, which fire
//! and do nothing), kept armed by a driver task on the node.
//!
//! Contract:
//! - A [`AlarmSleep`] completes at its first poll at or after its deadline (madsim's virtual
//!   time), like madsim's `Sleep`: its deadline is the one madsim's `TimeHandle::sleep` would
//!   give, so it is at least 1 ms away. Its task is woken when the deadline passes.
//! - Waiters due at one instant are woken in deadline order, then in registration order: a pure
//!   function of the calls made, so runs stay deterministic.
//! - Dropping a sleep removes it from the queue; a queue with no sleeps arms no timer.
//!
//! Fault model: none of its own. A killed node's tasks are dropped by madsim, and their sleeps
//! with them; a timer that fires for a queue nobody waits on any more does nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use super::confined::{Confined, ConfinedGuard};
use super::timer::TimerArm;

/// One waiter's place in the queue: its deadline, then the order it registered in.
type Key = (Instant, u64);

#[derive(Debug)]
struct Queue {
    next_seq: u64,
    waiting: BTreeMap<Key, Waker>,
    /// The deadlines madsim timers of this queue are pending for: at most one timer per
    /// deadline (a deadline whose waiters were dropped keeps its timer; it fires and does nothing).
    pending: BTreeSet<Instant>,
    /// The queue's driver task, woken to arm the next timer (see [`Fire`]).
    driver: Option<Waker>,
}

/// The alarm queue of one node incarnation. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Alarms {
    inner: Rc<Inner>,
}

/// What the queue's sleeps and driver share. An `Rc`, as the node's tasks all run on one
/// thread: a sleep's clone and drop of it were two atomic operations of ~15 a sleep, and the
/// clock sits outside the queue's lock so that making a sleep takes no lock.
#[derive(Debug)]
struct Inner {
    /// madsim's clock, the node runtime's own (`TimeHandle::current()` costs a thread-local
    /// lookup and two `Arc` clones and their drops, and a sleep asked for it twice), and the
    /// `Sleep` the queue arms its timers with.
    timers: Rc<TimerArm>,
    /// In an `Arc` for the [`Fire`] wakers madsim's timers hold, which must be `Send`; confined
    /// to the run's thread, where madsim runs those timers too.
    queue: Arc<Confined<Queue>>,
}

/// The waker handed to madsim's timer for one deadline.
///
/// madsim runs timer callbacks while it holds its timer heap's lock and before it advances the
/// clock, so a callback can neither add a timer nor read the new time. When it fires it therefore
/// only wakes: every waiter due by its deadline, and the queue's [`Driver`] task, which arms the
/// timer for the next waiter from task context before virtual time moves on.
#[derive(Debug)]
struct Fire {
    queue: Arc<Confined<Queue>>,
    deadline: Instant,
}

impl Wake for Fire {
    fn wake(self: Arc<Self>) {
        let mut wake = Vec::new();
        {
            let mut queue = lock(&self.queue);
            while let Some(entry) = queue.waiting.first_entry() {
                if entry.key().0 > self.deadline {
                    break;
                }
                wake.push(entry.remove());
            }
            queue.pending.remove(&self.deadline);
            if needs_timer(&queue) {
                wake.extend(queue.driver.clone());
            }
        }
        for waker in wake {
            waker.wake();
        }
    }
}

fn lock(queue: &Confined<Queue>) -> ConfinedGuard<'_, Queue> {
    queue.lock()
}

/// Whether the earliest waiter has no madsim timer pending for it or before it.
fn needs_timer(queue: &Queue) -> bool {
    match (queue.waiting.keys().next(), queue.pending.first()) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(&(next, _)), Some(&pending)) => pending > next,
    }
}

/// Arms a madsim timer for the earliest waiter unless one is already pending for it or earlier.
/// Call it from task context only (see [`Fire`]).
fn arm_next(inner: &Inner, queue: &mut Queue) {
    if !needs_timer(queue) {
        return;
    }
    let Some(&(next, _)) = queue.waiting.keys().next() else {
        return;
    };
    queue.pending.insert(next);
    let waker = Waker::from(Arc::new(Fire {
        queue: inner.queue.clone(),
        deadline: next,
    }));
    // At least 1 ms away, as `sleep_until(next)` made it; so this adds a timer.
    let deadline = TimerArm::deadline_at(inner.timers.now(), next);
    let polled = inner.timers.arm(deadline, &waker);
    debug_assert!(polled.is_pending(), "an alarm deadline is in the future");
}

impl Alarms {
    /// A queue on `time` for the node of the calling task, with its driver task spawned there
    /// (it dies with the node, as the node's sleeps do).
    pub(super) fn spawn(timers: Rc<TimerArm>) -> Self {
        let queue = Queue {
            next_seq: 0,
            waiting: BTreeMap::new(),
            pending: BTreeSet::new(),
            driver: None,
        };
        let alarms = Alarms {
            inner: Rc::new(Inner {
                timers,
                queue: Arc::new(Confined::new(queue)),
            }),
        };
        drop(madsim::task::spawn_local(Driver {
            inner: alarms.inner.clone(),
        }));
        alarms
    }

    /// A sleep of `duration` on this queue: due when madsim's `TimeHandle::sleep` would be, at
    /// least 1 ms away.
    pub fn sleep(&self, duration: Duration) -> AlarmSleep {
        let deadline = TimerArm::deadline_after(self.inner.timers.now(), duration);
        AlarmSleep {
            inner: self.inner.clone(),
            deadline,
            key: None,
        }
    }

    /// How many sleeps are waiting (for tests).
    pub fn waiting(&self) -> usize {
        lock(&self.inner.queue).waiting.len()
    }
}

/// A sleep in an [`Alarms`] queue; see the module's contract.
#[derive(Debug)]
pub struct AlarmSleep {
    inner: Rc<Inner>,
    deadline: Instant,
    /// Its place in the queue once it waits.
    key: Option<Key>,
}

impl Future for AlarmSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let mut queue = lock(&this.inner.queue);
        if this.inner.timers.now() >= this.deadline {
            if let Some(key) = this.key.take() {
                queue.waiting.remove(&key);
            }
            return Poll::Ready(());
        }
        match this.key {
            Some(key) => match queue.waiting.get_mut(&key) {
                Some(waker) => {
                    if !waker.will_wake(cx.waker()) {
                        waker.clone_from(cx.waker());
                    }
                }
                // Only due waiters leave the queue before they are dropped, and a due one is
                // ready above; wait again rather than never.
                None => {
                    queue.waiting.insert(key, cx.waker().clone());
                }
            },
            None => {
                let key = (this.deadline, queue.next_seq);
                queue.next_seq += 1;
                queue.waiting.insert(key, cx.waker().clone());
                this.key = Some(key);
            }
        }
        arm_next(&this.inner, &mut queue);
        Poll::Pending
    }
}

impl Drop for AlarmSleep {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            lock(&self.inner.queue).waiting.remove(&key);
        }
    }
}

/// The task that keeps a madsim timer pending for the queue's earliest waiter: woken by a timer
/// that fired, it arms the next one. It never finishes; it ends with its node.
#[derive(Debug)]
struct Driver {
    inner: Rc<Inner>,
}

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut queue = lock(&self.inner.queue);
        match &mut queue.driver {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            slot => *slot = Some(cx.waker().clone()),
        }
        arm_next(&self.inner, &mut queue);
        Poll::Pending
    }
}
