//! `muster approve`: approve a plan or permission request as `human`; `--edit` opens the
//! plan in `$VISUAL` / `$EDITOR` first and approves what the person saved.

use muster_protocol::MessageKind;
use std::path::Path;

use crate::cli::decide::{Decision, decide, find_request};
use crate::cli::inspect::{open, runtime};
use crate::exit::{Exit, ExitError};
use crate::project::Globals;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The request id (for example plan-alice-2).
    pub id: String,
    /// The mode the agent enters on approval.
    #[arg(long)]
    pub mode: Option<String>,
    /// A note sent to the agent with the approval.
    #[arg(long)]
    pub feedback: Option<String>,
    /// An edited plan to approve instead of the submitted one.
    #[arg(long = "plan-file", conflicts_with = "edit")]
    pub plan_file: Option<std::path::PathBuf>,
    /// Edit the plan in $VISUAL or $EDITOR, then approve the saved text.
    #[arg(long)]
    pub edit: bool,
    /// Start execution with a fresh context holding only the approved plan.
    #[arg(long = "clear-context")]
    pub clear_context: bool,
    /// Grant only this one of the rules the plan asks for (repeat for more); without it
    /// every requested rule is granted. See `muster plans` for what a plan asks for.
    #[arg(long = "grant", value_name = "RULE", conflicts_with = "no_grants")]
    pub grants: Vec<String>,
    /// Grant none of the rules the plan asks for.
    #[arg(long = "no-grants")]
    pub no_grants: bool,
    /// The run, when the request id exists in more than one.
    #[arg(long)]
    pub run: Option<String>,
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    let edited_plan = match (&args.plan_file, args.edit) {
        (Some(path), _) => Some(std::fs::read_to_string(path).map_err(|e| {
            ExitError::new(Exit::Usage, format!("--plan-file {}: {e}", path.display()))
        })?),
        (None, true) => edit_plan(global, args.run.as_deref(), &args.id)?,
        (None, false) => None,
    };
    let decision = Decision::Approve {
        mode: args.mode,
        feedback: args.feedback,
        edited_plan,
        clear_context: args.clear_context,
        grants: match (args.no_grants, args.grants.is_empty()) {
            (true, _) => Some(Vec::new()),
            (false, true) => None,
            (false, false) => Some(args.grants),
        },
    };
    decide(global, args.run.as_deref(), &args.id, decision)
}

/// The plan of `request_id` as the person saved it in their editor; `None` when they saved
/// it unchanged (approved as submitted).
fn edit_plan(
    global: &Globals,
    run: Option<&str>,
    request_id: &str,
) -> anyhow::Result<Option<String>> {
    let (_project, store) = open(global)?;
    let request = runtime()?.block_on(find_request(store.as_ref(), run, request_id))?;
    if request.kind != MessageKind::PlanApprovalRequest {
        return Err(ExitError::new(
            Exit::Usage,
            format!("--edit: {request_id} is not a plan request"),
        )
        .into());
    }
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
    let submitted = request.body.plan().unwrap_or_default().to_owned();
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .find_map(|name| global.process.var(name).filter(|v| !v.trim().is_empty()))
        .ok_or_else(|| {
            ExitError::new(
                Exit::Usage,
                "--edit: set $VISUAL or $EDITOR to the editor to use (or pass --plan-file)",
            )
        })?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join(format!("{request_id}.md"));
    std::fs::write(&file, &submitted)?;
    run_editor(editor, &file)?;
    let saved = std::fs::read_to_string(&file).map_err(|e| {
        ExitError::new(
            Exit::Failed,
            format!(
                "--edit: reading the edited plan {}: {e}; nothing was approved",
                file.display()
            ),
        )
    })?;
    if saved.trim().is_empty() {
        return Err(ExitError::new(Exit::Failed, format!("--edit: the saved plan is empty; nothing was approved (reject {request_id} instead?)")).into());
    }
    Ok((saved != submitted).then_some(saved))
}

/// Runs the editor through the shell, as git does, so `EDITOR="code --wait"` works.
fn run_editor(editor: &str, file: &Path) -> anyhow::Result<()> {
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(file)
        .status()
        .map_err(|e| {
            ExitError::new(
                Exit::Failed,
                format!("--edit: cannot start the editor {editor:?}: {e}"),
            )
        })?;
    if !status.success() {
        return Err(ExitError::new(
            Exit::Failed,
            format!("--edit: the editor {editor:?} exited with {status}; nothing was approved"),
        )
        .into());
    }
    Ok(())
}
