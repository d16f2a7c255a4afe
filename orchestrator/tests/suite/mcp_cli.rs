//! MCP servers end to end, through the binary with a scripted model: over stdio against a
//! server built with the official Python SDK (`mcp` on PyPI, installed by `scripts/test`), and
//! over streamable HTTP against one built with rmcp, served on loopback by the test.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use muster_fake_llm::{Block, FakeLlm, ScriptEntry};
use serde_json::{Value, json};

use super::common::{
    filesystem_server, lines, muster, open_store, project, stderr, stdout, transcript,
};

/// The Python with the `mcp` package: `MUSTER_TEST_MCP_PYTHON` (set by `scripts/test`), else
/// `python3`. Without the package the test fails saying how to get it, never skips.
fn python() -> String {
    let python = std::env::var("MUSTER_TEST_MCP_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = std::process::Command::new(&python)
        .args(["-c", "import mcp.server.mcpserver"])
        .output();
    match probe {
        Ok(output) if output.status.success() => python,
        _ => panic!(
            "the MCP tests need Python with the `mcp` package (2.x): run `scripts/test`, which \
             installs it, or set MUSTER_TEST_MCP_PYTHON to such a python"
        ),
    }
}

fn server_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mcp_notes_server.py")
}

/// A project with the Python `notes` server in `.mcp.json`, `local` extra `[mcp]` lines in the
/// project-local settings; the user trusted the project (a `.mcp.json` server starts only in
/// a trusted project, as `muster trust` pinned it).
fn notes_project(local: &str) -> tempfile::TempDir {
    let dir = project(&[("notes.txt", "alpha one\nbeta two\nalpha three\n")]);
    let mcp = json!({"mcpServers": {"notes": {
        "command": python(),
        "args": [server_script()],
    }}});
    std::fs::write(dir.path().join(".mcp.json"), mcp.to_string()).unwrap();
    std::fs::write(
        dir.path().join(".muster/settings.local.toml"),
        format!("[mcp]\n{local}"),
    )
    .unwrap();
    super::common::trust_blocking(dir.path());
    dir
}

fn call(tool: &str, input: Value) -> Block {
    Block::tool_use(tool, input)
}

async fn run(dir: &Path, base: &str, mode: &str) -> std::process::Output {
    muster(
        dir,
        &[
            "run",
            "-p",
            "Work.",
            "--permission-mode",
            mode,
            "--base-url",
            base,
            "--output",
            "stream-json",
        ],
    )
    .await
}

/// The main agent's stored tool results, in order.
async fn tool_results(dir: &Path, events: &[Value]) -> (Vec<Value>, Vec<Value>) {
    let run_id = events[0]["run_id"].as_str().unwrap();
    let store = open_store(dir);
    let records = transcript(store.as_ref(), run_id, "main").await;
    let calls = records
        .iter()
        .filter(|r| r["type"] == "tool_call")
        .cloned()
        .collect();
    (records, calls)
}

/// Plan mode over stdio: the trusted server's read-only, closed-world tool runs (in the
/// agent's workspace, its long output capped); the tool it does not mark read-only, the one
/// that is read-only but open-world (no `openWorldHint`) and the one with no hints are denied
/// and never run. The tools, with the server's schemas, reach the model and the agent's record.
#[tokio::test(flavor = "multi_thread")]
async fn plan_mode_allows_a_trusted_read_only_mcp_tool_and_denies_the_rest() {
    let dir = notes_project("max_output_bytes = 1000\n");
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![call("mcp__notes__search", json!({"query": "alpha"}))],
        ),
        ScriptEntry::reply(
            "main",
            2,
            vec![call("mcp__notes__publish", json!({"text": "leak"}))],
        ),
        ScriptEntry::reply("main", 3, vec![call("mcp__notes__dump", json!({}))]),
        ScriptEntry::reply(
            "main",
            4,
            vec![call(
                "mcp__notes__fetch",
                json!({"url": "http://example.test"}),
            )],
        ),
        ScriptEntry::reply("main", 5, vec![call("mcp__notes__crash", json!({}))]),
        ScriptEntry::reply("main", 6, vec![Block::text("Done.")]),
    ])
    .await
    .unwrap();
    let output = run(dir.path(), &fake.base_url(), "plan").await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let events = lines(&output);
    let (records, calls) = tool_results(dir.path(), &events).await;
    assert_eq!(calls.len(), 5, "{calls:#?}");

    assert_eq!(calls[0]["decision"], "allow", "{:?}", calls[0]);
    let found = calls[0]["content"].as_str().unwrap();
    let workspace = std::fs::canonicalize(dir.path()).unwrap();
    assert!(found.starts_with("2 hit(s) for 'alpha'"), "{found}");
    assert!(
        found.contains(&workspace.display().to_string()),
        "the server did not run in the agent's workspace: {found}"
    );

    assert_eq!(calls[1]["decision"], "deny", "{:?}", calls[1]);
    let reason = calls[1]["reason"].as_str().unwrap();
    assert!(
        reason.contains("plan mode") && reason.contains("readOnlyHint"),
        "{reason}"
    );
    assert!(
        !dir.path().join("published.txt").exists(),
        "a denied tool ran"
    );
    assert_eq!(calls[3]["decision"], "deny", "{:?}", calls[3]);
    let reason = calls[3]["reason"].as_str().unwrap();
    assert!(reason.contains("openWorldHint: false"), "{reason}");
    assert!(
        !dir.path().join("fetched.txt").exists(),
        "an open-world tool ran in plan mode"
    );
    assert_eq!(calls[4]["decision"], "deny", "{:?}", calls[4]);
    let reason = calls[4]["reason"].as_str().unwrap();
    assert!(reason.contains("neither"), "{reason}");

    let dumped = calls[2]["content"].as_str().unwrap();
    assert!(
        dumped.contains("[output cut: 1000 of 300000 bytes shown (mcp.max_output_bytes)]"),
        "{}",
        &dumped[dumped.len().saturating_sub(200)..]
    );

    let stream: Vec<&Value> = events.iter().filter(|e| e["type"] == "tool_call").collect();
    assert_eq!(stream.len(), 5);
    assert_eq!(stream[1]["decision"], "deny");

    let started = &records[0];
    assert_eq!(started["type"], "started");
    let stored: Vec<&str> = started["mcp_tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["model_name"].as_str().unwrap())
        .collect();
    assert_eq!(
        stored,
        [
            "mcp__notes__search",
            "mcp__notes__publish",
            "mcp__notes__dump",
            "mcp__notes__fetch",
            "mcp__notes__crash",
            "mcp__notes__hang",
            "mcp__notes__kill_client",
            "mcp__notes__grow",
        ]
    );
    assert_eq!(started["mcp_tools"][0]["annotations"]["readOnlyHint"], true);

    let first = &fake.requests()[0].body;
    let offered = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["name"] == "mcp__notes__search")
        .expect("the MCP tool was not offered to the model");
    assert_eq!(
        offered["input_schema"]["properties"]["query"]["type"],
        "string"
    );
}

