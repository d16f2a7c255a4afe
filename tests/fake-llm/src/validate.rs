//! Request validation, as the real APIs do it.

use crate::KeyCheck;
use axum::http::HeaderMap;
use serde_json::Value;

/// An error answered in the API's own shape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    pub status: u16,
    pub error_type: String,
    pub message: String,
    /// OpenAI `code`.
    pub code: Option<String>,
    /// OpenAI `param`.
    pub param: Option<String>,
}

impl ApiError {
    pub fn new(status: u16, error_type: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            error_type: error_type.to_owned(),
            message: message.into(),
            code: None,
            param: None,
        }
    }

    fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(400, "invalid_request_error", message)
    }

    fn with_param(mut self, param: &str) -> Self {
        self.param = Some(param.to_owned());
        self
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The Anthropic key check (`x-api-key`).
pub(crate) fn anthropic_auth(headers: &HeaderMap, keys: &KeyCheck) -> Result<(), ApiError> {
    let key = header(headers, "x-api-key").filter(|k| !k.is_empty());
    match (keys, key) {
        (KeyCheck::None, _) => Ok(()),
        (_, None) => Err(ApiError::new(
            401,
            "authentication_error",
            "x-api-key header is required",
        )),
        (KeyCheck::Exact(want), Some(got)) if want != got => Err(ApiError::new(
            401,
            "authentication_error",
            "invalid x-api-key",
        )),
        _ => Ok(()),
    }
}

/// The `anthropic-version` header check.
pub(crate) fn anthropic_version(headers: &HeaderMap) -> Result<(), ApiError> {
    match header(headers, "anthropic-version") {
        Some(v) if !v.is_empty() => Ok(()),
        _ => Err(ApiError::invalid("anthropic-version: header is required")),
    }
}

/// The OpenAI key check (`Authorization: Bearer`).
pub(crate) fn openai_auth(headers: &HeaderMap, keys: &KeyCheck) -> Result<(), ApiError> {
    let key = header(headers, "authorization")
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|k| !k.is_empty());
    let err = |message: &str, code: Option<&str>| {
        let mut e = ApiError::new(401, "invalid_request_error", message);
        e.code = code.map(str::to_owned);
        e
    };
    match (keys, key) {
        (KeyCheck::None, _) => Ok(()),
        (_, None) => Err(err(
            "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
            None,
        )),
        (KeyCheck::Exact(want), Some(got)) if want != got => Err(err(
            "Incorrect API key provided. You can find your API key in your account settings.",
            Some("invalid_api_key"),
        )),
        _ => Ok(()),
    }
}

/// Parses a JSON object body.
pub(crate) fn json_body(raw: &[u8]) -> Result<Value, ApiError> {
    match serde_json::from_slice::<Value>(raw) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(ApiError::invalid("Input should be a valid dictionary")),
        Err(e) => Err(ApiError::invalid(format!(
            "There was an error parsing the body of your request: {e}"
        ))),
    }
}

fn require(body: &Value, field: &str) -> Result<(), ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Err(ApiError::invalid(format!("{field}: Field required"))),
        Some(_) => Ok(()),
    }
}

