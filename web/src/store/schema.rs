//! The schema, as embedded, versioned migrations (`PRAGMA user_version`).
//!
//! Append a migration; never edit a published one.

use rusqlite_migration::{M, Migrations};

const V1: &str = r#"
CREATE TABLE agents (
    name        TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    command     TEXT NOT NULL,          -- JSON array of strings
    created_at  TEXT NOT NULL
);

CREATE TABLE machines (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    last_seen   TEXT
);

CREATE TABLE projects (
    name        TEXT PRIMARY KEY,
    created_at  TEXT NOT NULL
);

-- A project's local-directory resource on one machine (local-binding builds only
-- ever write rows here).
CREATE TABLE project_dirs (
    project     TEXT NOT NULL REFERENCES projects(name) ON DELETE CASCADE,
    machine     TEXT NOT NULL,
    dir         TEXT NOT NULL,
    display     TEXT NOT NULL,
    mode        TEXT NOT NULL,
    PRIMARY KEY (project, machine)
);

CREATE TABLE sessions (
    id              TEXT PRIMARY KEY,   -- uuid v4: random, so short prefixes are unique
    title           TEXT NOT NULL,
    agent           TEXT NOT NULL REFERENCES agents(name),
    origin          TEXT NOT NULL,
    project         TEXT REFERENCES projects(name),
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    -- The explicit binding; all NULL when unbound.
    binding_dir     TEXT,
    binding_display TEXT,
    binding_machine TEXT,
    binding_mode    TEXT,
    binding_state   TEXT,
    -- Bumped on every link/unlink: a run that started under an older binding may not
    -- record a resume id.
    binding_rev     INTEGER NOT NULL DEFAULT 0,
    -- Recorded after each run, apart from the binding.
    work_dir        TEXT,
    resume_id       TEXT,
    CHECK ((binding_dir IS NULL) = (binding_machine IS NULL))
);
CREATE INDEX sessions_created ON sessions(created_at, id);

CREATE TABLE messages (
    id          TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    origin      TEXT NOT NULL,
    text        TEXT NOT NULL,
    created_at  TEXT NOT NULL
);
CREATE INDEX messages_session ON messages(session_id);

CREATE TABLE tasks (
    id          TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,       -- order within the session
    message_id  TEXT NOT NULL REFERENCES messages(id),
    status      TEXT NOT NULL,
    wait_reason TEXT,
    work_dir    TEXT,
    exit_code   INTEGER,
    error       TEXT,
    error_code  TEXT,
    created_at  TEXT NOT NULL,
    started_at  TEXT,
    finished_at TEXT,
    UNIQUE (session_id, seq)
);
CREATE INDEX tasks_status ON tasks(status);

