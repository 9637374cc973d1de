//! The guard itself, below any store: the local lock ([`lock`], layer 1), the lease's
//! holder and fencing token ([`lease`], layer 2), the run ledger's records ([`ledger`],
//! layer 4) and the fenced dedupe marks that carry a slot's idempotency key downstream
//! ([`mark`], layer 3); what proves that a record is this installation's ([`identity`]);
//! and the clocks a lease is judged by ([`clock`]). The stores keep these records
//! ([`crate::store`]); a run applies them ([`crate::shim`]).

pub mod clock;
pub mod identity;
pub mod lease;
pub mod ledger;
pub mod lock;
pub mod mark;