/// `muster check` starts the enabled server to list its tools and decides by the mode table.
#[tokio::test(flavor = "multi_thread")]
async fn check_decides_mcp_tools_by_the_mode_table() {
    let dir = notes_project("");
    let check = |mode: &'static str, tool: &'static str| {
        let dir = dir.path().to_path_buf();
        async move {
            muster(
                &dir,
                &[
                    "check",
                    "--json",
                    "--permission-mode",
                    mode,
                    tool,
                    "{\"query\": \"a\"}",
                ],
            )
            .await
        }
    };
    let cases = [
        ("plan", "mcp__notes__search", 0, "allow"),
        ("plan", "mcp__notes__publish", 1, "deny"),
        ("default", "mcp__notes__search", 0, "allow"),
        ("default", "mcp__notes__publish", 1, "ask"),
        ("dontAsk", "mcp__notes__publish", 1, "deny"),
        ("bypassPermissions", "mcp__notes__publish", 0, "allow"),
        ("bypassPermissions", "mcp__notes__missing", 1, "deny"),
    ];
    for (mode, tool, code, decision) in cases {
        let output = check(mode, tool).await;
        assert_eq!(
            output.status.code(),
            Some(code),
            "{mode} {tool}: {}",
            stderr(&output)
        );
        let verdict: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
        assert_eq!(verdict["decision"], decision, "{mode} {tool}: {verdict}");
        if tool.ends_with("missing") {
            let reason = verdict["reason"].as_str().unwrap();
            assert!(reason.contains("lists no tool `missing`"), "{reason}");
            assert!(reason.contains("search"), "{reason}");
        }
    }
}

/// A server that crashes in the middle of a call: the call is an error result, the server's
/// other tools answer with errors from then on, and the run goes on to its end.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_crashes_mid_call_leaves_the_run_going() {
    let dir = notes_project("");
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply("main", 1, vec![call("mcp__notes__crash", json!({}))]),
        ScriptEntry::reply(
            "main",
            2,
            vec![call("mcp__notes__search", json!({"query": "a"}))],
        ),
        ScriptEntry::reply("main", 3, vec![Block::text("Carried on.")]),
    ])
    .await
    .unwrap();
    let output = run(dir.path(), &fake.base_url(), "bypassPermissions").await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let events = lines(&output);
    let (_, calls) = tool_results(dir.path(), &events).await;
    assert_eq!(calls.len(), 2, "{calls:#?}");
    for result in &calls {
        assert_eq!(result["is_error"], true, "{result:?}");
        let content = result["content"].as_str().unwrap();
        assert!(content.contains("MCP server `notes`"), "{content}");
        assert!(!content.contains("Transport ["), "{content}");
    }
    let finished = events.last().unwrap();
    assert_eq!(finished["type"], "run_finished");
    assert_eq!(finished["exit_code"], 0);
}

/// A repository's `.mcp.json` alone starts nothing; `config show` says which servers are
/// enabled and why. `muster trust` pins each project server (`.mcp.json` and this project's
/// entry in `~/.claude.json`); one whose template changes afterwards does not start, while
/// the others do. Claude Code's approvals are shown, not taken as trust.
#[tokio::test(flavor = "multi_thread")]
async fn config_show_lists_each_server_as_enabled_or_not_and_why() {
    let dir = notes_project("");
    let mcp = json!({"mcpServers": {
        "notes": {"command": "python3", "args": ["server.py"]},
        "old": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
    }});
    std::fs::write(dir.path().join(".mcp.json"), mcp.to_string()).unwrap();
    // `HOME` is the project directory in these tests: this is `~/.claude.json`.
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let claude = |args: &[&str]| {
        json!({"projects": {root.display().to_string(): {
            "mcpServers": {"stranger": {"command": "sh", "args": args}},
            "enabledMcpjsonServers": ["notes"],
        }}})
        .to_string()
    };
    std::fs::write(dir.path().join(".claude.json"), claude(&["-c", "true"])).unwrap();
    // The file changed since the project was trusted: no server of it is enabled.
    let output = muster(dir.path(), &["config", "show"]).await;
    let text = stdout(&output);
    assert!(
        text.contains(
            "# mcp server notes (.mcp.json, stdio `python3`): not enabled: the project is not trusted"
        ),
        "{text}"
    );
    assert!(
        text.contains("approved in Claude Code (by name only, not trust)"),
        "{text}"
    );
    let trusted = muster(dir.path(), &["trust"]).await;
    assert!(
        stdout(&trusted).contains(
            "pins MCP server stranger (~/.claude.json (this project's entry)): sh -c true"
        ),
        "{}",
        stdout(&trusted)
    );
    let output = muster(dir.path(), &["config", "show"]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("# mcp server notes (.mcp.json, stdio `python3`): enabled: trusted with `muster trust`, its template pinned"),
        "{text}"
    );
    assert!(
        text.contains(
            "# mcp server stranger (~/.claude.json (this project's entry), stdio `sh`): enabled"
        ),
        "{text}"
    );
    assert!(
        stderr(&output).contains("MCP server `old`"),
        "{}",
        stderr(&output)
    );
    // The local entry's template changes after trust: that server alone stops being trusted.
    std::fs::write(
        dir.path().join(".claude.json"),
        claude(&["-c", "touch started"]),
    )
    .unwrap();
    let output = muster(dir.path(), &["config", "show"]).await;
    let text = stdout(&output);
    assert!(
        text.contains("# mcp server stranger (~/.claude.json (this project's entry), stdio `sh`): not enabled: changed since you trusted the project"),
        "{text}"
    );
    assert!(
        text.contains("# mcp server notes (.mcp.json, stdio `python3`): enabled"),
        "{text}"
    );

    let fake = FakeLlm::start(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::text("Hi.")],
    )])
    .await
    .unwrap();
    let output = run(dir.path(), &fake.base_url(), "default").await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("MCP server `stranger`")
            && stderr(&output).contains("changed since"),
        "{}",
        stderr(&output)
    );
    assert!(
        !dir.path().join("started").exists(),
        "a server changed since trust was started"
    );
}

