//! `muster demo`: a whole team changes a small real project, offline. The project
//! (`examples/demo`, embedded in the binary) is copied into a directory as a fresh git
//! repository; `muster run` runs its team there with the `script` provider replaying the
//! project's cassette (no key, no network); then a summary says who did what, the mail, the
//! plans and their decisions, the tasks, the diff and the tests.
//!
//! The story the cassette scripts: the lead sends a `Plan` subagent to survey the project and
//! puts two tasks on the board; alice (declared in the team file) claims the first, asks a
//! `Plan` subagent of her own and plans; the lead spawns bob for the second, who plans too.
//! Both plans reach the lead's mailbox as `plan_approval_request`s. The lead's model approves
//! alice's; bob's are decided by the team's written policy, which rejects the first (it would
//! change the shared test runner) with feedback, so bob plans again and is approved. Both edit
//! the code and run the tests; the run ends with exit 0.
//!
//! Every reply the lead's model gives is keyed by the kind and sender of the mail it reacts to
//! (never by the order mail arrives in), so the run and its summary are the same every time.

use muster_protocol::ToolName;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::Context;
use muster_mailbox::{Message, MessageBody, MessageKind, RequestRecord, Task};
use serde_json::Value;
use similar::TextDiff;

use crate::exit::{Exit, ExitError};
use crate::project::Globals;
use crate::project::Project;

/// The goal the team is given.
pub const GOAL: &str =
    "Make slugify collapse repeated dashes, and make titlecase keep small words lowercase.";

/// One file of the embedded project.
struct ProjectFile {
    path: &'static str,
    text: &'static str,
    executable: bool,
}

macro_rules! project_file {
    ($path:literal, $executable:literal) => {
        ProjectFile {
            path: $path,
            text: include_str!(concat!("../../examples/demo/", $path)),
            executable: $executable,
        }
    };
}

/// `examples/demo`, as the binary carries it.
const PROJECT: &[ProjectFile] = &[
    project_file!("README.md", false),
    project_file!("slugify.sh", true),
    project_file!("titlecase.sh", true),
    project_file!("tests/run.sh", true),
    project_file!("tests/slugify.cases", false),
    project_file!("tests/titlecase.cases", false),
    project_file!("muster.team.toml", false),
    project_file!("policy.toml", false),
    project_file!("cassette.jsonl", false),
    project_file!(".muster/settings.toml", false),
    project_file!(".muster/agents/editor.md", false),
];

const CASSETTE: &str = "cassette.jsonl";

/// Runs the demo in `dir` (a new temporary directory when `None`) and prints its summary,
/// whose closing advice runs muster as `muster` (see [`muster_command`]).
pub fn run(global: &Globals, dir: Option<&Path>, muster: &str) -> anyhow::Result<Exit> {
    let started = Instant::now();
    let root = prepare_dir(dir)?;
    copy_project(&root)?;
    let git = init_git(&root);
    // muster wrote the demo's files itself: its run trusts them (as a CI job trusts a
    // reviewed checkout), so the demo's allow rule applies.
    let hashes = muster_config::trust::file_hashes(&root)
        .map_err(|e| anyhow::anyhow!("the demo project's files: {e}"))?;
    let mut command =
        Command::new(std::env::current_exe().context("cannot find the muster binary")?);
    command.arg("-C").arg(&root);
    // `--store` (a server's URL, say) reaches the run and the summary's reading alike.
    if let Some(store) = &global.store {
        command.arg("--store").arg(store);
    }
    let output = command
        .args(["run", "-p", GOAL, "--provider", "script", "--cassette"])
        .arg(root.join(CASSETTE))
        .args(["--output", "stream-json"])
        // The demo is the same on every machine: no user-level file is read.
        .env(crate::loading::NO_USER_FILES, "1")
        .env(
            muster_config::trust::TRUST_HASH_VAR,
            muster_config::trust::project_hash(&hashes),
        )
        .current_dir(&root)
        .stdin(Stdio::null())
        .output()
        .context("cannot start `muster run`")?;
    let events: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect();
    let Some(run_id) = events
        .iter()
        .find_map(|e| e.get("run_id").and_then(Value::as_str))
        .map(str::to_owned)
    else {
        eprintln!("{}", String::from_utf8_lossy(&output.stderr));
        return Err(anyhow::anyhow!(
            "the team run in {} printed no events (exit status {})",
            root.display(),
            output.status
        ));
    };
    let stored = read_store(global, &root, global.store.clone(), &run_id)?;
    let tests = run_tests(&root);
    let summary = Summary {
        root: &root,
        git,
        muster,
        run_id: &run_id,
        events: &events,
        stored: &stored,
        tests: tests.as_ref(),
        cassette: tool_inputs(),
    };
    print!("{}", summary.render());
    let code = events
        .iter()
        .rev()
        .find(|e| e["type"] == "run_finished")
        .and_then(|e| e["exit_code"].as_u64())
        .or_else(|| output.status.code().and_then(|c| u64::try_from(c).ok()))
        .unwrap_or(1);
    if code != 0 {
        eprint!("{}", String::from_utf8_lossy(&output.stderr));
    }
    println!(
        "\nThe demo took {:.1} s. Its exit code is the run's: {code}.",
        started.elapsed().as_secs_f64()
    );
    Ok(Exit::from_code(code))
}

