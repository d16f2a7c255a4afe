//! `muster run --continue [RUN] -p …`: a finished single-agent run takes a new prompt with its
//! context kept, through the binary against `muster-fake-llm`; killed at either side of the
//! transition's one commit, a resume reaches the ending an uncut continue would have.

use std::path::Path;
use std::process::Output;

use muster_fake_llm::{Block, ScriptEntry};
use serde_json::Value;

use super::common::{fake, lines, muster, project, stderr};

/// `--output json`'s one result line.
fn result_of(output: &Output) -> Value {
    lines(output)
        .pop()
        .unwrap_or_else(|| panic!("no result line: {}", stderr(output)))
}

fn run_id_of(output: &Output) -> String {
    result_of(output)["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no run id: {:?}", result_of(output)))
        .to_owned()
}

/// The text of every user turn of the last request the model received.
fn user_texts(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect()
}

async fn killed_at(dir: &Path, failpoint: &str, args: &[&str]) {
    let mut command = super::common::command(dir, args);
    command.env("MUSTER_FAILPOINT", failpoint);
    let output = super::common::output(command).await;
    assert_eq!(
        output.status.code(),
        None,
        "not killed at {failpoint}: {}",
        stderr(&output)
    );
}

#[tokio::test]
async fn a_completed_run_continues_with_its_context_and_survives_a_kill_on_either_side() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("First answer.")]),
        ScriptEntry::reply("main", 2, vec![Block::text("Second answer.")]),
    ])
    .await;
    let base = fake.base_url();
    let json = ["--output", "json", "--base-url", &base];
    let first = muster(
        dir.path(),
        &[&["run", "-p", "First question."][..], &json].concat(),
    )
    .await;
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let run_id = run_id_of(&first);
    assert_eq!(result_of(&first)["result"], "First answer.");

    // Killed before the new turn is committed: the continue never happened, and a resume
    // ends the run as it had ended, without asking the model.
    let cont = [
        &["run", "--continue", &run_id, "-p", "Second question."][..],
        &json,
    ]
    .concat();
    killed_at(dir.path(), "continue_resumed", &cont).await;
    let resumed = muster(dir.path(), &[&["resume", &run_id][..], &json].concat()).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert_eq!(result_of(&resumed)["result"], "First answer.");
    assert_eq!(
        fake.requests().len(),
        1,
        "a resume of a finished turn asks nothing"
    );

    // Killed right after the new turn's commit: a resume answers it.
    killed_at(dir.path(), "continued", &cont).await;
    let resumed = muster(dir.path(), &[&["resume", &run_id][..], &json].concat()).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert_eq!(result_of(&resumed)["result"], "Second answer.");
    assert_eq!(run_id_of(&resumed), run_id);

    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "one model request per question");
    let asked = user_texts(&requests[1].body);
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked[0].contains("First question."), "{asked:?}");
    assert!(asked[1].contains("Second question."), "{asked:?}");
    let last = &requests[1].body["messages"];
    assert!(
        last.to_string().contains("First answer."),
        "the first answer is in the context: {last}"
    );
}

#[tokio::test]
async fn continue_without_a_run_takes_the_newest_and_refuses_what_it_cannot_continue() {
    let dir = project(&[]);
    let fake = fake(vec![
        ScriptEntry::reply("main", 1, vec![Block::text("Older.")]).attempt(1),
        ScriptEntry::reply("main", 1, vec![Block::text("Newer.")]).attempt(2),
        ScriptEntry::reply("main", 2, vec![Block::text("Continued.")]),
    ])
    .await;
    let base = fake.base_url();
    let json = ["--output", "json", "--base-url", &base];
    let older = muster(dir.path(), &[&["run", "-p", "a"][..], &json].concat()).await;
    assert_eq!(older.status.code(), Some(0), "{}", stderr(&older));
    let newer = muster(dir.path(), &[&["run", "-p", "b"][..], &json].concat()).await;
    assert_eq!(newer.status.code(), Some(0), "{}", stderr(&newer));

    let cont = muster(
        dir.path(),
        &[&["run", "--continue", "-p", "c"][..], &json].concat(),
    )
    .await;
    assert_eq!(cont.status.code(), Some(0), "{}", stderr(&cont));
    assert_eq!(run_id_of(&cont), run_id_of(&newer));
    assert_eq!(result_of(&cont)["result"], "Continued.");

    let unknown = muster(dir.path(), &["run", "--continue", "nope", "-p", "c"]).await;
    assert_eq!(unknown.status.code(), Some(2), "{}", stderr(&unknown));
    assert!(
        stderr(&unknown).contains("no run \"nope\""),
        "{}",
        stderr(&unknown)
    );

    let with_team = muster(
        dir.path(),
        &["run", "--continue", "--team", "t.toml", "-p", "c"],
    )
    .await;
    assert_eq!(with_team.status.code(), Some(2), "{}", stderr(&with_team));
    assert!(
        stderr(&with_team).contains("--team"),
        "{}",
        stderr(&with_team)
    );
}

