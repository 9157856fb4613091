//! A team's members (on `berth-server`), their hashed API tokens, and the audit trail.

use super::rows::Cols;
use super::{Store, StoreError};
use crate::clock;
use rusqlite::{OptionalExtension, params};
use serde::Serialize;

/// The member whose token is the one in `serve.json`: the first admin. Sessions and
/// daemon tokens made before members existed are theirs.
pub const FIRST_ADMIN: &str = "admin";

/// Whose a session or a daemon token is, by name: one made with no owner (before
/// members existed, or on `berth serve`, which has none) is the first admin's. The
/// scheduler matches sessions to machines, and the forwarded control socket names its
/// caller, by this one rule.
pub fn owner_name(owner: Option<&str>) -> &str {
    owner.unwrap_or(FIRST_ADMIN)
}

/// A member as stored (never their token).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemberRow {
    pub name: String,
    pub admin: bool,
    pub created_at: String,
    pub removed_at: Option<String>,
}

/// What a member change came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberChange {
    Done(MemberRow),
    /// `add`: the name is taken (by a member, present or removed).
    Exists,
    /// No live member of that name.
    Unknown,
    /// The first admin cannot be removed or rotated (restart `berth-server` for a new
    /// token).
    Protected,
}

/// One audit entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditRow {
    pub id: i64,
    pub at: String,
    pub member: String,
    pub action: String,
    pub target: Option<String>,
    pub via: String,
}

/// A new entry for the audit trail: who did what (and to whom) through which surface;
/// the store stamps the time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    pub member: String,
    pub action: String,
    pub target: Option<String>,
    pub via: String,
}

pub(crate) const MEMBER_COLUMNS: &str = "name, admin, created_at, removed_at";

/// A member row; `admin` is stored as an integer on both backends.
pub(crate) fn member_from(r: &impl Cols) -> Result<MemberRow, StoreError> {
    Ok(MemberRow {
        name: r.text(0)?,
        admin: r.int(1)? != 0,
        created_at: r.text(2)?,
        removed_at: r.opt_text(3)?,
    })
}

/// An audit entry, from the columns `id, at, member, action, target, via`.
pub(crate) fn audit_from(r: &impl Cols) -> Result<AuditRow, StoreError> {
    Ok(AuditRow {
        id: r.int(0)?,
        at: r.text(1)?,
        member: r.text(2)?,
        action: r.text(3)?,
        target: r.opt_text(4)?,
        via: r.text(5)?,
    })
}

fn member_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<MemberRow> {
    member_from(r).map_err(StoreError::into_sqlite)
}

fn get_member(conn: &rusqlite::Connection, name: &str) -> Result<Option<MemberRow>, StoreError> {
    Ok(conn
        .query_row(
            &format!("SELECT {MEMBER_COLUMNS} FROM members WHERE name = ?1"),
            [name],
            member_from_row,
        )
        .optional()?)
}

impl Store {
    /// Makes `serve.json`'s token the first admin's (a new one at every start), and
    /// gives the first admin what was made before members existed.
    pub async fn ensure_first_admin(&self, hash: String) -> Result<(), StoreError> {
        on_pg!(self, pg => pg.ensure_first_admin(hash));
        self.write(move |tx, _| {
            let now = clock::now();
            tx.execute(
                "INSERT INTO members (name, admin, hash, created_at) VALUES (?1, 1, ?2, ?3)
                 ON CONFLICT(name) DO UPDATE SET hash = excluded.hash, admin = 1, removed_at = NULL",
                params![FIRST_ADMIN, hash, now],
            )?;
            tx.execute(
                "UPDATE sessions SET owner = ?1 WHERE owner IS NULL",
                [FIRST_ADMIN],
            )?;
            tx.execute(
                "UPDATE daemon_tokens SET member = ?1 WHERE member IS NULL",
                [FIRST_ADMIN],
            )?;
            Ok(())
        })
        .await
    }

    /// Adds a member with the hash of their new token.
    pub async fn add_member(
        &self,
        name: String,
        admin: bool,
        hash: String,
    ) -> Result<MemberChange, StoreError> {
        on_pg!(self, pg => pg.add_member(name, admin, hash));
        self.write(move |tx, _| {
            if get_member(tx, &name)?.is_some() {
                return Ok(MemberChange::Exists);
            }
            tx.execute(
                "INSERT INTO members (name, admin, hash, created_at) VALUES (?1, ?2, ?3, ?4)",
                params![name, i64::from(admin), hash, clock::now()],
            )?;
            Ok(get_member(tx, &name)?.map_or(MemberChange::Unknown, MemberChange::Done))
        })
        .await
    }