/// The directory to run in: `dir` (created; it must be empty) or a new temporary one.
fn prepare_dir(dir: Option<&Path>) -> anyhow::Result<PathBuf> {
    let Some(dir) = dir else {
        let dir = tempfile::Builder::new()
            .prefix("muster-demo-")
            .tempdir()?
            .keep();
        return Ok(dir);
    };
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let used = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .next()
        .is_some();
    if used {
        return Err(ExitError::new(
            Exit::Usage,
            format!(
                "{} is not empty: the demo copies its project into an empty directory",
                dir.display()
            ),
        )
        .into());
    }
    Ok(std::path::absolute(dir)?)
}

fn copy_project(root: &Path) -> anyhow::Result<()> {
    for file in PROJECT {
        let path = root.join(file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, file.text)
            .with_context(|| format!("cannot write {}", path.display()))?;
        #[cfg(unix)]
        if file.executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    Ok(())
}

/// Makes `root` a git repository with the project as its first commit; false without git.
fn init_git(root: &Path) -> bool {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(root)
            .env("GIT_AUTHOR_NAME", "muster demo")
            .env("GIT_AUTHOR_EMAIL", "demo@muster.invalid")
            .env("GIT_COMMITTER_NAME", "muster demo")
            .env("GIT_COMMITTER_EMAIL", "demo@muster.invalid")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    git(&["init", "-q"])
        && git(&["add", "-A"])
        && git(&[
            "commit",
            "-q",
            "--no-gpg-sign",
            "-m",
            "textkit, as muster demo copied it",
        ])
}

/// What the store holds about the run.
struct Stored {
    /// Reports the demo computed from each teammate's transcript, for a run whose team sent
    /// no `verification_report` mail: `(agent, text)`.
    computed_reports: Vec<(String, String)>,
    messages: Vec<Message>,
    requests: Vec<RequestRecord>,
    tasks: Vec<Task>,
}

fn read_store(
    outer: &Globals,
    root: &Path,
    store: Option<PathBuf>,
    run_id: &str,
) -> anyhow::Result<Stored> {
    let global = Globals {
        directory: Some(root.to_path_buf()),
        store,
        log_level: "warn".into(),
        process: outer.process.clone(),
    };
    let project = Project::locate(&global)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let store = project
            .open_existing_store()
            .await?
            .ok_or_else(|| anyhow::anyhow!("the team run left no store in {}", root.display()))?;
        let messages = store.messages(run_id, None).await?;
        let mut computed_reports = Vec::new();
        if !messages
            .iter()
            .any(|m| m.kind == MessageKind::VerificationReport)
        {
            let mut teammates: Vec<String> = store
                .requests(run_id)
                .await?
                .into_iter()
                .filter(|r| r.kind == MessageKind::PlanApprovalRequest)
                .map(|r| r.requester)
                .collect();
            teammates.sort();
            teammates.dedup();
            for agent in teammates {
                let rows = store
                    .records(run_id, &agent, muster_agents::runtime::TRANSCRIPT, 0)
                    .await?;
                if let Ok(report) = muster_agents::verification::build_report(
                    &agent,
                    rows.iter().map(|row| &row.body),
                    root,
                ) {
                    computed_reports.push((agent, report.render_text()));
                }
            }
        }
        Ok(Stored {
            computed_reports,
            messages,
            requests: store.requests(run_id).await?,
            tasks: store.tasks(run_id).await?,
        })
    })
}

/// `bash tests/run.sh` after the run: its exit code and output (`None` without bash).
struct TestRun {
    code: i32,
    output: String,
}

fn run_tests(root: &Path) -> Option<TestRun> {
    let output = Command::new("bash")
        .arg("tests/run.sh")
        .current_dir(root)
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    Some(TestRun {
        code: output.status.code().unwrap_or(-1),
        output: text,
    })
}

