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

use super::agents::{agent_from_row, kind_str};
use super::daemons::{TOKEN_COLUMNS, token_from};
use super::members::{FIRST_ADMIN, MEMBER_COLUMNS, member_from};
use super::rows::{
    Cols, TASK_COLUMN_COUNT, TASK_COLUMNS, identity_columns, qualified_task_columns,
};
use super::{
    Adopted, AuditRow, ChannelIntake, ChannelThread, Finish, MemberChange, MemberRow,
    NewChannelMessage, NewSessionRow, NextRun, Outbox, ProjectDirRow, ProjectRow, Recovery,
    RunItem, SessionRow, StoreError, StoredBinding, TaskRow, TokenChange, TokenRow, parse_enum,
};
use crate::clock;
use crate::executor::AgentSpec;
use crate::transcript::{EventKind, Hub, TranscriptEvent};
use axum::body::Bytes;
use berth_core::api::TaskStatus;
use berth_core::binding::MachineId;
use berth_core::resolve::Origin;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, GenericClient, NoTls, Row, Statement, Transaction};

/// Connections per replica, at most.
const POOL: usize = 16;

/// How long a request waits for a connection before it is answered 503.
const CHECKOUT_WAIT: Duration = Duration::from_secs(5);

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The advisory lock that serialises migrations across replicas ("berth" in ASCII).
const MIGRATION_LOCK: i64 = 0x62_65_72_74_68;

/// The advisory lock the leading `berth-server` holds while it leads ("berthS").
const SERVING_LOCK: i64 = 0x62_65_72_74_68_53;

/// The schema, as embedded, versioned migrations. Append one; never edit a published
/// one. Version N is `MIGRATIONS[N - 1]`.
pub const MIGRATIONS: &[&str] = &[V1, V2, V3, super::lists::TRIGGERS, V5];

/// Everything SQLite's schema has at its version 9, in one step, plus `event_seq`:
/// the session's last transcript number, kept on its row so that numbering an event
/// also locks the session against other writers (SQLite has one writer anyway).
const V1: &str = r#"
CREATE TABLE agents (
    name        TEXT COLLATE "C" PRIMARY KEY,
    kind        TEXT NOT NULL,
    command     TEXT NOT NULL,
    created_at  TEXT COLLATE "C" NOT NULL,
    permissions TEXT
);
CREATE TABLE machines (
    id          TEXT COLLATE "C" PRIMARY KEY,
    name        TEXT NOT NULL,
    last_seen   TEXT
);
CREATE TABLE projects (
    name        TEXT COLLATE "C" PRIMARY KEY,
    created_at  TEXT NOT NULL
);
CREATE TABLE project_dirs (
    project     TEXT COLLATE "C" NOT NULL REFERENCES projects(name) ON DELETE CASCADE,
    machine     TEXT COLLATE "C" NOT NULL,
    dir         TEXT NOT NULL,
    display     TEXT NOT NULL,
    mode        TEXT NOT NULL,
    PRIMARY KEY (project, machine)
);
CREATE TABLE sessions (
    id              TEXT COLLATE "C" PRIMARY KEY,
    title           TEXT NOT NULL,
    agent           TEXT COLLATE "C" NOT NULL REFERENCES agents(name),
    origin          TEXT NOT NULL,
    project         TEXT COLLATE "C" REFERENCES projects(name),
    created_at      TEXT COLLATE "C" NOT NULL,
    updated_at      TEXT NOT NULL,
    binding_dir     TEXT,
    binding_display TEXT,
    binding_machine TEXT COLLATE "C",
    binding_mode    TEXT,
    binding_state   TEXT,
    binding_rev     BIGINT NOT NULL DEFAULT 0,
    work_dir        TEXT,
    resume_id       TEXT,
    binding_dev     BIGINT,
    binding_ino     BIGINT,
    work_dir_display TEXT,
    owner           TEXT COLLATE "C",
    event_seq       BIGINT NOT NULL DEFAULT 0,
    CHECK ((binding_dir IS NULL) = (binding_machine IS NULL))
);
CREATE INDEX sessions_created ON sessions(created_at, id);
CREATE INDEX sessions_owner ON sessions(owner, created_at);
CREATE TABLE messages (
    id          TEXT COLLATE "C" PRIMARY KEY,
    session_id  TEXT COLLATE "C" NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    origin      TEXT NOT NULL,
    text        TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX messages_session ON messages(session_id);
CREATE TABLE tasks (
    id          TEXT COLLATE "C" PRIMARY KEY,
    session_id  TEXT COLLATE "C" NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    seq         BIGINT NOT NULL,
    message_id  TEXT COLLATE "C" NOT NULL REFERENCES messages(id),
    status      TEXT COLLATE "C" NOT NULL,
    wait_reason TEXT,
    work_dir    TEXT,
    exit_code   INTEGER,
    error       TEXT,
    error_code  TEXT,
    created_at  TEXT COLLATE "C" NOT NULL,
    started_at  TEXT,
    finished_at TEXT,
    work_dir_display TEXT,
    denials     TEXT,
    changes     TEXT,
    UNIQUE (session_id, seq)
);
CREATE INDEX tasks_status ON tasks(status);
CREATE INDEX tasks_waiting ON tasks(session_id, seq)
    WHERE status IN ('queued', 'waiting_daemon') AND started_at IS NULL;
CREATE TABLE events (
    session_id  TEXT COLLATE "C" NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    seq         BIGINT NOT NULL,
    task_id     TEXT COLLATE "C",
    kind        TEXT NOT NULL,
    payload     TEXT NOT NULL,
    at          TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE channel_events (
    platform    TEXT COLLATE "C" NOT NULL,
    event_id    TEXT COLLATE "C" NOT NULL,
    received_at TEXT NOT NULL,
    PRIMARY KEY (platform, event_id)
);
CREATE TABLE channel_threads (
    platform    TEXT COLLATE "C" NOT NULL,
    thread_key  TEXT COLLATE "C" NOT NULL,
    session_id  TEXT COLLATE "C" NOT NULL UNIQUE REFERENCES sessions(id) ON DELETE CASCADE,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (platform, thread_key)
);
CREATE TABLE daemon_tokens (
    name        TEXT COLLATE "C" PRIMARY KEY,
    hash        TEXT COLLATE "C" NOT NULL UNIQUE,
    machine     TEXT COLLATE "C",
    created_at  TEXT NOT NULL,
    revoked_at  TEXT,
    member      TEXT COLLATE "C"
);
CREATE TABLE members (
    name        TEXT COLLATE "C" PRIMARY KEY,
    admin       BIGINT NOT NULL DEFAULT 0,
    hash        TEXT COLLATE "C" UNIQUE,
    created_at  TEXT NOT NULL,
    removed_at  TEXT
);
CREATE TABLE audit (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          TEXT NOT NULL,
    member      TEXT COLLATE "C" NOT NULL,
    action      TEXT NOT NULL,
    target      TEXT,
    via         TEXT NOT NULL
);
CREATE INDEX audit_member ON audit(member, id);
"#;

/// Several replicas on one database: the leader's address, for the others to forward
/// what only the leader serves (daemon connections, cancelling a running task); and
/// when a claimed task was handed to its machine, so that a new leader puts back in
/// line what the last one claimed but never handed over.
const V2: &str = r#"
CREATE TABLE berth_leader (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    replica     TEXT NOT NULL,
    url         TEXT NOT NULL,
    since       TEXT NOT NULL
);
ALTER TABLE tasks ADD COLUMN handed_at TEXT;
"#;

/// A new leader carries on what the last one handed to a daemon: the machine and the
/// daemon process it went to, how many of that daemon's events for it are stored, and
/// the outcome it reported (what the daemon was told is stored, is; it sends the rest
/// again).
const V3: &str = r#"
ALTER TABLE tasks ADD COLUMN handed_to TEXT COLLATE "C";
ALTER TABLE tasks ADD COLUMN handed_instance TEXT;
ALTER TABLE tasks ADD COLUMN daemon_events BIGINT NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN daemon_outcome TEXT;
"#;

/// How each task's agent was fenced (a JSON `FenceNote`).
const V5: &str = r#"
ALTER TABLE tasks ADD COLUMN fence TEXT;
"#;

/// `NOTIFY` channels, payload `REPLICA SESSION`: a session's transcript grew; a
/// session has work for the leader's scheduler.
const EVENTS_CHANNEL: &str = "berth_events";
const WORK_CHANNEL: &str = "berth_work";

/// What another process on the database announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A session has new work.
    Work(String),
    /// Notifications may have been missed (the listening connection was lost): look
    /// at everything again.
    Resync,
}

impl From<tokio_postgres::Error> for StoreError {
    /// A lost connection, or a server shutting down or starting, is
    /// [`StoreError::Unavailable`]; anything else is the statement's own error.
    fn from(e: tokio_postgres::Error) -> StoreError {
        use tokio_postgres::error::SqlState;
        let transient = e.is_closed()
            || e.code().is_some_and(|c| {
                [
                    SqlState::ADMIN_SHUTDOWN,
                    SqlState::CRASH_SHUTDOWN,
                    SqlState::CANNOT_CONNECT_NOW,
                    SqlState::CONNECTION_FAILURE,
                    SqlState::CONNECTION_EXCEPTION,
                    SqlState::TOO_MANY_CONNECTIONS,
                ]
                .contains(c)
            })
            || (e.code().is_none()
                && std::error::Error::source(&e).is_some_and(|s| s.is::<std::io::Error>()));
        if transient {
            StoreError::Unavailable(e.to_string())
        } else {
            StoreError::Postgres(e)
        }
    }
}

/// A pooled connection and its prepared statements.
struct Conn {
    client: Client,
    stmts: HashMap<String, Statement>,
    /// A statement found the connection lost: it is not pooled again, even while the
    /// client has not noticed yet (its `is_closed` lags the error).
    broken: bool,
}

/// The PostgreSQL backend: a connection pool and the replica's live feed.
pub struct Pg {
    config: tokio_postgres::Config,
    idle: Mutex<Vec<Conn>>,
    slots: Semaphore,
    hub: Arc<Hub>,
    /// The connection holding [`SERVING_LOCK`] while this process leads.
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

/// A connection taken from the pool; back in it when dropped, unless it broke.
struct Lease<'a> {
    pg: &'a Pg,
    conn: Option<Conn>,
    _slot: SemaphorePermit<'a>,
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take()
            && !conn.broken
            && !conn.client.is_closed()
        {
            self.pg
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(conn);
        }
    }
}

