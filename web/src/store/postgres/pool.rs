//! Connections: a pool of our own (see [`super`]), each connection with its
//! prepared statements, and a write's transaction with what it publishes at commit.

use super::Pg;
use crate::store::{Outbox, StoreError};
use crate::transcript::Hub;
use std::collections::HashMap;
use std::sync::PoisonError;
use std::time::Duration;
use tokio::sync::SemaphorePermit;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, GenericClient, NoTls, Row, Statement};

/// Connections per replica, at most.
pub(super) const POOL: usize = 16;

/// How long a request waits for a connection before it is answered 503.
const CHECKOUT_WAIT: Duration = Duration::from_secs(5);

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
pub(super) struct Conn {
    pub(super) client: Client,
    stmts: HashMap<String, Statement>,
    /// A statement found the connection lost, or a write was dropped with its
    /// transaction open: it is not pooled again (even while the client has not
    /// noticed yet: its `is_closed` lags the error), and closing it ends the
    /// transaction at once, with whatever rows it had locked.
    broken: bool,
}

/// A connection taken from the pool; back in it when dropped, unless it broke.
pub(super) struct Lease<'a> {
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
    pub(super) fn conn(&mut self) -> Result<&mut Conn, StoreError> {
        self.conn
            .as_mut()
            .ok_or_else(|| StoreError::Worker("a database lease without its connection".into()))
    }

    /// Reads outside a transaction.
    pub(super) fn read(&mut self) -> Result<Q<'_, Client>, StoreError> {
        let conn = self.conn()?;
        Ok(Q {
            c: &conn.client,
            stmts: &mut conn.stmts,
            broken: &mut conn.broken,
            tx: None,
        })
    }

    /// Begins a write. Nothing is sent yet: `BEGIN` goes with the write's first
    /// statement, in one round trip (pipelined), and `COMMIT` with its last
    /// ([`W::commit`]).
    pub(super) async fn begin(&mut self) -> Result<W<'_>, StoreError> {
        let Conn {
            client,
            stmts,
            broken,
        } = self.conn()?;
        Ok(W {
            c: client,
            stmts,
            broken,
            open: false,
            outbox: Outbox::default(),
            work: Vec::new(),
        })
    }
}

/// Statements on a connection or in a transaction, prepared once per connection.
pub(super) struct Q<'a, C> {
    c: &'a C,
    stmts: &'a mut HashMap<String, Statement>,
    broken: &'a mut bool,
    /// In a write: whether its transaction is open (`BEGIN` sent); if not, the next
    /// statement carries its `BEGIN`.
    tx: Option<&'a mut bool>,
}

/// The store's error for `e`; a lost connection marks it broken.
fn mark(broken: &mut bool, e: tokio_postgres::Error) -> StoreError {
    let e = StoreError::from(e);
    if matches!(e, StoreError::Unavailable(_)) {
        *broken = true;
    }
    e
}

pub(super) type Params<'p> = &'p [&'p (dyn ToSql + Sync)];

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

    /// Whether this statement must carry the write's `BEGIN` (once).
    fn begins(&mut self) -> bool {
        match self.tx.as_deref_mut() {
            Some(open) if !*open => {
                *open = true;
                true
            }
            Some(_) | None => false,
        }
    }

    /// Runs `statement`, preceded in the same round trip by the write's `BEGIN` when
    /// it is the first: tokio-postgres sends requests in the order they are first
    /// polled and reads the answers in that order, so the two go out together.
    async fn run<T>(
        &mut self,
        statement: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, StoreError> {
        let out = if self.begins() {
            let (begun, out) = tokio::join!(self.c.batch_execute("BEGIN"), statement);
            begun.and(out)
        } else {
            statement.await
        };
        out.map_err(|e| mark(self.broken, e))
    }

    pub(super) async fn exec(&mut self, sql: &str, p: Params<'_>) -> Result<u64, StoreError> {
        let st = self.prepared(sql).await?;
        let c = self.c;
        self.run(c.execute(&st, p)).await
    }

    pub(super) async fn rows(&mut self, sql: &str, p: Params<'_>) -> Result<Vec<Row>, StoreError> {
        let st = self.prepared(sql).await?;
        let c = self.c;
        self.run(c.query(&st, p)).await
    }

    pub(super) async fn opt(
        &mut self,
        sql: &str,
        p: Params<'_>,
    ) -> Result<Option<Row>, StoreError> {
        let st = self.prepared(sql).await?;
        let c = self.c;
        self.run(c.query_opt(&st, p)).await
    }

    pub(super) async fn one(&mut self, sql: &str, p: Params<'_>) -> Result<Row, StoreError> {
        let st = self.prepared(sql).await?;
        let c = self.c;
        self.run(c.query_one(&st, p)).await
    }
}

/// A write: one transaction and the transcript events it appends, published after
/// the commit. Dropped without [`Pg::publish`] once anything was sent, it rolls back:
/// its connection is closed rather than pooled, so the transaction and its locks end
/// at once (an error's path, or a write that found nothing to do).
///
/// Its `BEGIN` goes out with its first statement and its `COMMIT` with its last (the
/// notifications, [`W::commit`]), each pipelined in one round trip: a write of one
/// statement costs one round trip and its commit, as it would outside a transaction.
/// A statement that fails aborts the transaction, so the `COMMIT` sent behind it
/// rolls back (PostgreSQL answers it `ROLLBACK`), and the statement's error is what
/// the write returns.
pub(super) struct W<'a> {
    c: &'a Client,
    stmts: &'a mut HashMap<String, Statement>,
    broken: &'a mut bool,
    /// Its transaction is open: `BEGIN` was sent, `COMMIT` not yet.
    open: bool,
    pub(super) outbox: Outbox,
    /// Sessions given new work, announced at commit.
    pub(super) work: Vec<berth_core::SessionId>,
}

