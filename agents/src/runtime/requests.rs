//! What an agent's model requests are built from: the model in force (the mode's, or the one
//! its definition names or inherits), its output limit clipped to what the model's server
//! reported, the catalogue entry the compaction trigger reads, and the system prompt and tool
//! definitions every request carries. No store, no provider call: the runtime asks, this
//! answers.

use std::collections::BTreeMap;

use muster_config::settings::ModelInfo;
use muster_config::{ModelChoice, PermissionMode};

use crate::model::{Message, ModelRequest, ServerLimits, ToolDefinition};

use super::context::{DEFAULT_MAX_OUTPUT, ModeModel, ModelRouter};

#[derive(Debug, Clone)]
pub(super) struct Requests {
    /// Its own endpoint (kept in its `started` record).
    pub endpoint: Option<muster_config::AgentEndpoint>,
    /// The model the agent's definition names, or its parent's with `inherit`; `None`: the
    /// mode's.
    pub own_model: Option<String>,
    /// What the servers reported about this agent's models (its `started` record's
    /// `model_limits`).
    pub model_limits: BTreeMap<String, ServerLimits>,
    pub system: String,
    pub tool_definitions: std::sync::Arc<[ToolDefinition]>,
}

/// The model an agent's definition names: its own, its parent's with `inherit`, or none.
pub(super) fn own_model(choice: &ModelChoice, inherited: Option<&str>) -> Option<String> {
    match choice {
        ModelChoice::Inherit => inherited.map(str::to_owned),
        ModelChoice::Named(model) => Some(model.clone()),
        ModelChoice::Settings => None,
    }
}

impl Requests {
    /// The model in force in `mode`: the router's, or the agent's own, with that model's
    /// output limit (`catalogue`: the models' settings, for the own model's `max_output`).
    pub(super) fn model_for(
        &self,
        router: &ModelRouter,
        catalogue: &BTreeMap<String, ModelInfo>,
        mode: PermissionMode,
    ) -> ModeModel {
        let routed = router.for_mode(mode).clone();
        match &self.own_model {
            Some(model) if *model != routed.model => {
                let configured = catalogue
                    .get(model)
                    .and_then(|info| info.max_output)
                    .unwrap_or(DEFAULT_MAX_OUTPUT);
                ModeModel {
                    max_tokens: self.output_limit(model, configured),
                    model: model.clone(),
                    ..routed
                }
            }
            _ => ModeModel {
                max_tokens: self.output_limit(&routed.model, routed.max_tokens),
                ..routed
            },
        }
    }

    /// `configured` (the catalogue's or the mode's output limit) clipped to what the server
    /// reported for `model`: its output limit, and a quarter of its context window (so a
    /// prompt keeps at least three quarters of a window the catalogue may not know).
    pub(super) fn output_limit(&self, model: &str, configured: u64) -> u64 {
        let Some(reported) = self.model_limits.get(model) else {
            return configured;
        };
        let by_window = reported.context_window.map(|window| (window / 4).max(1));
        [Some(configured), reported.max_output, by_window]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(configured)
    }

    /// The catalogue's entry for `model` with the server's report applied (the smaller
    /// context window; the clipped output limit `max_tokens`): what the compaction trigger
    /// reads. A model the catalogue lacks has an entry when its server reported a window.
    pub(super) fn model_info(
        &self,
        catalogue: &BTreeMap<String, ModelInfo>,
        model: &str,
        max_tokens: u64,
    ) -> Option<ModelInfo> {
        let catalogued = catalogue.get(model).cloned();
        let Some(reported) = self.model_limits.get(model) else {
            return catalogued;
        };
        let mut info = catalogued.unwrap_or_default();
        info.context_window = match (info.context_window, reported.context_window) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        info.max_output = Some(max_tokens);
        Some(info)
    }

    /// The next request of `model` on `messages`.
    pub(super) fn request(&self, model: &ModeModel, messages: &[Message]) -> ModelRequest {
        ModelRequest {
            model: model.model.clone(),
            system: self.system.clone(),
            messages: messages.to_vec(),
            tools: self.tool_definitions.clone(),
            max_tokens: model.max_tokens,
            thinking: model.thinking,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requests(reported: Option<ServerLimits>) -> Requests {
        Requests {
            endpoint: None,
            own_model: None,
            model_limits: reported
                .map(|limits| BTreeMap::from([("m".to_owned(), limits)]))
                .unwrap_or_default(),
            system: String::new(),
            tool_definitions: Vec::new().into(),
        }
    }

    /// The configured output limit, clipped by the server's limit and a quarter of its window.
    #[test]
    fn the_output_limit_is_clipped_to_what_the_server_reported() {
        let table = [
            (None, None, 8192),
            (Some(4096), None, 4096),
            (None, Some(16_000), 4000),
            (Some(100_000), Some(1_000_000), 8192),
            (Some(3000), Some(8000), 2000),
        ];
        for (max_output, context_window, expected) in table {
            let reported = ServerLimits {
                max_output,
                context_window,
            };
            assert_eq!(
                requests(Some(reported)).output_limit("m", 8192),
                expected,
                "{max_output:?} {context_window:?}"
            );
        }
        assert_eq!(requests(None).output_limit("m", 8192), 8192);
    }

    /// The compaction trigger's entry takes the smaller window and the clipped output limit.
    #[test]
    fn the_model_info_merges_the_catalogue_and_the_report() {
        let catalogue = BTreeMap::from([(
            "m".to_owned(),
            ModelInfo {
                context_window: Some(200_000),
                ..ModelInfo::default()
            },
        )]);
        let reported = ServerLimits {
            max_output: None,
            context_window: Some(32_000),
        };
        let info = requests(Some(reported))
            .model_info(&catalogue, "m", 4000)
            .unwrap();
        assert_eq!(info.context_window, Some(32_000));
        assert_eq!(info.max_output, Some(4000));
        assert_eq!(
            requests(None).model_info(&catalogue, "m", 4000),
            catalogue.get("m").cloned(),
            "without a report the catalogue's entry stands"
        );
        assert_eq!(requests(None).model_info(&BTreeMap::new(), "m", 4000), None);
    }

    /// `inherit` takes the parent's model, a name is the agent's own, `settings` the mode's.
    #[test]
    fn the_own_model_follows_the_definition() {
        let named = ModelChoice::Named("x".into());
        assert_eq!(own_model(&named, Some("p")), Some("x".into()));
        assert_eq!(
            own_model(&ModelChoice::Inherit, Some("p")),
            Some("p".into())
        );
        assert_eq!(own_model(&ModelChoice::Inherit, None), None);
        assert_eq!(own_model(&ModelChoice::Settings, Some("p")), None);
    }
}