    /// Every member, removed ones included, by name.
    pub async fn members(&self) -> Result<Vec<MemberRow>, StoreError> {
        on_pg!(self, pg => pg.members());
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {MEMBER_COLUMNS} FROM members ORDER BY name"
            ))?;
            let rows = stmt
                .query_map([], member_from_row)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }

    /// The live member whose token hashes to `hash`.
    pub async fn member_by_hash(&self, hash: String) -> Result<Option<MemberRow>, StoreError> {
        on_pg!(self, pg => pg.member_by_hash(hash));
        self.read_small(move |conn| {
            Ok(conn
                .query_row(
                    &format!(
                        "SELECT {MEMBER_COLUMNS} FROM members WHERE hash = ?1 AND removed_at IS NULL"
                    ),
                    [&hash],
                    member_from_row,
                )
                .optional()?)
        })
        .await
    }

    /// The live member named `name`.
    pub async fn member(&self, name: String) -> Result<Option<MemberRow>, StoreError> {
        on_pg!(self, pg => pg.member(name));
        self.read_small(move |conn| Ok(get_member(conn, &name)?.filter(|m| m.removed_at.is_none())))
            .await
    }

    /// Removes a member: their token stops working and their daemon tokens are revoked
    /// (the registry takes their machines offline). Returns the daemon tokens revoked.
    pub async fn remove_member(
        &self,
        name: String,
    ) -> Result<(MemberChange, Vec<String>), StoreError> {
        on_pg!(self, pg => pg.remove_member(name));
        self.write(move |tx, _| {
            if name == FIRST_ADMIN {
                return Ok((MemberChange::Protected, Vec::new()));
            }
            let Some(m) = get_member(tx, &name)?.filter(|m| m.removed_at.is_none()) else {
                return Ok((MemberChange::Unknown, Vec::new()));
            };
            let now = clock::now();
            tx.execute(
                "UPDATE members SET hash = NULL, removed_at = ?2 WHERE name = ?1",
                params![m.name, now],
            )?;
            let mut stmt = tx.prepare_cached(
                "SELECT name FROM daemon_tokens WHERE member = ?1 AND revoked_at IS NULL ORDER BY name",
            )?;
            let tokens = stmt
                .query_map([&m.name], |r| r.get::<_, String>(0))?
                .collect::<Result<Vec<_>, _>>()?;
            Ok((
                get_member(tx, &m.name)?.map_or(MemberChange::Unknown, MemberChange::Done),
                tokens,
            ))
        })
        .await
    }

    /// Gives a member a new token (the old one stops working at once).
    pub async fn rotate_member_token(
        &self,
        name: String,
        hash: String,
    ) -> Result<MemberChange, StoreError> {
        on_pg!(self, pg => pg.rotate_member_token(name, hash));
        self.write(move |tx, _| {
            if name == FIRST_ADMIN {
                return Ok(MemberChange::Protected);
            }
            let changed = tx.execute(
                "UPDATE members SET hash = ?2 WHERE name = ?1 AND removed_at IS NULL",
                params![name, hash],
            )?;
            if changed == 0 {
                return Ok(MemberChange::Unknown);
            }
            Ok(get_member(tx, &name)?.map_or(MemberChange::Unknown, MemberChange::Done))
        })
        .await
    }

    /// Appends to the audit trail.
    pub async fn audit(&self, e: AuditEntry) -> Result<(), StoreError> {
        on_pg!(self, pg => pg.audit(e));
        self.write(move |tx, _| {
            tx.execute(
                "INSERT INTO audit (at, member, action, target, via) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![clock::now(), e.member, e.action, e.target, e.via],
            )?;
            Ok(())
        })
        .await
    }

    /// The audit trail, oldest first; only `member`'s entries when given.
    pub async fn audit_trail(&self, member: Option<String>) -> Result<Vec<AuditRow>, StoreError> {
        on_pg!(self, pg => pg.audit_trail(member));
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, at, member, action, target, via FROM audit
                 WHERE ?1 IS NULL OR member = ?1 ORDER BY id",
            )?;
            let rows = stmt
                .query_map([&member], |r| {
                    audit_from(r).map_err(StoreError::into_sqlite)
                })?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
        .await
    }
}
