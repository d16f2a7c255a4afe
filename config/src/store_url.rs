//! Where the store lives: a file path (SQLite, the default) or a `postgres://` /
//! `postgresql://` URL. The password in a URL never appears in output: every place that
//! shows one uses [`mask_password`].

use std::fmt;
use std::path::PathBuf;

/// The store a setting or `--store` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// An SQLite file, resolved against the project root.
    File(PathBuf),
    /// A PostgreSQL server, as a libpq-style URL (kept verbatim, password included).
    Postgres(String),
}

impl StoreLocation {
    /// The store's name for output: the path, or the URL with its password masked.
    pub fn display(&self) -> String {
        match self {
            StoreLocation::File(path) => path.display().to_string(),
            StoreLocation::Postgres(url) => mask_password(url),
        }
    }
}

/// Serialised as it is displayed: a URL's password never reaches JSON output.
impl serde::Serialize for StoreLocation {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.display())
    }
}

impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display())
    }
}

/// The URL schemes a store may name (PostgreSQL's two spellings).
pub const KNOWN_SCHEMES: [&str; 2] = ["postgres", "postgresql"];

/// Whether `text` names a PostgreSQL server rather than a file.
pub fn is_postgres_url(text: &str) -> bool {
    let lower = text.trim_start().to_ascii_lowercase();
    KNOWN_SCHEMES
        .iter()
        .any(|scheme| lower.starts_with(&format!("{scheme}://")))
}

/// The scheme of a value that looks like a URL (it contains `://`) but names none of
/// [`KNOWN_SCHEMES`]; `None` for a PostgreSQL URL or a path.
pub fn unknown_scheme(text: &str) -> Option<&str> {
    let text = text.trim_start();
    let (scheme, _) = text.split_once("://")?;
    (!is_postgres_url(text)).then_some(scheme)
}

/// The URL with the password of its user-info part and of a `password=` parameter replaced
/// by `***`.
pub fn mask_password(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let (scheme, rest) = url.split_at(scheme_end + 3);
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rfind('@') {
        Some(at) => {
            let (user_info, host) = authority.split_at(at);
            match user_info.find(':') {
                Some(colon) => format!("{}:***{host}", &user_info[..colon]),
                None => authority.to_owned(),
            }
        }
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let masked: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if key.eq_ignore_ascii_case("password") => {
                        format!("{key}=***")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}", masked.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_masked_wherever_a_url_carries_one() {
        let cases = [
            (
                "postgres://u:secret@h:5432/db",
                "postgres://u:***@h:5432/db",
            ),
            ("postgresql://u@h/db", "postgresql://u@h/db"),
            (
                "postgres://h/db?password=s&sslmode=require",
                "postgres://h/db?password=***&sslmode=require",
            ),
            (
                "postgres://u:p%40ss@h/db?application_name=x",
                "postgres://u:***@h/db?application_name=x",
            ),
            ("postgres://u:pw@h", "postgres://u:***@h"),
            ("not a url", "not a url"),
        ];
        for (url, masked) in cases {
            assert_eq!(mask_password(url), masked, "{url}");
        }
    }

    #[test]
    fn urls_are_told_from_paths_by_their_scheme() {
        for (text, is_url, unknown) in [
            ("postgres://h/db", true, None),
            ("PostgreSQL://h/db", true, None),
            (".muster/muster.db", false, None),
            ("postgres.db", false, None),
            (
                "postgress://postgres@127.0.0.1:5432/test",
                false,
                Some("postgress"),
            ),
            ("sqlite:///tmp/m.db", false, Some("sqlite")),
            ("/tmp/postgres://x", false, Some("/tmp/postgres")),
        ] {
            assert_eq!(is_postgres_url(text), is_url, "{text}");
            assert_eq!(unknown_scheme(text), unknown, "{text}");
        }
    }
}
