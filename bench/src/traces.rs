//! `muster bench team`'s traces rows: the tasks scenario's run with traces off, on to a local
//! collector, on to a collector that is down (a closed port) and on to one that answers each
//! request only after [`SLOW`], then off again — the two "off" runs show the machine's noise.
//! The local collector is an in-process HTTP server that takes `POST /v1/traces` and counts
//! the requests and bytes (it does not decode them: the tests do that).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use muster_mailbox::SyncMode;

use super::team::{Options, Row, traces_run};

/// How late the slow collector answers each request.
const SLOW: Duration = Duration::from_secs(3);

/// A collector on loopback, in a thread of its own.
struct Collector {
    port: u16,
    requests: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Collector {
    fn start(delay: Duration) -> anyhow::Result<Collector> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let (requests, bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (counted, sized) = (requests.clone(), bytes.clone());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let app = axum::Router::new().route(
                    "/v1/traces",
                    axum::routing::post(move |body: axum::body::Bytes| async move {
                        counted.fetch_add(1, Ordering::Relaxed);
                        sized.fetch_add(body.len() as u64, Ordering::Relaxed);
                        tokio::time::sleep(delay).await;
                        (
                            [("content-type", "application/x-protobuf")],
                            Vec::<u8>::new(),
                        )
                    }),
                );
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        let _ = stopped.await;
                    })
                    .await;
            });
        });
        Ok(Collector {
            port,
            requests,
            bytes,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Stops the server; gives back the requests and bytes it took.
    fn stop(mut self) -> (u64, u64) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        (
            self.requests.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

/// A port nothing listens on (bound, then released).
fn closed_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

fn on(endpoint: String) -> Vec<(&'static str, String)> {
    vec![
        ("MUSTER_TELEMETRY", "1".to_owned()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
    ]
}

/// The rows, in the order they ran.
pub fn rows(options: &Options, sync: SyncMode) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut off = traces_run(options, sync, "off", Vec::new()).context("traces off")?;
    off.note = "the tasks scenario's run with traces off (first of two)".into();
    let off_wall = off.wall_ms;
    rows.push(off);
    let ratio = |wall: f64| if off_wall > 0.0 { wall / off_wall } else { 0.0 };

    let local = Collector::start(Duration::ZERO)?;
    let mut row = traces_run(options, sync, "local", on(local.endpoint())).context("traces on")?;
    let (requests, bytes) = local.stop();
    row.note = format!(
        "traces on (MUSTER_TELEMETRY=1) to an in-process OTLP/HTTP collector on loopback that \
         answered at once: {requests} requests, {bytes} bytes of spans; wall {:.3} x the first \
         off run",
        ratio(row.wall_ms)
    );
    rows.push(row);

    let closed = format!("http://127.0.0.1:{}", closed_port()?);
    let mut row = traces_run(options, sync, "down", on(closed)).context("traces on, down")?;
    row.note = format!(
        "traces on to a closed port (connection refused); wall {:.3} x the first off run",
        ratio(row.wall_ms)
    );
    rows.push(row);

    let slow = Collector::start(SLOW)?;
    let mut row =
        traces_run(options, sync, "slow", on(slow.endpoint())).context("traces on, slow")?;
    let (requests, _) = slow.stop();
    row.note = format!(
        "traces on to a collector that answers each request after {} ms ({requests} requests): \
         a run's end waits for its last spans at most {} ms, and 100 ms once a request has \
         taken over 100 ms; wall {:.3} x the first off run",
        SLOW.as_millis(),
        muster::traces::FINAL_FLUSH.as_millis(),
        ratio(row.wall_ms)
    );
    rows.push(row);

    let mut row = traces_run(options, sync, "off", Vec::new()).context("traces off, again")?;
    row.note = format!(
        "traces off again (second of two: the difference between the off runs is the \
         machine's noise); wall {:.3} x the first off run",
        ratio(row.wall_ms)
    );
    rows.push(row);
    Ok(rows)
}
