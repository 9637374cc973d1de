//! jobguard: run scheduled jobs exactly once per scheduled slot.
//!
//! Four layers cover each other's holes:
//! 1. a local, non-blocking `flock` per job ([`lock`]),
//! 2. a lease with expiry and a fencing token in a store ([`lease`], [`store`]),
//! 3. an idempotency key per slot handed to the job ([`shim`]),
//! 4. a run ledger with one record per attempt at a slot ([`ledger`]).
//!
//! The systemd side is a generator ([`generator`], [`render`]) that turns the job list
//! ([`config`], [`job`]) into `jobguard@<job>.timer` units, whose services call
//! `jobguard run <job>` ([`shim`]). Slots come from the job's `OnCalendar=` expression,
//! evaluated by [`calendar`] exactly as systemd evaluates it.
//!
//! Binaries under `src/bin/` only parse arguments and call into [`cli`].

// The test mirror of the store rules (`tests/common/memory.rs`) names the crate
// `jobguard`, as the integration tests do; the rules' unit tests include it.
#[cfg(test)]
extern crate self as jobguard;

pub mod audit;
pub mod calendar;
pub mod cli;
pub mod clock;
pub mod config;
pub mod credential;
pub mod crontab;
pub mod drill;
pub mod exit;
pub mod fleet;
pub mod generator;
pub mod identity;
pub mod job;
pub mod journal;
pub mod keys;
pub mod lease;
pub mod ledger;
pub mod lock;
pub mod logind;
pub mod mark;
pub mod metrics;
pub mod paths;
pub mod pause;
pub mod recover;
pub mod render;
pub mod retention;
pub mod safe_path;
pub mod schedulers;
pub mod shim;
pub mod store;
pub mod systemd_dbus;
pub mod timespan;
pub mod unit_name;
