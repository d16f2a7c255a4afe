//! A team run's requests to its person, with `--permission-prompt-tool stdio`: a team run
//! waits on them live (a teammate's plan, ask or question with `approver = "human"`), so each
//! committed `approval_requested` for the person is put to the program as `can_use_tool` on a
//! thread of its own, and its answer committed through the one decision path
//! ([`crate::human_decision::decide_as_human`]), which wakes the run. The request stays in
//! the store whatever happens here: an answer lost, a program gone, and `muster approve` or
//! the web inbox still decide it; the first answer wins.

use std::path::Path;
use std::sync::Arc;

use muster_agents::runtime::{Terminal, TerminalPlanDecision};
use muster_mailbox::MessageBody;

use super::asks::ProgramAsks;
use crate::human_decision::{Decision, RefusedDecision, decide_as_human};
use crate::project::{Globals, Project};

/// What a request to the person is answered from.
pub(crate) struct PersonRequest {
    pub global: Globals,
    pub asks: Arc<ProgramAsks>,
    pub run_id: String,
    pub request_id: String,
    pub agent: String,
}

/// Puts the request to the program on a thread of its own.
pub(crate) fn answer_in_background(request: PersonRequest) {
    let spawned = std::thread::Builder::new()
        .name(format!("claude-ask-{}", request.request_id))
        .spawn(move || {
            if let Err(error) = answer(&request) {
                eprintln!(
                    "muster claude: {} was not answered here ({error:#}); `muster approve` or \
                     the web inbox can decide it",
                    request.request_id
                );
            }
        });
    if let Err(error) = spawned {
        eprintln!("muster claude: a request could not be put to the program (no thread: {error})");
    }
}

fn answer(asked: &PersonRequest) -> anyhow::Result<()> {
    let project = Project::locate(&asked.global)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let store = runtime.block_on(project.open_store())?;
    let Some(request) = runtime.block_on(store.request(&asked.run_id, &asked.request_id))? else {
        return Ok(());
    };
    if request.response.is_some() {
        return Ok(());
    }
    let Some(decision) = decision_for(&asked.asks, &asked.agent, &asked.request_id, &request.body)
    else {
        return Ok(());
    };
    let decided = runtime.block_on(decide_as_human(
        store.as_ref(),
        &project.runs_dir(),
        &request,
        decision,
    ));
    match decided {
        Ok(_) => Ok(()),
        Err(RefusedDecision::AlreadyDecided { by, .. }) => {
            asked.asks.decided_elsewhere(&asked.request_id, &by);
            Ok(())
        }
        Err(error) => Err(error.into()),
    }
}

/// The program's answer to the request, as a person's decision; `None` leaves it undecided
/// (a question without an answer, a kind the program is not asked about).
fn decision_for(
    asks: &ProgramAsks,
    agent: &str,
    request_id: &str,
    body: &MessageBody,
) -> Option<Decision> {
    match body {
        MessageBody::PlanApprovalRequest {
            plan, plan_file, ..
        } => Some(
            match asks.plan(agent, Path::new(plan_file), plan, request_id) {
                TerminalPlanDecision::Approve {
                    mode,
                    feedback,
                    clear_context,
                } => Decision::Approve {
                    mode: mode.map(|mode| mode.to_string()),
                    feedback,
                    edited_plan: None,
                    clear_context,
                    grants: None,
                },
                TerminalPlanDecision::Reject { feedback } => Decision::Reject { feedback },
            },
        ),
        MessageBody::PermissionRequest {
            tool,
            input,
            reason,
            ..
        } => Some(if asks.allow_call(agent, tool, input, reason) {
            Decision::Approve {
                mode: None,
                feedback: None,
                edited_plan: None,
                clear_context: false,
                grants: None,
            }
        } else {
            Decision::Reject {
                feedback: "denied by the program".to_owned(),
            }
        }),
        MessageBody::Question {
            question, options, ..
        } => asks
            .answer_question(agent, question, options)
            .map(|text| Decision::Answer { text }),
        _ => None,
    }
}
