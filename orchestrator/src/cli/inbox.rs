//! `muster inbox`: an agent's mail, or what waits on a person (`human`).

use std::collections::HashMap;

use muster_mailbox::{Message, MessageBody, RequestRecord};
use serde_json::{Value, json};

use crate::cli::inspect::{open, print_json, runtime, select_run};
use crate::display::{cut, table, time};
use crate::exit::Exit;
use crate::project::Globals;
use crate::worktree::MergeAdds;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent, or `human` for the requests that wait on a person (default: every message
    /// of the run).
    pub agent: Option<String>,
    /// The run (default: the newest).
    #[arg(long)]
    pub run: Option<String>,
    /// Without --run: the newest run of any project in the store, not only this one's.
    #[arg(long = "all-projects")]
    pub all_projects: bool,
    /// Print the messages (each with its request) as a JSON array.
    #[arg(long)]
    pub json: bool,
}

const SUMMARY_WIDTH: usize = 60;

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    let (project, store) = open(global)?;
    let scope = crate::project::project_scope(&project, args.all_projects);
    let (run, messages, requests) = runtime()?.block_on(async {
        let run = select_run(store.as_ref(), args.run.as_deref(), scope.as_deref()).await?;
        let messages = store.messages(&run.id, None).await?;
        let requests = store.requests(&run.id).await?;
        anyhow::Ok((run, messages, requests))
    })?;
    let requests: HashMap<&str, &RequestRecord> = requests
        .iter()
        .map(|r| (r.message_key.as_str(), r))
        .collect();
    let shown: Vec<&Message> = match args.agent.as_deref() {
        Some("human") => messages
            .iter()
            .filter(|m| {
                requests
                    .get(m.key.as_str())
                    .is_some_and(|r| muster_protocol::Responder::names_the_person(&r.responder))
            })
            .collect(),
        Some(agent) => messages.iter().filter(|m| m.recipient == agent).collect(),
        None => messages.iter().collect(),
    };
    if args.json {
        let rows: Vec<Value> = shown
            .iter()
            .map(|m| json!({"message": m, "request": requests.get(m.key.as_str())}))
            .collect();
        print_json(&rows)?;
        return Ok(Exit::Success);
    }
    let whose = match args.agent.as_deref() {
        Some("human") => "Requests a person answers".to_owned(),
        Some(agent) => format!("Mail for {agent}"),
        None => "All mail".to_owned(),
    };
    if shown.is_empty() {
        println!("{whose} in run {}: none.", run.id);
        return Ok(Exit::Success);
    }
    let mut any_cut = false;
    let rows: Vec<Vec<String>> = shown
        .iter()
        .map(|m| {
            let (summary, was_cut) = cut(&summary_of(m), SUMMARY_WIDTH);
            any_cut |= was_cut;
            vec![
                time(m.created_at),
                m.sender.clone(),
                m.recipient.clone(),
                m.kind.in_words(),
                m.state.as_str().to_owned(),
                m.request_id.clone().unwrap_or_else(|| "-".into()),
                answer_of(requests.get(m.key.as_str()).copied()),
                summary,
            ]
        })
        .collect();
    println!("{whose} in run {}:", run.id);
    println!(
        "{}",
        table(
            &[
                "TIME", "FROM", "TO", "KIND", "STATE", "REQUEST", "ANSWER", "SUMMARY"
            ],
            &rows
        )
    );
    if any_cut {
        println!("(long bodies are cut; `--json` shows them whole)");
    }
    if args.agent.as_deref() == Some("human") {
        for (request_id, command) in pending_merge_diffs(&shown, &requests) {
            println!("What {request_id} adds: `{command}` in {}", run.workspace);
        }
        println!(
            "Answer with `muster approve ID`, `muster reject ID --feedback TEXT` or `muster answer ID TEXT`."
        );
    }
    Ok(Exit::Success)
}

