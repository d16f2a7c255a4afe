//! What a command loads before it runs: the project root, the process environment and home
//! directory, the settings, the agent catalogue and their warnings. Every command uses these,
//! so they live outside `cli/` (which only parses arguments and prints).

use std::io::Write as _;
use std::path::PathBuf;

use muster_config::project::ProjectRoot;
use muster_config::settings::{CliOverrides, Settings, SettingsInputs};
use muster_config::trust::{TRUST_COMMAND, TrustInputs};
use muster_config::{ConfigError, Diagnostic, Loaded, TrustDecision};

use crate::exit::{Exit, ExitError};
use crate::project::{Globals, Project};

/// The project root for this invocation: `-C DIR`, else discovered from the current directory.
pub fn project_root(global: &Globals) -> anyhow::Result<ProjectRoot> {
    let current = global.process.current_dir.clone().map_err(|error| {
        ExitError::new(
            Exit::Usage,
            format!(
                "the current directory cannot be read ({error}); cd to the project, or give -C DIR"
            ),
        )
    })?;
    if let Some(dir) = &global.directory {
        // Said here, before anything reads or makes files in a directory that is not there.
        let problem = match std::fs::metadata(current.join(dir)) {
            Ok(found) if found.is_dir() => None,
            Ok(_) => Some("it is not a directory".to_owned()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                Some("there is no such directory".to_owned())
            }
            Err(error) => Some(format!("it cannot be read ({error})")),
        };
        if let Some(problem) = problem {
            return Err(
                ExitError::new(Exit::Usage, format!("-C {}: {problem}", dir.display())).into(),
            );
        }
    }
    Ok(ProjectRoot::discover(&current, global.directory.as_deref()))
}

/// A configuration error as the error that exits with code 2.
pub fn usage_error(error: ConfigError) -> anyhow::Error {
    ExitError::new(Exit::Usage, error.to_string()).into()
}

/// Loads the settings of `root` from the process's environment and home directory, with the
/// global flags and `cli` as the command-line layer, gated by whether the project is trusted
/// now. Configuration errors exit with code 2.
pub fn load_settings(
    global: &Globals,
    root: &ProjectRoot,
    cli: CliOverrides,
) -> anyhow::Result<Loaded<Settings>> {
    let trust = decide_trust(global, root)?;
    load_settings_trusting(global, root, cli, &trust, None)
}

/// Whether the project at `root` is trusted as it is now: by the CI variable (never in a
/// worker's process: a worker's clone is not the checkout a CI job reviewed), else by the
/// user's trust file.
pub fn decide_trust(global: &Globals, root: &ProjectRoot) -> anyhow::Result<TrustDecision> {
    let config_dir = global.process.config_dir();
    muster_config::trust::decide(&TrustInputs {
        root,
        config_dir: config_dir.as_deref(),
        ci_hash: global.process.trust_hash_var(),
    })
    .map_err(usage_error)
}

/// [`load_settings`] with the trust decision given (a resumed run's stored one), and the
/// settings files read from `snapshot` when one is given (a resumed run's stored copy).
pub fn load_settings_trusting(
    global: &Globals,
    root: &ProjectRoot,
    cli: CliOverrides,
    trust: &TrustDecision,
    snapshot: Option<&muster_config::settings::SettingsSnapshot>,
) -> anyhow::Result<Loaded<Settings>> {
    let env = &global.process.env;
    let home: Option<PathBuf> = global.process.user_home();
    let cli = match &global.store {
        // A URL is kept as it is (one whose scheme muster does not know is an error of the
        // settings, never a path made absolute).
        Some(store) if store.to_string_lossy().contains("://") => {
            cli.store(store.to_string_lossy().into_owned())
        }
        // A path on the command line is relative to the current directory.
        Some(store) => cli.store(std::path::absolute(store)?.display().to_string()),
        None => cli,
    };
    Settings::load(&SettingsInputs {
        project_root: root,
        home_dir: home.as_deref(),
        env,
        cli: &cli,
        trust,
        snapshot,
    })
    .map_err(usage_error)
}

