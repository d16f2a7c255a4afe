//! Provider settings loaded through `muster-config` (files, `MUSTER_*` variables, defaults)
//! reach the HTTP clients of `muster-agents` as the documentation says: where the base URL and
//! the key come from, per provider. A table; no request leaves the machine.

use std::collections::BTreeMap;

use muster_agents::model::{ProviderOptions, client_config};
use muster_config::project::ProjectRoot;
use muster_config::settings::ProviderKind;
use muster_config::{CliOverrides, Settings, SettingsInputs};

struct Row {
    name: &'static str,
    kind: ProviderKind,
    settings: &'static str,
    env: &'static [(&'static str, &'static str)],
    /// The base URL and key of the client, or the start of the setup error.
    expected: Result<(&'static str, Option<&'static str>), &'static str>,
}

const ROWS: &[Row] = &[
    Row {
        name: "openai: OPENAI_BASE_URL when settings name no base URL",
        kind: ProviderKind::OpenAi,
        settings: "",
        env: &[
            ("OPENAI_BASE_URL", "http://gateway.test:1/v1"),
            ("OPENAI_API_KEY", "sk-env"),
        ],
        expected: Ok(("http://gateway.test:1/v1", Some("sk-env"))),
    },
    Row {
        name: "anthropic: ANTHROPIC_BASE_URL when settings name no base URL",
        kind: ProviderKind::Anthropic,
        settings: "",
        env: &[
            ("ANTHROPIC_BASE_URL", "http://gateway.test:2"),
            ("ANTHROPIC_API_KEY", "sk-ant-env"),
        ],
        expected: Ok(("http://gateway.test:2", Some("sk-ant-env"))),
    },
    Row {
        name: "openai: a settings file's base URL beats OPENAI_BASE_URL",
        kind: ProviderKind::OpenAi,
        settings: "[providers.openai]\nbase_url = \"http://ollama.test:11434/v1/\"\n",
        env: &[("OPENAI_BASE_URL", "http://gateway.test:1/v1")],
        expected: Ok(("http://ollama.test:11434/v1", None)),
    },
    Row {
        name: "openai: MUSTER_PROVIDERS__OPENAI__BASE_URL is a setting",
        kind: ProviderKind::OpenAi,
        settings: "",
        env: &[
            (
                "MUSTER_PROVIDERS__OPENAI__BASE_URL",
                "http://vllm.test:8000/v1",
            ),
            ("OPENAI_BASE_URL", "http://gateway.test:1/v1"),
        ],
        expected: Ok(("http://vllm.test:8000/v1", None)),
    },
    Row {
        name: "openai: the key from the variable the settings name",
        kind: ProviderKind::OpenAi,
        settings: "[providers.openai]\nbase_url = \"http://ollama.test:11434/v1\"\napi_key_env = \"OLLAMA_KEY\"\n",
        env: &[("OLLAMA_KEY", "sk-named"), ("OPENAI_API_KEY", "sk-default")],
        expected: Ok(("http://ollama.test:11434/v1", Some("sk-named"))),
    },
    Row {
        name: "openai: the official endpoint without a key is refused",
        kind: ProviderKind::OpenAi,
        settings: "",
        env: &[],
        expected: Err("openai: no API key: set OPENAI_API_KEY"),
    },
];

#[test]
fn provider_settings_reach_the_clients_base_url_and_key() {
    for row in ROWS {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".muster")).unwrap();
        std::fs::write(dir.path().join(".muster/settings.toml"), row.settings).unwrap();
        let env: BTreeMap<String, String> = row
            .env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let root = ProjectRoot::at(dir.path());
        let settings = Settings::load(&SettingsInputs {
            project_root: &root,
            home_dir: None,
            env: &env,
            cli: &CliOverrides::new(),
            trust: &muster_config::TrustDecision::trusted_by_caller(),
            snapshot: None,
        })
        .unwrap_or_else(|e| panic!("{}: {e}", row.name))
        .value;
        let lookup = |name: &str| env.get(name).cloned();
        let config = client_config(
            row.kind,
            settings.provider(row.kind),
            &settings.models,
            &lookup,
            &ProviderOptions::default(),
        );
        match (config, row.expected) {
            (Ok(config), Ok((url, key))) => assert_eq!(
                (config.base_url.as_str(), config.api_key.as_deref()),
                (url, key),
                "{}",
                row.name
            ),
            (Err(error), Err(start)) => {
                assert!(
                    error.to_string().starts_with(start),
                    "{}: {error}",
                    row.name
                );
            }
            (Ok(config), Err(_)) => panic!("{}: built for {}", row.name, config.base_url),
            (Err(error), Ok(_)) => panic!("{}: {error}", row.name),
        }
    }
}