/// For each merge request still waiting: its id and the command that shows what it adds
/// ([`MergeAdds`], the diff its diffstat summarises).
fn pending_merge_diffs(
    shown: &[&Message],
    requests: &HashMap<&str, &RequestRecord>,
) -> Vec<(String, String)> {
    shown
        .iter()
        .filter(|m| {
            requests
                .get(m.key.as_str())
                .is_some_and(|r| r.response.is_none())
        })
        .filter_map(|m| match &m.body {
            MessageBody::MergeRequest {
                request_id,
                commit,
                onto,
                ..
            } => Some((request_id.clone(), MergeAdds::command(onto, commit))),
            _ => None,
        })
        .collect()
}

/// How a request was answered, in words; `-` for a message that is not a request.
fn answer_of(request: Option<&RequestRecord>) -> String {
    let Some(request) = request else {
        return "-".into();
    };
    let Some(response) = &request.response else {
        return format!("waiting for {}", request.responder);
    };
    let verdict = match response.body.approved() {
        Some(true) => "approved",
        Some(false) => "rejected",
        None => "answered",
    };
    format!(
        "{verdict} by {}",
        response.body.decided_by(&response.responder)
    )
}

fn summary_of(message: &Message) -> String {
    match message.body.clone() {
        MessageBody::Text { text, summary } => summary.unwrap_or(text),
        MessageBody::PlanApprovalRequest {
            plan_file,
            allowed_prompts,
            ..
        } if !allowed_prompts.is_empty() => {
            format!("plan {plan_file}; asks for {}", allowed_prompts.join(", "))
        }
        MessageBody::PlanApprovalRequest { plan_file, .. } => format!("plan {plan_file}"),
        MessageBody::PlanApprovalResponse {
            approved,
            feedback,
            mode,
            grants,
            ..
        } => {
            let word = if approved { "approved" } else { "rejected" };
            let mode = mode.map(|m| format!(", mode {m}")).unwrap_or_default();
            let grants = if grants.is_empty() {
                String::new()
            } else {
                format!(", granted {}", grants.join(", "))
            };
            verdict(&format!("{word}{mode}{grants}"), feedback)
        }
        MessageBody::PermissionRequest { tool, reason, .. } => format!("{tool}: {reason}"),
        MessageBody::PermissionResponse {
            approved, feedback, ..
        } => verdict(if approved { "allowed" } else { "denied" }, feedback),
        MessageBody::MergeRequest {
            branch,
            diffstat,
            tested,
            ..
        } => format!(
            "merge {branch}{}: {}",
            // Near the front: the summary column is cut to its width.
            if tested.is_some() {
                ", tests passed"
            } else {
                ""
            },
            diffstat.lines().last().unwrap_or("")
        ),
        MessageBody::MergeResponse {
            approved, feedback, ..
        } => verdict(
            if approved {
                "merge approved"
            } else {
                "merge rejected"
            },
            feedback,
        ),
        MessageBody::Question { question, .. } => question,
        MessageBody::Answer { answer, .. } => answer,
        MessageBody::ShutdownRequest { reason, .. } => {
            reason.unwrap_or_else(|| "please stop".into())
        }
        MessageBody::ShutdownResponse {
            approve, reason, ..
        } => verdict(if approve { "stopping" } else { "refused" }, reason),
        MessageBody::TaskAssignment {
            task_id, subject, ..
        } => format!("task #{task_id}: {subject}"),
        MessageBody::IdleNotification {
            reason, summary, ..
        } => summary.unwrap_or(reason),
        MessageBody::VerificationReport { report, .. } => report.to_string(),
        MessageBody::Unknown { kind, raw } => format!("(unknown kind {kind}, kept as is) {raw}"),
    }
}

/// A decision's word, with its reason after a colon when it gave one.
fn verdict(word: &str, reason: Option<String>) -> String {
    match reason {
        Some(reason) => format!("{word}: {reason}"),
        None => word.to_owned(),
    }
}