/// Tool inputs of the cassette by tool-use id, to say what each call did.
fn tool_inputs() -> BTreeMap<String, Value> {
    let mut inputs = BTreeMap::new();
    let Some(cassette) = PROJECT.iter().find(|f| f.path == CASSETTE) else {
        return inputs;
    };
    for line in cassette.text.lines() {
        let Ok(entry) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let blocks = entry["reply"]["content"].as_array().cloned();
        for block in blocks.unwrap_or_default() {
            if let Some(id) = block["id"].as_str() {
                inputs.insert(id.to_owned(), block["input"].clone());
            }
        }
    }
    inputs
}

/// Everything the summary is made of.
struct Summary<'a> {
    root: &'a Path,
    git: bool,
    /// How the closing advice runs muster.
    muster: &'a str,
    run_id: &'a str,
    events: &'a [Value],
    stored: &'a Stored,
    tests: Option<&'a TestRun>,
    cassette: BTreeMap<String, Value>,
}

const WIDTH: usize = 96;

impl Summary<'_> {
    fn render(&self) -> String {
        let mut out = String::new();
        let root = self.root.display();
        out.push_str("muster demo: a team of agents changes a small project, offline\n\n");
        out.push_str(&format!(
            "  project  {root}\n           textkit, two bash text filters with tests{}\n",
            if self.git {
                ", as a fresh git repository\n           (each teammate works on its own branch, \
                 in its own worktree)"
            } else {
                " (git was not found: no repository)"
            }
        ));
        out.push_str(&format!("  goal     {GOAL}\n"));
        out.push_str(
            "  model    the `script` provider replays cassette.jsonl: no API key, no network\n",
        );
        out.push_str(&format!(
            "  run      {}, team textkit (muster.team.toml): `muster run -p GOAL --provider \
             script --cassette cassette.jsonl`\n",
            self.run_id
        ));
        self.who_did_what(&mut out);
        self.plans(&mut out);
        self.merges(&mut out);
        self.tasks(&mut out);
        self.mail(&mut out);
        self.verification(&mut out);
        self.diff(&mut out);
        self.tests_and_end(&mut out);
        out
    }

    fn events_of<'e>(&'e self, kind: &'e str) -> impl Iterator<Item = &'e Value> + 'e {
        self.events.iter().filter(move |e| e["type"] == kind)
    }

    /// Agents in a fixed order: the lead, then teammates by name, each followed by its
    /// subagents.
    fn agents(&self) -> Vec<(String, Value)> {
        let mut agents: Vec<(String, Value)> = self
            .events_of("agent_started")
            .filter_map(|e| Some((e["agent"].as_str()?.to_owned(), e.clone())))
            .collect();
        agents.sort_by_key(|(id, _)| {
            let top = id.split('.').next().unwrap_or(id).to_owned();
            (top != crate::team::LEAD, top, id.contains('.'), id.clone())
        });
        agents.dedup_by(|a, b| a.0 == b.0);
        agents
    }

    fn relative(&self, path: &str) -> String {
        Path::new(path)
            .strip_prefix(self.root)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| path.to_owned())
    }

    fn who_did_what(&self, out: &mut String) {
        out.push_str(
            "\nWho did what (each agent's tool calls in order; all were allowed unless marked)\n",
        );
        let spawned: Vec<String> = self
            .tool_calls(crate::team::LEAD)
            .filter(|(tool, _, _)| *tool == ToolName::SpawnTeammate)
            .filter_map(|(_, input, _)| input["name"].as_str().map(str::to_owned))
            .collect();
        for (agent, started) in self.agents() {
            let definition = started["definition"].as_str().unwrap_or("?");
            let mode = started["mode"].as_str().unwrap_or("?");
            let role = if agent == crate::team::LEAD {
                format!("the lead (definition {definition}, mode {mode})")
            } else if let Some((parent, _)) = agent.split_once('.') {
                format!("a {definition} subagent of {parent}, read-only, reports only to {parent}")
            } else {
                let origin = if spawned.contains(&agent) {
                    "spawned by the lead"
                } else {
                    "declared in muster.team.toml"
                };
                let approver = self
                    .events_of("approval_requested")
                    .find(|e| e["agent"] == agent.as_str())
                    .and_then(|e| e["responder"].as_str())
                    .map(|r| format!("; its plans are decided by {r}"))
                    .unwrap_or_default();
                format!("a teammate ({definition}), {origin}; starts in {mode} mode{approver}")
            };
            out.push('\n');
            wrap_after(out, &format!("  {agent:<12} "), &role, 15);
            let mut plans = self
                .events_of("approval_requested")
                .filter(|e| e["agent"] == agent.as_str())
                .filter_map(|e| e["request_id"].as_str());
            for (tool, input, event) in self.tool_calls(&agent) {
                let mut line = describe(&tool, &input);
                if tool == ToolName::ExitPlanMode
                    && let Some(request) = plans.next()
                {
                    line = format!("ExitPlanMode: sends its plan as {request}");
                    if let Some(decision) = self.decision(request) {
                        line.push_str(&format!(" ({decision})"));
                    }
                } else if event["decision"] != "allow" {
                    line.push_str(&format!(
                        " [{}: {}]",
                        event["decision"].as_str().unwrap_or("?"),
                        event["reason"].as_str().unwrap_or("")
                    ));
                } else if event["is_error"] == true {
                    line.push_str(" [the tool reported an error]");
                }
                out.push_str(&format!("                 {line}\n"));
            }
            if let Some(report) = self.report(&agent) {
                wrap(out, &format!("reported: \"{report}\""), 17);
            }
        }
    }

    /// `(tool, input, event)` of an agent's tool calls, in order.
    fn tool_calls<'e>(
        &'e self,
        agent: &'e str,
    ) -> impl Iterator<Item = (String, Value, &'e Value)> + 'e {
        self.events_of("tool_call")
            .filter(move |e| e["agent"] == agent)
            .map(|e| {
                let tool = e["tool"].as_str().unwrap_or("?").to_owned();
                let input = e["tool_use_id"]
                    .as_str()
                    .and_then(|id| self.cassette.get(id))
                    .cloned()
                    .unwrap_or(Value::Null);
                (tool, input, e)
            })
    }

    /// What an agent reported: a teammate's first idle notification, a subagent's last text,
    /// the lead's result.
    fn report(&self, agent: &str) -> Option<String> {
        if agent == crate::team::LEAD {
            return None;
        }
        if agent.contains('.') {
            return self
                .events_of("model_turn")
                .filter(|e| e["agent"] == agent)
                .filter_map(|e| e["text"].as_str())
                .filter(|t| !t.trim().is_empty())
                .last()
                .map(str::to_owned);
        }
        self.stored
            .messages
            .iter()
            .find_map(|m| match m.body.clone() {
                MessageBody::IdleNotification { summary, .. } if m.sender == agent => summary,
                _ => None,
            })
    }

    /// `approved by lead, mode acceptEdits` or `rejected by policy` for a request.
    fn decision(&self, request_id: &str) -> Option<String> {
        self.stored
            .requests
            .iter()
            .find(|r| r.request_id == request_id)
            .map(crate::team::summary::decision)
    }

    fn plans(&self, out: &mut String) {
        out.push_str(
            "\nPlans (each sent to the lead's mailbox as a plan_approval_request; \
             `muster plans` lists them)\n",
        );
        for request in self.requests_of(MessageKind::PlanApprovalRequest) {
            let file = match request.body.clone() {
                MessageBody::PlanApprovalRequest { plan_file, .. } => self.relative(&plan_file),
                _ => "?".into(),
            };
            out.push_str(&format!(
                "\n  {:<13} {:<6} {file}\n",
                request.request_id, request.requester
            ));
            let decision = self
                .decision(&request.request_id)
                .unwrap_or_else(|| "undecided".into());
            out.push_str(&format!("                       {decision}\n"));
            self.feedback_and_rule(out, request);
        }
    }

    /// The stored requests of `kind`, by requester, then in the order each asked.
    fn requests_of(&self, kind: MessageKind) -> Vec<&RequestRecord> {
        let mut requests: Vec<&RequestRecord> = self
            .stored
            .requests
            .iter()
            .filter(|r| r.kind == kind)
            .collect();
        requests.sort_by_key(|r| (r.requester.clone(), number(&r.request_id)));
        requests
    }

    /// A decision's feedback and deciding rule (plans and merges), under its request.
    fn feedback_and_rule(&self, out: &mut String, request: &RequestRecord) {
        let Some(response) = &request.response else {
            return;
        };
        let (feedback, rule) = match response.body.clone() {
            MessageBody::PlanApprovalResponse { feedback, rule, .. }
            | MessageBody::MergeResponse { feedback, rule, .. } => (feedback, rule),
            _ => return,
        };
        if let Some(feedback) = feedback {
            wrap(out, &format!("feedback: \"{feedback}\""), 23);
        }
        if let Some(rule) = rule {
            let rule = rule.replace(&format!("{}/", self.root.display()), "");
            wrap(out, &format!("rule: {rule}"), 23);
        }
    }

    /// Each teammate's branch, checked and merged into the integration branch by decision.
    fn merges(&self, out: &mut String) {
        let merges = self.requests_of(MessageKind::MergeRequest);
        if merges.is_empty() {
            return;
        }
        out.push_str(
            "\nMerges (a teammate's finished branch, checked clean against the integration \
             branch,\nasks to merge with a merge_request, decided like its plans)\n",
        );
        for request in merges {
            let body = request.body.clone();
            let MessageBody::MergeRequest {
                branch, diffstat, ..
            } = body
            else {
                continue;
            };
            out.push_str(&format!(
                "\n  {:<13} {:<6} {branch}\n",
                request.request_id, request.requester
            ));
            let stat = diffstat.lines().last().unwrap_or("").trim().to_owned();
            out.push_str(&format!("                       {stat}\n"));
            let decision = self
                .decision(&request.request_id)
                .unwrap_or_else(|| "undecided".into());
            out.push_str(&format!("                       {decision}\n"));
            self.feedback_and_rule(out, request);
        }
    }

    fn tasks(&self, out: &mut String) {
        out.push_str("\nTasks (the board; `muster tasks`)\n");
        for task in &self.stored.tasks {
            out.push_str(&format!(
                "  #{:<3} {:<40} {:<6} {}\n",
                task.task_id,
                task.subject,
                task.owner.as_deref().unwrap_or("-"),
                task.status.as_str()
            ));
        }
    }

    /// Mail grouped by the teammate it concerns (each group in the order it was sent), so
    /// the listing does not depend on how the teammates' work interleaved.
    fn mail(&self, out: &mut String) {
        out.push_str(&format!(
            "\nMail ({} messages, all kept in the store; `muster inbox --run {}` shows them)\n",
            self.stored.messages.len(),
            self.run_id
        ));
        let mut by_thread: BTreeMap<(bool, String), Vec<&Message>> = BTreeMap::new();
        for message in &self.stored.messages {
            let party = if message.sender == crate::team::LEAD
                || message.sender == muster_mailbox::POLICY
                || message.sender == muster_mailbox::HUMAN
            {
                message.recipient.clone()
            } else {
                message.sender.clone()
            };
            by_thread
                .entry((party == crate::team::LEAD, party))
                .or_default()
                .push(message);
        }
        for messages in by_thread.values_mut() {
            messages.sort_by_key(|m| {
                (
                    phase(&m.kind),
                    number(m.request_id.as_deref().unwrap_or("")),
                    m.seq,
                )
            });
            for message in messages.iter() {
                let line = format!(
                    "{:>6} → {:<6} {:<23} {}",
                    message.sender,
                    message.recipient,
                    message.kind.in_words(),
                    self.mail_detail(message)
                );
                out.push_str(&format!("  {}\n", cut(&line, WIDTH - 2)));
            }
        }
    }

    fn mail_detail(&self, message: &Message) -> String {
        match message.body.clone() {
            MessageBody::TaskAssignment { task_id, .. } => {
                if message.sender == message.recipient {
                    format!("task #{task_id} (claimed from the board)")
                } else {
                    format!("task #{task_id}")
                }
            }
            MessageBody::PlanApprovalRequest { request_id, .. } => {
                format!(
                    "{request_id} (its plan, for {})",
                    message.body.responder().unwrap_or("the lead")
                )
            }
            MessageBody::PlanApprovalResponse {
                request_id,
                approved,
                mode,
                ..
            } => {
                if approved {
                    format!(
                        "{request_id}: approved{}",
                        mode.map(|m| format!(", mode {m}")).unwrap_or_default()
                    )
                } else {
                    format!("{request_id}: rejected, with feedback")
                }
            }
            MessageBody::PermissionRequest {
                request_id, tool, ..
            } => format!("{request_id}: may it run {tool}?"),
            MessageBody::PermissionResponse {
                request_id,
                approved,
                ..
            } => format!(
                "{request_id}: {}",
                if approved { "allowed" } else { "denied" }
            ),
            MessageBody::Question {
                request_id,
                question,
                ..
            } => format!("{request_id}: \"{question}\""),
            MessageBody::MergeRequest {
                request_id, files, ..
            } => format!(
                "{request_id}: may its branch merge? ({} files)",
                files.len()
            ),
            MessageBody::MergeResponse {
                request_id,
                approved,
                ..
            } => format!(
                "{request_id}: {}",
                if approved {
                    "merge approved"
                } else {
                    "merge rejected"
                }
            ),
            MessageBody::Answer { request_id, answer } => format!("{request_id}: \"{answer}\""),
            MessageBody::ShutdownRequest { request_id, .. } => {
                format!("{request_id}: the team's work is done")
            }
            MessageBody::ShutdownResponse {
                request_id,
                approve,
                ..
            } => format!(
                "{request_id}: {}",
                if approve { "agreed" } else { "refused" }
            ),
            MessageBody::IdleNotification { summary, .. } => {
                format!("\"{}\"", summary.unwrap_or_default())
            }
            MessageBody::Text { text, .. } => format!("\"{text}\""),
            MessageBody::VerificationReport { request_id, .. } => {
                format!("for {}", request_id.unwrap_or_else(|| "its work".into()))
            }
            MessageBody::Unknown { kind, .. } => format!("(a {kind} this version does not know)"),
        }
    }

    /// Verification reports: the `verification_report` mail the lead received; for a team
    /// that sends none, reports the demo computes itself with the same module.
    fn verification(&self, out: &mut String) {
        out.push_str("\nVerification (each approved plan checked against what its teammate did)\n");
        let mut reports: Vec<&Message> = self
            .stored
            .messages
            .iter()
            .filter(|m| m.kind == MessageKind::VerificationReport)
            .collect();
        reports.sort_by_key(|m| (m.sender.clone(), m.seq));
        let texts: Vec<String> = if reports.is_empty() {
            if self.stored.computed_reports.is_empty() {
                out.push_str("  (no teammate finished an approved plan)\n");
                return;
            }
            wrap(
                out,
                "This version's team runs send the lead no verification_report mail yet: the demo \
                 built these reports itself, from each teammate's transcript in the store, with \
                 the module team runs will use (muster_agents::verification).",
                2,
            );
            self.stored
                .computed_reports
                .iter()
                .map(|(_, text)| text.clone())
                .collect()
        } else {
            reports
                .iter()
                .map(|message| {
                    let report = match message.body.clone() {
                        MessageBody::VerificationReport { report, .. } => report,
                        _ => message.stored_body(),
                    };
                    let text = muster_agents::verification::VerificationReport::from_json(&report)
                        .map(|r| r.render_text())
                        .unwrap_or_else(|_| report.to_string());
                    format!(
                        "({} → {} by mail) {text}",
                        message.sender, message.recipient
                    )
                })
                .collect()
        };
        for text in texts {
            let text = text.replace(&format!("{}/", self.root.display()), "");
            out.push('\n');
            let mut lines = text.lines();
            if let Some(head) = lines.next() {
                out.push_str(&format!("  {head}\n"));
            }
            for line in lines {
                let indent = 2 + line.len() - line.trim_start().len();
                wrap_after(out, &" ".repeat(indent), line.trim_start(), indent + 4);
            }
        }
    }

    fn diff(&self, out: &mut String) {
        out.push_str(&format!(
            "\nThe diff (the project as copied → as the team left it{})\n\n",
            if self.git {
                "; `git diff` in the project"
            } else {
                ""
            }
        ));
        let mut changed = false;
        let now = project_now(self.root);
        for file in PROJECT {
            let after = now.get(file.path).map(String::as_str);
            if after != Some(file.text) {
                changed = true;
                out.push_str(&unified_diff(file.path, Some(file.text), after));
            }
        }
        for (path, text) in &now {
            if !PROJECT.iter().any(|f| f.path == path) {
                changed = true;
                out.push_str(&unified_diff(path, None, Some(text)));
            }
        }
        if !changed {
            out.push_str("  (no file changed)\n");
        }
    }

    fn tests_and_end(&self, out: &mut String) {
        out.push_str("\nThe tests after the run: bash tests/run.sh\n");
        match self.tests {
            Some(tests) => {
                for line in tests.output.lines() {
                    out.push_str(&format!("  {line}\n"));
                }
                out.push_str(&format!("  exit code {}\n", tests.code));
            }
            None => out.push_str("  (bash was not found: not run)\n"),
        }
        let finished = self.events_of("run_finished").last();
        let status = finished
            .and_then(|e| e["status"].as_str())
            .unwrap_or("unknown");
        let code = finished
            .and_then(|e| e["exit_code"].as_u64())
            .map_or_else(|| "?".to_owned(), |c| c.to_string());
        let root = self.root.display();
        // The run's result fields are flattened into its `run_finished` event.
        let result = finished;
        let delivered = match result.and_then(|r| r["files_changed"].as_u64()) {
            Some(files) => format!(
                "\nThe integration branch's {files} changed files are in the working tree, \
                 uncommitted;\n`git branch` lists each agent's branch."
            ),
            None => result
                .and_then(|r| r["result_branch"].as_str())
                .map(|branch| format!(" The result is on branch {branch}."))
                .unwrap_or_default(),
        };
        let muster = self.muster;
        out.push_str(&format!(
            "\nThe run ended: {status}, exit code {code}.{delivered}\n\nLook closer: `cd {root}`, then \
             `{muster} runs`, `{muster} inbox`, `{muster} plans`, `{muster} tasks`{}.\n",
            if self.git { ", `git diff`" } else { "" }
        ));
        out.push_str(&format!(
            "The same team on a real model, in {root} (`git checkout .` first undoes the \
             scripted changes):\n  ANTHROPIC_API_KEY=… {muster} run -p \"{GOAL}\" --provider \
             anthropic\n  or, with a local OpenAI-compatible server: {muster} run -p \"…\" \
             --provider openai --base-url http://localhost:11434/v1 --model MODEL\n"
        ));
    }
}

