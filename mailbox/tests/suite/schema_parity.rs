//! One schema, two dialects: a fresh store on each backend is read back from its catalogue
//! (SQLite: `sqlite_master` and the `table_list`, `table_info`, `index_list`, `index_info`,
//! `foreign_key_list` pragmas; PostgreSQL: `information_schema` and `pg_index`,
//! `pg_constraint`) and the two descriptions are compared: tables, columns, column types
//! (mapped to one vocabulary by [`SQLITE_TYPES`] and [`PG_TYPES`]), nullability, DEFAULTs,
//! store-assigned keys, primary keys, unique constraints and indexes, plain indexes (by their
//! column lists and partial conditions) and foreign keys. What exists on one backend only is
//! declared in [`BACKEND_ONLY`], each entry with its reason; an entry that no longer matches
//! anything fails the test too, so the list stays true.
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::common::{Backend, Location, Place};

/// What a backend's migrations may hold that the other's do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Only {
    Table(&'static str),
    Column(&'static str, &'static str),
    /// An index or unique constraint, by its table and column list.
    #[allow(
        dead_code,
        reason = "no backend-only index today; this is how one is declared"
    )]
    Index(&'static str, &'static [&'static str]),
}

/// The one declared list of backend-only tables, columns and indexes, each with its reason.
const BACKEND_ONLY: &[(Backend, Only, &str)] = &[
    (
        Backend::Postgres,
        Only::Table("muster_schema"),
        "PostgreSQL keeps the schema version (and the mark that a schema is muster's) in a \
         table; SQLite keeps it in PRAGMA user_version",
    ),
    (
        Backend::Postgres,
        Only::Table("operation_ids"),
        "a server's COMMIT acknowledgement can be lost, so PostgreSQL writes store their \
         outcome under an operation id for a retry; an embedded SQLite commit cannot be",
    ),
    (
        Backend::Postgres,
        Only::Column("roster", "position"),
        "the order roster entries joined in; SQLite's rowid gives the same order",
    ),
    (
        Backend::Sqlite,
        Only::Table("sqlite_sequence"),
        "SQLite's own bookkeeping for AUTOINCREMENT (messages.seq); PostgreSQL's identity \
         columns keep theirs in sequences",
    ),
];

/// SQLite's declared column types (a STRICT table allows only these) in the shared
/// vocabulary.
const SQLITE_TYPES: &[(&str, &str)] = &[
    ("INTEGER", "integer"),
    ("INT", "integer"),
    ("REAL", "real"),
    ("TEXT", "text"),
    ("BLOB", "blob"),
    ("ANY", "any"),
];

/// PostgreSQL's column types (`information_schema.columns.data_type`) in the shared
/// vocabulary. SQLite's INTEGER holds 64 bits, so only `bigint` is `integer`; the narrower
/// integers get names of their own that nothing on SQLite matches.
const PG_TYPES: &[(&str, &str)] = &[
    ("bigint", "integer"),
    ("integer", "int32"),
    ("smallint", "int16"),
    ("double precision", "real"),
    ("real", "real32"),
    ("text", "text"),
    ("character varying", "text"),
    ("bytea", "blob"),
    ("json", "json"),
    ("jsonb", "json"),
    ("boolean", "bool"),
    ("timestamp with time zone", "timestamp"),
    ("timestamp without time zone", "timestamp_local"),
];

/// Foreign-key delete actions in one vocabulary: SQLite's `on_delete` text, PostgreSQL's
/// `confdeltype` letter.
const DELETE_ACTIONS: &[(&str, &str, &str)] = &[
    ("NO ACTION", "a", "no action"),
    ("RESTRICT", "r", "restrict"),
    ("CASCADE", "c", "cascade"),
    ("SET NULL", "n", "set null"),
    ("SET DEFAULT", "d", "set default"),
];

fn backend_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "SQLite",
        Backend::Postgres => "PostgreSQL",
    }
}

fn other(backend: Backend) -> Backend {
    match backend {
        Backend::Sqlite => Backend::Postgres,
        Backend::Postgres => Backend::Sqlite,
    }
}

