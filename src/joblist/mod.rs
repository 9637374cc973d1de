//! What a job is: the job list read from `jobs.toml` and `jobs.d` ([`config`]), one job
//! and its validation ([`job`]), the one table of keys the parser accepts ([`keys`]), and
//! systemd's time spans (systemd.time(7): [`timespan`]).

pub mod config;
pub mod job;
pub mod keys;
pub mod timespan;
