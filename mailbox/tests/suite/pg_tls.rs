//! TLS by the URL's `sslmode`, with rustls: `require` reaches a server whose certificate is
//! self-signed (the test server's: Debian's snakeoil certificate, or the one scripts/test
//! makes for a throwaway cluster), and the connection is encrypted.

use muster_mailbox::*;

use super::pg::{self, Schema};

fn with_param(url: &str, param: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{param}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_require_connects_encrypted_to_a_self_signed_server() {
    let has_tls = tokio::task::spawn_blocking(|| {
        pg::count("SELECT CASE WHEN current_setting('ssl') = 'on' THEN 1 ELSE 0 END::BIGINT")
    })
    .await
    .unwrap();
    assert_eq!(
        has_tls, 1,
        "the test server has TLS off: scripts/test gives its throwaway cluster a self-signed \
         certificate; for another server, turn ssl on"
    );
    let schema = tokio::task::spawn_blocking(Schema::new).await.unwrap();
    let name = format!("muster_tls_{}", std::process::id());
    let url = with_param(
        &with_param(&schema.url(), "sslmode=require"),
        &format!("application_name={name}"),
    );
    let store = PostgresStore::open(&url, StoreOptions::default())
        .await
        .unwrap();
    assert!(store.runs().await.unwrap().is_empty());
    let sql = format!(
        "SELECT COUNT(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.application_name = '{name}' AND s.ssl"
    );
    let encrypted = tokio::task::spawn_blocking(move || pg::count(&sql))
        .await
        .unwrap();
    assert!(encrypted >= 1, "the store's connection is encrypted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslmode_disable_connects_in_the_clear() {
    let schema = tokio::task::spawn_blocking(Schema::new).await.unwrap();
    let name = format!("muster_plain_{}", std::process::id());
    let url = with_param(
        &with_param(&schema.url(), "sslmode=disable"),
        &format!("application_name={name}"),
    );
    let store = PostgresStore::open(&url, StoreOptions::default())
        .await
        .unwrap();
    assert!(store.runs().await.unwrap().is_empty());
    let sql = format!(
        "SELECT COUNT(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.application_name = '{name}' AND NOT s.ssl"
    );
    let plain = tokio::task::spawn_blocking(move || pg::count(&sql))
        .await
        .unwrap();
    assert!(plain >= 1, "sslmode=disable keeps the connection plain");
}
