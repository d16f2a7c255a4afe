//! `muster-tests`: end-to-end suites that cross muster's library crates. The suites live in
//! `tests/tests/` (one binary, `all.rs` + `suite/*.rs`) and drive config, mailbox and agents
//! together, with a real SQLite store and `muster-fake-llm` over real HTTP:
//! - `suite/plan_cycle.rs`: one agent's plan-mode cycle (settings and a policy file loaded
//!   through `muster-config`) run through the Anthropic client, through the OpenAI-compatible
//!   client with vLLM's and Ollama's quirks, and with plan-mode turns on OpenAI and the others
//!   on Anthropic; every run must end in the same workspace, transcript and decisions;
//! - `suite/compaction_wires.rs`: context compaction triggered by the usage each wire reports
//!   and continued from the summary, the same over both wires;
//! - `suite/provider_settings.rs`: where a client's base URL and key come from (settings
//!   files, `MUSTER_*` and provider variables, defaults).
//!
//! `suite/harness.rs` holds what they share (the project, the store, one main agent run, and
//! the comparison of two runs' records). Suites that run the `muster` binary live in
//! `orchestrator/tests/` instead. This library itself holds no code.
