//! Permission rules in the `Tool(pattern)` form users know from Claude Code:
//! `Bash(git diff:*)`, `Edit(src/**)`, `Read(./.env)`, `Agent(Plan)`, or a bare `Tool`.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use globset::{GlobBuilder, GlobMatcher};
use serde::{Serialize, Serializer};

use crate::diagnostic::suggestion_suffix;
use crate::origin::Sourced;
use crate::tools::{canonical_tool_name, known_tool_names};
use muster_protocol::ToolName;

/// What a matching rule does. `Ord` is precedence: deny beats ask beats allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleBehavior {
    Allow,
    Ask,
    Deny,
}

impl RuleBehavior {
    pub fn as_str(self) -> &'static str {
        match self {
            RuleBehavior::Allow => "allow",
            RuleBehavior::Ask => "ask",
            RuleBehavior::Deny => "deny",
        }
    }
}

/// One parsed rule: the tool it is about and which calls of it match.
#[derive(Debug, Clone)]
pub struct PermissionRule {
    tool: &'static str,
    specifier: RuleSpecifier,
    text: String,
}

/// Which calls of the rule's tool match.
#[derive(Debug, Clone)]
pub enum RuleSpecifier {
    /// `Bash` or `Bash(*)`: every call.
    AnyCall,
    /// `Bash(git diff:*)`: the command is `git diff` or starts with `git diff` and a space.
    CommandPrefix(String),
    /// `Bash(npm run *)` or `Bash(cargo test)`: the whole command, `*` matching any text.
    Command(String),
    /// `Edit(src/**)`, `Read(./.env)`: a path glob (file tools).
    Path(PathPattern),
    /// `Agent(Plan)`, `SendMessage(lead)`: the name the call is about (`*` matches any text).
    Name(String),
    /// `mcp__srv`, `mcp__srv__*`, `mcp__srv__tool`: MCP tools (valid whether or not the
    /// server is configured).
    Mcp(crate::mcp::McpPattern),
}

/// The tool an MCP rule is recorded under: no real tool has this name, so only
/// [`RuleSpecifier::Mcp`] decides what it matches.
pub const MCP_RULE_TOOL: &str = "mcp";

/// A path glob from a file-tool rule, in Claude Code's gitignore-style grammar:
/// - `//abs/**` is absolute;
/// - `~/x` is under the home directory;
/// - `/x` is relative to the settings file ([`RuleBase`]): for the project's files (and the
///   command line, the environment, team files and grants) the project root, which each agent
///   sees as its own workspace (a teammate's worktree), so a deny on `/.env` holds for
///   `<worktree>/.env`;
/// - `./x` and bare `x` are relative to the workspace; a pattern without `/` (after `./`)
///   matches at any depth (`*.env`).
///
/// A trailing `/` names a directory and what is under it; a pattern matching a directory
/// matches everything beneath it, as in gitignore.
#[derive(Debug, Clone)]
pub struct PathPattern {
    glob: String,
    anchor: PathAnchor,
    matcher: GlobMatcher,
}

/// What a path pattern is relative to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PathAnchor {
    Workspace,
    Absolute,
    Home,
}

/// What `/x` path patterns are relative to: the directory of the settings file they come from
/// (Claude Code's rule), which for a project's files is the project root.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum RuleBase {
    /// The project root, seen by every agent as its workspace root.
    #[default]
    ProjectRoot,
    /// A directory outside the project (a user-level settings file's).
    Directory(std::path::PathBuf),
}

impl PathPattern {
    fn parse(pattern: &str, base: &RuleBase) -> Result<PathPattern, RuleParseError> {
        let (anchor, rest) = if let Some(rest) = pattern.strip_prefix("//") {
            (PathAnchor::Absolute, format!("/{rest}"))
        } else if let Some(rest) = pattern.strip_prefix("~/") {
            (PathAnchor::Home, rest.to_string())
        } else if let Some(rest) = pattern.strip_prefix('/') {
            match base {
                RuleBase::ProjectRoot => (PathAnchor::Workspace, rest.to_string()),
                RuleBase::Directory(directory) => {
                    let directory = globset::escape(&directory.display().to_string());
                    let directory = directory.trim_end_matches('/');
                    (PathAnchor::Absolute, format!("{directory}/{rest}"))
                }
            }
        } else {
            let relative = pattern.strip_prefix("./").unwrap_or(pattern);
            let glob = if relative.trim_end_matches('/').contains('/') {
                relative.to_string()
            } else {
                format!("**/{relative}")
            };
            (PathAnchor::Workspace, glob)
        };
        // `dir/` names the directory's contents (the directory itself matches below).
        let rest = match rest.strip_suffix('/') {
            Some(directory) if !directory.is_empty() => format!("{directory}/**"),
            _ => rest,
        };
        let matcher = GlobBuilder::new(&rest)
            .literal_separator(true)
            .build()
            .map_err(|error| RuleParseError::InvalidGlob {
                pattern: pattern.to_string(),
                reason: error.kind().to_string(),
            })?
            .compile_matcher();
        Ok(PathPattern {
            glob: rest,
            anchor,
            matcher,
        })
    }