-- The append-only transcript.
CREATE TABLE events (
    session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,       -- 1, 2, 3… per session; the SSE id
    task_id     TEXT,
    kind        TEXT NOT NULL,
    payload     TEXT NOT NULL,          -- JSON
    at          TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
"#;

/// Chat channels (Slack, Lark): webhook event ids already taken in (platforms retry
/// deliveries), and which conversation belongs to which channel session.
const V2: &str = r#"
CREATE TABLE channel_events (
    platform    TEXT NOT NULL,          -- slack | lark
    event_id    TEXT NOT NULL,
    received_at TEXT NOT NULL,
    PRIMARY KEY (platform, event_id)
) WITHOUT ROWID;

CREATE TABLE channel_threads (
    platform    TEXT NOT NULL,
    thread_key  TEXT NOT NULL,          -- slack: "channel:thread_ts"; lark: chat_id
    session_id  TEXT NOT NULL UNIQUE REFERENCES sessions(id) ON DELETE CASCADE,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (platform, thread_key)
);
"#;

/// A binding's directory identity (device, inode) at link time, so a directory put
/// in its place later is refused rather than used.
const V3: &str = r#"
ALTER TABLE sessions ADD COLUMN binding_dev INTEGER;
ALTER TABLE sessions ADD COLUMN binding_ino INTEGER;
"#;

/// Remote daemons' tokens, stored as SHA-256 of the token: the token itself is shown
/// once, at creation. A token is bound to the first machine that registers with it.
const V4: &str = r#"
CREATE TABLE daemon_tokens (
    name        TEXT PRIMARY KEY,
    hash        TEXT NOT NULL UNIQUE,   -- hex SHA-256 of the token
    machine     TEXT,                   -- bound at the first register
    created_at  TEXT NOT NULL,
    revoked_at  TEXT
);
"#;

/// Where a run worked, privacy-stripped by the machine it ran on: a daemon's
/// directories are under a home (and an account name) the server does not know.
const V5: &str = r#"
ALTER TABLE tasks ADD COLUMN work_dir_display TEXT;
ALTER TABLE sessions ADD COLUMN work_dir_display TEXT;
"#;

/// Agents' permission policies (`null`: the user settings' default, else `edit`), and
/// what each task's agent was denied (a JSON array of `{tool, target}`).
const V6: &str = r#"
ALTER TABLE agents ADD COLUMN permissions TEXT;
ALTER TABLE tasks ADD COLUMN denials TEXT;
"#;

/// A team on one server (`berth-server`): members and their hashed API tokens, who
/// owns each session and each daemon token, and the audit trail. On `berth serve`
/// every owner stays NULL (one user).
const V7: &str = r#"
CREATE TABLE members (
    name        TEXT PRIMARY KEY,
    admin       INTEGER NOT NULL DEFAULT 0,
    hash        TEXT UNIQUE,            -- hex SHA-256 of the API token; NULL once removed
    created_at  TEXT NOT NULL,
    removed_at  TEXT
);
ALTER TABLE sessions ADD COLUMN owner TEXT;
CREATE INDEX sessions_owner ON sessions(owner, created_at);
ALTER TABLE daemon_tokens ADD COLUMN member TEXT;
CREATE TABLE audit (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    at          TEXT NOT NULL,
    member      TEXT NOT NULL,          -- who: a member's name, or "local"
    action      TEXT NOT NULL,          -- send, cancel, link, unlink, member.add, ...
    target      TEXT,                   -- a session, task, member or token
    via         TEXT NOT NULL           -- api, web, machine NAME, control
);
CREATE INDEX audit_member ON audit(member, id);
"#;

/// What each task changed in its directory (a JSON `Changes` document).
const V8: &str = r#"
ALTER TABLE tasks ADD COLUMN changes TEXT;
"#;

/// A session's next waiting task without walking its whole history: the index holds
/// only the tasks still waiting (the scheduler's `next_task` matches its condition).
const V9: &str = r#"
CREATE INDEX tasks_waiting ON tasks(session_id, seq)
    WHERE status IN ('queued', 'waiting_daemon') AND started_at IS NULL;
"#;

/// How each task's agent was fenced (a JSON `FenceNote`).
const V10: &str = r#"
ALTER TABLE tasks ADD COLUMN fence TEXT;
"#;

/// Each task's token usage, as its agent reported it (JSON).
const V11: &str = r#"
ALTER TABLE tasks ADD COLUMN usage TEXT;
"#;

/// Archived sessions: kept whole, left out of the list unless asked for.
const V12: &str = r#"
ALTER TABLE sessions ADD COLUMN archived_at TEXT;
"#;

/// Approvals (issue 54): each task's requests and their decisions (a JSON array, the
/// task's audit), and the rules a session's "always" answers made.
const V13: &str = r#"
ALTER TABLE tasks ADD COLUMN approvals TEXT;
CREATE TABLE session_rules (
    session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    n           INTEGER NOT NULL,
    rule        TEXT NOT NULL,
    added_at    TEXT NOT NULL,
    approval_id TEXT,
    PRIMARY KEY (session_id, n)
);
"#;

/// A row per request (issue 54's speed): recording or deciding one no longer reads and
/// rewrites the task's whole list. The lists kept in `tasks.approvals` move here, in
/// the order asked; the column stays, empty. A session "needs you" while one of its
/// rows waits (`approvals_session`). A chat conversation keeps who started it: that
/// user answers its requests' buttons (issue 55).
const V14: &str = r#"
CREATE TABLE approvals (
    seq        INTEGER PRIMARY KEY,
    id         TEXT NOT NULL UNIQUE,
    task_id    TEXT NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    session_id TEXT NOT NULL,
    waiting    INTEGER NOT NULL,
    asked_at   TEXT NOT NULL,
    body       TEXT NOT NULL
);
CREATE INDEX approvals_task ON approvals(task_id, waiting);
CREATE INDEX approvals_asked ON approvals(waiting, asked_at);
CREATE INDEX approvals_session ON approvals(session_id, waiting);
INSERT INTO approvals (id, task_id, session_id, waiting, asked_at, body)
    SELECT json_extract(j.value, '$.id'), t.id, t.session_id,
           COALESCE(json_type(j.value, '$.decision'), 'null') = 'null',
           json_extract(j.value, '$.asked_at'), j.value
    FROM tasks t, json_each(t.approvals) j
    WHERE t.approvals IS NOT NULL
    ORDER BY t.created_at, t.id, j.key;
UPDATE tasks SET approvals = NULL WHERE approvals IS NOT NULL;
ALTER TABLE channel_threads ADD COLUMN started_by TEXT;
"#;

/// Each task's lines (issue 56): the bounded diff its machine sent with its end
/// (`berth_core::patch::TaskDiff` as JSON), apart from the task's row so that lists
/// never read it.
const V15: &str = r#"
CREATE TABLE task_diffs (
    task_id TEXT PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
    body    TEXT NOT NULL
);
"#;

/// Every migration, oldest first.
pub fn migrations() -> Migrations<'static> {
    Migrations::new(vec![
        M::up(V1),
        M::up(V2),
        M::up(V3),
        M::up(V4),
        M::up(V5),
        M::up(V6),
        M::up(V7),
        M::up(V8),
        M::up(V9),
        M::up(V10),
        M::up(V11),
        M::up(V12),
        M::up(V13),
        M::up(V14),
        M::up(V15),
    ])
}

#[cfg(test)]
mod tests {
    #[test]
    fn migrations_are_valid() {
        assert!(super::migrations().validate().is_ok());
    }
}