#[tokio::test]
async fn a_run_awaiting_a_decision_is_refused_and_pointed_at_resume() {
    let dir = project(&[]);
    let plan = "## Goal\nG.\n## Steps\n1. s\n## Files\nnone\n## Tests\nnone\n## Risks\nnone\n";
    let fake = fake(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::tool_use(
            "ExitPlanMode",
            serde_json::json!({"plan": plan}),
        )],
    )])
    .await;
    let base = fake.base_url();
    let json = ["--output", "json", "--base-url", &base];
    let waiting = muster(
        dir.path(),
        &[
            &["run", "-p", "Plan.", "--permission-mode", "plan"][..],
            &json,
        ]
        .concat(),
    )
    .await;
    assert_eq!(waiting.status.code(), Some(5), "{}", stderr(&waiting));
    let run_id = run_id_of(&waiting);
    let refused = muster(dir.path(), &["run", "--continue", &run_id, "-p", "more"]).await;
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    let text = stderr(&refused);
    assert!(text.contains("awaiting_decision"), "{text}");
    assert!(text.contains(&format!("muster resume {run_id}")), "{text}");
}

/// Issue 33: a run reads its settings files once, at its start, and stores them: a
/// `.claude/settings.local.json` the agent writes during the run (untracked, so it would count
/// as the user's own) gains nothing when the run is continued — its `additionalDirectories`
/// does not open a directory outside the workspace.
#[tokio::test]
async fn settings_an_agent_writes_during_a_run_are_not_read_when_it_continues() {
    let dir = project(&[]);
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("x.txt");
    let settings = serde_json::json!({"permissions": {"additionalDirectories": [outside.path()]}});
    let fake = fake(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![super::common::tool(
                "Bash",
                serde_json::json!({"command": format!(
                    "mkdir -p .claude && printf '%s' '{settings}' > .claude/settings.local.json"
                )}),
            )],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Wrote it.")]),
        ScriptEntry::reply(
            "main",
            3,
            vec![super::common::tool(
                "Write",
                serde_json::json!({"file_path": target, "content": "escaped\n"}),
            )],
        ),
        ScriptEntry::reply("main", 4, vec![Block::text("Done.")]),
    ])
    .await;
    let base = fake.base_url();
    let json = [
        "--output",
        "json",
        "--base-url",
        &base,
        "--permission-mode",
        "bypassPermissions",
    ];
    let first = muster(dir.path(), &[&["run", "-p", "Set up."][..], &json].concat()).await;
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    assert!(dir.path().join(".claude/settings.local.json").exists());
    let run_id = run_id_of(&first);
    let cont = muster(
        dir.path(),
        &[
            &["run", "--continue", &run_id, "-p", "Write outside."][..],
            &json[..4],
        ]
        .concat(),
    )
    .await;
    assert_eq!(cont.status.code(), Some(0), "{}", stderr(&cont));
    assert!(!target.exists(), "the agent's own settings file was read");
    let last = fake
        .requests()
        .into_iter()
        .rfind(|r| r.agent.as_deref() == Some("main"))
        .unwrap();
    let said = last.body["messages"].to_string();
    assert!(said.contains("outside the workspace"), "{said}");
}

/// A team run's continuation: a completed run (its result applied to the user's tree) takes a
/// new prompt for its lead; the teammate that was shut down at the end is kept and woken by
/// the lead's mail; its worktree starts again from the user's tree as it is now (with the
/// person's edit made after the first run), so its new work merges and applies alone.
mod team {
    use std::path::Path;
    use std::process::Output;

