//! The one integration test binary of `muster-fake-llm`: real HTTP on loopback.

mod all {
    mod anthropic;
    pub mod common;
    mod openai;
    mod selection;
    mod validation;
}
