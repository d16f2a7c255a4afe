//! Property tests: random bytes and random mutations of valid files never make a parser
//! panic; each input gives a value or an error.

use muster_config::agents::{AgentDir, parse_agent_file};
use muster_config::origin::Layer;
use muster_config::settings::parse_settings_file;
use muster_config::{AgentCatalog, Policy, TeamFile};
use proptest::prelude::*;

const SETTINGS: &str = include_str!("../../../examples/config/settings.toml");
const TEAM: &str = include_str!("../../../examples/config/muster.team.toml");
const POLICY: &str = include_str!("../../../examples/config/policy.toml");
const AGENT: &str = include_str!("../../../examples/config/agents/reviewer.md");

/// One edit of a text.
#[derive(Debug, Clone)]
enum Mutation {
    Delete { at: usize, len: usize },
    Insert { at: usize, text: String },
    DuplicateLine { line: usize },
    SwapLines { first: usize, second: usize },
    Truncate { at: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let syntax = prop::sample::select(vec![
        "[", "]", "[[", "{", "}", "\"", "'", "=", ":", "-", "---\n", "\n", " ", "  ", ",", "#",
        "*", "&a", "*a", "!!", "|", ">", "\\", "\u{0}", "é", "0x", "1e999", "-1", "true", "~", "(",
        ")",
    ]);
    prop_oneof![
        (any::<usize>(), 0usize..20).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (any::<usize>(), syntax).prop_map(|(at, text)| Mutation::Insert {
            at,
            text: text.to_string()
        }),
        (any::<usize>(), "[ -~]{0,8}").prop_map(|(at, text)| Mutation::Insert { at, text }),
        any::<usize>().prop_map(|line| Mutation::DuplicateLine { line }),
        (any::<usize>(), any::<usize>())
            .prop_map(|(first, second)| Mutation::SwapLines { first, second }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
    ]
}

fn boundary(text: &str, at: usize) -> usize {
    let mut at = at % (text.len() + 1);
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn apply(text: &str, mutation: &Mutation) -> String {
    match mutation {
        Mutation::Delete { at, len } => {
            let start = boundary(text, *at);
            let end = boundary(text, (start + len).min(text.len()));
            let end = end.max(start);
            format!("{}{}", &text[..start], &text[end..])
        }
        Mutation::Insert { at, text: inserted } => {
            let at = boundary(text, *at);
            format!("{}{inserted}{}", &text[..at], &text[at..])
        }
        Mutation::DuplicateLine { line } => {
            let mut lines: Vec<&str> = text.lines().collect();
            if !lines.is_empty() {
                let index = line % lines.len();
                lines.insert(index, lines[index]);
            }
            lines.join("\n")
        }
        Mutation::SwapLines { first, second } => {
            let mut lines: Vec<&str> = text.lines().collect();
            if !lines.is_empty() {
                let count = lines.len();
                lines.swap(first % count, second % count);
            }
            lines.join("\n")
        }
        Mutation::Truncate { at } => text[..boundary(text, *at)].to_string(),
    }
}

fn mutated(original: &'static str) -> impl Strategy<Value = String> {
    prop::collection::vec(mutation(), 1..6).prop_map(move |mutations| {
        mutations
            .iter()
            .fold(original.to_string(), |text, mutation| {
                apply(&text, mutation)
            })
    })
}

fn random_text() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<u8>(), 0..400)
        .prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
}

/// Runs every parser; each must return (not panic). The result is ignored on purpose.
fn parse_everything(text: &str) {
    let catalog = AgentCatalog::built_in().unwrap();
    let _ = parse_settings_file("fuzz.toml", text, Layer::Project);
    let _ = parse_agent_file("fuzz.md", text, AgentDir::Muster);
    let _ = parse_agent_file("fuzz.md", text, AgentDir::Claude);
    let _ = TeamFile::parse("fuzz.toml", text, &catalog);
    let _ = Policy::parse("fuzz.toml", text);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(text in random_text()) {
        parse_everything(&text);
        parse_everything(&format!("---\n{text}\n---\nbody"));
    }

    #[test]
    fn mutated_settings_never_panic(text in mutated(SETTINGS)) {
        let _ = parse_settings_file("fuzz.toml", &text, Layer::Project);
    }

    #[test]
    fn loading_mutated_settings_never_panics(text in mutated(SETTINGS)) {
        let project = super::fixtures::Project::new();
        project.write(".muster/settings.toml", &text);
        let _ = project.load();
    }

    #[test]
    fn mutated_agent_files_never_panic(text in mutated(AGENT)) {
        let _ = parse_agent_file("fuzz.md", &text, AgentDir::Muster);
        let _ = parse_agent_file("fuzz.md", &text, AgentDir::Claude);
    }

    #[test]
    fn mutated_team_files_never_panic(text in mutated(TEAM)) {
        let catalog = AgentCatalog::built_in().unwrap();
        let _ = TeamFile::parse("fuzz.toml", &text, &catalog);
    }

    #[test]
    fn mutated_policy_files_never_panic(text in mutated(POLICY)) {
        let _ = Policy::parse("fuzz.toml", &text);
    }
}

#[test]
fn an_unknown_key_added_to_a_valid_file_is_reported_with_its_position() {
    // A fixed mutation: an unknown key, reported with its line and column.
    let text = format!("{SETTINGS}\nbogus_key = 1\n");
    let errors = parse_settings_file("s.toml", &text, Layer::Project).unwrap_err();
    assert_eq!(errors.len(), 1);
    assert!(errors[0].line.is_some() && errors[0].column.is_some());
}
