//! When to compact: the threshold from the catalogue's window and output size.

use muster_config::settings::{CompactionSettings, ModelInfo};
use serde::{Deserialize, Serialize};

use crate::model::Usage;

/// Compaction settings (the `[compaction]` settings table). The defaults follow Claude Code (window − 13k) and Codex (a fraction of
/// the window, a 20k budget for recent user messages).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompactionConfig {
    /// Compact at all.
    pub enabled: bool,
    /// The share of the window the prompt may fill (0.0–1.0; default 0.85).
    #[serde(alias = "window_fraction")]
    pub trigger_ratio: f64,
    /// Tokens kept free beside the model's maximum output (default 13,000).
    pub reserve_tokens: u64,
    /// An absolute threshold; it can only lower the computed one.
    pub max_prompt_tokens: Option<u64>,
    /// The budget for the most recent user and lead messages kept verbatim (default 20,000).
    pub recent_messages_tokens: u64,
    /// `max_tokens` of the summary request (capped by the agent's own `max_tokens`).
    pub summary_max_tokens: u64,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            enabled: true,
            trigger_ratio: 0.85,
            reserve_tokens: 13_000,
            max_prompt_tokens: None,
            recent_messages_tokens: 20_000,
            summary_max_tokens: 8_192,
        }
    }
}

impl CompactionConfig {
    /// From the `[compaction]` settings table (its keys are these fields; the config crate
    /// has checked the ranges).
    pub fn from_settings(settings: &CompactionSettings) -> CompactionConfig {
        CompactionConfig {
            enabled: settings.enabled.value,
            trigger_ratio: settings.trigger_ratio.value,
            reserve_tokens: settings.reserve_tokens.value,
            max_prompt_tokens: settings.max_prompt_tokens.as_ref().map(|v| v.value),
            recent_messages_tokens: settings.recent_messages_tokens.value,
            summary_max_tokens: settings.summary_max_tokens.value,
        }
    }
}

/// The prompt size (tokens) at which to compact for a model: the lower of
/// `trigger_ratio × window` and `window − max_output − reserve_tokens`, lowered further by
/// `max_prompt_tokens`. `None` when compaction is off or the window is unknown (the catalogue
/// has no `context_window` for the model): such a model is never compacted. An unknown
/// `max_output` counts as 0. A reserve that would leave less than a quarter of a small window
/// (a local server's 8k context, say) is cut to an eighth of the window, so such a model is
/// compacted when it nears its window, not before every request.
pub fn compaction_threshold(info: &ModelInfo, config: &CompactionConfig) -> Option<u64> {
    if !config.enabled {
        return None;
    }
    let window = info.context_window?;
    let fraction = if config.trigger_ratio.is_finite() {
        config.trigger_ratio.clamp(0.0, 1.0)
    } else {
        CompactionConfig::default().trigger_ratio
    };
    // Exact for every realistic window; `as` saturates instead of panicking.
    let by_fraction = (window as f64 * fraction).floor() as u64;
    let output = info.max_output.unwrap_or(0);
    let mut by_reserve = window.saturating_sub(output.saturating_add(config.reserve_tokens));
    if by_reserve < window / 4 {
        by_reserve = window.saturating_sub(output.saturating_add(window / 8));
    }
    let threshold = by_fraction.min(by_reserve);
    Some(match config.max_prompt_tokens {
        Some(cap) => threshold.min(cap),
        None => threshold,
    })
}

/// Whether to compact before the next request: the last response's prompt size (input, cache
/// read and cache write tokens) plus `estimated_new_tokens` reaches the threshold.
/// `estimated_new_tokens` covers everything appended to the context since that request: the
/// response itself, tool results, mail (see [`super::estimate_messages_tokens`]).
pub fn needs_compaction(
    last_usage: &Usage,
    estimated_new_tokens: u64,
    info: &ModelInfo,
    config: &CompactionConfig,
) -> bool {
    let Some(threshold) = compaction_threshold(info, config) else {
        return false;
    };
    last_usage
        .prompt_tokens()
        .saturating_add(estimated_new_tokens)
        >= threshold
}