impl Lease<'_> {
    /// The connection: set at checkout, taken only by `drop`.
    fn conn(&mut self) -> Result<&mut Conn, StoreError> {
        self.conn
            .as_mut()
            .ok_or_else(|| StoreError::Worker("a database lease without its connection".into()))
    }

    /// Reads outside a transaction.
    fn read(&mut self) -> Result<Q<'_, Client>, StoreError> {
        let conn = self.conn()?;
        Ok(Q {
            c: &conn.client,
            stmts: &mut conn.stmts,
            broken: &mut conn.broken,
        })
    }

    /// Begins a write.
    async fn begin(&mut self) -> Result<W<'_>, StoreError> {
        let Conn {
            client,
            stmts,
            broken,
        } = self.conn()?;
        let tx = match client.transaction().await {
            Ok(tx) => tx,
            Err(e) => return Err(mark(broken, e)),
        };
        Ok(W {
            tx,
            stmts,
            broken,
            outbox: Outbox::default(),
            work: Vec::new(),
        })
    }
}

/// Statements on a connection or in a transaction, prepared once per connection.
struct Q<'a, C> {
    c: &'a C,
    stmts: &'a mut HashMap<String, Statement>,
    broken: &'a mut bool,
}

/// The store's error for `e`; a lost connection marks it broken.
fn mark(broken: &mut bool, e: tokio_postgres::Error) -> StoreError {
    let e = StoreError::from(e);
    if matches!(e, StoreError::Unavailable(_)) {
        *broken = true;
    }
    e
}

type Params<'p> = &'p [&'p (dyn ToSql + Sync)];

impl<C: GenericClient + Sync> Q<'_, C> {
    async fn prepared(&mut self, sql: &str) -> Result<Statement, StoreError> {
        if let Some(s) = self.stmts.get(sql) {
            return Ok(s.clone());
        }
        let s = self
            .c
            .prepare(sql)
            .await
            .map_err(|e| mark(self.broken, e))?;
        self.stmts.insert(sql.to_owned(), s.clone());
        Ok(s)
    }

    async fn exec(&mut self, sql: &str, p: Params<'_>) -> Result<u64, StoreError> {
        let st = self.prepared(sql).await?;
        self.c
            .execute(&st, p)
            .await
            .map_err(|e| mark(self.broken, e))
    }

    async fn rows(&mut self, sql: &str, p: Params<'_>) -> Result<Vec<Row>, StoreError> {
        let st = self.prepared(sql).await?;
        self.c.query(&st, p).await.map_err(|e| mark(self.broken, e))
    }

    async fn opt(&mut self, sql: &str, p: Params<'_>) -> Result<Option<Row>, StoreError> {
        let st = self.prepared(sql).await?;
        self.c
            .query_opt(&st, p)
            .await
            .map_err(|e| mark(self.broken, e))
    }

    async fn one(&mut self, sql: &str, p: Params<'_>) -> Result<Row, StoreError> {
        let st = self.prepared(sql).await?;
        self.c
            .query_one(&st, p)
            .await
            .map_err(|e| mark(self.broken, e))
    }
}

/// A write: one transaction and the transcript events it appends, published after
/// the commit. Dropped without [`W::commit`], it rolls back.
struct W<'a> {
    tx: Transaction<'a>,
    stmts: &'a mut HashMap<String, Statement>,
    broken: &'a mut bool,
    outbox: Outbox,
    /// Sessions given new work, announced at commit.
    work: Vec<String>,
}

impl<'a> W<'a> {
    fn q(&mut self) -> Q<'_, Transaction<'a>> {
        Q {
            c: &self.tx,
            stmts: self.stmts,
            broken: self.broken,
        }
    }

