//! A write whose COMMIT reached the server but whose acknowledgement was lost (a network cut,
//! a server going away) is retried under the same operation id and returns the first
//! result: nothing is written twice, nothing is lost. The cut is real: a TCP proxy between
//! the store and the server forwards the COMMIT, then closes the store's side before the
//! server's answer reaches it.
//!
//! Beside them, the other ends of a PostgreSQL write's transaction: one given up inside it
//! leaves nothing behind, and a lease that finds no mail writes nothing.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use muster_mailbox::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::common::*;
use super::pg::{self, Schema};

/// The end of the simple query that commits a write: the store sends a write's last statement
/// and its COMMIT together ("…; COMMIT"), or "COMMIT" alone; a query's text ends with a NUL.
const COMMIT: &[u8] = b"COMMIT\0";

/// Forwards connections to the test server; the next `cuts` COMMITs each lose their answer.
struct CuttingProxy {
    port: u16,
    cuts: Arc<AtomicUsize>,
    cut_done: Arc<AtomicUsize>,
}

impl CuttingProxy {
    async fn start() -> CuttingProxy {
        let config = tokio_postgres::Config::from_str(pg::server_url()).unwrap();
        let host = match &config.get_hosts()[0] {
            tokio_postgres::config::Host::Tcp(host) => host.clone(),
            other => panic!("the lost-ack tests need a TCP server, not {other:?}"),
        };
        let server = format!(
            "{host}:{}",
            config.get_ports().first().copied().unwrap_or(5432)
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cuts = Arc::new(AtomicUsize::new(0));
        let cut_done = Arc::new(AtomicUsize::new(0));
        let (armed, done) = (cuts.clone(), cut_done.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = TcpStream::connect(&server).await.unwrap();
                tokio::spawn(relay(client, upstream, armed.clone(), done.clone()));
            }
        });
        CuttingProxy {
            port,
            cuts,
            cut_done,
        }
    }

    /// The store URL through the proxy, in `schema`.
    fn url(&self, schema: &Schema) -> String {
        let base = pg::server_url();
        let rest = base.split_once('@').map_or(base, |(_, rest)| rest);
        let user = base
            .split_once("://")
            .and_then(|(_, r)| r.split_once('@'))
            .map_or("postgres", |(user, _)| user);
        let database = rest.split_once('/').map_or("test", |(_, db)| db);
        // In the clear, so the proxy can see the COMMIT go by.
        pg::with_schema(
            &format!(
                "postgres://{user}@127.0.0.1:{}/{database}?sslmode=disable",
                self.port
            ),
            &schema.name,
        )
    }
}