    use muster_fake_llm::{FakeLlmHandle, ScriptEntry};
    use serde_json::{Value, json};

    use super::super::common::{command, fake, lines, muster, output, stderr, tool};
    use super::super::worktree_cli::{any_turn, entry, git, lead_merges, read, repo, team};
    use super::killed_at;

    /// The first run: the lead puts one task on the board, alice writes a.txt, the lead
    /// approves its merge, and the result is applied to the user's tree.
    async fn first_run(root: &Path) -> (String, u64) {
        let fake = fake(vec![
            ScriptEntry::reply(
                "lead",
                1,
                vec![tool(
                    "TaskCreate",
                    json!({"subject": "a", "description": "Write a.txt."}),
                )],
            ),
            any_turn("lead", "Waiting for the team."),
            lead_merges("alice", &["merge-alice-1"]),
            ScriptEntry::reply(
                "alice",
                1,
                vec![tool(
                    "Write",
                    json!({"file_path": "a.txt", "content": "a\n"}),
                )],
            ),
            any_turn("alice", "Wrote a.txt."),
        ])
        .await;
        let out = muster(
            root,
            &[
                "run",
                "-p",
                "Build it.",
                "--base-url",
                &fake.base_url(),
                "--output",
                "stream-json",
            ],
        )
        .await;
        let end = finished(&out);
        assert_eq!(end["status"], "completed", "{end:#}\n{}", stderr(&out));
        assert_eq!(read(root, "a.txt").as_deref(), Some("a\n"));
        let lead_turns = fake
            .requests()
            .iter()
            .filter(|r| r.agent.as_deref() == Some("lead"))
            .filter_map(|r| r.turn)
            .max()
            .unwrap();
        (end["run_id"].as_str().unwrap().to_owned(), lead_turns)
    }

    /// The person's edits after the first run: their own file, and the team's result.
    fn person_edits(root: &Path) {
        std::fs::write(root.join("README.md"), "hello\nmy edit\n").unwrap();
        std::fs::write(root.join("a.txt"), "a\nmine\n").unwrap();
    }

    /// The continuation's model: the lead (at its next turn) mails alice new work, alice
    /// writes b.txt, the lead approves the merge.
    async fn second_model(lead_turn: u64) -> FakeLlmHandle {
        fake(vec![
            ScriptEntry::reply(
                "lead",
                lead_turn,
                vec![tool(
                    "SendMessage",
                    json!({"to": "alice", "message": "Now write b.txt."}),
                )],
            ),
            any_turn("lead", "Waiting for alice."),
            // Its own tool_use id: a repeated id is the same call, answered as it was first.
            entry(
                json!({"agent": "lead", "when": {"mail_type": "merge_request", "from": "alice"},
                "reply": {"content": [{"type": "tool_use", "id": "toolu_merge_b",
                    "name": "ReviewMerge",
                    "input": {"request_id": "merge-alice-2", "approve": true}}],
                    "stop_reason": "tool_use"}}),
            ),
            entry(
                json!({"agent": "alice", "when": {"mail_type": "text", "from": "lead"},
                "reply": {"content": [{"type": "tool_use", "id": "toolu_b", "name": "Write",
                    "input": {"file_path": "b.txt", "content": "b\n"}}],
                    "stop_reason": "tool_use"}}),
            ),
            any_turn("alice", "Wrote b.txt."),
        ])
        .await
    }

    fn finished(output: &Output) -> Value {
        let last = lines(output).pop().unwrap_or_default();
        assert_eq!(last["type"], "run_finished", "{}", stderr(output));
        last
    }

    fn continue_args<'a>(run_id: &'a str, base: &'a str) -> Vec<&'a str> {
        vec![
            "run",
            "--continue",
            run_id,
            "-p",
            "Add b.txt.",
            "--base-url",
            base,
            "--output",
            "stream-json",
        ]
    }

