//! The store: one SQLite file, `berth.db`, in Berth's home; or, for a team's
//! `berth-server --database postgres://…`, a PostgreSQL database ([`postgres`]).
//!
//! Both backends answer the same methods with the same rows; each public method runs
//! PostgreSQL's version when the store is there ([`on_pg!`]) and SQLite's otherwise.
//! The notes below are SQLite's; [`postgres`] has its own.
//!
//! # Threads
//! SQLite calls block. Every call goes through [`Store::read`], [`Store::read_small`]
//! or [`Store::write`]. A read of many rows (a list, a page of the transcript) runs
//! under `spawn_blocking`. A write, and a read of a row or a few, is a matter of tens
//! of microseconds: it runs on the calling thread when its connection is free (the
//! writer not held, a pooled reader idle), and under `spawn_blocking` otherwise, so an
//! async thread never waits for another's write. The hand-off to a blocking thread and
//! back costs two thread wake-ups each, which is what a task's dispatch spent most of
//! its time on (issue 17).
//! Writes share one connection behind a mutex: SQLite admits one writer at a time
//! anyway, and serializing them in-process means no `SQLITE_BUSY` retries and a single
//! place where transcript events are numbered and then published in order. Reads take
//! a connection from a small pool; in WAL mode they never wait for the writer. A
//! dedicated writer thread fed by a channel would serialize the same way, but would
//! need a reply channel per call for the same effect.
//!
//! # Durability
//! WAL with `synchronous=NORMAL`: a committed transaction survives a process crash;
//! a power loss may drop the last few commits, never corrupt the file.

/// Runs a method's PostgreSQL version when the store is on PostgreSQL:
/// `on_pg!(self, pg => pg.method(args))` returns its result from the enclosing method.
macro_rules! on_pg {
    ($store:expr, $pg:ident => $call:expr) => {
        #[cfg(feature = "postgres")]
        if let Some($pg) = $store.pg() {
            return $store.tally($call.await);
        }
    };
}

mod agents;
mod approval_rows;
mod approvals;
mod asked;
mod channels;
mod daemons;
#[cfg(feature = "postgres")]
mod lists;
mod members;
#[cfg(feature = "postgres")]
pub mod postgres;
mod rows;
mod rules;
pub mod schema;
mod sessions;
mod tasks;
mod usage;

pub use agents::{AgentEdit, ProjectDirRow, ProjectRow};
pub use asked::task_of as approval_task;
pub use channels::{ChannelIntake, ChannelThread, NewChannelMessage};
pub use daemons::{TokenChange, TokenRow};
pub use members::{AuditEntry, AuditRow, FIRST_ADMIN, MemberChange, MemberRow, owner_name};
pub use rows::{
    BindingCols, Deleted, Finish, NewSessionRow, SessionChange, SessionCols, SessionRow,
    StoredBinding, TaskRow,
};
pub use sessions::list_sessions;
pub use tasks::{Adopted, DaemonEvents, NextRun, Recovery, RunItem};
pub use usage::{UsageQuery, UsageSums};

use crate::transcript::{Hub, Live, TranscriptEvent};
use rules::Scoped;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The database file's name inside Berth's home.
pub const DB_FILE: &str = "berth.db";

/// Reader connections kept open between calls.
const READER_POOL: usize = 4;
/// Prepared statements kept per connection (see [`configure`]).
const STATEMENT_CACHE: usize = 64;

/// What the leader's lock looks like to a process that does not lead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockSeen {
    /// A process leads.
    Held,
    /// Nobody holds the lock, but the last leader did not resign: it may be taking
    /// it back after losing its connection.
    Free,
    /// The last leader gave the leadership up (see [`Store::resign`]).
    Resigned,
}

