//! The funnel: a background thread's MPI calls made by the application's thread, at the
//! library's own calls. This is how a scheme is applied in the background where the
//! application initialised MPI below `MPI_THREAD_MULTIPLE` (what `MPI_Init` gives): only
//! the thread that called into the library may call MPI then, so the background thread
//! reads, encodes and writes on its own and hands each MPI call (a post, a test, a probe:
//! never a blocking operation that waits for a peer) to that thread, which runs it when it
//! next enters the library (`need_checkpoint`, `should_exit`, and every call that waits
//! for the protection) and hands the result back.
//!
//! Why only non-blocking calls: the application's thread runs a handed call inside the
//! library's own call, and the runtime's collectives there need every other rank's
//! application thread to arrive. A handed call that waited for a peer's background thread
//! (whose own calls wait for that peer's application thread) could leave both waiting.
//!
//! `unsafe` here: a call borrows the background thread's stack (the plugin's buffers, the
//! request it polls) while another thread runs it; the lifetime is erased for the hand-over
//! and restored by waiting (see `run`).
#![allow(unsafe_code)]

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use scr_plugin::sync::lock;

/// A call handed over: the background thread's closure with its lifetime erased.
struct Call(*mut (dyn FnMut() + 'static));

// SAFETY: the closure is run by exactly one other thread (the serving one) while the
// thread that owns it waits in `Funnel::run` for it to finish; the two never touch it at
// the same time, and what it captures is only used by the thread running it.
unsafe impl Send for Call {}

#[derive(Default)]
struct Slot {
    /// The call waiting for the serving thread.
    call: Option<Call>,
    /// The last call handed over has run.
    done: bool,
    /// Its panic, for the thread that handed it over.
    panic: Option<Box<dyn Any + Send>>,
}

thread_local! {
    /// This thread is a background thread whose MPI calls go through a funnel (see
    /// [`Funnel::become_client`]); on any other thread they run at once.
    static CLIENT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// One rank's funnel: at most one background thread hands calls over, and the
/// application's thread, inside the library, serves them.
pub(crate) struct Funnel {
    slot: Mutex<Slot>,
    /// Signalled when a call is handed over and when one has run.
    changed: Condvar,
    /// The background thread is inside an MPI service (a send, a receive, a collective,
    /// settling): its next call follows within microseconds. Outside one it reads,
    /// encodes or writes, and a serving thread with a budget goes back to the application.
    engaged: AtomicBool,
    /// The background thread's last test found its request still waiting for another
    /// member: a serving thread with a budget goes back to the application rather than
    /// wait for that member (whose own application thread may be computing).
    stalled: AtomicBool,
    /// Since when the serving thread waits for the background work to end (a `serve`
    /// without a budget), if it does.
    waiting: Mutex<Option<Instant>>,
}

/// While held, the background thread is inside an MPI service (see `Funnel::engaged`).
pub(crate) struct Engaged<'a>(&'a Funnel);

impl Drop for Engaged<'_> {
    fn drop(&mut self) {
        self.0.engaged.store(false, Ordering::SeqCst);
    }
}

impl Funnel {
    /// A funnel (served by whichever thread calls [`Funnel::serve`]).
    pub(crate) fn new() -> Funnel {
        Funnel {
            slot: Mutex::new(Slot::default()),
            changed: Condvar::new(),
            engaged: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
            waiting: Mutex::new(None),
        }
    }

    /// How long the serving thread has been waiting for the background work to end (zero
    /// while it is not): the only time in which every member's steps advance steadily,
    /// hence what a member's patience with the others is measured in (between the
    /// library's calls the others advance only as often as their applications call).
    pub(crate) fn waited(&self) -> Duration {
        lock(&self.waiting).map_or(Duration::ZERO, |since| since.elapsed())
    }

    /// Record a test's outcome (made inside a call, on the serving thread): whether the
    /// request it tested completed.
    pub(crate) fn note(&self, completed: bool) {
        self.stalled.store(!completed, Ordering::SeqCst);
    }

    /// The background thread enters an MPI service, until the guard is dropped.
    pub(crate) fn engage(&self) -> Engaged<'_> {
        self.engaged.store(true, Ordering::SeqCst);
        Engaged(self)
    }

    /// Mark the calling thread (a background protection's, for its whole life) as one
    /// whose [`Funnel::run`] calls are handed over.
    pub(crate) fn become_client() {
        CLIENT.with(|c| c.set(true));
    }

    /// Run `f` on the serving thread and return what it returned (a panic there panics
    /// here), when called on a thread that [became a client](Funnel::become_client).
    /// Blocks until the serving thread ran it, which it does only inside the library: `f`
    /// must not wait for another rank. On any other thread (the application's own, which
    /// serves: a host dropped there, an apply run there when no thread could be started),
    /// `f` runs at once.
    pub(crate) fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        if !CLIENT.with(|c| c.get()) {
            return f();
        }
        let mut f = Some(f);
        let mut out = None;
        let mut call = || {
            if let Some(f) = f.take() {
                out = Some(f());
            }
        };
        let short: *mut (dyn FnMut() + '_) = &mut call;
        // (`call` and what it borrows outlive every use of the pointer: it is used by
        // `serve` alone, before it sets `done`, and this function neither returns nor
        // unwinds before then: the loop below has no panicking step)
        // SAFETY: only the lifetime is changed; the pointer does not outlive `call`.
        let erased = unsafe {
            std::mem::transmute::<*mut (dyn FnMut() + '_), *mut (dyn FnMut() + 'static)>(short)
        };
        let mut slot = lock(&self.slot);
        slot.call = Some(Call(erased));
        slot.done = false;
        self.changed.notify_all();
        while !slot.done {
            slot = self
                .changed
                .wait(slot)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        slot.done = false;
        let panic = slot.panic.take();
        drop(slot);
        if let Some(p) = panic {
            std::panic::resume_unwind(p);
        }
        match out {
            Some(r) => r,
            // (`done` is set only after the call ran or panicked)
            None => unreachable!("a funnelled call ended without a result"),
        }
    }

    /// On the serving thread: run the calls handed over until `finished` says the
    /// background work is over, or, with a `budget`, until it is spent, the background
    /// thread is outside an MPI service (reading, encoding or writing: it needs nothing
    /// of this thread), or its last test found another member not there yet (whose
    /// application may be computing: waiting for it would cost this one for nothing).
    /// Each call runs under the MPI lock (`SERIAL`).
    pub(crate) fn serve(&self, budget: Option<Duration>, finished: &dyn Fn() -> bool) {
        let started = Instant::now();
        if budget.is_none() {
            *lock(&self.waiting) = Some(started);
        }
        // (what the last test of an earlier serve found is old news)
        self.stalled.store(false, Ordering::SeqCst);
        let mut slot = lock(&self.slot);
        loop {
            if let Some(Call(call)) = slot.call.take() {
                drop(slot);
                let ran = {
                    let _mpi = lock(&super::SERIAL);
                    // SAFETY: `call` points to the closure of a `run` that waits until
                    // `done` is set below (see `run`), and no other thread runs it.
                    std::panic::catch_unwind(AssertUnwindSafe(|| unsafe { (*call)() }))
                };
                slot = lock(&self.slot);
                slot.panic = ran.err();
                slot.done = true;
                self.changed.notify_all();
                if budget.is_some() && self.stalled.load(Ordering::SeqCst) {
                    return;
                }
                continue;
            }
            if finished() {
                *lock(&self.waiting) = None;
                return;
            }
            if let Some(budget) = budget {
                if started.elapsed() >= budget || !self.engaged.load(Ordering::SeqCst) {
                    return;
                }
            }
            slot = self
                .changed
                .wait_timeout(slot, Duration::from_micros(50))
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
    }
}

impl Default for Funnel {
    fn default() -> Funnel {
        Funnel::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_call_runs_on_the_serving_thread_with_the_callers_borrows() {
        let funnel = Arc::new(Funnel::new());
        let server = std::thread::current().id();
        let theirs = funnel.clone();
        let worker = std::thread::spawn(move || {
            Funnel::become_client();
            let mut buf = vec![0u8; 4];
            let ran_on = theirs.run(|| {
                buf[2] = 7;
                std::thread::current().id()
            });
            (ran_on, buf)
        });
        funnel.serve(None, &|| worker.is_finished());
        let (ran_on, buf) = worker.join().unwrap();
        assert_eq!(ran_on, server);
        assert_eq!(buf, [0, 0, 7, 0]);
    }

    #[test]
    fn a_panic_of_a_call_reaches_the_thread_that_handed_it_over() {
        let funnel = Arc::new(Funnel::new());
        let theirs = funnel.clone();
        let worker = std::thread::spawn(move || {
            Funnel::become_client();
            std::panic::catch_unwind(AssertUnwindSafe(|| theirs.run(|| panic!("in MPI"))))
                .err()
                .and_then(|p| p.downcast_ref::<&str>().map(|s| s.to_string()))
        });
        funnel.serve(None, &|| worker.is_finished());
        assert_eq!(worker.join().unwrap().as_deref(), Some("in MPI"));
    }

    #[test]
    fn serving_with_a_budget_returns_while_the_background_thread_asks_nothing() {
        let funnel = Arc::new(Funnel::new());
        let go = Arc::new(AtomicBool::new(false));
        let (theirs, gate) = (funnel.clone(), go.clone());
        let worker = std::thread::spawn(move || {
            Funnel::become_client();
            while !gate.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            let _in_mpi = theirs.engage();
            let first = theirs.run(|| 5);
            // (a thread polling a request hands the next test over a moment later)
            std::thread::sleep(Duration::from_millis(20));
            first + theirs.run(|| 1)
        });
        // outside an MPI service: back at once
        let t = Instant::now();
        funnel.serve(Some(Duration::from_secs(5)), &|| false);
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert!(!worker.is_finished());
        go.store(true, Ordering::SeqCst);
        while !funnel.engaged.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        // inside one: served until the budget is spent, both calls run within it
        funnel.serve(Some(Duration::from_secs(5)), &|| worker.is_finished());
        assert!(worker.is_finished());
        // and a budget bounds the wait while it asks for nothing more
        let held = funnel.engage();
        let t = Instant::now();
        funnel.serve(Some(Duration::from_millis(30)), &|| false);
        assert!(t.elapsed() >= Duration::from_millis(30));
        drop(held);
        assert_eq!(worker.join().unwrap(), 6);
    }

    #[test]
    fn serving_with_a_budget_returns_when_a_test_finds_another_member_not_there_yet() {
        let funnel = Arc::new(Funnel::new());
        let theirs = funnel.clone();
        let worker = std::thread::spawn(move || {
            Funnel::become_client();
            let _in_mpi = theirs.engage();
            // a test whose request still waits for another member, then one that completed
            let first = theirs.run(|| {
                theirs.note(false);
                1
            });
            first
                + theirs.run(|| {
                    theirs.note(true);
                    2
                })
        });
        while !funnel.engaged.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let t = Instant::now();
        funnel.serve(Some(Duration::from_secs(5)), &|| worker.is_finished());
        assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
        assert!(!worker.is_finished());
        funnel.serve(None, &|| worker.is_finished());
        assert_eq!(worker.join().unwrap(), 3);
    }

    #[test]
    fn a_call_made_on_a_thread_that_is_no_client_runs_at_once() {
        let funnel = Funnel::new();
        assert_eq!(funnel.run(|| 3), 3);
        let other = std::thread::spawn(move || funnel.run(|| 4));
        assert_eq!(other.join().unwrap(), 4);
    }
}
