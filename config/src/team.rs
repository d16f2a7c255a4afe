//! Team files (`muster.team.toml` at the project root, or `--team FILE`): the team's name, the
//! lead's definition, teammates, and the `[spawn]` rules for teammates the lead spawns.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::Responder;
use crate::agents::AgentCatalog;
use crate::diagnostic::{ConfigError, Diagnostic, invalid};
use crate::endpoint::AgentEndpoint;
use crate::ids::{check_id, check_teammate_name};
use crate::mode::PermissionMode;
use crate::policy::Policy;
use crate::project::ProjectRoot;
use crate::settings::read_optional;
use crate::toml_source::{Located, SourceText, TableReader};

/// The team file's name at the project root.
pub const TEAM_FILE_NAME: &str = "muster.team.toml";

const TEAM_KEYS: &[&str] = &[
    "name",
    "lead",
    "max_concurrent_teammates",
    "shutdown_timeout_ms",
    "isolation",
    "remote",
    "teammates",
    "spawn",
    "merge",
];
/// How a team's agents share files (team-wide: one value for the whole team).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// A branch and a worktree per teammate; the lead works in the integration worktree.
    Worktree,
    /// Every agent works in the workspace itself.
    Shared,
}

/// Where a teammate runs: in the process that started the run, or on a `muster worker`
/// (DESIGN, "Wave 2 → Workers"; files travel by git through the run's remote).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    #[default]
    Local,
    Workers,
}

impl Placement {
    pub const NAMES: &'static [&'static str] = &["local", "workers"];

    pub fn parse(text: &str) -> Option<Placement> {
        match text {
            "local" => Some(Placement::Local),
            "workers" => Some(Placement::Workers),
            _ => None,
        }
    }
}

impl Isolation {
    pub const NAMES: &'static [&'static str] = &["worktree", "shared"];

    pub fn parse(text: &str) -> Option<Isolation> {
        match text {
            "worktree" => Some(Isolation::Worktree),
            "shared" => Some(Isolation::Shared),
            _ => None,
        }
    }
}

const TEAMMATE_KEYS: &[&str] = &[
    "name",
    "definition",
    "count",
    "plan_mode_required",
    "approver",
    "placement",
    "provider",
    "model",
    "base_url",
    "api_key_env",
];
const MERGE_KEYS: &[&str] = &["test", "test_timeout", "cache", "before_apply"];
const SPAWN_KEYS: &[&str] = &[
    "plan_mode_required",
    "approver",
    "max_mode",
    "definitions",
    "placement",
];

/// Default for `[merge] test_timeout` (seconds).
pub const DEFAULT_TEST_TIMEOUT_SECS: u64 = 600;

/// `[merge]`: the project's test command every merge of a teammate's branch must pass, run on
/// the merged result in a scratch worktree (repository code: it runs only in a trusted
/// project).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MergeGate {
    /// A shell command (`sh -c`), run at the scratch tree's root.
    pub test: String,
    /// Seconds before the command counts as failed (default 600).
    pub test_timeout_secs: u64,
    /// Paths relative to the project root shared by every scratch tree (a build directory):
    /// each is linked into the tree before the command runs.
    pub cache: Vec<String>,
    /// Whether the team's result must pass the command too before it is applied to the user's
    /// working tree at the end of the run (`before_apply`, default false).
    pub before_apply: bool,
}

/// Default for `max_concurrent_teammates`.
pub const DEFAULT_MAX_CONCURRENT: u64 = 4;
/// Default for `shutdown_timeout_ms`: how long a teammate has to answer a `shutdown_request`
/// before it is stopped.
pub const DEFAULT_SHUTDOWN_TIMEOUT_MS: u64 = 10_000;
/// The longest `shutdown_timeout_ms` (one hour): a longer wait is a hung shutdown.
pub const MAX_SHUTDOWN_TIMEOUT_MS: u64 = 3_600_000;
/// The largest `count` a teammate entry may have.
pub const MAX_COUNT: u64 = 64;

