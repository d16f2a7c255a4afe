//! `fake-llm serve --addr 127.0.0.1:0 --script FILE`: prints its base URL
//! (`http://127.0.0.1:PORT`) as the first line on stdout, then serves until interrupted.

use anyhow::Context;
use clap::{Parser, Subcommand};
use muster_fake_llm::{FakeLlm, FakeLlmConfig, KeyCheck, parse_script};
use std::io::Write;

#[derive(Parser)]
#[command(
    name = "fake-llm",
    about = "A fake Anthropic/OpenAI model server for tests"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a script.
    Serve {
        /// Address to bind.
        #[arg(long, default_value = "127.0.0.1:0")]
        addr: String,
        /// Script file (JSON array or JSON lines); none = start empty, add via /_fake/script.
        #[arg(long)]
        script: Option<std::path::PathBuf>,
        /// Accept only this API key (default: any non-empty key).
        #[arg(long, conflicts_with = "no_auth")]
        api_key: Option<String>,
        /// Require no API key at all.
        #[arg(long)]
        no_auth: bool,
        /// Bodies larger than this get a 413.
        #[arg(long, default_value_t = 32 * 1024 * 1024)]
        max_body_bytes: usize,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Command::Serve {
        addr,
        script,
        api_key,
        no_auth,
        max_body_bytes,
    } = Cli::parse().command;
    let entries = match &script {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading script {}", path.display()))?;
            parse_script(&text)?
        }
        None => Vec::new(),
    };
    let keys = match (api_key, no_auth) {
        (_, true) => KeyCheck::None,
        (Some(key), false) => KeyCheck::Exact(key),
        (None, false) => KeyCheck::Any,
    };
    let config = FakeLlmConfig {
        keys,
        max_body_bytes,
        ..FakeLlmConfig::default()
    };
    let handle = FakeLlm::bind(&addr, config, entries).await?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", handle.base_url())?;
    out.flush()?;
    drop(out);
    tokio::signal::ctrl_c().await?;
    handle.shutdown().await;
    Ok(())
}
