//! A team's members, their hashed API tokens, and the audit trail, on PostgreSQL.

use super::Pg;
use super::pool::Q;
use crate::clock;
use crate::store::members::{FIRST_ADMIN, MEMBER_COLUMNS, audit_from, member_from};
use crate::store::rows::Cols;
use crate::store::{AuditEntry, AuditRow, MemberChange, MemberRow, StoreError};
use tokio_postgres::GenericClient;

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

impl Pg {
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
        let sql = format!("SELECT {MEMBER_COLUMNS} FROM members ORDER BY name");
        self.all(&sql, &[], member_from).await
    }

    pub(crate) async fn member_by_hash(
        &self,
        hash: String,
    ) -> Result<Option<MemberRow>, StoreError> {
        let sql =
            format!("SELECT {MEMBER_COLUMNS} FROM members WHERE hash = $1 AND removed_at IS NULL");
        self.first(&sql, &[&hash], member_from).await
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

    pub(crate) async fn audit(&self, e: AuditEntry) -> Result<(), StoreError> {
        self.exec(
            "INSERT INTO audit (at, member, action, target, via) VALUES ($1, $2, $3, $4, $5)",
            &[&clock::now(), &e.member, &e.action, &e.target, &e.via],
        )
        .await?;
        Ok(())
    }

    pub(crate) async fn audit_trail(
        &self,
        member: Option<String>,
    ) -> Result<Vec<AuditRow>, StoreError> {
        self.all(
            "SELECT id, at, member, action, target, via FROM audit
             WHERE $1::text IS NULL OR member = $1 ORDER BY id",
            &[&member],
            audit_from,
        )
        .await
    }
}
