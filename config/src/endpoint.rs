//! The model and provider one agent uses when it differs from the run's (`[plan]`/`[act]`):
//! set by an agent definition's front matter or a team file's teammate entry.

use serde::{Deserialize, Serialize};

use crate::settings::ProviderKind;

/// An agent's own model and provider. Each field left unset keeps the run's value for the
/// mode (the per-mode split inherits from what is set here).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AgentEndpoint {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<ProviderKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The server's base URL (repository code's reach: needs trust when a project file sets it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The environment variable holding the key (needs trust when a project file sets it: a
    /// repository must not send another of the user's secrets to its server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
}

/// The endpoint keys a definition or a teammate entry may set.
pub const ENDPOINT_KEYS: &[&str] = &["provider", "model", "base_url", "api_key_env"];

impl AgentEndpoint {
    /// Whether it sets nothing (the run's models apply).
    pub fn is_empty(&self) -> bool {
        self == &AgentEndpoint::default()
    }

    /// This endpoint with each field `over` sets replacing this one's.
    pub fn overlaid_by(&self, over: &AgentEndpoint) -> AgentEndpoint {
        AgentEndpoint {
            provider: over.provider.or(self.provider),
            model: over.model.clone().or_else(|| self.model.clone()),
            base_url: over.base_url.clone().or_else(|| self.base_url.clone()),
            api_key_env: over
                .api_key_env
                .clone()
                .or_else(|| self.api_key_env.clone()),
        }
    }

    /// Drops what only trust may set (`base_url`, `api_key_env`), returning each dropped
    /// one as `key = "value"`.
    pub fn skip_untrusted(&mut self) -> Vec<String> {
        let mut skipped = Vec::new();
        if let Some(url) = self.base_url.take() {
            skipped.push(format!("base_url = \"{url}\""));
        }
        if let Some(variable) = self.api_key_env.take() {
            skipped.push(format!("api_key_env = \"{variable}\""));
        }
        skipped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overlay_replaces_only_the_fields_it_sets() {
        let base = AgentEndpoint {
            provider: Some(ProviderKind::Anthropic),
            model: Some("a".into()),
            base_url: Some("http://a".into()),
            api_key_env: None,
        };
        let over = AgentEndpoint {
            provider: Some(ProviderKind::OpenAi),
            api_key_env: Some("K".into()),
            ..AgentEndpoint::default()
        };
        let merged = base.overlaid_by(&over);
        assert_eq!(merged.provider, Some(ProviderKind::OpenAi));
        assert_eq!(merged.model.as_deref(), Some("a"));
        assert_eq!(merged.base_url.as_deref(), Some("http://a"));
        assert_eq!(merged.api_key_env.as_deref(), Some("K"));
        assert!(AgentEndpoint::default().is_empty());
        assert!(!merged.is_empty());
    }

    #[test]
    fn untrusted_files_lose_the_url_and_the_key_variable_only() {
        let mut endpoint = AgentEndpoint {
            provider: Some(ProviderKind::OpenAi),
            model: Some("m".into()),
            base_url: Some("http://evil".into()),
            api_key_env: Some("AWS_SECRET".into()),
        };
        let skipped = endpoint.skip_untrusted();
        assert_eq!(
            skipped,
            ["base_url = \"http://evil\"", "api_key_env = \"AWS_SECRET\""]
        );
        assert_eq!(endpoint.provider, Some(ProviderKind::OpenAi));
        assert_eq!(endpoint.model.as_deref(), Some("m"));
        assert!(endpoint.base_url.is_none() && endpoint.api_key_env.is_none());
    }
}
