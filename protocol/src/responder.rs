//! Who answers a request: the lead's model, a person, a policy file, or a plan reviewer hook.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A request's responder (its `responder` field): `lead`, `human`, `policy:FILE` or
/// `hook:NAME`. An agent answering a shutdown request addressed to it is no `Responder`: it
/// answers as itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Responder {
    /// The lead's model, through `ReviewPlan` / `ReviewMerge`.
    Lead,
    /// A person, through `muster approve` / `muster reject`, the web inbox or an editor.
    #[default]
    Human,
    /// A policy file (a path as written, relative to the project root unless absolute).
    Policy(PathBuf),
    /// A plan reviewer hook of the settings (`planReviewers.NAME`): it decides a teammate's
    /// plans; the teammate's other requests go to the lead.
    Hook(String),
}

/// A responder's text that is none of `lead`, `human`, `policy:FILE` or `hook:NAME`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected \"lead\", \"human\", \"policy:FILE\" or \"hook:NAME\", found {found:?}")]
pub struct ResponderError {
    pub found: String,
}

impl Responder {
    /// The roster entry and sender of the lead.
    pub const LEAD: &'static str = "lead";
    /// The roster entry and sender of a person's answers.
    pub const HUMAN: &'static str = "human";
    /// The roster entry and sender of every automated answer: a policy file's and a plan
    /// reviewer hook's.
    pub const POLICY: &'static str = "policy";
    /// How the `rule` of a plan reviewer hook's answer begins (`plan reviewer hook NAME
    /// (FILE)`): what names the hook where its sender, `policy`, would not.
    pub const PLAN_REVIEWER_RULE: &'static str = "plan reviewer hook ";
    /// How the `rule` of a plan reviewer hook's answer ends when the reviewer itself failed
    /// (it crashed, timed out, printed no decision, or a file it names changed since trust):
    /// a rejection not on the plan's merit, counted toward handing the plans to a person.
    pub const PLAN_REVIEWER_FAILED: &'static str = ": it gave no decision";

    /// Parses `lead`, `human`, `policy:FILE` or `hook:NAME` (a name of letters, digits, `-`
    /// and `_`, as a settings key would be written).
    pub fn parse(text: &str) -> Result<Responder, ResponderError> {
        let refused = || ResponderError {
            found: text.to_owned(),
        };
        match text {
            Responder::LEAD => Ok(Responder::Lead),
            Responder::HUMAN => Ok(Responder::Human),
            _ => {
                if let Some(file) = text.strip_prefix("policy:") {
                    return match file.trim().is_empty() {
                        true => Err(refused()),
                        false => Ok(Responder::Policy(PathBuf::from(file))),
                    };
                }
                match text.strip_prefix("hook:") {
                    Some(name) if is_hook_name(name) => Ok(Responder::Hook(name.to_owned())),
                    _ => Err(refused()),
                }
            }
        }
    }

    /// The roster entry that sends this responder's answers: every policy file and every plan
    /// reviewer hook answers as the reserved `policy` entry (automated answers need no roster
    /// entry of their own, and a run stored before hooks could answer has the same roster).
    pub fn member(&self) -> &'static str {
        match self {
            Responder::Lead => Responder::LEAD,
            Responder::Human => Responder::HUMAN,
            Responder::Policy(_) | Responder::Hook(_) => Responder::POLICY,
        }
    }

    /// Who answers the permission requests, questions and merges of an agent whose plans
    /// `responder` decides: a plan reviewer hook reviews plans only, so the lead answers the
    /// rest; any other responder answers everything.
    pub fn for_other_requests(responder: &str) -> &str {
        match Responder::parse(responder) {
            Ok(Responder::Hook(_)) => Responder::LEAD,
            _ => responder,
        }
    }

    /// Whether a request's `responder` text names a plan reviewer hook.
    pub fn names_a_hook(responder: &str) -> bool {
        matches!(Responder::parse(responder), Ok(Responder::Hook(_)))
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
            Responder::Hook(name) => write!(f, "hook:{name}"),
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

/// A plan reviewer's name: non-empty, letters, digits, `-` and `_`.
fn is_hook_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responders_parse_and_print_as_written() {
        for text in [
            "lead",
            "human",
            "policy:policies/ci.toml",
            "hook:strict-review",
        ] {
            assert_eq!(Responder::parse(text).unwrap().to_string(), text);
        }
        let back: Responder = serde_json::from_str("\"policy:ci.toml\"").unwrap();
        assert_eq!(back, Responder::Policy("ci.toml".into()));
        assert_eq!(
            Responder::parse("policy:").unwrap_err().to_string(),
            "expected \"lead\", \"human\", \"policy:FILE\" or \"hook:NAME\", found \"policy:\""
        );
        for refused in ["hook:", "hook:a b", "hook:../x"] {
            assert!(Responder::parse(refused).is_err(), "{refused}");
        }
    }

    #[test]
    fn responders_map_to_roster_members() {
        let table = [
            ("policy:/p/policy.toml", "policy"),
            ("hook:strict", "policy"),
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
        assert!(Responder::names_a_hook("hook:strict") && !Responder::names_a_policy("hook:s"));
        for (plans, others) in [
            ("hook:strict", "lead"),
            ("lead", "lead"),
            ("human", "human"),
            ("policy:p.toml", "policy:p.toml"),
        ] {
            assert_eq!(Responder::for_other_requests(plans), others, "{plans}");
        }
    }
}
