//! The batch file: one `{"id", "prompt", "workspace"?, "team"?}` per line, checked whole
//! before anything runs.
//!
//! A bad line refuses the whole file (exit 2), naming every bad line with its number: a batch
//! runs unattended for a long time, so a typo found after hours of runs — or a file whose set of
//! ids changes when the typo is fixed, which resuming keys on — costs more than one more try
//! before anything starts. This is also what every other command does with a configuration
//! error: refuse it before a run is created.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// One line as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLine {
    id: String,
    prompt: String,
    #[serde(default)]
    workspace: Option<PathBuf>,
    #[serde(default)]
    team: Option<PathBuf>,
    /// A git repository a worker clones for the line (with `ref`; `--workers` only).
    #[serde(default)]
    repo: Option<String>,
    #[serde(default, rename = "ref")]
    git_ref: Option<String>,
}

/// Where a line's files come from on a worker: a repository and the ref to check out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineRepo {
    pub url: String,
    pub git_ref: String,
}

/// One task of the batch, its paths resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchLine {
    /// 1-based line number in the file.
    pub number: usize,
    pub id: String,
    pub prompt: String,
    /// The workspace, canonical (the project root when the line names none): lines with the
    /// same workspace never run at the same time.
    pub workspace: PathBuf,
    /// The team file, absolute, when the line asks for a team run.
    pub team: Option<PathBuf>,
    /// `repo` and `ref`: the files a worker clones for the line.
    pub repo: Option<LineRepo>,
}

/// A checked batch file.
#[derive(Debug, Clone)]
pub struct BatchFile {
    /// The file, absolute.
    pub path: PathBuf,
    /// What the runs of this file record before `#` in their `batch_line_id`: the file's path
    /// relative to the project root (absolute when the file lies outside it), so two batch
    /// files with the same ids in one project do not skip each other's lines.
    pub key: String,
    pub lines: Vec<BatchLine>,
}

impl BatchFile {
    /// The `batch_line_id` a line's runs record.
    pub fn line_key(&self, id: &str) -> String {
        format!("{}#{id}", self.key)
    }

    pub fn line(&self, id: &str) -> Option<&BatchLine> {
        self.lines.iter().find(|line| line.id == id)
    }
}

/// What is wrong with one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineProblem {
    pub number: usize,
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum BatchFileError {
    #[error("cannot read the batch file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}", describe(path, problems))]
    BadLines {
        path: PathBuf,
        problems: Vec<LineProblem>,
    },
}

fn describe(path: &Path, problems: &[LineProblem]) -> String {
    let count = problems.len();
    let mut text = format!(
        "the batch file {} has {count} bad line{}; nothing was run:",
        path.display(),
        if count == 1 { "" } else { "s" }
    );
    for problem in problems {
        text.push_str(&format!("\n  line {}: {}", problem.number, problem.message));
    }
    text
}

/// Reads and checks `path`; relative `workspace` and `team` paths are resolved against `root`
/// (the project root).
pub fn load(path: &Path, root: &Path) -> Result<BatchFile, BatchFileError> {
    let read_error = |source| BatchFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let absolute = std::fs::canonicalize(path).map_err(read_error)?;
    let text = std::fs::read_to_string(&absolute).map_err(read_error)?;
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let (lines, problems) = parse(&text, &root);
    if !problems.is_empty() {
        return Err(BatchFileError::BadLines {
            path: path.to_path_buf(),
            problems,
        });
    }
    let key = match absolute.strip_prefix(&root) {
        Ok(relative) => relative.display().to_string(),
        Err(_) => absolute.display().to_string(),
    };
    Ok(BatchFile {
        path: absolute,
        key,
        lines,
    })
}

/// Every line's task, or what is wrong with it. Blank lines are skipped.
pub fn parse(text: &str, root: &Path) -> (Vec<BatchLine>, Vec<LineProblem>) {
    let mut lines = Vec::new();
    let mut problems = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (index, text) in text.lines().enumerate() {
        let number = index + 1;
        if text.trim().is_empty() {
            continue;
        }
        match check_line(text, root) {
            Ok(line) => {
                if let Some(first) = seen.get(&line.id) {
                    problems.push(LineProblem {
                        number,
                        message: format!("id {:?} is already used on line {first}", line.id),
                    });
                    continue;
                }
                seen.insert(line.id.clone(), number);
                lines.push(BatchLine { number, ..line });
            }
            Err(message) => problems.push(LineProblem { number, message }),
        }
    }
    (lines, problems)
}