/// A small streamable HTTP MCP server built with rmcp: `lookup` (read-only) echoes its key
/// and the `x-team` header it was sent; `file` (not read-only) says it filed.
#[derive(Clone)]
struct Tracker;

impl rmcp::ServerHandler for Tracker {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::InitializeResult::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_tools()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        let schema = |field: &str| {
            let schema = json!({"type": "object", "properties": {field: {"type": "string"}}});
            Arc::new(schema.as_object().unwrap().clone())
        };
        let lookup = rmcp::model::Tool::new("lookup", "Look an issue up.", schema("key"))
            .with_annotations(
                rmcp::model::ToolAnnotations::new()
                    .read_only(true)
                    .open_world(false),
            );
        let file = rmcp::model::Tool::new("file", "File an issue.", schema("title"));
        Ok(rmcp::model::ListToolsResult::with_all_items(vec![
            lookup, file,
        ]))
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        let team = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.headers.get("x-team"))
            .and_then(|value| value.to_str().ok())
            .unwrap_or("none")
            .to_owned();
        let argument = |name: &str| {
            request
                .arguments
                .as_ref()
                .and_then(|arguments| arguments.get(name))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let text = match request.name.as_ref() {
            "lookup" => format!("issue {} is open (team {team})", argument("key")),
            "file" => format!("filed {}", argument("title")),
            other => {
                return Err(rmcp::ErrorData::invalid_params(
                    format!("no tool {other}"),
                    None,
                ));
            }
        };
        Ok(
            rmcp::model::CallToolResult::success(vec![rmcp::model::ContentBlock::text(text)])
                .into(),
        )
    }
}

/// Serves [`Tracker`] on loopback; the URL of its endpoint.
async fn serve_tracker() -> String {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let service = StreamableHttpService::new(
        || Ok(Tracker),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{address}/mcp")
}

/// Streamable HTTP against the rmcp server: headers from `.mcp.json` are sent; in `default`
/// mode the trusted read-only tool runs and the other asks, which with no one to ask is a
/// deny; in `acceptEdits` an allow rule lets it run.
#[tokio::test(flavor = "multi_thread")]
async fn streamable_http_tools_run_through_the_permission_engine() {
    let url = serve_tracker().await;
    let dir = project(&[]);
    let mcp = json!({"mcpServers": {"tracker": {
        "type": "http", "url": url, "headers": {"X-Team": "core"},
    }}});
    std::fs::write(dir.path().join(".mcp.json"), mcp.to_string()).unwrap();
    std::fs::write(dir.path().join(".muster/settings.local.toml"), "[mcp]\n").unwrap();
    super::common::trust(dir.path()).await;
    let script = || {
        vec![
            ScriptEntry::reply(
                "main",
                1,
                vec![call("mcp__tracker__lookup", json!({"key": "MU-7"}))],
            ),
            ScriptEntry::reply(
                "main",
                2,
                vec![call("mcp__tracker__file", json!({"title": "bug"}))],
            ),
            ScriptEntry::reply("main", 3, vec![Block::text("Done.")]),
        ]
    };
    let fake = FakeLlm::start(script()).await.unwrap();
    let output = run(dir.path(), &fake.base_url(), "default").await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let (_, calls) = tool_results(dir.path(), &lines(&output)).await;
    assert_eq!(calls[0]["decision"], "allow", "{:?}", calls[0]);
    assert_eq!(calls[0]["content"], "issue MU-7 is open (team core)");
    assert_ne!(calls[1]["decision"], "allow", "{:?}", calls[1]);
    assert!(
        calls[1]["reason"]
            .as_str()
            .unwrap()
            .contains("needs approval"),
        "{:?}",
        calls[1]
    );

    std::fs::write(
        dir.path().join(".muster/settings.toml"),
        "[permissions]\nallow = [\"mcp__tracker__file\"]\n",
    )
    .unwrap();
    super::common::trust(dir.path()).await;
    let fake = FakeLlm::start(script()).await.unwrap();
    let output = run(dir.path(), &fake.base_url(), "acceptEdits").await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let (_, calls) = tool_results(dir.path(), &lines(&output)).await;
    assert_eq!(calls[1]["decision"], "allow", "{:?}", calls[1]);
    assert_eq!(calls[1]["content"], "filed bug");
}

/// muster killed in the middle of an MCP call (the server kills it): the call's
/// `tool_started` was committed, so the resumed agent gets the interrupted result for it,
/// offers the stored tool list again on a restarted server, and runs to its end.
#[tokio::test(flavor = "multi_thread")]
async fn a_crash_mid_call_resumes_with_the_interrupted_result_and_the_stored_tools() {
    // The server kills muster itself: the sandbox's signal scope would refuse that.
    let dir = notes_project("[sandbox]\nmode = \"off\"\n");
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply("main", 1, vec![call("mcp__notes__kill_client", json!({}))]),
        ScriptEntry::reply(
            "main",
            2,
            vec![call("mcp__notes__search", json!({"query": "beta"}))],
        ),
        ScriptEntry::reply("main", 3, vec![Block::text("Recovered.")]),
    ])
    .await
    .unwrap();
    let output = run(dir.path(), &fake.base_url(), "bypassPermissions").await;
    assert_eq!(
        output.status.code(),
        None,
        "muster was not killed: {}",
        stderr(&output)
    );
    let events = lines(&output);

    let resumed = muster(dir.path(), &["resume", "--base-url", &fake.base_url()]).await;
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    let (records, calls) = tool_results(dir.path(), &events).await;
    let started = records
        .iter()
        .filter(|r| r["type"] == "tool_started")
        .count();
    assert_eq!(
        started, 2,
        "each MCP call commits tool_started first: {records:#?}"
    );
    assert_eq!(calls.len(), 2, "{calls:#?}");
    assert_eq!(calls[0]["tool"], "mcp__notes__kill_client");
    assert_eq!(calls[0]["is_error"], true);
    assert!(
        calls[0]["content"]
            .as_str()
            .unwrap()
            .contains("interrupted by a crash"),
        "{:?}",
        calls[0]
    );
    assert_eq!(calls[1]["is_error"], false, "{:?}", calls[1]);
    assert!(
        calls[1]["content"]
            .as_str()
            .unwrap()
            .starts_with("1 hit(s) for 'beta'"),
        "{:?}",
        calls[1]
    );
    let requests = fake.requests();
    let names = |index: usize| -> Vec<Value> {
        requests[index].body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|tool| tool["name"].clone())
            .collect()
    };
    assert_eq!(requests.len(), 3);
    assert_eq!(
        names(0),
        names(1),
        "the resumed agent offers the stored list"
    );
    assert!(names(1).contains(&json!("mcp__notes__search")));
}

