//! Who answers a request: the lead's model, a person, or a policy file.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A request's responder (its `responder` field): `lead`, `human` or `policy:FILE`. An agent
/// answering a shutdown request addressed to it is no `Responder`: it answers as itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Responder {
    /// The lead's model, through `ReviewPlan` / `ReviewMerge`.
    Lead,
    /// A person, through `muster approve` / `muster reject`, the web inbox or an editor.
    #[default]
    Human,
    /// A policy file (a path as written, relative to the project root unless absolute).
    Policy(PathBuf),
}

/// A responder's text that is none of `lead`, `human` or `policy:FILE`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected \"lead\", \"human\" or \"policy:FILE\", found {found:?}")]
pub struct ResponderError {
    pub found: String,
}

impl Responder {
    /// The roster entry and sender of the lead.
    pub const LEAD: &'static str = "lead";
    /// The roster entry and sender of a person's answers.
    pub const HUMAN: &'static str = "human";
    /// The roster entry and sender of every policy file's answers.
    pub const POLICY: &'static str = "policy";

    /// Parses `lead`, `human` or `policy:FILE`.
    pub fn parse(text: &str) -> Result<Responder, ResponderError> {
        match text {
            Responder::LEAD => Ok(Responder::Lead),
            Responder::HUMAN => Ok(Responder::Human),
            _ => match text.strip_prefix("policy:") {
                Some(file) if !file.trim().is_empty() => Ok(Responder::Policy(PathBuf::from(file))),
                _ => Err(ResponderError {
                    found: text.to_owned(),
                }),
            },
        }
    }

    /// The roster entry that sends this responder's answers: every policy file answers as the
    /// reserved `policy` entry.
    pub fn member(&self) -> &'static str {
        match self {
            Responder::Lead => Responder::LEAD,
            Responder::Human => Responder::HUMAN,
            Responder::Policy(_) => Responder::POLICY,
        }
    }

    /// The roster entry that answers for a request's `responder` text: `policy:<path>` answers
    /// as `policy`; a responder that is no `Responder` (an agent answering a shutdown
    /// request) answers as itself.
    pub fn member_for(responder: &str) -> &str {
        match Responder::parse(responder) {
            Ok(parsed) => parsed.member(),
            Err(_) => responder,
        }
    }

    /// Whether a request's `responder` text names a policy file.
    pub fn names_a_policy(responder: &str) -> bool {
        matches!(Responder::parse(responder), Ok(Responder::Policy(_)))
    }

    /// Whether a request's `responder` text (or a sender) is the person.
    pub fn names_the_person(responder: &str) -> bool {
        responder == Responder::HUMAN
    }

    /// Whether a request's `responder` text is the lead.
    pub fn names_the_lead(responder: &str) -> bool {
        responder == Responder::LEAD
    }

    /// Whether this responder is a person.
    pub fn is_person(&self) -> bool {
        *self == Responder::Human
    }
}

impl fmt::Display for Responder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Responder::Policy(path) => write!(f, "policy:{}", path.display()),
            other => f.write_str(other.member()),
        }
    }
}

impl Serialize for Responder {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Responder {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Responder::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responders_parse_and_print_as_written() {
        for text in ["lead", "human", "policy:policies/ci.toml"] {
            assert_eq!(Responder::parse(text).unwrap().to_string(), text);
        }
        let back: Responder = serde_json::from_str("\"policy:ci.toml\"").unwrap();
        assert_eq!(back, Responder::Policy("ci.toml".into()));
        assert_eq!(
            Responder::parse("policy:").unwrap_err().to_string(),
            "expected \"lead\", \"human\" or \"policy:FILE\", found \"policy:\""
        );
    }

    #[test]
    fn responders_map_to_roster_members() {
        let table = [
            ("policy:/p/policy.toml", "policy"),
            ("human", "human"),
            ("lead", "lead"),
            ("alice", "alice"),
        ];
        for (responder, member) in table {
            assert_eq!(Responder::member_for(responder), member, "{responder}");
        }
        assert!(Responder::names_a_policy("policy:x.toml"));
        assert!(!Responder::names_a_policy("human"));
        assert!(Responder::names_the_person("human") && !Responder::names_the_person("lead"));
    }
}
