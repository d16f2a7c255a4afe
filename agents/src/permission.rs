//! The permission engine: one function decides every tool call (allow, ask or deny, with a reason).
