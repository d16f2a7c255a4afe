//! Paths as the report names them: relative to the workspace root, `/`-separated, without `.`
//! or `..` components.

use std::path::{Component, Path};

/// `path` cleaned lexically (`./a//b/../c` → `a/c`). An absolute path stays absolute; a
/// relative path that climbs out of its base (`../x`) is `None`.
pub(crate) fn normalize_relative(path: &str) -> Option<String> {
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            name => parts.push(name),
        }
    }
    if parts.is_empty() {
        return None;
    }
    let joined = parts.join("/");
    Some(if absolute {
        format!("/{joined}")
    } else {
        joined
    })
}

/// The workspace root as given and as resolved (symbolic links followed), to strip either
/// from absolute paths.
#[derive(Debug, Clone)]
pub(crate) struct Root {
    given: String,
    resolved: Option<String>,
}

impl Root {
    pub(crate) fn new(root: &Path) -> Root {
        let as_text = |path: &Path| {
            path.components()
                .filter_map(|component| match component {
                    Component::Normal(name) => Some(name.to_string_lossy().into_owned()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("/")
        };
        Root {
            given: format!("/{}", as_text(root)),
            resolved: std::fs::canonicalize(root)
                .ok()
                .map(|path| format!("/{}", as_text(&path))),
        }
    }

    /// `path` relative to the root when it lies inside it; otherwise cleaned but kept as
    /// written (absolute, or relative and climbing out: then `None`).
    pub(crate) fn relative(&self, path: &str) -> Option<String> {
        let normalized = normalize_relative(path)?;
        if !normalized.starts_with('/') {
            return Some(normalized);
        }
        for root in std::iter::once(&self.given).chain(self.resolved.as_ref()) {
            if let Some(rest) = normalized.strip_prefix(root.as_str())
                && let Some(rest) = rest.strip_prefix('/')
            {
                return Some(rest.to_owned());
            }
        }
        Some(normalized)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_of_normalized_paths() {
        let cases: &[(&str, Option<&str>)] = &[
            ("a/b.rs", Some("a/b.rs")),
            ("./a//b.rs", Some("a/b.rs")),
            ("a/x/../b.rs", Some("a/b.rs")),
            ("../b.rs", None),
            (".", None),
            ("/abs/./x", Some("/abs/x")),
        ];
        for (path, expected) in cases {
            assert_eq!(normalize_relative(path).as_deref(), *expected, "{path}");
        }
    }

    #[test]
    fn absolute_paths_inside_the_root_become_relative() {
        let root = Root::new(Path::new("/work/ws"));
        assert_eq!(
            root.relative("/work/ws/src/a.rs").as_deref(),
            Some("src/a.rs")
        );
        assert_eq!(
            root.relative("/work/wsx/a.rs").as_deref(),
            Some("/work/wsx/a.rs")
        );
        assert_eq!(root.relative("src/./a.rs").as_deref(), Some("src/a.rs"));
    }
}
