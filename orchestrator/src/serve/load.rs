//! What the run and agent pages show, read from the store: each agent's activity (from its
//! committed records, [`crate::agent_activity`]), its task, its branch and what it changed so
//! far (the one "what this merge adds" function, [`MergeAdds`]), its spend.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use muster_agents::runtime::{CostReport, TRANSCRIPT};
use muster_mailbox::{
    AgentRecord, MailboxStore, MessageKind, RequestRecord, RosterEntry, RunRecord, RunStatus, Task,
    TaskStatus,
};

use crate::agent_activity::{self, Activity, AgentState};
use crate::worktree::{Git, MergeAdds};

/// The lead's stream where a team run records its isolation base (see `team/isolation.rs`).
const ISOLATION_STREAM: &str = "isolation";

/// One agent as the run page shows it.
pub struct AgentRow {
    pub entry: RosterEntry,
    pub activity: Activity,
    /// The task it works on (in progress, else the newest it owns).
    pub task: Option<Task>,
    /// Its worktree's branch and what merging its newest checkpoint would add (diffstat).
    pub branch: Option<String>,
    pub diffstat: Option<String>,
    /// Model requests, tokens, US dollars.
    pub spend: (u64, u64, f64),
    /// A person's stop already asked of it, not yet answered (its request id).
    pub stop_pending: Option<String>,
    /// What its model response in progress streamed so far on this host (serve's socket).
    pub streaming: Option<super::watch::Streamed>,
}

/// The diffstats already computed, by (onto, commit): git runs once per pair.
#[derive(Default)]
pub struct DiffstatCache {
    known: Mutex<HashMap<(String, String), Option<String>>>,
}

/// A git object id as the store should hold one: 40 or 64 hex digits. Nothing else reaches
/// git's command line from a page.
pub fn is_object_id(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The integration head a teammate's work would merge onto: the lead's newest checkpoint, else
/// the run's recorded base.
pub async fn integration_head(
    store: &dyn MailboxStore,
    run_id: &str,
    lead_checkpoint: Option<&str>,
) -> Option<String> {
    if let Some(commit) = lead_checkpoint {
        return Some(commit.to_owned());
    }
    let rows = store
        .records(run_id, crate::team::LEAD, ISOLATION_STREAM, 0)
        .await
        .ok()?;
    rows.iter().rev().find_map(|row| {
        (row.body["kind"] == "base")
            .then(|| row.body["commit"].as_str().map(str::to_owned))
            .flatten()
    })
}

/// What merging `commit` onto `onto` adds, as `git diff --stat`; none when either is not an
/// object id or git cannot say.
pub async fn merge_diffstat(
    cache: &DiffstatCache,
    workspace: &str,
    onto: &str,
    commit: &str,
) -> Option<String> {
    if !is_object_id(onto) || !is_object_id(commit) {
        return None;
    }
    let key = (onto.to_owned(), commit.to_owned());
    if let Some(known) = cache
        .known
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
    {
        return known.clone();
    }
    let git = Git::new(workspace);
    let stat = match MergeAdds::of(&git, onto, commit).await {
        Ok(adds) => adds.diffstat(&git).await.ok(),
        Err(_) => None,
    };
    cache
        .known
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, stat.clone());
    stat
}

/// The unified diff merging `commit` onto `onto` adds (the agent page's diff on demand).
pub async fn merge_diff(workspace: &str, onto: &str, commit: &str) -> Option<String> {
    if !is_object_id(onto) || !is_object_id(commit) {
        return None;
    }
    let git = Git::new(workspace);
    let adds = MergeAdds::of(&git, onto, commit).await.ok()?;
    adds.diff(&git).await.ok()
}

/// The inputs of [`agent_rows`] read once per view.
pub struct RunData<'a> {
    pub run: &'a RunRecord,
    pub live: bool,
    pub roster: &'a [RosterEntry],
    pub tasks: &'a [Task],
    pub requests: &'a [RequestRecord],
    /// The catalogue's prices, for requests stored without a cost.
    pub models: &'a BTreeMap<String, muster_config::settings::ModelInfo>,
    pub now: i64,
}

/// Every agent's transcript records, in one read: a run of hundreds of agents is not hundreds
/// of reads.
pub async fn transcripts(
    store: &dyn MailboxStore,
    run_id: &str,
) -> anyhow::Result<HashMap<String, Vec<AgentRecord>>> {
    let mut transcripts: HashMap<String, Vec<AgentRecord>> = HashMap::new();
    for record in store.stream_records(run_id, TRANSCRIPT).await? {
        transcripts
            .entry(record.agent.clone())
            .or_default()
            .push(record);
    }
    Ok(transcripts)
}

/// What the run spent per agent, model and provider, as the summary and `run_finished` report
/// it; `None` (with a warning) when a record does not read, which must not hide the page.
pub fn cost_report(
    project: &super::ServeProject,
    run_id: &str,
    transcripts: &HashMap<String, Vec<AgentRecord>>,
) -> Option<CostReport> {
    let providers = |mode| {
        if mode == muster_config::PermissionMode::Plan {
            project.plan_provider
        } else {
            project.act_provider
        }
    };
    let transcripts = transcripts
        .iter()
        .map(|(agent, records)| (agent.as_str(), records.as_slice()));
    match CostReport::of_transcripts(transcripts, &project.models, &providers) {
        Ok(report) => Some(report),
        Err(error) => {
            tracing::warn!(run = %run_id, %error, "no cost report");
            None
        }
    }
}

