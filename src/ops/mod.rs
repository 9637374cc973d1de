//! What an operator runs over the ledger and the fleet, beside the runs themselves:
//! [`audit`] (a ledger against its schedule), [`recover`] (cut-off runs, missed slots,
//! queued re-runs), [`retention`], [`pause`] across the fleet, the [`fleet`]'s
//! heartbeats, [`metrics`], [`drill`] (each layer tried for real), and [`crontab`]
//! import.

pub mod audit;
pub mod crontab;
pub mod drill;
pub mod fleet;
pub mod metrics;
pub mod pause;
pub mod recover;
pub mod retention;
