//! Slash commands as Claude Code reads them: Markdown files (front matter optional) under the
//! project's `.claude/commands/`, the user's `~/.claude/commands/` and each plugin's
//! `commands/`, named after the file and namespaced by folder (`.claude/commands/git/pr.md`
//! is `/git:pr`; a plugin's are `/<plugin>:…`). A prompt `/name args` expands to the
//! command's text with its arguments put in (`$ARGUMENTS`, `$1`…`$9`); the caller then runs its
//! shell snippets (``!`command` ``) as the agent's `Bash` calls would run (see
//! `orchestrator/src/command_prompt.rs`). Command text needs no trust: a snippet runs only
//! when the permission engine allows it.
//!
//! Front matter read: `description` (else the body's first paragraph), `argument-hint`,
//! `model` (the run's model when no `--model` is given), `allowed-tools` (shown and not
//! applied, as in skills: see `crate::skills`).

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::diagnostic::{Diagnostic, Loaded};
use crate::front_matter::{FrontMatter, first_paragraph};
use crate::plugins::{Plugin, PluginScope};
use crate::project::ProjectRoot;

/// One slash command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlashCommand {
    /// `folder:…:file` (without `.md`), `plugin:…` for a plugin's.
    pub name: String,
    pub description: String,
    #[serde(rename = "argument-hint", skip_serializing_if = "Option::is_none")]
    pub argument_hint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(rename = "allowed-tools", skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<String>,
    /// The text after the front matter.
    #[serde(skip)]
    pub body: String,
    pub path: PathBuf,
    pub scope: PluginScope,
}

impl crate::plugins::FolderEntry for SlashCommand {
    fn label(&self) -> String {
        format!("command `/{}`", self.name)
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn path(&self) -> &Path {
        &self.path
    }
    fn scope(&self) -> &PluginScope {
        &self.scope
    }
}

/// A prompt read as `/name arguments`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation<'p> {
    pub name: &'p str,
    pub arguments: &'p str,
}

/// Reads `/name arguments` from a prompt; `None` when the prompt is not shaped so (a path such
/// as `/usr/bin`, with a second `/`, is not a command).
pub fn invocation(prompt: &str) -> Option<Invocation<'_>> {
    let rest = prompt.trim_start().strip_prefix('/')?;
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let name = &rest[..end];
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'));
    valid.then(|| Invocation {
        name,
        arguments: rest[end..].trim(),
    })
}

impl SlashCommand {
    /// The text with `arguments` put in: `$ARGUMENTS` is all of them, `$1`…`$9` each (split as
    /// a shell splits words; a missing one is empty). A text with no placeholder gets the
    /// arguments appended as `ARGUMENTS: …`, as Claude Code does.
    pub fn with_arguments(&self, arguments: &str) -> String {
        let words = shlex::split(arguments)
            .unwrap_or_else(|| arguments.split_whitespace().map(str::to_owned).collect());
        let mut text = String::with_capacity(self.body.len() + arguments.len());
        let mut placed = false;
        let mut rest = self.body.as_str();
        while let Some(at) = rest.find('$') {
            text.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            if let Some(tail) = after.strip_prefix("ARGUMENTS") {
                text.push_str(arguments);
                placed = true;
                rest = tail;
            } else if let Some(digit) = after.chars().next().filter(|c| ('1'..='9').contains(c)) {
                let index = digit as usize - '1' as usize;
                text.push_str(words.get(index).map_or("", String::as_str));
                placed = true;
                rest = &after[1..];
            } else {
                text.push('$');
                rest = after;
            }
        }
        text.push_str(rest);
        if !placed && !arguments.is_empty() {
            text = format!("{}\n\nARGUMENTS: {arguments}", text.trim_end());
        }
        text.trim().to_owned()
    }
}

/// The shell snippets (``!`command` ``) of an expanded text, outside fenced code blocks (an
/// example in a fence is text, not something to run), with where each lies.
pub fn shell_snippets(text: &str) -> Vec<(Range<usize>, String)> {
    let mut snippets = Vec::new();
    let mut offset = 0;
    let mut fenced = false;
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with("```") || line.trim_start().starts_with("~~~") {
            fenced = !fenced;
        } else if !fenced {
            let mut from = 0;
            while let Some(start) = line[from..].find("!`").map(|at| at + from) {
                let body = start + 2;
                let Some(length) = line[body..].find('`') else {
                    break;
                };
                let command = &line[body..body + length];
                if !command.trim().is_empty() {
                    snippets.push((
                        offset + start..offset + body + length + 1,
                        command.trim().to_owned(),
                    ));
                }
                from = body + length + 1;
            }
        }
        offset += line.len();
    }
    snippets
}

/// Every command by name (the user's over the project's over a plugin's, as for skills).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CommandCatalog {
    commands: BTreeMap<String, SlashCommand>,
}

impl CommandCatalog {
    /// The commands of the project at `root`, of the user at `home` (none when `None`) and of
    /// every plugin found. Never fails on one file: what does not read is skipped with a
    /// warning.
    pub fn load(root: &ProjectRoot, home: Option<&Path>) -> Loaded<CommandCatalog> {
        crate::plugins::with_plugins(root, home, |plugins| Self::load_with(root, home, plugins))
    }

    /// As [`CommandCatalog::load`], with the plugins already found.
    pub fn load_with(
        root: &ProjectRoot,
        home: Option<&Path>,
        plugins: &[Plugin],
    ) -> Loaded<CommandCatalog> {
        let mut warnings = Vec::new();
        let commands = crate::plugins::by_name(
            crate::plugins::sources(root, home, plugins, "commands"),
            |directory| markdown_files_under(directory, 0),
            read_command,
            &mut warnings,
        );
        Loaded {
            value: CommandCatalog { commands },
            warnings,
        }
    }