fn migrations_of(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "mailbox/src/sqlite/schema.rs",
        Backend::Postgres => "mailbox/src/postgres/schema.rs",
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Column {
    /// In the shared vocabulary.
    ty: String,
    /// As the catalogue spells it.
    declared: String,
    nullable: bool,
    /// The DEFAULT, in the form [`default_value`] gives it.
    default: Option<String>,
    /// Whether the store assigns it (SQLite's rowid alias, PostgreSQL's identity column).
    generated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ForeignKey {
    columns: Vec<String>,
    parent: String,
    parent_columns: Vec<String>,
    on_delete: String,
}

impl fmt::Display for ForeignKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "({}) REFERENCES {}({}) ON DELETE {}",
            self.columns.join(", "),
            self.parent,
            self.parent_columns.join(", "),
            self.on_delete
        )
    }
}

/// An index's shape: its column list and, for a partial index, its WHERE condition in the
/// form [`predicate`] gives it.
type IndexKey = (Vec<String>, Option<String>);

/// A column's DEFAULT, compared across dialects: without PostgreSQL's casts (`'x'::text`)
/// and outer parentheses.
fn default_value(default: &str) -> String {
    let mut value = default.trim();
    while let Some(inner) = value.strip_prefix('(').and_then(|v| v.strip_suffix(')')) {
        value = inner.trim();
    }
    match value.rfind("::") {
        Some(at) if !value[at..].contains('\'') => value[..at].to_string(),
        _ => value.to_string(),
    }
}

