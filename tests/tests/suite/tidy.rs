//! The vocabulary has one typed home (ARCHITECTURE.md "The vocabulary"): message kinds, tool
//! names, responders and request ids are spelled only in `protocol/`. This check reads the
//! other crates' library code (their unit-test modules and test files aside, where a literal is
//! the serialised format under test) and fails on a spelling that belongs to the protocol.

use std::path::{Path, PathBuf};

use muster_protocol::{ALL_TOOLS, MessageKind, RequestFamily};

/// The crates whose code must speak through `muster-protocol`.
const CRATES: [&str; 4] = [
    "agents/src",
    "config/src",
    "mailbox/src",
    "orchestrator/src",
];

/// What is wrong with one line of library code, if anything.
fn misspoken(code: &str) -> Option<String> {
    if let Some(tool) = ALL_TOOLS
        .iter()
        .find(|t| code.contains(&format!("\"{t}\"")))
    {
        return Some(format!(
            "the tool name \"{tool}\": use muster_protocol::ToolName"
        ));
    }
    // A match arm on a one-word kind (`"text" =>`, `"answer" =>`) is as likely a content
    // block's type or a form's action: only comparisons count for those.
    for kind in MessageKind::known() {
        let kind = kind.as_str();
        for comparison in [
            format!("kind == \"{kind}\""),
            format!("kind != \"{kind}\""),
            format!("kind() == \"{kind}\""),
            format!("\"{kind}\" =>"),
        ] {
            if !kind.contains('_') && comparison.ends_with("=>") {
                continue;
            }
            if code.contains(&comparison) {
                return Some(format!("the message kind \"{kind}\": use MessageKind"));
            }
        }
    }
    if ["== \"human\"", "!= \"human\"", "\"human\" =="]
        .iter()
        .any(|c| code.contains(c))
    {
        return Some("the person compared as \"human\": use Responder".into());
    }
    if let Some(family) = RequestFamily::ALL
        .iter()
        .find(|f| code.contains(&format!("format!(\"{}-", f.prefix())))
    {
        let prefix = family.prefix();
        return Some(format!(
            "a request id built by hand ({prefix}-…): use RequestId"
        ));
    }
    if code.contains("Result<") && code.contains("Approver") {
        return Some("`Approver`: it is muster_protocol::Responder".into());
    }
    None
}

/// The library lines of a file: up to its unit-test module, without comments.
fn library_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .take_while(|(_, line)| *line != "#[cfg(test)]")
        .map(|(index, line)| (index + 1, line.split("//").next().unwrap_or_default()))
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" {
                rust_files(&path, found);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            found.push(path);
        }
    }
}