    /// What an uncut continuation ends with: b.txt merged and applied on its own (the
    /// fresh base holds a.txt and the person's edit), alice woken with her context.
    fn assert_continued(root: &Path, end: &Value, fake: &FakeLlmHandle) {
        let asked: Vec<String> = fake
            .requests()
            .iter()
            .map(|r| {
                let newest = r.body["messages"]
                    .as_array()
                    .and_then(|m| m.last())
                    .map(|m| m["content"].to_string())
                    .unwrap_or_default();
                format!(
                    "{:?} {:?} entry {:?}: {newest:.300}",
                    r.agent, r.turn, r.entry
                )
            })
            .collect();
        assert_eq!(end["status"], "completed", "{end:#}\n{asked:#?}");
        assert_eq!(end["exit_code"], 0, "{end:#}");
        assert_eq!(end["files_changed"], 1, "only b.txt is new: {end:#}");
        assert_eq!(read(root, "b.txt").as_deref(), Some("b\n"));
        assert_eq!(
            read(root, "a.txt").as_deref(),
            Some("a\nmine\n"),
            "the person's edit of the team's result is kept (never applied over)"
        );
        assert_eq!(
            read(root, "README.md").as_deref(),
            Some("hello\nmy edit\n"),
            "the person's edit after the first run is kept"
        );
        // Nothing was committed on the user's branch.
        assert_eq!(git(root, &["rev-list", "--count", "HEAD"]).trim(), "1");
        let alice: Vec<_> = fake
            .requests()
            .into_iter()
            .filter(|r| r.agent.as_deref() == Some("alice"))
            .collect();
        let first = alice.first().expect("alice was never woken");
        assert_eq!(first.turn, Some(3), "alice keeps her turn count");
        let context = first.body["messages"].to_string();
        assert!(
            context.contains("Wrote a.txt."),
            "alice keeps her context: {context}"
        );
        let lead = fake
            .requests()
            .into_iter()
            .find(|r| r.agent.as_deref() == Some("lead"))
            .unwrap();
        let said = lead.body["messages"].to_string();
        assert!(said.contains("Add b.txt."), "{said}");
        assert!(said.contains("alice"), "the lead is told its team: {said}");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_completed_team_run_continues_with_its_teammate_and_a_fresh_base() {
        let dir = repo(&team("lead", &["alice"]), &[]);
        let root = dir.path();
        let (run_id, lead_turns) = first_run(root).await;
        person_edits(root);
        let fake = second_model(lead_turns + 1).await;
        let base = fake.base_url();
        let out = output(command(root, &continue_args(&run_id, &base))).await;
        let end = finished(&out);
        assert_eq!(end["run_id"], run_id.as_str());
        assert_continued(root, &end, &fake);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_team_continue_killed_on_either_side_of_its_commit_resumes_to_the_same_end() {
        let dir = repo(&team("lead", &["alice"]), &[]);
        let root = dir.path();
        let (run_id, lead_turns) = first_run(root).await;
        person_edits(root);
        let fake = second_model(lead_turns + 1).await;
        let base = fake.base_url();
        let args = continue_args(&run_id, &base);
        let json = ["--output", "stream-json"];

        // Killed before the commit: the continue never happened; a resume ends the run as
        // it had ended, asking no model.
        killed_at(root, "team_continue_resumed", &args).await;
        let resumed = muster(root, &[&["resume", &run_id][..], &json].concat()).await;
        let end = finished(&resumed);
        assert_eq!(end["status"], "completed", "{end:#}\n{}", stderr(&resumed));
        assert!(fake.requests().is_empty(), "{:?}", fake.requests());
        assert_eq!(read(root, "b.txt"), None);
        assert_eq!(
            read(root, "a.txt").as_deref(),
            Some("a\nmine\n"),
            "a resume does not apply the result over the person's edit again"
        );

        // Killed right after it: a resume carries the continuation on from the store.
        killed_at(root, "team_continued", &args).await;
        let resumed = muster(root, &[&["resume", &run_id][..], &json].concat()).await;
        let end = finished(&resumed);
        assert_eq!(end["run_id"], run_id.as_str());
        assert_continued(root, &end, &fake);
    }
}

/// `muster interrupt RUN` from another terminal ends the live run's running turn; the run
/// stays live, waiting, and `muster run --continue RUN -p …` hands it the next prompt.
pub(super) mod interrupt {
    use std::process::Stdio;

    use muster_fake_llm::{Block, FakeLlmHandle, Fault, ScriptEntry};
    use serde_json::Value;
    use tokio::io::{AsyncBufReadExt, BufReader};
    use tokio::sync::mpsc;

    use super::super::common::{GUARD, command, fake, muster, project, stderr};

    /// A run's process with its stdout events and stderr lines read as they come.
    pub(in super::super) struct Live {
        child: tokio::process::Child,
        stdout: mpsc::UnboundedReceiver<String>,
        stderr: mpsc::UnboundedReceiver<String>,
    }

    fn lines_of(
        stream: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    ) -> mpsc::UnboundedReceiver<String> {
        let (send, receive) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stream).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        receive
    }

    impl Live {
        pub(in super::super) fn spawn(mut command: tokio::process::Command) -> Live {
            let mut child = command
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            Live {
                stdout: lines_of(child.stdout.take().unwrap()),
                stderr: lines_of(child.stderr.take().unwrap()),
                child,
            }
        }

        pub(in super::super) async fn next_event(&mut self) -> Option<Value> {
            let line = tokio::time::timeout(GUARD, self.stdout.recv())
                .await
                .expect("guard timeout")?;
            Some(serde_json::from_str(&line).unwrap())
        }

        /// Waits for the stderr line containing `text`.
        pub(in super::super) async fn said(&mut self, text: &str) {
            loop {
                let line = tokio::time::timeout(GUARD, self.stderr.recv())
                    .await
                    .expect("guard timeout")
                    .unwrap_or_else(|| panic!("the process ended before saying {text:?}"));
                if line.contains(text) {
                    return;
                }
            }
        }

        /// Reads to the end: the exit code and the last event.
        pub(in super::super) async fn finish(&mut self) -> (Option<i32>, Value) {
            let mut last = Value::Null;
            while let Some(event) = self.next_event().await {
                last = event;
            }
            let status = tokio::time::timeout(GUARD, self.child.wait())
                .await
                .expect("guard timeout")
                .unwrap();
            (status.code(), last)
        }
    }

    /// The first request is held mid-turn (it is interrupted); the one after the next prompt,
    /// turn 1 again (only a committed response takes a turn index), answers.
    pub(in super::super) async fn model(agent: &str) -> FakeLlmHandle {
        fake(vec![
            ScriptEntry::reply(agent, 1, vec![Block::text("Never shown.")])
                .attempt(1)
                .fault(Fault {
                    hold: Some("held".into()),
                    ..Fault::default()
                }),
            ScriptEntry::reply(agent, 1, vec![Block::text("Second answer.")]).attempt(2),
        ])
        .await
    }

    /// Interrupts the held turn of live run `run_id` from another process.
    pub(in super::super) async fn interrupt(
        dir: &std::path::Path,
        fake: &FakeLlmHandle,
        run_id: &str,
    ) {
        tokio::time::timeout(GUARD, fake.gate_reached("held", 1))
            .await
            .expect("the turn never reached the model");
        let asked = muster(dir, &["interrupt", run_id]).await;
        assert_eq!(asked.status.code(), Some(0), "{}", stderr(&asked));
        assert_eq!(
            stderr(&asked).lines().last(),
            Some(
                format!(
                    "muster: asked run {run_id} to interrupt its turn; give it the next prompt \
                     with `muster run --continue {run_id} -p …`"
                )
                .as_str()
            ),
            "{}",
            stderr(&asked)
        );
    }

    /// Hands the waiting live run its next prompt, then reads the run to its end.
    pub(in super::super) async fn next_prompt_and_end(
        dir: &std::path::Path,
        fake: &FakeLlmHandle,
        live: &mut Live,
        run_id: &str,
    ) {
        live.said("waits for its next prompt").await;
        let handed = muster(
            dir,
            &["run", "--continue", run_id, "-p", "Second question."],
        )
        .await;
        assert_eq!(handed.status.code(), Some(0), "{}", stderr(&handed));
        assert!(stderr(&handed).contains("handed"), "{}", stderr(&handed));
        let (code, last) = live.finish().await;
        assert_eq!(code, Some(0), "{last:#}");
        assert_eq!(last["type"], "run_finished");
        assert_eq!(last["status"], "completed");
        assert_eq!(last["result"], "Second answer.");
        assert_eq!(last["run_id"], run_id);
        let requests = fake.requests();
        assert_eq!(requests.len(), 2, "the held request and the answer");
        let said = requests[1].body["messages"].to_string();
        assert_eq!(requests[0].agent, requests[1].agent);
        assert!(said.contains("First question."), "{said}");
        assert!(said.contains("Second question."), "{said}");
        assert!(said.contains("interrupted"), "the model is told: {said}");
    }

    pub(in super::super) fn run_args(base: &str) -> Vec<&str> {
        vec![
            "run",
            "-p",
            "First question.",
            "--output",
            "stream-json",
            "--base-url",
            base,
        ]
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn an_interrupt_from_another_terminal_ends_the_turn_and_the_live_run_takes_the_next_prompt()
     {
        let dir = project(&[]);
        let fake = model("main").await;
        let base = fake.base_url();
        let mut live = Live::spawn(command(dir.path(), &run_args(&base)));
        let first = live.next_event().await.expect("no event");
        let run_id = first["run_id"].as_str().unwrap().to_owned();

        // A prompt for a live run that is working is refused, with the way on.
        tokio::time::timeout(GUARD, fake.gate_reached("held", 1))
            .await
            .unwrap();
        let busy = muster(dir.path(), &["run", "--continue", &run_id, "-p", "x"]).await;
        assert_eq!(busy.status.code(), Some(1), "{}", stderr(&busy));
        assert!(
            stderr(&busy).contains(&format!("muster interrupt {run_id}")),
            "{}",
            stderr(&busy)
        );

        interrupt(dir.path(), &fake, &run_id).await;
        next_prompt_and_end(dir.path(), &fake, &mut live, &run_id).await;

        // Not live any more: nothing to interrupt.
        let gone = muster(dir.path(), &["interrupt", &run_id]).await;
        assert_eq!(gone.status.code(), Some(1), "{}", stderr(&gone));
        assert!(stderr(&gone).contains("not live"), "{}", stderr(&gone));
    }

    /// Killed right after the interrupt's commit (the turn's `turn_interrupted`), the run is
    /// resumed: the resumed process waits for the next prompt as the uncut one did, and ends
    /// the same.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_run_killed_at_the_interrupts_commit_resumes_waiting_for_its_next_prompt() {
        let dir = project(&[]);
        let fake = model("main").await;
        let base = fake.base_url();
        let mut cut = command(dir.path(), &run_args(&base));
        cut.env("MUSTER_FAILPOINT", "turn_interrupted:main");
        let mut live = Live::spawn(cut);
        let first = live.next_event().await.expect("no event");
        let run_id = first["run_id"].as_str().unwrap().to_owned();
        interrupt(dir.path(), &fake, &run_id).await;
        let (code, _) = live.finish().await;
        assert_eq!(code, None, "not killed at the interrupt's commit");

        let mut resumed = Live::spawn(command(
            dir.path(),
            &["resume", &run_id, "--output", "stream-json"],
        ));
        next_prompt_and_end(dir.path(), &fake, &mut resumed, &run_id).await;
    }
}

/// A team run: `muster interrupt` ends the lead's turn, the run (and its idle teammate) stays
/// live, and the handed prompt is the lead's next turn.
#[tokio::test(flavor = "multi_thread")]
async fn an_interrupt_ends_a_team_leads_turn_and_the_live_team_takes_the_next_prompt() {
    use interrupt::{Live, interrupt, model, next_prompt_and_end, run_args};
    let dir = super::common::project(&[(
        "muster.team.toml",
        "name = \"greeters\"\nisolation = \"shared\"\n\n[[teammates]]\nname = \"alice\"\n",
    )]);
    let fake = model("lead").await;
    let base = fake.base_url();
    let mut live = Live::spawn(super::common::command(dir.path(), &run_args(&base)));
    let first = live.next_event().await.expect("no event");
    let run_id = first["run_id"].as_str().unwrap().to_owned();
    interrupt(dir.path(), &fake, &run_id).await;
    next_prompt_and_end(dir.path(), &fake, &mut live, &run_id).await;
}

/// `interrupt_turn` in a team run reaches every agent whose turn is running: the lead's and
/// each teammate's turn end, each recorded; the run stays live and takes the next prompt.
mod team_interrupt {
    use muster_fake_llm::{Block, FakeLlmHandle, Fault, ScriptEntry};
    use serde_json::{Value, json};