/// One teammate of the team, after `count` expansion (`worker-1`, `worker-2`, …).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TeammateSpec {
    pub id: String,
    pub definition: String,
    pub plan_mode_required: bool,
    pub approver: Responder,
    /// Where it runs (default `local`).
    pub placement: Placement,
    /// Its own model and provider (over its definition's; unset fields keep the run's).
    #[serde(skip_serializing_if = "AgentEndpoint::is_empty")]
    pub endpoint: AgentEndpoint,
}

/// Rules for teammates the lead spawns with `SpawnTeammate`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SpawnRules {
    /// Whether spawned teammates must plan first (default true; `SpawnTeammate` can only
    /// tighten this).
    pub plan_mode_required: bool,
    /// Who approves their plans (default `lead`).
    pub approver: Responder,
    /// The highest working mode a spawned teammate gets; `None` caps nothing.
    pub max_mode: Option<PermissionMode>,
    /// The definitions the lead may spawn; `None` allows every definition but `lead`.
    pub definitions: Option<Vec<String>>,
    /// Where spawned teammates run (default `local`).
    pub placement: Placement,
}

impl Default for SpawnRules {
    fn default() -> Self {
        SpawnRules {
            plan_mode_required: true,
            approver: Responder::Lead,
            max_mode: None,
            definitions: None,
            placement: Placement::Local,
        }
    }
}

impl SpawnRules {
    /// Whether the lead may spawn a teammate with `definition`.
    pub fn allows_definition(&self, definition: &str) -> bool {
        match &self.definitions {
            Some(allowed) => allowed.iter().any(|name| name == definition),
            None => definition != "lead",
        }
    }
}

/// A validated team file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TeamFile {
    /// The file it was read from (or the label given to [`TeamFile::parse`]).
    pub source: String,
    /// The file's text, as stored with a run's launch options.
    #[serde(skip)]
    pub text: String,
    pub name: String,
    /// The lead's definition (default `lead`).
    pub lead: String,
    /// Live teammates at most; every declared teammate is live for the whole run, so the
    /// declared ones never outnumber it (a spawn beyond it is refused).
    pub max_concurrent_teammates: u64,
    /// How long a teammate has to answer a `shutdown_request` before it is stopped.
    pub shutdown_timeout_ms: u64,
    /// `None`: the default (worktrees in a git repository with a commit, else shared).
    pub isolation: Option<Isolation>,
    /// The git remote teammates on workers fetch from and push to (`--remote` overrides).
    pub remote: Option<String>,
    pub teammates: Vec<TeammateSpec>,
    pub spawn: SpawnRules,
    /// The test gate of merges, when the file has `[merge] test`.
    pub merge: Option<MergeGate>,
}

impl TeamFile {
    /// Whether any teammate (declared, or spawned under `[spawn]`) runs on workers.
    pub fn uses_workers(&self) -> bool {
        self.spawn.placement == Placement::Workers
            || self
                .teammates
                .iter()
                .any(|teammate| teammate.placement == Placement::Workers)
    }
}

impl TeamFile {
    /// Replaces every approver trust gates (a teammate's, `[spawn]`'s) with its fallback: a
    /// `policy:FILE` with `lead`, the default (a repository's policy would approve in the
    /// lead's place, see [`crate::trust`]); a `hook:NAME` with `human` (a repository's hook
    /// would run code and approve; a person decides instead, never an automatic approval).
    /// Returns each one replaced as `key = value`.
    pub fn skip_untrusted_approvers(&mut self) -> Vec<String> {
        self.skip_approvers(|approver| {
            matches!(approver, Responder::Policy(_) | Responder::Hook(_))
        })
    }

