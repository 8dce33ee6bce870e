//! One shared copy of each string that many cached objects repeat.
//!
//! Thousands of Nodes carry the same label keys and mostly the same values (their pool, zone,
//! instance type, architecture...), and thousands of metric series the same node names and
//! phases. An owned `String` per occurrence was most of what a cached Node cost (3.0 KB of its
//! 7.1 KB were its 21 labels, measured with heaptrack on 2,000 rig Nodes); an `Arc<str>` from an
//! [`Interner`] costs 16 bytes where the text is already held. The standard `HashSet` is the
//! whole table: the crates that intern do it behind a global lock or leak what they intern,
//! and the strings here come and go with the objects that hold them.

use std::collections::HashSet;
use std::sync::Arc;

/// A table of shared strings. Values no holder uses any more are dropped by [`forget_unused`]
/// (or on their own, once the table has doubled since the last sweep).
///
/// [`forget_unused`]: Interner::forget_unused
#[derive(Debug, Default)]
pub struct Interner {
    strings: HashSet<Arc<str>>,
    /// The table's size after the last sweep: a sweep walks every string, so it runs only once
    /// the table has grown by as much again.
    kept: usize,
}

/// The table is never swept below this size: a sweep of a small table frees next to nothing.
const SWEEP_FLOOR: usize = 1024;

impl Interner {
    /// The shared copy of `value`.
    pub fn get(&mut self, value: &str) -> Arc<str> {
        if let Some(shared) = self.strings.get(value) {
            return Arc::clone(shared);
        }
        if self.strings.len() >= (2 * self.kept).max(SWEEP_FLOOR) {
            self.forget_unused();
        }
        let shared: Arc<str> = Arc::from(value);
        self.strings.insert(Arc::clone(&shared));
        shared
    }

    /// Drops the strings only the table holds (those of a Node that is gone, a label removed).
    pub(crate) fn forget_unused(&mut self) {
        self.strings.retain(|value| Arc::strong_count(value) > 1);
        self.kept = self.strings.len();
    }

    /// How many strings the table holds.
    pub fn len(&self) -> usize {
        self.strings.len()
    }

    /// Whether the table holds no string.
    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_text_is_held_once_and_forgotten_when_no_one_holds_it() {
        let mut interner = Interner::default();
        let a = interner.get("us-west-2a");
        let b = interner.get("us-west-2a");
        assert!(Arc::ptr_eq(&a, &b));
        let gone = interner.get("ip-10-0-0-1");
        drop(gone);
        interner.forget_unused();
        assert_eq!(interner.len(), 1);
        assert_eq!(&*interner.get("us-west-2a"), "us-west-2a");
    }

    #[test]
    fn a_growing_table_sweeps_itself() {
        let mut interner = Interner::default();
        for i in 0..10 * SWEEP_FLOOR {
            // Every string is dropped at once, as a deleted Node's hostname is.
            let _ = interner.get(&format!("node-{i}"));
        }
        assert!(interner.len() <= SWEEP_FLOOR + 1, "{}", interner.len());
    }
}
