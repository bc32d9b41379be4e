//! Locks that survive a panic of another holder.
//!
//! A panic while a mutex is held poisons it; every later `lock()` then fails. In this
//! project such a panic is already reported where it happened (a plugin's by
//! [`guard`](crate::guard), the runtime's as an error), and the data behind our mutexes
//! (progress records, counters, name tables, serialisation tokens) stays valid after it,
//! so failing every later call too would turn one reported error into a hung or aborted
//! job. [`lock`] takes the lock either way.

use std::sync::{Mutex, MutexGuard};

/// Lock `m`, also when a panicking holder poisoned it (see the module docs for why).
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    #[test]
    fn a_poisoned_lock_is_still_taken_with_its_data() {
        let m = Mutex::new(7);
        let _ = std::panic::catch_unwind(|| {
            let _held = m.lock().unwrap();
            panic!("poison it");
        });
        assert!(m.is_poisoned());
        assert_eq!(*super::lock(&m), 7);
    }
}