    /// Replaces the approvers `skip` selects with their fallbacks (see
    /// [`TeamFile::skip_untrusted_approvers`]); returns each one replaced as `key = value`,
    /// the form [`TeamFile::skip_listed_approvers`] takes back.
    pub fn skip_approvers(&mut self, skip: impl Fn(&Responder) -> bool) -> Vec<String> {
        let mut skipped = Vec::new();
        for teammate in &mut self.teammates {
            if skip(&teammate.approver) {
                skipped.push(format!(
                    "teammate {} approver = \"{}\"",
                    teammate.id, teammate.approver
                ));
                teammate.approver = fallback(&teammate.approver);
            }
        }
        if skip(&self.spawn.approver) {
            skipped.push(format!("spawn.approver = \"{}\"", self.spawn.approver));
            self.spawn.approver = fallback(&self.spawn.approver);
        }
        skipped
    }

    /// Skips again, on resume, exactly the approvers a run's start skipped (`skipped`, as
    /// [`TeamFile::skip_approvers`] returned them).
    pub fn skip_listed_approvers(&mut self, skipped: &[String]) {
        let listed = |key: String| skipped.contains(&key);
        for teammate in &mut self.teammates {
            if listed(format!(
                "teammate {} approver = \"{}\"",
                teammate.id, teammate.approver
            )) {
                teammate.approver = fallback(&teammate.approver);
            }
        }
        if listed(format!("spawn.approver = \"{}\"", self.spawn.approver)) {
            self.spawn.approver = fallback(&self.spawn.approver);
        }
    }

    /// The plan reviewer hooks the approvers name (`hook:NAME`), each once.
    pub fn hook_approvers(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let approvers = self
            .teammates
            .iter()
            .map(|teammate| &teammate.approver)
            .chain(std::iter::once(&self.spawn.approver));
        for approver in approvers {
            if let Responder::Hook(name) = approver
                && !names.contains(name)
            {
                names.push(name.clone());
            }
        }
        names
    }

    /// Drops every teammate's `base_url` and `api_key_env` (an untrusted repository must not
    /// choose where prompts go or which of the user's secrets is sent). Returns each one
    /// dropped as `teammate ID key = value`.
    pub fn skip_untrusted_endpoints(&mut self) -> Vec<String> {
        let mut skipped = Vec::new();
        for teammate in &mut self.teammates {
            for entry in teammate.endpoint.skip_untrusted() {
                skipped.push(format!("teammate {} {entry}", teammate.id));
            }
        }
        skipped
    }

    /// Drops `[merge]` (its test command is repository code, run only in a trusted project);
    /// returns it as `merge.test = "…"` when there was one.
    pub fn skip_merge_gate(&mut self) -> Option<String> {
        self.merge
            .take()
            .map(|gate| format!("merge.test = \"{}\"", gate.test))
    }

    /// Whether `text` (a team file's) names a `policy:FILE` approver, and the files it names.
    pub fn named_policies(text: &str) -> Vec<String> {
        Self::named_approvers(text, "policy:")
    }

    /// Whether `text` (a team file's) names a `hook:NAME` approver, and the names.
    pub fn named_hooks(text: &str) -> Vec<String> {
        Self::named_approvers(text, "hook:")
    }

    /// What follows `prefix` in each approver of `text` (teammates' and `[spawn]`'s).
    fn named_approvers(text: &str, prefix: &str) -> Vec<String> {
        let Ok(table) = toml::from_str::<toml::Table>(text) else {
            return Vec::new();
        };
        let teammates = table
            .get("teammates")
            .and_then(toml::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|teammate| teammate.get("approver"));
        let spawn = table.get("spawn").and_then(|spawn| spawn.get("approver"));
        teammates
            .chain(spawn)
            .filter_map(toml::Value::as_str)
            .filter_map(|approver| approver.strip_prefix(prefix))
            .map(str::to_owned)
            .collect()
    }
}

