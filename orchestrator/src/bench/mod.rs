//! Benchmarks (`muster bench …`): figures, not tests. Each compares systems side by side in
//! one run and on one disk, and prints ratios beside absolute figures.

pub mod batch;
pub mod cache;
pub mod cockpit;
pub mod file_inbox;
pub mod mailbox;
mod samples;
pub mod sandbox;
pub mod team;
pub mod traces;
