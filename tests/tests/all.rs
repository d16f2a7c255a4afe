//! End-to-end suites across muster's crates (config, mailbox, agents): one binary, one module
//! per concern.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod suite;