/// Who approves in place of an approver trust skipped: `lead` for a policy, a person for a
/// plan reviewer hook (its teammate's plans wait for `muster approve`).
fn fallback(approver: &Responder) -> Responder {
    match approver {
        Responder::Hook(_) => Responder::Human,
        _ => Responder::Lead,
    }
}

impl TeamFile {
    /// `muster.team.toml` at the root, when it exists.
    pub fn discover(root: &ProjectRoot) -> Option<PathBuf> {
        let path = root.path().join(TEAM_FILE_NAME);
        path.is_file().then_some(path)
    }

    /// Reads and validates a team file, including the policy files its approvers name
    /// (relative to `root`).
    pub fn load(
        path: &Path,
        root: &ProjectRoot,
        catalog: &AgentCatalog,
    ) -> Result<TeamFile, ConfigError> {
        let Some(text) = read_optional(path)? else {
            return Err(ConfigError::invalid(
                Diagnostic::new("team file not found").in_source(path.display().to_string()),
            ));
        };
        let team = TeamFile::parse(&path.display().to_string(), &text, catalog)?;
        let mut errors = Vec::new();
        let approvers = team
            .teammates
            .iter()
            .map(|teammate| &teammate.approver)
            .chain(std::iter::once(&team.spawn.approver));
        let mut checked: Vec<&PathBuf> = Vec::new();
        for approver in approvers {
            if let Responder::Policy(file) = approver {
                if checked.contains(&file) {
                    continue;
                }
                checked.push(file);
                if let Err(error) = Policy::load(&root.path().join(file)) {
                    errors.extend(error.diagnostics().iter().cloned());
                    if let ConfigError::Io { .. } = error {
                        return Err(error);
                    }
                }
            }
        }
        if errors.is_empty() {
            Ok(team)
        } else {
            Err(invalid(errors))
        }
    }

    /// Parses and validates team-file text; `catalog` holds the definitions it may name.
    pub fn parse(label: &str, text: &str, catalog: &AgentCatalog) -> Result<TeamFile, ConfigError> {
        let source = SourceText::new(label, text);
        let table = source.parse().map_err(ConfigError::invalid)?;
        let reader = TableReader::root(&source, &table);
        let mut errors = Vec::new();
        reader.reject_unknown(TEAM_KEYS, &mut errors);

        let name = match reader.string("name", &mut errors) {
            Some(name) => {
                if let Err(message) = check_id(&name.value) {
                    errors.push(located_error(&source, &name, message));
                }
                name.value
            }
            None => {
                if !reader.has("name") {
                    errors.push(reader.error_at("name", "missing required key `name`"));
                }
                String::new()
            }
        };
        let lead = reader.string("lead", &mut errors);
        if let Some(lead) = &lead {
            check_definition(&source, catalog, lead, &mut errors);
        }
        let max_concurrent_teammates = match reader.count("max_concurrent_teammates", &mut errors) {
            Some(count) if count.value == 0 => {
                errors.push(located_error(
                    &source,
                    &count,
                    "expected at least 1, found 0".to_string(),
                ));
                DEFAULT_MAX_CONCURRENT
            }
            Some(count) => count.value,
            None => DEFAULT_MAX_CONCURRENT,
        };
        let shutdown_timeout_ms = match reader.count("shutdown_timeout_ms", &mut errors) {
            Some(ms) if ms.value == 0 || ms.value > MAX_SHUTDOWN_TIMEOUT_MS => {
                errors.push(located_error(
                    &source,
                    &ms,
                    format!(
                        "expected milliseconds from 1 to {MAX_SHUTDOWN_TIMEOUT_MS}, found {}",
                        ms.value
                    ),
                ));
                DEFAULT_SHUTDOWN_TIMEOUT_MS
            }
            Some(ms) => ms.value,
            None => DEFAULT_SHUTDOWN_TIMEOUT_MS,
        };
        let isolation = read_isolation(&source, &reader, &mut errors);
        let remote = reader.string("remote", &mut errors).and_then(|remote| {
            if remote.value.trim().is_empty() {
                errors.push(located_error(
                    &source,
                    &remote,
                    "expected a git remote URL or path, found an empty string".to_string(),
                ));
                None
            } else {
                Some(remote.value)
            }
        });

        let mut teammates: Vec<TeammateSpec> = Vec::new();
        let mut origins: Vec<(String, String)> = Vec::new();
        for entry in reader.tables("teammates", &mut errors) {
            read_teammate(
                &source,
                &entry,
                catalog,
                &mut teammates,
                &mut origins,
                &mut errors,
            );
        }
        let spawn = match reader.table("spawn", &mut errors) {
            Some(table) => read_spawn(&source, &table, catalog, &mut errors),
            None => SpawnRules::default(),
        };
        let merge = reader
            .table("merge", &mut errors)
            .and_then(|table| read_merge(&source, &table, &mut errors));
        // Declared teammates are live from the start to the end of the run: more of them than
        // the cap could never all start, so the file says so instead of queueing them forever.
        if errors.is_empty() && teammates.len() as u64 > max_concurrent_teammates {
            let message = format!(
                "the team declares {} teammates but max_concurrent_teammates is {}: every \
                 declared teammate is live for the whole run, so set max_concurrent_teammates \
                 to at least {} or declare fewer",
                teammates.len(),
                max_concurrent_teammates,
                teammates.len()
            );
            errors.push(if reader.has("max_concurrent_teammates") {
                reader.error_at("max_concurrent_teammates", message)
            } else {
                Diagnostic::new(message).in_source(source.label.clone())
            });
        }
        if !errors.is_empty() {
            return Err(invalid(errors));
        }
        Ok(TeamFile {
            source: label.to_string(),
            text: text.to_string(),
            name,
            lead: lead.map_or_else(|| "lead".to_string(), |lead| lead.value),
            max_concurrent_teammates,
            shutdown_timeout_ms,
            isolation,
            remote,
            teammates,
            spawn,
            merge,
        })
    }
}

