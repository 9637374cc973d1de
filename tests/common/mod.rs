//! Helpers shared by the integration tests.

pub mod conformance;
pub mod helper;