#[test]
fn no_vocabulary_literal_remains_outside_the_protocol_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for krate in CRATES {
        rust_files(&root.join(krate), &mut files);
    }
    assert!(files.len() > 100, "the crates' sources were found");
    let mut wrong = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (number, code) in library_lines(&text) {
            if let Some(why) = misspoken(code) {
                let shown = file.strip_prefix(root).unwrap_or(file).display();
                wrong.push(format!("{shown}:{number}: {why}: {}", code.trim()));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The check finds what it is for, and leaves the typed spellings alone.
#[test]
fn the_check_tells_a_literal_from_its_typed_spelling() {
    let table = [
        ("if call.name == \"Bash\" {", true),
        ("if call.name == ToolName::Bash {", false),
        ("m.kind == \"merge_request\"", true),
        ("m.kind == MessageKind::MergeRequest", false),
        ("\"plan_approval_request\" => 1,", true),
        ("request.responder == \"human\"", true),
        ("Responder::names_the_person(&request.responder)", false),
        ("let id = format!(\"perm-{}-{n}\", agent);", true),
        (
            "let id = RequestId::new(RequestFamily::Permission, agent, n);",
            false,
        ),
        ("let text = \"Bash is a shell\";", false),
    ];
    for (code, flagged) in table {
        assert_eq!(misspoken(code).is_some(), flagged, "{code}");
    }
    let text = "fn f() {}\n#[cfg(test)]\nmod tests { const T: &str = \"Bash\"; }\n";
    assert_eq!(
        library_lines(text).count(),
        1,
        "unit tests are not library code"
    );
}

/// Where a crate name may appear, as `(what, the places allowed, why)`.
const BOUNDARIES: [(&str, &[&str], &str); 11] = [
    (
        "crate::cli",
        &["orchestrator/src/cli/", "orchestrator/src/main.rs"],
        "the CLI layer parses and prints; the domain takes plain types",
    ),
    (
        "clap::",
        &["orchestrator/src/cli/", "orchestrator/src/main.rs"],
        "no clap type leaves cli/",
    ),
    (
        "rusqlite",
        &["mailbox/src/sqlite/", "mailbox/src/error.rs"],
        "SQLite belongs to its backend (StoreError keeps its source)",
    ),
    (
        "tokio_postgres",
        &["mailbox/src/postgres/", "mailbox/src/error.rs"],
        "PostgreSQL belongs to its backend (StoreError keeps its source)",
    ),
    (
        "tokio::signal",
        &["orchestrator/src/lifecycle/"],
        "signals belong to the run lifecycle (Ctrl-C interrupts the run)",
    ),
    (
        "take_over(",
        &["orchestrator/src/lifecycle/"],
        "only the lifecycle takes a run over (live lock, log, epoch)",
    ),
    (
        "RunContext {",
        &[
            "orchestrator/src/lifecycle/context.rs",
            "agents/src/runtime/context.rs",
        ],
        "one builder makes a run's context",
    ),
    // What the process is given is read once, in `main` (`process.rs`), and passed down. The
    // exceptions: the failpoints (read where they fire, test builds only), the sandbox's
    // test-only ABI override, and a workspace's `~` (agents' tools, not yet handed the home).
    (
        "std::env::var",
        &[
            "orchestrator/src/process.rs",
            "mailbox/src/failpoint.rs",
            "agents/src/sandbox.rs",
        ],
        "the environment is read once in main (ProcessGiven)",
    ),
    (
        "std::env::current_dir",
        &["orchestrator/src/process.rs"],
        "the working directory is read once in main (ProcessGiven)",
    ),
    (
        "std::env::home_dir",
        &[
            "orchestrator/src/process.rs",
            "agents/src/tools/workspace.rs",
        ],
        "the home directory is read once in main (ProcessGiven)",
    ),
    (
        "is_terminal()",
        &["orchestrator/src/process.rs", "orchestrator/src/main.rs"],
        "which streams are terminals is read once in main (ProcessGiven)",
    ),
];

#[test]
fn layers_are_kept_the_cli_and_the_database_clients_stay_in_their_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for krate in CRATES {
        rust_files(&root.join(krate), &mut files);
    }
    let mut crossed = Vec::new();
    for file in &files {
        let shown = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        let text = std::fs::read_to_string(file).unwrap();
        for (number, code) in library_lines(&text) {
            for (what, allowed, why) in BOUNDARIES {
                if crosses(code, what) && !allowed.iter().any(|place| shown.starts_with(place)) {
                    crossed.push(format!("{shown}:{number}: {what} ({why}): {}", code.trim()));
                }
            }
        }
    }
    assert!(crossed.is_empty(), "{}", crossed.join("\n"));
}

/// Whether `code` uses `what`: a struct's definition and its `impl` blocks are not a literal.
fn crosses(code: &str, what: &str) -> bool {
    code.contains(what)
        && !code.contains(&format!("struct {what}"))
        && !code.contains(&format!("impl {what}"))
}

#[test]
fn the_boundary_check_tells_a_use_from_a_definition() {
    let table = [
        ("    let context = RunContext {", "RunContext {", true),
        ("pub struct RunContext {", "RunContext {", false),
        ("impl RunContext {", "RunContext {", false),
        (
            "    let mut signals = tokio::signal::ctrl_c();",
            "tokio::signal",
            true,
        ),
        ("use crate::cli::config;", "crate::cli", true),
    ];
    for (code, what, crossed) in table {
        assert_eq!(crosses(code, what), crossed, "{code}");
    }
}

/// Every test ARCHITECTURE.md names as guarding something exists: a test name in backticks
/// (snake case, five words or more, possibly after `suite::`) is a `fn` somewhere.
#[test]
fn every_test_architecture_md_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let mut files = Vec::new();
    for krate in [
        "agents",
        "config",
        "mailbox",
        "orchestrator",
        "protocol",
        "tests",
    ] {
        rust_files_with_tests(&root.join(krate), &mut files);
    }
    let sources: String = files
        .iter()
        .map(|file| std::fs::read_to_string(file).unwrap())
        .collect();
    let named: Vec<&str> = map
        .split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|quoted| quoted.rsplit("::").next())
        .filter(|name| {
            name.split('_').filter(|word| !word.is_empty()).count() >= 5
                && !name.contains("__")
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
        .collect();
    assert!(
        named.len() >= 10,
        "ARCHITECTURE.md names its tests: {named:?}"
    );
    let missing: Vec<&&str> = named
        .iter()
        .filter(|name| !sources.contains(&format!("fn {name}(")))
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names tests that do not exist: {missing:?}"
    );
}