/// Everything that can go wrong in the store, with the value that caused it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("could not migrate the database {path}: {source}")]
    Migration {
        path: PathBuf,
        #[source]
        source: rusqlite_migration::Error,
    },
    #[error("stored data is not valid: {0}")]
    Corrupt(String),
    #[error("no session matches {prefix:?}")]
    UnknownSession { prefix: String },
    #[error("no task matches {prefix:?}")]
    UnknownTask { prefix: String },
    #[error("{prefix:?} matches several {what}: {}", candidates.join(", "))]
    Ambiguous {
        what: &'static str,
        prefix: String,
        candidates: Vec<String>,
    },
    #[error("{}", if name.is_empty() {
        format!("no agent was named, and {} agents are registered (not exactly one)", known.len())
    } else {
        format!("no agent is named {name:?}")
    })]
    UnknownAgent { name: String, known: Vec<String> },
    #[error("an agent named {name:?} already exists")]
    AgentExists { name: String },
    #[error("no project is named {name:?}")]
    UnknownProject { name: String },
    #[error("a project named {name:?} already exists")]
    ProjectExists { name: String },
    /// An agent that sessions still name cannot go: their next message would have no
    /// agent to run (`agent_in_use`).
    #[error("the agent {name:?} is used by {} session{}: {}", sessions.len(),
        if sessions.len() == 1 { "" } else { "s" }, sessions.join(", "))]
    AgentInUse { name: String, sessions: Vec<String> },
    /// A session whose task is still queued or running cannot be deleted under it
    /// (`session_busy`).
    #[error("session {id} has {} task{} not finished: {}", tasks.len(),
        if tasks.len() == 1 { "" } else { "s" }, tasks.join(", "))]
    SessionBusy { id: String, tasks: Vec<String> },
    /// An answer to a request the store cannot take: unknown, already decided,
    /// expired (the code says which; the message how and by whom).
    #[error("{message}")]
    Approval {
        code: berth_core::ErrorCode,
        message: String,
    },
    /// A change that changes nothing, or a title that is empty.
    #[error("{0}")]
    BadChange(String),
    #[error("the store's worker thread failed: {0}")]
    Worker(String),
    /// The database file could not be made private (see [`crate::private`]).
    #[error("cannot secure the database file {path}: {source}")]
    Files {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// PostgreSQL's answer to a statement (`From` sorts out the transient ones).
    #[cfg(feature = "postgres")]
    #[error("database error: {0}")]
    Postgres(tokio_postgres::Error),
    /// The database cannot be reached (PostgreSQL down or restarting): the request may
    /// be tried again shortly (503).
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
}

/// An id read back from the database that breaks the rule: corrupt data (ids come in
/// parsed, so only a changed database holds one).
impl From<berth_core::IdError> for StoreError {
    fn from(e: berth_core::IdError) -> StoreError {
        StoreError::Corrupt(format!("a stored id: {e}"))
    }
}

impl StoreError {
    /// The database's fault this error reports, for `berth_store_errors_total`;
    /// `None` for a request's own error (an unknown id, a name taken).
    pub fn fault(&self) -> Option<crate::metrics::StoreErrorKind> {
        use crate::metrics::StoreErrorKind as K;
        match self {
            StoreError::Unavailable(_) => Some(K::Unavailable),
            StoreError::Sqlite(_) | StoreError::Migration { .. } | StoreError::Files { .. } => {
                Some(K::Database)
            }
            #[cfg(feature = "postgres")]
            StoreError::Postgres(_) => Some(K::Database),
            StoreError::Corrupt(_) => Some(K::Corrupt),
            StoreError::Worker(_) => Some(K::Internal),
            StoreError::UnknownSession { .. }
            | StoreError::UnknownTask { .. }
            | StoreError::Ambiguous { .. }
            | StoreError::UnknownAgent { .. }
            | StoreError::AgentExists { .. }
            | StoreError::UnknownProject { .. }
            | StoreError::ProjectExists { .. }
            | StoreError::AgentInUse { .. }
            | StoreError::SessionBusy { .. }
            | StoreError::Approval { .. }
            | StoreError::BadChange(_) => None,
        }
    }

    /// Back into a rusqlite error, inside a rusqlite row callback.
    pub(crate) fn into_sqlite(self) -> rusqlite::Error {
        if let StoreError::Sqlite(e) = self {
            return e;
        }
        rusqlite::Error::ToSqlConversionFailure(Box::new(self))
    }
}

/// A handle to the store; cheap to clone.
#[derive(Debug, Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    backend: Backend,
    hub: Arc<Hub>,
    /// Where the database's faults are counted ([`Store::measure`]).
    metrics: std::sync::OnceLock<crate::metrics::Metrics>,
}

#[derive(Debug)]
enum Backend {
    Sqlite(Sqlite),
    #[cfg(feature = "postgres")]
    Postgres(Arc<postgres::Pg>),
}

#[derive(Debug)]
struct Sqlite {
    path: PathBuf,
    writer: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
}

/// Collects the transcript events a write appends, and the live-only deltas among
/// them; they are published only after the transaction commits, in order.
#[derive(Debug, Default)]
pub struct Outbox(Vec<Live>);