/// A server that never answers `initialize` and one whose command does not exist: each is a
/// warning naming it, and the run goes on without them.
#[tokio::test(flavor = "multi_thread")]
async fn servers_that_never_start_are_warnings_and_the_run_goes_on() {
    let dir = project(&[]);
    let mcp = json!({"mcpServers": {
        "hang": {"command": "sleep", "args": ["30"]},
        "missing": {"command": "/nonexistent/mcp-server"},
    }});
    std::fs::write(dir.path().join(".mcp.json"), mcp.to_string()).unwrap();
    std::fs::write(
        dir.path().join(".muster/settings.local.toml"),
        "[mcp]\nstartup_timeout_ms = 300\n",
    )
    .unwrap();
    super::common::trust(dir.path()).await;
    let fake = FakeLlm::start(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::text("Fine.")],
    )])
    .await
    .unwrap();
    let output = run(dir.path(), &fake.base_url(), "default").await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let log = stderr(&output);
    assert!(
        log.contains("MCP server `hang` did not start and initialize within 300 ms"),
        "{log}"
    );
    assert!(
        log.contains("MCP server `missing` did not start")
            && log.contains("cannot run `/nonexistent/mcp-server`"),
        "{log}"
    );
    let offered = fake.requests()[0].body["tools"].as_array().unwrap().len();
    assert!(offered > 0);
    assert!(
        !fake.requests()[0].body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|tool| tool["name"].as_str().unwrap().starts_with("mcp__"))
    );
}

/// A call the server never answers: an error result after `mcp.call_timeout_ms`, and the
/// server's other tools still answer.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_that_hangs_times_out_and_the_run_goes_on() {
    let dir = notes_project("call_timeout_ms = 500\n");
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply("main", 1, vec![call("mcp__notes__hang", json!({}))]),
        ScriptEntry::reply(
            "main",
            2,
            vec![call("mcp__notes__search", json!({"query": "two"}))],
        ),
        ScriptEntry::reply("main", 3, vec![Block::text("Done.")]),
    ])
    .await
    .unwrap();
    let output = run(dir.path(), &fake.base_url(), "bypassPermissions").await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let (_, calls) = tool_results(dir.path(), &lines(&output)).await;
    assert_eq!(calls.len(), 2, "{calls:#?}");
    assert_eq!(calls[0]["is_error"], true);
    assert!(
        calls[0]["content"]
            .as_str()
            .unwrap()
            .contains("did not answer `hang` within 500 ms (mcp.call_timeout_ms)"),
        "{:?}",
        calls[0]
    );
    assert_eq!(calls[1]["is_error"], false, "{:?}", calls[1]);
    assert!(
        calls[1]["content"]
            .as_str()
            .unwrap()
            .starts_with("1 hit(s)")
    );
}

/// The Python SDK's streamable-HTTP server (`tests/data/mcp_http_server.py`) on loopback,
/// killed when dropped.
struct PythonHttpServer {
    _child: tokio::process::Child,
    url: String,
}

async fn python_http_server() -> PythonHttpServer {
    use tokio::io::AsyncBufReadExt;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/mcp_http_server.py");
    let mut child = tokio::process::Command::new(python())
        .arg(script)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(super::common::GUARD, lines.next_line())
        .await
        .expect("guard timeout")
        .unwrap()
        .expect("the server printed no URL");
    PythonHttpServer { _child: child, url }
}