fn read_merge(
    source: &SourceText<'_>,
    table: &TableReader<'_, '_>,
    errors: &mut Vec<Diagnostic>,
) -> Option<MergeGate> {
    table.reject_unknown(MERGE_KEYS, errors);
    let test_timeout_secs = match table.count("test_timeout", errors) {
        Some(secs) if secs.value == 0 => {
            errors.push(located_error(
                source,
                &secs,
                "expected seconds (at least 1), found 0".to_string(),
            ));
            DEFAULT_TEST_TIMEOUT_SECS
        }
        Some(secs) => secs.value,
        None => DEFAULT_TEST_TIMEOUT_SECS,
    };
    let cache = table
        .string_list("cache", errors)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|path| {
            let relative = std::path::Path::new(&path.value);
            let inside = !path.value.is_empty()
                && relative.is_relative()
                && relative
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)));
            if inside {
                Some(path.value)
            } else {
                errors.push(located_error(
                    source,
                    &path,
                    format!(
                        "expected a path inside the project (relative, no `..`), found {:?}",
                        path.value
                    ),
                ));
                None
            }
        })
        .collect();
    let before_apply = table
        .boolean("before_apply", errors)
        .is_some_and(|flag| flag.value);
    let test = table.string("test", errors)?;
    if test.value.trim().is_empty() {
        errors.push(located_error(
            source,
            &test,
            "`test` is empty: give the project's test command, or remove [merge]".to_string(),
        ));
        return None;
    }
    Some(MergeGate {
        test: test.value,
        test_timeout_secs,
        cache,
        before_apply,
    })
}

fn located_error<T>(source: &SourceText<'_>, located: &Located<T>, message: String) -> Diagnostic {
    Diagnostic::new(message)
        .in_source(source.label.clone())
        .at(Some(located.position))
        .for_key(located.key.clone())
}

