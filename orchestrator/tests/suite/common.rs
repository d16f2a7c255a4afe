//! Helpers the suites that run the `muster` binary share: a project directory, the command
//! with a test environment (or a cleared one), its output under a guard timeout, reading that
//! output, and a live child read line by line ([`Running`]). What a suite does differently
//! (another environment, another project) it adds itself.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use muster_fake_llm::{Block, FakeLlm, FakeLlmHandle, ScriptEntry};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

/// How long one `muster` process may take before the test fails instead of hanging.
pub const GUARD: Duration = Duration::from_secs(120);

/// A project directory: `.muster/`, an empty `.git/` (so the project root is found here), a
/// `README.md`, then each of `files` (path, content).
pub fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".muster")).unwrap();
    std::fs::create_dir_all(dir.path().join(".git")).unwrap();
    std::fs::write(dir.path().join("README.md"), "hello\n").unwrap();
    for (path, content) in files {
        std::fs::write(dir.path().join(path), content).unwrap();
    }
    dir
}

/// The `muster` binary in `dir` with `args`: `HOME` is `dir`, a test Anthropic key is set, no
/// `XDG_RUNTIME_DIR`, `ANTHROPIC_BASE_URL` nor CI trust variable leaks in from the caller,
/// `XDG_CONFIG_HOME` is [`config_home`] (outside every test project, so `muster trust` can
/// record trust there), stdin is empty.
pub fn command(dir: &Path, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_muster"));
    command
        .current_dir(dir)
        .args(args)
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", config_home())
        .env("ANTHROPIC_API_KEY", "test-key")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("MUSTER_TRUST_PROJECT_HASH")
        .stdin(Stdio::null());
    command
}

/// The config directory every [`command`] of this test process shares (under the target's
/// temporary directory): trust is keyed by each project's path, so tests do not meet there.
pub fn config_home() -> &'static Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("config-home-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

/// Runs `muster trust` in `dir` (as [`command`] runs it): the project's own settings that
/// widen access take effect, as they do for a user who trusted their project. Call it after
/// the project's files are written: a later change makes the project untrusted again.
pub async fn trust(dir: &Path) {
    let output = muster(dir, &["trust"]).await;
    assert!(output.status.success(), "{}", stderr(&output));
}

/// [`trust`], blocking.
pub fn trust_blocking(dir: &Path) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_muster"))
        .current_dir(dir)
        .arg("trust")
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", config_home())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The `muster` binary in `root`, blocking, with nothing of the caller's environment but
/// `PATH`, and `HOME` at `home`: what it reads is only what the test wrote.
pub fn cleared_command(root: &Path, home: &Path) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_muster"));
    command
        .env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(root);
    command
}

/// Runs `command` to its end, failing the test after [`GUARD`].
pub async fn output(mut command: tokio::process::Command) -> Output {
    tokio::time::timeout(GUARD, command.output())
        .await
        .expect("guard timeout")
        .unwrap()
}

/// [`command`] run to its end under [`GUARD`].
pub async fn muster(dir: &Path, args: &[&str]) -> Output {
    output(command(dir, args)).await
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Each line of `text` as JSON, naming the line that is not.
pub fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// The stream-json events on stdout.
pub fn lines(output: &Output) -> Vec<Value> {
    json_lines(&String::from_utf8_lossy(&output.stdout))
}

/// Position of the first event matching `pred`.
pub fn position(events: &[Value], what: &str, pred: impl Fn(&Value) -> bool) -> usize {
    events
        .iter()
        .position(pred)
        .unwrap_or_else(|| panic!("no {what} in {events:#?}"))
}

pub fn tool(name: &str, input: Value) -> Block {
    Block::tool_use(name, input)
}

/// The fake model server answering with `script`.
pub async fn fake(script: Vec<ScriptEntry>) -> FakeLlmHandle {
    FakeLlm::start(script).await.unwrap()
}

/// A `muster` child whose stream-json lines are read as they come.
pub struct Running {
    pub child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
    /// Every event read so far.
    pub events: Vec<Value>,
}

impl Running {
    /// Spawns `command` with stdout piped and stderr dropped.
    pub fn spawn(mut command: tokio::process::Command) -> Running {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Running {
            child,
            stdout,
            events: Vec::new(),
        }
    }

    /// Reads lines until one matches.
    pub async fn until(&mut self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        loop {
            let line = tokio::time::timeout(GUARD, self.stdout.next_line())
                .await
                .expect("guard timeout")
                .unwrap()
                .unwrap_or_else(|| panic!("the run ended before {what}: {:#?}", self.events));
            let event: Value = serde_json::from_str(&line).unwrap();
            self.events.push(event.clone());
            if matches(&event) {
                return event;
            }
        }
    }

    /// Reads to the end; gives back the exit code.
    pub async fn finish(&mut self) -> Option<i32> {
        while let Some(line) = tokio::time::timeout(GUARD, self.stdout.next_line())
            .await
            .expect("guard timeout")
            .unwrap()
        {
            self.events.push(serde_json::from_str(&line).unwrap());
        }
        tokio::time::timeout(GUARD, self.child.wait())
            .await
            .expect("guard timeout")
            .unwrap()
            .code()
    }
}

/// The project's store (`.muster/muster.db` under `dir`), opened as a second instance.
pub fn open_store(dir: &Path) -> std::sync::Arc<dyn muster_mailbox::MailboxStore> {
    std::sync::Arc::new(
        muster_mailbox::SqliteStore::open(
            &dir.join(".muster/muster.db"),
            muster_mailbox::StoreOptions::default(),
        )
        .unwrap(),
    )
}

/// An agent's transcript records, as stored.
pub async fn transcript(
    store: &dyn muster_mailbox::MailboxStore,
    run_id: &str,
    agent: &str,
) -> Vec<Value> {
    store
        .records(run_id, agent, "transcript", 0)
        .await
        .unwrap()
        .into_iter()
        .map(|row| row.body)
        .collect()
}

/// The processes whose working directory is `dir` (`muster acp`, an ACP client's helper, a
/// tool's child), as their command lines: the editor tests check that none outlives its
/// session.
pub fn processes_in(dir: &Path) -> Vec<String> {
    processes_working_in(dir)
        .into_iter()
        .map(|(_, args)| args.join(" "))
        .collect()
}

/// The processes whose working directory is `dir`: each one's pid and arguments.
pub fn processes_working_in(dir: &Path) -> Vec<(u32, Vec<String>)> {
    let dir = dir.canonicalize().unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let pid = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            let cwd = std::fs::read_link(entry.path().join("cwd")).ok()?;
            let cmdline = std::fs::read_to_string(entry.path().join("cmdline")).ok()?;
            let args = cmdline.split_terminator('\0').map(str::to_owned).collect();
            (cwd == dir).then_some((pid, args))
        })
        .collect()
}

/// The reference filesystem server of npm (`@modelcontextprotocol/server-filesystem`, pinned
/// by tests/mcp-npm's lockfile and installed by `scripts/test`). Without it the test fails
/// saying how to get it, never skips.
pub fn filesystem_server() -> std::path::PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../tests/mcp-npm/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js",
    );
    assert!(
        script.is_file(),
        "the MCP tests need the npm reference servers: run `scripts/test`, which installs them \
         (npm ci --prefix tests/mcp-npm)"
    );
    std::fs::canonicalize(script).unwrap()
}