/// An `"type": "http"` server of the official Python SDK: `muster check` reaches it, and a
/// run calls its tool on every provider (the model's client is not the only HTTP client that
/// needs TLS set up: the `script` provider has none).
#[tokio::test(flavor = "multi_thread")]
async fn an_http_server_of_the_python_sdk_answers_check_and_runs_on_every_provider() {
    let server = python_http_server().await;
    let dir = project(&[]);
    let mcp = json!({"mcpServers": {"remote": {"type": "http", "url": server.url}}});
    std::fs::write(dir.path().join(".mcp.json"), mcp.to_string()).unwrap();
    std::fs::write(dir.path().join(".muster/settings.local.toml"), "[mcp]\n").unwrap();
    super::common::trust(dir.path()).await;
    let check = muster(
        dir.path(),
        &["check", "--json", "mcp__remote__ok", "{\"word\": \"x\"}"],
    )
    .await;
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
    let verdict: Value = serde_json::from_str(stdout(&check).trim()).unwrap();
    assert_eq!(verdict["decision"], "allow", "{verdict}");

    let script = |word: &str| {
        vec![
            ScriptEntry::reply(
                "main",
                1,
                vec![call("mcp__remote__ok", json!({"word": word}))],
            ),
            ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
        ]
    };
    let fake = FakeLlm::start(Vec::new()).await.unwrap();
    for provider in ["anthropic", "openai", "script"] {
        fake.reset();
        fake.append_script(script(provider)).unwrap();
        let cassette = dir.path().join("cassette.json");
        std::fs::write(&cassette, serde_json::to_string(&script(provider)).unwrap()).unwrap();
        let base = match provider {
            "openai" => fake.openai_base_url(),
            _ => fake.base_url(),
        };
        let cassette = cassette.to_string_lossy().into_owned();
        let mut args = vec!["run", "-p", "Work.", "--output", "stream-json"];
        args.extend(["--provider", provider]);
        match provider {
            "script" => args.extend(["--cassette", &cassette]),
            "openai" => args.extend(["--base-url", &base, "--model", "gpt-4.1"]),
            _ => args.extend(["--base-url", &base]),
        }
        let mut command = super::common::command(dir.path(), &args);
        command.env("OPENAI_API_KEY", "test-key");
        let output = super::common::output(command).await;
        assert_eq!(
            output.status.code(),
            Some(0),
            "{provider}: {}",
            stderr(&output)
        );
        let (_, calls) = tool_results(dir.path(), &lines(&output)).await;
        assert_eq!(calls[0]["decision"], "allow", "{provider}: {:?}", calls[0]);
        assert_eq!(
            calls[0]["content"],
            format!("ok {provider} over http"),
            "{provider}: {:?}",
            calls[0]
        );
    }
}

/// A project whose `notes` server (the Python one) is started through `sh`, which first
/// forks a long `sleep` into the server's process group and writes its pid to
/// `sleep.<sh's pid>.pid` in the server's directory.
fn forking_project() -> tempfile::TempDir {
    let dir = notes_project("");
    let fork = "sleep 1001 & echo $! > \"sleep.$$.pid\"; exec \"$0\" \"$@\"";
    let mcp = json!({"mcpServers": {"notes": {
        "command": "sh",
        "args": ["-c", fork, python(), server_script()],
    }}});
    std::fs::write(dir.path().join(".mcp.json"), mcp.to_string()).unwrap();
    super::common::trust_blocking(dir.path());
    dir
}

/// The pids of the `sleep`s the forking servers of `dir` started.
fn forked_sleeps(dir: &Path) -> Vec<i32> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            name.starts_with("sleep.").then_some(name)
        })
        .map(|name| {
            let text = std::fs::read_to_string(dir.join(name)).unwrap();
            text.trim().parse().unwrap()
        })
        .collect()
}

/// Waits (on a pidfd, poll's own timeout as the guard) until process `pid` has ended; false
/// when it still runs after the guard.
pub(super) async fn ends(pid: i32) -> bool {
    let Ok(fd) = rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::PidfdFlags::empty(),
    ) else {
        return true; // already gone
    };
    tokio::task::spawn_blocking(move || {
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        let guard = rustix::event::Timespec {
            tv_sec: 10,
            tv_nsec: 0,
        };
        rustix::event::poll(&mut fds, Some(&guard)).unwrap() == 1
    })
    .await
    .unwrap()
}

/// How a forking server's muster ends, for the table below.
#[derive(Debug, Clone, Copy)]
enum Ending {
    Check,
    Completed,
    Failed,
    Interrupted,
    Deadline,
}

/// A server that forks a child is stopped with its whole process group however muster ends:
/// `check`, a completed run, a failed one, Ctrl-C and a deadline. After muster has exited no
/// process the server started is left in the process table.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_forks_leaves_nothing_running_however_muster_ends() {
    let cases = [
        (Ending::Check, Some(0)),
        (Ending::Completed, Some(0)),
        (Ending::Failed, Some(1)),
        (Ending::Interrupted, Some(130)),
        (Ending::Deadline, Some(3)),
    ];
    for (ending, code) in cases {
        let dir = forking_project();
        let root = dir.path();
        let first = match ending {
            Ending::Completed => ScriptEntry::reply(
                "main",
                1,
                vec![call("mcp__notes__search", json!({"query": "a"}))],
            ),
            Ending::Failed => ScriptEntry::http_error("main", 1, 400),
            _ => ScriptEntry::reply("main", 1, vec![Block::text("Late.")]).fault(
                muster_fake_llm::Fault {
                    hold: Some("model".into()),
                    ..Default::default()
                },
            ),
        };
        let fake = FakeLlm::start(vec![
            first,
            ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
        ])
        .await
        .unwrap();
        let exit = match ending {
            Ending::Check => {
                let output =
                    muster(root, &["check", "mcp__notes__search", "{\"query\": \"a\"}"]).await;
                output.status.code()
            }
            Ending::Completed | Ending::Failed => {
                run(root, &fake.base_url(), "default").await.status.code()
            }
            Ending::Interrupted | Ending::Deadline => {
                let mut args = vec!["run", "-p", "Work.", "--output", "stream-json"];
                let base = fake.base_url();
                args.extend(["--base-url", &base]);
                if matches!(ending, Ending::Deadline) {
                    args.extend(["--max-duration", "2"]);
                }
                let mut run = super::common::Running::spawn(super::common::command(root, &args));
                // Ctrl-C while the model call is held (the servers are up by then). The
                // deadline needs no wait: it may pass while the servers start or while the
                // call is held, and muster ends either way.
                if matches!(ending, Ending::Interrupted) {
                    tokio::time::timeout(super::common::GUARD, fake.gate_reached("model", 1))
                        .await
                        .expect("the model call never came");
                    let muster =
                        rustix::process::Pid::from_raw(run.child.id().unwrap() as i32).unwrap();
                    rustix::process::kill_process(muster, rustix::process::Signal::INT).unwrap();
                }
                let code = run.finish().await;
                fake.open_gate("model");
                code
            }
        };
        assert_eq!(exit, code, "{ending:?}");
        let sleeps = forked_sleeps(root);
        assert!(!sleeps.is_empty(), "{ending:?}: the server never started");
        for pid in sleeps {
            assert!(
                ends(pid).await,
                "{ending:?}: the server's child {pid} outlived muster"
            );
        }
    }
}

