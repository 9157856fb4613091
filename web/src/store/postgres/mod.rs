//! The store on PostgreSQL: `berth-server --database postgres://…` (or
//! `BERTH_DATABASE_URL`), so that several replicas serve one team.
//!
//! # Client
//! `tokio-postgres`, with a pool of our own: the store needs a handful of connections,
//! a statement cache per connection, and a precise answer to "is the database
//! reachable" (a lost connection is dropped, never handed out again, and a request
//! that cannot get one is [`StoreError::Unavailable`], a 503). `sqlx` would bring a
//! query macro layer, its own pool and a second SQLite driver next to rusqlite, for
//! none of which the store has a use: every query here is a plain prepared statement.
//!
//! # Same rows as SQLite
//! The tables are SQLite's, column for column; timestamps stay the contract's text
//! form. Every text column is `COLLATE "C"`, so ordering and the id-prefix ranges
//! (`id >= p AND id < p || '~'`) compare bytes, as SQLite does, whatever the
//! database's locale.
//!
//! # Concurrency
//! Writes run in their own transactions on pooled connections, in parallel. Whatever
//! appends to a session's transcript first takes its session row (`event_seq =
//! event_seq + 1 … RETURNING`), which numbers the event and serialises the session's
//! writers until commit, on this replica and any other. Events are published to the
//! local feed after the commit; a subscriber that sees a gap re-reads the store.
//!
//! # Migrations
//! Versioned and embedded ([`MIGRATIONS`]), applied at start-up under an advisory lock,
//! so that replicas starting together apply each one once. A database newer than this
//! build is refused.
//!
//! # Parts
//! - `pool`: connections, prepared statements, and a write's transaction.
//! - `schema`: the migrations ([`MIGRATIONS`]) and applying them.
//! - `notify`: what replicas tell each other (`LISTEN`/`NOTIFY`), and a write's
//!   notices, delivered at its commit.
//! - `leader`: which replica leads (an advisory lock) and where it is.
//! - one module per domain, as SQLite's side has: `agents` (with projects and
//!   machines), `sessions` (with the transcript and the session list), `tasks`,
//!   `channels`, `daemons`, `members` (with the audit trail).

mod agents;
mod approval_rows;
mod approvals;
mod channels;
mod daemons;
mod leader;
mod members;
mod notify;
mod pool;
mod schema;
mod sessions;
mod tasks;
mod usage;

pub use notify::Notice;
pub use schema::MIGRATIONS;

use super::StoreError;
use crate::transcript::Hub;
use pool::Conn;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio_postgres::Client;

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The PostgreSQL backend: a connection pool and the replica's live feed.
pub struct Pg {
    config: tokio_postgres::Config,
    idle: Mutex<Vec<Conn>>,
    slots: Semaphore,
    hub: Arc<Hub>,
    /// The connection holding the leader's advisory lock (`leader::SERVING_LOCK`) while
    /// this process leads.
    serving: Mutex<Option<Client>>,
    /// This process, in notification payloads (its own are not news to it).
    replica: String,
    /// Work announced by any process, for the leader's scheduler.
    work: tokio::sync::broadcast::Sender<Notice>,
    /// The session lists last written, and what is known of changes since.
    lists: super::lists::Lists,
}

impl std::fmt::Debug for Pg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pg").field("at", &self.describe()).finish()
    }
}

impl Pg {
    /// Connects, checks the server answers, and migrates under the advisory lock.
    pub(crate) async fn connect(url: &str, hub: Arc<Hub>) -> Result<Pg, StoreError> {
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
            StoreError::Corrupt(format!(
                "the database URL is not valid ({e}); expected postgres://USER:PASSWORD@HOST:PORT/DATABASE"
            ))
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("berth-server");
        }
        let replica = uuid::Uuid::new_v4().simple().to_string();
        let pg = Pg {
            config,
            lists: super::lists::Lists::new(&replica),
            idle: Mutex::new(Vec::new()),
            slots: Semaphore::new(pool::POOL),
            hub,
            serving: Mutex::new(None),
            replica,
            work: tokio::sync::broadcast::channel(4096).0,
        };
        pg.migrate().await?;
        pg.upgrade_usage().await?;
        Ok(pg)
    }

    /// `HOST:PORT/DATABASE` as user `USER` (never the password).
    pub fn describe(&self) -> String {
        let hosts: Vec<String> = self
            .config
            .get_hosts()
            .iter()
            .map(|h| match h {
                tokio_postgres::config::Host::Tcp(name) => name.clone(),
                tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
            })
            .collect();
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        format!(
            "{}:{port}/{} as {}",
            hosts.join(","),
            self.config.get_dbname().unwrap_or("postgres"),
            self.config.get_user().unwrap_or("(default user)")
        )
    }
}
