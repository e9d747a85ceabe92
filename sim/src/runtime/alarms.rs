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

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use super::confined::{Confined, ConfinedGuard};
use super::timer::TimerArm;

/// One waiter's place in the queue: its registration number (which orders waiters of one
/// deadline, and tells a slot's occupant from an earlier one) and its slot.
type Key = (u64, u32);

/// The waiters: a min-heap of (deadline, registration number, slot) over a slab of wakers.
///
/// Why not a `BTreeMap<(Instant, u64), Waker>`, as before: nearly every sleep in it is a
/// request's timeout that the answer drops long before it is due, and the map's insert and
/// remove cost ~165 instructions each (the queue's sleeps and drops came to ~5% of an unbatched
/// seed's instructions, BENCHMARKS.md). Here a sleep is a heap push
/// (a timeout, later than every waiter, stays at the bottom: about one comparison) and a slot
/// taken from a free list; dropping it empties its slot. The heap keeps the dropped sleep's
/// entry, dead, until it comes to the top or the heap is rebuilt without the dead ones, which
/// happens once they outnumber the live ones twice over (so a push or pop never pays for more
/// than three entries a waiter, and the work of a rebuild is paid for by the drops before it).
/// The order waiters are woken in is the map's: by deadline, then registration.
#[derive(Debug, Default)]
struct Waiters {
    heap: BinaryHeap<Reverse<(Instant, u64, u32)>>,
    /// Each slot's registration number and waker; `None` when free.
    slots: Vec<Option<(u64, Waker)>>,
    free: Vec<u32>,
    live: usize,
}

impl Waiters {
    /// Adds a waiter with registration number `seq`.
    fn insert(&mut self, deadline: Instant, seq: u64, waker: Waker) -> Key {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot as usize] = Some((seq, waker));
                slot
            }
            None => {
                self.slots.push(Some((seq, waker)));
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 sleeps wait at once")
            }
        };
        self.heap.push(Reverse((deadline, seq, slot)));
        self.live += 1;
        (seq, slot)
    }

    /// The waker of the waiter `key`, if it still waits.
    fn get_mut(&mut self, (seq, slot): Key) -> Option<&mut Waker> {
        match self.slots.get_mut(slot as usize) {
            Some(Some((s, waker))) if *s == seq => Some(waker),
            _ => None,
        }
    }

    /// Removes the waiter `key` (nothing if it no longer waits), returning its waker.
    fn remove(&mut self, (seq, slot): Key) -> Option<Waker> {
        if !holds(&self.slots, seq, slot) {
            return None;
        }
        let (_, waker) = self.slots[slot as usize].take()?;
        self.free.push(slot);
        self.live -= 1;
        if self.heap.len() > 3 * self.live + 64 {
            let slots = &self.slots;
            self.heap.retain(|&Reverse((_, seq, slot))| holds(slots, seq, slot));
        }
        Some(waker)
    }

    /// The earliest deadline of a waiting waiter (dead entries on top are dropped on the way).
    fn first(&mut self) -> Option<Instant> {
        while let Some(&Reverse((deadline, seq, slot))) = self.heap.peek() {
            if holds(&self.slots, seq, slot) {
                return Some(deadline);
            }
            self.heap.pop();
        }
        None
    }

    /// Removes the earliest waiter if it is due by `by`, returning its waker.
    fn pop_due(&mut self, by: Instant) -> Option<Waker> {
        loop {
            let &Reverse((deadline, seq, slot)) = self.heap.peek()?;
            if deadline > by {
                return None;
            }
            self.heap.pop();
            if let Some(waker) = self.remove((seq, slot)) {
                return Some(waker);
            }
        }
    }

    fn len(&self) -> usize {
        self.live
    }

    /// Heap entries, dead ones included (for tests: the heap stays bounded).
    #[cfg(test)]
    fn entries(&self) -> usize {
        self.heap.len()
    }
}

/// Whether `slot` holds the waiter registered as `seq` (not a later occupant, nor nobody).
fn holds(slots: &[Option<(u64, Waker)>], seq: u64, slot: u32) -> bool {
    matches!(slots.get(slot as usize), Some(Some((s, _))) if *s == seq)
}

#[derive(Debug)]
struct Queue {
    next_seq: u64,
    waiting: Waiters,
    /// The deadlines madsim timers of this queue are pending for: at most one timer per
    /// deadline (a deadline whose waiters were dropped keeps its timer; it fires and does nothing).
    pending: BTreeSet<Instant>,
    /// The queue's driver task, woken to arm the next timer (see [`Fire`]).
    driver: Option<Waker>,
    /// The wakers a firing gathers, emptied and kept: a new vector each firing was an
    /// allocation (~2,200 a batched benchmark seed).
    woken: Vec<Waker>,
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
        let mut wake = {
            let mut queue = lock(&self.queue);
            let mut wake = std::mem::take(&mut queue.woken);
            while let Some(waker) = queue.waiting.pop_due(self.deadline) {
                wake.push(waker);
            }
            queue.pending.remove(&self.deadline);
            if needs_timer(&mut queue) {
                wake.extend(queue.driver.clone());
            }
            wake
        };
        for waker in wake.drain(..) {
            waker.wake();
        }
        lock(&self.queue).woken = wake;
    }
}

