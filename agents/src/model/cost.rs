//! Cost per request from `usage` and the configured prices, and running totals for budgets.

use muster_config::settings::ModelInfo;
use serde::{Deserialize, Serialize};

use super::types::{ModelResponse, Usage};

/// US dollars for `usage` at `info`'s prices (per million tokens), or `None` when the input
/// and output prices are unknown. Cache reads without a price cost the input price; cache
/// writes without a price cost the input price.
pub fn cost_usd(usage: &Usage, info: &ModelInfo) -> Option<f64> {
    let (price_in, price_out) = (info.price_in?, info.price_out?);
    let read = info.price_cache_read.unwrap_or(price_in);
    let write = info.price_cache_write.unwrap_or(price_in);
    let per_token = |tokens: u64, price: f64| tokens as f64 * price / 1_000_000.0;
    Some(
        per_token(usage.input_tokens, price_in)
            + per_token(usage.output_tokens, price_out)
            + per_token(usage.cache_read_tokens, read)
            + per_token(usage.cache_write_tokens, write),
    )
}

/// Running totals over requests, for budgets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageTotals {
    pub requests: u64,
    pub usage: Usage,
    /// The summed cost of the requests whose cost was known.
    pub cost_usd: f64,
    /// Requests whose cost was unknown (no prices for their model).
    pub unpriced_requests: u64,
}

impl UsageTotals {
    /// Adds one response.
    pub fn add(&mut self, response: &ModelResponse) {
        self.requests += 1;
        let u = &response.usage;
        let t = &mut self.usage;
        t.input_tokens = t.input_tokens.saturating_add(u.input_tokens);
        t.output_tokens = t.output_tokens.saturating_add(u.output_tokens);
        t.cache_read_tokens = t.cache_read_tokens.saturating_add(u.cache_read_tokens);
        t.cache_write_tokens = t.cache_write_tokens.saturating_add(u.cache_write_tokens);
        match response.cost_usd {
            Some(c) => self.cost_usd += c,
            None => self.unpriced_requests += 1,
        }
    }

    /// All tokens billed.
    pub fn total_tokens(&self) -> u64 {
        self.usage.total_tokens()
    }
}