fn check_line(text: &str, root: &Path) -> Result<BatchLine, String> {
    let raw: RawLine = serde_json::from_str(text).map_err(json_message)?;
    if raw.id.trim().is_empty() {
        return Err("\"id\" is empty".into());
    }
    if raw.id.chars().any(char::is_control) {
        return Err(format!("\"id\" {:?} contains a control character", raw.id));
    }
    if raw.prompt.trim().is_empty() {
        return Err(format!("\"prompt\" of {:?} is empty", raw.id));
    }
    let workspace = match &raw.workspace {
        None => root.to_path_buf(),
        Some(dir) => {
            let dir = root.join(dir);
            match std::fs::canonicalize(&dir) {
                Ok(dir) if dir.is_dir() => dir,
                Ok(_) => return Err(format!("workspace {} is not a directory", dir.display())),
                Err(e) => return Err(format!("workspace {}: {e}", dir.display())),
            }
        }
    };
    let team = match &raw.team {
        None => None,
        Some(file) => {
            let file = root.join(file);
            if !file.is_file() {
                return Err(format!("team file {} does not exist", file.display()));
            }
            Some(file)
        }
    };
    let repo = match (raw.repo, raw.git_ref) {
        (None, None) => None,
        (Some(url), Some(git_ref)) if !url.trim().is_empty() && !git_ref.trim().is_empty() => {
            if raw.workspace.is_some() || raw.team.is_some() {
                return Err(format!(
                    "line {:?} has \"repo\" with \"workspace\" or \"team\"; a line's files \
                     come from one of them",
                    raw.id
                ));
            }
            Some(LineRepo { url, git_ref })
        }
        (Some(_), None) | (None, Some(_)) => {
            return Err(format!(
                "line {:?} needs both \"repo\" and \"ref\" (the repository a worker clones \
                 and what it checks out)",
                raw.id
            ));
        }
        _ => {
            return Err(format!(
                "\"repo\" and \"ref\" of {:?} must not be empty",
                raw.id
            ));
        }
    };
    Ok(BatchLine {
        number: 0,
        id: raw.id,
        prompt: raw.prompt,
        workspace,
        team,
        repo,
    })
}

/// serde_json's message without its "at line 1 column N" (every line is line 1 to it).
fn json_message(error: serde_json::Error) -> String {
    let text = error.to_string();
    let message = match text.rfind(" at line ") {
        Some(at) => &text[..at],
        None => text.as_str(),
    };
    match error.classify() {
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
            format!("not a JSON object: {message} (column {})", error.column())
        }
        _ => message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn every_bad_line_is_named_with_its_number_and_blank_lines_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("ws")).unwrap();
        let text = [
            r#"{"id": "a", "prompt": "one"}"#,
            "",
            r#"{"id": "b", "prompt": "two", "workspace": "ws"}"#,
            r#"{"id": "a", "prompt": "again"}"#,
            r#"{"id": "c"}"#,
            r#"{"id": "d", "prompt": "x", "worksapce": "ws"}"#,
            r#"{"id": "e", "prompt": "x", "workspace": "missing"}"#,
            r#"{"id": "f", "prompt": "x", "team": "nope.toml"}"#,
            "not json",
            r#"{"id": "", "prompt": "x"}"#,
            r#"{"id": 7, "prompt": "x"}"#,
        ]
        .join("\n");
        let (lines, problems) = parse(&text, &root);
        assert_eq!(
            lines
                .iter()
                .map(|l| (l.number, l.id.as_str()))
                .collect::<Vec<_>>(),
            [(1, "a"), (3, "b")]
        );
        assert_eq!(lines[0].workspace, root);
        assert_eq!(lines[1].workspace, root.join("ws"));
        let numbers: Vec<usize> = problems.iter().map(|p| p.number).collect();
        assert_eq!(numbers, [4, 5, 6, 7, 8, 9, 10, 11]);
        let messages: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
        assert!(
            messages[0].contains("already used on line 1"),
            "{messages:?}"
        );
        assert!(
            messages[1].contains("missing field `prompt`"),
            "{messages:?}"
        );
        assert!(
            messages[2].contains("unknown field `worksapce`"),
            "{messages:?}"
        );
        assert!(messages[3].contains("missing"), "{messages:?}");
        assert!(messages[4].contains("team file"), "{messages:?}");
        assert!(messages[5].starts_with("not a JSON object"), "{messages:?}");
        assert!(messages[6].contains("empty"), "{messages:?}");
        assert!(messages[7].contains("invalid type"), "{messages:?}");
        assert!(!messages.iter().any(|m| m.contains("at line 1")));
    }

    #[test]
    fn a_repository_line_names_both_repo_and_ref_and_nothing_else_of_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("ws")).unwrap();
        // Ok: the repository and ref; Err: what the refusal says.
        type Expected = Result<(&'static str, &'static str), &'static str>;
        let rows: [(&str, Expected); 5] = [
            (
                r#"{"id": "a", "prompt": "x", "repo": "/r.git", "ref": "main"}"#,
                Ok(("/r.git", "main")),
            ),
            (
                r#"{"id": "b", "prompt": "x", "repo": "/r.git"}"#,
                Err("both"),
            ),
            (r#"{"id": "c", "prompt": "x", "ref": "main"}"#, Err("both")),
            (
                r#"{"id": "d", "prompt": "x", "repo": "", "ref": "main"}"#,
                Err("must not be empty"),
            ),
            (
                r#"{"id": "e", "prompt": "x", "repo": "/r.git", "ref": "v1", "workspace": "ws"}"#,
                Err("come from one of them"),
            ),
        ];
        for (text, expected) in rows {
            let (lines, problems) = parse(text, &root);
            match expected {
                Ok((url, git_ref)) => {
                    let repo = lines[0].repo.clone().unwrap();
                    assert_eq!((repo.url.as_str(), repo.git_ref.as_str()), (url, git_ref));
                }
                Err(message) => {
                    assert!(lines.is_empty(), "{text}");
                    assert!(
                        problems[0].message.contains(message),
                        "{text}: {problems:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_key_is_the_path_relative_to_the_project_root() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("jobs")).unwrap();
        let path = dir.path().join("jobs/tasks.jsonl");
        std::fs::write(&path, "{\"id\": \"x\", \"prompt\": \"p\"}\n").unwrap();
        let file = load(&path, dir.path()).unwrap();
        assert_eq!(file.key, "jobs/tasks.jsonl");
        assert_eq!(file.line_key("x"), "jobs/tasks.jsonl#x");
        assert!(file.line("x").is_some());
    }
}