    use super::super::common::{
        GUARD, command, fake, muster, open_store, project, stderr, tool, transcript,
    };
    use super::super::worktree_cli::any_turn;
    use super::interrupt::{Live, run_args};

    const TEAM: (&str, &str) = (
        "muster.team.toml",
        "name = \"counters\"\nisolation = \"shared\"\n\n[[teammates]]\nname = \"alice\"\n",
    );

    /// An answer held before its first byte until the test opens gate `gate` (never).
    fn held(agent: &str, turn: u64, gate: &str) -> ScriptEntry {
        ScriptEntry::reply(agent, turn, vec![Block::text("Never shown.")])
            .attempt(1)
            .fault(Fault {
                hold: Some(gate.into()),
                ..Fault::default()
            })
    }

    fn send_to_alice(turn: u64, message: &str) -> ScriptEntry {
        ScriptEntry::reply(
            "lead",
            turn,
            vec![tool(
                "SendMessage",
                json!({"to": "alice", "message": message}),
            )],
        )
    }

    /// How many `turn_interrupted` records `agent`'s transcript holds.
    async fn interrupted_turns(dir: &std::path::Path, run_id: &str, agent: &str) -> usize {
        let store = open_store(dir);
        transcript(store.as_ref(), run_id, agent)
            .await
            .iter()
            .filter(|record| record["type"] == "turn_interrupted")
            .count()
    }