fn rust_files_with_tests(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "target" && name != "node_modules" {
                rust_files_with_tests(&path, found);
            }
        } else if name.ends_with(".rs") {
            found.push(path);
        }
    }
}

/// The module folders whose files must not import each other in a circle (ARCHITECTURE.md
/// "The agents crate"): a circle makes the files one unit that can only be read, tested and
/// changed whole.
const ACYCLIC_FOLDERS: [&str; 3] = ["agents/src/runtime", "agents/src/model", "agents/src/tools"];

/// The library text of a file (up to its unit-test module), comments removed.
fn library_text(text: &str) -> String {
    library_lines(text)
        .map(|(_, code)| code)
        .collect::<Vec<_>>()
        .join("\n")
}

/// The sibling modules (`siblings`) that `code` names through `super::…` or `crate::{module}::…`
/// paths, grouped imports (`super::{a::X, b}`) included.
fn sibling_imports(code: &str, module: &str, siblings: &[String]) -> Vec<String> {
    let crate_path = format!("crate::{module}::");
    let mut named = Vec::new();
    for prefix in ["super::", crate_path.as_str()] {
        for (at, _) in code.match_indices(prefix) {
            let rest = &code[at + prefix.len()..];
            let heads = match rest.strip_prefix('{') {
                Some(group) => group_heads(group),
                None => vec![leading_ident(rest)],
            };
            named.extend(
                heads
                    .into_iter()
                    .filter(|head| siblings.iter().any(|s| s == head))
                    .map(str::to_owned),
            );
        }
    }
    named.sort();
    named.dedup();
    named
}

fn leading_ident(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The first name of each item of a `{…}` group (`text` starts after its `{`).
fn group_heads(text: &str) -> Vec<&str> {
    let mut heads = vec![leading_ident(text.trim_start())];
    let mut depth = 1;
    for (at, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 1 => break,
            '}' => depth -= 1,
            ',' if depth == 1 => heads.push(leading_ident(text[at + 1..].trim_start())),
            _ => {}
        }
    }
    heads
}

