//! `muster-tests`: end-to-end suites that cross muster's library crates. The suites live in
//! `tests/tests/` (one binary, `all.rs` + `suite/*.rs`) and drive config, mailbox and agents
//! together with a real SQLite store and `muster-fake-llm` over real HTTP:
//! `suite/plan_cycle.rs` runs one agent's plan-mode cycle (settings and a policy file loaded
//! through `muster-config`) through the Anthropic and the OpenAI-compatible client and checks
//! that both end in the same workspace, transcript and decisions. Suites that run the `muster`
//! binary live in `orchestrator/tests/` instead. This library itself holds no code.
