//! What a model server reports about a model's limits: the context window and the output
//! limit, read once per run from an OpenAI-compatible `GET /v1/models` and llama.cpp's
//! `GET /props`, so the runtime can clip the catalogue's values to what the server serves.
//!
//! Fields read from the model's `/v1/models` entry (the entry whose `id` is the model, or the
//! only entry of a single-model server such as llama.cpp, which serves its one model under any
//! name):
//!
//! | Server | Context window | Output limit |
//! |---|---|---|
//! | vLLM | `max_model_len` | — |
//! | OpenRouter | `context_length`, `top_provider.context_length` | `top_provider.max_completion_tokens` |
//! | Groq and others | `context_window`, `max_context_length` | `max_completion_tokens`, `max_output_tokens` |
//!
//! llama.cpp's `/props`: `default_generation_settings.n_ctx` (the context of one slot, what a
//! request can use), else a top-level `n_ctx`; `default_generation_settings.params.n_predict`
//! when positive (the server's own cap on generated tokens). When both sources give a value,
//! the smaller wins.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The limits a server reported for one model; `None` where it reported nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output: Option<u64>,
}

impl ServerLimits {
    /// Whether the server reported anything.
    pub fn is_empty(&self) -> bool {
        self.context_window.is_none() && self.max_output.is_none()
    }

    /// Both reports together: the smaller value where both have one.
    pub fn merge(self, other: ServerLimits) -> ServerLimits {
        ServerLimits {
            context_window: min_of(self.context_window, other.context_window),
            max_output: min_of(self.max_output, other.max_output),
        }
    }

    /// The limits in `/v1/models`' entry for `model`.
    pub fn from_models_list(body: &Value, model: &str) -> ServerLimits {
        let Some(data) = body.get("data").and_then(Value::as_array) else {
            return ServerLimits::default();
        };
        let entry = data
            .iter()
            .find(|entry| entry.get("id").and_then(Value::as_str) == Some(model))
            .or(match data.as_slice() {
                [only] => Some(only),
                _ => None,
            });
        let Some(entry) = entry else {
            return ServerLimits::default();
        };
        let top = entry.get("top_provider").unwrap_or(&Value::Null);
        let smallest = |fields: &[(&Value, &str)]| {
            fields
                .iter()
                .filter_map(|(object, field)| positive(object.get(field)))
                .min()
        };
        ServerLimits {
            context_window: smallest(&[
                (entry, "max_model_len"),
                (entry, "context_length"),
                (entry, "context_window"),
                (entry, "max_context_length"),
                (top, "context_length"),
            ]),
            max_output: smallest(&[
                (entry, "max_output_tokens"),
                (entry, "max_completion_tokens"),
                (top, "max_completion_tokens"),
            ]),
        }
    }

    /// The limits in llama.cpp's `/props`.
    pub fn from_props(body: &Value) -> ServerLimits {
        let settings = body
            .get("default_generation_settings")
            .unwrap_or(&Value::Null);
        ServerLimits {
            context_window: positive(settings.get("n_ctx")).or_else(|| positive(body.get("n_ctx"))),
            max_output: positive(
                settings
                    .get("params")
                    .and_then(|params| params.get("n_predict")),
            )
            .or_else(|| positive(settings.get("n_predict"))),
        }
    }
}

fn min_of(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A positive integer (llama.cpp's `n_predict: -1` means "no cap").
fn positive(value: Option<&Value>) -> Option<u64> {
    value.and_then(Value::as_u64).filter(|n| *n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_servers_fields_are_read() {
        let table = [
            (
                "vLLM",
                json!({"data": [{"id": "m", "max_model_len": 4096}]}),
                Some(4096),
                None,
            ),
            (
                "OpenRouter",
                json!({"data": [{"id": "x", "context_length": 1}, {"id": "m", "context_length": 200000,
                        "top_provider": {"context_length": 100000, "max_completion_tokens": 8000}}]}),
                Some(100_000),
                Some(8000),
            ),
            (
                "Groq",
                json!({"data": [{"id": "m", "context_window": 131072, "max_completion_tokens": 32768}]}),
                Some(131_072),
                Some(32_768),
            ),
            (
                "one model under another name (llama.cpp)",
                json!({"data": [{"id": "/models/smol.gguf", "max_output_tokens": 512}]}),
                None,
                Some(512),
            ),
            (
                "another model only",
                json!({"data": [{"id": "a", "max_model_len": 1}, {"id": "b", "max_model_len": 2}]}),
                None,
                None,
            ),
            ("no list", json!({"error": "no"}), None, None),
        ];
        for (server, body, window, output) in table {
            let limits = ServerLimits::from_models_list(&body, "m");
            assert_eq!(limits.context_window, window, "{server}");
            assert_eq!(limits.max_output, output, "{server}");
        }
    }

    #[test]
    fn llama_cpp_props_give_the_slot_context_and_a_positive_n_predict() {
        let table = [
            (
                json!({"default_generation_settings": {"n_ctx": 4096, "params": {"n_predict": -1}}, "total_slots": 1}),
                Some(4096),
                None,
            ),
            (
                json!({"default_generation_settings": {"n_ctx": 2048, "n_predict": 256}}),
                Some(2048),
                Some(256),
            ),
            (json!({"n_ctx": 8192}), Some(8192), None),
            (json!({}), None, None),
        ];
        for (body, window, output) in table {
            let limits = ServerLimits::from_props(&body);
            assert_eq!(
                (limits.context_window, limits.max_output),
                (window, output),
                "{body}"
            );
        }
    }

    #[test]
    fn merging_keeps_the_smaller_value() {
        let a = ServerLimits {
            context_window: Some(8192),
            max_output: None,
        };
        let b = ServerLimits {
            context_window: Some(4096),
            max_output: Some(100),
        };
        assert_eq!(a.merge(b), b);
        assert_eq!(ServerLimits::default().merge(a), a);
    }
}
