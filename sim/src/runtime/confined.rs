//! `Confined`: a lock without atomic operations for state only the run's own thread touches.
//!
//! Why: a run is one OS thread (madsim's executor, every node's tasks, its timers' callbacks),
//! yet madsim wants what a node's init closure captures and what a waker holds to be
//! `Send + Sync`, so the runtime's shared state sat behind `std::sync::Mutex`: two atomic
//! operations a lock, ~250,000 a batched seed (the network's pipes, the alarm queues, the
//! disks). An atomic read-modify-write costs about ten times a plain one here (BENCHMARKS.md,
//! "Cache misses, locks a single thread does not need").
//!
//! Contract:
//! - A `Confined` is created on some thread and may only be locked on that thread: a lock from
//!   any other thread panics ("touched from another thread"), whatever the value. So no two
//!   threads ever touch it; that, checked at every lock, is what makes it `Sync`.
//! - One guard at a time: locking it again while a guard lives panics (where a `Mutex` would
//!   deadlock). A guard cannot leave its thread (it is neither `Send` nor `Sync`).
//! - Dropping a `Confined` drops its value wherever it is dropped (`T: Send`), as a `Mutex` does.
//!
//! How a thread is told apart: by the address of a thread-local, which no two live threads
//! share. A dead thread's address may be reused by a new one; the new thread is then the only
//! one that can lock the value, so there is still only ever one.

use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

std::thread_local! {
    static MARK: u8 = const { 0 };
}

/// The calling thread's mark: the address of its [`MARK`].
fn thread_mark() -> usize {
    MARK.with(|mark| mark as *const u8 as usize)
}

/// A value only the thread that created it may lock; see the module's contract.
pub struct Confined<T> {
    owner: usize,
    locked: Cell<bool>,
    value: UnsafeCell<T>,
}

// The simulator's third `unsafe` (after the allocator's two in `bin/gregor-sim.rs`): a `Sync`
// promise the compiler cannot check, kept by the owner check in `lock`.
#[allow(unsafe_code)]
// SAFETY: `locked` and `value` are only reached through `lock`, which first checks that the
// caller runs on the owner thread: however many threads hold a `&Confined<T>`, only that one
// gets past the check, so neither is ever touched by two threads. `T: Send`: the value may be
// dropped on, or handed to, the thread that drops the `Confined`.
unsafe impl<T: Send> Sync for Confined<T> {}

impl<T> Confined<T> {
    /// A value owned by the calling thread.
    pub fn new(value: T) -> Self {
        Confined {
            owner: thread_mark(),
            locked: Cell::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// The value, exclusively, until the guard drops. Panics on another thread than the one
    /// that created it, and while another guard of it lives.
    pub fn lock(&self) -> ConfinedGuard<'_, T> {
        assert!(
            thread_mark() == self.owner,
            "a Confined value was touched from another thread than the one that created it"
        );
        assert!(!self.locked.replace(true), "a Confined value was locked twice");
        ConfinedGuard {
            cell: self,
            _not_send: PhantomData,
        }
    }
}

impl<T: Default> Default for Confined<T> {
    fn default() -> Self {
        Confined::new(T::default())
    }
}

impl<T> std::fmt::Debug for Confined<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Confined")
    }
}

/// The exclusive use of a [`Confined`] value, on its thread.
pub struct ConfinedGuard<'a, T> {
    cell: &'a Confined<T>,
    /// Neither `Send` nor `Sync`: the guard stays on the thread that passed the owner check.
    _not_send: PhantomData<*const ()>,
}

impl<T> Deref for ConfinedGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one (`locked`), on the owner thread (checked by `lock`).
        #[allow(unsafe_code)]
        unsafe {
            &*self.cell.value.get()
        }
    }
}

impl<T> DerefMut for ConfinedGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` keeps this the only reference through the guard.
        #[allow(unsafe_code)]
        unsafe {
            &mut *self.cell.value.get()
        }
    }
}

impl<T> Drop for ConfinedGuard<'_, T> {
    fn drop(&mut self) {
        self.cell.locked.set(false);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn the_owner_thread_locks_and_changes_the_value() {
        let c = Confined::new(vec![1]);
        c.lock().push(2);
        {
            let mut g = c.lock();
            g.push(3);
        }
        assert_eq!(*c.lock(), vec![1, 2, 3]);
    }

    #[test]
    fn another_thread_cannot_lock_it() {
        let c = Arc::new(Confined::new(5));
        let other = c.clone();
        let result = std::thread::spawn(move || *other.lock()).join();
        let message = result.expect_err("a lock from another thread must panic");
        let message = message
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| message.downcast_ref::<String>().map(String::as_str))
            .unwrap_or_default()
            .to_string();
        assert!(message.contains("another thread"), "panic message: {message}");
        assert_eq!(*c.lock(), 5, "the owner still can");
    }

    #[test]
    #[should_panic(expected = "locked twice")]
    fn a_second_guard_while_one_lives_panics() {
        let c = Confined::new(0);
        let _first = c.lock();
        let _second = c.lock();
    }
}