/// The one line a run in an untrusted project prints: what it skipped, and the command that
/// trusts the project (`None` when nothing was skipped).
pub fn trust_notice(
    settings: &Settings,
    mcp_skipped: usize,
    team_skipped: &[String],
) -> Option<String> {
    if settings.trust.trusted {
        // Trusted, a team file is skipped only when trust does not cover it.
        return (!team_skipped.is_empty()).then(|| {
            format!(
                "muster: skipped {}: only muster.team.toml at the project root is covered by                  `{TRUST_COMMAND}`; move the team there and run `{TRUST_COMMAND}`",
                team_skipped.join(", ")
            )
        });
    }
    if settings.skipped.is_empty() && mcp_skipped == 0 && team_skipped.is_empty() {
        return None;
    }
    let mut what: Vec<String> = Vec::new();
    let allow = settings
        .skipped
        .iter()
        .filter(|skipped| skipped.key == "permissions.allow")
        .count();
    for skipped in settings
        .skipped
        .iter()
        .filter(|skipped| skipped.key != "permissions.allow")
    {
        what.push(format!("{} = {}", skipped.key, skipped.value));
    }
    if allow > 0 {
        what.push(format!("{allow} allow rule(s)"));
    }
    if mcp_skipped > 0 {
        what.push(format!("{mcp_skipped} project MCP server(s)"));
    }
    what.extend(team_skipped.iter().cloned());
    Some(format!(
        "muster: project not trusted ({}); skipped {}; run `{TRUST_COMMAND}` to trust it as it is now (`muster config show` lists what is skipped and why)",
        settings.trust.why,
        what.join(", ")
    ))
}

/// Writes `text` to stdout; a closed pipe (`muster config show | head`) is not an error.
pub fn print_output(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => Err(error.into()),
        _ => Ok(()),
    }
}

/// The variable that makes muster read no user-level file (`muster demo` sets it for its run).
pub const NO_USER_FILES: &str = "MUSTER_NO_USER_FILES";

/// The agent catalogue of `root` (with the user's `~/.claude/agents`), its load warnings and
/// the warnings for definitions naming a model the settings' catalogue lacks printed; an
/// untrusted project's definitions lose their `base_url` and `api_key_env` (and say so).
/// The settings' model catalogue gains the dated ids they name ([`resolve_catalogue_models`]).
pub fn load_catalog(project: &mut Project) -> anyhow::Result<muster_config::AgentCatalog> {
    let mut loaded =
        muster_config::AgentCatalog::load(&project.root, project.process.user_home().as_deref())
            .map_err(usage_error)?;
    resolve_catalogue_models(&mut project.settings, &loaded.value);
    print_warnings(&loaded.warnings);
    print_warnings(&model_warnings(&loaded.value, &project.settings));
    // A repository's definitions must not choose where prompts go, or which of the user's
    // secrets is sent, before the user trusts it.
    if !project.settings.trust.trusted {
        let skipped = loaded.value.skip_untrusted_endpoints();
        if !skipped.is_empty() {
            eprintln!(
                "muster: project not trusted; skipped {}; run `{TRUST_COMMAND}` to trust it",
                skipped.join(", ")
            );
        }
    }
    Ok(loaded.value)
}

/// Gives the model catalogue an entry for each model the settings and the agent definitions
/// name that it answers to only by a pattern (a dated snapshot such as
/// `claude-sonnet-4-20250514`), so its cost is computed and a cost budget accepts it.
pub fn resolve_catalogue_models(settings: &mut Settings, catalog: &muster_config::AgentCatalog) {
    let mut names = vec![
        settings.plan.model.value.clone(),
        settings.act.model.value.clone(),
    ];
    names.extend(
        catalog
            .iter()
            .filter_map(|definition| match &definition.model {
                muster_config::ModelChoice::Named(model) => Some(model.clone()),
                _ => None,
            }),
    );
    settings.resolve_models(names.iter().map(String::as_str));
}