    /// The notices of an interrupted turn alice sent the lead.
    async fn interrupted_notices(dir: &std::path::Path, run_id: &str) -> usize {
        let store = open_store(dir);
        store
            .messages(run_id, Some("lead"))
            .await
            .unwrap()
            .into_iter()
            .filter(|m| {
                m.sender == "alice"
                    && matches!(&m.body, muster_mailbox::MessageBody::IdleNotification { reason, .. } if reason == "interrupted")
            })
            .count()
    }

    async fn model_turn(live: &mut Live, agent: &str, turn: u64) {
        loop {
            let event = live.next_event().await.expect("the run ended first");
            if event["type"] == "model_turn" && event["agent"] == agent && event["turn"] == turn {
                return;
            }
        }
    }

    async fn interrupt(dir: &std::path::Path, run_id: &str) {
        let asked = muster(dir, &["interrupt", run_id]).await;
        assert_eq!(asked.status.code(), Some(0), "{}", stderr(&asked));
    }

    /// The lead mails alice and waits for the answer while alice works: one interrupt ends
    /// both turns, each recorded; the lead waits for the next prompt, alice waits idle and
    /// tells the lead, and the handed prompt ends the run.
    #[tokio::test(flavor = "multi_thread")]
    async fn an_interrupt_ends_the_running_turn_of_the_lead_and_of_each_teammate() {
        let dir = project(&[TEAM]);
        let fake = fake(vec![
            send_to_alice(1, "Count the files."),
            held("lead", 2, "lead-held"),
            any_turn("lead", "Second answer."),
            held("alice", 1, "alice-held"),
            any_turn("alice", "Counted."),
        ])
        .await;
        let base = fake.base_url();
        let mut live = Live::spawn(command(dir.path(), &run_args(&base)));
        let first = live.next_event().await.expect("no event");
        let run_id = first["run_id"].as_str().unwrap().to_owned();
        for gate in ["lead-held", "alice-held"] {
            tokio::time::timeout(GUARD, fake.gate_reached(gate, 1))
                .await
                .expect("a turn never reached the model");
        }
        interrupt(dir.path(), &run_id).await;
        live.said("waits for its next prompt").await;
        let handed = muster(
            dir.path(),
            &["run", "--continue", &run_id, "-p", "Second question."],
        )
        .await;
        assert_eq!(handed.status.code(), Some(0), "{}", stderr(&handed));
        let (code, last) = live.finish().await;
        assert_eq!(code, Some(0), "{last:#}");
        assert_eq!(last["status"], "completed", "{last:#}");
        assert_eq!(last["result"], "Second answer.");

        assert_eq!(interrupted_turns(dir.path(), &run_id, "lead").await, 1);
        assert_eq!(interrupted_turns(dir.path(), &run_id, "alice").await, 1);
        assert_eq!(interrupted_notices(dir.path(), &run_id).await, 1);
        let alice: Vec<_> = fake
            .requests()
            .into_iter()
            .filter(|r| r.agent.as_deref() == Some("alice"))
            .collect();
        assert_eq!(alice.len(), 1, "alice waits idle: no mail woke her again");
    }

