//! Where "now" comes from, so tests can move time.
//!
//! Lease decisions use the store's clock ([`crate::store::Store::now`]); the embedded
//! SQLite store is on this host, so its clock is a [`Clock`] too.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// A source of wall-clock time.
pub trait Clock: Send + Sync {
    /// Now, in µs since the Unix epoch (UTC).
    fn now_usec(&self) -> i64;
}

/// The system's real-time clock (`CLOCK_REALTIME`).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_usec(&self) -> i64 {
        jiff::Timestamp::now().as_microsecond()
    }
}

/// A clock that stands still until moved; for tests. Clones share the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock showing `usec` µs since the epoch.
    pub fn new(usec: i64) -> Self {
        ManualClock(Arc::new(AtomicI64::new(usec)))
    }
    /// Moves the clock forward (or back, with a negative value) by `usec` µs.
    pub fn advance(&self, usec: i64) {
        self.0.fetch_add(usec, Ordering::SeqCst);
    }
    /// Sets the clock to `usec` µs since the epoch.
    pub fn set(&self, usec: i64) {
        self.0.store(usec, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_usec(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}