/// A server that prints an error and exits: `check` and a run quote its stderr, and no
/// message names an internal type.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_prints_an_error_and_exits_is_quoted_in_the_errors() {
    let dir = notes_project("");
    let failing = "echo 'Error: None of the specified directories are accessible' >&2; exit 1";
    let mcp = json!({"mcpServers": {"notes": {"command": "sh", "args": ["-c", failing]}}});
    std::fs::write(dir.path().join(".mcp.json"), mcp.to_string()).unwrap();
    super::common::trust(dir.path()).await;
    let check = muster(
        dir.path(),
        &[
            "check",
            "--json",
            "mcp__notes__search",
            "{\"query\": \"a\"}",
        ],
    )
    .await;
    let verdict: Value = serde_json::from_str(stdout(&check).trim()).unwrap();
    let reason = verdict["reason"].as_str().unwrap();
    let fake = FakeLlm::start(vec![ScriptEntry::reply(
        "main",
        1,
        vec![Block::text("Hi.")],
    )])
    .await
    .unwrap();
    let output = run(dir.path(), &fake.base_url(), "default").await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let warning = stderr(&output);
    for text in [reason, warning.as_str()] {
        assert!(
            text.contains("None of the specified directories are accessible"),
            "{text}"
        );
        assert!(text.contains("MCP server `notes`"), "{text}");
        for internal in ["rmcp::", "Transport [", "TokioChildProcess"] {
            assert!(!text.contains(internal), "{text}");
        }
    }
}

/// Whether process `pid` still runs (its pidfd not readable yet).
fn still_runs(pid: i32) -> bool {
    let Ok(fd) = rustix::process::pidfd_open(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::PidfdFlags::empty(),
    ) else {
        return false;
    };
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    let now = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    rustix::event::poll(&mut fds, Some(&now)).unwrap() == 0
}

/// A subagent uses its parent's connections: nothing starts for it (the forking server's
/// `sleep` appears once), its call goes to the parent's server, and the server keeps running
/// after the subagent has finished, until the run ends.
#[tokio::test(flavor = "multi_thread")]
async fn a_subagent_uses_its_parents_connections_and_starts_nothing() {
    let dir = forking_project();
    let root = dir.path();
    let held = |name: &str| muster_fake_llm::Fault {
        hold: Some(name.into()),
        ..Default::default()
    };
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![call(
                "Agent",
                json!({"description": "look", "prompt": "Look.", "subagent_type": "general"}),
            )],
        )
        .fault(held("first")),
        ScriptEntry::reply(
            "main.sub-1",
            1,
            vec![call("mcp__notes__search", json!({"query": "alpha"}))],
        ),
        ScriptEntry::reply("main.sub-1", 2, vec![Block::text("Looked.")]),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]).fault(held("second")),
    ])
    .await
    .unwrap();
    let base = fake.base_url();
    let args = [
        "run",
        "-p",
        "Work.",
        "--permission-mode",
        "bypassPermissions",
        "--base-url",
        &base,
        "--output",
        "stream-json",
    ];
    let mut run = super::common::Running::spawn(super::common::command(root, &args));
    tokio::time::timeout(super::common::GUARD, fake.gate_reached("first", 1))
        .await
        .expect("the first model call never came");
    let parents = forked_sleeps(root);
    assert_eq!(parents.len(), 1, "the main agent's server");
    fake.open_gate("first");
    tokio::time::timeout(super::common::GUARD, fake.gate_reached("second", 1))
        .await
        .expect("the second model call never came");
    assert_eq!(
        forked_sleeps(root),
        parents,
        "a server was started again for the subagent"
    );
    let searched = fake
        .requests()
        .into_iter()
        .find(|request| request.agent.as_deref() == Some("main.sub-1") && request.turn == Some(2))
        .expect("the subagent's second request")
        .body
        .to_string();
    assert!(
        searched.contains("hit(s) for 'alpha'"),
        "the subagent's call did not reach the server: {searched}"
    );
    assert!(still_runs(parents[0]), "the parent's server is still there");
    fake.open_gate("second");
    assert_eq!(run.finish().await, Some(0), "{:#?}", run.events);
    assert!(
        ends(parents[0]).await,
        "the parent's server outlived the run"
    );
}

fn git(dir: &Path, args: &[&str]) {
    let done = std::process::Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        done.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&done.stderr)
    );
}

/// A project whose `.mcp.json` gives the filesystem server the user's tree by absolute path,
/// as users write it, beside `extra` servers.
fn filesystem_project(extra: Value) -> tempfile::TempDir {
    let dir = project(&[]);
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let mut servers = json!({"fs": {
        "command": "node",
        "args": [filesystem_server(), root],
    }});
    if let (Some(servers), Some(extra)) = (servers.as_object_mut(), extra.as_object()) {
        servers.extend(extra.clone());
    }
    std::fs::write(
        dir.path().join(".mcp.json"),
        json!({"mcpServers": servers}).to_string(),
    )
    .unwrap();
    dir
}

/// The text of the tool results of the request `agent` made at `turn`.
fn results_sent(fake: &muster_fake_llm::FakeLlmHandle, agent: &str, turn: u64) -> String {
    fake.requests()
        .into_iter()
        .find(|request| request.agent.as_deref() == Some(agent) && request.turn == Some(turn))
        .unwrap_or_else(|| panic!("no request of {agent} at turn {turn}"))
        .body
        .to_string()
}

