//! `muster trust`: trust this project as it is now, so what its own files set that widens
//! access or runs code takes effect (see `muster_config::trust` and docs/trust.md).

use std::fmt::Write as _;

use muster_config::trust::{
    TRUST_HASH_VAR, TrustEntry, TrustStore, canonical_root, changed_files, covered_files,
    file_hashes, project_hash,
};

use crate::exit::{Exit, ExitError};
use crate::loading::{print_output, project_root, usage_error};
use crate::project::Globals;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Remove this project's trust.
    #[arg(long, conflicts_with_all = ["list", "print_hash"])]
    pub revoke: bool,
    /// List the trusted projects and whether each is still as it was trusted.
    #[arg(long, conflicts_with = "print_hash")]
    pub list: bool,
    /// Print this project's trust hash (what MUSTER_TRUST_PROJECT_HASH must carry in CI).
    #[arg(long)]
    pub print_hash: bool,
}

pub fn execute(global: &Globals, args: Args) -> anyhow::Result<Exit> {
    let root = project_root(global)?;
    if args.print_hash {
        let hashes = file_hashes(root.path()).map_err(usage_error)?;
        print_output(&format!("{}\n", project_hash(&hashes)))?;
        return Ok(Exit::Success);
    }
    let config_dir = global.process.config_dir().ok_or_else(|| {
        ExitError::new(
            Exit::Usage,
            "there is no home directory to keep trust in: set HOME or XDG_CONFIG_HOME",
        )
    })?;
    let store = TrustStore::in_dir(&config_dir);
    if args.list {
        return list(&store);
    }
    let canonical = canonical_root(root.path());
    if store.path.starts_with(&canonical) || canonical_root(&config_dir).starts_with(&canonical) {
        return Err(ExitError::new(
            Exit::Usage,
            format!(
                "the trust file {} would be inside the project {}, where the repository could \
                 write it; set XDG_CONFIG_HOME to a directory outside the project",
                store.path.display(),
                canonical.display()
            ),
        )
        .into());
    }
    if args.revoke {
        let mut removed = false;
        store
            .update(|entries| {
                let before = entries.len();
                entries.retain(|entry| entry.root != canonical);
                removed = entries.len() != before;
            })
            .map_err(usage_error)?;
        let text = if removed {
            format!("no longer trusted: {}\n", canonical.display())
        } else {
            format!(
                "{} was not trusted; nothing to revoke\n",
                canonical.display()
            )
        };
        print_output(&text)?;
        return Ok(Exit::Success);
    }
    let hashes = file_hashes(root.path()).map_err(usage_error)?;
    let hash = project_hash(&hashes);
    let home = global.process.user_home();
    let declared = muster_config::mcp::Declared::read(root.path(), home.as_deref());
    crate::loading::print_warnings(&declared.warnings);
    let pins = declared.value.pins();
    let trusted_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or_default();
    let entry = TrustEntry {
        root: canonical.clone(),
        hash: hash.clone(),
        trusted_at,
        files: hashes.clone(),
        mcp_servers: Some(pins.clone()),
    };
    store
        .update(|entries| {
            entries.retain(|existing| existing.root != canonical);
            entries.push(entry);
        })
        .map_err(usage_error)?;
    let mut text = format!("trusted: {} (hash {hash})\n", canonical.display());
    let covered: Vec<String> = covered_files(root.path())
        .into_iter()
        .map(|file| {
            let state = if hashes.contains_key(&file.relative) {
                ""
            } else {
                " (absent)"
            };
            format!("{}{state}", file.relative)
        })
        .collect();
    writeln!(text, "covers: {}", covered.join(", "))?;
    for server in declared
        .value
        .servers
        .iter()
        .filter(|server| server.scope.needs_trust())
    {
        writeln!(
            text,
            "pins MCP server {} ({}): {}",
            server.name,
            server.scope.source(),
            describe_template(&server.template)
        )?;
    }
    writeln!(
        text,
        "a change to any of them makes the project untrusted until you run `muster trust` again; recorded in {}",
        store.path.display()
    )?;
    print_output(&text)?;
    Ok(Exit::Success)
}

/// A server's template as `muster trust` shows what it pins: the command line or URL, the
/// env names and the variables it reads.
fn describe_template(template: &muster_config::McpTransport) -> String {
    let mut text = match template {
        muster_config::McpTransport::Stdio { command, args, env } => {
            let mut line = std::iter::once(command.as_str())
                .chain(args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" ");
            if !env.is_empty() {
                line.push_str(&format!(
                    " (env {})",
                    env.keys().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
            line
        }
        muster_config::McpTransport::Http { url, headers } => {
            let mut line = url.clone();
            if !headers.is_empty() {
                line.push_str(&format!(
                    " (headers {})",
                    headers.keys().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
            line
        }
    };
    let variables = template.variables();
    if !variables.is_empty() {
        text.push_str(&format!("; reads {}", variables.join(", ")));
    }
    text
}

fn list(store: &TrustStore) -> anyhow::Result<Exit> {
    let entries = store.entries().map_err(usage_error)?;
    let mut text = String::new();
    if entries.is_empty() {
        writeln!(
            text,
            "no trusted projects in {} (CI may trust a checkout with {TRUST_HASH_VAR})",
            store.path.display()
        )?;
    }
    for entry in &entries {
        let state = if !entry.root.is_dir() {
            "gone".to_owned()
        } else {
            match file_hashes(&entry.root) {
                Ok(now) if project_hash(&now) == entry.hash => "trusted".to_owned(),
                Ok(now) => format!(
                    "changed since trusted ({}): not trusted",
                    changed_files(&entry.files, &now).join(", ")
                ),
                Err(error) => format!("cannot be read ({error})"),
            }
        };
        writeln!(
            text,
            "{}  {}  {state}",
            entry.root.display(),
            entry.hash.get(..12).unwrap_or(&entry.hash)
        )?;
    }
    print_output(&text)?;
    Ok(Exit::Success)
}
