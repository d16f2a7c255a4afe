//! A throwaway PostgreSQL cluster of a test's own, for what the shared server cannot show: it
//! trusts every local connection (so a wrong password passes) and must not be restarted under
//! other tests. Started as root with `runuser -u postgres` (initdb refuses root), on a free
//! loopback port, with scram-sha-256 for 127.0.0.1; stopped and removed when dropped. The
//! orchestrator's tests include this file too (one helper for both crates), and each uses a
//! part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The password of the cluster's superuser `muster`.
pub const PASSWORD: &str = "s3cret-muster";

pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
}

impl Cluster {
    /// initdb, configure, start; panics saying what is missing when it cannot.
    pub fn start() -> Cluster {
        let bin = postgres_bin();
        assert!(
            is_root(),
            "a throwaway PostgreSQL cluster needs root (to run initdb as the postgres user \
             with runuser); run the tests as root, as scripts/test and CI do"
        );
        let dir = tempfile::tempdir().unwrap();
        run(Command::new("chown").args(["postgres:", &path_text(dir.path())]));
        std::fs::write(dir.path().join("pw"), PASSWORD).unwrap();
        run(Command::new("chown").args(["postgres:", &path_text(&dir.path().join("pw"))]));
        let data = path_text(&dir.path().join("data"));
        as_postgres(
            &bin.join("initdb"),
            &[
                "-D",
                &data,
                "-U",
                "muster",
                "--pwfile",
                &path_text(&dir.path().join("pw")),
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--no-sync",
            ],
        );
        let port = free_port();
        let conf = format!(
            "port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             fsync = off\n",
            path_text(dir.path())
        );
        let conf_path = dir.path().join("data/postgresql.conf");
        let mut text = std::fs::read_to_string(&conf_path).unwrap();
        text.push_str(&conf);
        std::fs::write(&conf_path, text).unwrap();
        let cluster = Cluster { dir, bin, port };
        cluster.start_again();
        cluster
    }

    /// The URL of database `postgres` as `muster` with `password`.
    pub fn url_with_password(&self, password: &str) -> String {
        format!(
            "postgres://muster:{password}@127.0.0.1:{}/postgres?sslmode=disable",
            self.port
        )
    }

    /// The URL with the right password.
    pub fn url(&self) -> String {
        self.url_with_password(PASSWORD)
    }

    /// `pg_ctl stop -m fast`: every session is terminated, as in a server restart.
    pub fn stop_fast(&self) {
        self.pg_ctl(&["stop", "-m", "fast", "-w"]);
    }

    /// `pg_ctl start -w` on the same data and port.
    pub fn start_again(&self) {
        let log = path_text(&self.log_path());
        self.pg_ctl(&["start", "-w", "-l", &log]);
    }

    /// What the server wrote to its log so far (every start appends to one file): for a
    /// failing test's message, since it says which shutdown request the server received and
    /// when.
    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.log_path())
            .unwrap_or_else(|error| format!("(no server log: {error})"))
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("log")
    }

    fn pg_ctl(&self, args: &[&str]) {
        let data = path_text(&self.dir.path().join("data"));
        let mut all = vec!["-D", data.as_str()];
        all.extend_from_slice(args);
        as_postgres(&self.bin.join("pg_ctl"), &all);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = path_text(&self.dir.path().join("data"));
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["-D", &data, "stop", "-m", "immediate", "-w"])
            .output();
    }
}

/// The newest installed server's `bin` directory (`/usr/lib/postgresql/<version>/bin`).
fn postgres_bin() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
        panic!(
            "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (initdb, pg_ctl) \
             for a throwaway cluster; install the postgresql package (scripts/test does)"
        )
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn as_postgres(program: &Path, args: &[&str]) {
    run(Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(program)
        .args(args));
}

fn run(command: &mut Command) {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn path_text(path: &Path) -> String {
    path.display().to_string()
}