/// The main agent's filesystem server writes the agent's own workspace (the workspace-write
/// profile), so the teammate test below fails for the sandbox, not for the server.
#[tokio::test(flavor = "multi_thread")]
async fn a_filesystem_server_writes_its_own_agents_workspace() {
    let dir = filesystem_project(json!({}));
    let root = std::fs::canonicalize(dir.path()).unwrap();
    super::common::trust(dir.path()).await;
    let target = root.join("ok.txt");
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![call(
                "mcp__fs__write_file",
                json!({"path": target, "content": "written"}),
            )],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ])
    .await
    .unwrap();
    let output = run(dir.path(), &fake.base_url(), "bypassPermissions").await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        std::fs::read_to_string(&target).ok().as_deref(),
        Some("written"),
        "{}",
        results_sent(&fake, "main", 2)
    );
}

/// A teammate's filesystem server, given the user's tree by absolute path, runs in the
/// teammate's sandbox: it cannot write the user's tree, only the teammate's worktree. A server
/// that failed to start for the lead is not started again for the teammate.
#[tokio::test(flavor = "multi_thread")]
async fn a_teammates_filesystem_server_cannot_write_the_users_tree() {
    let dir = filesystem_project(json!({"hang": {"command": "sleep", "args": ["30"]}}));
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::remove_dir_all(root.join(".git")).unwrap();
    std::fs::create_dir_all(root.join(".muster/agents")).unwrap();
    std::fs::write(
        root.join(".muster/agents/writer.md"),
        "---\nname: writer\ndescription: Writes files.\npermissionMode: bypassPermissions\n---\nYou write files.\n",
    )
    .unwrap();
    std::fs::write(
        root.join("muster.team.toml"),
        "name = \"builders\"\nisolation = \"worktree\"\n\n[[teammates]]\nname = \"one\"\n\
         definition = \"writer\"\nplan_mode_required = false\napprover = \"policy:policy.toml\"\n",
    )
    .unwrap();
    std::fs::write(root.join("policy.toml"), "approve_all = true\n").unwrap();
    std::fs::write(
        root.join(".muster/settings.local.toml"),
        "[mcp]\nstartup_timeout_ms = 2000\n",
    )
    .unwrap();
    std::fs::write(root.join(".gitignore"), ".muster/settings.local.toml\n").unwrap();
    git(&root, &["init", "-q", "-b", "main"]);
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "start"]);
    super::common::trust(&root).await;
    let leak = root.join("leak.txt");
    let entry = |value: Value| -> ScriptEntry { serde_json::from_value(value).unwrap() };
    let any_turn = |agent: &str, text: &str| {
        entry(
            json!({"agent": agent, "reply": {"content": [{"type": "text", "text": text}],
                     "stop_reason": "end_turn"}}),
        )
    };
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply(
            "lead",
            1,
            vec![call(
                "TaskCreate",
                json!({"subject": "write", "description": "Write a file."}),
            )],
        ),
        any_turn("lead", "Waiting for the team."),
        ScriptEntry::reply(
            "one",
            1,
            vec![call(
                "mcp__fs__write_file",
                json!({"path": leak, "content": "from the teammate"}),
            )],
        ),
        any_turn("one", "done"),
    ])
    .await
    .unwrap();
    let args = [
        "run",
        "-p",
        "Write.",
        "--permission-mode",
        "bypassPermissions",
        "--base-url",
        &fake.base_url(),
        "--output",
        "stream-json",
    ];
    let output = muster(&root, &args).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let sent = results_sent(&fake, "one", 2);
    assert!(
        !leak.exists(),
        "the teammate's server wrote the user's tree: {sent}"
    );
    assert!(
        ["EACCES", "EPERM", "EROFS", "ermission denied"]
            .iter()
            .any(|word| sent.contains(word)),
        "the write did not fail for the sandbox: {sent}"
    );
    let log = stderr(&output);
    assert_eq!(
        log.matches("MCP server `hang` did not start and initialize within 2000 ms")
            .count(),
        2,
        "{log}"
    );
    assert_eq!(log.matches("it is not started again").count(), 1, "{log}");
}

