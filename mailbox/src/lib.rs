//! `muster-mailbox`: the durable store.