/// A circle in `graph` (file → the files it imports), as `a → b → a`, if there is one.
fn find_circle(graph: &std::collections::BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &std::collections::BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|n| n == node) {
            let mut circle = path[start..].to_vec();
            circle.push(node.to_owned());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = std::collections::BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

/// The import graph of the files of one module folder.
fn folder_graph(folder: &Path, module: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(folder)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .map(|path| {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    files.sort();
    let siblings: Vec<String> = files.iter().map(|(name, _)| name.clone()).collect();
    files
        .iter()
        .map(|(name, text)| {
            let imports = sibling_imports(&library_text(text), module, &siblings)
                .into_iter()
                .filter(|import| import != name)
                .collect();
            (name.clone(), imports)
        })
        .collect()
}

#[test]
fn no_two_files_of_the_runtime_the_model_clients_or_the_tools_import_each_other() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut circles = Vec::new();
    for folder in ACYCLIC_FOLDERS {
        let module = folder.rsplit('/').next().unwrap();
        let graph = folder_graph(&root.join(folder), module);
        assert!(graph.len() > 5, "the files of {folder} were found");
        if let Some(circle) = find_circle(&graph) {
            circles.push(format!("{folder}: {}", circle.join(" → ")));
        }
    }
    assert!(
        circles.is_empty(),
        "files that import each other (move what both need into a third file):\n{}",
        circles.join("\n")
    );
}

/// The import check reads grouped and inline paths, and finds a circle through a third file.
#[test]
fn the_import_check_finds_imports_and_circles() {
    let siblings: Vec<String> = ["agent", "dispatch", "records", "error"]
        .map(str::to_owned)
        .to_vec();
    let table = [
        ("use super::records::Record;", vec!["records"]),
        (
            "use super::{agent::AgentRuntime, error::{E, F}, Other};",
            vec!["agent", "error"],
        ),
        (
            "let x = super::dispatch::interrupted(&g);",
            vec!["dispatch"],
        ),
        ("use crate::runtime::error::RuntimeError;", vec!["error"]),
        ("use crate::model::error::Thing;", vec![]),
        ("use super::TypedTool;", vec![]),
    ];
    for (code, expected) in table {
        assert_eq!(
            sibling_imports(code, "runtime", &siblings),
            expected,
            "{code}"
        );
    }
    let graph = |edges: &[(&str, &str)]| {
        let mut graph = std::collections::BTreeMap::<String, Vec<String>>::new();
        for (from, to) in edges {
            graph.entry((*from).into()).or_default().push((*to).into());
            graph.entry((*to).into()).or_default();
        }
        graph
    };
    assert_eq!(
        find_circle(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])),
        None
    );
    assert_eq!(
        find_circle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])),
        Some(["a", "b", "c", "a"].map(str::to_owned).to_vec())
    );
}

/// The store's rules (issue 32, "the rules once"): each is a pure function of
/// `mailbox/src/rules/`, which both backends call; none is restated in a backend.
const STORE_RULES: [&str; 24] = [
    // sending: delivery class, the stored body, the row, correlation
    "priority_of",
    "stored_body",
    "message_row",
    "responder_of",
    "check_bulk",
    // decisions: first answer wins, only the responder answers
    "answered",
    "check_answer",
    "already_decided",
    "response_message",
    // idempotency
    "encode_outcome",
    "decode_outcome",
    "counter_key",
    "claim_key",
    // the roster
    "founding_members",
    "check_new_member",
    "unknown_recipient",
    // the task board
    "open_dependencies",
    "check_dependency",
    "claim_refused",
    "updated_row",
    "assignment_message",
    "new_owner",
    // fencing
    "fence_holds",
    "fence_refusal",
];

/// Whether `code` defines the free function `name` (rather than calling or naming it, or
/// defining a method of that name: `Message::stored_body` reads a stored message).
fn defines(code: &str, name: &str) -> bool {
    let Some((_, rest)) = code
        .split_once(&format!("fn {name}("))
        .or_else(|| code.split_once(&format!("fn {name}<")))
    else {
        return false;
    };
    // After generics, if any: the parameters.
    let parameters =
        rest.split_once('(').map_or(
            rest,
            |(generics, after)| {
                if generics.contains(')') { rest } else { after }
            },
        );
    !["self", "&self", "&mut self", "mut self"]
        .iter()
        .any(|receiver| parameters.trim_start().starts_with(receiver))
}

