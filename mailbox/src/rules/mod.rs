//! The store's rules, once for both backends: pure functions that validate, correlate, rank
//! and decide, and build the rows an operation writes. They read nothing and write nothing;
//! the operations of [`crate::ops`] run each backend's statements around them. A tidy test
//! (`each_store_rule_is_defined_once_for_both_backends`) keeps them defined here only.

pub(crate) mod ledger;
pub(crate) mod outcome;
pub(crate) mod respond;
pub(crate) mod roster;
pub(crate) mod send;
pub(crate) mod tasks;
pub(crate) mod work;