/// A partial index's condition, compared across dialects: lower case, without parentheses
/// (PostgreSQL shows `(state = 1)` what SQLite keeps as `state = 1`), spaces collapsed.
fn predicate(condition: &str) -> String {
    condition
        .to_lowercase()
        .replace(['(', ')'], " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[derive(Debug, Default)]
struct Table {
    columns: BTreeMap<String, Column>,
    primary_key: Vec<String>,
    /// Unique constraints and unique indexes (the primary key's own index excluded), with a
    /// name to show.
    unique: BTreeMap<IndexKey, String>,
    /// Indexes that are not unique, with a name to show.
    indexes: BTreeMap<IndexKey, String>,
    foreign_keys: BTreeSet<ForeignKey>,
}

type Schema = BTreeMap<String, Table>;

fn mapped(
    table: &[(&str, &'static str)],
    declared: &str,
    backend: Backend,
) -> Result<String, String> {
    table
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(declared))
        .map(|(_, ty)| (*ty).to_string())
        .ok_or_else(|| {
            format!(
                "{} type `{declared}` has no entry in the type mapping table ({}): add one",
                backend_name(backend),
                match backend {
                    Backend::Sqlite => "SQLITE_TYPES",
                    Backend::Postgres => "PG_TYPES",
                }
            )
        })
}

fn delete_action(value: &str, backend: Backend) -> String {
    DELETE_ACTIONS
        .iter()
        .find(|(sqlite, pg, _)| match backend {
            Backend::Sqlite => sqlite.eq_ignore_ascii_case(value),
            Backend::Postgres => *pg == value,
        })
        .map_or_else(
            || format!("unknown ({value})"),
            |(_, _, name)| (*name).to_string(),
        )
}

/// The schema of the SQLite store at `path`, from its catalogue.
fn sqlite_schema(path: &std::path::Path) -> Result<Schema, Vec<String>> {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let names: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut schema = Schema::new();
    let mut errors = Vec::new();
    for name in &names {
        let mut table = Table::default();
        if name.starts_with("sqlite_") {
            // SQLite's own tables (untyped columns): whether one may exist is BACKEND_ONLY's
            // business; their insides are not muster's schema.
            schema.insert(name.clone(), table);
            continue;
        }
        // (schema, name, type, ncol, wr, strict): `wr` a WITHOUT ROWID table.
        let (without_rowid, strict): (bool, bool) = conn
            .query_row(
                "SELECT wr, strict FROM pragma_table_list(?1) WHERE schema = 'main'",
                [name],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        if !strict {
            errors.push(format!(
                "table `{name}` on SQLite is not STRICT, so its declared types are not enforced \
                 and cannot be compared: create it STRICT, as every muster table is"
            ));
        }
        // (cid, name, type, notnull, default, pk position)
        let mut stmt = conn
            .prepare(
                "SELECT name, type, \"notnull\", pk, dflt_value FROM pragma_table_info(?1) \
                 ORDER BY cid",
            )
            .unwrap();
        let columns: Vec<(String, String, bool, i64, Option<String>)> = stmt
            .query_map([name], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                ))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let mut primary_key: Vec<(i64, String)> = columns
            .iter()
            .filter(|(_, _, _, pk, _)| *pk > 0)
            .map(|(column, _, _, pk, _)| (*pk, column.clone()))
            .collect();
        primary_key.sort();
        table.primary_key = primary_key.into_iter().map(|(_, column)| column).collect();
        // A rowid table's single INTEGER PRIMARY KEY is the rowid itself: it never holds NULL
        // (inserting NULL assigns the next rowid), though table_info reports it nullable.
        let rowid_alias = (!without_rowid
            && table.primary_key.len() == 1
            && columns.iter().any(|(c, ty, _, pk, _)| {
                *pk > 0 && c == &table.primary_key[0] && ty.eq_ignore_ascii_case("INTEGER")
            }))
        .then(|| table.primary_key[0].clone());
        for (column, declared, notnull, _, default) in columns {
            let ty = match mapped(SQLITE_TYPES, &declared, Backend::Sqlite) {
                Ok(ty) => ty,
                Err(error) => {
                    errors.push(format!("column `{name}.{column}`: {error}"));
                    continue;
                }
            };
            let generated = rowid_alias.as_deref() == Some(column.as_str());
            table.columns.insert(
                column,
                Column {
                    ty,
                    declared,
                    nullable: !notnull && !generated,
                    default: default.as_deref().map(default_value),
                    generated,
                },
            );
        }
        // (seq, name, unique, origin, partial); origin `pk` is the primary key's own index.
        let mut stmt = conn
            .prepare("SELECT name, \"unique\", origin, partial FROM pragma_index_list(?1)")
            .unwrap();
        let indexes: Vec<(String, bool, String, bool)> = stmt
            .query_map([name], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        for (index, unique, origin, partial) in indexes {
            if origin == "pk" {
                continue;
            }
            let columns: Vec<String> = conn
                .prepare("SELECT coalesce(name, '<expression>') FROM pragma_index_info(?1) ORDER BY seqno")
                .unwrap()
                .query_map([&index], |row| row.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let condition = if partial {
                let sql: String = conn
                    .query_row(
                        "SELECT sql FROM sqlite_master WHERE name = ?1",
                        [&index],
                        |row| row.get(0),
                    )
                    .unwrap();
                let sql = sql.split_whitespace().collect::<Vec<_>>().join(" ");
                let at = sql.to_uppercase().rfind(" WHERE ").unwrap();
                Some(predicate(&sql[at + " WHERE ".len()..]))
            } else {
                None
            };
            let shown = if origin == "u" {
                format!("UNIQUE ({})", columns.join(", "))
            } else {
                index
            };
            if unique {
                table.unique.insert((columns, condition), shown);
            } else {
                table.indexes.insert((columns, condition), shown);
            }
        }
        // (id, seq, table, from, to, on_update, on_delete, match): one row per column.
        let mut stmt = conn
            .prepare(
                "SELECT id, \"table\", \"from\", \"to\", on_delete FROM pragma_foreign_key_list(?1) \
                 ORDER BY id, seq",
            )
            .unwrap();
        let rows: Vec<(i64, String, String, Option<String>, String)> = stmt
            .query_map([name], |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                ))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let mut keys: BTreeMap<i64, ForeignKey> = BTreeMap::new();
        for (id, parent, from, to, on_delete) in rows {
            let key = keys.entry(id).or_insert_with(|| ForeignKey {
                columns: Vec::new(),
                parent: parent.clone(),
                parent_columns: Vec::new(),
                on_delete: delete_action(&on_delete, Backend::Sqlite),
            });
            key.columns.push(from);
            // No column named: the parent's primary key, resolved below.
            key.parent_columns.extend(to);
        }
        table.foreign_keys = keys.into_values().collect();
        schema.insert(name.clone(), table);
    }
    // A reference that names no columns means the parent's primary key.
    let primary_keys: BTreeMap<String, Vec<String>> = schema
        .iter()
        .map(|(name, table)| (name.clone(), table.primary_key.clone()))
        .collect();
    for table in schema.values_mut() {
        table.foreign_keys = std::mem::take(&mut table.foreign_keys)
            .into_iter()
            .map(|mut key| {
                if key.parent_columns.is_empty() {
                    key.parent_columns = primary_keys.get(&key.parent).cloned().unwrap_or_default();
                }
                key
            })
            .collect();
    }
    if errors.is_empty() {
        Ok(schema)
    } else {
        Err(errors)
    }
}

/// The schema a PostgreSQL store URL uses (its connections' current schema), from the
/// catalogue.
async fn pg_schema(url: &str) -> Result<Schema, Vec<String>> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    let mut schema = Schema::new();
    let mut errors = Vec::new();
    for row in client
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'",
            &[],
        )
        .await
        .unwrap()
    {
        schema.insert(row.get(0), Table::default());
    }
    for row in client
        .query(
            "SELECT table_name::text, column_name::text, data_type::text, is_nullable = 'YES', \
                    column_default::text, is_identity = 'YES' \
             FROM information_schema.columns WHERE table_schema = current_schema()",
            &[],
        )
        .await
        .unwrap()
    {
        let (name, column, declared): (String, String, String) =
            (row.get(0), row.get(1), row.get(2));
        let Some(table) = schema.get_mut(&name) else {
            continue;
        };
        match mapped(PG_TYPES, &declared, Backend::Postgres) {
            Ok(ty) => {
                table.columns.insert(
                    column,
                    Column {
                        ty,
                        declared,
                        nullable: row.get(3),
                        default: row
                            .get::<_, Option<String>>(4)
                            .as_deref()
                            .map(default_value),
                        generated: row.get(5),
                    },
                );
            }
            Err(error) => errors.push(format!("column `{name}.{column}`: {error}")),
        }
    }
    // Every primary key and unique constraint is backed by an index, so pg_index has them all.
    for row in client
        .query(
            "SELECT t.relname::text, i.relname::text, x.indisprimary, x.indisunique, \
                    pg_get_expr(x.indpred, x.indrelid), \
                    ARRAY(SELECT coalesce(a.attname::text, '<expression>') \
                          FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, n) \
                          LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum \
                          ORDER BY k.n), \
                    EXISTS (SELECT 1 FROM pg_constraint c \
                            WHERE c.conindid = x.indexrelid AND c.contype = 'u') \
             FROM pg_index x \
             JOIN pg_class i ON i.oid = x.indexrelid \
             JOIN pg_class t ON t.oid = x.indrelid \
             JOIN pg_namespace n ON n.oid = t.relnamespace \
             WHERE n.nspname = current_schema()",
            &[],
        )
        .await
        .unwrap()
    {
        let name: String = row.get(0);
        let Some(table) = schema.get_mut(&name) else {
            continue;
        };
        let index: String = row.get(1);
        let columns: Vec<String> = row.get(5);
        let condition = row.get::<_, Option<String>>(4).as_deref().map(predicate);
        if row.get(2) {
            table.primary_key = columns;
        } else if row.get(3) {
            let shown = if row.get(6) {
                format!("UNIQUE ({})", columns.join(", "))
            } else {
                index
            };
            table.unique.insert((columns, condition), shown);
        } else {
            table.indexes.insert((columns, condition), index);
        }
    }
    for row in client
        .query(
            "SELECT t.relname::text, p.relname::text, \
                    ARRAY(SELECT a.attname::text FROM unnest(c.conkey) WITH ORDINALITY AS k(attnum, n) \
                          JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum \
                          ORDER BY k.n), \
                    ARRAY(SELECT a.attname::text FROM unnest(c.confkey) WITH ORDINALITY AS k(attnum, n) \
                          JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.attnum \
                          ORDER BY k.n), \
                    c.confdeltype::text \
             FROM pg_constraint c \
             JOIN pg_class t ON t.oid = c.conrelid \
             JOIN pg_class p ON p.oid = c.confrelid \
             JOIN pg_namespace n ON n.oid = t.relnamespace \
             WHERE c.contype = 'f' AND n.nspname = current_schema()",
            &[],
        )
        .await
        .unwrap()
    {
        let name: String = row.get(0);
        let Some(table) = schema.get_mut(&name) else { continue };
        let on_delete: String = row.get(4);
        table.foreign_keys.insert(ForeignKey {
            columns: row.get(2),
            parent: row.get(1),
            parent_columns: row.get(3),
            on_delete: delete_action(&on_delete, Backend::Postgres),
        });
    }
    drop(client);
    let _ = driver.await;
    if errors.is_empty() {
        Ok(schema)
    } else {
        Err(errors)
    }
}

/// What to do about something found on `on` only.
fn remedy(on: Backend) -> String {
    format!(
        "add it to {}'s migrations ({}, as a new numbered migration), or declare it \
         {}-only in BACKEND_ONLY (mailbox/tests/suite/schema_parity.rs) with a reason",
        backend_name(other(on)),
        migrations_of(other(on)),
        backend_name(on)
    )
}

/// What to do about something both backends have but describe differently.
const ALIGN: &str = "make the two migrations agree with a new numbered migration on the \
                     backend that is wrong (never edit an old one: existing stores must still \
                     open)";

/// Compares the two schemas; returns every mismatch not declared, and marks in `used` the
/// declared entries that matched something.
fn compare(sqlite: &Schema, pg: &Schema, used: &mut [bool]) -> Vec<String> {
    let mut declared = |backend: Backend, item: &dyn Fn(&Only) -> bool| -> bool {
        let mut found = false;
        for (i, (b, only, _)) in BACKEND_ONLY.iter().enumerate() {
            if *b == backend && item(only) {
                used[i] = true;
                found = true;
            }
        }
        found
    };
    let mut mismatches = Vec::new();
    let sides = [
        (Backend::Sqlite, sqlite, pg),
        (Backend::Postgres, pg, sqlite),
    ];
    // What one side has that the other lacks.
    for (backend, this, that) in sides {
        for (name, table) in this {
            let Some(peer) = that.get(name) else {
                if !declared(
                    backend,
                    &|only| matches!(only, Only::Table(t) if *t == name.as_str()),
                ) {
                    mismatches.push(format!(
                        "table `{name}` exists on {} only: {}",
                        backend_name(backend),
                        remedy(backend)
                    ));
                }
                continue;
            };
            for (column, c) in &table.columns {
                if !peer.columns.contains_key(column)
                    && !declared(
                        backend,
                        &|only| matches!(only, Only::Column(t, c) if *t == name.as_str() && *c == column.as_str()),
                    )
                {
                    mismatches.push(format!(
                        "column `{name}.{column}` ({}, {}) exists on {} only: {}",
                        c.ty,
                        if c.nullable { "nullable" } else { "NOT NULL" },
                        backend_name(backend),
                        remedy(backend)
                    ));
                }
            }
            for (what, mine, theirs) in [
                ("unique constraint/index", &table.unique, &peer.unique),
                ("index", &table.indexes, &peer.indexes),
            ] {
                for ((columns, condition), shown) in mine {
                    if theirs.contains_key(&(columns.clone(), condition.clone())) {
                        continue;
                    }
                    if declared(
                        backend,
                        &|only| matches!(only, Only::Index(t, cs) if *t == name.as_str() && cs.iter().copied().eq(columns.iter().map(String::as_str))),
                    ) {
                        continue;
                    }
                    mismatches.push(format!(
                        "{what} `{shown}` on `{name}` ({}{}) exists on {} only{}: {}",
                        columns.join(", "),
                        condition
                            .as_ref()
                            .map_or(String::new(), |c| format!(", WHERE {c}")),
                        backend_name(backend),
                        other_shape(theirs, columns),
                        remedy(backend)
                    ));
                }
            }
            for key in &table.foreign_keys {
                if !peer.foreign_keys.contains(key) {
                    mismatches.push(format!(
                        "foreign key `{name}` {key} exists on {} only: {}",
                        backend_name(backend),
                        remedy(backend)
                    ));
                }
            }
        }
    }
    // What both have, described differently.
    for (name, s) in sqlite {
        let Some(p) = pg.get(name) else { continue };
        if s.primary_key != p.primary_key {
            mismatches.push(format!(
                "table `{name}` has primary key ({}) on SQLite but ({}) on PostgreSQL: {ALIGN}",
                s.primary_key.join(", "),
                p.primary_key.join(", ")
            ));
        }
        for (column, sc) in &s.columns {
            let Some(pc) = p.columns.get(column) else {
                continue;
            };
            if sc.ty != pc.ty {
                mismatches.push(format!(
                    "column `{name}.{column}` is {} on SQLite (declared {}) but {} on PostgreSQL \
                     (declared {}): {ALIGN}",
                    sc.ty, sc.declared, pc.ty, pc.declared
                ));
            }
            if sc.default != pc.default {
                let says = |default: &Option<String>| {
                    default
                        .as_ref()
                        .map_or("no DEFAULT".to_string(), |d| format!("DEFAULT {d}"))
                };
                mismatches.push(format!(
                    "column `{name}.{column}` has {} on SQLite but {} on PostgreSQL: {ALIGN}",
                    says(&sc.default),
                    says(&pc.default)
                ));
            }
            if sc.generated != pc.generated {
                let says = |generated: bool| {
                    if generated {
                        "assigned by the store"
                    } else {
                        "not assigned by the store"
                    }
                };
                mismatches.push(format!(
                    "column `{name}.{column}` is {} on SQLite (INTEGER PRIMARY KEY) but {} on \
                     PostgreSQL (GENERATED ... AS IDENTITY): {ALIGN}",
                    says(sc.generated),
                    says(pc.generated)
                ));
            }
            if sc.nullable != pc.nullable {
                let says = |nullable: bool| if nullable { "nullable" } else { "NOT NULL" };
                mismatches.push(format!(
                    "column `{name}.{column}` is {} on SQLite but {} on PostgreSQL: {ALIGN}",
                    says(sc.nullable),
                    says(pc.nullable)
                ));
            }
        }
    }
    mismatches
}

/// What the other side has on the same column list, if anything (another condition, or
/// none).
fn other_shape(theirs: &BTreeMap<IndexKey, String>, columns: &[String]) -> String {
    let same: Vec<String> = theirs
        .iter()
        .filter(|((cs, _), _)| cs == columns)
        .map(|((_, condition), shown)| match condition {
            Some(c) => format!("`{shown}` WHERE {c}"),
            None => format!("`{shown}` without a WHERE"),
        })
        .collect();
    if same.is_empty() {
        String::new()
    } else {
        format!(
            " (the other backend has {} on the same columns)",
            same.join(", ")
        )
    }
}

/// A fresh store on each backend, opened once (so every migration ran) and closed: the
/// places (which remove the stores when dropped), the SQLite file and the PostgreSQL URL.
struct Fresh {
    _places: (Place, Place),
    path: std::path::PathBuf,
    url: String,
}

impl Fresh {
    async fn new() -> Fresh {
        let sqlite = Place::new(Backend::Sqlite).await;
        let pg = Place::new(Backend::Postgres).await;
        drop(sqlite.open().await);
        drop(pg.open().await);
        let Location::File(path) = sqlite.location() else {
            unreachable!("a SQLite place is a file")
        };
        let Location::Postgres(url) = pg.location() else {
            unreachable!("a PostgreSQL place is a URL")
        };
        Fresh {
            _places: (sqlite, pg),
            path,
            url,
        }
    }

    /// Both schemas, read back from the catalogues.
    async fn schemas(&self) -> (Schema, Schema) {
        let read_failed = |errors: Vec<String>| -> Schema { panic!("{}", errors.join("\n")) };
        let sqlite = sqlite_schema(&self.path).unwrap_or_else(read_failed);
        let pg = pg_schema(&self.url).await.unwrap_or_else(read_failed);
        (sqlite, pg)
    }

    /// Runs `sql` on the PostgreSQL store's schema.
    async fn pg_execute(&self, sql: &str) {
        let (client, connection) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let driver = tokio::spawn(connection);
        client.batch_execute(sql).await.unwrap();
        drop(client);
        let _ = driver.await;
    }
}

/// Everything `compare` reports, plus the declared entries that matched nothing.
fn differences(sqlite: &Schema, pg: &Schema) -> Vec<String> {
    let mut used = vec![false; BACKEND_ONLY.len()];
    let mut found = compare(sqlite, pg, &mut used);
    for ((backend, only, reason), used) in BACKEND_ONLY.iter().zip(used) {
        if !used {
            found.push(format!(
                "BACKEND_ONLY declares {only:?} {}-only ({reason}), but no such difference \
                 exists: remove the entry",
                backend_name(*backend)
            ));
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_backends_migrate_to_one_schema() {
    let (sqlite, pg) = Fresh::new().await.schemas().await;
    // The reading itself works: both sides see the tables every store has.
    for schema in [&sqlite, &pg] {
        for table in [
            "runs",
            "messages",
            "roster",
            "tasks",
            "work_items",
            "process_groups",
        ] {
            assert!(schema.contains_key(table), "no table {table} read back");
        }
    }
    let found = differences(&sqlite, &pg);
    assert!(
        found.is_empty(),
        "the SQLite and PostgreSQL migrations describe different schemas:\n- {}",
        found.join("\n- ")
    );
}

/// The comparison bites: a column or index added to one backend only, a column's type or
/// nullability or DEFAULT changed on one, a partial index's condition changed on one — each is reported
/// with the table, the backend and what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_difference_on_one_backend_is_reported() {
    let fresh = Fresh::new().await;
    rusqlite::Connection::open(&fresh.path)
        .unwrap()
        .execute_batch(
            "ALTER TABLE runs ADD COLUMN extra TEXT; \
             CREATE INDEX tasks_owner ON tasks (run_id, owner);",
        )
        .unwrap();
    fresh
        .pg_execute(
            "ALTER TABLE counters ALTER COLUMN value TYPE integer; \
             ALTER TABLE tasks ALTER COLUMN owner SET NOT NULL; \
             ALTER TABLE work_items ALTER COLUMN attempts SET DEFAULT 1; \
             DROP INDEX messages_leased; \
             CREATE INDEX messages_leased ON messages (run_id, lease_epoch) WHERE state = 2;",
        )
        .await;
    let (sqlite, pg) = fresh.schemas().await;
    let found = differences(&sqlite, &pg);
    let expected = [
        "column `runs.extra` (text, nullable) exists on SQLite only: add it to PostgreSQL's \
         migrations (mailbox/src/postgres/schema.rs, as a new numbered migration), or declare \
         it SQLite-only in BACKEND_ONLY (mailbox/tests/suite/schema_parity.rs) with a reason",
        "index `tasks_owner` on `tasks` (run_id, owner) exists on SQLite only: add it to \
         PostgreSQL's migrations",
        "index `messages_leased` on `messages` (run_id, lease_epoch, WHERE state = 1) exists on \
         SQLite only (the other backend has `messages_leased` WHERE state = 2 on the same \
         columns)",
        "index `messages_leased` on `messages` (run_id, lease_epoch, WHERE state = 2) exists on \
         PostgreSQL only (the other backend has `messages_leased` WHERE state = 1 on the same \
         columns)",
        "column `counters.value` is integer on SQLite (declared INTEGER) but int32 on \
         PostgreSQL (declared integer): make the two migrations agree",
        "column `tasks.owner` is nullable on SQLite but NOT NULL on PostgreSQL: make the two \
         migrations agree",
        "column `work_items.attempts` has DEFAULT 0 on SQLite but DEFAULT 1 on PostgreSQL: make \
         the two migrations agree",
    ];
    assert_eq!(found.len(), expected.len(), "{found:#?}");
    for start in expected {
        assert!(
            found.iter().any(|message| message.starts_with(start)),
            "no message starts with {start:?} in {found:#?}"
        );
    }
}
