//! Idempotency: a keyed operation's outcome is stored beside its effects, and a repeat of the
//! key returns that first outcome. These are the keys and the stored form.

use crate::error::{StoreError, StoreResult};

/// The operation key of `counter_for(name, key)`.
pub(crate) fn counter_key(name: &str, key: &str) -> String {
    format!("counter:{name}:{key}")
}

/// The idempotency key of the `task_assignment` a claim sends its claimer.
pub(crate) fn claim_key(agent: &str, task_id: i64) -> String {
    format!("claim:{agent}:{task_id}")
}

/// An outcome as stored under its key.
pub(crate) fn encode_outcome<T: serde::Serialize>(key: &str, outcome: &T) -> StoreResult<String> {
    serde_json::to_string(outcome).map_err(|e| StoreError::CorruptRow {
        table: "operations",
        detail: format!("the outcome of {key:?} cannot be stored: {e}"),
    })
}

/// A stored outcome read back.
pub(crate) fn decode_outcome<T: serde::de::DeserializeOwned>(
    key: &str,
    text: &str,
) -> StoreResult<T> {
    serde_json::from_str(text).map_err(|e| StoreError::CorruptRow {
        table: "operations",
        detail: format!("the outcome of {key:?} does not read: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_outcomes_round_trip_or_say_what_does_not_read() {
        assert_eq!(counter_key("request", "lead:t1"), "counter:request:lead:t1");
        assert_eq!(claim_key("dev", 3), "claim:dev:3");
        let table: [(&str, Option<i64>); 3] = [("7", Some(7)), ("\"x\"", None), ("", None)];
        for (text, expected) in table {
            let read: StoreResult<i64> = decode_outcome("k", text);
            match expected {
                Some(value) => assert_eq!(read.ok(), Some(value), "{text:?}"),
                None => assert!(
                    matches!(
                        read,
                        Err(StoreError::CorruptRow {
                            table: "operations",
                            ..
                        })
                    ),
                    "{text:?}"
                ),
            }
        }
        let stored = encode_outcome("k", &42_i64).ok();
        assert_eq!(stored.as_deref(), Some("42"));
    }
}
