//! An agent's mode and plan as state: the mode, the mode plan mode returns to, the highest
//! mode an approval may restore, the plan file, the grants of an approved plan until its
//! verification report, and whether the newest plan snapshot is an approved one. Resume
//! replays the records through [`PlanState::replay`]; no store.

use std::path::PathBuf;

use muster_config::PermissionMode;

use crate::permission::PlanGrants;

use super::records::Record;

#[derive(Debug, Clone)]
pub(super) struct PlanState {
    pub mode: PermissionMode,
    /// The mode to restore after plan mode.
    pub pre_plan_mode: Option<PermissionMode>,
    /// The highest mode an approval may restore (a teammate's lead's mode; `None`: no cap
    /// beyond the approver's).
    pub approval_ceiling: Option<PermissionMode>,
    /// The rules of the agent's approved plan, until its verification report.
    pub grants: Option<PlanGrants>,
    pub file: Option<PathBuf>,
    /// The newest plan snapshot is an approved one (resume keeps it authoritative).
    pub approved: bool,
}

impl PlanState {
    /// A new agent's: starting in plan mode with no mode to return to, it returns to its
    /// definition's mode (`definition_mode`, unless that is plan mode too) or the default.
    pub(super) fn new(
        mode: PermissionMode,
        pre_plan_mode: Option<PermissionMode>,
        approval_ceiling: Option<PermissionMode>,
        definition_mode: Option<PermissionMode>,
        file: Option<PathBuf>,
    ) -> PlanState {
        let pre_plan_mode = match (mode, pre_plan_mode) {
            (PermissionMode::Plan, None) => Some(
                definition_mode
                    .filter(|m| *m != PermissionMode::Plan)
                    .unwrap_or_default(),
            ),
            (_, given) => given,
        };
        PlanState {
            mode,
            pre_plan_mode,
            approval_ceiling,
            grants: None,
            file,
            approved: false,
        }
    }

    /// Whether the `sends` of an end of turn carry the verification report of the approved
    /// plan, which ends its grants: the `grants_ended` record to commit with them.
    pub(super) fn grants_ended_by(&self, sends: &[muster_mailbox::NewMessage]) -> Option<Record> {
        let grants = self.grants.as_ref()?;
        sends
            .iter()
            .any(|sent| {
                matches!(&sent.body, muster_mailbox::MessageBody::VerificationReport {
                    request_id: Some(id), ..
                } if *id == grants.request_id)
            })
            .then(|| Record::GrantsEnded {
                request_id: grants.request_id.clone(),
                reason: "the plan's verification report was sent".into(),
            })
    }

    /// Replays one record (resume); gives the plan text of a `plan_snapshot`.
    pub(super) fn replay(&mut self, record: &Record) -> Option<String> {
        match record {
            Record::Mode {
                mode,
                pre_plan_mode,
                ..
            } => {
                self.mode = *mode;
                self.pre_plan_mode = *pre_plan_mode;
            }
            Record::Grants {
                request_id,
                approved_by,
                rules,
            } => {
                let (grants, _) = PlanGrants::from_texts(request_id, approved_by, rules);
                self.grants = Some(grants);
            }
            Record::GrantsEnded { .. } => self.grants = None,
            Record::PlanSnapshot { content, state, .. } => {
                self.approved = matches!(state.as_str(), "approved" | "edited");
                return Some(content.clone());
            }
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a new agent returns to after plan mode, by how it starts.
    #[test]
    fn a_new_agent_in_plan_mode_knows_where_it_returns() {
        use PermissionMode::{AcceptEdits, Default, Plan};
        let table = [
            (Plan, None, None, Some(Default)),
            (Plan, None, Some(AcceptEdits), Some(AcceptEdits)),
            (Plan, None, Some(Plan), Some(Default)),
            (Plan, Some(AcceptEdits), None, Some(AcceptEdits)),
            (Default, None, Some(AcceptEdits), None),
        ];
        for (mode, given, definition, expected) in table {
            let state = PlanState::new(mode, given, None, definition, None);
            assert_eq!(
                state.pre_plan_mode, expected,
                "{mode:?} {given:?} {definition:?}"
            );
        }
    }

    /// Mode records switch the mode; a snapshot's state says whether the plan is approved.
    #[test]
    fn replay_follows_modes_and_snapshots() {
        let mut state = PlanState::new(PermissionMode::Plan, None, None, None, None);
        state.replay(&Record::Mode {
            mode: PermissionMode::AcceptEdits,
            pre_plan_mode: None,
            reason: "approved".into(),
        });
        assert_eq!(state.mode, PermissionMode::AcceptEdits);
        let plan = state.replay(&Record::PlanSnapshot {
            path: "p.md".into(),
            content: "# Plan".into(),
            state: "approved".into(),
            request_id: None,
        });
        assert_eq!(plan.as_deref(), Some("# Plan"));
        assert!(state.approved);
        state.replay(&Record::PlanSnapshot {
            path: "p.md".into(),
            content: "# Plan 2".into(),
            state: "draft".into(),
            request_id: None,
        });
        assert!(!state.approved);
    }
}
