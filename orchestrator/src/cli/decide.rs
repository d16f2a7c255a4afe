//! What `approve`, `reject` and `answer` share: find the request, check that a person may
//! answer it, commit the answer as `human`, then wake the live run through its socket.

use muster_mailbox::decide::{self, Waiter};
use muster_mailbox::live::PokeOutcome;
use muster_mailbox::{
    MailboxStore, MessageBody, NewResponse, RequestRecord, StoreError, StoreResult,
};

use crate::cli::inspect::{open, runtime};
use crate::exit::{Exit, ExitError};
use crate::project::Globals;

/// A person's decision on one request.
pub enum Decision {
    Approve {
        mode: Option<String>,
        feedback: Option<String>,
        edited_plan: Option<String>,
        clear_context: bool,
    },
    Reject {
        feedback: String,
    },
    Answer {
        text: String,
    },
}

/// Answers `request_id` as `human` and reports what happened on stdout.
pub fn decide(
    global: &Globals,
    run: Option<&str>,
    request_id: &str,
    decision: Decision,
) -> anyhow::Result<Exit> {
    let (project, store) = open(global)?;
    let runtime = runtime()?;
    let request = runtime.block_on(find_request(store.as_ref(), run, request_id))?;
    if let Some(response) = &request.response {
        return Err(ExitError::new(
            Exit::Failed,
            format!(
                "request {request_id} was already decided by {}; only the first answer counts",
                response.responder
            ),
        )
        .into());
    }
    if request.responder != "human" {
        return Err(ExitError::new(
            Exit::Failed,
            format!(
                "request {request_id} is answered by {}, not by a person (`human`)",
                request.responder
            ),
        )
        .into());
    }
    let body = response_body(&request, decision)?;
    let verdict = describe(&body);
    let answer = NewResponse {
        run_id: request.run_id.clone(),
        sender: "human".into(),
        body,
        idempotency_key: None,
    };
    let runs_dir = project.runs_dir();
    let waiter = Waiter::LiveRun {
        runs_dir: &runs_dir,
    };
    let decided = match runtime.block_on(decide::decide(store.as_ref(), answer, waiter)) {
        Ok(decided) => decided,
        Err(error @ StoreError::AlreadyDecided { .. }) => {
            return Err(ExitError::new(Exit::Failed, error.to_string()).into());
        }
        Err(error) => return Err(error.into()),
    };
    println!(
        "{verdict} {request_id} ({} from {}, run {}).",
        kind_in_words(&request.kind),
        request.requester,
        request.run_id
    );
    report_wake(&request, decided.wake);
    Ok(Exit::Success)
}

