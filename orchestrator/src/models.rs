//! The models of a run per mode (Cline's plan/act split), and whether it records the model's
//! replies into a cassette: what single and team runs share of building their providers.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use muster_agents::model::{
    ModelProvider, ProviderOptions, Recorder, ScriptOptions, ThinkingSettings, build_provider,
};
use muster_agents::runtime::{ModeModel, ModelRouter};
use muster_config::PermissionMode;
use muster_config::settings::ProviderKind;

use crate::exit::{Exit, ExitError};

fn usage(message: impl Into<String>) -> anyhow::Error {
    ExitError::new(Exit::Usage, message).into()
}

/// Whether a run records the model's replies into a cassette (`--record`).
pub(crate) enum Recording<'a> {
    Off,
    /// Start a new cassette.
    New(&'a Path),
    /// Append to the cassette of an earlier part of the run.
    Append(&'a Path),
}

impl<'a> Recording<'a> {
    /// A run's recording (single or team): a new run starts a fresh cassette at `path`
    /// (replacing what was there); a resumed run appends to it.
    pub(crate) fn of(path: Option<&'a Path>, resumed: bool) -> Recording<'a> {
        match path {
            Some(path) if resumed => Recording::Append(path),
            Some(path) => Recording::New(path),
            None => Recording::Off,
        }
    }
}

/// The model of each mode (Cline's plan/act split), one provider per kind shared by both
/// modes; the `script` provider replays with the drift hash hiding run ids and slugs.
pub(crate) fn model_router(
    settings: &muster_config::Settings,
    env: &BTreeMap<String, String>,
    strict: bool,
    recording: Recording<'_>,
) -> anyhow::Result<ModelRouter> {
    let lookup = |name: &str| env.get(name).cloned();
    let options = ProviderOptions {
        script: ScriptOptions {
            strict,
            redactions: crate::ids::hash_redactions(),
        },
        ..ProviderOptions::default()
    };
    let mut built: BTreeMap<&'static str, Arc<dyn ModelProvider>> = BTreeMap::new();
    let mut model_for = |mode: PermissionMode| -> anyhow::Result<ModeModel> {
        let mode_settings = settings.mode(mode);
        let kind: ProviderKind = mode_settings.provider.value;
        let provider = match built.get(kind.as_str()) {
            Some(provider) => provider.clone(),
            None => {
                let provider = build_provider(kind, settings, &lookup, &options)
                    .map_err(|e| usage(e.to_string()))?;
                let provider: Arc<dyn ModelProvider> = match recording {
                    Recording::Off => provider,
                    Recording::New(path) => Arc::new(
                        Recorder::create(provider, path, crate::ids::hash_redactions())
                            .map_err(|e| usage(e.to_string()))?,
                    ),
                    Recording::Append(path) => Arc::new(
                        Recorder::append(provider, path, crate::ids::hash_redactions())
                            .map_err(|e| usage(e.to_string()))?,
                    ),
                };
                built.insert(kind.as_str(), provider.clone());
                provider
            }
        };
        let model = mode_settings.model.value.clone();
        let max_tokens = settings
            .models
            .get(&model)
            .and_then(|info| info.max_output)
            .unwrap_or(muster_agents::runtime::DEFAULT_MAX_OUTPUT);
        Ok(ModeModel {
            provider,
            model,
            max_tokens,
            thinking: ThinkingSettings {
                budget_tokens: mode_settings.thinking_budget.as_ref().map(|s| s.value),
                effort: mode_settings.reasoning_effort.as_ref().map(|s| s.value),
            },
        })
    };
    Ok(ModelRouter {
        plan: model_for(PermissionMode::Plan)?,
        act: model_for(PermissionMode::Default)?,
    })
}