/// `${VAR}` and `${VAR:-default}` in `.mcp.json` expand from muster's environment; `muster
/// trust` names the variables each server reads; an unset variable with no default keeps that
/// server off with a warning naming it and the variable, and the run goes on.
#[tokio::test(flavor = "multi_thread")]
async fn variables_in_mcp_json_expand_and_an_unset_one_is_named() {
    let dir = project(&[("notes.txt", "alpha one\n")]);
    let mcp = json!({"mcpServers": {
        "notes": {"command": "${NOTES_PYTHON}", "args": ["${NOTES_DIR:-/nowhere}/mcp_notes_server.py"]},
        "needy": {"command": "${NOTES_PYTHON}", "args": ["${MUSTER_TEST_NEVER_SET}"]},
    }});
    std::fs::write(dir.path().join(".mcp.json"), mcp.to_string()).unwrap();
    let trusted = muster(dir.path(), &["trust"]).await;
    assert!(
        stdout(&trusted).contains("pins MCP server notes (.mcp.json): ${NOTES_PYTHON} ${NOTES_DIR:-/nowhere}/mcp_notes_server.py; reads NOTES_DIR, NOTES_PYTHON"),
        "{}",
        stdout(&trusted)
    );
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![call("mcp__notes__search", json!({"query": "alpha"}))],
        ),
        ScriptEntry::reply("main", 2, vec![Block::text("Done.")]),
    ])
    .await
    .unwrap();
    let base = fake.base_url();
    let args = [
        "run",
        "-p",
        "Work.",
        "--permission-mode",
        "default",
        "--base-url",
        &base,
        "--output",
        "stream-json",
    ];
    let mut command = super::common::command(dir.path(), &args);
    command
        .env("NOTES_PYTHON", python())
        .env("NOTES_DIR", server_script().parent().unwrap())
        .env_remove("MUSTER_TEST_NEVER_SET");
    let output = super::common::output(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let log = stderr(&output);
    assert!(
        log.contains("MCP server `needy` (.mcp.json): `${MUSTER_TEST_NEVER_SET}` is not set and has no default"),
        "{log}"
    );
    let (_, calls) = tool_results(dir.path(), &lines(&output)).await;
    assert_eq!(calls[0]["decision"], "allow", "{:?}", calls[0]);
    assert!(
        calls[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("1 hit(s) for 'alpha'"),
        "{:?}",
        calls[0]
    );
}

/// The npm reference server of npm's `@modelcontextprotocol/<name>` (see
/// [`filesystem_server`]).
fn npm_server(name: &str) -> PathBuf {
    let script = filesystem_server()
        .parent()
        .and_then(Path::parent)
        .and_then(Path::parent)
        .unwrap()
        .join(name)
        .join("dist/index.js");
    assert!(
        script.is_file(),
        "{} is missing: run `scripts/test`",
        script.display()
    );
    script
}

/// Plan mode with real servers: the `everything` server's read-only, closed-world `echo` and
/// the `memory` server's `read_graph` run (in the read-only sandbox); its open-world
/// `gzip-file-as-resource` is denied. The user's own `[mcp] read_only_tools` lets an
/// open-world tool through; the same key in the project-local settings is ignored and says so.
#[tokio::test(flavor = "multi_thread")]
async fn plan_mode_with_the_npm_servers_follows_the_hints_and_the_users_own_list() {
    let dir = project(&[("notes.txt", "alpha one\n")]);
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let mcp = json!({"mcpServers": {
        "everything": {"command": "node", "args": [npm_server("server-everything")]},
        "memory": {"command": "node", "args": [npm_server("server-memory")],
                   "env": {"MEMORY_FILE_PATH": root.join("memory.jsonl")}},
        "notes": {"command": python(), "args": [server_script()]},
    }});
    std::fs::write(dir.path().join(".mcp.json"), mcp.to_string()).unwrap();
    std::fs::write(
        dir.path().join(".muster/settings.local.toml"),
        "[mcp]\nread_only_tools = [\"mcp__everything__gzip-file-as-resource\"]\n",
    )
    .unwrap();
    super::common::trust(dir.path()).await;
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".muster")).unwrap();
    std::fs::write(
        home.path().join(".muster/settings.toml"),
        "[mcp]\nread_only_tools = [\"mcp__notes__fetch\"]\n",
    )
    .unwrap();
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply(
            "main",
            1,
            vec![call("mcp__everything__echo", json!({"message": "hi"}))],
        ),
        ScriptEntry::reply(
            "main",
            2,
            vec![call(
                "mcp__everything__gzip-file-as-resource",
                json!({"name": "x.gz", "data": "https://example.test/x"}),
            )],
        ),
        ScriptEntry::reply("main", 3, vec![call("mcp__memory__read_graph", json!({}))]),
        ScriptEntry::reply(
            "main",
            4,
            vec![call("mcp__notes__fetch", json!({"url": "local"}))],
        ),
        ScriptEntry::reply("main", 5, vec![Block::text("Done.")]),
    ])
    .await
    .unwrap();
    let base = fake.base_url();
    let args = [
        "run",
        "-p",
        "Look.",
        "--permission-mode",
        "plan",
        "--base-url",
        &base,
        "--output",
        "stream-json",
    ];
    let mut command = super::common::command(dir.path(), &args);
    command.env("HOME", home.path());
    let output = super::common::output(command).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("`mcp.read_only_tools` is ignored"),
        "{}",
        stderr(&output)
    );
    let (_, calls) = tool_results(dir.path(), &lines(&output)).await;
    assert_eq!(calls.len(), 4, "{calls:#?}");
    assert_eq!(calls[0]["decision"], "allow", "{:?}", calls[0]);
    assert!(
        calls[0]["content"].as_str().unwrap().contains("Echo: hi"),
        "{:?}",
        calls[0]
    );
    assert_eq!(calls[1]["decision"], "deny", "{:?}", calls[1]);
    assert!(
        calls[1]["reason"]
            .as_str()
            .unwrap()
            .contains("readOnlyHint: true"),
        "{:?}",
        calls[1]
    );
    assert_eq!(calls[2]["decision"], "allow", "{:?}", calls[2]);
    assert!(
        calls[2]["content"].as_str().unwrap().contains("entities"),
        "{:?}",
        calls[2]
    );
    assert_eq!(calls[3]["decision"], "allow", "{:?}", calls[3]);
    assert!(
        calls[3]["reason"]
            .as_str()
            .unwrap()
            .contains("read_only_tools"),
        "{:?}",
        calls[3]
    );
}

/// `tools/list_changed` is honoured at the agent's next turn boundary: after `grow` adds a
/// tool and says so, the next model request offers it, the agent calls it, and the new list
/// is committed (`mcp_tools` record) for a resume.
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_list_change_is_offered_from_the_next_model_request() {
    let dir = notes_project("");
    let fake = FakeLlm::start(vec![
        ScriptEntry::reply("main", 1, vec![call("mcp__notes__grow", json!({}))]),
        ScriptEntry::reply("main", 2, vec![call("mcp__notes__grown", json!({}))]),
        ScriptEntry::reply("main", 3, vec![Block::text("Done.")]),
    ])
    .await
    .unwrap();
    let output = run(dir.path(), &fake.base_url(), "bypassPermissions").await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let offered = |index: usize| -> Vec<String> {
        fake.requests()[index].body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|tool| tool["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(!offered(0).contains(&"mcp__notes__grown".to_owned()));
    assert!(
        offered(1).contains(&"mcp__notes__grown".to_owned()),
        "{:?}",
        offered(1)
    );
    let (records, calls) = tool_results(dir.path(), &lines(&output)).await;
    assert_eq!(calls[1]["content"], "grown tool ran", "{:?}", calls[1]);
    let changed = records
        .iter()
        .find(|record| record["type"] == "mcp_tools")
        .expect("the new list was not committed");
    assert!(
        changed["mcp_tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|tool| tool["model_name"] == "mcp__notes__grown"),
        "{changed}"
    );
}