/// The skills of the project, the user and the plugins found (their warnings printed).
pub fn load_skills(project: &Project) -> muster_config::SkillCatalog {
    let loaded =
        muster_config::SkillCatalog::load(&project.root, project.process.user_home().as_deref());
    print_warnings(&loaded.warnings);
    loaded.value
}

/// One instruction file as `muster config show` and `muster agents list` print it: where it
/// is, where it comes from and its size as loaded.
pub fn describe_instruction(file: &muster_config::InstructionFile) -> String {
    let scope = match &file.scope {
        muster_config::InstructionScope::User => "user".to_owned(),
        muster_config::InstructionScope::Project => "project".to_owned(),
        muster_config::InstructionScope::ProjectLocal => "project_local".to_owned(),
        muster_config::InstructionScope::ImportedBy(by) => format!("imported by {}", by.display()),
    };
    let cut = file
        .truncated_from
        .map(|size| format!(", cut from {size}"))
        .unwrap_or_default();
    format!(
        "{} ({scope}; {} bytes{cut})",
        file.path.display(),
        file.content.len()
    )
}

/// The instruction files every agent's prompt carries, for listing (their warnings printed).
pub fn loaded_instructions(
    root: &ProjectRoot,
    settings: &Settings,
    home: Option<&std::path::Path>,
) -> Vec<muster_config::InstructionFile> {
    match muster_config::ProjectInstructions::load(
        root,
        settings.instructions_max_bytes.value,
        home,
    ) {
        Ok(loaded) => {
            print_warnings(&loaded.warnings);
            loaded.value.files
        }
        Err(error) => {
            eprintln!("muster: warning: instruction files: {error}");
            Vec::new()
        }
    }
}

/// Under a cost budget, every model the run's agents name must have prices: a run that would
/// use definition `names` (its main agent or lead, its teammates, the definitions it may
/// spawn) refuses to start, naming the first unpriced one, instead of failing when the budget
/// meets it in the middle of the run. Definitions the run does not use are not checked.
pub fn check_definition_prices<'n>(
    settings: &Settings,
    catalog: &muster_config::AgentCatalog,
    names: impl IntoIterator<Item = &'n str>,
) -> anyhow::Result<()> {
    let budget = [&settings.budgets.agent, &settings.budgets.run]
        .into_iter()
        .find_map(|limits| limits.cost_usd.as_ref());
    let Some(budget) = budget else {
        return Ok(());
    };
    for name in names {
        let Some(definition) = catalog.get(name) else {
            continue;
        };
        let muster_config::ModelChoice::Named(model) = &definition.model else {
            continue;
        };
        let priced = settings
            .models
            .get(model)
            .is_some_and(|info| info.has_prices());
        if !priced {
            return Err(ExitError::new(
                Exit::Usage,
                format!(
                    "agent `{name}` ({}) uses model `{model}`, which has no prices in the model catalogue, and the run has a cost budget (from {}); add [models.\"{model}\"] price_in and price_out to your settings, give the agent a catalogue model, or remove the cost budget",
                    definition.source, budget.origin
                ),
            )
            .into());
        }
    }
    Ok(())
}

/// Warnings for agent definitions naming a model the settings' catalogue does not know.
pub fn model_warnings(
    catalog: &muster_config::AgentCatalog,
    settings: &Settings,
) -> Vec<Diagnostic> {
    catalog.model_warnings(|model| {
        settings.models.contains_key(model)
            || muster_config::settings::catalogue_id_of(model)
                .is_some_and(|id| settings.models.contains_key(id))
    })
}

pub fn print_warnings(warnings: &[Diagnostic]) {
    for warning in warnings {
        eprintln!("muster: warning: {warning}");
    }
}
