//! Policy files as a run stored them at its start (DESIGN, "Wave 2 → One decision path and
//! stored inputs"): every policy a run's approvers name is read once, when the run is
//! created, and kept with its SHA-256 in the run's launch options. Every decision of the run
//! — after a crash and a resume too — uses that copy, so an edit of the file meanwhile (by a
//! person, or by a teammate with write access) cannot change what the policy decides. A resume
//! says so when the file on disk no longer matches.

use std::collections::BTreeMap;
use std::path::Path;

use muster_config::{Policy, Responder};
use serde::{Deserialize, Serialize};

use crate::exit::{Exit, ExitError};

/// One policy file's text and its SHA-256 (hex), as read at the run's start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredPolicy {
    pub text: String,
    pub sha256: String,
}

/// The policies of a run, by the path its approver names (`policy:PATH`, as written).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StoredPolicies(BTreeMap<String, StoredPolicy>);

fn usage(message: impl Into<String>) -> anyhow::Error {
    ExitError::new(Exit::Usage, message).into()
}

fn sha256_hex(text: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, text.as_bytes())
        .as_ref()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn resolve(root: &Path, path: &Path) -> std::path::PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        root.join(path)
    }
}

impl StoredPolicies {
    /// Reads and validates every policy `approvers` name (paths relative to `root`).
    pub fn read<'a>(
        root: &Path,
        approvers: impl IntoIterator<Item = &'a Responder>,
    ) -> anyhow::Result<StoredPolicies> {
        let mut stored = BTreeMap::new();
        for approver in approvers {
            let Responder::Policy(path) = approver else {
                continue;
            };
            let key = path.display().to_string();
            if stored.contains_key(&key) {
                continue;
            }
            let file = resolve(root, path);
            let text = std::fs::read_to_string(&file)
                .map_err(|e| usage(format!("policy file {}: {e}", file.display())))?;
            Policy::parse(&file.display().to_string(), &text).map_err(|e| usage(e.to_string()))?;
            let sha256 = sha256_hex(&text);
            stored.insert(key, StoredPolicy { text, sha256 });
        }
        Ok(StoredPolicies(stored))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The policy at `path` (as its approver names it) from the stored copy. A run stored
    /// by a version that kept no copy reads the file, as it did then.
    pub fn policy(&self, root: &Path, path: &Path) -> anyhow::Result<Policy> {
        let file = resolve(root, path);
        match self.0.get(&path.display().to_string()) {
            Some(stored) => Policy::parse(&file.display().to_string(), &stored.text)
                .map_err(|e| usage(format!("the run's stored copy of {}: {e}", file.display()))),
            None => Policy::load(&file).map_err(|e| usage(e.to_string())),
        }
    }

    /// Warnings for a resume: each policy file that changed (or went) since the run stored
    /// it; the run keeps deciding with what it stored.
    pub fn changed_since_stored(&self, root: &Path) -> Vec<String> {
        self.0
            .iter()
            .filter_map(|(path, stored)| {
                let file = resolve(root, Path::new(path));
                let now = std::fs::read_to_string(&file).ok();
                let changed = now.as_deref().map(sha256_hex) != Some(stored.sha256.clone());
                changed.then(|| {
                    format!(
                        "{} changed since this run started; its decisions keep using the copy \
                         stored then (sha256 {})",
                        file.display(),
                        &stored.sha256[..12]
                    )
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_policy_decides_whatever_the_file_says_later() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("p.toml"), "approve_all = true\n").unwrap();
        let approvers = [
            Responder::Human,
            Responder::Policy("p.toml".into()),
            Responder::Policy("p.toml".into()),
        ];
        let stored = StoredPolicies::read(dir.path(), &approvers).unwrap();
        assert!(stored.changed_since_stored(dir.path()).is_empty());
        std::fs::write(dir.path().join("p.toml"), "max_files = 0\n").unwrap();
        let policy = stored.policy(dir.path(), Path::new("p.toml")).unwrap();
        assert!(policy.approve_all, "the copy stored at the start decides");
        let warnings = stored.changed_since_stored(dir.path());
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("p.toml changed since this run started"),
            "{warnings:?}"
        );
        // Stored as JSON in the launch options and read back the same.
        let json = serde_json::to_value(&stored).unwrap();
        assert_eq!(json["p.toml"]["text"], "approve_all = true\n");
        assert_eq!(
            serde_json::from_value::<StoredPolicies>(json).unwrap(),
            stored
        );
    }

    #[test]
    fn a_missing_or_invalid_policy_is_a_usage_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing =
            StoredPolicies::read(dir.path(), &[Responder::Policy("nope.toml".into())]).unwrap_err();
        assert!(format!("{missing:#}").contains("nope.toml"), "{missing:#}");
        std::fs::write(dir.path().join("bad.toml"), "max_files = \"many\"\n").unwrap();
        let bad =
            StoredPolicies::read(dir.path(), &[Responder::Policy("bad.toml".into())]).unwrap_err();
        assert_eq!(Exit::for_error(&bad), Exit::Usage, "{bad:#}");
    }
}