impl Drop for W<'_> {
    fn drop(&mut self) {
        // Dropped with its transaction open: never pooled with it (a pooled connection
        // could hold its row locks until its next use).
        if self.open {
            *self.broken = true;
        }
    }
}

impl W<'_> {
    /// Statements in the write's transaction (the first carries its `BEGIN`).
    pub(super) fn q(&mut self) -> Q<'_, Client> {
        Q {
            c: self.c,
            stmts: self.stmts,
            broken: self.broken,
            tx: Some(&mut self.open),
        }
    }

    /// Notifies each `(channel, payload)` pair (delivered at the commit, not before)
    /// and commits, the two in one round trip; then publishes the events appended to
    /// this process's live feed, in order (see [`Pg::publish`]).
    pub(super) async fn commit(
        mut self,
        notes: &[(&str, String)],
        hub: &Hub,
    ) -> Result<(), StoreError> {
        const NOTIFY: &str =
            "SELECT pg_notify(n.c, n.p) FROM unnest($1::text[], $2::text[]) AS n(c, p)";
        let channels: Vec<&str> = notes.iter().map(|(c, _)| *c).collect();
        let payloads: Vec<&str> = notes.iter().map(|(_, p)| p.as_str()).collect();
        if !self.open {
            // Nothing was written: the notifications (if any) on their own, outside a
            // transaction.
            if !notes.is_empty() {
                let mut alone = Q {
                    c: self.c,
                    stmts: self.stmts,
                    broken: self.broken,
                    tx: None,
                };
                alone.exec(NOTIFY, &[&channels, &payloads]).await?;
            }
        } else if notes.is_empty() {
            let done = self.c.batch_execute("COMMIT").await;
            done.map_err(|e| mark(self.broken, e))?;
            self.open = false;
        } else {
            let st = self.q().prepared(NOTIFY).await?;
            let params: Params<'_> = &[&channels, &payloads];
            let (notified, done) =
                tokio::join!(self.c.execute(&st, params), self.c.batch_execute("COMMIT"));
            // A failed notification aborted the transaction: the COMMIT behind it
            // rolled back, and the notification's error says why.
            notified.and(done).map_err(|e| mark(self.broken, e))?;
            self.open = false;
        }
        for ev in std::mem::take(&mut self.outbox.0) {
            hub.publish(ev);
        }
        Ok(())
    }
}

impl Pg {
    /// Every row `sql` answers, read outside a transaction, each made a `T` by `each`.
    pub(super) async fn all<T>(
        &self,
        sql: &str,
        p: Params<'_>,
        each: impl FnMut(&Row) -> Result<T, StoreError>,
    ) -> Result<Vec<T>, StoreError> {
        let mut lease = self.lease().await?;
        lease.read()?.rows(sql, p).await?.iter().map(each).collect()
    }

    /// The row `sql` answers, if any, read outside a transaction, made a `T` by `each`.
    pub(super) async fn first<T>(
        &self,
        sql: &str,
        p: Params<'_>,
        each: impl FnOnce(&Row) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        let mut lease = self.lease().await?;
        lease
            .read()?
            .opt(sql, p)
            .await?
            .as_ref()
            .map(each)
            .transpose()
    }

    /// Runs one statement outside a transaction; answers how many rows it changed.
    pub(super) async fn exec(&self, sql: &str, p: Params<'_>) -> Result<u64, StoreError> {
        let mut lease = self.lease().await?;
        lease.read()?.exec(sql, p).await
    }

    pub(super) async fn open(&self) -> Result<Conn, StoreError> {
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
    pub(super) async fn lease(&self) -> Result<Lease<'_>, StoreError> {
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
}
