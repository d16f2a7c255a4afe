//! What `approve`, `reject` and `answer` share: find the request, check that a person may
//! answer it, commit the answer as `human`, then wake the live run through its socket.

use muster_mailbox::live::PokeOutcome;
use muster_mailbox::{MailboxStore, RequestRecord, StoreResult};

use crate::cli::inspect::{open, runtime};
use crate::exit::{Exit, ExitError};
use crate::human_decision::{RefusedDecision, decide_as_human, verdict};
use crate::project::Globals;

pub use crate::human_decision::Decision;

/// Answers `request_id` as `human` and reports what happened on stdout.
pub fn decide(
    global: &Globals,
    run: Option<&str>,
    request_id: &str,
    decision: Decision,
) -> anyhow::Result<Exit> {
    let (project, store) = open(global)?;
    if let Decision::Approve {
        mode: Some(mode), ..
    } = &decision
        && let Ok(mode) = mode.parse::<muster_config::PermissionMode>()
        && let Some(refused) = project.settings.refuse_disabled_mode(mode, "--mode")
    {
        return Err(ExitError::new(Exit::Usage, refused).into());
    }
    let runtime = runtime()?;
    let request = runtime.block_on(find_request(store.as_ref(), run, request_id))?;
    let runs_dir = project.runs_dir();
    let decided = runtime
        .block_on(decide_as_human(
            store.as_ref(),
            &runs_dir,
            &request,
            decision,
        ))
        .map_err(|refused| match refused {
            RefusedDecision::Store(error) => anyhow::Error::from(error),
            RefusedDecision::Unfit(message) => ExitError::new(Exit::Usage, message).into(),
            refused => ExitError::new(Exit::Failed, refused.to_string()).into(),
        })?;
    println!(
        "{} {request_id} ({} from {}, run {}).",
        verdict(&decided.response.body.clone()),
        request.kind.in_words(),
        request.requester,
        request.run_id
    );
    report_wake(&request, decided.wake);
    Ok(Exit::Success)
}

pub(crate) async fn find_request(
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