    /// The command `name` means: its full name, else the one command whose last part is
    /// `name` (`/pr` for `/git:pr` when no other command ends so).
    pub fn find(&self, name: &str) -> Result<&SlashCommand, CommandLookup> {
        if let Some(command) = self.commands.get(name) {
            return Ok(command);
        }
        let ending = format!(":{name}");
        let matching: Vec<&SlashCommand> = self
            .commands
            .values()
            .filter(|command| command.name.ends_with(&ending))
            .collect();
        match matching.as_slice() {
            [one] => Ok(one),
            [] => Err(CommandLookup::Unknown),
            several => Err(CommandLookup::Ambiguous(
                several.iter().map(|c| c.name.clone()).collect(),
            )),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.commands.is_empty()
    }

    /// Every command, by name.
    pub fn iter(&self) -> impl Iterator<Item = &SlashCommand> {
        self.commands.values()
    }

    /// The warning naming the commands that set `allowed-tools` (shown, not applied).
    pub fn allowed_tools_warning(&self) -> Option<Diagnostic> {
        let names: Vec<String> = self
            .iter()
            .filter(|command| command.allowed_tools.is_some())
            .map(|command| format!("/{}", command.name))
            .collect();
        crate::skills::allowed_tools_warning(&names, "command")
    }
}

/// Why a command name found no command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandLookup {
    Unknown,
    /// Several commands end with the name: their full names.
    Ambiguous(Vec<String>),
}

/// How deep command folders nest at most.
const MAX_DEPTH: usize = 8;

/// The `*.md` files under `directory`, in path order.
fn markdown_files_under(directory: &Path, depth: usize) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(directory) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    paths.sort();
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() && depth < MAX_DEPTH {
            files.extend(markdown_files_under(&path, depth + 1));
        } else if path.extension().is_some_and(|ext| ext == "md") && path.is_file() {
            files.push(path);
        }
    }
    files
}

/// The command in `path` under `directory`; `None` (with a warning) when it does not read.
fn read_command(
    directory: &Path,
    path: &Path,
    scope: &PluginScope,
    warnings: &mut Vec<Diagnostic>,
) -> Option<SlashCommand> {
    let label = path.display().to_string();
    let text = match std::fs::read(path).map(String::from_utf8) {
        Ok(Ok(text)) => text,
        Ok(Err(_)) => {
            warnings.push(
                Diagnostic::new("skipped: expected UTF-8 text, found invalid bytes")
                    .in_source(label),
            );
            return None;
        }
        Err(error) => {
            warnings.push(
                Diagnostic::new(format!("skipped: cannot read it: {error}")).in_source(label),
            );
            return None;
        }
    };
    let (front, found) = FrontMatter::read(&label, &text);
    warnings.extend(found);
    let relative = path
        .strip_prefix(directory)
        .unwrap_or(path)
        .with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let PluginScope::Plugin(plugin) = scope {
        parts.insert(0, plugin.clone());
    }
    let name = parts.join(":");
    if name.chars().any(char::is_whitespace) {
        warnings.push(
            Diagnostic::new(format!(
                "skipped: a command's name cannot hold spaces, found `/{name}`; rename the file"
            ))
            .in_source(label),
        );
        return None;
    }
    let description = front
        .get("description")
        .map(str::to_owned)
        .unwrap_or_else(|| first_paragraph(&front.body));
    Some(SlashCommand {
        name,
        description,
        argument_hint: front.get("argument-hint").map(str::to_owned),
        model: front.get("model").map(str::to_owned),
        allowed_tools: front.get("allowed-tools").map(str::to_owned),
        body: front.body.clone(),
        path: path.to_path_buf(),
        scope: scope.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command(body: &str) -> SlashCommand {
        SlashCommand {
            name: "c".into(),
            description: String::new(),
            argument_hint: None,
            model: None,
            allowed_tools: None,
            body: body.into(),
            path: PathBuf::from("c.md"),
            scope: PluginScope::Project,
        }
    }

    #[test]
    fn arguments_go_where_claude_code_puts_them() {
        let cases = [
            (
                "Review $ARGUMENTS now",
                "src/lib.rs -v",
                "Review src/lib.rs -v now",
            ),
            (
                "Fix #$1 with priority $2",
                "123 high",
                "Fix #123 with priority high",
            ),
            ("Quoted $1|$2", "'a b' c", "Quoted a b|c"),
            ("Missing [$3]", "x", "Missing []"),
            ("Costs $5 and $", "", "Costs  and $"),
            (
                "No placeholder",
                "extra words",
                "No placeholder\n\nARGUMENTS: extra words",
            ),
            ("No placeholder", "", "No placeholder"),
        ];
        for (body, arguments, expected) in cases {
            assert_eq!(command(body).with_arguments(arguments), expected, "{body}");
        }
    }

    #[test]
    fn invocations_and_snippets() {
        assert_eq!(
            invocation("/review src/lib.rs"),
            Some(Invocation {
                name: "review",
                arguments: "src/lib.rs"
            })
        );
        assert_eq!(invocation(" /git:pr").map(|i| i.name), Some("git:pr"));
        for not_a_command in ["/usr/bin is a path", "review", "/", "/ x"] {
            assert_eq!(invocation(not_a_command), None, "{not_a_command}");
        }
        let text = "Status: !`git status`\n```\n!`rm -rf /`\n```\nLog: !`git log -1` and !``\n";
        let found: Vec<String> = shell_snippets(text).into_iter().map(|(_, c)| c).collect();
        assert_eq!(found, ["git status", "git log -1"]);
        let (range, _) = &shell_snippets(text)[0];
        assert_eq!(&text[range.clone()], "!`git status`");
    }
}