async fn find_request(
    store: &dyn MailboxStore,
    run: Option<&str>,
    request_id: &str,
) -> anyhow::Result<RequestRecord> {
    let mut runs = match run {
        Some(id) => vec![store.run(id).await?.ok_or_else(|| {
            ExitError::new(
                Exit::Usage,
                format!("no run {id:?} in this store (see `muster runs`)"),
            )
        })?],
        None => store.runs().await?,
    };
    runs.sort_by_key(|r| std::cmp::Reverse(r.created_at));
    let mut found = Vec::new();
    for candidate in &runs {
        if let Some(request) = store.request(&candidate.id, request_id).await? {
            found.push(request);
        }
    }
    match found.len() {
        0 => Err(ExitError::new(
            Exit::Usage,
            format!("unknown request id {request_id:?} (see `muster inbox human`)"),
        )
        .into()),
        1 => Ok(found.remove(0)),
        _ => Err(ExitError::new(
            Exit::Usage,
            format!(
                "request id {request_id:?} exists in runs {}; say which with --run",
                found
                    .iter()
                    .map(|r| r.run_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .into()),
    }
}

fn usage(message: String) -> anyhow::Error {
    ExitError::new(Exit::Usage, message).into()
}

fn response_body(request: &RequestRecord, decision: Decision) -> anyhow::Result<MessageBody> {
    let request_id = request.request_id.clone();
    match (request.kind.as_str(), decision) {
        (
            "plan_approval_request",
            Decision::Approve {
                mode,
                feedback,
                edited_plan,
                clear_context,
            },
        ) => {
            if let Some(mode) = &mode {
                mode.parse::<muster_config::PermissionMode>()
                    .map_err(|e| usage(format!("--mode: {e}")))?;
            }
            Ok(MessageBody::PlanApprovalResponse {
                request_id,
                approved: true,
                feedback,
                mode,
                lowered_from: None,
                edited_plan,
                clear_context,
                rule: None,
            })
        }
        ("plan_approval_request", Decision::Reject { feedback }) => {
            Ok(MessageBody::PlanApprovalResponse {
                request_id,
                approved: false,
                feedback: Some(feedback),
                mode: None,
                lowered_from: None,
                edited_plan: None,
                clear_context: false,
                rule: None,
            })
        }
        (
            "permission_request",
            Decision::Approve {
                mode,
                edited_plan,
                clear_context,
                feedback,
            },
        ) => {
            if mode.is_some() || edited_plan.is_some() || clear_context {
                return Err(usage(format!(
                    "{request_id} is a permission request: --mode, --plan-file and --clear-context apply to plans only"
                )));
            }
            Ok(MessageBody::PermissionResponse {
                request_id,
                approved: true,
                feedback,
                rule: None,
            })
        }
        ("permission_request", Decision::Reject { feedback }) => {
            Ok(MessageBody::PermissionResponse {
                request_id,
                approved: false,
                feedback: Some(feedback),
                rule: None,
            })
        }
        (
            "merge_request",
            Decision::Approve {
                mode,
                edited_plan,
                clear_context,
                feedback,
            },
        ) => {
            if mode.is_some() || edited_plan.is_some() || clear_context {
                return Err(usage(format!(
                    "{request_id} is a merge request: --mode, --plan-file and --clear-context apply to plans only"
                )));
            }
            Ok(MessageBody::MergeResponse {
                request_id,
                approved: true,
                feedback,
                rule: None,
            })
        }
        ("merge_request", Decision::Reject { feedback }) => Ok(MessageBody::MergeResponse {
            request_id,
            approved: false,
            feedback: Some(feedback),
            rule: None,
        }),
        ("question", Decision::Answer { text }) => Ok(MessageBody::Answer {
            request_id,
            answer: text,
        }),
        ("question", _) => Err(usage(format!(
            "{request_id} is a question: answer it with `muster answer {request_id} TEXT`"
        ))),
        (_, Decision::Answer { .. }) => Err(usage(format!(
            "{request_id} is a {}: decide it with `muster approve` or `muster reject`",
            kind_in_words(&request.kind)
        ))),
        (kind, _) => Err(usage(format!(
            "{request_id} is a {}, which a person does not answer",
            kind_in_words(kind)
        ))),
    }
}

fn describe(body: &MessageBody) -> &'static str {
    match body {
        MessageBody::PlanApprovalResponse { approved: true, .. }
        | MessageBody::PermissionResponse { approved: true, .. }
        | MessageBody::MergeResponse { approved: true, .. } => "Approved",
        MessageBody::Answer { .. } => "Answered",
        _ => "Rejected",
    }
}

fn kind_in_words(kind: &str) -> String {
    kind.replace('_', " ")
}

/// Mail is committed first; the wake-up is a courtesy that never undoes it.
fn report_wake(request: &RequestRecord, wake: Option<StoreResult<PokeOutcome>>) {
    let Some(wake) = wake else {
        return;
    };
    match wake {
        Ok(PokeOutcome::Woken) => println!("The run is live and {} was woken.", request.requester),
        Ok(PokeOutcome::NotLive) => {
            println!(
                "The run is not live: `muster resume {}` continues it.",
                request.run_id
            )
        }
        Err(error) => println!(
            "The answer is stored, but waking the live run failed ({error}); it will see it at its next turn."
        ),
    }
}