fn check_definition(
    source: &SourceText<'_>,
    catalog: &AgentCatalog,
    name: &Located<String>,
    errors: &mut Vec<Diagnostic>,
) {
    if catalog.get(&name.value).is_none() {
        let message = format!(
            "unknown agent definition `{}`{}",
            name.value,
            catalog.suggestion_for(&name.value)
        );
        errors.push(located_error(source, name, message));
    }
}

fn read_isolation(
    source: &SourceText<'_>,
    reader: &TableReader<'_, '_>,
    errors: &mut Vec<Diagnostic>,
) -> Option<Isolation> {
    let text = reader.string("isolation", errors)?;
    let parsed = Isolation::parse(&text.value);
    if parsed.is_none() {
        let suggestion =
            crate::diagnostic::suggestion_suffix(&text.value, Isolation::NAMES.iter().copied());
        errors.push(located_error(
            source,
            &text,
            format!(
                "unknown isolation `{}`: expected \"worktree\" or \"shared\"{suggestion}",
                text.value
            ),
        ));
    }
    parsed
}

fn read_placement(
    source: &SourceText<'_>,
    reader: &TableReader<'_, '_>,
    errors: &mut Vec<Diagnostic>,
) -> Placement {
    let Some(text) = reader.string("placement", errors) else {
        return Placement::Local;
    };
    Placement::parse(&text.value).unwrap_or_else(|| {
        let suggestion =
            crate::diagnostic::suggestion_suffix(&text.value, Placement::NAMES.iter().copied());
        errors.push(located_error(
            source,
            &text,
            format!(
                "unknown placement `{}`: expected \"local\" or \"workers\"{suggestion}",
                text.value
            ),
        ));
        Placement::Local
    })
}

fn read_approver(
    source: &SourceText<'_>,
    reader: &TableReader<'_, '_>,
    errors: &mut Vec<Diagnostic>,
) -> Responder {
    match reader.string("approver", errors) {
        None => Responder::Lead,
        Some(text) => match Responder::parse(&text.value) {
            Ok(approver) => approver,
            Err(message) => {
                errors.push(located_error(source, &text, message.to_string()));
                Responder::Lead
            }
        },
    }
}

fn read_teammate(
    source: &SourceText<'_>,
    entry: &TableReader<'_, '_>,
    catalog: &AgentCatalog,
    teammates: &mut Vec<TeammateSpec>,
    origins: &mut Vec<(String, String)>,
    errors: &mut Vec<Diagnostic>,
) {
    if entry.has("isolation") {
        // Checked before unknown keys, so the message says why rather than "unknown key".
        errors.push(entry.error_at(
            "isolation",
            "isolation is team-wide: set it once at the top of the team file (worktree or \
             shared for every agent), not per teammate",
        ));
    } else {
        entry.reject_unknown(TEAMMATE_KEYS, errors);
    }
    let definition = entry.string("definition", errors);
    if let Some(definition) = &definition {
        check_definition(source, catalog, definition, errors);
    }
    let plan_mode_required = entry
        .boolean("plan_mode_required", errors)
        .is_none_or(|flag| flag.value);
    let approver = read_approver(source, entry, errors);
    let placement = read_placement(source, entry, errors);
    let endpoint = read_endpoint(source, entry, errors);
    let count = match entry.count("count", errors) {
        Some(count) if count.value == 0 || count.value > MAX_COUNT => {
            let message = format!(
                "expected a count from 1 to {MAX_COUNT}, found {}",
                count.value
            );
            errors.push(located_error(source, &count, message));
            return;
        }
        Some(count) => Some(count.value),
        None => None,
    };
    let Some(name) = entry.string("name", errors) else {
        if !entry.has("name") {
            errors.push(
                Diagnostic::new("missing required key `name`")
                    .in_source(source.label.clone())
                    .for_key(entry.key_path("name")),
            );
        }
        return;
    };
    if let Err(message) = check_teammate_name(&name.value) {
        errors.push(located_error(source, &name, message));
        return;
    }
    let ids: Vec<String> = match count {
        None => vec![name.value.clone()],
        Some(count) => (1..=count).map(|n| format!("{}-{n}", name.value)).collect(),
    };
    for id in ids {
        if let Err(message) = check_teammate_name(&id) {
            errors.push(located_error(
                source,
                &name,
                format!("teammate id {id:?}: {message}"),
            ));
            return;
        }
        if let Some((_, first)) = origins.iter().find(|(existing, _)| *existing == id) {
            let message = format!("duplicate teammate id `{id}` (also from {first})");
            errors.push(located_error(source, &name, message));
            continue;
        }
        origins.push((id.clone(), name.key.clone()));
        teammates.push(TeammateSpec {
            id,
            definition: definition
                .as_ref()
                .map_or_else(|| "general".to_string(), |d| d.value.clone()),
            plan_mode_required,
            approver: approver.clone(),
            placement,
            endpoint: endpoint.clone(),
        });
    }
}

