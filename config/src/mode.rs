//! Permission modes (DESIGN.md "Agents and permission modes").

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How much an agent may do without asking. Serde and `FromStr` use the names users type
/// (`acceptEdits`, `bypassPermissions`, …).
///
/// `Ord` is the granting order: plan < dontAsk < default < acceptEdits < auto <
/// bypassPermissions, so `min` caps a mode at a ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
pub enum PermissionMode {
    #[default]
    #[serde(rename = "default")]
    Default,
    #[serde(rename = "acceptEdits")]
    AcceptEdits,
    #[serde(rename = "plan")]
    Plan,
    #[serde(rename = "bypassPermissions")]
    BypassPermissions,
    #[serde(rename = "auto")]
    Auto,
    #[serde(rename = "dontAsk")]
    DontAsk,
}

impl PermissionMode {
    /// Every mode, in granting order (lowest first).
    pub const ALL: [PermissionMode; 6] = [
        PermissionMode::Plan,
        PermissionMode::DontAsk,
        PermissionMode::Default,
        PermissionMode::AcceptEdits,
        PermissionMode::Auto,
        PermissionMode::BypassPermissions,
    ];

    /// The name users write.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Default => "default",
            PermissionMode::AcceptEdits => "acceptEdits",
            PermissionMode::Plan => "plan",
            PermissionMode::BypassPermissions => "bypassPermissions",
            PermissionMode::Auto => "auto",
            PermissionMode::DontAsk => "dontAsk",
        }
    }

    /// Position in the granting order: 0 for `plan` up to 5 for `bypassPermissions`.
    pub fn granting_rank(self) -> u8 {
        match self {
            PermissionMode::Plan => 0,
            PermissionMode::DontAsk => 1,
            PermissionMode::Default => 2,
            PermissionMode::AcceptEdits => 3,
            PermissionMode::Auto => 4,
            PermissionMode::BypassPermissions => 5,
        }
    }

    /// This mode lowered to `ceiling` when it grants more.
    pub fn capped_at(self, ceiling: PermissionMode) -> PermissionMode {
        self.min(ceiling)
    }

    /// The names of every mode, for error messages.
    pub fn names() -> Vec<&'static str> {
        PermissionMode::ALL
            .iter()
            .map(|mode| mode.as_str())
            .collect()
    }
}

impl PartialOrd for PermissionMode {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for PermissionMode {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.granting_rank().cmp(&other.granting_rank())
    }
}

impl fmt::Display for PermissionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that names no permission mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown permission mode `{found}`; expected one of {}", PermissionMode::names().join(", "))]
pub struct UnknownMode {
    pub found: String,
}

impl FromStr for PermissionMode {
    type Err = UnknownMode;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        PermissionMode::ALL
            .into_iter()
            .find(|mode| mode.as_str() == text)
            .ok_or_else(|| UnknownMode {
                found: text.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn granting_order_is_the_documented_one() {
        let mut shuffled = vec![
            PermissionMode::BypassPermissions,
            PermissionMode::Default,
            PermissionMode::Plan,
            PermissionMode::Auto,
            PermissionMode::AcceptEdits,
            PermissionMode::DontAsk,
        ];
        shuffled.sort();
        assert_eq!(shuffled, PermissionMode::ALL.to_vec());
        assert_eq!(
            PermissionMode::BypassPermissions.capped_at(PermissionMode::AcceptEdits),
            PermissionMode::AcceptEdits
        );
        assert_eq!(
            PermissionMode::Plan.capped_at(PermissionMode::Auto),
            PermissionMode::Plan
        );
    }

    #[test]
    fn names_round_trip_through_serde_and_from_str() {
        for mode in PermissionMode::ALL {
            let json = serde_json::to_string(&mode).unwrap();
            assert_eq!(json, format!("\"{}\"", mode.as_str()));
            let back: PermissionMode = serde_json::from_str(&json).unwrap();
            assert_eq!(back, mode);
            assert_eq!(mode.as_str().parse::<PermissionMode>().unwrap(), mode);
        }
        let error = "acceptedits".parse::<PermissionMode>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown permission mode `acceptedits`; expected one of plan, dontAsk, default, acceptEdits, auto, bypassPermissions"
        );
    }
}