/// Every agent of the roster that runs (not `human` or `policy`), with what it is doing.
/// (`transcripts`: from [`transcripts`].)
pub async fn agent_rows(
    store: &dyn MailboxStore,
    cache: &DiffstatCache,
    data: &RunData<'_>,
    mut transcripts: HashMap<String, Vec<AgentRecord>>,
) -> anyhow::Result<Vec<AgentRow>> {
    let mut rows = Vec::new();
    for entry in data.roster {
        if matches!(
            entry.kind,
            muster_mailbox::MemberKind::Human | muster_mailbox::MemberKind::Policy
        ) {
            continue;
        }
        let records = transcripts.remove(&entry.agent).unwrap_or_default();
        let mut activity = agent_activity::read(&records, data.requests, data.live, data.now);
        activity.state = settled(activity.state, data.run.status, data.live);
        let completed = !data.live && data.run.status == RunStatus::Completed;
        if !completed && stopped_on_request(data.requests, &entry.agent) {
            activity.state = AgentState::Stopped;
        }
        let spend = muster_agents::runtime::AgentRuntime::spend_of(&records, data.models)?
            .map(|spend| (spend.turns, spend.tokens, spend.cost_usd))
            .unwrap_or_default();
        rows.push(AgentRow {
            task: task_of(data.tasks, &entry.agent),
            branch: None,
            diffstat: None,
            spend,
            stop_pending: pending_stop(data.requests, &entry.agent),
            streaming: None,
            entry: entry.clone(),
            activity,
        });
    }
    let lead_checkpoint = rows
        .iter()
        .find(|row| row.entry.kind == muster_mailbox::MemberKind::Lead)
        .and_then(|row| row.activity.checkpoint.clone());
    if rows.iter().any(|row| {
        row.entry.kind != muster_mailbox::MemberKind::Lead && row.activity.checkpoint.is_some()
    }) && let Some(onto) =
        integration_head(store, &data.run.id, lead_checkpoint.as_deref()).await
    {
        for row in rows
            .iter_mut()
            .filter(|row| row.entry.kind != muster_mailbox::MemberKind::Lead)
        {
            if let Some(commit) = row.activity.checkpoint.clone() {
                row.branch = Some(format!("muster/{}/{}", data.run.slug, row.entry.agent));
                row.diffstat = merge_diffstat(cache, &data.run.workspace, &onto, &commit).await;
            }
        }
    }
    Ok(rows)
}

/// The state of an agent of a run no process holds: the run's ending says more than the
/// agent's newest record.
fn settled(state: AgentState, run: RunStatus, live: bool) -> AgentState {
    if live {
        return state;
    }
    match (run, state) {
        (_, AgentState::NotStarted | AgentState::WaitingOnDecision) => state,
        (RunStatus::Completed, _) => AgentState::Done,
        (RunStatus::Failed | RunStatus::Budget, AgentState::Idle) => AgentState::Idle,
        (RunStatus::Failed | RunStatus::Budget, _) => AgentState::Failed,
        (_, AgentState::Idle) => AgentState::Idle,
        _ => AgentState::Stopped,
    }
}

/// Whether the agent agreed to a shutdown request (the lead's or a person's).
fn stopped_on_request(requests: &[RequestRecord], agent: &str) -> bool {
    requests.iter().any(|r| {
        r.kind == MessageKind::ShutdownRequest
            && r.recipient == agent
            && r.response
                .as_ref()
                .is_some_and(|response| response.body.approved() == Some(true))
    })
}

/// A person's shutdown request to the agent not yet answered.
pub fn pending_stop(requests: &[RequestRecord], agent: &str) -> Option<String> {
    requests
        .iter()
        .find(|r| {
            r.kind == MessageKind::ShutdownRequest
                && r.recipient == agent
                && r.requester == muster_protocol::Responder::HUMAN
                && r.response.is_none()
        })
        .map(|r| r.request_id.clone())
}

fn task_of(tasks: &[Task], agent: &str) -> Option<Task> {
    let owned = || tasks.iter().filter(|t| t.owner.as_deref() == Some(agent));
    owned()
        .find(|t| t.status == TaskStatus::InProgress)
        .or_else(|| owned().next_back())
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hex_object_ids_reach_git() {
        let table = [
            ("0123456789abcdef0123456789abcdef01234567", true),
            (&"a".repeat(64), true),
            ("--output=/tmp/x", false),
            ("HEAD", false),
            ("0123456789abcdef0123456789abcdef0123456", false),
            ("0123456789abcdef0123456789abcdef0123456g", false),
        ];
        for (text, ok) in table {
            assert_eq!(is_object_id(text), ok, "{text}");
        }
    }

    /// The run's ending decides the state of an agent no process holds.
    #[test]
    fn a_stopped_run_settles_its_agents_states() {
        use AgentState::*;
        let table = [
            (RunStatus::Completed, Thinking, false, Done),
            (RunStatus::Completed, Idle, false, Done),
            (RunStatus::Failed, CallingTool, false, Failed),
            (RunStatus::Failed, Idle, false, Idle),
            (RunStatus::Interrupted, CallingTool, false, Stopped),
            (
                RunStatus::AwaitingDecision,
                WaitingOnDecision,
                false,
                WaitingOnDecision,
            ),
            (RunStatus::Interrupted, NotStarted, false, NotStarted),
            (RunStatus::Running, CallingTool, true, CallingTool),
        ];
        for (run, state, live, expected) in table {
            assert_eq!(settled(state, run, live), expected, "{run:?} {state:?}");
        }
    }
}
