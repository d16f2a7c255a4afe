//! A team run's requests to its person, with `--permission-prompt-tool stdio`: the program is
//! the person's front end ([`crate::person_requests`], which puts each request to it and
//! commits its answer through the one decision path), asked through `can_use_tool` — a plan as
//! `ExitPlanMode` (with its stored request id), a merge as muster's `ReviewMerge` (with the
//! diff it adds), a permission ask as the tool itself, a question as `AskUserQuestion`.

use std::path::Path;

use muster_agents::runtime::Terminal;
use muster_mailbox::MessageBody;

use super::asks::ProgramAsks;
use crate::human_decision::Decision;
use crate::person_requests::{AskedRequest, PersonFrontEnd};

impl PersonFrontEnd for ProgramAsks {
    fn name(&self) -> &'static str {
        "muster claude"
    }

    /// The program's answer to the request, as a person's decision; `None` leaves it
    /// undecided (a question without an answer, a kind the program is not asked about).
    fn decide(&self, asked: &AskedRequest) -> Option<Decision> {
        let agent = asked.agent.as_str();
        let request_id = asked.request_id.as_str();
        match &asked.body {
            MessageBody::MergeRequest { .. } => {
                self.review_merge(request_id, &asked.body, asked.merge_diff.clone())
            }
            MessageBody::PlanApprovalRequest {
                plan, plan_file, ..
            } => Some(
                self.plan(agent, Path::new(plan_file), plan, request_id)
                    .into(),
            ),
            MessageBody::PermissionRequest {
                tool,
                input,
                reason,
                ..
            } => Some(if self.allow_call(agent, tool, input, reason) {
                Decision::approve(None)
            } else {
                Decision::Reject {
                    feedback: "denied by the program".to_owned(),
                }
            }),
            _ => None,
        }
    }
}
