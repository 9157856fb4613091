//! Token usage added up on PostgreSQL: the SQLite side's sums (`store/usage.rs`) in
//! this dialect, the `usage` text read as `jsonb`.

use super::Pg;
use crate::store::usage::{NEW_SHAPE_PREFIX, PREVIOUS_SQL, key_sql, stored, tokens, upgraded};
use crate::store::{StoreError, UsageQuery, UsageSums};
use berth_core::SessionId;
use berth_core::usage::{Usage, UsageBy, UsageGroup, UsageTotals};

impl Pg {
    /// Rewrites the rows stored before the normalized shape, in one transaction (a
    /// replica starting beside it rewrites them the same way).
    pub(super) async fn upgrade_usage(&self) -> Result<usize, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let old: Vec<(String, String)> = w
            .q()
            .rows(
                "SELECT id, usage FROM tasks
                 WHERE usage IS NOT NULL AND substr(usage, 1, 9) <> $1",
                &[&NEW_SHAPE_PREFIX],
            )
            .await?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<Result<_, StoreError>>()?;
        for (id, text) in &old {
            w.q()
                .exec(
                    "UPDATE tasks SET usage = $1 WHERE id = $2",
                    &[&upgraded(text)?, id],
                )
                .await?;
        }
        self.publish(w).await?;
        Ok(old.len())
    }

    pub(crate) async fn previous_usage(
        &self,
        session: SessionId,
        seq: i64,
    ) -> Result<Option<Usage>, StoreError> {
        let text = self
            .first(PREVIOUS_SQL, &[&session.as_str(), &seq], |r| {
                Ok(r.try_get::<_, String>(0)?)
            })
            .await?;
        Ok(stored(text.as_deref()))
    }

    pub(crate) async fn usage(&self, q: UsageQuery) -> Result<UsageSums, StoreError> {
        let groups = match q.by {
            Some(by) => self.sums(&q, Some(by)).await?,
            None => Vec::new(),
        };
        let total = self
            .sums(&q, None)
            .await?
            .pop()
            .map(|g| g.totals)
            .unwrap_or_default();
        Ok(UsageSums { groups, total })
    }

    async fn sums(
        &self,
        q: &UsageQuery,
        by: Option<UsageBy>,
    ) -> Result<Vec<UsageGroup>, StoreError> {
        let (key, titled) = key_sql(by);
        let title = if titled { "MAX(s.title)" } else { "NULL::text" };
        let key = if by.is_some() { key } else { "NULL::text" };
        let group = if by.is_some() {
            "GROUP BY 1 ORDER BY 1"
        } else {
            ""
        };
        let field =
            |f: &str| format!("COALESCE(SUM((t.usage::jsonb ->> '{f}')::bigint), 0)::bigint");
        let sql = format!(
            "SELECT {key}, {title}, COUNT(*)::bigint, {}, {}, {}, {},
                    SUM((t.usage::jsonb ->> 'cost_usd')::float8)
             FROM tasks t JOIN sessions s ON s.id = t.session_id
             WHERE t.usage IS NOT NULL
               AND ($1::text IS NULL OR s.owner = $1)
               AND ($2::text IS NULL OR t.finished_at >= $2)
               AND ($3::text IS NULL OR t.session_id = $3)
             {group}",
            field("input"),
            field("output"),
            field("cache_read"),
            field("cache_write"),
        );
        let session = q.session.as_ref().map(SessionId::as_str);
        self.all(
            &sql,
            &[&q.owner.as_deref(), &q.since.as_deref(), &session],
            |r| {
                Ok(UsageGroup {
                    key: r.try_get::<_, Option<String>>(0)?.unwrap_or_default(),
                    title: r.try_get(1)?,
                    totals: UsageTotals {
                        tasks: tokens(r.try_get(2)?),
                        input: tokens(r.try_get(3)?),
                        output: tokens(r.try_get(4)?),
                        cache_read: tokens(r.try_get(5)?),
                        cache_write: tokens(r.try_get(6)?),
                        cost_usd: r.try_get(7)?,
                    },
                })
            },
        )
        .await
    }
}
