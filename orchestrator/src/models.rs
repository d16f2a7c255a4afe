//! The models of a run per mode (Cline's plan/act split), and whether it records the model's
//! replies into a cassette: what single and team runs share of building their providers.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use muster_agents::model::{
    ModelProvider, ProviderOptions, Recorder, ScriptOptions, ThinkingSettings, build_provider_with,
};
use muster_agents::runtime::{AgentModels, ModeModel, ModelRouter};
use muster_config::settings::ProviderKind;
use muster_config::{AgentEndpoint, Layer, Origin, PermissionMode, Sourced};

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

/// The run's models (Cline's plan/act split) and the models of agents with their own
/// provider or model (see [`agent_models`]).
pub(crate) struct RunModels {
    pub router: ModelRouter,
    pub agents: AgentModels,
}

/// The model of each mode (Cline's plan/act split), one provider per kind shared by both
/// modes; the `script` provider replays with the drift hash hiding run ids and slugs. Agents
/// with an endpoint of their own get theirs from [`RunModels::agents`].
pub(crate) fn run_models(
    settings: &muster_config::Settings,
    env: &BTreeMap<String, String>,
    strict: bool,
    recording: Recording<'_>,
) -> anyhow::Result<RunModels> {
    let options = provider_options(strict);
    let mut built: BTreeMap<ProviderKey, Arc<dyn ModelProvider>> = BTreeMap::new();
    let router = router_for(
        settings,
        env,
        &options,
        &AgentEndpoint::default(),
        &mut built,
        &recording,
    )
    .map_err(usage)?;
    // A later provider appends to the cassette the run's own providers started.
    let appending = match recording {
        Recording::Off => None,
        Recording::New(path) | Recording::Append(path) => Some(path.to_path_buf()),
    };
    let settings = settings.clone();
    let env = env.clone();
    let built = std::sync::Mutex::new(built);
    let agents = AgentModels::new(Arc::new(move |endpoint: &AgentEndpoint| {
        let recording = match &appending {
            Some(path) => Recording::Append(path),
            None => Recording::Off,
        };
        let mut built = built.lock().unwrap_or_else(|p| p.into_inner());
        router_for(&settings, &env, &options, endpoint, &mut built, &recording)
    }));
    Ok(RunModels { router, agents })
}

/// Checks that the own endpoint of each of `agents` (`(who, endpoint)`: who names the agent
/// and where its endpoint comes from) builds, before the run exists: an error names the agent.
pub(crate) fn check_agent_endpoints<'a>(
    settings: &muster_config::Settings,
    env: &BTreeMap<String, String>,
    agents: impl IntoIterator<Item = (String, &'a AgentEndpoint)>,
) -> anyhow::Result<()> {
    let options = provider_options(false);
    let mut built = BTreeMap::new();
    for (who, endpoint) in agents {
        if endpoint.is_empty() {
            continue;
        }
        router_for(
            settings,
            env,
            &options,
            endpoint,
            &mut built,
            &Recording::Off,
        )
        .map_err(|e| usage(format!("{who}: {e}")))?;
    }
    Ok(())
}

fn provider_options(strict: bool) -> ProviderOptions {
    ProviderOptions {
        script: ScriptOptions {
            strict,
            redactions: crate::ids::hash_redactions(),
        },
        ..ProviderOptions::default()
    }
}

/// What makes two providers one: the kind, base URL and key variable.
type ProviderKey = (ProviderKind, Option<String>, Option<String>);

/// The models per mode of `endpoint` (the run's own for an empty one): each mode's provider
/// and model unless the endpoint names them; providers already `built` are shared.
fn router_for(
    settings: &muster_config::Settings,
    env: &BTreeMap<String, String>,
    options: &ProviderOptions,
    endpoint: &AgentEndpoint,
    built: &mut BTreeMap<ProviderKey, Arc<dyn ModelProvider>>,
    recording: &Recording<'_>,
) -> Result<ModelRouter, String> {
    let mut model_for = |mode: PermissionMode| -> Result<ModeModel, String> {
        let mode_settings = settings.mode(mode);
        let kind: ProviderKind = endpoint.provider.unwrap_or(mode_settings.provider.value);
        let key = (
            kind,
            endpoint.base_url.clone(),
            endpoint.api_key_env.clone(),
        );
        let provider = match built.get(&key) {
            Some(provider) => provider.clone(),
            None => {
                let provider = build_one(settings, env, options, endpoint, kind, recording)?;
                built.insert(key, provider.clone());
                provider
            }
        };
        let model = endpoint
            .model
            .clone()
            .unwrap_or_else(|| mode_settings.model.value.clone());
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

/// One provider: the settings' `providers.KIND` with the endpoint's base URL and key
/// variable over them, wrapped in the run's recorder.
fn build_one(
    settings: &muster_config::Settings,
    env: &BTreeMap<String, String>,
    options: &ProviderOptions,
    endpoint: &AgentEndpoint,
    kind: ProviderKind,
    recording: &Recording<'_>,
) -> Result<Arc<dyn ModelProvider>, String> {
    let lookup = |name: &str| env.get(name).cloned();
    // A key variable the agent names must be set, whatever server it calls (unlike the
    // settings' default variable, which only the official endpoints require).
    if let Some(variable) = &endpoint.api_key_env
        && lookup(variable).is_none_or(|key| key.trim().is_empty())
    {
        return Err(format!(
            "{kind}: no API key: the agent's api_key_env names {variable}, which is not set here"
        ));
    }
    let own = Origin {
        layer: Layer::Project,
        source: "the agent's own endpoint".into(),
        position: None,
    };
    let mut provider_settings = settings.provider(kind).clone();
    if let Some(url) = &endpoint.base_url {
        provider_settings.base_url = Some(Sourced::new(url.clone(), own.clone()));
    }
    if let Some(variable) = &endpoint.api_key_env {
        provider_settings.api_key_env = Some(Sourced::new(variable.clone(), own));
        // A key written in settings is the settings' provider's, not this endpoint's.
        provider_settings.api_key = None;
    }
    let provider = build_provider_with(kind, &provider_settings, settings, &lookup, options)
        .map_err(|e| e.to_string())?;
    Ok(match recording {
        Recording::Off => provider,
        Recording::New(path) => Arc::new(
            Recorder::create(provider, path, crate::ids::hash_redactions())
                .map_err(|e| e.to_string())?,
        ),
        Recording::Append(path) => Arc::new(
            Recorder::append(provider, path, crate::ids::hash_redactions())
                .map_err(|e| e.to_string())?,
        ),
    })
}
