//! Who answers a plan approval: the lead's model, a person, or a policy file.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A plan approver (a request's `responder`): `lead`, `human` or `policy:FILE`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Approver {
    /// The lead's model, through `ReviewPlan`.
    Lead,
    /// A person, through `muster approve` / `muster reject`.
    #[default]
    Human,
    /// A policy file (a path as written, relative to the project root unless absolute).
    Policy(PathBuf),
}

impl Approver {
    /// Parses `lead`, `human` or `policy:FILE`.
    pub fn parse(text: &str) -> Result<Approver, String> {
        match text {
            "lead" => Ok(Approver::Lead),
            "human" => Ok(Approver::Human),
            _ => match text.strip_prefix("policy:") {
                Some(file) if !file.trim().is_empty() => Ok(Approver::Policy(PathBuf::from(file))),
                _ => Err(format!(
                    "expected \"lead\", \"human\" or \"policy:FILE\", found {text:?}"
                )),
            },
        }
    }
}

impl Approver {
    /// The roster entry that sends this approver's answers: every policy file answers as the
    /// reserved `policy` entry.
    pub fn member(&self) -> &'static str {
        match self {
            Approver::Lead => "lead",
            Approver::Human => "human",
            Approver::Policy(_) => "policy",
        }
    }

    /// Whether a request's `responder` text names a policy file.
    pub fn names_a_policy(responder: &str) -> bool {
        matches!(Approver::parse(responder), Ok(Approver::Policy(_)))
    }
}

impl fmt::Display for Approver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Approver::Lead => f.write_str("lead"),
            Approver::Human => f.write_str("human"),
            Approver::Policy(path) => write!(f, "policy:{}", path.display()),
        }
    }
}

impl Serialize for Approver {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Approver {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Approver::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn approvers_parse_and_print_as_written() {
        for text in ["lead", "human", "policy:policies/ci.toml"] {
            assert_eq!(Approver::parse(text).unwrap().to_string(), text);
        }
        let back: Approver = serde_json::from_str("\"policy:ci.toml\"").unwrap();
        assert_eq!(back, Approver::Policy("ci.toml".into()));
        assert_eq!(
            Approver::parse("policy:").unwrap_err(),
            "expected \"lead\", \"human\" or \"policy:FILE\", found \"policy:\""
        );
    }
}
