//! How `muster serve` keeps the power to approve in the person's browser only (DESIGN
//! "Wave 2 → The web inbox"): it listens on 127.0.0.1; the printed URL carries a one-time
//! token that the first visit exchanges for an HttpOnly, SameSite=Strict session cookie (and
//! the token leaves the address bar); every other request needs that cookie; the Host header
//! must name this server (no DNS rebinding) and a state-changing request's Origin must be
//! this server (no cross-site form posts); every response carries a strict
//! Content-Security-Policy with no inline script.

use std::sync::Mutex;

use axum::http::header::{self, HeaderMap, HeaderValue};

/// The session cookie's name.
pub const COOKIE: &str = "muster_session";

/// Scripts and styles only from this server, no inline script, nothing framed, forms only
/// back to this server.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'";

/// The secrets of one `muster serve`: the one-time token of the printed URL and the session
/// it is exchanged for.
pub struct Secrets {
    /// `None` once the token was exchanged: it works once.
    token: Mutex<Option<String>>,
    session: String,
    port: u16,
}

impl Secrets {
    pub fn new(port: u16) -> Result<Secrets, ring::error::Unspecified> {
        Ok(Secrets {
            token: Mutex::new(Some(random_hex()?)),
            session: random_hex()?,
            port,
        })
    }

    /// The token to print, while it is unused.
    pub fn token(&self) -> Option<String> {
        self.token.lock().ok().and_then(|t| t.clone())
    }

    /// Exchanges the one-time token for the session's `Set-Cookie` value; a wrong or used
    /// token gets nothing.
    pub fn exchange(&self, offered: &str) -> Option<String> {
        let mut token = self.token.lock().ok()?;
        let matches = token
            .as_deref()
            .is_some_and(|t| constant_time_eq(t.as_bytes(), offered.as_bytes()));
        if !matches {
            return None;
        }
        *token = None;
        Some(format!(
            "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
            self.session
        ))
    }

    /// Whether the request carries this server's session cookie.
    pub fn has_session(&self, headers: &HeaderMap) -> bool {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .any(|(name, value)| {
                name == COOKIE && constant_time_eq(value.as_bytes(), self.session.as_bytes())
            })
    }

    /// The Host header names this server: `127.0.0.1:PORT` or `localhost:PORT`.
    pub fn host_ok(&self, headers: &HeaderMap) -> bool {
        self.names_this_server(headers, header::HOST, "")
    }

    /// A state-changing request must come from a page of this server: its Origin is this
    /// server's (a browser always sends Origin on a POST).
    pub fn origin_ok(&self, headers: &HeaderMap) -> bool {
        self.names_this_server(headers, header::ORIGIN, "http://")
    }

    /// Header `name` is `{scheme}127.0.0.1:PORT` or `{scheme}localhost:PORT`.
    fn names_this_server(
        &self,
        headers: &HeaderMap,
        name: header::HeaderName,
        scheme: &str,
    ) -> bool {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|value| {
                value == format!("{scheme}127.0.0.1:{}", self.port)
                    || value == format!("{scheme}localhost:{}", self.port)
            })
    }
}

/// The headers every response carries.
pub fn harden(headers: &mut HeaderMap) {
    let fixed = [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        // Not `no-referrer`: under it a browser sends `Origin: null` with a form's POST, and
        // the Origin check would refuse the page's own forms. Same-origin keeps the request
        // page's address from leaving this server.
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-store"),
    ];
    for (name, value) in fixed {
        headers.insert(name, HeaderValue::from_static(value));
    }
}

fn random_hex() -> Result<String, ring::error::Unspecified> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new().fill(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Compares secrets without leaking where they differ through timing.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_works_once_and_the_cookie_is_strict() {
        let secrets = Secrets::new(4000).unwrap();
        let token = secrets.token().unwrap();
        assert!(secrets.exchange("wrong").is_none());
        let cookie = secrets.exchange(&token).unwrap();
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
        assert!(secrets.exchange(&token).is_none(), "a used token is void");
        assert!(secrets.token().is_none());
        let mut headers = HeaderMap::new();
        let pair = cookie.split(';').next().unwrap();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("a=b; {pair}")).unwrap(),
        );
        assert!(secrets.has_session(&headers));
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("muster_session=nope"),
        );
        assert!(!secrets.has_session(&headers));
    }

    #[test]
    fn host_and_origin_must_name_this_server() {
        let secrets = Secrets::new(4000).unwrap();
        let cases = [
            ("127.0.0.1:4000", true),
            ("localhost:4000", true),
            ("127.0.0.1:4001", false),
            ("evil.example:4000", false),
            ("127.0.0.1", false),
        ];
        for (host, ok) in cases {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, HeaderValue::from_str(host).unwrap());
            assert_eq!(secrets.host_ok(&headers), ok, "{host}");
            headers.insert(
                header::ORIGIN,
                HeaderValue::from_str(&format!("http://{host}")).unwrap(),
            );
            assert_eq!(secrets.origin_ok(&headers), ok, "origin {host}");
        }
        assert!(
            !secrets.origin_ok(&HeaderMap::new()),
            "no Origin on a POST is refused"
        );
    }
}
