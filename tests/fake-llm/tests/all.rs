//! The one integration test binary of `muster-fake-llm`: real HTTP on loopback.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail loudly"
)]

mod all {
    mod anthropic;
    pub mod common;
    mod control;
    mod faults;
    mod openai;
    mod selection;
    mod validation;
}