impl Outbox {
    pub fn push(&mut self, ev: TranscriptEvent) {
        self.0.push(Live::Stored(ev));
    }

    /// A delta, published in its place among the stored events.
    pub fn pass(&mut self, delta: crate::transcript::Delta) {
        self.0.push(Live::Delta(delta));
    }
}

fn configure(conn: &Connection) -> Result<(), StoreError> {
    conn.busy_timeout(Duration::from_secs(5))?;
    // Every statement of a task's path is prepared once per connection and kept: parsing
    // them again was a sixth of the server's work per task. The path uses about 20.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(())
}

impl Store {
    /// Opens (creating if needed) `dir/berth.db`, in WAL mode, migrated to the latest
    /// schema. Blocking: call it before serving, or under `spawn_blocking`.
    pub fn open_blocking(dir: &Path) -> Result<Store, StoreError> {
        let path = dir.join(DB_FILE);
        // Created 0600 before SQLite opens it: SQLite gives the `-wal` and `-shm` files
        // the database file's mode. Files an older version left wider are tightened.
        crate::private::open(&path).map_err(|source| StoreError::Files {
            path: path.clone(),
            source,
        })?;
        for side in ["-wal", "-shm"] {
            let mut p = path.clone().into_os_string();
            p.push(side);
            match crate::private::tighten(Path::new(&p)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(StoreError::Files {
                        path: PathBuf::from(p),
                        source,
                    });
                }
            }
        }
        let mut conn = Connection::open(&path)?;
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Corrupt(format!(
                "{} could not be switched to WAL mode (got {mode})",
                path.display()
            )));
        }
        configure(&conn)?;
        schema::migrations()
            .to_latest(&mut conn)
            .map_err(|source| StoreError::Migration {
                path: path.clone(),
                source,
            })?;
        usage::upgrade_blocking(&mut conn)?;
        Ok(Store {
            inner: Arc::new(Inner {
                backend: Backend::Sqlite(Sqlite {
                    path,
                    writer: Mutex::new(conn),
                    readers: Mutex::new(Vec::new()),
                }),
                hub: Arc::new(Hub::default()),
                metrics: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Connects to the PostgreSQL database at `url` (`postgres://…`) and migrates it
    /// to the latest schema, under an advisory lock (replicas starting together apply
    /// each migration once).
    #[cfg(feature = "postgres")]
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        let hub = Arc::new(Hub::default());
        let pg = Arc::new(postgres::Pg::connect(url, hub.clone()).await?);
        postgres::Pg::listen(&pg);
        Ok(Store {
            inner: Arc::new(Inner {
                backend: Backend::Postgres(pg),
                hub,
                metrics: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Counts the database's faults into `metrics` from now on (once):
    /// `berth_store_errors_total`, by [`StoreError::fault`].
    pub fn measure(&self, metrics: crate::metrics::Metrics) {
        let _ = self.inner.metrics.set(metrics);
    }

    /// Every store call's result passes here, once: a PostgreSQL call in [`on_pg!`],
    /// a SQLite one where its connection ran it ([`Store::read_on`],
    /// [`Store::write_locked`]) or its worker thread failed.
    fn tally<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let (Err(e), Some(m)) = (&result, self.inner.metrics.get())
            && let Some(kind) = e.fault()
        {
            m.store_error(kind);
        }
        result
    }

    /// The PostgreSQL backend, when the store is on it.
    #[cfg(feature = "postgres")]
    pub(crate) fn pg(&self) -> Option<&postgres::Pg> {
        match &self.inner.backend {
            Backend::Postgres(pg) => Some(pg),
            Backend::Sqlite(_) => None,
        }
    }

    /// Tries to become the leader of the processes on this database: the one whose
    /// scheduler runs tasks and whose registry holds the daemons, advertised at `url`
    /// for the others to forward to. Always `true` on SQLite (one process: its home
    /// has `serve.lock`).
    pub async fn try_lead(&self, url: &str) -> Result<bool, StoreError> {
        on_pg!(self, pg => pg.try_lead(url));
        let _ = url;
        Ok(true)
    }

    /// Whether a process holds the leadership now (always held on SQLite).
    pub async fn leader_lock(&self) -> Result<LockSeen, StoreError> {
        on_pg!(self, pg => pg.leader_lock());
        Ok(LockSeen::Held)
    }

    /// Gives up the leadership at once, so that another process leads without waiting
    /// out a dead leader's grace (nothing to give up on SQLite).
    pub async fn resign(&self) -> Result<(), StoreError> {
        on_pg!(self, pg => pg.resign());
        Ok(())
    }

    /// Whether this store can serve: it answers, its schema is this build's, and (on
    /// PostgreSQL) some process leads. `Ok(Err(why))` when it answers but is not ready.
    pub async fn ready(&self) -> Result<Result<(), String>, StoreError> {
        on_pg!(self, pg => pg.ready());
        self.read_small(|conn| {
            conn.query_row("SELECT 1", [], |_| Ok(()))?;
            Ok(Ok(()))
        })
        .await
    }

    /// Whether this process still leads (see [`Store::try_lead`]).
    pub fn leads(&self) -> bool {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.pg() {
            return pg.leads();
        }
        true
    }

    /// The leader's advertised address (`None` on SQLite, or before any led).
    pub async fn leader_url(&self) -> Result<Option<String>, StoreError> {
        on_pg!(self, pg => pg.leader_url());
        Ok(None)
    }

    /// Work announced by any process on the database (PostgreSQL only).
    #[cfg(feature = "postgres")]
    pub fn work_notices(&self) -> Option<tokio::sync::broadcast::Receiver<postgres::Notice>> {
        self.pg().map(|pg| pg.work())
    }

    /// Tells the leader `session` has work (PostgreSQL; nothing to tell on SQLite).
    pub async fn announce_work(&self, session: berth_core::SessionId) -> Result<(), StoreError> {
        on_pg!(self, pg => pg.announce_work(session));
        let _ = session;
        Ok(())
    }

    /// Sessions with a task queued and not started.
    pub async fn queued_sessions(&self) -> Result<Vec<berth_core::SessionId>, StoreError> {
        on_pg!(self, pg => pg.queued_sessions());
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT DISTINCT session_id FROM tasks WHERE status = 'queued' AND started_at IS NULL",
            )?;
            let rows = stmt
                .query_map([], |r| {
                    rows::Cols::id(r, 0).map_err(StoreError::into_sqlite)
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// Which backend, for logs and `serve.json`: `sqlite PATH` or `postgres HOST/DB`
    /// (never a password).
    pub fn describe(&self) -> String {
        match &self.inner.backend {
            Backend::Sqlite(s) => format!("sqlite {}", s.path.display()),
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => format!("postgres {}", pg.describe()),
        }
    }

    /// The SQLite side; a rusqlite call on a PostgreSQL store is a bug in the caller,
    /// reported as an error.
    fn sqlite(&self) -> Result<&Sqlite, StoreError> {
        match &self.inner.backend {
            Backend::Sqlite(s) => Ok(s),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => Err(StoreError::Worker(
                "a SQLite call reached the PostgreSQL store".to_owned(),
            )),
        }
    }

    /// Opens the store without blocking the async executor.
    pub async fn open(dir: &Path) -> Result<Store, StoreError> {
        let dir = dir.to_owned();
        tokio::task::spawn_blocking(move || Store::open_blocking(&dir))
            .await
            .map_err(|e| StoreError::Worker(e.to_string()))?
    }

    /// The transcript's live feed.
    pub fn hub(&self) -> &Hub {
        &self.inner.hub
    }

    /// Runs a read on a pooled connection, off the async threads.
    pub async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let store = self.clone();
        match tokio::task::spawn_blocking(move || store.read_blocking(f)).await {
            Ok(out) => out,
            Err(e) => self.tally(Err(StoreError::Worker(e.to_string()))),
        }
    }

    /// A small read (one row or a few) on the calling thread when a pooled connection
    /// is free, as [`Store::write`] does; otherwise as [`Store::read`].
    pub async fn read_small<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    {
        match self.pooled_reader() {
            Some(conn) => self.read_on(conn, f),
            None => self.read(f).await,
        }
    }

    /// Runs a read on the calling thread (tests, benchmarks, startup).
    pub fn read_blocking<T>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let conn = match self.pooled_reader() {
            Some(c) => c,
            None => {
                let opened = self.sqlite().and_then(|sqlite| {
                    let c = Connection::open_with_flags(
                        &sqlite.path,
                        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                    )?;
                    configure(&c)?;
                    Ok(c)
                });
                let c = self.tally(opened)?;
                // No `mmap_size`: in WAL mode a reader unmaps the whole file at the start
                // of every read after a write (SQLite cannot tell a mapping is still
                // valid), so a mapped file costs each small read an munmap, the
                // TLB-shootdown IPIs to every thread of the server, and page faults to
                // map it back: more than the copies it saves on a whole-table read.
                c
            }
        };
        self.read_on(conn, f)
    }

    /// An idle pooled reader, if there is one.
    fn pooled_reader(&self) -> Option<Connection> {
        self.sqlite()
            .ok()?
            .readers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
    }

    /// Runs `f` on `conn`, then gives the connection back to the pool (if it has room).
    fn read_on<T>(
        &self,
        conn: Connection,
        f: impl FnOnce(&Connection) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let out = self.tally(f(&conn));
        if let Ok(sqlite) = self.sqlite() {
            let mut pool = sqlite
                .readers
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if pool.len() < READER_POOL {
                pool.push(conn);
            }
        }
        out
    }

    /// Runs a write in one transaction, off the async threads; the events it appended
    /// are published after the commit, in order.
    pub async fn write<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&rusqlite::Transaction<'_>, &mut Outbox) -> Result<T, StoreError>
            + Send
            + 'static,
    {
        // Writes are short transactions. When the writer is free, one runs right here:
        // no hand-off to a blocking thread and back (two thread wake-ups, a tenth of a
        // task's dispatch). When another write holds it, the wait is a blocking
        // thread's.
        match self.sqlite()?.writer.try_lock() {
            Ok(conn) => return self.write_locked(conn, f),
            Err(std::sync::TryLockError::Poisoned(p)) => {
                return self.write_locked(p.into_inner(), f);
            }
            Err(std::sync::TryLockError::WouldBlock) => {}
        }
        let store = self.clone();
        match tokio::task::spawn_blocking(move || store.write_blocking(f)).await {
            Ok(out) => out,
            Err(e) => self.tally(Err(StoreError::Worker(e.to_string()))),
        }
    }

    /// [`Store::write`] on the calling thread.
    pub fn write_blocking<T>(
        &self,
        f: impl FnOnce(&rusqlite::Transaction<'_>, &mut Outbox) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let conn = self
            .sqlite()?
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.write_locked(conn, f)
    }

    fn write_locked<T>(
        &self,
        mut conn: std::sync::MutexGuard<'_, Connection>,
        f: impl FnOnce(&rusqlite::Transaction<'_>, &mut Outbox) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let done = (|| {
            let tx = conn.transaction()?;
            let mut outbox = Outbox::default();
            let out = f(&tx, &mut outbox)?;
            tx.commit()?;
            Ok((out, outbox))
        })();
        let (out, outbox) = self.tally(done)?;
        for ev in outbox.0 {
            self.inner.hub.publish(ev);
        }
        Ok(out)
    }
}

/// Parses a stored enum spelling through its serde form.
pub(crate) fn parse_enum<T: serde::de::DeserializeOwned>(s: &str) -> Result<T, StoreError> {
    serde_json::from_value(serde_json::Value::String(s.to_owned()))
        .map_err(|_| StoreError::Corrupt(format!("unexpected value {s:?}")))
}

/// The full id of the session `prefix` names uniquely among those `owner` owns (among
/// all with `None`), see [`rules::IdPrefix`].
pub(crate) fn resolve_session(
    conn: &Connection,
    prefix: &str,
    owner: Option<&str>,
) -> Result<berth_core::SessionId, StoreError> {
    let p = rules::IdPrefix::new(Scoped::Sessions, prefix, owner)?;
    Ok(resolve_id(conn, p)?.try_into()?)
}

/// The full id of the task `prefix` names uniquely among those of `owner`'s sessions
/// (among all with `None`), see [`rules::IdPrefix`].
pub(crate) fn resolve_task(
    conn: &Connection,
    prefix: &str,
    owner: Option<&str>,
) -> Result<berth_core::TaskId, StoreError> {
    let p = rules::IdPrefix::new(Scoped::Tasks, prefix, owner)?;
    Ok(resolve_id(conn, p)?.try_into()?)
}

fn resolve_id(conn: &Connection, p: rules::IdPrefix<'_>) -> Result<String, StoreError> {
    let ids = conn
        .prepare_cached(p.sql())?
        .query_map(rusqlite::params![&p.wanted, p.owner], |r| r.get(0))?
        .collect::<Result<Vec<String>, _>>()?;
    p.pick(ids)
}