fn blocks(content: Option<&Value>) -> &[Value] {
    content.and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn block_type(b: &Value) -> Option<&str> {
    b.get("type").and_then(Value::as_str)
}

/// The Messages body rules. `count_tokens` skips `max_tokens`.
pub(crate) fn anthropic_body(body: &Value, count_tokens: bool) -> Result<(), ApiError> {
    require(body, "model")?;
    if !count_tokens {
        require(body, "max_tokens")?;
    }
    require(body, "messages")?;
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .ok_or_else(|| ApiError::invalid("messages: Input should be a valid list"))?;
    if messages.is_empty() {
        return Err(ApiError::invalid(
            "messages: at least one message is required",
        ));
    }
    if let Some(max) = body.get("max_tokens")
        && max.as_u64().is_none_or(|m| m < 1)
    {
        return Err(ApiError::invalid(
            "max_tokens: Input should be greater than or equal to 1",
        ));
    }
    thinking(body)?;
    tool_pairing(messages)
}

fn thinking(body: &Value) -> Result<(), ApiError> {
    let Some(t) = body.get("thinking") else {
        return Ok(());
    };
    if t.get("type").and_then(Value::as_str) != Some("enabled") {
        return Ok(());
    }
    let budget = t
        .get("budget_tokens")
        .and_then(Value::as_u64)
        .ok_or_else(|| ApiError::invalid("thinking.enabled.budget_tokens: Field required"))?;
    if budget < 1024 {
        return Err(ApiError::invalid(
            "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
        ));
    }
    let max = body.get("max_tokens").and_then(Value::as_u64).unwrap_or(0);
    if budget >= max {
        return Err(ApiError::invalid(
            "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size",
        ));
    }
    Ok(())
}

/// The tool_use / tool_result pairing rules between consecutive messages.
fn tool_pairing(messages: &[Value]) -> Result<(), ApiError> {
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str);
        let content = blocks(m.get("content"));
        if role == Some("user") {
            // Every tool_result must answer a tool_use of the previous message.
            let prev_ids: Vec<&str> = i
                .checked_sub(1)
                .and_then(|p| messages.get(p))
                .filter(|p| p.get("role").and_then(Value::as_str) == Some("assistant"))
                .map(|p| tool_use_ids(p))
                .unwrap_or_default();
            for (j, b) in content.iter().enumerate() {
                if block_type(b) != Some("tool_result") {
                    continue;
                }
                let id = b.get("tool_use_id").and_then(Value::as_str).unwrap_or("");
                if !prev_ids.contains(&id) {
                    return Err(ApiError::invalid(format!(
                        "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                    )));
                }
            }
        }
        if role != Some("assistant") {
            continue;
        }
        let ids = tool_use_ids(m);
        if ids.is_empty() {
            continue;
        }
        let next = messages
            .get(i + 1)
            .filter(|n| n.get("role").and_then(Value::as_str) == Some("user"));
        let next_blocks = blocks(next.and_then(|n| n.get("content")));
        let leading: Vec<&str> = next_blocks
            .iter()
            .take_while(|b| block_type(b) == Some("tool_result"))
            .filter_map(|b| b.get("tool_use_id").and_then(Value::as_str))
            .collect();
        let any_result = next_blocks
            .iter()
            .any(|b| block_type(b) == Some("tool_result"));
        if next.is_some() && leading.is_empty() && any_result {
            return Err(ApiError::invalid(format!(
                "messages.{}: Did not find {} tool_result block(s) at the beginning of this message. Messages following tool_use blocks must begin with a matching number of tool_result blocks.",
                i + 1,
                ids.len()
            )));
        }
        let missing: Vec<&str> = ids
            .iter()
            .copied()
            .filter(|id| !leading.contains(id))
            .collect();
        if !missing.is_empty() {
            return Err(ApiError::invalid(format!(
                "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                missing.join(", ")
            )));
        }
    }
    Ok(())
}

fn tool_use_ids(m: &Value) -> Vec<&str> {
    blocks(m.get("content"))
        .iter()
        .filter(|b| block_type(b) == Some("tool_use"))
        .filter_map(|b| b.get("id").and_then(Value::as_str))
        .collect()
}

/// The Chat Completions body rules.
pub(crate) fn openai_body(body: &Value) -> Result<(), ApiError> {
    if body.get("model").is_none_or(Value::is_null) {
        return Err(ApiError::invalid("you must provide a model parameter"));
    }
    let messages = match body.get("messages") {
        None | Some(Value::Null) => {
            return Err(
                ApiError::invalid("Missing required parameter: 'messages'.").with_param("messages")
            );
        }
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(ApiError::invalid(
                "Invalid type for 'messages': expected an array of objects.",
            )
            .with_param("messages"));
        }
    };
    if messages.is_empty() {
        return Err(ApiError::invalid(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
        )
        .with_param("messages"));
    }
    for (i, m) in messages.iter().enumerate() {
        let Some(calls) = m.get("tool_calls").and_then(Value::as_array) else {
            continue;
        };
        let answered: Vec<&str> = messages[i + 1..]
            .iter()
            .take_while(|n| n.get("role").and_then(Value::as_str) == Some("tool"))
            .filter_map(|n| n.get("tool_call_id").and_then(Value::as_str))
            .collect();
        let missing: Vec<&str> = calls
            .iter()
            .filter_map(|c| c.get("id").and_then(Value::as_str))
            .filter(|id| !answered.contains(id))
            .collect();
        if !missing.is_empty() {
            return Err(ApiError::invalid(format!(
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
                missing.join(", ")
            ))
            .with_param(&format!("messages.[{}].role", i + 1)));
        }
    }
    Ok(())
}