    async fn commit(self, hub: &Hub, replica: &str) -> Result<(), StoreError> {
        // Other processes' live feeds hear of every session this write appended to,
        // and the leader of every session given work: delivered at commit, not before.
        let mut sessions: Vec<&str> = self
            .outbox
            .0
            .iter()
            .map(|e| e.session_id.as_str())
            .collect();
        sessions.sort_unstable();
        sessions.dedup();
        for session in sessions {
            let payload = format!("{replica} {session}");
            self.tx
                .execute("SELECT pg_notify($1, $2)", &[&EVENTS_CHANNEL, &payload])
                .await
                .map_err(|e| mark(self.broken, e))?;
        }
        for session in &self.work {
            let payload = format!("{replica} {session}");
            self.tx
                .execute("SELECT pg_notify($1, $2)", &[&WORK_CHANNEL, &payload])
                .await
                .map_err(|e| mark(self.broken, e))?;
        }
        let broken = self.broken;
        self.tx.commit().await.map_err(|e| mark(broken, e))?;
        for ev in self.outbox.0 {
            hub.publish(ev);
        }
        Ok(())
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
            slots: Semaphore::new(POOL),
            hub,
            serving: Mutex::new(None),
            replica,
            work: tokio::sync::broadcast::channel(4096).0,
        };
        pg.migrate().await?;
        Ok(pg)
    }

    /// Listens for other processes' notices, for as long as `pg` lives: transcript
    /// growth reaches this process's live feed (its subscribers read the new events
    /// from the store), work reaches [`Pg::work`]. A lost connection is replaced, with
    /// backoff, and a [`Notice::Resync`] (plus a nudge to every live subscriber) covers
    /// whatever was announced meanwhile.
    pub(crate) fn listen(pg: &Arc<Pg>) {
        let weak = Arc::downgrade(pg);
        tokio::spawn(async move {
            let mut pause = Duration::from_millis(100);
            let mut first = true;
            loop {
                let Some(pg) = weak.upgrade() else { return };
                let config = pg.config.clone();
                let catch_up = pg.lists.channel().to_owned();
                drop(pg);
                match config.connect(NoTls).await {
                    Ok((client, mut connection)) => {
                        let sql = format!(
                            "LISTEN {EVENTS_CHANNEL}; LISTEN {WORK_CHANNEL}; LISTEN {}; LISTEN {}",
                            super::lists::CHANGED,
                            catch_up,
                        );
                        let listening = async { client.batch_execute(&sql).await };
                        let mut listening = std::pin::pin!(listening);
                        let mut subscribed = false;
                        loop {
                            tokio::select! {
                                r = &mut listening, if !subscribed => {
                                    if r.is_err() { break; }
                                    subscribed = true;
                                    pause = Duration::from_millis(100);
                                    let Some(pg) = weak.upgrade() else { return };
                                    pg.lists.subscribed();
                                    if !first {
                                        pg.hub.nudge_all();
                                        let _ = pg.work.send(Notice::Resync);
                                    }
                                    first = false;
                                }
                                msg = std::future::poll_fn(|cx| connection.poll_message(cx)) => {
                                    let Some(Ok(msg)) = msg else { break };
                                    let Some(pg) = weak.upgrade() else { return };
                                    if let tokio_postgres::AsyncMessage::Notification(n) = msg {
                                        pg.noticed(n.channel(), n.payload());
                                    }
                                }
                            }
                        }
                        if let Some(pg) = weak.upgrade() {
                            pg.lists.lost();
                        }
                        tracing::warn!(
                            "the database connection for notifications was lost; reconnecting"
                        );
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot listen for database notifications; retrying");
                    }
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
        });
    }

    fn noticed(&self, channel: &str, payload: &str) {
        match channel {
            EVENTS_CHANNEL => {
                if let Some((replica, session)) = payload.split_once(' ')
                    && replica != self.replica
                {
                    self.hub.nudge(session);
                }
            }
            WORK_CHANNEL => {
                // This process's own work went to its scheduler directly.
                if let Some((replica, session)) = payload.split_once(' ')
                    && replica != self.replica
                {
                    let _ = self.work.send(Notice::Work(session.to_owned()));
                }
            }
            super::lists::CHANGED => self.lists.changed(),
            other if other == self.lists.channel() => self.lists.caught_up(payload),
            _ => {}
        }
    }

    /// Work announced on the database (by this process too).
    pub(crate) fn work(&self) -> tokio::sync::broadcast::Receiver<Notice> {
        self.work.subscribe()
    }

    /// Announces that `session` has work, to whichever process leads.
    pub(crate) async fn announce_work(&self, session: String) -> Result<(), StoreError> {
        let mut lease = self.lease().await?;
        lease
            .read()?
            .exec(
                "SELECT pg_notify($1, $2)",
                &[&WORK_CHANNEL, &format!("{} {session}", self.replica)],
            )
            .await?;
        Ok(())
    }

    /// Sessions with a task queued and not started: the leader's periodic re-check,
    /// so that a missed notification only delays.
    pub(crate) async fn queued_sessions(&self) -> Result<Vec<String>, StoreError> {
        let mut lease = self.lease().await?;
        lease
            .read()?
            .rows(
                "SELECT DISTINCT session_id FROM tasks
                 WHERE status = 'queued' AND started_at IS NULL",
                &[],
            )
            .await?
            .iter()
            .map(|r| r.text(0))
            .collect()
    }

    /// The leader's address, as it advertised it.
    pub(crate) async fn leader_url(&self) -> Result<Option<String>, StoreError> {
        let mut lease = self.lease().await?;
        lease
            .read()?
            .opt("SELECT url FROM berth_leader WHERE id = 1", &[])
            .await?
            .map(|r| r.text(0))
            .transpose()
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

    async fn open(&self) -> Result<Conn, StoreError> {
        let (client, connection) = self.config.connect(NoTls).await.map_err(|e| {
            StoreError::Unavailable(format!("cannot connect to {}: {e}", self.describe()))
        })?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "a database connection ended");
            }
        });
        Ok(Conn {
            client,
            stmts: HashMap::new(),
            broken: false,
        })
    }

    /// A connection: an idle one that is still open, else a new one.
    async fn lease(&self) -> Result<Lease<'_>, StoreError> {
        let slot = tokio::time::timeout(CHECKOUT_WAIT, self.slots.acquire())
            .await
            .map_err(|_| {
                StoreError::Unavailable(format!(
                    "all {POOL} database connections stayed busy for {}s",
                    CHECKOUT_WAIT.as_secs()
                ))
            })?
            .map_err(|e| StoreError::Worker(e.to_string()))?;
        let idle = loop {
            let next = self
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            match next {
                Some(c) if c.client.is_closed() => continue,
                other => break other,
            }
        };
        let conn = match idle {
            Some(c) => c,
            None => self.open().await?,
        };
        Ok(Lease {
            pg: self,
            conn: Some(conn),
            _slot: slot,
        })
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let mut lease = self.lease().await?;
        let client = &mut lease.conn()?.client;
        client
            .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
            .await?;
        let out = apply_migrations(client).await;
        // Released with the session anyway if this fails.
        client
            .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
            .await?;
        out
    }

    /// Tries to become the database's leader: the one process whose scheduler runs
    /// tasks and whose registry holds the daemons' connections (the others forward
    /// those to it). Holds [`SERVING_LOCK`] on a connection of its own for as long as it
    /// leads, and advertises `url` for the others. `Ok(false)`: another process leads.
    pub(crate) async fn try_lead(&self, url: &str) -> Result<bool, StoreError> {
        let conn = self.open().await?;
        let got: bool = conn
            .client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&SERVING_LOCK])
            .await?
            .try_get(0)?;
        if !got {
            return Ok(false);
        }
        conn.client
            .execute(
                "INSERT INTO berth_leader (id, replica, url, since) VALUES (1, $1, $2, $3)
                 ON CONFLICT (id) DO UPDATE
                 SET replica = excluded.replica, url = excluded.url, since = excluded.since",
                &[&self.replica, &url, &clock::now()],
            )
            .await?;
        *self.serving.lock().unwrap_or_else(PoisonError::into_inner) = Some(conn.client);
        Ok(true)
    }

    /// Whether no process holds the leader's lock now (a leader that lost its
    /// connection takes it back within a fraction of a second; see `Server::lead`).
    pub(crate) async fn leader_lock_free(&self) -> Result<bool, StoreError> {
        let mut lease = self.lease().await?;
        // A bigint advisory key shows as (classid, objid) = (high, low) 32 bits, with
        // objsubid 1.
        let (high, low) = (
            (SERVING_LOCK >> 32) as u32,
            (SERVING_LOCK & 0xffff_ffff) as u32,
        );
        let row = lease
            .read()?
            .one(
                "SELECT NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
                   AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))",
                &[&i64::from(high), &i64::from(low)],
            )
            .await?;
        Ok(row.try_get(0)?)
    }

    /// Whether this process still holds the leadership it took: `false` once the
    /// connection holding the lock is gone (the database restarted, or dropped it).
    pub(crate) fn leads(&self) -> bool {
        self.serving
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|c| !c.is_closed())
    }

    async fn publish(&self, w: W<'_>) -> Result<(), StoreError> {
        w.commit(&self.hub, &self.replica).await
    }
}

/// Applies the migrations this database has not had yet, each in its own transaction.
async fn apply_migrations(client: &mut Client) -> Result<(), StoreError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS berth_schema (
                version    BIGINT PRIMARY KEY,
                applied_at TEXT NOT NULL
            )",
        )
        .await?;
    let have: i64 = client
        .query_one("SELECT COALESCE(MAX(version), 0) FROM berth_schema", &[])
        .await?
        .try_get(0)?;
    let known = MIGRATIONS.len() as i64;
    if have > known {
        return Err(StoreError::Corrupt(format!(
            "the database's schema is version {have}, newer than this build knows ({known}): \
             run the newer berth-server, or a database of this version"
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(have as usize) {
        let version = i as i64 + 1;
        let tx = client.transaction().await?;
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO berth_schema (version, applied_at) VALUES ($1, $2)",
            &[&version, &clock::now()],
        )
        .await?;
        tx.commit().await?;
        tracing::info!(version, "database migrated");
    }
    Ok(())
}

// ---- shared statements -------------------------------------------------------------

const SESSION_SELECT: &str = "SELECT s.id, s.title, s.agent, s.origin, s.project, \
    s.created_at, s.updated_at, s.binding_dir, s.binding_display, s.binding_machine, \
    s.binding_mode, s.binding_state, s.binding_rev, s.work_dir, s.resume_id, m.name, \
    s.binding_dev, s.binding_ino, s.work_dir_display, s.owner \
    FROM sessions s LEFT JOIN machines m ON m.id = s.binding_machine";

#[derive(Clone, Copy)]
enum Scoped {
    Sessions,
    Tasks,
}

/// PostgreSQL's [`super::resolve_id`].
async fn resolve_id<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    what: Scoped,
    prefix: &str,
    owner: Option<&str>,
) -> Result<String, StoreError> {
    let unknown = || match what {
        Scoped::Sessions => StoreError::UnknownSession {
            prefix: prefix.to_owned(),
        },
        Scoped::Tasks => StoreError::UnknownTask {
            prefix: prefix.to_owned(),
        },
    };
    let wanted = prefix.trim().to_ascii_lowercase();
    let valid = !wanted.is_empty() && wanted.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    if !valid {
        return Err(unknown());
    }
    let sql = match what {
        Scoped::Sessions => {
            "SELECT id FROM sessions WHERE id >= $1 AND id < $1 || '~'
             AND ($2::text IS NULL OR owner = $2) ORDER BY id LIMIT 6"
        }
        Scoped::Tasks => {
            "SELECT t.id FROM tasks t JOIN sessions s ON s.id = t.session_id
             WHERE t.id >= $1 AND t.id < $1 || '~' AND ($2::text IS NULL OR s.owner = $2)
             ORDER BY t.id LIMIT 6"
        }
    };
    let ids = q
        .rows(sql, &[&wanted, &owner])
        .await?
        .iter()
        .map(|r| r.text(0))
        .collect::<Result<Vec<_>, _>>()?;
    match ids.as_slice() {
        [only] => Ok(only.clone()),
        [] => Err(unknown()),
        _ if ids.contains(&wanted) => Ok(wanted),
        _ => Err(StoreError::Ambiguous {
            what: match what {
                Scoped::Sessions => "sessions",
                Scoped::Tasks => "tasks",
            },
            prefix: prefix.to_owned(),
            candidates: ids,
        }),
    }
}

async fn get_session<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    id: &str,
) -> Result<SessionRow, StoreError> {
    let sql = format!("{SESSION_SELECT} WHERE s.id = $1");
    match q.opt(&sql, &[&id]).await? {
        Some(r) => SessionRow::from_row(&r),
        None => Err(StoreError::UnknownSession {
            prefix: id.to_owned(),
        }),
    }
}

async fn get_task<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    id: &str,
) -> Result<TaskRow, StoreError> {
    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = $1");
    match q.opt(&sql, &[&id]).await? {
        Some(r) => TaskRow::from_row(&r),
        None => Err(StoreError::UnknownTask {
            prefix: id.to_owned(),
        }),
    }
}

