//! Small single-threaded async primitives the coordinator's tasks share: a bounded [`Mailbox`],
//! a one-shot [`Slot`], a [`Doorbell`], and [`timeout`] over the runtime's sleep.
//!
//! Contract: everything runs on one node's thread (no `Send`), as the `Runtime` promises; a
//! waiting task is woken by the value's arrival. Mailboxes are bounded and drop their oldest item
//! when full (their users, Raft's transport, tolerate loss).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

use crate::runtime::Runtime;

struct MailboxInner<T> {
    items: VecDeque<T>,
    waker: Option<Waker>,
    items_max: usize,
}

/// A bounded queue with one async receiver.
pub struct Mailbox<T> {
    inner: Rc<RefCell<MailboxInner<T>>>,
}

impl<T> Clone for Mailbox<T> {
    fn clone(&self) -> Self {
        Mailbox {
            inner: self.inner.clone(),
        }
    }
}

impl<T> Mailbox<T> {
    pub fn new(items_max: usize) -> Self {
        Mailbox {
            inner: Rc::new(RefCell::new(MailboxInner {
                items: VecDeque::new(),
                waker: None,
                items_max: items_max.max(1),
            })),
        }
    }

    /// Queues `item`, dropping the oldest when full; returns whether one was dropped.
    pub fn push(&self, item: T) -> bool {
        let mut inner = self.inner.borrow_mut();
        let dropped = if inner.items.len() >= inner.items_max {
            inner.items.pop_front();
            true
        } else {
            false
        };
        inner.items.push_back(item);
        if let Some(w) = inner.waker.take() {
            w.wake();
        }
        dropped
    }

    pub fn try_recv(&self) -> Option<T> {
        self.inner.borrow_mut().items.pop_front()
    }

    /// The next item, waiting for one.
    pub fn recv(&self) -> impl Future<Output = T> + '_ {
        poll_fn(move |cx| {
            let mut inner = self.inner.borrow_mut();
            match inner.items.pop_front() {
                Some(item) => Poll::Ready(item),
                None => {
                    inner.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
    }
}

/// A value filled once by one task and awaited by another.
pub struct Slot<T> {
    inner: Rc<RefCell<(Option<T>, Option<Waker>)>>,
}

impl<T> Clone for Slot<T> {
    fn clone(&self) -> Self {
        Slot {
            inner: self.inner.clone(),
        }
    }
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot {
            inner: Rc::new(RefCell::new((None, None))),
        }
    }
}

impl<T> Slot<T> {
    /// Fills the slot (a second fill replaces an unread first one) and wakes the waiter.
    pub fn fill(&self, value: T) {
        let mut inner = self.inner.borrow_mut();
        inner.0 = Some(value);
        if let Some(w) = inner.1.take() {
            w.wake();
        }
    }

    pub fn wait(&self) -> impl Future<Output = T> + '_ {
        poll_fn(move |cx| {
            let mut inner = self.inner.borrow_mut();
            match inner.0.take() {
                Some(v) => Poll::Ready(v),
                None => {
                    inner.1 = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
    }
}

/// Runs `fut` for at most `ms` of the runtime's time; `None` when the time ran out first.
pub async fn timeout<R: Runtime, T>(rt: &R, ms: u64, fut: impl Future<Output = T>) -> Option<T> {
    let mut fut = pin!(fut);
    let mut sleep = pin!(rt.sleep(Duration::from_millis(ms)));
    poll_fn(move |cx| {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(v));
        }
        if sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        Poll::Pending
    })
    .await
}

/// A wake-up for the one task that waits on it, rung by others on its node when they leave it
/// work: a broker's cluster task waits between its rounds on the admin queue's, the controlled
/// shutdown's and its coordinator client's (events received, a new connection, expiry). Clones
/// share it.
#[derive(Clone, Debug, Default)]
pub struct Doorbell(Rc<RefCell<Bell>>);

#[derive(Debug, Default)]
struct Bell {
    rings: u64,
    waker: Option<Waker>,
}

impl Doorbell {
    pub fn ring(&self) {
        let waker = {
            let mut bell = self.0.borrow_mut();
            bell.rings += 1;
            bell.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// How many times it rang so far.
    pub fn rings(&self) -> u64 {
        self.0.borrow().rings
    }

    /// Completes once it has rung more than `seen` times in all (at once if it already has).
    pub fn rung_since(&self, seen: u64) -> impl Future<Output = ()> + '_ {
        poll_fn(move |cx| {
            let mut bell = self.0.borrow_mut();
            if bell.rings != seen {
                return Poll::Ready(());
            }
            match &mut bell.waker {
                Some(waker) => waker.clone_from(cx.waker()),
                None => bell.waker = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
    }
}

/// A waker that counts its wakes, for the tests of these primitives and of the node's
/// `PartitionWatch`.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Count(pub(crate) std::sync::atomic::AtomicUsize);

#[cfg(test)]
impl std::task::Wake for Count {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::task::Context;

    use super::*;

    /// A doorbell's wait ends at the first ring after the count it was given, or at once if
    /// that ring came before the wait began.
    #[test]
    fn a_doorbell_wakes_its_waiter_on_a_ring_after_the_count_it_saw() {
        let bell = Doorbell::default();
        let seen = bell.rings();
        let count = Arc::new(Count::default());
        let waker = Waker::from(count.clone());
        let mut wait = Box::pin(bell.rung_since(seen));
        assert!(wait.as_mut().poll(&mut Context::from_waker(&waker)).is_pending());
        bell.ring();
        assert_eq!(count.0.load(Ordering::Relaxed), 1, "the ring woke the waiter");
        assert!(wait.as_mut().poll(&mut Context::from_waker(&waker)).is_ready());
        // A ring between the reading and the wait is not lost.
        let seen = bell.rings();
        bell.ring();
        let mut late = Box::pin(bell.rung_since(seen));
        assert!(late.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_ready());
        assert_eq!(bell.rings(), 2);
    }
}
