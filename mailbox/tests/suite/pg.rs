//! The PostgreSQL server the tests use, found in DESIGN's order: `MUSTER_TEST_DATABASE_URL`,
//! else the local server on 127.0.0.1:5432 as the current user or `postgres` (database
//! `test`), else the tests fail saying how to provide one — never a silent skip. Each test
//! gets a fresh schema, dropped when it ends, so tests run in parallel.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

const URL_VAR: &str = "MUSTER_TEST_DATABASE_URL";

/// The server's base URL, probed once per test process.
pub fn server_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        if let Ok(url) = std::env::var(URL_VAR) {
            return url;
        }
        let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
        let candidates = [
            format!("postgres://{user}@127.0.0.1:5432/test"),
            "postgres://postgres@127.0.0.1:5432/test".to_string(),
        ];
        let mut tried = Vec::new();
        for url in candidates {
            match block_on(async { tokio_postgres::connect(&url, tokio_postgres::NoTls).await }) {
                Ok(_) => return url,
                Err(error) => tried.push(format!("{url}: {error}")),
            }
        }
        panic!(
            "no PostgreSQL server for the store tests (tried {}). Start one (scripts/test \
             prepares the local server), or set {URL_VAR} to a URL whose user may create schemas",
            tried.join("; ")
        )
    })
}

fn block_on<T: Send>(future: impl Future<Output = T> + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(future)
            })
            .join()
            .unwrap()
    })
}

/// Runs SQL as the admin connection, on a runtime of its own (callable from drop).
pub fn admin(sql: &str) {
    let sql = sql.to_owned();
    block_on(async move {
        let (client, connection) = tokio_postgres::connect(server_url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        let driver = tokio::spawn(connection);
        client.batch_execute(&sql).await.unwrap();
        drop(client);
        let _ = driver.await;
    });
}

/// A fresh schema for one test; dropped with everything in it when the value is.
pub struct Schema {
    pub name: String,
}

impl Schema {
    pub fn new() -> Schema {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "muster_test_{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            fastrand_suffix()
        );
        admin(&format!("CREATE SCHEMA {name}"));
        Schema { name }
    }

    /// A store URL whose connections use this schema.
    pub fn url(&self) -> String {
        with_schema(server_url(), &self.name)
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        admin(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
    }
}

/// `url` with its connections' `search_path` set to `schema`.
pub fn with_schema(url: &str, schema: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}options=-csearch_path%3D{schema}")
}

fn fastrand_suffix() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

/// The tables of the schema a store URL uses, by name.
pub fn tables_of(url: &str) -> Vec<String> {
    let url = url.to_owned();
    block_on(async move {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let driver = tokio::spawn(connection);
        let rows = client
            .query(
                "SELECT table_name::text FROM information_schema.tables \
                 WHERE table_schema = current_schema() ORDER BY 1",
                &[],
            )
            .await
            .unwrap();
        drop(client);
        let _ = driver.await;
        rows.iter().map(|row| row.get(0)).collect()
    })
}

/// The single number `sql` selects, run as the admin connection.
pub fn count(sql: &str) -> i64 {
    let sql = sql.to_owned();
    block_on(async move {
        let (client, connection) = tokio_postgres::connect(server_url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        let driver = tokio::spawn(connection);
        let value: i64 = client.query_one(&sql, &[]).await.unwrap().get(0);
        drop(client);
        let _ = driver.await;
        value
    })
}
