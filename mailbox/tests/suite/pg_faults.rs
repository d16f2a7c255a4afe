//! What a person sees when a PostgreSQL store cannot be used: each refusal names what was
//! wrong and what to do, and leaves the server's data unchanged.

use muster_mailbox::*;

use super::pg::{self, Schema};

async fn open_error(url: &str) -> StoreError {
    match PostgresStore::open(url, StoreOptions::default()).await {
        Ok(_) => panic!("{url} opened"),
        Err(error) => error,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_holding_other_tables_is_refused_and_left_unchanged() {
    let schema = tokio::task::spawn_blocking(Schema::new).await.unwrap();
    let name = schema.name.clone();
    tokio::task::spawn_blocking(move || {
        pg::admin(&format!(
            "CREATE TABLE {name}.invoices (id INT); INSERT INTO {name}.invoices VALUES (7)"
        ))
    })
    .await
    .unwrap();
    let error = open_error(&schema.url()).await;
    assert!(
        matches!(error, StoreError::NotMusterDatabase { .. }),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("is not a muster store") && text.contains("invoices"),
        "{text}"
    );
    let store_url = schema.url();
    let tables = tokio::task::spawn_blocking(move || pg::tables_of(&store_url))
        .await
        .unwrap();
    assert_eq!(tables, ["invoices"], "nothing was created beside it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_from_a_newer_schema_is_refused_naming_both_versions() {
    let schema = tokio::task::spawn_blocking(Schema::new).await.unwrap();
    drop(
        PostgresStore::open(&schema.url(), StoreOptions::default())
            .await
            .unwrap(),
    );
    let name = schema.name.clone();
    let newer = PG_SCHEMA_VERSION + 5;
    tokio::task::spawn_blocking(move || {
        pg::admin(&format!(
            "UPDATE {name}.muster_schema SET version = {newer}"
        ))
    })
    .await
    .unwrap();
    let error = open_error(&schema.url()).await;
    let text = error.to_string();
    assert!(matches!(error, StoreError::NewerSchema { .. }), "{error:?}");
    assert!(
        text.contains(&format!("version {newer}"))
            && text.contains(&format!("up to {PG_SCHEMA_VERSION}")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_not_listening_is_named_with_what_to_check() {
    // Port 1 on loopback: nothing listens there.
    let error = open_error("postgres://muster:secret@127.0.0.1:1/test").await;
    let text = error.to_string();
    assert!(
        matches!(error, StoreError::PostgresConnect { .. }),
        "{error:?}"
    );
    assert!(
        text.contains("connection refused") && text.contains("is the PostgreSQL server running"),
        "{text}"
    );
    assert!(
        text.contains("muster:***@") && !text.contains("secret"),
        "the password is masked: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_does_not_exist_says_how_to_create_it() {
    let base = pg::server_url();
    let (root, _) = base.rsplit_once('/').unwrap();
    let error = open_error(&format!("{root}/no_such_muster_db")).await;
    let text = error.to_string();
    assert!(
        text.contains("does not exist") && text.contains("createdb"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_opening_one_new_schema_at_once_migrate_it_once() {
    let schema = tokio::task::spawn_blocking(Schema::new).await.unwrap();
    let url = schema.url();
    let (a, b) = tokio::join!(
        PostgresStore::open(&url, StoreOptions::default()),
        PostgresStore::open(&url, StoreOptions::default())
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.schema(), schema.name);
    assert_eq!(b.schema(), schema.name);
}

/// A server that asks for a password (a throwaway cluster with scram-sha-256: the shared
/// test server trusts every local connection) refuses a wrong one: the error names
/// authentication, says what to check, and never shows the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_an_authentication_error_with_the_password_masked() {
    let cluster = tokio::task::spawn_blocking(super::pg_cluster::Cluster::start)
        .await
        .unwrap();
    let error = PostgresStore::open(
        &cluster.url_with_password("wrong-pass-123"),
        StoreOptions::default(),
    )
    .await
    .err()
    .expect("refused");
    assert!(
        matches!(error, StoreError::PostgresConnect { .. }),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("muster:***@127.0.0.1")
            && text.contains("authentication failed")
            && text.contains("check the user and password in the URL"),
        "{text}"
    );
    assert!(!text.contains("wrong-pass-123"), "{text}");
    let store = PostgresStore::open(&cluster.url(), StoreOptions::default())
        .await
        .unwrap();
    assert!(store.runs().await.unwrap().is_empty());
}
