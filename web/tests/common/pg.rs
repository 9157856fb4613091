//! A throwaway PostgreSQL server for the tests of one test binary, and a fresh
//! database per test.
//!
//! The server is `scripts/pg-cluster.sh start --watch <this process>`: started on first
//! use, on loopback, and stopped by its reaper when the test process exits.
//! `BERTH_TEST_DATABASE_URL` (a superuser's URL) uses that server instead. Without
//! PostgreSQL installed the tests fail and say how to get it: a test that skips
//! itself could never fail.

use std::process::{Command, Stdio};
use std::sync::OnceLock;

fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_owned()
}

/// The server's superuser URL (its `postgres` database).
pub fn server_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        if let Ok(url) = std::env::var("BERTH_TEST_DATABASE_URL")
            && !url.is_empty()
        {
            return url;
        }
        let script = repo_root().join("scripts/pg-cluster.sh");
        let out = Command::new(&script)
            .args(["start", "--watch", &std::process::id().to_string()])
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "{} could not start PostgreSQL (install Debian's `postgresql` package, or run \
             scripts/test.sh, which installs it; or set BERTH_TEST_DATABASE_URL)",
            script.display()
        );
        String::from_utf8(out.stdout)
            .expect("a UTF-8 URL")
            .trim()
            .to_owned()
    })
}

/// `url` with its database replaced by `db`.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, _) = url.rsplit_once('/').expect("a URL with a database");
    format!("{base}/{db}")
}

/// Runs SQL as the superuser, on its `postgres` database or on `db`.
pub async fn admin(db: Option<&str>, sql: &str) {
    let url = match db {
        Some(db) => with_database(server_url(), db),
        None => server_url().to_owned(),
    };
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect as the superuser");
    tokio::spawn(conn);
    client.batch_execute(sql).await.expect("admin SQL");
}

/// A new, empty database for one test; its URL. Dropped with the server.
pub async fn fresh_database() -> String {
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    admin(None, &format!("CREATE DATABASE {name}")).await;
    with_database(server_url(), &name)
}
