//! What a run spent, per agent, model and provider, read back from its agents' records (the
//! usage each response reported, as committed with its message): what the summary,
//! `run_finished` and `muster runs --json` show.

use std::collections::BTreeMap;

use muster_config::settings::{ModelInfo, ProviderKind};
use muster_config::{AgentEndpoint, PermissionMode};
use muster_mailbox::{AgentRecord, MailboxStore};
use serde::Serialize;

use crate::budget::cost_of;
use crate::model::Usage;

use super::error::RuntimeResult;
use super::records::{Record, TRANSCRIPT};

/// What one agent spent on one model of one provider.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CostRow {
    pub agent: String,
    pub model: String,
    pub provider: String,
    pub requests: u64,
    pub input_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub output_tokens: u64,
    /// At the catalogue's prices; `None` when a request's model has none.
    pub cost_usd: Option<f64>,
}

/// A run's cost report: its rows and totals.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CostReport {
    /// One row per agent, model and provider.
    #[serde(rename = "agents")]
    pub rows: Vec<CostRow>,
    pub total: CostRow,
    /// What reading from the cache saved against paying the input price for those tokens,
    /// less what writing to it cost above the input price (priced models only).
    pub cache_saved_usd: f64,
}

impl CostReport {
    /// The report of run `run_id`: `providers` gives the run's provider in a mode (an agent
    /// with its own endpoint's provider overrides it); `models` the catalogue's prices.
    pub async fn of_run(
        store: &dyn MailboxStore,
        run_id: &str,
        models: &BTreeMap<String, ModelInfo>,
        providers: &dyn Fn(PermissionMode) -> ProviderKind,
    ) -> RuntimeResult<CostReport> {
        let mut transcripts = Vec::new();
        for member in store.roster(run_id).await? {
            let records = store.records(run_id, &member.agent, TRANSCRIPT, 0).await?;
            transcripts.push((member.agent, records));
        }
        CostReport::of_transcripts(
            transcripts
                .iter()
                .map(|(agent, records)| (agent.as_str(), records.as_slice())),
            models,
            providers,
        )
    }

    /// The report from each agent's transcript records, read already (the web inbox reads
    /// every transcript of a run at once).
    pub fn of_transcripts<'a>(
        transcripts: impl IntoIterator<Item = (&'a str, &'a [AgentRecord])>,
        models: &BTreeMap<String, ModelInfo>,
        providers: &dyn Fn(PermissionMode) -> ProviderKind,
    ) -> RuntimeResult<CostReport> {
        let mut report = CostReport::default();
        let mut rows: BTreeMap<(String, String, String), CostRow> = BTreeMap::new();
        for (agent, records) in transcripts {
            let mut endpoint: Option<AgentEndpoint> = None;
            for row in records {
                let (model, mode, usage, cost) = match Record::from_stored(row)? {
                    Record::Started { endpoint: own, .. } => {
                        endpoint = own;
                        continue;
                    }
                    Record::Message {
                        model: Some(model),
                        mode,
                        usage: Some(usage),
                        cost_usd,
                        ..
                    } => (model, mode, usage, cost_usd),
                    Record::Compacted {
                        model,
                        usage,
                        cost_usd,
                        ..
                    } => (model, PermissionMode::Default, usage, cost_usd),
                    _ => continue,
                };
                let provider = endpoint
                    .as_ref()
                    .and_then(|e| e.provider)
                    .unwrap_or_else(|| providers(mode));
                let info = models.get(&model);
                let cost = cost.or_else(|| cost_of(&usage, info));
                report.cache_saved_usd += cache_saving(&usage, info);
                let key = (agent.to_owned(), model.clone(), provider.to_string());
                let entry = rows.entry(key).or_insert_with(|| CostRow {
                    agent: agent.to_owned(),
                    model,
                    provider: provider.to_string(),
                    cost_usd: Some(0.0),
                    ..CostRow::default()
                });
                add(entry, &usage, cost);
                add(&mut report.total, &usage, cost);
            }
        }
        if report.total.requests == 0 {
            report.total.cost_usd = Some(0.0);
        }
        report.rows = rows.into_values().collect();
        Ok(report)
    }
}

/// Adds one request to `row` (a cost unknown once stays unknown).
fn add(row: &mut CostRow, usage: &Usage, cost: Option<f64>) {
    if row.requests == 0 {
        row.cost_usd = Some(0.0);
    }
    row.requests += 1;
    row.input_tokens += usage.input_tokens;
    row.cache_read_tokens += usage.cache_read_tokens;
    row.cache_write_tokens += usage.cache_write_tokens;
    row.output_tokens += usage.output_tokens;
    row.cost_usd = match (row.cost_usd, cost) {
        (Some(sum), Some(cost)) => Some(sum + cost),
        _ => None,
    };
}

/// What the cache saved on one request at `info`'s prices (0 without prices).
fn cache_saving(usage: &Usage, info: Option<&ModelInfo>) -> f64 {
    let Some(price_in) = info.and_then(|info| info.price_in) else {
        return 0.0;
    };
    let read = info.and_then(|i| i.price_cache_read).unwrap_or(price_in);
    let write = info.and_then(|i| i.price_cache_write).unwrap_or(price_in);
    (usage.cache_read_tokens as f64 * (price_in - read)
        - usage.cache_write_tokens as f64 * (write - price_in))
        / 1_000_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_add_up_and_an_unknown_cost_stays_unknown() {
        let usage = Usage {
            input_tokens: 10,
            output_tokens: 2,
            cache_read_tokens: 100,
            cache_write_tokens: 5,
        };
        let mut row = CostRow::default();
        add(&mut row, &usage, Some(0.5));
        add(&mut row, &usage, Some(0.25));
        assert_eq!(
            (
                row.requests,
                row.input_tokens,
                row.cache_read_tokens,
                row.cost_usd
            ),
            (2, 20, 200, Some(0.75))
        );
        add(&mut row, &usage, None);
        assert_eq!(row.cost_usd, None);
    }

    #[test]
    fn the_cache_saves_reads_below_the_input_price_less_writes_above_it() {
        let info = ModelInfo {
            price_in: Some(3.0),
            price_out: Some(15.0),
            price_cache_read: Some(0.3),
            price_cache_write: Some(3.75),
            ..ModelInfo::default()
        };
        let usage = Usage {
            input_tokens: 0,
            output_tokens: 0,
            cache_read_tokens: 1_000_000,
            cache_write_tokens: 1_000_000,
        };
        let saved = cache_saving(&usage, Some(&info));
        assert!((saved - (2.7 - 0.75)).abs() < 1e-9, "{saved}");
        assert_eq!(cache_saving(&usage, None), 0.0);
    }
}
