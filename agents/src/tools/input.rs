//! Tool input: the JSON schema the model sees, generated from the typed input struct, and
//! validation by deserialising into that struct with errors that name the field.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Input that does not deserialise into the tool's input struct. Goes back to the model as an
/// `is_error` result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid input for {tool}: {problem}")]
pub struct InputError {
    tool: &'static str,
    field: Option<String>,
    problem: String,
}

impl InputError {
    /// The tool whose input was refused.
    pub fn tool(&self) -> &'static str {
        self.tool
    }

    /// The offending field (`edits[1].old_string` for nested ones), when one can be named.
    pub fn field(&self) -> Option<&str> {
        self.field.as_deref()
    }
}

/// The JSON schema (draft 7, subschemas inlined, no `$schema`/`title`) of a tool input.
pub fn input_schema<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft07()
        .with(|settings| {
            settings.inline_subschemas = true;
            settings.meta_schema = None;
        })
        .for_deserialize()
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Some(object) = schema.as_object_mut() {
        object.remove("title");
        object.remove("$schema");
        object.remove("description");
    }
    schema
}

/// Deserialises `input` into `T`; a failure names the field.
pub(crate) fn parse_input<T: DeserializeOwned + JsonSchema>(
    tool: &'static str,
    input: &Value,
) -> Result<T, InputError> {
    if !input.is_object() {
        return Err(InputError {
            tool,
            field: None,
            problem: format!(
                "the input must be a JSON object, got {}",
                json_type_name(input)
            ),
        });
    }
    serde_json::from_value::<T>(input.clone()).map_err(|error| {
        let message = error.to_string();
        let field = mismatch_path(&input_schema::<T>(), input, "")
            .filter(|path| !path.is_empty())
            .or_else(|| field_named_in(&message));
        let problem = match &field {
            Some(field) if !message.contains(&format!("`{field}`")) => {
                format!("field `{field}`: {message}")
            }
            _ => message,
        };
        InputError {
            tool,
            field,
            problem,
        }
    })
}

/// The field serde names in messages like "missing field `x`" or "unknown field `x`, …".
fn field_named_in(message: &str) -> Option<String> {
    let start = message.find("field `")? + "field `".len();
    let length = message[start..].find('`')?;
    Some(message[start..start + length].to_owned())
}

fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn join_field(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// The path of the first place `value` breaks `schema` (types, enums, minimums, required and
/// unknown properties, array items, `const`, `anyOf`/`oneOf`). `None` when nothing is found.
fn mismatch_path(schema: &Value, value: &Value, path: &str) -> Option<String> {
    let schema = schema.as_object()?;
    for combinator in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = schema.get(combinator)
            && branches
                .iter()
                .all(|branch| mismatch_path(branch, value, path).is_some())
        {
            return Some(path.to_owned());
        }
    }
    if let Some(expected) = schema.get("type")
        && !type_matches(expected, value)
    {
        return Some(path.to_owned());
    }
    if let Some(Value::Array(allowed)) = schema.get("enum")
        && !allowed.contains(value)
    {
        return Some(path.to_owned());
    }
    if let Some(constant) = schema.get("const")
        && constant != value
    {
        return Some(path.to_owned());
    }
    if let (Some(minimum), Some(number)) = (
        schema.get("minimum").and_then(Value::as_f64),
        value.as_f64(),
    ) && number < minimum
    {
        return Some(path.to_owned());
    }
    match value {
        Value::Object(object) => object_mismatch(schema, object, path),
        Value::Array(items) => {
            let item_schema = schema.get("items")?;
            items.iter().enumerate().find_map(|(index, item)| {
                mismatch_path(item_schema, item, &format!("{path}[{index}]"))
            })
        }
        _ => None,
    }
}

fn object_mismatch(
    schema: &serde_json::Map<String, Value>,
    object: &serde_json::Map<String, Value>,
    path: &str,
) -> Option<String> {
    if let Some(Value::Array(required)) = schema.get("required")
        && let Some(missing) = required
            .iter()
            .filter_map(Value::as_str)
            .find(|key| !object.contains_key(*key))
    {
        return Some(join_field(path, missing));
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    object.iter().find_map(|(key, item)| {
        match properties.and_then(|properties| properties.get(key)) {
            Some(property) => mismatch_path(property, item, &join_field(path, key)),
            None if closed => Some(join_field(path, key)),
            None => None,
        }
    })
}

fn type_matches(expected: &Value, value: &Value) -> bool {
    match expected {
        Value::String(name) => value_has_type(name, value),
        Value::Array(names) => names
            .iter()
            .filter_map(Value::as_str)
            .any(|name| value_has_type(name, value)),
        _ => true,
    }
}

fn value_has_type(name: &str, value: &Value) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "string" => value.is_string(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[allow(dead_code, reason = "only deserialised")]
    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        old_string: String,
    }

    #[allow(dead_code, reason = "only deserialised")]
    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Outer {
        file_path: String,
        #[serde(default)]
        replace_all: Option<bool>,
        #[serde(default)]
        limit: Option<u64>,
        edits: Vec<Inner>,
    }

    fn field_of(input: Value) -> Option<String> {
        parse_input::<Outer>("Test", &input)
            .err()
            .and_then(|error| error.field().map(str::to_owned))
    }

    #[test]
    fn names_the_field_of_each_kind_of_violation() {
        let edits = serde_json::json!([{"old_string": "a"}]);
        assert_eq!(
            field_of(serde_json::json!({"edits": edits})).as_deref(),
            Some("file_path")
        );
        assert_eq!(
            field_of(serde_json::json!({"file_path": "a", "replace_all": "yes", "edits": edits}))
                .as_deref(),
            Some("replace_all")
        );
        assert_eq!(
            field_of(serde_json::json!({"file_path": "a", "limit": -1, "edits": edits})).as_deref(),
            Some("limit")
        );
        assert_eq!(
            field_of(serde_json::json!({"file_path": "a", "edits": [{"old_string": 1}]}))
                .as_deref(),
            Some("edits[0].old_string")
        );
        assert_eq!(
            field_of(serde_json::json!({"file_path": "a", "edits": [{}]})).as_deref(),
            Some("edits[0].old_string")
        );
        assert_eq!(
            field_of(serde_json::json!({"file_path": "a", "edits": edits, "extra": 1})).as_deref(),
            Some("extra")
        );
    }

    #[test]
    fn a_non_object_input_is_an_error_not_a_panic() {
        let error = parse_input::<Outer>("Test", &serde_json::json!("text"));
        assert!(error.is_err_and(|error| error.to_string().contains("JSON object")));
    }

    #[test]
    fn the_schema_is_inline_and_closed() {
        let schema = input_schema::<Outer>();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["additionalProperties"], false);
        assert!(schema.get("$defs").is_none() && schema.get("definitions").is_none());
        assert_eq!(
            schema["properties"]["edits"]["items"]["properties"]["old_string"]["type"],
            "string"
        );
    }
}