/// How a person runs the muster at `exe`: `muster` when that name on `path` (the `PATH`
/// variable) is this very binary (installed), else `exe` itself, quoted for a shell when it
/// needs to be (`cargo run`, a build never installed), so the advice works as printed.
pub fn muster_command(exe: &Path, path: Option<&std::ffi::OsStr>) -> String {
    let same = |candidate: &Path| {
        matches!(
            (candidate.canonicalize(), exe.canonicalize()),
            (Ok(a), Ok(b)) if a == b
        )
    };
    let installed = path
        .map(std::env::split_paths)
        .into_iter()
        .flatten()
        .map(|dir| dir.join("muster"))
        .find(|candidate| candidate.is_file());
    if installed.as_deref().is_some_and(same) {
        return "muster".into();
    }
    let text = exe.display().to_string();
    let plain = text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+,:@".contains(c));
    if plain {
        text
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// The project's files now (outside `.git/` and `.muster/`, except the embedded ones).
fn project_now(root: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(relative) = path.strip_prefix(root) else {
                continue;
            };
            let relative = relative.to_string_lossy().replace('\\', "/");
            if relative == ".git" || relative == ".muster" {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(text) = std::fs::read_to_string(&path) {
                files.insert(relative, text);
            }
        }
    }
    for file in PROJECT.iter().filter(|f| f.path.starts_with(".muster/")) {
        if let Ok(text) = std::fs::read_to_string(root.join(file.path)) {
            files.insert(file.path.to_owned(), text);
        }
    }
    files
}

/// The order of a kind within a teammate's mail: work, plans, asks, reports, shutdown.
fn phase(kind: &MessageKind) -> u8 {
    use MessageKind as K;
    match kind {
        K::TaskAssignment => 0,
        K::PlanApprovalRequest | K::PlanApprovalResponse => 1,
        K::PermissionRequest | K::PermissionResponse | K::Question | K::Answer | K::Text => 2,
        K::IdleNotification => 3,
        K::VerificationReport => 4,
        K::MergeRequest | K::MergeResponse => 5,
        K::ShutdownRequest | K::ShutdownResponse => 6,
        K::Other(_) => 7,
    }
}

/// The trailing number of an id (`plan-bob-2` → 2), for ordering.
fn number(id: &str) -> i64 {
    muster_protocol::RequestId::parse(id).map_or(0, |id| id.number)
}

/// One line for a tool call: the tool and what it was called on.
fn describe(tool: &str, input: &Value) -> String {
    let text = |key: &str| input[key].as_str().unwrap_or("").to_owned();
    use ToolName as T;
    let Some(name) = ToolName::parse(tool) else {
        return tool.to_owned();
    };
    match name {
        T::Read | T::Write | T::Edit | T::MultiEdit => format!("{tool} {}", text("file_path")),
        T::Glob | T::Grep => format!("{tool} {}", text("pattern")),
        T::LS => format!("{tool} {}", text("path")),
        T::Bash => format!("{tool} `{}`", text("command")),
        T::Agent => format!(
            "Agent: starts a {} subagent to \"{}\"",
            text("subagent_type"),
            text("description").to_lowercase()
        ),
        T::TaskCreate => format!("{tool} \"{}\"", text("subject")),
        T::TaskUpdate => {
            let mut changes = Vec::new();
            if let Some(owner) = input["owner"].as_str() {
                changes.push(format!("owner {owner}"));
            }
            if let Some(status) = input["status"].as_str() {
                changes.push(format!("status {status}"));
            }
            format!("TaskUpdate #{}: {}", input["task_id"], changes.join(", "))
        }
        T::SpawnTeammate => format!(
            "SpawnTeammate {} (definition {})",
            text("name"),
            input["agent"].as_str().unwrap_or("general")
        ),
        T::ReviewPlan => format!(
            "ReviewPlan {}: {}",
            text("request_id"),
            if input["approve"] == true {
                match input["mode"].as_str() {
                    Some(mode) => format!("approve, mode {mode}"),
                    None => "approve".into(),
                }
            } else {
                "reject".into()
            }
        ),
        T::ReviewMerge => format!(
            "ReviewMerge {}: {}",
            text("request_id"),
            if input["approve"] == true {
                "approve"
            } else {
                "reject"
            }
        ),
        T::SendMessage => format!("{tool} to {}", text("to")),
        _ => tool.to_owned(),
    }
}

/// Cuts a line to `max` characters.
fn cut(line: &str, max: usize) -> String {
    if line.chars().count() <= max {
        return line.to_owned();
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Appends `text` wrapped at [`WIDTH`], each line indented by `indent` spaces.
fn wrap(out: &mut String, text: &str, indent: usize) {
    wrap_after(out, &" ".repeat(indent), text, indent);
}

/// Appends `text` wrapped at [`WIDTH`]: the first line after `prefix`, the others indented
/// by `indent` spaces.
fn wrap_after(out: &mut String, prefix: &str, text: &str, indent: usize) {
    let mut line = prefix.to_owned();
    let mut empty = true;
    for word in text.split_whitespace() {
        if !empty && line.chars().count() + 1 + word.chars().count() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = " ".repeat(indent);
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    if !empty {
        out.push_str(&line);
        out.push('\n');
    }
}

/// A unified diff of one file (`None`: the file does not exist on that side), three lines
/// of context, computed here so the demo needs no git.
pub fn unified_diff(path: &str, before: Option<&str>, after: Option<&str>) -> String {
    let old_name = before.map_or_else(|| "/dev/null".to_owned(), |_| format!("a/{path}"));
    let new_name = after.map_or_else(|| "/dev/null".to_owned(), |_| format!("b/{path}"));
    // The header is written here rather than by `similar`, which leaves it out when no line
    // differs: the demo names every file whose text changed, even by line ends alone.
    let mut out = format!("--- {old_name}\n+++ {new_name}\n");
    let diff = TextDiff::from_lines(before.unwrap_or_default(), after.unwrap_or_default());
    let mut unified = diff.unified_diff();
    // No `\ No newline at end of file` lines: the demo's diff is read, not applied.
    unified.context_radius(3).missing_newline_hint(false);
    for hunk in unified.iter_hunks() {
        out.push_str(&hunk.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unified_diff_has_context_and_ranges() {
        let before = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let after = "a\nb\nc\nD\ne\nf\ng\nh\ni\n";
        let diff = unified_diff("x", Some(before), Some(after));
        assert_eq!(
            diff,
            "--- a/x\n+++ b/x\n@@ -1,8 +1,9 @@\n a\n b\n c\n-d\n+D\n e\n f\n g\n h\n+i\n"
        );
        let created = unified_diff("y", None, Some("one\n"));
        assert_eq!(created, "--- /dev/null\n+++ b/y\n@@ -0,0 +1 @@\n+one\n");
        // Changes more than six unchanged lines apart are two hunks.
        let before: String = (1..=20).map(|n| format!("{n}\n")).collect();
        let after = before
            .replace("\n2\n", "\ntwo\n")
            .replace("\n18\n", "\neighteen\n");
        let diff = unified_diff("z", Some(&before), Some(&after));
        assert_eq!(
            diff,
            "--- a/z\n+++ b/z\n@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n\
             @@ -15,6 +15,6 @@\n 15\n 16\n 17\n-18\n+eighteen\n 19\n 20\n"
        );
    }

    #[test]
    fn the_advice_names_muster_only_when_path_finds_this_binary() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        let other = dir.path().join("other bin");
        for place in [&bin, &other] {
            std::fs::create_dir_all(place).unwrap();
            std::fs::write(place.join("muster"), "").unwrap();
        }
        let installed = bin.join("muster");
        let built = other.join("muster");
        let path = |dirs: &[&Path]| std::env::join_paths(dirs).unwrap();
        let cases = [
            (&installed, Some(path(&[&bin])), "muster".to_owned()),
            // Another muster earlier on PATH is not this one.
            (
                &installed,
                Some(path(&[&other, &bin])),
                installed.display().to_string(),
            ),
            (&built, None, format!("'{}'", built.display())),
            (
                &built,
                Some(path(&[&bin])),
                format!("'{}'", built.display()),
            ),
        ];
        for (exe, path_var, expected) in cases {
            assert_eq!(
                muster_command(exe, path_var.as_deref()),
                expected,
                "{exe:?} {path_var:?}"
            );
        }
    }

    #[test]
    fn every_embedded_file_is_there_and_the_cassette_parses() {
        assert!(PROJECT.iter().all(|f| !f.text.is_empty()));
        let inputs = tool_inputs();
        assert!(inputs.len() > 20, "{}", inputs.len());
    }
}
