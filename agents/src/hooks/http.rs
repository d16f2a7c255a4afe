//! An `http` hook handler, as Claude Code has it: the event's JSON (what a `command` handler
//! reads on stdin) is POSTed to the handler's `url`, and the answer is read as a command's
//! ending: a 2xx answer's body as exit 0's stdout (so its JSON decides as a command's does);
//! another status, a failed connection, the timeout or a body over [`MAX_OUTPUT`] are
//! non-blocking failures (blocking with `"onFailure": "block"`). It cannot say exit 2: a hook
//! that blocks answers 2xx with a decision.
//!
//! The request is made by muster itself, outside the sandbox (there is no process to
//! confine); a project's `http` hooks, like its commands, run only in a project the user
//! trusted.

use std::ffi::OsString;
use std::sync::OnceLock;
use std::time::Duration;

use muster_config::hooks::HttpHook;

use super::process::{MAX_OUTPUT, ProcessEnd};

/// One client for every `http` hook of the process (reqwest keeps its connections).
fn client() -> Result<&'static reqwest::Client, String> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .user_agent(concat!("muster/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|error| error.to_string())
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// `value` with `$NAME` and `${NAME}` replaced for each `allowed` variable, as `environment`
/// (the run's, as its command hooks get it) has it (unset: empty).
fn expand(value: &str, allowed: &[String], environment: &[(OsString, OsString)]) -> String {
    let mut expanded = value.to_owned();
    for name in allowed {
        let found = environment
            .iter()
            .find(|(key, _)| key.to_str() == Some(name.as_str()))
            .map(|(_, value)| value.to_string_lossy().into_owned())
            .unwrap_or_default();
        expanded = expanded
            .replace(&format!("${{{name}}}"), &found)
            .replace(&format!("${name}"), &found);
    }
    expanded
}

/// Posts `body` to the hook's URL and reads the answer (see the module's comment).
pub async fn post_hook(
    hook: &HttpHook,
    body: &[u8],
    timeout: Duration,
    environment: &[(OsString, OsString)],
) -> ProcessEnd {
    let client = match client() {
        Ok(client) => client,
        Err(why) => return ProcessEnd::CannotStart(format!("no HTTP client: {why}")),
    };
    let mut request = client
        .post(&hook.url)
        .timeout(timeout)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_vec());
    for (name, value) in &hook.headers {
        let value = expand(value, &hook.allowed_env_vars, environment);
        request = request.header(name.as_str(), value);
    }
    let failed = |error: reqwest::Error| match error.is_timeout() {
        true => ProcessEnd::TimedOut(timeout),
        false => ProcessEnd::CannotStart(format!("POST {}: {error}", hook.url)),
    };
    let mut response = match request.send().await {
        Ok(response) => response,
        Err(error) => return failed(error),
    };
    let status = response.status();
    let mut kept = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if kept.len() + chunk.len() > MAX_OUTPUT {
                    return ProcessEnd::TooMuchOutput;
                }
                kept.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(error) => return failed(error),
        }
    }
    let body = String::from_utf8_lossy(&kept).into_owned();
    if !status.is_success() {
        return ProcessEnd::HttpStatus {
            status: status.as_u16(),
            body,
        };
    }
    ProcessEnd::Exited {
        code: Some(0),
        stdout: body,
        stderr: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowed_variables_are_put_into_headers() {
        let environment = vec![
            (OsString::from("TOKEN"), OsString::from("s3cret")),
            (OsString::from("HOME"), OsString::from("/home/u")),
        ];
        let allowed = vec!["TOKEN".to_owned(), "UNSET".to_owned()];
        assert_eq!(
            expand(
                "Bearer $TOKEN ${TOKEN} [$UNSET] $HOME",
                &allowed,
                &environment
            ),
            "Bearer s3cret s3cret [] $HOME"
        );
    }
}