    /// The model of a run whose teammate alone works when the interrupt comes: the lead,
    /// told alice was interrupted, mails her to go on, and ends when she is done.
    async fn teammate_alone_model() -> FakeLlmHandle {
        fake(vec![
            send_to_alice(1, "Count the files."),
            ScriptEntry::reply("lead", 2, vec![Block::text("Waiting for alice.")]),
            send_to_alice(3, "Go on."),
            any_turn("lead", "Done."),
            held("alice", 1, "alice-held"),
            any_turn("alice", "Counted."),
        ])
        .await
    }

    /// Starts the run, waits until the lead's turn has ended and alice's is held, and
    /// interrupts it.
    async fn interrupt_alice_alone(
        dir: &std::path::Path,
        fake: &FakeLlmHandle,
        failpoint: Option<&str>,
    ) -> (Live, String) {
        let base = fake.base_url();
        let mut run = command(dir, &run_args(&base));
        if let Some(failpoint) = failpoint {
            run.env("MUSTER_FAILPOINT", failpoint);
        }
        let mut live = Live::spawn(run);
        let first = live.next_event().await.expect("no event");
        let run_id = first["run_id"].as_str().unwrap().to_owned();
        // The lead's answer is committed: its turn has no model request or call left to stop.
        model_turn(&mut live, "lead", 2).await;
        tokio::time::timeout(GUARD, fake.gate_reached("alice-held", 1))
            .await
            .expect("alice's turn never reached the model");
        interrupt(dir, &run_id).await;
        (live, run_id)
    }

