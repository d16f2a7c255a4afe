//! The bounded queue between a run and its collector: [`SpanQueue::push`] never waits (a full
//! queue drops the span and counts it), one task sends what is queued in batches through the
//! OTLP/HTTP exporter, and [`SpanQueue::flush`] waits for what was queued before it, at most
//! as long as it is told — so a collector that is down or slow never slows a run.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use tokio::sync::{mpsc, oneshot};

use muster_agents::trace_ids::hex;

use super::config::TraceConfig;

/// How many spans wait at most; past that they are dropped (and counted).
pub const QUEUE_CAPACITY: usize = 2048;
/// The most spans in one request.
const BATCH: usize = 512;
/// How long one export request may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// What the queue did, for the run log.
#[derive(Debug, Default)]
pub struct Counters {
    pub exported: AtomicU64,
    /// Sent but refused, timed out or unreachable.
    pub failed: AtomicU64,
    /// Never sent: the queue was full.
    pub dropped: AtomicU64,
}

/// What waits in the queue.
enum Item {
    Span(Box<SpanData>),
    Flush(oneshot::Sender<()>),
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
    /// span is queued. The id of each span sent is appended to `sent_file` (so a resume
    /// after a crash sends only what was not).
    pub fn start(
        config: &TraceConfig,
        client: reqwest::Client,
        sent_file: Option<PathBuf>,
    ) -> Result<SpanQueue, QueueError> {
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_endpoint(config.endpoint.clone())
            .with_headers(config.headers.clone().into_iter().collect())
            .with_timeout(EXPORT_TIMEOUT)
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
        let counters = Arc::new(Counters::default());
        tokio::spawn(send_all(exporter, receiver, counters.clone(), sent_file));
        Ok(SpanQueue { sender, counters })
    }

    /// Queues `span`, or drops it (counted) when the queue is full. Never waits.
    pub fn push(&self, span: SpanData) {
        if self.sender.try_send(Item::Span(Box::new(span))).is_err() {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits until what was queued before this call was sent (or failed), at most `within`.
    /// Returns whether it was.
    pub async fn flush(&self, within: Duration) -> bool {
        let (done, sent) = oneshot::channel();
        let flushed = async {
            self.sender.send(Item::Flush(done)).await.ok()?;
            sent.await.ok()
        };
        matches!(tokio::time::timeout(within, flushed).await, Ok(Some(())))
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
    sent_file: Option<PathBuf>,
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
            let sent = tokio::time::timeout(
                EXPORT_TIMEOUT + Duration::from_secs(1),
                exporter.export(std::mem::take(&mut batch)),
            )
            .await;
            match sent {
                Ok(Ok(())) => {
                    if let Some(path) = &sent_file {
                        note_sent(path, &ids);
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
pub fn sent_ids(path: &Path) -> std::collections::HashSet<String> {
    std::fs::read_to_string(path)
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}
