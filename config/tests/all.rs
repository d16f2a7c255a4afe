//! The integration tests of `muster-config`, in one binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
