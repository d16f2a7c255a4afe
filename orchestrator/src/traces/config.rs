//! Whether traces are on, where they go and what they may carry: `MUSTER_TELEMETRY=1` or the
//! user's `[telemetry] enabled = true` (a project's files never turn them on: the settings
//! loader drops `[telemetry]` from them), then the standard `OTEL_EXPORTER_OTLP_*` variables.

use std::collections::BTreeMap;
use std::fmt;

/// The variable that turns traces on whatever the settings say.
pub const TELEMETRY_VAR: &str = "MUSTER_TELEMETRY";
const ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
const TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
const HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
const TRACES_HEADERS: &str = "OTEL_EXPORTER_OTLP_TRACES_HEADERS";
/// OTLP/HTTP's default collector.
const DEFAULT_ENDPOINT: &str = "http://localhost:4318";

/// Where and how a run's spans are sent. Its `Debug` never shows the headers' values (they
/// carry collectors' API keys).
#[derive(Clone, PartialEq, Eq)]
pub struct TraceConfig {
    /// The full URL spans are POSTed to (`…/v1/traces`).
    pub endpoint: String,
    pub headers: BTreeMap<String, String>,
    /// Content attributes (tool input and output, Bash text, paths, plan text, feedback).
    pub content: bool,
}

impl fmt::Debug for TraceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceConfig")
            .field("endpoint", &self.endpoint)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("content", &self.content)
            .finish()
    }
}

/// A traces variable that does not read.
#[derive(Debug, thiserror::Error)]
#[error("{variable}: {message}")]
pub struct TraceConfigError {
    variable: &'static str,
    message: String,
}

impl TraceConfig {
    /// The configuration when traces are on, `None` when they are off. `enabled` and
    /// `content` are the user's `[telemetry]` settings.
    pub fn from_env(
        env: &BTreeMap<String, String>,
        enabled: bool,
        content: bool,
    ) -> Result<Option<TraceConfig>, TraceConfigError> {
        let by_variable = match env.get(TELEMETRY_VAR).map(|v| v.trim()) {
            None | Some("") => None,
            Some("1" | "true" | "on") => Some(true),
            Some("0" | "false" | "off") => Some(false),
            Some(other) => {
                return Err(TraceConfigError {
                    variable: TELEMETRY_VAR,
                    message: format!("expected 1 or 0, found `{other}`"),
                });
            }
        };
        if !by_variable.unwrap_or(enabled) {
            return Ok(None);
        }
        let endpoint = match (nonempty(env, TRACES_ENDPOINT), nonempty(env, ENDPOINT)) {
            (Some(url), _) => url.to_owned(),
            (None, Some(base)) => format!("{}/v1/traces", base.trim_end_matches('/')),
            (None, None) => format!("{DEFAULT_ENDPOINT}/v1/traces"),
        };
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(TraceConfigError {
                variable: if nonempty(env, TRACES_ENDPOINT).is_some() {
                    TRACES_ENDPOINT
                } else {
                    ENDPOINT
                },
                message: format!("expected an http:// or https:// URL, found `{endpoint}`"),
            });
        }
        let mut headers = BTreeMap::new();
        for variable in [HEADERS, TRACES_HEADERS] {
            if let Some(text) = nonempty(env, variable) {
                headers.extend(parse_headers(variable, text)?);
            }
        }
        Ok(Some(TraceConfig {
            endpoint,
            headers,
            content,
        }))
    }
}

fn nonempty<'e>(env: &'e BTreeMap<String, String>, name: &str) -> Option<&'e str> {
    env.get(name).map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// `key=value,key2=value2` with percent-encoded values (the OTLP exporter specification's
/// format). The error names the position, never a value.
fn parse_headers(
    variable: &'static str,
    text: &str,
) -> Result<BTreeMap<String, String>, TraceConfigError> {
    let mut headers = BTreeMap::new();
    for (n, pair) in text.split(',').enumerate() {
        if pair.trim().is_empty() {
            continue;
        }
        let Some((key, value)) = pair.split_once('=') else {
            return Err(TraceConfigError {
                variable,
                message: format!("entry {} has no `=` (expected key=value,…)", n + 1),
            });
        };
        headers.insert(key.trim().to_owned(), percent_decode(value.trim()));
    }
    Ok(headers)
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = (bytes[i] == b'%')
            .then(|| text.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match decoded {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test assertions fail loudly")]

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn traces_are_off_unless_the_user_turns_them_on_and_go_where_the_otel_variables_say() {
        // (the variables, the user's `enabled`, the endpoint spans go to; none: off)
        type Row<'a> = (&'a [(&'a str, &'a str)], bool, Option<&'a str>);
        let rows: &[Row<'_>] = &[
            (&[], false, None),
            (&[(ENDPOINT, "http://c:4318")], false, None),
            (&[(TELEMETRY_VAR, "0")], true, None),
            (&[], true, Some("http://localhost:4318/v1/traces")),
            (
                &[(TELEMETRY_VAR, "1"), (ENDPOINT, "http://c:4318/")],
                false,
                Some("http://c:4318/v1/traces"),
            ),
            (
                &[
                    (TELEMETRY_VAR, "1"),
                    (ENDPOINT, "http://c:4318"),
                    (TRACES_ENDPOINT, "https://t/x"),
                ],
                false,
                Some("https://t/x"),
            ),
        ];
        for (vars, enabled, endpoint) in rows {
            let config = TraceConfig::from_env(&env(vars), *enabled, false).unwrap();
            assert_eq!(
                config.map(|c| c.endpoint).as_deref(),
                *endpoint,
                "{vars:?} {enabled}"
            );
        }
        assert!(
            TraceConfig::from_env(&env(&[(TELEMETRY_VAR, "yes please")]), false, false).is_err()
        );
        assert!(
            TraceConfig::from_env(
                &env(&[(TELEMETRY_VAR, "1"), (ENDPOINT, "c:4318")]),
                false,
                false
            )
            .is_err()
        );
    }

    #[test]
    fn headers_are_read_decoded_and_never_shown() {
        let config = TraceConfig::from_env(
            &env(&[
                (TELEMETRY_VAR, "1"),
                (HEADERS, "api-key=s%3Dcret, x=1"),
                (TRACES_HEADERS, "x=2"),
            ]),
            false,
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(config.headers["api-key"], "s=cret");
        assert_eq!(config.headers["x"], "2");
        assert!(!format!("{config:?}").contains("cret"));
        let error = TraceConfig::from_env(
            &env(&[(TELEMETRY_VAR, "1"), (HEADERS, "secret-without-equals")]),
            false,
            false,
        )
        .unwrap_err();
        assert!(!error.to_string().contains("secret"), "{error}");
    }
}
