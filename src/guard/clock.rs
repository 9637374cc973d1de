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

/// Whether a store's time proves this host's clock apart from it by more than `tolerance`
/// (µs), given when the call that read it was sent and answered by this host's clock (µs
/// since the epoch). The store read its time somewhere between the two, so with clocks
/// that agree within the tolerance it lies in [`sent` − `tolerance`, `answered` +
/// `tolerance`]; only a time outside proves skew. A refusal judged against `sent` alone
/// (the claim's [`crate::store::ClockCheck`]) can come from a call that spent longer than
/// the tolerance in flight (a loaded host or server, a slow network).
pub fn skew_proven(sent: i64, answered: i64, store_now: i64, tolerance: i64) -> bool {
    store_now < sent.saturating_sub(tolerance) || store_now > answered.saturating_add(tolerance)
}

#[cfg(test)]
mod tests {
    use super::skew_proven;

    const S: i64 = 1_000_000;

    #[test]
    fn a_slow_answer_proves_no_skew_and_a_time_outside_the_call_does() {
        let sent = 1_800_000_000 * S;
        // Answered 2.7 s after it was sent, the store's time read 2.7 s in: clocks agree.
        assert!(!skew_proven(sent, sent + 2_700_000, sent + 2_700_000, S));
        // Within the tolerance on either side of the call.
        assert!(!skew_proven(sent, sent + 10_000, sent - S, S));
        assert!(!skew_proven(sent, sent + 10_000, sent + 10_000 + S, S));
        // Outside: the host is ahead of the store, or behind it.
        assert!(skew_proven(sent, sent + 10_000, sent - S - 1, S));
        assert!(skew_proven(sent, sent + 10_000, sent + 10_000 + S + 1, S));
        assert!(skew_proven(sent, sent + 2_700_000, sent + 5 * S, S));
    }
}
