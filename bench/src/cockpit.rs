//! `muster bench cockpit`: how long `muster serve` takes to render a large run's first view.
//!
//! A SQLite store (synchronous `normal`) gets one team run of `agents` teammates, each with a
//! short transcript (started, a prompt, a tool call and its result, a finish) and a task, and
//! `mails` mails spread over them. The figure is the time of what `GET /runs/{run}` does: the
//! store reads and the render (HTTP and the browser left out), first and median of `repeats`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use muster_agents::model::{ContentBlock, Message, Role};
use muster_agents::runtime::{AgentKind, Record};
use muster_config::PermissionMode;
use muster_mailbox::{
    AutoGate, MailboxStore, MemberKind, MessageBody, MessageKind, NewMessage, NewRecord, NewRun,
    NewTask, RosterEntry, SqliteStore, StoreOptions, SyncMode,
};
use serde::Serialize;
use serde_json::json;

use muster::serve::ServeProject;
use muster::serve::run_page::MAIL_SHOWN;

const BASH: &str = muster_protocol::ToolName::Bash.as_str();

/// The first view's figure must stay under this (the target; the bench never fails).
pub const TARGET: Duration = Duration::from_millis(300);

#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub agents: usize,
    pub mails: usize,
    /// The first render after the store was filled (nothing cached).
    pub first_ms: f64,
    pub median_ms: f64,
    pub page_bytes: usize,
    pub under_target: bool,
    /// Of the view: reading the mail it shows (the newest [`MAIL_SHOWN`] with the count before
    /// them, and the verification reports).
    pub mail_read_ms: f64,
    /// Reading every mail of the run instead, as the page did before it read only what it
    /// shows: the same store, side by side.
    pub all_mail_read_ms: f64,
}

/// Fills a store under `dir` and times the run page.
pub async fn run(dir: &Path, agents: usize, mails: usize, repeats: usize) -> anyhow::Result<Row> {
    let path = dir.join("store.db");
    let options = StoreOptions {
        sync: SyncMode::Normal,
        ..StoreOptions::default()
    };
    let store: Arc<dyn MailboxStore> = Arc::new(SqliteStore::open(&path, options)?);
    let run_id = fill(store.as_ref(), dir, agents, mails).await?;
    let project = ServeProject {
        store: store.clone(),
        store_path: Some(path),
        muster_dir: dir.join(".muster"),
        runs_dir: dir.join(".muster/runs"),
        models: Default::default(),
        plan_provider: muster_config::settings::ProviderKind::Anthropic,
        act_provider: muster_config::settings::ProviderKind::Anthropic,
        project_id: String::new(),
    };
    let mut times = Vec::with_capacity(repeats.max(1));
    let mut page_bytes = 0;
    for _ in 0..repeats.max(1) {
        let started = Instant::now();
        let page = muster::serve::run_page_html(&project, &run_id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("the bench's run is not in its store"))?;
        times.push(started.elapsed());
        page_bytes = page.len();
    }
    let started = Instant::now();
    store.newest_messages(&run_id, MAIL_SHOWN).await?;
    store
        .messages_of_kind(&run_id, &MessageKind::VerificationReport)
        .await?;
    let mail_read = started.elapsed();
    let started = Instant::now();
    store.messages(&run_id, None).await?;
    let all_mail_read = started.elapsed();
    let first = times[0];
    times.sort();
    let median = times[times.len() / 2];
    Ok(Row {
        agents,
        mails,
        first_ms: first.as_secs_f64() * 1000.0,
        median_ms: median.as_secs_f64() * 1000.0,
        page_bytes,
        under_target: first < TARGET,
        mail_read_ms: mail_read.as_secs_f64() * 1000.0,
        all_mail_read_ms: all_mail_read.as_secs_f64() * 1000.0,
    })
}

