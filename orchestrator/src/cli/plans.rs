//! `muster plans`: each plan file of a run with its agent, request id and state; then, in
//! the text, each merge request — the work a plan led to — with its decision and test pass.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use muster_mailbox::revision::{stored_previous, stored_revision};
use muster_mailbox::{MessageBody, MessageKind, RequestRecord};
use serde::Serialize;

use crate::cli::inspect::{open, print_json, runtime, select_run};
use crate::display::{table, tests_passed};
use crate::exit::Exit;
use crate::plan_diff;
use crate::project::Globals;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run (default: the newest).
    #[arg(long)]
    pub run: Option<String>,
    /// Print the plan files as a JSON array.
    #[arg(long)]
    pub json: bool,
}

/// One plan file and where it stands.
#[derive(Debug, Serialize)]
pub struct PlanEntry {
    pub file: PathBuf,
    pub exists: bool,
    pub agent: String,
    pub request_id: Option<String>,
    /// draft, pending, approved or rejected.
    pub state: &'static str,
    /// The request's plan revision (1 after an approval or for a first request).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<u32>,
    /// The request of the previous revision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_request_id: Option<String>,
    /// A unified diff from the previous revision's plan to this one's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// The permission rules the plan asks for (plan-scoped grants).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowed_prompts: Vec<String>,
    /// The rules its approval granted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<String>,
    /// Who decided it, as a person reads it (a plan reviewer hook by name); not in the JSON,
    /// whose `state` and the request's response already say it.
    #[serde(skip)]
    pub decided_by: Option<String>,
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    let (project, store) = open(global)?;
    let (run, requests, stale) = runtime()?.block_on(async {
        let run = select_run(store.as_ref(), args.run.as_deref(), None).await?;
        let requests = store.requests(&run.id).await?;
        let stale = crate::team::isolation::stale_merges(store.as_ref(), &run.id).await?;
        anyhow::Ok((run, requests, stale))
    })?;
    let plans_dir = project.plans_dir();
    let plans = collect(plans_dir, &run.slug, &requests, project.root.path());
    // The JSON stays the plan files' array (a documented format); each merge request's
    // `tested` is in `muster inbox --json`.
    if args.json {
        print_json(&plans)?;
        return Ok(Exit::Success);
    }
    if plans.is_empty() {
        println!(
            "Run {} has no plan files (in {}).",
            run.id,
            plans_dir.display()
        );
    } else {
        print_plans(&run, &plans);
    }
    let merges = merge_rows(&requests, &stale);
    if !merges.is_empty() {
        println!(
            "\nMerge requests of run {}:\n{}",
            run.id,
            table(&["REQUEST", "AGENT", "BRANCH", "STATE"], &merges)
        );
    }
    Ok(Exit::Success)
}

/// A row per merge request: its id, teammate, branch, and its decision with the merge gate's
/// pass (`merged by lead, tests passed: `cargo test`, 12.3s, on 1a2b…`), as `muster inbox`
/// and the lead's mail say it. An approved request in `stale` was sent back instead.
fn merge_rows(
    requests: &[RequestRecord],
    stale: &std::collections::BTreeSet<String>,
) -> Vec<Vec<String>> {
    requests
        .iter()
        .filter_map(|request| match &request.body {
            MessageBody::MergeRequest {
                agent,
                branch,
                tested,
                ..
            } => {
                let mut state = crate::team::summary::merge_aware_decision(request, stale);
                if let Some(tested) = tested {
                    state.push_str(&format!(", tests passed: {}", tests_passed(tested)));
                }
                Some(vec![
                    request.request_id.clone(),
                    agent.clone(),
                    branch.clone(),
                    state,
                ])
            }
            _ => None,
        })
        .collect()
}

