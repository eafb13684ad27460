//! The addresses of the objects of one kind (IDs, event channels) this
//! library handed out and has not freed, so that a stale pointer from the
//! application is refused instead of dereferenced.

use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard};

/// The addresses of the objects of one kind this library handed out and
/// has not freed. An application may pass a pointer after destroying its
/// object (perftest's `-R` client retries a refused connection on the IDs
/// it has just destroyed): such a pointer is refused, not dereferenced.
pub struct Live(Mutex<Option<HashSet<usize>>>);

impl Live {
    pub const fn new() -> Live {
        Live(Mutex::new(None))
    }

    fn set(&self) -> MutexGuard<'_, Option<HashSet<usize>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `p` was handed out.
    pub fn add<T>(&self, p: *const T) {
        self.set()
            .get_or_insert_with(Default::default)
            .insert(p as usize);
    }

    /// `p` is about to be freed; false if it was not live.
    pub fn remove<T>(&self, p: *const T) -> bool {
        self.set().as_mut().is_some_and(|s| s.remove(&(p as usize)))
    }

    /// Whether `p` names a live object.
    pub fn has<T>(&self, p: *const T) -> bool {
        !p.is_null()
            && self
                .set()
                .as_ref()
                .is_some_and(|s| s.contains(&(p as usize)))
    }
}

impl Default for Live {
    fn default() -> Live {
        Live::new()
    }
}