async fn relay(
    client: TcpStream,
    upstream: TcpStream,
    cuts: Arc<AtomicUsize>,
    cut_done: Arc<AtomicUsize>,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = upstream.into_split();
    let cut = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let to_server = {
        let cut = cut.clone();
        async move {
            let mut buffer = vec![0u8; 64 * 1024];
            loop {
                let n = match client_read.read(&mut buffer).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let chunk = &buffer[..n];
                let is_commit = chunk.windows(COMMIT.len()).any(|w| w == COMMIT);
                if is_commit
                    && cuts
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| c.checked_sub(1))
                        .is_ok()
                {
                    // Decided before the COMMIT leaves: its answer will not be relayed.
                    cut.store(true, Ordering::SeqCst);
                    cut_done.fetch_add(1, Ordering::SeqCst);
                }
                if server_write.write_all(chunk).await.is_err() {
                    return;
                }
                if cut.load(Ordering::SeqCst) {
                    return;
                }
            }
        }
    };
    let to_client = async move {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let n = match server_read.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if cut.load(Ordering::SeqCst) {
                // The server has answered the COMMIT: it is durable there, and the store
                // never hears of it. Dropping both halves closes the store's connection.
                return;
            }
            if client_write.write_all(&buffer[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::join!(to_server, to_client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_whose_commit_answer_is_lost_returns_the_first_result_once() {
    let schema = tokio::task::spawn_blocking(Schema::new).await.unwrap();
    let proxy = CuttingProxy::start().await;
    let store = PostgresStore::open(&proxy.url(&schema), StoreOptions::default())
        .await
        .unwrap();
    run_with(
        &(Arc::new(store.clone()) as Arc<dyn MailboxStore>),
        RUN,
        &["alice"],
    )
    .await;

    proxy.cuts.store(1, Ordering::SeqCst);
    let sent = store
        .send(text(RUN, "lead", "alice", "once"))
        .await
        .unwrap();
    assert_eq!(
        proxy.cut_done.load(Ordering::SeqCst),
        1,
        "the COMMIT's answer was cut"
    );
    let mail = store.messages(RUN, Some("alice")).await.unwrap();
    assert_eq!(mail.len(), 1, "written once: {mail:?}");
    assert_eq!(mail[0].key, sent.key, "the retry returned the first result");
    assert_eq!(text_of(&mail[0]), "once");

    // Acknowledged writes' operation ids are deleted by the next write: they do not pile up.
    for i in 0..10 {
        store
            .send(text(RUN, "lead", "alice", &format!("more {i}")))
            .await
            .unwrap();
    }
    let sql = format!("SELECT COUNT(*) FROM {}.operation_ids", schema.name);
    let kept = tokio::task::spawn_blocking(move || pg::count(&sql))
        .await
        .unwrap();
    assert!(
        kept <= 1,
        "{kept} operation ids kept after 11 acknowledged sends"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_never_hears_back_stops_with_a_store_error_and_nothing_doubled() {
    let schema = tokio::task::spawn_blocking(Schema::new).await.unwrap();
    let proxy = CuttingProxy::start().await;
    let store = PostgresStore::open(&proxy.url(&schema), StoreOptions::default())
        .await
        .unwrap();
    run_with(
        &(Arc::new(store.clone()) as Arc<dyn MailboxStore>),
        RUN,
        &["alice"],
    )
    .await;

    proxy.cuts.store(usize::MAX, Ordering::SeqCst);
    let error = store
        .send(text(RUN, "lead", "alice", "lost?"))
        .await
        .expect_err("no attempt hears back");
    assert!(
        matches!(error, StoreError::ConnectionLost { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("nothing committed is lost"),
        "{error}"
    );
    proxy.cuts.store(0, Ordering::SeqCst);
    let mail = store.messages(RUN, Some("alice")).await.unwrap();
    assert_eq!(
        mail.len(),
        1,
        "committed by the first attempt, once: {mail:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_the_server_terminates_mid_run_are_replaced_and_the_write_lands_once() {
    let schema = tokio::task::spawn_blocking(Schema::new).await.unwrap();
    let name = format!("muster_terminated_{}", std::process::id());
    let url = format!("{}&application_name={name}", schema.url());
    let store = PostgresStore::open(&url, StoreOptions::default())
        .await
        .unwrap();
    run_with(
        &(Arc::new(store.clone()) as Arc<dyn MailboxStore>),
        RUN,
        &["alice"],
    )
    .await;
    // What a server restart does to its clients: every session of the store is ended.
    let sql = format!(
        "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = '{name}'"
    );
    let ended = tokio::task::spawn_blocking(move || pg::count(&sql))
        .await
        .unwrap();
    assert!(ended >= 1, "the store had sessions to end");
    let sent = store
        .send(text(RUN, "lead", "alice", "after"))
        .await
        .unwrap();
    let mail = store.messages(RUN, Some("alice")).await.unwrap();
    assert_eq!(mail.len(), 1, "{mail:?}");
    assert_eq!(mail[0].key, sent.key);
}

/// A store in a fresh schema, reached directly, holding run `RUN` with `alice`; and the
/// run's epoch.
async fn store_with_alice() -> (Schema, PostgresStore, i64) {
    let schema = tokio::task::spawn_blocking(Schema::new).await.unwrap();
    let store = PostgresStore::open(&schema.url(), StoreOptions::default())
        .await
        .unwrap();
    let shared = Arc::new(store.clone()) as Arc<dyn MailboxStore>;
    let epoch = run_with(&shared, RUN, &["alice"]).await;
    (schema, store, epoch)
}

/// A write whose caller gives up while it is inside its transaction (here: its INSERT waits
/// for a row lock another session holds) leaves no transaction behind. Its connection is
/// closed instead of going back to the pool, so the server rolls it back: the message given
/// up is never committed, and the writes after it (which go round every pooled connection)
/// each commit alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_given_up_inside_its_transaction_leaves_no_transaction_behind() {
    let (schema, store, _) = store_with_alice().await;

    // The run's row locked FOR UPDATE: a message's foreign key check waits for it.
    let (holder, connection) = tokio_postgres::connect(&schema.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM runs WHERE id = '{RUN}' FOR UPDATE"
        ))
        .await
        .unwrap();
    let given_up = tokio::spawn({
        let store = store.clone();
        async move { store.send(text(RUN, "lead", "alice", "given up")).await }
    });
    let waiting = "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                   WHERE NOT l.granted AND a.query LIKE 'INSERT INTO messages%'";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while holder
        .query_one(waiting, &[])
        .await
        .unwrap()
        .get::<_, i64>(0)
        == 0
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the send never waited"
        );
        tokio::task::yield_now().await;
    }
    given_up.abort();
    assert!(given_up.await.unwrap_err().is_cancelled());
    holder.batch_execute("ROLLBACK").await.unwrap();

    for i in 0..10 {
        store
            .send(text(RUN, "lead", "alice", &format!("after {i}")))
            .await
            .unwrap();
    }
    let mail = store.messages(RUN, Some("alice")).await.unwrap();
    let texts: Vec<String> = mail.iter().map(text_of).collect();
    assert_eq!(texts.len(), 10, "only the writes after it: {texts:?}");
    assert!(!texts.iter().any(|t| t == "given up"), "{texts:?}");
}

/// The operation ids the store's writes left in `schema`: a write stores its own and deletes
/// those of writes acknowledged before it, so a new write changes this list.
async fn operation_ids(schema: &Schema) -> Vec<String> {
    let (client, connection) = tokio_postgres::connect(&schema.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let rows = client
        .query("SELECT op_key FROM operation_ids ORDER BY 1", &[])
        .await
        .unwrap();
    rows.iter().map(|row| row.get(0)).collect()
}

/// A lease that finds no mail commits nothing on PostgreSQL: it looks first with one
/// statement outside any transaction, so an idle agent's poll takes no run lock and flushes
/// no WAL. Mail that is there is leased as before, by a write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_finds_no_mail_commits_nothing() {
    let (schema, store, epoch) = store_with_alice().await;
    store
        .send(text(RUN, "lead", "alice", "for alice"))
        .await
        .unwrap();
    let before = operation_ids(&schema).await;
    assert_eq!(before.len(), 1, "the send's own: {before:?}");

    let none = store
        .try_receive(RUN, "lead", epoch, MessageFilter::Any)
        .await
        .unwrap();
    assert!(none.is_none());
    let empty = store
        .try_receive_batch(RUN, "lead", epoch, 8)
        .await
        .unwrap();
    assert!(empty.is_empty());
    assert_eq!(operation_ids(&schema).await, before, "an empty lease wrote");

    let leased = store
        .try_receive(RUN, "alice", epoch, MessageFilter::Any)
        .await
        .unwrap()
        .expect("alice's mail");
    assert_eq!(text_of(&leased), "for alice");
    assert_ne!(
        operation_ids(&schema).await,
        before,
        "a lease that took mail wrote"
    );
}
