//! `muster config`: show the effective settings, each value with the layer it came from.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use muster_config::project::ProjectRoot;
use muster_config::settings::{CliOverrides, SettingEntry, Settings, SettingsInputs};
use muster_config::{ConfigError, Diagnostic, Loaded};
use serde_json::{Value, json};

use crate::exit::{Exit, ExitError};
use crate::project::Globals;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub action: ConfigAction,
}

#[derive(Debug, clap::Subcommand)]
pub enum ConfigAction {
    /// The effective settings, each value with the layer it came from.
    Show {
        #[arg(long)]
        json: bool,
    },
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    match args.action {
        ConfigAction::Show { json } => show(global, json),
    }
}

/// The project root for this invocation: `-C DIR`, else discovered from the current directory.
pub fn project_root(global: &Globals) -> anyhow::Result<ProjectRoot> {
    let current = std::env::current_dir()?;
    Ok(ProjectRoot::discover(&current, global.directory.as_deref()))
}

/// The process environment, skipping variables that are not UTF-8.
pub fn process_env() -> BTreeMap<String, String> {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .collect()
}

/// A configuration error as the error that exits with code 2.
pub fn usage_error(error: ConfigError) -> anyhow::Error {
    ExitError::new(Exit::Usage, error.to_string()).into()
}

/// Loads the settings of `root` from the process's environment and home directory, with the
/// global flags and `cli` as the command-line layer. Configuration errors exit with code 2.
pub fn load_settings(
    global: &Globals,
    root: &ProjectRoot,
    cli: CliOverrides,
) -> anyhow::Result<Loaded<Settings>> {
    let env = process_env();
    let home: Option<PathBuf> = std::env::home_dir();
    let cli = match &global.store {
        // A path on the command line is relative to the current directory.
        Some(store) => cli.store(std::path::absolute(store)?.display().to_string()),
        None => cli,
    };
    Settings::load(&SettingsInputs {
        project_root: root,
        home_dir: home.as_deref(),
        env: &env,
        cli: &cli,
    })
    .map_err(usage_error)
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

/// Prints warnings to stderr, one a line.
/// Warnings for agent definitions naming a model the settings' catalogue does not know.
pub fn model_warnings(
    catalog: &muster_config::AgentCatalog,
    settings: &Settings,
) -> Vec<Diagnostic> {
    catalog.model_warnings(|model| settings.models.contains_key(model))
}

pub fn print_warnings(warnings: &[Diagnostic]) {
    for warning in warnings {
        eprintln!("muster: warning: {warning}");
    }
}

fn show(global: &Globals, as_json: bool) -> anyhow::Result<Exit> {
    let root = project_root(global)?;
    let loaded = load_settings(global, &root, CliOverrides::new())?;
    let settings = &loaded.value;
    let mut output = String::new();
    if as_json {
        let document = json!({
            "project_root": root.path(),
            "settings": entries_json(settings.entries()),
            "resolved": {
                "plans_directory": settings.plans_directory.value,
                "store_path": settings.store_path.value,
                "sandbox_writable": settings.sandbox.writable,
            },
            "sandbox_support": muster_agents::sandbox::probe(),
            "warnings": loaded.warnings.iter().map(ToString::to_string).collect::<Vec<_>>(),
        });
        output = serde_json::to_string_pretty(&document)?;
        output.push('\n');
    } else {
        print_warnings(&loaded.warnings);
        writeln!(output, "# project root: {}", root.path().display())?;
        for entry in settings.entries() {
            writeln!(
                output,
                "{} = {}  # {}",
                entry.key, entry.value, entry.origin
            )?;
        }
        writeln!(
            output,
            "# plans_directory resolves to {}",
            settings.plans_directory.value.display()
        )?;
        writeln!(
            output,
            "# store_path resolves to {}",
            settings.store_path.value.display()
        )?;
        writeln!(
            output,
            "# sandbox: {}",
            muster_agents::sandbox::probe().describe()
        )?;
    }
    print_output(&output)?;
    Ok(Exit::Success)
}

/// `{key: {value, layer, source, line?, column?}}`; rule lists are arrays of such objects.
fn entries_json(entries: &[SettingEntry]) -> Value {
    let mut object = serde_json::Map::new();
    for entry in entries {
        let mut item = json!({
            "value": entry.value,
            "layer": entry.origin.layer,
            "source": entry.origin.source,
        });
        if let (Some(position), Value::Object(fields)) = (entry.origin.position, &mut item) {
            fields.insert("line".to_string(), json!(position.line));
            fields.insert("column".to_string(), json!(position.column));
        }
        if entry.key.starts_with("permissions.") {
            let list = object
                .entry(entry.key.clone())
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(items) = list {
                items.push(item);
            }
        } else {
            object.insert(entry.key.clone(), item);
        }
    }
    Value::Object(object)
}