    /// What the run ends with, cut or not: alice's turn interrupted once, the lead told once,
    /// alice woken by the lead's mail to count, the run completed.
    async fn assert_teammate_alone_end(
        dir: &std::path::Path,
        fake: &FakeLlmHandle,
        run_id: &str,
        last: &Value,
    ) {
        assert_eq!(last["status"], "completed", "{last:#}");
        assert_eq!(last["result"], "Done.", "{last:#}");
        assert_eq!(interrupted_turns(dir, run_id, "lead").await, 0);
        assert_eq!(interrupted_turns(dir, run_id, "alice").await, 1);
        assert_eq!(interrupted_notices(dir, run_id).await, 1);
        let alice: Vec<_> = fake
            .requests()
            .into_iter()
            .filter(|r| r.agent.as_deref() == Some("alice"))
            .collect();
        assert_eq!(
            alice.len(),
            2,
            "the held request, then the one after the lead's mail"
        );
        let said = alice[1].body["messages"].to_string();
        assert!(
            said.contains("interrupted your turn"),
            "alice is told: {said}"
        );
        assert!(said.contains("Go on."), "{said}");
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn an_interrupt_ends_a_working_teammates_turn_while_the_lead_waits() {
        let dir = project(&[TEAM]);
        let fake = teammate_alone_model().await;
        let (mut live, run_id) = interrupt_alice_alone(dir.path(), &fake, None).await;
        let (code, last) = live.finish().await;
        assert_eq!(code, Some(0), "{last:#}");
        assert_teammate_alone_end(dir.path(), &fake, &run_id, &last).await;
    }

    /// Killed right after alice's `turn_interrupted` commit (before the lead is told), the
    /// resumed run tells the lead once and ends as the uncut one does.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_team_run_killed_at_a_teammates_interrupt_commit_resumes_to_the_same_end() {
        let dir = project(&[TEAM]);
        let fake = teammate_alone_model().await;
        let (mut live, run_id) =
            interrupt_alice_alone(dir.path(), &fake, Some("turn_interrupted:alice")).await;
        let (code, _) = live.finish().await;
        assert_eq!(code, None, "not killed at alice's interrupt commit");
        assert_eq!(interrupted_turns(dir.path(), &run_id, "alice").await, 1);
        assert_eq!(interrupted_notices(dir.path(), &run_id).await, 0);

        let mut resumed = Live::spawn(command(
            dir.path(),
            &["resume", &run_id, "--output", "stream-json"],
        ));
        let (code, last) = resumed.finish().await;
        assert_eq!(code, Some(0), "{last:#}");
        assert_teammate_alone_end(dir.path(), &fake, &run_id, &last).await;
    }
}