/// The plan files as a table, then what each asks for and how it revises the one before.
fn print_plans(run: &muster_mailbox::RunRecord, plans: &[PlanEntry]) {
    let rows: Vec<Vec<String>> = plans
        .iter()
        .map(|plan| {
            let file = plan.file.display().to_string();
            vec![
                if plan.exists {
                    file
                } else {
                    format!("{file} (missing)")
                },
                plan.agent.clone(),
                plan.request_id.clone().unwrap_or_else(|| "-".into()),
                plan.revision.map_or_else(|| "-".into(), |r| r.to_string()),
                match &plan.decided_by {
                    Some(by) => format!("{} by {by}", plan.state),
                    None => plan.state.to_owned(),
                },
            ]
        })
        .collect();
    println!(
        "Plans of run {} ({}):\n{}",
        run.id,
        run.slug,
        table(&["FILE", "AGENT", "REQUEST", "REV", "STATE"], &rows)
    );
    for plan in plans {
        if let (Some(request), false) = (&plan.request_id, plan.allowed_prompts.is_empty()) {
            let granted = match plan.state {
                "approved" if plan.grants.is_empty() => "; granted: none".to_owned(),
                "approved" => format!("; granted: {}", plan.grants.join(", ")),
                _ => String::new(),
            };
            println!(
                "\n{request} asks for: {}{granted}",
                plan.allowed_prompts.join(", ")
            );
        }
        if let (Some(request), Some(previous), Some(diff)) =
            (&plan.request_id, &plan.previous_request_id, &plan.diff)
        {
            let changes = if diff.is_empty() {
                "(no changes)\n"
            } else {
                diff.as_str()
            };
            println!("\n{request} revises {previous}:\n{changes}");
        }
    }
}

/// Joins the run's plan files on disk with its plan approval requests; the newest request for
/// a file decides its state. An empty file no request names is left out: it is the slug's
/// reservation (`{slug}.md` is created empty when the run starts), not a plan.
pub fn collect(
    plans_dir: &Path,
    slug: &str,
    requests: &[RequestRecord],
    root: &Path,
) -> Vec<PlanEntry> {
    let mut by_file: BTreeMap<PathBuf, PlanEntry> = BTreeMap::new();
    for file in plan_files(plans_dir, slug) {
        if std::fs::metadata(&file).is_ok_and(|m| m.len() == 0) {
            continue;
        }
        let agent = agent_of(&file, slug);
        by_file.insert(
            file.clone(),
            PlanEntry {
                file,
                exists: true,
                agent,
                request_id: None,
                state: "draft",
                revision: None,
                previous_request_id: None,
                diff: None,
                allowed_prompts: Vec::new(),
                grants: Vec::new(),
                decided_by: None,
            },
        );
    }
    for request in requests
        .iter()
        .filter(|r| r.kind == MessageKind::PlanApprovalRequest)
    {
        let Some(file) = plan_file_of(request, root) else {
            continue;
        };
        let state = match request.response.as_ref().map(|r| r.body.approved()) {
            None => "pending",
            Some(Some(true)) => "approved",
            Some(_) => "rejected",
        };
        let exists = file.exists();
        let agent = request.requester.clone();
        let previous_request_id = stored_previous(request).map(str::to_owned);
        let diff = previous_request_id
            .as_deref()
            .and_then(|id| plan_diff::revision_diff(requests, id, request));
        by_file.insert(
            file.clone(),
            PlanEntry {
                file,
                exists,
                agent,
                request_id: Some(request.request_id.clone()),
                state,
                revision: Some(stored_revision(request)),
                previous_request_id,
                diff,
                allowed_prompts: crate::human_decision::requested_rules(request),
                grants: granted_rules(request),
                decided_by: request
                    .response
                    .as_ref()
                    .map(|response| response.body.decided_by(&response.responder)),
            },
        );
    }
    by_file.into_values().collect()
}

/// The rules a decided plan request's approval granted.
fn granted_rules(request: &RequestRecord) -> Vec<String> {
    match request.response.as_ref().map(|r| &r.body) {
        Some(MessageBody::PlanApprovalResponse { grants, .. }) => grants.clone(),
        _ => Vec::new(),
    }
}

fn plan_files(plans_dir: &Path, slug: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(plans_dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|name| {
                    name == format!("{slug}.md")
                        || (name.starts_with(&format!("{slug}-agent-")) && name.ends_with(".md"))
                })
        })
        .collect();
    files.sort();
    files
}

fn agent_of(file: &Path, slug: &str) -> String {
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    name.strip_prefix(&format!("{slug}-agent-"))
        .and_then(|rest| rest.strip_suffix(".md"))
        .map_or_else(|| "main agent".to_owned(), str::to_owned)
}

fn plan_file_of(request: &RequestRecord, root: &Path) -> Option<PathBuf> {
    let file = Path::new(request.body.plan_file()?);
    Some(if file.is_absolute() {
        file.to_path_buf()
    } else {
        root.join(file)
    })
}
