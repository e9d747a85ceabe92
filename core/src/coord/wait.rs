//! Small single-threaded async primitives the coordinator's tasks share: a bounded [`Mailbox`],
//! a one-shot [`Slot`], and [`timeout`] over the runtime's sleep.
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
