//! `muster bench sandbox`: what the Bash sandbox costs per call. The Bash tool runs `true`
//! unconfined, in the read-only profile and in the workspace-write profile, interleaved call by
//! call so machine noise falls on all three alike; the rows give p50/p99 and the ratio of each
//! median to the unconfined one.

use std::sync::Arc;
use std::time::Instant;

use muster_agents::sandbox::{Sandbox, SandboxMode, SandboxProfile, probe};
use muster_agents::tools::{Bash, Tool, ToolContext, Workspace};
use serde::Serialize;

use super::samples::Samples;

/// One variant's figures.
#[derive(Debug, Serialize)]
pub struct Row {
    pub variant: &'static str,
    pub calls: usize,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// This median over the unconfined one.
    pub ratio_to_unconfined: Option<f64>,
}

const VARIANTS: [(&str, Option<SandboxProfile>); 3] = [
    ("unconfined", None),
    ("read-only", Some(SandboxProfile::ReadOnly)),
    ("workspace-write", Some(SandboxProfile::WorkspaceWrite)),
];

pub fn run(calls: usize, dir: &std::path::Path) -> anyhow::Result<Vec<Row>> {
    let support = probe();
    if !support.enforced() {
        anyhow::bail!(
            "the sandbox cannot run here: {}; nothing to measure",
            support.describe()
        );
    }
    let workspace_dir = tempfile::Builder::new()
        .prefix("muster-bench-sandbox-")
        .tempdir_in(dir)?;
    std::fs::create_dir_all(workspace_dir.path().join(".git"))?;
    std::fs::create_dir_all(workspace_dir.path().join(".muster"))?;
    let workspace = Workspace::new(workspace_dir.path())?;
    let sandbox = Arc::new(Sandbox {
        trampoline: vec![
            std::env::current_exe()?.into(),
            muster::sandbox::TRAMPOLINE_SUBCOMMAND.into(),
        ],
        mode: SandboxMode::Auto,
        network: false,
        writable: Vec::new(),
        home: std::env::home_dir(),
        protected_files: muster_config::protected::ProtectedFiles::standard(),
    });
    let environment = vec![("PATH".into(), std::env::var_os("PATH").unwrap_or_default())];
    let contexts: Vec<ToolContext> = VARIANTS
        .iter()
        .map(|(_, profile)| {
            let context = ToolContext::new(workspace.clone(), environment.clone());
            match profile {
                Some(profile) => context.with_sandbox(sandbox.clone(), *profile),
                None => context,
            }
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut samples = vec![Samples::default(); VARIANTS.len()];
    runtime.block_on(async {
        for _ in 0..calls {
            for (context, samples) in contexts.iter().zip(samples.iter_mut()) {
                let started = Instant::now();
                let output = Bash
                    .call(context, serde_json::json!({ "command": "true" }))
                    .await;
                samples.push(started.elapsed());
                anyhow::ensure!(!output.is_error, "`true` failed: {}", output.content);
            }
        }
        Ok(())
    })?;
    let unconfined = samples[0].p50();
    Ok(VARIANTS
        .iter()
        .zip(samples)
        .map(|((variant, _), samples)| Row {
            variant,
            calls: samples.len(),
            p50_ms: samples.p50(),
            p99_ms: samples.p99(),
            ratio_to_unconfined: samples.p50().zip(unconfined).map(|(p50, base)| p50 / base),
        })
        .collect())
}

pub fn render(rows: &[Row]) -> String {
    let figure = |value: Option<f64>| value.map_or("-".to_owned(), |v| format!("{v:.2}"));
    let mut text = format!(
        "# Bash `true` per call, interleaved ({})\n{:<16} {:>6} {:>9} {:>9} {:>10}\n",
        probe().describe(),
        "variant",
        "calls",
        "p50 ms",
        "p99 ms",
        "p50 ratio"
    );
    for row in rows {
        text.push_str(&format!(
            "{:<16} {:>6} {:>9} {:>9} {:>10}\n",
            row.variant,
            row.calls,
            figure(row.p50_ms),
            figure(row.p99_ms),
            figure(row.ratio_to_unconfined),
        ));
    }
    text
}