async fn agent_names<C: GenericClient + Sync>(q: &mut Q<'_, C>) -> Result<Vec<String>, StoreError> {
    q.rows("SELECT name FROM agents ORDER BY created_at, name", &[])
        .await?
        .iter()
        .map(|r| r.text(0))
        .collect()
}

async fn get_agent<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    name: &str,
) -> Result<AgentSpec, StoreError> {
    let row = q
        .opt(
            "SELECT name, kind, command, permissions FROM agents WHERE name = $1",
            &[&name],
        )
        .await?;
    match row {
        Some(r) => agent_from_row(&r),
        None => Err(StoreError::UnknownAgent {
            name: name.to_owned(),
            known: agent_names(q).await?,
        }),
    }
}

async fn project_dirs<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    project: &str,
) -> Result<Vec<ProjectDirRow>, StoreError> {
    q.rows(
        "SELECT machine, dir, display, mode FROM project_dirs WHERE project = $1 ORDER BY machine",
        &[&project],
    )
    .await?
    .iter()
    .map(|r| {
        Ok(ProjectDirRow {
            machine: MachineId::new(r.text(0)?),
            dir: r.text(1)?,
            display: r.text(2)?,
            mode: parse_enum(&r.text(3)?)?,
        })
    })
    .collect()
}

async fn get_token<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    name: &str,
) -> Result<Option<TokenRow>, StoreError> {
    let sql = format!("SELECT {TOKEN_COLUMNS} FROM daemon_tokens WHERE name = $1");
    q.opt(&sql, &[&name])
        .await?
        .map(|r| token_from(&r))
        .transpose()
}

async fn get_member<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    name: &str,
) -> Result<Option<MemberRow>, StoreError> {
    let sql = format!("SELECT {MEMBER_COLUMNS} FROM members WHERE name = $1");
    q.opt(&sql, &[&name])
        .await?
        .map(|r| member_from(&r))
        .transpose()
}

fn json_text<T: serde::Serialize>(v: &T) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Corrupt(e.to_string()))
}

impl W<'_> {
    /// Appends one event to a session's transcript: the session row numbers it (and
    /// stays locked until commit).
    async fn append(
        &mut self,
        session_id: &str,
        task_id: Option<&str>,
        kind: EventKind,
        payload: serde_json::Value,
    ) -> Result<i64, StoreError> {
        let seq = self
            .q()
            .opt(
                "UPDATE sessions SET event_seq = event_seq + 1 WHERE id = $1 RETURNING event_seq",
                &[&session_id],
            )
            .await?
            .ok_or_else(|| StoreError::UnknownSession {
                prefix: session_id.to_owned(),
            })?
            .int(0)?;
        let at = clock::now();
        self.q()
            .exec(
                "INSERT INTO events (session_id, seq, task_id, kind, payload, at)
                 VALUES ($1, $2, $3, $4, $5, $6)",
                &[
                    &session_id,
                    &seq,
                    &task_id,
                    &kind.as_str(),
                    &payload.to_string(),
                    &at,
                ],
            )
            .await?;
        self.outbox.push(TranscriptEvent {
            session_id: session_id.to_owned(),
            seq,
            task_id: task_id.map(str::to_owned),
            kind: kind.as_str().to_owned(),
            payload,
            at,
        });
        Ok(seq)
    }

    async fn task_event(&mut self, task: &TaskRow) -> Result<(), StoreError> {
        self.append(
            &task.session_id,
            Some(&task.id),
            EventKind::Task,
            serde_json::json!({
                "task": task.to_api(),
                "code": task.error_code,
                "work_dir_display": task.work_dir_display,
            }),
        )
        .await?;
        Ok(())
    }

    async fn status_event(&mut self, task: &TaskRow) -> Result<(), StoreError> {
        self.append(
            &task.session_id,
            Some(&task.id),
            EventKind::Status,
            serde_json::json!({
                "task_id": task.id,
                "status": task.status,
                "wait_reason": task.wait_reason,
            }),
        )
        .await?;
        Ok(())
    }

    /// What a run reported, in order: status changes (each also a transcript event)
    /// and agent events.
    async fn run_items(
        &mut self,
        task_id: &str,
        session_id: &str,
        items: Vec<RunItem>,
    ) -> Result<(), StoreError> {
        for item in items {
            match item {
                RunItem::Status {
                    status,
                    wait_reason,
                } => {
                    self.record_status(task_id, status, wait_reason).await?;
                }
                RunItem::Agent(payload) => {
                    self.append(session_id, Some(task_id), EventKind::Agent, payload)
                        .await?;
                }
            }
        }
        Ok(())
    }

    async fn record_status(
        &mut self,
        id: &str,
        status: TaskStatus,
        wait_reason: Option<String>,
    ) -> Result<TaskRow, StoreError> {
        self.q()
            .exec(
                "UPDATE tasks SET status = $2, wait_reason = $3 WHERE id = $1",
                &[&id, &status.as_str(), &wait_reason],
            )
            .await?;
        let task = get_task(&mut self.q(), id).await?;
        self.status_event(&task).await?;
        Ok(task)
    }

    async fn insert_session(&mut self, new: NewSessionRow) -> Result<SessionRow, StoreError> {
        let agent = match new.agent {
            Some(name) => get_agent(&mut self.q(), &name).await?.name,
            None => match agent_names(&mut self.q()).await?.as_slice() {
                [only] => only.clone(),
                known => {
                    return Err(StoreError::UnknownAgent {
                        name: String::new(),
                        known: known.to_vec(),
                    });
                }
            },
        };
        if let Some(project) = &new.project {
            let known = self
                .q()
                .opt("SELECT 1 FROM projects WHERE name = $1", &[project])
                .await?;
            if known.is_none() {
                return Err(StoreError::UnknownProject {
                    name: project.clone(),
                });
            }
        }
        let id = uuid::Uuid::new_v4().to_string();
        let title = new
            .title
            .filter(|t| !t.trim().is_empty())
            .unwrap_or_else(|| format!("session {}", &id[..8]));
        let now = clock::now();
        let b = new.binding.as_ref();
        let (dev, ino) = identity_columns(b);
        self.q()
            .exec(
                "INSERT INTO sessions (id, title, agent, origin, project, created_at, updated_at,
                   binding_dir, binding_display, binding_machine, binding_mode, binding_state,
                   binding_dev, binding_ino, owner)
                 VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
                &[
                    &id,
                    &title,
                    &agent,
                    &new.origin.as_str(),
                    &new.project,
                    &now,
                    &b.map(|b| b.dir.as_str()),
                    &b.map(|b| b.display.as_str()),
                    &b.map(|b| b.machine.as_str()),
                    &b.map(|b| b.mode.as_str()),
                    &b.map(|b| b.state.as_str()),
                    &dev,
                    &ino,
                    &new.owner,
                ],
            )
            .await?;
        get_session(&mut self.q(), &id).await
    }

    async fn insert_message(
        &mut self,
        session_prefix: &str,
        origin: Origin,
        text: &str,
    ) -> Result<(TaskRow, i64), StoreError> {
        let session = resolve_id(&mut self.q(), Scoped::Sessions, session_prefix, None).await?;
        // The session's writers queue here: the task's `seq` below is the next one.
        self.q()
            .exec(
                "SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE",
                &[&session],
            )
            .await?;
        let message_id = uuid::Uuid::new_v4().to_string();
        let task = uuid::Uuid::new_v4().to_string();
        let now = clock::now();
        self.q()
            .exec(
                "INSERT INTO messages (id, session_id, origin, text, created_at)
                 VALUES ($1, $2, $3, $4, $5)",
                &[&message_id, &session, &origin.as_str(), &text, &now],
            )
            .await?;
        self.q()
            .exec(
                "INSERT INTO tasks (id, session_id, seq, message_id, status, created_at)
                 VALUES ($1, $2,
                   (SELECT COALESCE(MAX(seq), 0) + 1 FROM tasks WHERE session_id = $2),
                   $3, 'queued', $4)",
                &[&task, &session, &message_id, &now],
            )
            .await?;
        let message_seq = self
            .append(
                &session,
                Some(&task),
                EventKind::Message,
                serde_json::json!({
                    "task_id": task, "message_id": message_id,
                    "origin": origin, "text": text,
                }),
            )
            .await?;
        self.q()
            .exec(
                "UPDATE sessions SET updated_at = $2 WHERE id = $1",
                &[&session, &now],
            )
            .await?;
        self.work.push(session.clone());
        Ok((get_task(&mut self.q(), &task).await?, message_seq))
    }
}

/// The code of a task that ended badly without a more precise one (as SQLite's).
fn default_code(status: TaskStatus) -> Option<String> {
    super::tasks::default_code(status)
}

/// The list's query: only what a listed session's documents need
/// ([`super::rows::LIST_COLUMNS`]), without the join (a probe of `machines` per row was
/// most of the server's time), in no order ([`Pg::sessions_json`] sorts); the few
/// machines' names are read once and filled in.
fn session_list_sql(owner: bool) -> String {
    let columns = super::rows::LIST_COLUMNS;
    if owner {
        format!("SELECT {columns} FROM sessions s WHERE s.owner = $1")
    } else {
        format!("SELECT {columns} FROM sessions s")
    }
}

impl Pg {
    // ---- agents, projects, machines ------------------------------------------------

