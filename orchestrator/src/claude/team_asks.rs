//! A team run's requests to its person, with `--permission-prompt-tool stdio`: a team run
//! waits on them live (a teammate's plan, ask or question with `approver = "human"`), so each
//! committed `approval_requested` for the person is put to the program as `can_use_tool` on a
//! thread of its own, and its answer committed through the one decision path
//! ([`crate::human_decision::decide_as_human`]), which wakes the run. The request stays in
//! the store whatever happens here: an answer lost, a program gone, and `muster approve` or
//! the web inbox still decide it; the first answer wins.
//!
//! A merge for the person is not asked live: the team never waits on one (it ends awaiting
//! the decision once nothing else moves), so the session asks the program about every
//! request still waiting on the person when the run stops ([`answer_now`]), and carries the
//! run on when one was decided — a race-free order, as `muster approve` then `muster resume`.

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
            if let Err(error) = answer_now(&request) {
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

/// Puts the request to the program on this thread; whether it is decided now (by the
/// program's answer, or by another first).
pub(crate) fn answer_now(asked: &PersonRequest) -> anyhow::Result<bool> {
    let project = Project::locate(&asked.global)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let store = runtime.block_on(project.open_store())?;
    let Some(request) = runtime.block_on(store.request(&asked.run_id, &asked.request_id))? else {
        return Ok(false);
    };
    if request.response.is_some() {
        return Ok(true);
    }
    let merge_diff = match &request.body {
        MessageBody::MergeRequest { onto, commit, .. } => {
            let run = runtime.block_on(store.run(&asked.run_id))?;
            run.and_then(|run| {
                runtime.block_on(crate::serve::load::merge_diff(&run.workspace, onto, commit))
            })
        }
        _ => None,
    };
    let Some(decision) = decision_for(
        &asked.asks,
        &asked.agent,
        &asked.request_id,
        &request.body,
        merge_diff,
    ) else {
        return Ok(false);
    };
    let decided = runtime.block_on(decide_as_human(
        store.as_ref(),
        &project.runs_dir(),
        &request,
        decision,
    ));
    match decided {
        Ok(_) => Ok(true),
        Err(RefusedDecision::AlreadyDecided { by, .. }) => {
            asked.asks.decided_elsewhere(&asked.request_id, &by);
            Ok(true)
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
    merge_diff: Option<String>,
) -> Option<Decision> {
    match body {
        MessageBody::MergeRequest { .. } => asks.review_merge(request_id, body, merge_diff),
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
