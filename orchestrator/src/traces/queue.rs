//! The bounded queue between a run and its collector: [`SpanQueue::push`] never waits (a full
//! queue drops the span and counts it), one task sends what is queued in batches through the
//! OTLP/HTTP exporter, and [`SpanQueue::flush`] waits for what was queued before it, at most
//! as long as it is told — so a collector that is down or slow never slows a run.

use std::collections::HashSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use tokio::sync::{mpsc, oneshot};

use muster_agents::trace_ids::hex;
use muster_mailbox::{MailboxStore, NewRecord};

use super::config::TraceConfig;

/// How many spans wait at most; past that they are dropped (and counted).
pub const QUEUE_CAPACITY: usize = 2048;
/// The most spans in one request.
const BATCH: usize = 512;
/// A request under way longer than this marks the collector as slow.
const SLOW_REQUEST: Duration = Duration::from_millis(100);
/// How long a run's end waits for its last spans when the collector is down or slow.
const STRUGGLING_FLUSH: Duration = Duration::from_millis(100);
/// How often a run's final wait looks at the collector's health.
const FLUSH_TICK: Duration = Duration::from_millis(20);
/// How long one export request may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// What the queue did, for the run log.
#[derive(Debug, Default)]
pub struct Counters {
    /// Taken into the queue.
    pub queued: AtomicU64,
    pub exported: AtomicU64,
    /// Sent but refused, timed out or unreachable.
    pub failed: AtomicU64,
    /// Never sent: the queue was full.
    pub dropped: AtomicU64,
    /// The last request failed (refused, timed out, unreachable).
    last_failed: AtomicBool,
    /// When the request under way started (milliseconds on [`Counters::clock`]), or 0.
    busy_since_ms: AtomicU64,
    clock: Option<Instant>,
}

impl Counters {
    fn now_ms(&self) -> u64 {
        self.clock
            .map_or(0, |clock| clock.elapsed().as_millis() as u64 + 1)
    }

    /// Whether the collector looks down or slow: its last request failed, or the one under
    /// way has taken longer than [`SLOW_REQUEST`].
    fn collector_struggles(&self) -> bool {
        let busy_since = self.busy_since_ms.load(Ordering::Relaxed);
        self.last_failed.load(Ordering::Relaxed)
            || (busy_since > 0
                && self.now_ms().saturating_sub(busy_since) > SLOW_REQUEST.as_millis() as u64)
    }
}

/// What waits in the queue.
enum Item {
    Span(Box<SpanData>),
    Flush(oneshot::Sender<()>),
}

/// Where the ids of the spans a collector accepted are noted, so that whoever picks up after
/// a kill sends only the others.
#[derive(Clone)]
pub enum SentNotes {
    /// A file (`.muster/runs/<run>.traces`): the lead's process, resumed on the same machine.
    File(PathBuf),
    /// The run's records in the store (stream [`SENT_STREAM`] of `agent`): a teammate on a
    /// worker, whose work any worker on any machine may resume.
    Store {
        store: Arc<dyn MailboxStore>,
        run_id: String,
        agent: String,
    },
}

/// The record stream of a teammate's sent span ids.
pub const SENT_STREAM: &str = "traces";

impl SentNotes {
    /// Notes `ids` as sent. A failure only means a resume may send them again (with the
    /// same ids).
    async fn note(&self, ids: &[String]) {
        match self {
            SentNotes::File(path) => note_sent(path, ids),
            SentNotes::Store {
                store,
                run_id,
                agent,
            } => {
                let record = NewRecord {
                    agent: agent.clone(),
                    stream: SENT_STREAM.to_owned(),
                    seq: None,
                    body: serde_json::json!({ "sent": ids }),
                };
                if let Err(error) = store.append_records(run_id, vec![record]).await {
                    tracing::debug!(target: "muster::traces", %error, "sent span ids not noted");
                }
            }
        }
    }

    /// The ids noted so far (none when nothing can be read).
    pub async fn sent_ids(&self) -> HashSet<String> {
        match self {
            SentNotes::File(path) => sent_ids(path),
            SentNotes::Store {
                store,
                run_id,
                agent,
            } => store
                .records(run_id, agent, SENT_STREAM, 0)
                .await
                .unwrap_or_default()
                .iter()
                .flat_map(|record| record.body["sent"].as_array().cloned().unwrap_or_default())
                .filter_map(|id| id.as_str().map(str::to_owned))
                .collect(),
        }
    }
}

/// A run's span queue and its sending task.
pub struct SpanQueue {
    sender: mpsc::Sender<Item>,
    counters: Arc<Counters>,
}

