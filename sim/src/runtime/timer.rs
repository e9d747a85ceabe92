//! Arming madsim timers without making a madsim `Sleep` for each one.
//!
//! madsim 0.2.34 adds a timer only from `Sleep::poll`, and makes a `Sleep` only in
//! `TimeHandle::sleep` and `sleep_until`. Each of those clones the handle (two `Arc`s: two atomic
//! increments, and two decrements when the sleep drops) and reads the clock (a spin lock) once,
//! `sleep` twice. A batched seed made ~40,000 of them, most only to arm one timer.
//!
//! A `Sleep` is a clock handle and a deadline. It is `Unpin`, and its `reset` is public. So one
//! `Sleep` kept by its owner and reset to each new deadline arms the same timer as a fresh one
//! would: same deadline, same waker, same place in madsim's heap. It skips the clones and the
//! clock readings that made it.
//!
//! Contract:
//! - [`TimerArm::deadline_after`] is the deadline `TimeHandle::sleep` would give, and
//!   [`TimerArm::deadline_at`] the one `sleep_until` would: at least 1 ms from `now`.
//! - [`TimerArm::arm`] does what polling a fresh `sleep_until(deadline)` did: `Ready` when the
//!   deadline has passed (nothing armed), else a timer added for a clone of the waker.
//!   Deadlines given to it must already be at least 1 ms away where the code it replaces used
//!   `sleep_until` (which raises them to that): `deadline_at` raises them.
//! - Single-threaded: a `RefCell`, as every owner lives on the run's one thread.

use std::cell::RefCell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use madsim::time::{Sleep, TimeHandle};

/// The shortest sleep madsim's `TimeHandle::sleep_until` makes.
const MIN_SLEEP: Duration = Duration::from_millis(1);

/// madsim's clock, with one `Sleep` to arm its timers with.
pub(crate) struct TimerArm {
    time: TimeHandle,
    sleep: RefCell<Sleep>,
}

impl fmt::Debug for TimerArm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TimerArm")
    }
}

impl TimerArm {
    pub(crate) fn new(time: &TimeHandle) -> Self {
        TimerArm {
            time: time.clone(),
            sleep: RefCell::new(time.sleep(Duration::ZERO)),
        }
    }

    /// madsim's clock.
    pub(crate) fn time(&self) -> &TimeHandle {
        &self.time
    }

    /// The virtual time now (one reading of madsim's clock).
    pub(crate) fn now(&self) -> Instant {
        self.time.now_instant()
    }

    /// The deadline of `TimeHandle::sleep(duration)` made at `now`.
    pub(crate) fn deadline_after(now: Instant, duration: Duration) -> Instant {
        Self::deadline_at(now, now + duration)
    }

    /// The deadline of `TimeHandle::sleep_until(at)` made at `now`.
    pub(crate) fn deadline_at(now: Instant, at: Instant) -> Instant {
        at.max(now + MIN_SLEEP)
    }

    /// Arms a madsim timer that wakes `waker` at `deadline`: `Pending` once armed, `Ready` (and
    /// nothing armed) if `deadline` has passed.
    pub(crate) fn arm(&self, deadline: Instant, waker: &Waker) -> Poll<()> {
        let mut sleep = self.sleep.borrow_mut();
        let mut sleep = Pin::new(&mut *sleep);
        sleep.as_mut().reset(deadline);
        sleep.poll(&mut Context::from_waker(waker))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    use super::*;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// One `Sleep` armed three times wakes three times, each at its own deadline, and a passed
    /// deadline arms nothing.
    #[test]
    fn one_sleep_arms_a_timer_per_deadline() {
        let runtime = madsim::runtime::Runtime::new();
        runtime.block_on(async {
            let arm = TimerArm::new(&TimeHandle::current());
            let count = Arc::new(Count(AtomicUsize::new(0)));
            let waker = Waker::from(count.clone());
            let start = arm.now();
            for ms in [5, 10, 20] {
                let deadline = TimerArm::deadline_after(start, Duration::from_millis(ms));
                assert!(arm.arm(deadline, &waker).is_pending(), "{ms} ms away: armed");
            }
            assert!(arm.arm(start, &waker).is_ready(), "a passed deadline is ready at once");
            let woken = |at_ms: u64| async move {
                madsim::time::sleep_until(start + Duration::from_millis(at_ms)).await;
            };
            woken(7).await;
            assert_eq!(count.0.load(Ordering::SeqCst), 1, "woken by the 5 ms timer only");
            woken(15).await;
            assert_eq!(count.0.load(Ordering::SeqCst), 2, "and by the 10 ms one");
            woken(25).await;
            assert_eq!(count.0.load(Ordering::SeqCst), 3, "and by the 20 ms one");
        });
    }

    /// Like `TimeHandle::sleep`: at least 1 ms.
    #[test]
    fn deadlines_are_at_least_a_millisecond_away() {
        let runtime = madsim::runtime::Runtime::new();
        runtime.block_on(async {
            let time = TimeHandle::current();
            let now = time.now_instant();
            for micros in [0, 300, 999, 1_000, 7_000] {
                let duration = Duration::from_micros(micros);
                let made = time.sleep(duration).deadline();
                assert_eq!(TimerArm::deadline_after(now, duration), made, "{micros} us");
                assert!(made >= now + MIN_SLEEP);
            }
        });
    }
}
