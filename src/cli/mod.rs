//! Command-line front ends (being written).