async fn fill(
    store: &dyn MailboxStore,
    dir: &Path,
    agents: usize,
    mails: usize,
) -> anyhow::Result<String> {
    let run = store
        .create_run(NewRun {
            id: "bench-cockpit".into(),
            slug: "bench-cockpit".into(),
            team: Some("bench".into()),
            workspace: dir.display().to_string(),
            batch_line_id: None,
            auto_gate: AutoGate::default(),
            launch_options: json!({}),
            project_id: None,
        })
        .await?;
    let names: Vec<String> = (0..agents).map(|i| format!("mate{i}")).collect();
    store
        .add_member(
            &run.id,
            RosterEntry {
                agent: muster::team::LEAD.into(),
                kind: MemberKind::Lead,
                definition: Some("general".into()),
                parent: None,
            },
        )
        .await?;
    for name in &names {
        store
            .add_member(
                &run.id,
                RosterEntry {
                    agent: name.clone(),
                    kind: MemberKind::Teammate,
                    definition: Some("general".into()),
                    parent: None,
                },
            )
            .await?;
        let task = store
            .create_task(NewTask {
                run_id: run.id.clone(),
                subject: format!("Work of {name}"),
                description: "bench".into(),
                blocked_by: Vec::new(),
                created_by: muster::team::LEAD.into(),
                idempotency_key: None,
            })
            .await?;
        store.claim_task(&run.id, task.task_id, name).await?;
        store.append_records(&run.id, transcript(name)?).await?;
    }
    for index in 0..mails {
        let name = &names[index % names.len().max(1)];
        let (sender, recipient) = if index % 2 == 0 {
            (muster::team::LEAD, name.as_str())
        } else {
            (name.as_str(), muster::team::LEAD)
        };
        store
            .send(NewMessage {
                run_id: run.id.clone(),
                sender: sender.to_owned(),
                recipient: recipient.to_owned(),
                body: MessageBody::Text {
                    text: format!("mail {index}: how is it going?"),
                    summary: None,
                },
                idempotency_key: None,
            })
            .await?;
    }
    Ok(run.id)
}

/// A short finished turn: started, the prompt, a `Bash` call and its result, the finish.
fn transcript(agent: &str) -> anyhow::Result<Vec<NewRecord>> {
    let message = |role, content| Record::Message {
        message: Message { role, content },
        turn: Some(1),
        model: None,
        mode: PermissionMode::Default,
        stop_reason: None,
        usage: None,
        cost_usd: None,
    };
    let records = [
        Record::Started {
            definition: "general".into(),
            agent_kind: AgentKind::Teammate {
                lead: muster::team::LEAD.into(),
            },
            mode: PermissionMode::Default,
            pre_plan_mode: None,
            plan_file: None,
            system: "You are a teammate.".into(),
            tools: vec![BASH.into()],
            mcp_tools: Vec::new(),
            model_limits: Default::default(),
            endpoint: None,
        },
        message(Role::User, vec![ContentBlock::text("Do the work.")]),
        message(
            Role::Assistant,
            vec![ContentBlock::ToolUse {
                id: "t1".into(),
                name: BASH.into(),
                input: json!({"command": "cargo test"}),
            }],
        ),
        Record::ToolCall {
            tool_use_id: "t1".into(),
            tool: BASH.into(),
            decision: "allow".into(),
            reason: String::new(),
            content: "test result: ok".into(),
            is_error: false,
        },
        Record::Finished {
            result: "Done.".into(),
        },
    ];
    records
        .iter()
        .map(|record| Ok(record.to_new(agent)?))
        .collect()
}

/// The row as a line of text.
pub fn render(row: &Row) -> String {
    format!(
        "run page of {} agents and {} mails: first view {:.1} ms, median {:.1} ms (reading the mail it shows {:.1} ms; every mail {:.1} ms), {} bytes ({} the {} ms target)\n",
        row.agents,
        row.mails,
        row.first_ms,
        row.median_ms,
        row.mail_read_ms,
        row.all_mail_read_ms,
        row.page_bytes,
        if row.under_target { "under" } else { "OVER" },
        TARGET.as_millis()
    )
}