/// The string at `key`, when it is not blank (a blank one is an error).
fn nonempty_string(
    source: &SourceText<'_>,
    entry: &TableReader<'_, '_>,
    key: &str,
    errors: &mut Vec<Diagnostic>,
) -> Option<Located<String>> {
    let text = entry.string(key, errors)?;
    if text.value.trim().is_empty() {
        let message = format!("`{key}` is empty: remove the key, or give it a value");
        errors.push(located_error(source, &text, message));
        return None;
    }
    Some(text)
}

/// A teammate entry's `provider`, `model`, `base_url` and `api_key_env`.
fn read_endpoint(
    source: &SourceText<'_>,
    entry: &TableReader<'_, '_>,
    errors: &mut Vec<Diagnostic>,
) -> AgentEndpoint {
    let provider = entry.string("provider", errors).and_then(|text| {
        match text.value.parse::<crate::settings::ProviderKind>() {
            Ok(kind) => Some(kind),
            Err(message) => {
                errors.push(located_error(source, &text, message));
                None
            }
        }
    });
    let model = nonempty_string(source, entry, "model", errors)
        .map(|model| crate::agents::model_id(&model.value));
    let base_url = nonempty_string(source, entry, "base_url", errors).and_then(|url| {
        if url.value.starts_with("http://") || url.value.starts_with("https://") {
            return Some(url.value);
        }
        let message = format!(
            "expected a URL starting with http:// or https://, found {:?}",
            url.value
        );
        errors.push(located_error(source, &url, message));
        None
    });
    let api_key_env = nonempty_string(source, entry, "api_key_env", errors).map(|v| v.value);
    AgentEndpoint {
        provider,
        model,
        base_url,
        api_key_env,
    }
}

fn read_spawn(
    source: &SourceText<'_>,
    table: &TableReader<'_, '_>,
    catalog: &AgentCatalog,
    errors: &mut Vec<Diagnostic>,
) -> SpawnRules {
    table.reject_unknown(SPAWN_KEYS, errors);
    let defaults = SpawnRules::default();
    let max_mode = table.string("max_mode", errors).and_then(|text| {
        match text.value.parse::<PermissionMode>() {
            Ok(mode) => Some(mode),
            Err(error) => {
                let suggestion =
                    crate::diagnostic::suggestion_suffix(&text.value, PermissionMode::names());
                errors.push(located_error(source, &text, format!("{error}{suggestion}")));
                None
            }
        }
    });
    let definitions = table.string_list("definitions", errors).map(|names| {
        for name in &names {
            check_definition(source, catalog, name, errors);
        }
        names.into_iter().map(|name| name.value).collect()
    });
    SpawnRules {
        plan_mode_required: table
            .boolean("plan_mode_required", errors)
            .map_or(defaults.plan_mode_required, |flag| flag.value),
        approver: read_approver(source, table, errors),
        max_mode,
        definitions,
        placement: read_placement(source, table, errors),
    }
}