fn lock(queue: &Confined<Queue>) -> ConfinedGuard<'_, Queue> {
    queue.lock()
}

/// Whether the earliest waiter has no madsim timer pending for it or before it.
fn needs_timer(queue: &mut Queue) -> bool {
    match (queue.waiting.first(), queue.pending.first()) {
        (None, _) => false,
        (Some(_), None) => true,
        (Some(next), Some(&pending)) => pending > next,
    }
}

/// Arms a madsim timer for the earliest waiter unless one is already pending for it or earlier.
/// Call it from task context only (see [`Fire`]).
fn arm_next(inner: &Inner, queue: &mut Queue) {
    if !needs_timer(queue) {
        return;
    }
    let Some(next) = queue.waiting.first() else {
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
            waiting: Waiters::default(),
            pending: BTreeSet::new(),
            driver: None,
            woken: Vec::new(),
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
                queue.waiting.remove(key);
            }
            return Poll::Ready(());
        }
        match this.key {
            Some(key) => match queue.waiting.get_mut(key) {
                Some(waker) => {
                    if !waker.will_wake(cx.waker()) {
                        waker.clone_from(cx.waker());
                    }
                }
                // Only due waiters leave the queue before they are dropped, and a due one is
                // ready above; wait again (in its old place) rather than never.
                None => {
                    this.key = Some(queue.waiting.insert(this.deadline, key.0, cx.waker().clone()));
                }
            },
            None => {
                let seq = queue.next_seq;
                queue.next_seq += 1;
                this.key = Some(queue.waiting.insert(this.deadline, seq, cx.waker().clone()));
            }
        }
        arm_next(&this.inner, &mut queue);
        Poll::Pending
    }
}

impl Drop for AlarmSleep {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            // The waker is dropped after the queue's lock is released.
            let waker = lock(&self.inner.queue).waiting.remove(key);
            drop(waker);
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use rand_chacha::rand_core::{RngCore, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;

    /// A waker that notes its id when woken.
    struct Tag(u64, Arc<Mutex<Vec<u64>>>);

    impl Wake for Tag {
        fn wake(self: Arc<Self>) {
            self.1.lock().expect("lock").push(self.0);
        }
    }

    /// `Waiters` against the map it replaced (`BTreeMap<(deadline, registration), waker>`):
    /// random inserts (deadlines out of order, several on one instant), drops of waiting and of
    /// already woken waiters, and wakes of everything due by a time. The same waiters are woken
    /// in the same order, the earliest deadline and count agree after every step, and the heap
    /// never holds more than three entries a waiter plus 64.
    #[test]
    fn waiters_wake_in_the_order_of_the_map_they_replaced_and_stay_bounded() {
        let base = Instant::now();
        let woken = Arc::new(Mutex::new(Vec::new()));
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut waiters = Waiters::default();
        let mut model: BTreeMap<(Instant, u64), u64> = BTreeMap::new();
        let mut keys: Vec<(Key, Instant)> = Vec::new();
        let (mut next_seq, mut now_ms, mut compared, mut max_entries) = (0u64, 0u64, 0usize, 0usize);
        for step in 0..20_000 {
            match rng.next_u32() % 10 {
                // Mostly inserts and drops, as request timeouts are: made, then dropped.
                0..=4 => {
                    // One in three a 30 s timeout, which piles up behind the short sleeps.
                    let far = if rng.next_u32() % 3 == 0 { 30_000 } else { 0 };
                    let deadline = base + Duration::from_millis(now_ms + far + u64::from(rng.next_u32() % 50));
                    let waker = Waker::from(Arc::new(Tag(next_seq, woken.clone())));
                    let key = waiters.insert(deadline, next_seq, waker);
                    model.insert((deadline, next_seq), next_seq);
                    keys.push((key, deadline));
                    next_seq += 1;
                }
                5..=8 if !keys.is_empty() => {
                    // A key already woken (or dropped) is dropped again: nothing happens.
                    let (key, deadline) = keys.swap_remove(rng.next_u32() as usize % keys.len());
                    let had = waiters.remove(key).is_some();
                    assert_eq!(had, model.remove(&(deadline, key.0)).is_some(), "step {step}");
                }
                _ => {
                    now_ms += u64::from(rng.next_u32() % 20);
                    let by = base + Duration::from_millis(now_ms);
                    woken.lock().expect("lock").clear();
                    while let Some(waker) = waiters.pop_due(by) {
                        waker.wake();
                    }
                    let mut expected = Vec::new();
                    while let Some(entry) = model.first_entry().filter(|e| e.key().0 <= by) {
                        expected.push(entry.remove());
                    }
                    assert_eq!(
                        *woken.lock().expect("lock"),
                        expected,
                        "step {step}: woken by {now_ms} ms"
                    );
                    compared += expected.len();
                }
            }
            assert_eq!(waiters.first(), model.keys().next().map(|k| k.0), "step {step}");
            assert_eq!(waiters.len(), model.len(), "step {step}");
            assert!(
                waiters.entries() <= 3 * waiters.len() + 64,
                "step {step}: {} entries",
                waiters.entries()
            );
            max_entries = max_entries.max(waiters.entries());
        }
        println!("{compared} wakes compared; at most {max_entries} heap entries");
        assert!(compared > 1_000, "compared only {compared} wakes");
    }
}
