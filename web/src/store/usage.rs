//! Token usage added up: in the database, over the tasks' normalized `usage` (see
//! [`berth_core::usage`]), by agent, session or day.
//!
//! Every row is in the normalized shape once the store is open: [`upgrade_blocking`]
//! rewrites a row a Berth before it stored (the agent's own object) in place, so the
//! sums need not know the agents' words. New rows are told by their text's first
//! bytes, `{"input":` (the shape's first field), so the check reads no JSON.

use super::rules::json_text;
use super::{Store, StoreError};
use berth_core::usage::{Usage, UsageBy, UsageGroup, UsageTotals};
use berth_core::{Member, SessionId};
use rusqlite::{Connection, OptionalExtension};

/// What to add up: whose tasks, of which session, since when, grouped how.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageQuery {
    /// One member's sessions' tasks; `None`: everyone's.
    pub owner: Option<Member>,
    /// One session's tasks (its full id, resolved by the caller).
    pub session: Option<SessionId>,
    /// Tasks finished at or after this text ([`berth_core::usage::since`]'s form).
    pub since: Option<String>,
    /// Groups to give besides the total; `None`: the total alone.
    pub by: Option<UsageBy>,
}

/// The groups (in key order) and the total of a [`UsageQuery`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageSums {
    pub groups: Vec<UsageGroup>,
    pub total: UsageTotals,
}

/// The first bytes of a row in the normalized shape.
pub(crate) const NEW_SHAPE_PREFIX: &str = "{\"input\":";

/// The group key's SQL for `by` (the same in both dialects), and whether its group
/// has a title (a session's).
pub(crate) fn key_sql(by: Option<UsageBy>) -> (&'static str, bool) {
    match by {
        None => ("NULL", false),
        Some(UsageBy::Agent) => ("s.agent", false),
        Some(UsageBy::Session) => ("s.id", true),
        Some(UsageBy::Day) => ("substr(t.finished_at, 1, 10)", false),
    }
}

/// A stored usage text rewritten in the normalized shape (`None`: not usage at all,
/// cleared).
pub(crate) fn upgraded(text: &str) -> Result<Option<String>, StoreError> {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .as_ref()
        .and_then(Usage::from_stored)
        .map(|u| json_text(&u))
        .transpose()
}

/// The last task of a session before a `seq` that has usage (both dialects).
pub(crate) const PREVIOUS_SQL: &str = "SELECT usage FROM tasks
    WHERE session_id = $1 AND seq < $2 AND usage IS NOT NULL ORDER BY seq DESC LIMIT 1";

/// A stored usage text, read in the normalized shape.
pub(crate) fn stored(text: Option<&str>) -> Option<Usage> {
    serde_json::from_str::<serde_json::Value>(text?)
        .ok()
        .as_ref()
        .and_then(Usage::from_stored)
}

/// A database count as a token total (never negative).
pub(crate) fn tokens(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// Rewrites the rows stored before the normalized shape; how many it rewrote.
pub(crate) fn upgrade_blocking(conn: &mut Connection) -> Result<usize, StoreError> {
    let tx = conn.transaction()?;
    let old: Vec<(String, String)> = {
        let mut stmt = tx.prepare(
            "SELECT id, usage FROM tasks WHERE usage IS NOT NULL AND substr(usage, 1, 9) <> ?1",
        )?;
        let rows = stmt.query_map([NEW_SHAPE_PREFIX], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect::<Result<_, _>>()?
    };
    for (id, text) in &old {
        tx.execute(
            "UPDATE tasks SET usage = ?1 WHERE id = ?2",
            rusqlite::params![upgraded(text)?, id],
        )?;
    }
    tx.commit()?;
    Ok(old.len())
}

fn sums_blocking(
    conn: &Connection,
    q: &UsageQuery,
    by: Option<UsageBy>,
) -> Result<Vec<UsageGroup>, StoreError> {
    let (key, titled) = key_sql(by);
    let title = if titled { "MAX(s.title)" } else { "NULL" };
    let group = if by.is_some() {
        "GROUP BY 1 ORDER BY 1"
    } else {
        ""
    };
    let sql = format!(
        "SELECT {key}, {title}, COUNT(*),
                COALESCE(SUM(json_extract(t.usage, '$.input')), 0),
                COALESCE(SUM(json_extract(t.usage, '$.output')), 0),
                COALESCE(SUM(json_extract(t.usage, '$.cache_read')), 0),
                COALESCE(SUM(json_extract(t.usage, '$.cache_write')), 0),
                SUM(json_extract(t.usage, '$.cost_usd'))
         FROM tasks t JOIN sessions s ON s.id = t.session_id
         WHERE t.usage IS NOT NULL
           AND (?1 IS NULL OR s.owner = ?1)
           AND (?2 IS NULL OR t.finished_at >= ?2)
           AND (?3 IS NULL OR t.session_id = ?3)
         {group}"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(
        rusqlite::params![
            q.owner.as_deref(),
            q.since.as_deref(),
            q.session.as_ref().map(SessionId::as_str)
        ],
        |r| {
            Ok(UsageGroup {
                key: r.get::<_, Option<String>>(0)?.unwrap_or_default(),
                title: r.get(1)?,
                totals: UsageTotals {
                    tasks: tokens(r.get(2)?),
                    input: tokens(r.get(3)?),
                    output: tokens(r.get(4)?),
                    cache_read: tokens(r.get(5)?),
                    cache_write: tokens(r.get(6)?),
                    cost_usd: r.get(7)?,
                },
            })
        },
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}

impl Store {
    /// The usage of the last task of `session` before its task `seq` that reported
    /// any: a Codex turn's report is the thread's running total, so the next one
    /// counts what it adds to this ([`Usage::codex_turn`]).
    pub async fn previous_usage(
        &self,
        session: SessionId,
        seq: i64,
    ) -> Result<Option<Usage>, StoreError> {
        on_pg!(self, pg => pg.previous_usage(session, seq));
        self.read_small(move |conn| {
            let text: Option<String> = conn
                .prepare_cached(PREVIOUS_SQL)?
                .query_row(rusqlite::params![session.as_str(), seq], |r| r.get(0))
                .optional()?;
            Ok(stored(text.as_deref()))
        })
        .await
    }

    /// The tasks' usage `q` names, added up by the database: the groups `q.by` asks
    /// for and the total.
    pub async fn usage(&self, q: UsageQuery) -> Result<UsageSums, StoreError> {
        on_pg!(self, pg => pg.usage(q));
        self.read(move |conn| {
            let groups = match q.by {
                Some(by) => sums_blocking(conn, &q, Some(by))?,
                None => Vec::new(),
            };
            let total = sums_blocking(conn, &q, None)?
                .pop()
                .map(|g| g.totals)
                .unwrap_or_default();
            Ok(UsageSums { groups, total })
        })
        .await
    }
}
