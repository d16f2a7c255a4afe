//! The roster: who every run has from the start, and who may join.

use crate::error::{StoreError, StoreResult};
use crate::types::{HUMAN, MemberKind, POLICY, RosterEntry, validate_agent_id};

/// The entries every run has from its creation: the person and the policy.
pub(crate) fn founding_members() -> [RosterEntry; 2] {
    [(HUMAN, MemberKind::Human), (POLICY, MemberKind::Policy)].map(|(agent, kind)| RosterEntry {
        agent: agent.into(),
        kind,
        definition: None,
        parent: None,
    })
}

/// Whether `entry` may join a run (before looking whether it is already on the roster).
pub(crate) fn check_new_member(entry: &RosterEntry) -> StoreResult<()> {
    validate_agent_id(&entry.agent)?;
    if matches!(entry.kind, MemberKind::Human | MemberKind::Policy)
        || [HUMAN, POLICY].contains(&entry.agent.as_str())
    {
        return Err(StoreError::InvalidId {
            what: "roster entry",
            value: entry.agent.clone(),
            rule: "`human` and `policy` are reserved entries every run already has",
        });
    }
    Ok(())
}

/// The refusal of mail to someone not on the roster, naming who is.
pub(crate) fn unknown_recipient(
    run_id: &str,
    recipient: &str,
    roster: &[RosterEntry],
) -> StoreError {
    StoreError::UnknownRecipient {
        run: run_id.into(),
        recipient: recipient.into(),
        members: roster
            .iter()
            .map(|e| e.agent.as_str())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(agent: &str, kind: MemberKind) -> RosterEntry {
        RosterEntry {
            agent: agent.into(),
            kind,
            definition: None,
            parent: None,
        }
    }

    #[test]
    fn reserved_entries_and_bad_ids_may_not_join() {
        let table = [
            (entry("dev", MemberKind::Teammate), true),
            (entry("lead", MemberKind::Lead), true),
            (entry("human", MemberKind::Teammate), false),
            (entry("policy", MemberKind::Teammate), false),
            (entry("someone", MemberKind::Human), false),
            (entry("someone", MemberKind::Policy), false),
            (entry("bad id!", MemberKind::Teammate), false),
        ];
        for (entry, allowed) in table {
            assert_eq!(check_new_member(&entry).is_ok(), allowed, "{entry:?}");
        }
        let founders = founding_members().map(|e| e.agent);
        assert_eq!(founders, [HUMAN.to_owned(), POLICY.to_owned()]);
        let refusal = unknown_recipient("r", "x", &founding_members());
        assert!(
            format!("{refusal:?}").contains("human, policy"),
            "{refusal:?}"
        );
    }
}