    /// The glob as compiled (after `./`, `/` and `//` handling).
    pub fn glob(&self) -> &str {
        &self.glob
    }

    pub fn anchor(&self) -> PathAnchor {
        self.anchor
    }

    /// Whether `path` or a directory it lies in matches; give it relative to the workspace for
    /// `Workspace` patterns, absolute for `Absolute` ones and relative to the home directory
    /// for `Home` ones.
    pub fn is_match(&self, path: &Path) -> bool {
        self.matcher.is_match(path)
            || path
                .ancestors()
                .skip(1)
                .filter(|dir| !dir.as_os_str().is_empty() && *dir != Path::new("/"))
                .any(|dir| self.matcher.is_match(dir))
    }
}

/// What a tool call is about, for matching a rule's pattern.
#[derive(Debug, Clone, Copy)]
pub enum RuleSubject<'a> {
    /// A Bash command line.
    Command(&'a str),
    /// A path, anchored as [`PathPattern::is_match`] expects.
    Path(&'a Path),
    /// A name: the definition of an `Agent` call, the recipient of `SendMessage`, …
    Name(&'a str),
    /// The call has nothing a pattern could match; only pattern-less rules match.
    Nothing,
}

impl PermissionRule {
    /// The tool this rule names (aliases mapped: `Task` is `Agent`).
    pub fn tool(&self) -> &'static str {
        self.tool
    }

    pub fn specifier(&self) -> &RuleSpecifier {
        &self.specifier
    }

    /// The rule as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether this rule is about `tool`: the same tool, or an `Edit(...)` rule for any file
    /// editing tool, or a `Read(...)` rule for any file reading tool.
    pub fn applies_to_tool(&self, tool: &str) -> bool {
        if let RuleSpecifier::Mcp(pattern) = &self.specifier {
            return pattern.matches_name(tool);
        }
        if self.tool == tool {
            return true;
        }
        // `Edit(...)` covers every file-editing tool, `Read(...)` every file-reading one.
        let Some(called) = ToolName::parse(tool) else {
            return false;
        };
        match ToolName::parse(self.tool) {
            Some(ToolName::Edit) => called.edits_files(),
            Some(ToolName::Read) => called.reads_files(),
            _ => false,
        }
    }

    /// Whether a call of `tool` about `subject` matches this rule.
    pub fn matches(&self, tool: &str, subject: RuleSubject<'_>) -> bool {
        if !self.applies_to_tool(tool) {
            return false;
        }
        match (&self.specifier, subject) {
            (RuleSpecifier::AnyCall | RuleSpecifier::Mcp(_), _) => true,
            (RuleSpecifier::CommandPrefix(prefix), RuleSubject::Command(command)) => {
                let command = command.trim();
                command == prefix
                    || command
                        .strip_prefix(prefix.as_str())
                        .is_some_and(|rest| rest.starts_with(char::is_whitespace))
            }
            (RuleSpecifier::Command(pattern), RuleSubject::Command(command)) => {
                wildcard_match(pattern, command.trim())
            }
            (RuleSpecifier::Path(pattern), RuleSubject::Path(path)) => pattern.is_match(path),
            (RuleSpecifier::Name(pattern), RuleSubject::Name(name)) => {
                wildcard_match(pattern, name)
            }
            _ => false,
        }
    }
}

impl PermissionRule {
    /// Whether every call `other` matches is matched by this rule too (conservatively: when
    /// unsure, no). A policy grants a plan's rule only when one of its `permissions.allow`
    /// rules covers it.
    pub fn covers(&self, other: &PermissionRule) -> bool {
        if !self.applies_to_tool(other.tool) && self.text != other.text {
            return false;
        }
        match (&self.specifier, &other.specifier) {
            (RuleSpecifier::AnyCall, _) => true,
            (_, RuleSpecifier::AnyCall) => false,
            (RuleSpecifier::CommandPrefix(mine), RuleSpecifier::CommandPrefix(theirs))
            | (RuleSpecifier::CommandPrefix(mine), RuleSpecifier::Command(theirs)) => {
                theirs == mine
                    || theirs
                        .strip_prefix(mine.as_str())
                        .is_some_and(|rest| rest.starts_with(' '))
            }
            (RuleSpecifier::Command(mine), RuleSpecifier::Command(theirs)) => {
                wildcard_match(mine, theirs)
            }
            (RuleSpecifier::Path(mine), RuleSpecifier::Path(theirs)) => {
                mine.anchor == theirs.anchor && (mine.glob == theirs.glob || mine.glob == "**")
            }
            (RuleSpecifier::Name(mine), RuleSpecifier::Name(theirs)) => {
                wildcard_match(mine, theirs)
            }
            (RuleSpecifier::Mcp(mine), RuleSpecifier::Mcp(_)) => {
                self.text == other.text || mine.matches_name(&other.text)
            }
            _ => false,
        }
    }
}

/// `*` matches any text (including none); everything else literally.
fn wildcard_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let [first, middle @ .., last] = parts.as_slice() else {
        return pattern == text;
    };
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    for part in middle {
        match rest.find(part) {
            Some(index) => rest = &rest[index + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

impl fmt::Display for PermissionRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl PartialEq for PermissionRule {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Serialize for PermissionRule {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

/// Why a rule does not parse. Messages say what was expected and what was found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleParseError {
    #[error("expected a rule like `Tool` or `Tool(pattern)`, found an empty string")]
    Empty,
    #[error("unknown tool `{found}` in rule `{rule}`{suggestion}")]
    UnknownTool {
        rule: String,
        found: String,
        suggestion: String,
    },
    #[error(
        "expected an MCP rule like `mcp__server`, `mcp__server__*` or `mcp__server__tool` (no `(pattern)`), found `{rule}`"
    )]
    McpRule { rule: String },
    #[error("expected `)` at the end of rule `{rule}`")]
    Unclosed { rule: String },
    #[error("expected `Tool(pattern)`, found text after `)` in rule `{rule}`")]
    TrailingText { rule: String },
    #[error("empty pattern in rule `{rule}`; write `{tool}` alone to match every call")]
    EmptyPattern { rule: String, tool: String },
    #[error("invalid path pattern `{pattern}`: {reason}")]
    InvalidGlob { pattern: String, reason: String },
}

impl FromStr for PermissionRule {
    type Err = RuleParseError;

    /// A rule whose `/x` paths are relative to the project root.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        PermissionRule::parse_in(text, &RuleBase::ProjectRoot)
    }
}

impl PermissionRule {
    /// A rule from a settings file whose `/x` paths are relative to `base`.
    pub fn parse_in(text: &str, base: &RuleBase) -> Result<PermissionRule, RuleParseError> {
        let rule = text.trim();
        if rule.is_empty() {
            return Err(RuleParseError::Empty);
        }
        let (tool_text, pattern) = match rule.find('(') {
            None => (rule, None),
            Some(open) => {
                let Some(close) = rule.rfind(')') else {
                    return Err(RuleParseError::Unclosed {
                        rule: rule.to_string(),
                    });
                };
                if close < open {
                    return Err(RuleParseError::Unclosed {
                        rule: rule.to_string(),
                    });
                }
                if close + 1 != rule.len() {
                    return Err(RuleParseError::TrailingText {
                        rule: rule.to_string(),
                    });
                }
                (rule[..open].trim_end(), Some(&rule[open + 1..close]))
            }
        };
        if tool_text.starts_with(crate::mcp::MCP_PREFIX) {
            return mcp_rule(rule, tool_text, pattern);
        }
        let tool = canonical_tool_name(tool_text).ok_or_else(|| RuleParseError::UnknownTool {
            rule: rule.to_string(),
            found: tool_text.to_string(),
            suggestion: suggestion_suffix(tool_text, known_tool_names()),
        })?;
        let specifier = match pattern.map(str::trim) {
            None | Some("*") => RuleSpecifier::AnyCall,
            Some("") => {
                return Err(RuleParseError::EmptyPattern {
                    rule: rule.to_string(),
                    tool: tool.to_string(),
                });
            }
            Some(pattern) => specifier_for(tool, pattern, base)?,
        };
        Ok(PermissionRule {
            tool,
            specifier,
            text: rule.to_string(),
        })
    }
}

/// `mcp__srv`, `mcp__srv__*` or `mcp__srv__tool`; MCP rules take no `(pattern)`.
fn mcp_rule(
    rule: &str,
    tool_text: &str,
    pattern: Option<&str>,
) -> Result<PermissionRule, RuleParseError> {
    let parsed = crate::mcp::McpPattern::parse(tool_text);
    match (parsed, pattern) {
        (Some(parsed), None) => Ok(PermissionRule {
            tool: MCP_RULE_TOOL,
            specifier: RuleSpecifier::Mcp(parsed),
            text: rule.to_string(),
        }),
        _ => Err(RuleParseError::McpRule {
            rule: rule.to_string(),
        }),
    }
}

fn specifier_for(
    tool: &str,
    pattern: &str,
    base: &RuleBase,
) -> Result<RuleSpecifier, RuleParseError> {
    let tool = ToolName::parse(tool);
    if tool.is_some_and(ToolName::takes_command_rules) {
        return Ok(match pattern.strip_suffix(":*") {
            Some(prefix) => RuleSpecifier::CommandPrefix(prefix.trim().to_string()),
            None => RuleSpecifier::Command(pattern.to_string()),
        });
    }
    if tool.is_some_and(ToolName::takes_path_rules) {
        return PathPattern::parse(pattern, base).map(RuleSpecifier::Path);
    }
    Ok(RuleSpecifier::Name(pattern.to_string()))
}

/// A rule with the setting layer (or file) it came from.
pub type SourcedRule = Sourced<PermissionRule>;

/// The allow, ask and deny lists, concatenated over every layer.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PermissionRules {
    pub allow: Vec<SourcedRule>,
    pub ask: Vec<SourcedRule>,
    pub deny: Vec<SourcedRule>,
}

impl PermissionRules {
    /// The list for `behavior`.
    pub fn list(&self, behavior: RuleBehavior) -> &[SourcedRule] {
        match behavior {
            RuleBehavior::Allow => &self.allow,
            RuleBehavior::Ask => &self.ask,
            RuleBehavior::Deny => &self.deny,
        }
    }

    pub(crate) fn list_mut(&mut self, behavior: RuleBehavior) -> &mut Vec<SourcedRule> {
        match behavior {
            RuleBehavior::Allow => &mut self.allow,
            RuleBehavior::Ask => &mut self.ask,
            RuleBehavior::Deny => &mut self.deny,
        }
    }

    /// The strongest matching rule: a deny rule beats an ask rule beats an allow rule.
    pub fn decide(
        &self,
        tool: &str,
        subject: RuleSubject<'_>,
    ) -> Option<(RuleBehavior, &SourcedRule)> {
        [RuleBehavior::Deny, RuleBehavior::Ask, RuleBehavior::Allow]
            .into_iter()
            .find_map(|behavior| {
                self.list(behavior)
                    .iter()
                    .find(|rule| rule.value.matches(tool, subject))
                    .map(|rule| (behavior, rule))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::origin::Origin;

    fn rule(text: &str) -> PermissionRule {
        text.parse().unwrap()
    }

    #[test]
    fn rules_parse_into_typed_specifiers() {
        assert!(matches!(rule("Bash").specifier(), RuleSpecifier::AnyCall));
        assert!(matches!(
            rule("Bash(*)").specifier(),
            RuleSpecifier::AnyCall
        ));
        assert!(
            matches!(rule("Bash(git diff:*)").specifier(), RuleSpecifier::CommandPrefix(p) if p == "git diff")
        );
        assert!(
            matches!(rule("Bash(cargo test)").specifier(), RuleSpecifier::Command(c) if c == "cargo test")
        );
        assert!(matches!(
            rule("Edit(src/**)").specifier(),
            RuleSpecifier::Path(_)
        ));
        assert!(matches!(rule("Agent(Plan)").specifier(), RuleSpecifier::Name(n) if n == "Plan"));
        assert_eq!(rule("Task(Plan)").tool(), "Agent");
    }

    #[test]
    fn bad_rules_say_what_is_wrong() {
        let cases = [
            (
                "",
                "expected a rule like `Tool` or `Tool(pattern)`, found an empty string",
            ),
            (
                "Bsh(ls)",
                "unknown tool `Bsh` in rule `Bsh(ls)` (did you mean `Bash`?)",
            ),
            (
                "Bash(git diff",
                "expected `)` at the end of rule `Bash(git diff`",
            ),
            (
                "Bash(ls) x",
                "expected `Tool(pattern)`, found text after `)` in rule `Bash(ls) x`",
            ),
            (
                "Bash()",
                "empty pattern in rule `Bash()`; write `Bash` alone to match every call",
            ),
            (
                "Edit(src/[)",
                "invalid path pattern `src/[`: unclosed character class; missing ']'",
            ),
            (
                "WebFetch(domain:x)",
                "unknown tool `WebFetch` in rule `WebFetch(domain:x)`",
            ),
        ];
        for (text, expected) in cases {
            let error = text.parse::<PermissionRule>().unwrap_err();
            assert_eq!(error.to_string(), expected, "rule {text:?}");
        }
    }

    #[test]
    fn rules_match_their_subjects() {
        let cases: &[(&str, &str, RuleSubject<'_>, bool)] = &[
            (
                "Bash(git diff:*)",
                "Bash",
                RuleSubject::Command("git diff --stat"),
                true,
            ),
            (
                "Bash(git diff:*)",
                "Bash",
                RuleSubject::Command("git diff"),
                true,
            ),
            (
                "Bash(git diff:*)",
                "Bash",
                RuleSubject::Command("git difftool"),
                false,
            ),
            (
                "Bash(npm run *)",
                "Bash",
                RuleSubject::Command("npm run build"),
                true,
            ),
            (
                "Bash(cargo test)",
                "Bash",
                RuleSubject::Command("cargo test --all"),
                false,
            ),
            (
                "Edit(src/**)",
                "Write",
                RuleSubject::Path(Path::new("src/a/b.rs")),
                true,
            ),
            (
                "Edit(src/**)",
                "Edit",
                RuleSubject::Path(Path::new("tests/a.rs")),
                false,
            ),
            (
                "Read(./.env)",
                "Read",
                RuleSubject::Path(Path::new(".env")),
                true,
            ),
            (
                "Read(./.env)",
                "Grep",
                RuleSubject::Path(Path::new("sub/.env")),
                true,
            ),
            (
                "Read(*.pem)",
                "Read",
                RuleSubject::Path(Path::new("a/b/key.pem")),
                true,
            ),
            (
                "Read(//etc/**)",
                "Read",
                RuleSubject::Path(Path::new("/etc/passwd")),
                true,
            ),
            ("Agent(Plan)", "Agent", RuleSubject::Name("Plan"), true),
            ("Agent(Plan)", "Agent", RuleSubject::Name("general"), false),
            ("Bash", "Bash", RuleSubject::Nothing, true),
            ("Bash(ls)", "Bash", RuleSubject::Nothing, false),
            ("Edit", "Read", RuleSubject::Nothing, false),
        ];
        for (text, tool, subject, expected) in cases {
            assert_eq!(
                rule(text).matches(tool, *subject),
                *expected,
                "{text} on {tool} {subject:?}"
            );
        }
    }

    /// Claude Code's path anchors: (rule, base of `/x`, anchor, path in that anchor's form,
    /// matches).
    #[test]
    fn path_patterns_of_each_anchor_form() {
        use PathAnchor::{Absolute, Home, Workspace};
        let user = RuleBase::Directory("/home/me/.claude".into());
        let project = RuleBase::ProjectRoot;
        let rows: &[(&str, &RuleBase, PathAnchor, &str, bool)] = &[
            // `//abs`: absolute wherever it is written.
            ("Read(//etc/**)", &project, Absolute, "/etc/passwd", true),
            ("Read(//etc/**)", &user, Absolute, "/etc/ssl/a.pem", true),
            ("Read(//etc/**)", &project, Absolute, "/var/etc/x", false),
            // `~/`: under the home directory.
            ("Read(~/.ssh/**)", &project, Home, ".ssh/id_rsa", true),
            (
                "Read(~/.ssh/**)",
                &project,
                Home,
                "other/.ssh/id_rsa",
                false,
            ),
            // `/x`: relative to the settings file — the project root (each workspace) for
            // project files, the file's own directory for a user's.
            ("Read(/.env)", &project, Workspace, ".env", true),
            ("Read(/.env)", &project, Workspace, "sub/.env", false),
            ("Edit(/src/**)", &project, Workspace, "src/a/b.rs", true),
            ("Edit(/src/**)", &project, Workspace, "lib/src/b.rs", false),
            (
                "Read(/secrets.json)",
                &user,
                Absolute,
                "/home/me/.claude/secrets.json",
                true,
            ),
            (
                "Read(/secrets.json)",
                &user,
                Absolute,
                "/secrets.json",
                false,
            ),
            // `./x` and bare `x`: the workspace; without `/`, any depth.
            ("Read(./.env)", &project, Workspace, ".env", true),
            ("Read(./.env)", &project, Workspace, "sub/.env", true),
            (
                "Read(./config/prod.toml)",
                &project,
                Workspace,
                "config/prod.toml",
                true,
            ),
            (
                "Read(./config/prod.toml)",
                &project,
                Workspace,
                "x/config/prod.toml",
                false,
            ),
            ("Read(*.pem)", &user, Workspace, "a/b/key.pem", true),
            ("Read(docs/*.md)", &project, Workspace, "docs/a.md", true),
            (
                "Read(docs/*.md)",
                &project,
                Workspace,
                "docs/sub/a.md",
                false,
            ),
            // A directory pattern covers what is under it, as in gitignore.
            (
                "Read(./secrets/)",
                &project,
                Workspace,
                "secrets/a/key",
                true,
            ),
            ("Read(./secrets)", &project, Workspace, "secrets/key", true),
            ("Read(/build)", &project, Workspace, "build/out/a.o", true),
            ("Read(/build)", &project, Workspace, "src/build.rs", false),
        ];
        for (text, base, anchor, path, expected) in rows {
            let rule = PermissionRule::parse_in(text, base).unwrap();
            let RuleSpecifier::Path(pattern) = rule.specifier() else {
                panic!("{text}: not a path rule");
            };
            assert_eq!(pattern.anchor(), *anchor, "{text} from {base:?}");
            assert_eq!(
                pattern.is_match(Path::new(path)),
                *expected,
                "{text} from {base:?} on {path}"
            );
        }
    }

    /// Claude Code's Bash forms: exact, `:*` prefix at a word boundary, `*` globs.
    #[test]
    fn bash_rules_of_each_form() {
        let rows: &[(&str, &str, bool)] = &[
            ("Bash(npm run build)", "npm run build", true),
            ("Bash(npm run build)", "npm run build --prod", false),
            ("Bash(npm run test:*)", "npm run test", true),
            ("Bash(npm run test:*)", "npm run test -- --watch", true),
            ("Bash(npm run test:*)", "npm run testing", false),
            ("Bash(git * main)", "git push origin main", true),
            ("Bash(git * main)", "git push origin dev", false),
            ("Bash(curl:*)", "curl https://x", true),
            ("Bash(curl:*)", "curly", false),
        ];
        for (text, command, expected) in rows {
            assert_eq!(
                rule(text).matches("Bash", RuleSubject::Command(command)),
                *expected,
                "{text} on {command}"
            );
        }
    }

    #[test]
    fn deny_beats_ask_beats_allow() {
        let sourced = |text: &str| Sourced::new(rule(text), Origin::built_in());
        let rules = PermissionRules {
            allow: vec![sourced("Bash")],
            ask: vec![sourced("Bash(git push:*)")],
            deny: vec![sourced("Bash(git push --force:*)")],
        };
        let decide = |command| {
            rules
                .decide("Bash", RuleSubject::Command(command))
                .map(|(b, _)| b)
        };
        assert_eq!(decide("ls"), Some(RuleBehavior::Allow));
        assert_eq!(decide("git push origin"), Some(RuleBehavior::Ask));
        assert_eq!(decide("git push --force origin"), Some(RuleBehavior::Deny));
        assert_eq!(
            rules.decide("Read", RuleSubject::Nothing).map(|(b, _)| b),
            None
        );
    }
}
