//! `muster-fake-llm`: a fake Anthropic/OpenAI model server on loopback. A skeleton until the
//! providers issue builds it; it depends on no muster crate.
