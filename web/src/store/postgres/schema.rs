//! The schema on PostgreSQL: embedded, versioned migrations, applied at start-up under
//! an advisory lock.

use super::Pg;
use crate::clock;
use crate::store::StoreError;
use tokio_postgres::Client;

/// The advisory lock that serialises migrations across replicas ("berth" in ASCII).
const MIGRATION_LOCK: i64 = 0x62_65_72_74_68;

/// The schema, as embedded, versioned migrations. Append one; never edit a published
/// one. Version N is `MIGRATIONS[N - 1]`.
pub const MIGRATIONS: &[&str] = &[
    V1,
    V2,
    V3,
    crate::store::lists::TRIGGERS,
    V5,
    V6,
    V7,
    V8,
    V9,
    V10,
];

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

/// Each task's token usage, as its agent reported it (JSON).
const V6: &str = r#"
ALTER TABLE tasks ADD COLUMN usage TEXT;
"#;

/// Archived sessions (SQLite's version 12); the list's trigger hears the new column.
const V7: &str = r#"
ALTER TABLE sessions ADD COLUMN archived_at TEXT;
DROP TRIGGER sessions_listed ON sessions;
CREATE TRIGGER sessions_listed
    AFTER INSERT OR DELETE OR UPDATE OF id, title, agent, origin, project, created_at,
        updated_at, binding_dir, binding_display, binding_machine, binding_mode,
        binding_state, work_dir, work_dir_display, owner, archived_at
    ON sessions FOR EACH STATEMENT EXECUTE FUNCTION berth_sessions_changed();
"#;

/// Approvals (SQLite's version 13).
const V8: &str = r#"
ALTER TABLE tasks ADD COLUMN approvals TEXT;
CREATE TABLE session_rules (
    session_id  TEXT COLLATE "C" NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    n           BIGINT NOT NULL,
    rule        TEXT NOT NULL,
    added_at    TEXT NOT NULL,
    approval_id TEXT,
    PRIMARY KEY (session_id, n)
);
"#;

/// A row per request (SQLite's version 14): the lists kept in `tasks.approvals` move
/// here, in the order asked; the column stays, empty.
const V9: &str = r#"
CREATE TABLE approvals (
    seq        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id         TEXT COLLATE "C" NOT NULL UNIQUE,
    task_id    TEXT COLLATE "C" NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    session_id TEXT COLLATE "C" NOT NULL,
    waiting    BOOLEAN NOT NULL,
    asked_at   TEXT COLLATE "C" NOT NULL,
    body       TEXT NOT NULL
);
CREATE INDEX approvals_task ON approvals(task_id, waiting, seq);
CREATE INDEX approvals_asked ON approvals(waiting, asked_at, seq);
CREATE INDEX approvals_session ON approvals(session_id, waiting);
-- A session's "needs you" is in the list's documents: a request that starts or stops
-- waiting changes what the kept lists show (see `crate::store::lists`).
CREATE TRIGGER approvals_listed
    AFTER INSERT OR DELETE OR UPDATE OF waiting ON approvals
    FOR EACH STATEMENT EXECUTE FUNCTION berth_sessions_changed();
INSERT INTO approvals (id, task_id, session_id, waiting, asked_at, body)
    SELECT j.value->>'id', t.id, t.session_id,
           COALESCE(jsonb_typeof(j.value->'decision'), 'null') = 'null',
           j.value->>'asked_at', j.value::text
    FROM tasks t, jsonb_array_elements(t.approvals::jsonb) WITH ORDINALITY AS j(value, n)
    WHERE t.approvals IS NOT NULL
    ORDER BY t.created_at, t.id, j.n;
UPDATE tasks SET approvals = NULL WHERE approvals IS NOT NULL;
ALTER TABLE channel_threads ADD COLUMN started_by TEXT;
"#;

/// Each task's lines (SQLite's version 15).
const V10: &str = r#"
CREATE TABLE task_diffs (
    task_id TEXT COLLATE "C" PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    body    TEXT NOT NULL
);
"#;

impl Pg {
    pub(super) async fn migrate(&self) -> Result<(), StoreError> {
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
