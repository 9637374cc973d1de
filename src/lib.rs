//! jobguard: run scheduled jobs exactly once per scheduled slot.
//!
//! Four layers cover each other's holes:
//! 1. a local, non-blocking `flock` per job ([`guard::lock`]),
//! 2. a lease with expiry and a fencing token in a store ([`guard::lease`], [`store`]),
//! 3. an idempotency key per slot handed to the job ([`shim`]),
//! 4. a run ledger with one record per attempt at a slot ([`guard::ledger`]).
//!
//! The systemd side is a generator ([`systemd::generator`], [`systemd::render`]) that turns the job list
//! ([`joblist::config`], [`joblist::job`]) into `jobguard@<job>.timer` units, whose services call
//! `jobguard run <job>` ([`shim`]). Slots come from the job's `OnCalendar=` expression,
//! evaluated by [`calendar`] exactly as systemd evaluates it.
//!
//! Binaries under `src/bin/` only parse arguments and call into [`cli`].

// The test mirror of the store rules (`tests/common/memory.rs`) names the crate
// `jobguard`, as the integration tests do; the rules' unit tests include it.
#[cfg(test)]
extern crate self as jobguard;

// The folders by concern: what a job is (`joblist`, `calendar`), the guard's layers
// (`guard`, `store`), one run (`shim`), the systemd side (`systemd`), what an operator
// runs over the ledger (`ops`), and the commands (`cli`), which nothing imports. `exit`,
// `paths` and `safe_path` serve every folder. No file reaches itself through its imports
// (tests/config.rs); some folders still import each other both ways (docs/development.md).
pub mod calendar;
pub mod cli;
pub mod exit;
pub mod guard;
pub mod joblist;
pub mod ops;
pub mod paths;
pub mod safe_path;
pub mod shim;
pub mod store;
pub mod systemd;