#[test]
fn each_store_rule_is_defined_once_for_both_backends() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    rust_files(&root.join("mailbox/src"), &mut files);
    let mut definitions: Vec<(&str, String)> = Vec::new();
    for file in &files {
        let shown = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        let text = std::fs::read_to_string(file).unwrap();
        for (number, code) in library_lines(&text) {
            for rule in STORE_RULES.iter().filter(|rule| defines(code, rule)) {
                definitions.push((rule, format!("{shown}:{number}")));
            }
        }
    }
    let mut wrong = Vec::new();
    for rule in STORE_RULES {
        let places: Vec<&String> = definitions
            .iter()
            .filter(|(name, _)| *name == rule)
            .map(|(_, place)| place)
            .collect();
        let in_rules = places
            .iter()
            .all(|place| place.starts_with("mailbox/src/rules/"));
        if places.len() != 1 || !in_rules {
            wrong.push(format!(
                "{rule} is defined at {places:?}: define it once, in mailbox/src/rules/, and \
                 call it from both backends"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The name of the method a line of an impl defines (`async fn send(&self, …`, or a signature
/// that goes on over the next lines), if any.
fn method_defined(code: &str) -> Option<&str> {
    let mut rest = code.trim_start();
    for prefix in ["pub(crate) ", "pub ", "async "] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    let (name, parameters) = rest.strip_prefix("fn ")?.split_once('(')?;
    let method = parameters.is_empty() || parameters.starts_with("&self");
    (method && !name.contains('<')).then_some(name)
}

/// The methods `mailbox_store!`'s table defines, one a line: `read name(…`, `work Access
/// name(…`, `write [runs] name(…` (the name perhaps on the line after `write [runs]`).
fn table_methods(list: &str) -> Vec<&str> {
    let lines: Vec<&str> = library_lines(list).map(|(_, code)| code.trim()).collect();
    let mut names = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        let rest = if let Some(rest) = line.strip_prefix("read ") {
            rest
        } else if let Some(rest) = line.strip_prefix("work ") {
            rest.split_once(' ').map_or("", |(_, rest)| rest)
        } else if let Some(rest) = line.strip_prefix("write [") {
            match rest.split_once("] ") {
                Some((_, rest)) => rest,
                None => lines.get(index + 1).copied().unwrap_or_default(),
            }
        } else {
            continue;
        };
        if let Some((name, _)) = rest.split_once('(')
            && !name.is_empty()
            && name.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        {
            names.push(name);
        }
    }
    names
}

/// The `MailboxStore` methods both backends run the same way are written once, in the
/// `mailbox_store!` list (issue 32): each backend implements the trait only through it, and
/// none restates a method of the list (a backend's own methods are the ones it runs its own
/// way: live holds, `prune`, `reserve_budget`, `watch_work`).
#[test]
fn each_store_method_is_written_once_for_both_backends() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let shared = std::fs::read_to_string(root.join("mailbox/src/ops/backend.rs")).unwrap();
    let (_, list) = shared
        .split_once("impl $crate::store::MailboxStore for $store {")
        .expect("mailbox_store! implements MailboxStore");
    let mut listed: Vec<&str> = library_lines(list)
        .filter_map(|(_, code)| method_defined(code))
        .filter(|name| !name.starts_with('$'))
        .collect();
    listed.extend(table_methods(list));
    assert!(listed.len() > 40, "the shared list was read: {listed:?}");
    let mut files = Vec::new();
    rust_files(&root.join("mailbox/src"), &mut files);
    let mut wrong = Vec::new();
    for file in &files {
        let shown = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        let text = std::fs::read_to_string(file).unwrap();
        let backend =
            shown.starts_with("mailbox/src/sqlite/") || shown.starts_with("mailbox/src/postgres/");
        for (number, code) in library_lines(&text) {
            if code.contains("MailboxStore for") && shown != "mailbox/src/ops/backend.rs" {
                wrong.push(format!(
                    "{shown}:{number}: implement MailboxStore with mailbox_store!"
                ));
            }
            if let Some(name) = method_defined(code).filter(|name| backend && listed.contains(name))
            {
                wrong.push(format!(
                    "{shown}:{number}: {name} is in mailbox_store!'s list: write it there once"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The tables only one backend creates, each with its reason (the schema parity test declares
/// the same ones in its `BACKEND_ONLY`).
const BACKEND_ONLY_TABLES: [&str; 2] = [
    // PostgreSQL keeps the schema version in a table (SQLite: PRAGMA user_version).
    "muster_schema",
    // A PostgreSQL write's outcome under its operation id, for a retry after a lost COMMIT.
    "operation_ids",
];

/// Each migration step's tables are written once, in `mailbox/src/ops/schema.rs` (issue 32):
/// a backend's own code creates, alters or indexes no table but its own.
#[test]
fn each_table_is_written_once_for_both_backends() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    rust_files(&root.join("mailbox/src/sqlite"), &mut files);
    rust_files(&root.join("mailbox/src/postgres"), &mut files);
    assert!(files.len() > 8, "the backends' sources were found");
    let mut wrong = Vec::new();
    for file in &files {
        let shown = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        let text = std::fs::read_to_string(file).unwrap();
        for (number, code) in library_lines(&text) {
            let upper = code.to_uppercase();
            let ddl = [
                "CREATE TABLE",
                "ALTER TABLE",
                "CREATE INDEX",
                "CREATE UNIQUE INDEX",
            ]
            .iter()
            .find_map(|verb| upper.split_once(verb).map(|(_, after)| after.to_owned()));
            let Some(after) = ddl else { continue };
            let own = BACKEND_ONLY_TABLES
                .iter()
                .any(|table| after.contains(&table.to_uppercase()));
            if !own {
                wrong.push(format!(
                    "{shown}:{number}: write the step once in mailbox/src/ops/schema.rs and list \
                     it in each backend's migrations"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_rule_check_tells_a_definition_from_a_call() {
    // (line, rule, whether the line defines the rule)
    let table = [
        (
            "pub(crate) fn priority_of(kind: &str, sender: MemberKind) -> Priority {",
            "priority_of",
            true,
        ),
        (
            "fn priority_of(kind: &str, sender: MemberKind) -> Priority {",
            "priority_of",
            true,
        ),
        (
            "pub(crate) fn encode_outcome<T: Serialize>(key: &str) -> String {",
            "encode_outcome",
            true,
        ),
        (
            "    priority: priority_of(&kind, sender),",
            "priority_of",
            false,
        ),
        (
            "    let p = rules::send::priority_of(&kind, sender);",
            "priority_of",
            false,
        ),
        ("/// see [`priority_of`]", "priority_of", false),
        (
            "fn priority_of_sender(kind: &str) -> Priority {",
            "priority_of",
            false,
        ),
        (
            "    pub fn stored_body(&self) -> Value {",
            "stored_body",
            false,
        ),
        (
            "fn stored_body(body: &MessageBody, limit: usize) -> StoreResult<String> {",
            "stored_body",
            true,
        ),
    ];
    for (code, rule, defined) in table {
        assert_eq!(defines(code, rule), defined, "{code}");
    }
}

/// The product crates ship no benchmark and no fake model server: those live in `bench/`
/// (`muster-bench`, which `muster bench` runs) and `tests/fake-llm/`.
#[test]
fn the_product_crates_ship_no_benchmark_and_no_fake_model_server() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for krate in CRATES {
        let folder = root.join(krate);
        assert!(
            !folder.join("bench").exists(),
            "{krate}/bench: benchmarks belong in the muster-bench crate (bench/)"
        );
        let manifest =
            std::fs::read_to_string(folder.parent().unwrap().join("Cargo.toml")).unwrap();
        let dependencies = manifest
            .split("\n[")
            .find(|section| section.starts_with("dependencies]"))
            .unwrap_or_default();
        assert!(
            !dependencies.contains("muster-fake-llm"),
            "{krate}/../Cargo.toml: the fake model server may be a dev-dependency only"
        );
    }
}