    pub(crate) async fn add_agent(&self, spec: AgentSpec) -> Result<AgentSpec, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let command = json_text(&spec.command)?;
        let inserted = w
            .q()
            .exec(
                "INSERT INTO agents (name, kind, command, created_at, permissions)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) DO NOTHING",
                &[
                    &spec.name,
                    &kind_str(spec.kind),
                    &command,
                    &clock::now(),
                    &spec.permissions.map(|p| p.as_str()),
                ],
            )
            .await?;
        if inserted == 0 {
            return Err(StoreError::AgentExists { name: spec.name });
        }
        self.publish(w).await?;
        Ok(spec)
    }

    pub(crate) async fn list_agents(&self) -> Result<Vec<AgentSpec>, StoreError> {
        let mut lease = self.lease().await?;
        lease
            .read()?
            .rows(
                "SELECT name, kind, command, permissions FROM agents ORDER BY created_at, name",
                &[],
            )
            .await?
            .iter()
            .map(agent_from_row)
            .collect()
    }

    pub(crate) async fn add_project(&self, name: String) -> Result<ProjectRow, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let inserted = w
            .q()
            .exec(
                "INSERT INTO projects (name, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&name, &clock::now()],
            )
            .await?;
        if inserted == 0 {
            return Err(StoreError::ProjectExists { name });
        }
        self.publish(w).await?;
        Ok(ProjectRow {
            name,
            dirs: Vec::new(),
        })
    }

    pub(crate) async fn list_projects(&self) -> Result<Vec<ProjectRow>, StoreError> {
        let mut lease = self.lease().await?;
        let mut q = lease.read()?;
        let names = q
            .rows("SELECT name FROM projects ORDER BY name", &[])
            .await?
            .iter()
            .map(|r| r.text(0))
            .collect::<Result<Vec<_>, _>>()?;
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let dirs = project_dirs(&mut q, &name).await?;
            out.push(ProjectRow { name, dirs });
        }
        Ok(out)
    }

    pub(crate) async fn set_project_dir(
        &self,
        project: String,
        dir: ProjectDirRow,
    ) -> Result<ProjectRow, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let known = w
            .q()
            .opt("SELECT name FROM projects WHERE name = $1", &[&project])
            .await?;
        if known.is_none() {
            return Err(StoreError::UnknownProject { name: project });
        }
        w.q()
            .exec(
                "INSERT INTO project_dirs (project, machine, dir, display, mode)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (project, machine) DO UPDATE
                 SET dir = excluded.dir, display = excluded.display, mode = excluded.mode",
                &[
                    &project,
                    &dir.machine.as_str(),
                    &dir.dir,
                    &dir.display,
                    &dir.mode.as_str(),
                ],
            )
            .await?;
        let dirs = project_dirs(&mut w.q(), &project).await?;
        self.publish(w).await?;
        Ok(ProjectRow {
            name: project,
            dirs,
        })
    }

    pub(crate) async fn touch_machine(
        &self,
        id: MachineId,
        name: String,
    ) -> Result<(), StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        w.q()
            .exec(
                "INSERT INTO machines (id, name, last_seen) VALUES ($1, $2, $3)
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name, last_seen = excluded.last_seen",
                &[&id.as_str(), &name, &clock::now()],
            )
            .await?;
        self.publish(w).await
    }

    // ---- channels --------------------------------------------------------------------

    pub(crate) async fn channel_intake(
        &self,
        m: NewChannelMessage,
    ) -> Result<ChannelIntake, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        // A retry delivered to another replica at the same moment waits here on the
        // primary key, then finds the row and stores nothing.
        let fresh = w
            .q()
            .exec(
                "INSERT INTO channel_events (platform, event_id, received_at) VALUES ($1, $2, $3)
                 ON CONFLICT DO NOTHING",
                &[&m.platform, &m.event_id, &clock::now()],
            )
            .await?;
        if fresh == 0 {
            return Ok(ChannelIntake::Duplicate);
        }
        let known = w
            .q()
            .opt(
                "SELECT session_id FROM channel_threads WHERE platform = $1 AND thread_key = $2",
                &[&m.platform, &m.thread_key],
            )
            .await?;
        let (session_id, new_session) = match known {
            Some(r) => (r.text(0)?, false),
            None => {
                let session = w
                    .insert_session(NewSessionRow {
                        title: Some(m.title),
                        agent: m.agent,
                        origin: Origin::Channel,
                        project: None,
                        binding: None,
                        owner: m.owner,
                    })
                    .await?;
                w.q()
                    .exec(
                        "INSERT INTO channel_threads (platform, thread_key, session_id, created_at)
                         VALUES ($1, $2, $3, $4)",
                        &[&m.platform, &m.thread_key, &session.id, &clock::now()],
                    )
                    .await?;
                (session.id, true)
            }
        };
        let (task, _) = w
            .insert_message(&session_id, Origin::Channel, &m.text)
            .await?;
        self.publish(w).await?;
        Ok(ChannelIntake::Queued {
            session_id,
            task: Box::new(task),
            new_session,
        })
    }

    pub(crate) async fn channel_thread(
        &self,
        session_id: String,
    ) -> Result<Option<ChannelThread>, StoreError> {
        let mut lease = self.lease().await?;
        lease
            .read()?
            .opt(
                "SELECT platform, thread_key FROM channel_threads WHERE session_id = $1",
                &[&session_id],
            )
            .await?
            .map(|r| {
                Ok(ChannelThread {
                    platform: r.text(0)?,
                    thread_key: r.text(1)?,
                })
            })
            .transpose()
    }

    pub(crate) async fn task_agent_events(
        &self,
        task: TaskRow,
    ) -> Result<Vec<serde_json::Value>, StoreError> {
        let mut lease = self.lease().await?;
        lease
            .read()?
            .rows(
                "SELECT payload FROM events
                 WHERE session_id = $1 AND task_id = $2 AND kind = 'agent' ORDER BY seq",
                &[&task.session_id, &task.id],
            )
            .await?
            .iter()
            .map(|r| {
                serde_json::from_str(&r.text(0)?)
                    .map_err(|e| StoreError::Corrupt(format!("event payload: {e}")))
            })
            .collect()
    }

    // ---- daemons ---------------------------------------------------------------------

    pub(crate) async fn tokens(&self) -> Result<Vec<TokenRow>, StoreError> {
        let mut lease = self.lease().await?;
        let sql = format!("SELECT {TOKEN_COLUMNS} FROM daemon_tokens ORDER BY name");
        lease
            .read()?
            .rows(&sql, &[])
            .await?
            .iter()
            .map(token_from)
            .collect()
    }

    pub(crate) async fn create_token(
        &self,
        name: String,
        hash: String,
        member: Option<String>,
    ) -> Result<TokenChange<TokenRow>, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        if let Some(old) = get_token(&mut w.q(), &name).await? {
            if old.revoked_at.is_none() {
                return Ok(TokenChange::Exists);
            }
            w.q()
                .exec("DELETE FROM daemon_tokens WHERE name = $1", &[&name])
                .await?;
        }
        w.q()
            .exec(
                "INSERT INTO daemon_tokens (name, hash, created_at, member) VALUES ($1, $2, $3, $4)",
                &[&name, &hash, &clock::now(), &member],
            )
            .await?;
        let row = get_token(&mut w.q(), &name).await?;
        self.publish(w).await?;
        Ok(row.map_or(TokenChange::Unknown, TokenChange::Done))
    }

    pub(crate) async fn revoke_token(
        &self,
        name: String,
    ) -> Result<TokenChange<TokenRow>, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        w.q()
            .exec(
                "UPDATE daemon_tokens SET revoked_at = $2 WHERE name = $1 AND revoked_at IS NULL",
                &[&name, &clock::now()],
            )
            .await?;
        let row = get_token(&mut w.q(), &name).await?;
        self.publish(w).await?;
        Ok(row.map_or(TokenChange::Unknown, TokenChange::Done))
    }

    pub(crate) async fn bind_token(
        &self,
        name: String,
        machine: MachineId,
    ) -> Result<TokenChange<TokenRow>, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        // Two replicas binding the same new token at once: the row lock decides.
        let sql = format!("SELECT {TOKEN_COLUMNS} FROM daemon_tokens WHERE name = $1 FOR UPDATE");
        let Some(row) = w
            .q()
            .opt(&sql, &[&name])
            .await?
            .map(|r| token_from(&r))
            .transpose()?
        else {
            return Ok(TokenChange::Unknown);
        };
        if row.revoked_at.is_some() {
            return Ok(TokenChange::Unknown);
        }
        let out = match &row.machine {
            Some(m) if *m == machine => TokenChange::Done(row),
            Some(m) => TokenChange::OtherMachine(m.clone()),
            None => {
                w.q()
                    .exec(
                        "UPDATE daemon_tokens SET machine = $2 WHERE name = $1",
                        &[&name, &machine.as_str()],
                    )
                    .await?;
                get_token(&mut w.q(), &name)
                    .await?
                    .map_or(TokenChange::Unknown, TokenChange::Done)
            }
        };
        self.publish(w).await?;
        Ok(out)
    }

    pub(crate) async fn machines(
        &self,
    ) -> Result<Vec<(MachineId, String, Option<String>)>, StoreError> {
        let mut lease = self.lease().await?;
        lease
            .read()?
            .rows("SELECT id, name, last_seen FROM machines", &[])
            .await?
            .iter()
            .map(|r| Ok((MachineId::new(r.text(0)?), r.text(1)?, r.opt_text(2)?)))
            .collect()
    }

    pub(crate) async fn waiting_sessions(&self) -> Result<Vec<String>, StoreError> {
        let mut lease = self.lease().await?;
        lease
            .read()?
            .rows(
                "SELECT session_id FROM tasks WHERE status = 'waiting_daemon'
                   AND started_at IS NULL GROUP BY session_id ORDER BY MIN(created_at)",
                &[],
            )
            .await?
            .iter()
            .map(|r| r.text(0))
            .collect()
    }

    pub(crate) async fn requeue(&self, id: String, reason: String) -> Result<bool, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let n = w
            .q()
            .exec(
                "UPDATE tasks SET started_at = NULL, status = 'waiting_daemon', wait_reason = $2,
                   handed_at = NULL, handed_to = NULL, handed_instance = NULL, daemon_events = 0,
                   daemon_outcome = NULL
                 WHERE id = $1 AND status IN ('queued', 'waiting_daemon') AND finished_at IS NULL",
                &[&id, &reason],
            )
            .await?;
        if n == 1 {
            let task = get_task(&mut w.q(), &id).await?;
            w.status_event(&task).await?;
        }
        self.publish(w).await?;
        Ok(n == 1)
    }

    pub(crate) async fn set_machine_online(
        &self,
        machine: MachineId,
        online: bool,
    ) -> Result<usize, StoreError> {
        let (from, to) = if online {
            ("machine_offline", "ok")
        } else {
            ("ok", "machine_offline")
        };
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let n = w
            .q()
            .exec(
                "UPDATE sessions SET binding_state = $3
                 WHERE binding_machine = $1 AND binding_state = $2",
                &[&machine.as_str(), &from, &to],
            )
            .await?;
        self.publish(w).await?;
        Ok(n as usize)
    }

    pub(crate) async fn mark_remote_offline(
        &self,
        local: Option<MachineId>,
    ) -> Result<usize, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let n = w
            .q()
            .exec(
                "UPDATE sessions SET binding_state = 'machine_offline'
                 WHERE binding_machine IS NOT NULL AND binding_state = 'ok'
                   AND binding_machine IS DISTINCT FROM $1::text",
                &[&local.as_ref().map(MachineId::as_str)],
            )
            .await?;
        self.publish(w).await?;
        Ok(n as usize)
    }

    // ---- members and the audit trail -------------------------------------------------

    pub(crate) async fn ensure_first_admin(&self, hash: String) -> Result<(), StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        w.q()
            .exec(
                "INSERT INTO members (name, admin, hash, created_at) VALUES ($1, 1, $2, $3)
                 ON CONFLICT (name) DO UPDATE SET hash = excluded.hash, admin = 1, removed_at = NULL",
                &[&FIRST_ADMIN, &hash, &clock::now()],
            )
            .await?;
        w.q()
            .exec(
                "UPDATE sessions SET owner = $1 WHERE owner IS NULL",
                &[&FIRST_ADMIN],
            )
            .await?;
        w.q()
            .exec(
                "UPDATE daemon_tokens SET member = $1 WHERE member IS NULL",
                &[&FIRST_ADMIN],
            )
            .await?;
        self.publish(w).await
    }

    pub(crate) async fn add_member(
        &self,
        name: String,
        admin: bool,
        hash: String,
    ) -> Result<MemberChange, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let inserted = w
            .q()
            .exec(
                "INSERT INTO members (name, admin, hash, created_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (name) DO NOTHING",
                &[&name, &i64::from(admin), &hash, &clock::now()],
            )
            .await?;
        if inserted == 0 {
            return Ok(MemberChange::Exists);
        }
        let row = get_member(&mut w.q(), &name).await?;
        self.publish(w).await?;
        Ok(row.map_or(MemberChange::Unknown, MemberChange::Done))
    }

    pub(crate) async fn members(&self) -> Result<Vec<MemberRow>, StoreError> {
        let mut lease = self.lease().await?;
        let sql = format!("SELECT {MEMBER_COLUMNS} FROM members ORDER BY name");
        lease
            .read()?
            .rows(&sql, &[])
            .await?
            .iter()
            .map(member_from)
            .collect()
    }

    pub(crate) async fn member_by_hash(
        &self,
        hash: String,
    ) -> Result<Option<MemberRow>, StoreError> {
        let mut lease = self.lease().await?;
        let sql =
            format!("SELECT {MEMBER_COLUMNS} FROM members WHERE hash = $1 AND removed_at IS NULL");
        lease
            .read()?
            .opt(&sql, &[&hash])
            .await?
            .map(|r| member_from(&r))
            .transpose()
    }

    pub(crate) async fn member(&self, name: String) -> Result<Option<MemberRow>, StoreError> {
        let mut lease = self.lease().await?;
        Ok(get_member(&mut lease.read()?, &name)
            .await?
            .filter(|m| m.removed_at.is_none()))
    }

    pub(crate) async fn remove_member(
        &self,
        name: String,
    ) -> Result<(MemberChange, Vec<String>), StoreError> {
        if name == FIRST_ADMIN {
            return Ok((MemberChange::Protected, Vec::new()));
        }
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let Some(m) = get_member(&mut w.q(), &name)
            .await?
            .filter(|m| m.removed_at.is_none())
        else {
            return Ok((MemberChange::Unknown, Vec::new()));
        };
        w.q()
            .exec(
                "UPDATE members SET hash = NULL, removed_at = $2 WHERE name = $1",
                &[&m.name, &clock::now()],
            )
            .await?;
        let tokens = w
            .q()
            .rows(
                "SELECT name FROM daemon_tokens WHERE member = $1 AND revoked_at IS NULL ORDER BY name",
                &[&m.name],
            )
            .await?
            .iter()
            .map(|r| r.text(0))
            .collect::<Result<Vec<_>, _>>()?;
        let row = get_member(&mut w.q(), &m.name).await?;
        self.publish(w).await?;
        Ok((
            row.map_or(MemberChange::Unknown, MemberChange::Done),
            tokens,
        ))
    }

    pub(crate) async fn rotate_member_token(
        &self,
        name: String,
        hash: String,
    ) -> Result<MemberChange, StoreError> {
        if name == FIRST_ADMIN {
            return Ok(MemberChange::Protected);
        }
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let changed = w
            .q()
            .exec(
                "UPDATE members SET hash = $2 WHERE name = $1 AND removed_at IS NULL",
                &[&name, &hash],
            )
            .await?;
        if changed == 0 {
            return Ok(MemberChange::Unknown);
        }
        let row = get_member(&mut w.q(), &name).await?;
        self.publish(w).await?;
        Ok(row.map_or(MemberChange::Unknown, MemberChange::Done))
    }

    pub(crate) async fn audit(
        &self,
        member: String,
        action: String,
        target: Option<String>,
        via: String,
    ) -> Result<(), StoreError> {
        let mut lease = self.lease().await?;
        lease
            .read()?
            .exec(
                "INSERT INTO audit (at, member, action, target, via) VALUES ($1, $2, $3, $4, $5)",
                &[&clock::now(), &member, &action, &target, &via],
            )
            .await?;
        Ok(())
    }

    pub(crate) async fn audit_trail(
        &self,
        member: Option<String>,
    ) -> Result<Vec<AuditRow>, StoreError> {
        let mut lease = self.lease().await?;
        lease
            .read()?
            .rows(
                "SELECT id, at, member, action, target, via FROM audit
                 WHERE $1::text IS NULL OR member = $1 ORDER BY id",
                &[&member],
            )
            .await?
            .iter()
            .map(|r| {
                Ok(AuditRow {
                    id: r.int(0)?,
                    at: r.text(1)?,
                    member: r.text(2)?,
                    action: r.text(3)?,
                    target: r.opt_text(4)?,
                    via: r.text(5)?,
                })
            })
            .collect()
    }

    // ---- sessions and the transcript -------------------------------------------------

    pub(crate) async fn create_session(
        &self,
        new: NewSessionRow,
    ) -> Result<SessionRow, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let row = w.insert_session(new).await?;
        self.publish(w).await?;
        Ok(row)
    }

    pub(crate) async fn session_of(
        &self,
        prefix: &str,
        owner: Option<String>,
    ) -> Result<SessionRow, StoreError> {
        let mut lease = self.lease().await?;
        let mut q = lease.read()?;
        let id = resolve_id(&mut q, Scoped::Sessions, prefix, owner.as_deref()).await?;
        get_session(&mut q, &id).await
    }

    pub(crate) async fn session(&self, prefix: &str) -> Result<SessionRow, StoreError> {
        self.session_of(prefix, None).await
    }

    pub(crate) async fn set_binding(
        &self,
        id: String,
        binding: Option<StoredBinding>,
    ) -> Result<SessionRow, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let before = get_session(&mut w.q(), &id).await?;
        let b = binding.as_ref();
        let (dev, ino) = identity_columns(b);
        w.q()
            .exec(
                "UPDATE sessions SET binding_dir = $2, binding_display = $3, binding_machine = $4,
                   binding_mode = $5, binding_state = $6, binding_rev = binding_rev + 1,
                   resume_id = NULL, updated_at = $7, binding_dev = $8, binding_ino = $9
                 WHERE id = $1",
                &[
                    &id,
                    &b.map(|b| b.dir.as_str()),
                    &b.map(|b| b.display.as_str()),
                    &b.map(|b| b.machine.as_str()),
                    &b.map(|b| b.mode.as_str()),
                    &b.map(|b| b.state.as_str()),
                    &clock::now(),
                    &dev,
                    &ino,
                ],
            )
            .await?;
        w.append(
            &id,
            None,
            EventKind::BindingChanged,
            serde_json::json!({
                "from": before.binding.as_ref().map(|b| b.display.as_str()),
                "to": b.map(|b| b.display.as_str()),
            }),
        )
        .await?;
        let row = get_session(&mut w.q(), &id).await?;
        self.publish(w).await?;
        Ok(row)
    }

    pub(crate) async fn events_after(
        &self,
        session_id: String,
        after: i64,
        limit: i64,
    ) -> Result<Vec<TranscriptEvent>, StoreError> {
        let mut lease = self.lease().await?;
        lease
            .read()?
            .rows(
                "SELECT seq, task_id, kind, payload, at FROM events
                 WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                &[&session_id, &after, &limit],
            )
            .await?
            .iter()
            .map(|r| {
                Ok(TranscriptEvent {
                    session_id: session_id.clone(),
                    seq: r.int(0)?,
                    task_id: r.opt_text(1)?,
                    kind: r.text(2)?,
                    payload: serde_json::from_str(&r.text(3)?)
                        .map_err(|e| StoreError::Corrupt(format!("event payload: {e}")))?,
                    at: r.text(4)?,
                })
            })
            .collect()
    }

    /// Every session (only `owner`'s), as [`super::Store::sessions_json`] writes them:
    /// the body kept for `view` and `owner` when nothing it shows has changed since on
    /// any replica (see [`super::lists`]), else read and kept.
    pub(crate) async fn sessions_json<F>(
        &self,
        owner: Option<String>,
        view: &'static str,
        doc: F,
    ) -> Result<Bytes, StoreError>
    where
        F: Fn(&mut Vec<u8>, &super::rows::SessionCols<'_>) -> Result<(), StoreError>
            + Send
            + 'static,
    {
        let key = (view, owner);
        if let Some((generation, body)) = self.lists.kept(&key)
            && self.caught_up().await?
            && self.lists.generation() == Some(generation)
        {
            return Ok(body);
        }
        // Loaded before the read's snapshot: the read shows at least what it counts.
        let generation = self.lists.generation();
        let body = Bytes::from(self.read_sessions_json(key.1.as_deref(), doc).await?);
        if let Some(generation) = generation {
            self.lists.keep(key, generation, body.clone());
        }
        Ok(body)
    }

    /// Whether this replica has heard every change notification committed before now
    /// (see [`super::lists`]): it notifies itself and waits to hear that.
    async fn caught_up(&self) -> Result<bool, StoreError> {
        let Some((n, heard)) = self.lists.expect() else {
            return Ok(false);
        };
        {
            let mut lease = self.lease().await?;
            lease
                .read()?
                .exec(
                    "SELECT pg_notify($1, $2)",
                    &[&self.lists.channel(), &n.to_string()],
                )
                .await?;
        }
        Ok(self.lists.arrived(n, heard).await)
    }

    /// Every session (only `owner`'s when given), oldest first, as one JSON array of
    /// the documents `doc` writes, read now. The rows are read whole, then turned into
    /// documents on a blocking thread, where they are also sorted (see below).
    async fn read_sessions_json<F>(
        &self,
        owner: Option<&str>,
        doc: F,
    ) -> Result<Vec<u8>, StoreError>
    where
        F: Fn(&mut Vec<u8>, &super::rows::SessionCols<'_>) -> Result<(), StoreError>
            + Send
            + 'static,
    {
        let mut lease = self.lease().await?;
        let mut q = lease.read()?;
        let names: HashMap<String, String> = q
            .rows("SELECT id, name FROM machines", &[])
            .await?
            .iter()
            .map(|r| Ok((r.text(0)?, r.text(1)?)))
            .collect::<Result<_, StoreError>>()?;
        let rows = match owner {
            Some(o) => q.rows(&session_list_sql(true), &[&o]).await?,
            None => q.rows(&session_list_sql(false), &[]).await?,
        };
        drop(lease);
        tokio::task::spawn_blocking(move || {
            // Ordered here rather than by the server: an index scan in that order
            // visits the table's pages at random, which cost the server more than the
            // whole sort costs this one (`COLLATE "C"` orders bytes, as `str` does).
            let mut listed = rows
                .iter()
                .map(|r| super::rows::SessionCols::from_row(r, &names))
                .collect::<Result<Vec<_>, _>>()?;
            listed.sort_unstable_by(|a, b| (a.created_at, a.id).cmp(&(b.created_at, b.id)));
            let mut out = Vec::with_capacity(64 * 1024);
            out.push(b'[');
            for (i, s) in listed.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                doc(&mut out, s)?;
            }
            out.push(b']');
            Ok::<_, StoreError>(out)
        })
        .await
        .map_err(|e| StoreError::Worker(e.to_string()))?
    }

    // ---- tasks -----------------------------------------------------------------------

    pub(crate) async fn recover(&self) -> Result<Recovery, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        // Claimed by the last leader but never handed to a machine: nothing ran, so
        // back in line, in order.
        w.q()
            .exec(
                "UPDATE tasks SET started_at = NULL
                 WHERE status IN ('queued', 'waiting_daemon') AND started_at IS NOT NULL
                   AND handed_at IS NULL",
                &[],
            )
            .await?;
        // Handed to a daemon's process: it may be running there still. The new leader
        // carries on with it when that process comes back (see `Adopted`).
        let adopt_sql = format!(
            "SELECT {TASK_COLUMNS}, t.handed_to, t.handed_instance, t.daemon_events,
                    COALESCE(m.name, t.handed_to), s.binding_rev, t.daemon_outcome
             FROM tasks t JOIN sessions s ON s.id = t.session_id
                  LEFT JOIN machines m ON m.id = t.handed_to
             WHERE t.status IN ('queued', 'waiting_daemon', 'waiting_lock', 'running')
               AND t.started_at IS NOT NULL AND t.handed_at IS NOT NULL
               AND t.handed_to IS NOT NULL AND t.handed_instance IS NOT NULL
             ORDER BY t.session_id, t.seq",
            TASK_COLUMNS = qualified_task_columns("t")
        );
        let mut adopted = Vec::new();
        for r in w.q().rows(&adopt_sql, &[]).await?.iter() {
            let n = TASK_COLUMN_COUNT;
            adopted.push(Adopted {
                task: TaskRow::from_row(r)?,
                machine: MachineId::new(r.text(n)?),
                instance: r.text(n + 1)?,
                received: u64::try_from(r.int(n + 2)?).unwrap_or(0),
                machine_name: r.text(n + 3)?,
                binding_rev: r.int(n + 4)?,
                outcome: r
                    .opt_text(n + 5)?
                    .map(|text| {
                        serde_json::from_str(&text)
                            .map_err(|e| StoreError::Corrupt(format!("a daemon's outcome: {e}")))
                    })
                    .transpose()?,
            });
        }
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM tasks
             WHERE (status IN ('running', 'waiting_lock')
                    OR (status IN ('queued', 'waiting_daemon') AND started_at IS NOT NULL))
               AND NOT (handed_at IS NOT NULL AND handed_to IS NOT NULL
                        AND handed_instance IS NOT NULL)
             ORDER BY session_id, seq"
        );
        let stale = w
            .q()
            .rows(&sql, &[])
            .await?
            .iter()
            .map(TaskRow::from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let now = clock::now();
        let mut interrupted = Vec::new();
        for t in stale {
            w.q()
                .exec(
                    "UPDATE tasks SET status = 'interrupted', wait_reason = NULL, finished_at = $2,
                       error = 'the server stopped while the task was running; it was not run again',
                       error_code = 'interrupted'
                     WHERE id = $1",
                    &[&t.id, &now],
                )
                .await?;
            let task = get_task(&mut w.q(), &t.id).await?;
            w.task_event(&task).await?;
            interrupted.push(t.id);
        }
        w.q()
            .exec(
                "UPDATE tasks SET status = 'queued', wait_reason = NULL
                 WHERE status = 'waiting_daemon' AND started_at IS NULL",
                &[],
            )
            .await?;
        let pending_sessions = w
            .q()
            .rows(
                "SELECT DISTINCT session_id FROM tasks WHERE status = 'queued' ORDER BY session_id",
                &[],
            )
            .await?
            .iter()
            .map(|r| r.text(0))
            .collect::<Result<Vec<_>, _>>()?;
        self.publish(w).await?;
        Ok(Recovery {
            interrupted,
            pending_sessions,
            adopted,
        })
    }

    pub(crate) async fn add_message(
        &self,
        session_prefix: String,
        origin: Origin,
        text: String,
    ) -> Result<(TaskRow, i64), StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let out = w.insert_message(&session_prefix, origin, &text).await?;
        self.publish(w).await?;
        Ok(out)
    }

    pub(crate) async fn next_run(&self, session: String) -> Result<Option<NextRun>, StoreError> {
        let mut lease = self.lease().await?;
        let mut q = lease.read()?;
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE session_id = $1
               AND status IN ('queued', 'waiting_daemon') AND started_at IS NULL
             ORDER BY seq LIMIT 1"
        );
        let Some(row) = q.opt(&sql, &[&session]).await? else {
            return Ok(None);
        };
        let task = TaskRow::from_row(&row)?;
        let m = q
            .one(
                "SELECT text, origin FROM messages WHERE id = $1",
                &[&task.message_id],
            )
            .await?;
        let (prompt, origin) = (m.text(0)?, parse_enum(&m.text(1)?)?);
        let session = get_session(&mut q, &task.session_id).await?;
        let agent = get_agent(&mut q, &session.agent).await?;
        let dirs = match &session.project {
            Some(p) => project_dirs(&mut q, p).await?,
            None => Vec::new(),
        };
        Ok(Some(NextRun {
            task,
            prompt,
            origin,
            session,
            agent,
            dirs,
        }))
    }

    /// Records that a claimed task reached its machine (see [`V2`]).
    pub(crate) async fn mark_handed(
        &self,
        id: String,
        machine: MachineId,
        instance: String,
    ) -> Result<(), StoreError> {
        let mut lease = self.lease().await?;
        lease
            .read()?
            .exec(
                "UPDATE tasks SET handed_at = $2, handed_to = $3, handed_instance = $4,
                   daemon_events = 0, daemon_outcome = NULL
                 WHERE id = $1",
                &[&id, &clock::now(), &machine.as_str(), &instance],
            )
            .await?;
        Ok(())
    }

    pub(crate) async fn claim(&self, id: String) -> Result<bool, StoreError> {
        let mut lease = self.lease().await?;
        let n = lease
            .read()?
            .exec(
                "UPDATE tasks SET started_at = $2 WHERE id = $1
                   AND status IN ('queued', 'waiting_daemon') AND started_at IS NULL",
                &[&id, &clock::now()],
            )
            .await?;
        Ok(n == 1)
    }

    pub(crate) async fn set_status(
        &self,
        id: String,
        status: TaskStatus,
        wait_reason: Option<String>,
    ) -> Result<TaskRow, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let task = w.record_status(&id, status, wait_reason).await?;
        self.publish(w).await?;
        Ok(task)
    }

    pub(crate) async fn run_events(
        &self,
        task: TaskRow,
        items: Vec<RunItem>,
    ) -> Result<(), StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        w.run_items(&task.id, &task.session_id, items).await?;
        self.publish(w).await
    }

    pub(crate) async fn daemon_events(
        &self,
        task_id: String,
        session_id: String,
        items: Vec<RunItem>,
        from: u64,
        to: u64,
    ) -> Result<u64, StoreError> {
        let (from, to) = (
            i64::try_from(from).unwrap_or(i64::MAX),
            i64::try_from(to).unwrap_or(i64::MAX),
        );
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        // First, and only from where the count stands: a batch whose commit was
        // already made (its answer lost) is not stored twice.
        let n = w
            .q()
            .exec(
                "UPDATE tasks SET daemon_events = $3 WHERE id = $1 AND daemon_events = $2",
                &[&task_id, &from, &to],
            )
            .await?;
        if n == 0 {
            let stood = w
                .q()
                .rows("SELECT daemon_events FROM tasks WHERE id = $1", &[&task_id])
                .await?
                .first()
                .map(|r| r.int(0))
                .transpose()?
                .unwrap_or(0);
            return Ok(u64::try_from(stood).unwrap_or(0));
        }
        w.run_items(&task_id, &session_id, items).await?;
        self.publish(w).await?;
        Ok(u64::try_from(to).unwrap_or(0))
    }

    pub(crate) async fn daemon_outcome(
        &self,
        task_id: String,
        outcome: crate::executor::TaskOutcome,
    ) -> Result<(), StoreError> {
        let text = json_text(&outcome)?;
        let mut lease = self.lease().await?;
        lease
            .read()?
            .exec(
                "UPDATE tasks SET daemon_outcome = $2 WHERE id = $1 AND finished_at IS NULL",
                &[&task_id, &text],
            )
            .await?;
        Ok(())
    }

    pub(crate) async fn finish(&self, id: String, fin: Finish) -> Result<TaskRow, StoreError> {
        let now = clock::now();
        let error_code = fin.error_code.clone().or_else(|| default_code(fin.status));
        let denials = (!fin.denials.is_empty())
            .then(|| json_text(&fin.denials))
            .transpose()?;
        let changes = fin.changes.as_ref().map(json_text).transpose()?;
        let fence = fin.fence.as_ref().map(json_text).transpose()?;
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        w.q()
            .exec(
                "UPDATE tasks SET status = $2, wait_reason = NULL, exit_code = $3, error = $4,
                   error_code = $5, work_dir = $6, finished_at = $7,
                   started_at = COALESCE(started_at, $7), work_dir_display = $8, denials = $9,
                   changes = $10, fence = $11
                 WHERE id = $1",
                &[
                    &id,
                    &fin.status.as_str(),
                    &fin.exit_code,
                    &fin.error,
                    &error_code,
                    &fin.work_dir,
                    &now,
                    &fin.work_dir_display,
                    &denials,
                    &changes,
                    &fence,
                ],
            )
            .await?;
        let task = get_task(&mut w.q(), &id).await?;
        if let Some(rec) = fin.record {
            w.q()
                .exec(
                    "UPDATE sessions SET work_dir = COALESCE($2, work_dir), resume_id = $3,
                       updated_at = $4,
                       work_dir_display = CASE WHEN $2::text IS NULL THEN work_dir_display ELSE $6 END
                     WHERE id = $1 AND binding_rev = $5",
                    &[
                        &task.session_id,
                        &rec.work_dir,
                        &rec.resume_id,
                        &now,
                        &rec.binding_rev,
                        &rec.work_dir_display,
                    ],
                )
                .await?;
        }
        let state = match error_code.as_deref() {
            Some("not_found") => Some("missing"),
            Some("path_changed") => Some("changed"),
            _ => None,
        };
        if let Some(state) = state {
            w.q()
                .exec(
                    "UPDATE sessions SET binding_state = $2 WHERE id = $1 AND binding_dir IS NOT NULL",
                    &[&task.session_id, &state],
                )
                .await?;
        }
        w.task_event(&task).await?;
        self.publish(w).await?;
        Ok(task)
    }

    pub(crate) async fn cancel_waiting(&self, id: String) -> Result<Option<TaskRow>, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let n = w
            .q()
            .exec(
                "UPDATE tasks SET status = 'cancelled', wait_reason = NULL, finished_at = $2
                 WHERE id = $1 AND status IN ('queued', 'waiting_daemon') AND started_at IS NULL",
                &[&id, &clock::now()],
            )
            .await?;
        if n == 0 {
            return Ok(None);
        }
        let task = get_task(&mut w.q(), &id).await?;
        w.task_event(&task).await?;
        self.publish(w).await?;
        Ok(Some(task))
    }

    pub(crate) async fn record_undo(
        &self,
        task_id: String,
        payload: serde_json::Value,
    ) -> Result<i64, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let task = get_task(&mut w.q(), &task_id).await?;
        let seq = w
            .append(&task.session_id, Some(&task.id), EventKind::Undo, payload)
            .await?;
        self.publish(w).await?;
        Ok(seq)
    }

    pub(crate) async fn task_of(
        &self,
        prefix: &str,
        owner: Option<String>,
    ) -> Result<TaskRow, StoreError> {
        let mut lease = self.lease().await?;
        let mut q = lease.read()?;
        let id = resolve_id(&mut q, Scoped::Tasks, prefix, owner.as_deref()).await?;
        get_task(&mut q, &id).await
    }

    pub(crate) async fn task(&self, prefix: &str) -> Result<TaskRow, StoreError> {
        self.task_of(prefix, None).await
    }

    pub(crate) async fn list_tasks(
        &self,
        session: Option<String>,
        owner: Option<String>,
    ) -> Result<Vec<TaskRow>, StoreError> {
        let mut lease = self.lease().await?;
        let mut q = lease.read()?;
        let rows = match session {
            Some(prefix) => {
                let id = resolve_id(&mut q, Scoped::Sessions, &prefix, owner.as_deref()).await?;
                get_session(&mut q, &id).await?;
                let sql =
                    format!("SELECT {TASK_COLUMNS} FROM tasks WHERE session_id = $1 ORDER BY seq");
                q.rows(&sql, &[&id]).await?
            }
            None => {
                let sql = format!(
                    "SELECT {TASK_COLUMNS} FROM tasks WHERE $1::text IS NULL
                     OR session_id IN (SELECT id FROM sessions WHERE owner = $1)
                     ORDER BY created_at, id"
                );
                q.rows(&sql, &[&owner]).await?
            }
        };
        rows.iter().map(TaskRow::from_row).collect()
    }
}