/// The exporter could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the traces exporter: {0}")]
pub struct QueueError(#[from] opentelemetry_otlp::ExporterBuildError);

impl SpanQueue {
    /// Starts the sending task on the current tokio runtime. No connection is made before a
    /// span is queued. The id of each span sent is noted in `sent` (so a resume after a
    /// crash sends only what was not).
    pub fn start(
        config: &TraceConfig,
        client: reqwest::Client,
        sent: Option<SentNotes>,
    ) -> Result<SpanQueue, QueueError> {
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_endpoint(config.endpoint.clone())
            .with_headers(config.headers.clone().into_iter().collect())
            .with_timeout(EXPORT_TIMEOUT)
            // Spans are sent as they come; one batch lost to a collector's hiccup is counted,
            // not retried: retries would only hold up the next batches and a run's end.
            .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
            .build()?;
        exporter.set_resource(
            &Resource::builder_empty()
                .with_service_name("muster")
                .with_attribute(opentelemetry::KeyValue::new(
                    "service.version",
                    env!("CARGO_PKG_VERSION"),
                ))
                .build(),
        );
        let (sender, receiver) = mpsc::channel(QUEUE_CAPACITY);
        let counters = Arc::new(Counters {
            clock: Some(Instant::now()),
            ..Counters::default()
        });
        tokio::spawn(send_all(exporter, receiver, counters.clone(), sent));
        Ok(SpanQueue { sender, counters })
    }

    /// Queues `span`, or drops it (counted) when the queue is full. Never waits.
    pub fn push(&self, span: SpanData) {
        match self.sender.try_send(Item::Span(Box::new(span))) {
            Ok(()) => self.counters.queued.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.counters.dropped.fetch_add(1, Ordering::Relaxed),
        };
    }

    /// Waits until what was queued before this call was sent (or failed), at most `within` —
    /// or [`STRUGGLING_FLUSH`] when the collector is down or slow, whose wait would only add
    /// to the run's time. Returns whether it was.
    pub async fn flush(&self, within: Duration) -> bool {
        let started = Instant::now();
        let (done, mut sent) = oneshot::channel();
        let queued = tokio::time::timeout(within, self.sender.send(Item::Flush(done))).await;
        if !matches!(queued, Ok(Ok(()))) {
            return false;
        }
        // The collector's health is looked at again every tick: one that fails or stalls
        // while the run ends cuts the wait short.
        let mut tick = tokio::time::interval(FLUSH_TICK);
        loop {
            tokio::select! {
                answered = &mut sent => return answered.is_ok(),
                _ = tick.tick() => {
                    let waited = started.elapsed();
                    let limit = if self.counters.collector_struggles() {
                        within.min(STRUGGLING_FLUSH)
                    } else {
                        within
                    };
                    if waited >= limit {
                        return false;
                    }
                }
            }
        }
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }
}

/// The sending task: takes what is queued (up to a batch), sends it, acknowledges flushes.
async fn send_all(
    exporter: opentelemetry_otlp::SpanExporter,
    mut receiver: mpsc::Receiver<Item>,
    counters: Arc<Counters>,
    notes: Option<SentNotes>,
) {
    let mut batch = Vec::new();
    let mut flushes = Vec::new();
    while let Some(first) = receiver.recv().await {
        let mut next = Some(first);
        while let Some(item) = next.take() {
            match item {
                Item::Span(span) => batch.push(*span),
                Item::Flush(done) => flushes.push(done),
            }
            if batch.len() < BATCH {
                next = receiver.try_recv().ok();
            }
        }
        if !batch.is_empty() {
            let count = batch.len() as u64;
            let ids: Vec<String> = batch
                .iter()
                .map(|span| hex(&span.span_context.span_id().to_bytes()))
                .collect();
            counters
                .busy_since_ms
                .store(counters.now_ms(), Ordering::Relaxed);
            let sent = tokio::time::timeout(
                EXPORT_TIMEOUT + Duration::from_secs(1),
                exporter.export(std::mem::take(&mut batch)),
            )
            .await;
            counters.busy_since_ms.store(0, Ordering::Relaxed);
            counters
                .last_failed
                .store(!matches!(sent, Ok(Ok(()))), Ordering::Relaxed);
            match sent {
                Ok(Ok(())) => {
                    if let Some(notes) = &notes {
                        notes.note(&ids).await;
                    }
                    counters.exported.fetch_add(count, Ordering::Relaxed)
                }
                Ok(Err(error)) => {
                    tracing::debug!(target: "muster::traces", %error, "spans not exported");
                    counters.failed.fetch_add(count, Ordering::Relaxed)
                }
                Err(_) => counters.failed.fetch_add(count, Ordering::Relaxed),
            };
        }
        for done in flushes.drain(..) {
            let _ = done.send(());
        }
    }
}

/// Appends the ids of spans the collector accepted, one per line. A failure to write only
/// means a resume may send them again (with the same ids).
fn note_sent(path: &Path, ids: &[String]) {
    let mut text = ids.join("\n");
    text.push('\n');
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()));
    if let Err(error) = written {
        tracing::debug!(target: "muster::traces", %error, path = %path.display(), "sent span ids not noted");
    }
}

/// The ids [`note_sent`] noted in `path` (none when it is missing).
fn sent_ids(path: &Path) -> HashSet<String> {
    std::fs::read_to_string(path)
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test assertions fail loudly")]

    use muster_mailbox::{AutoGate, NewRun, SqliteStore, StoreOptions};

    use super::*;

    /// What one process notes as sent, another reads back — from the lead's file, and from
    /// the store for a teammate on a worker (per teammate: another's notes are not its own).
    #[tokio::test]
    async fn sent_ids_noted_by_one_process_are_read_back_by_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn MailboxStore> = Arc::new(
            SqliteStore::open(&dir.path().join("muster.db"), StoreOptions::default()).unwrap(),
        );
        store
            .create_run(NewRun {
                id: "r1".into(),
                slug: "r1-slug".into(),
                team: None,
                workspace: dir.path().display().to_string(),
                batch_line_id: None,
                auto_gate: AutoGate::default(),
                launch_options: serde_json::json!({}),
                project_id: None,
            })
            .await
            .unwrap();
        let in_store = |agent: &str| SentNotes::Store {
            store: store.clone(),
            run_id: "r1".into(),
            agent: agent.into(),
        };
        let notes = [
            SentNotes::File(dir.path().join("r1.traces")),
            in_store("one"),
        ];
        for notes in notes {
            assert!(notes.sent_ids().await.is_empty());
            notes.note(&["a1".into(), "b2".into()]).await;
            notes.note(&["c3".into()]).await;
            let read: std::collections::BTreeSet<String> =
                notes.sent_ids().await.into_iter().collect();
            assert_eq!(read, ["a1", "b2", "c3"].map(String::from).into());
        }
        assert!(in_store("two").sent_ids().await.is_empty());
    }
}
