//! Agents, projects with their directories, and machines.

use super::rows::Cols;
use super::rules::{self, json_text};
use super::{Store, StoreError, parse_enum};
use crate::clock;
use crate::executor::{AgentKind, AgentSpec};
use berth_core::binding::{BindMode, MachineId};
use rusqlite::{Connection, params};

/// A project's directory on one machine, as stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProjectDirRow {
    pub machine: MachineId,
    /// The canonical path; emptied (and then omitted) on the web listener.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub dir: String,
    pub display: String,
    pub mode: BindMode,
}

/// A project and its directories.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProjectRow {
    pub name: String,
    pub dirs: Vec<ProjectDirRow>,
}

/// A change to a registered agent (see [`Store::edit_agent`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentEdit {
    pub name: String,
    /// The program and its arguments.
    pub command: Option<Vec<String>>,
    /// `Some(None)`: back to the user settings' default.
    pub permissions: Option<Option<berth_core::Permissions>>,
}

impl AgentEdit {
    /// Refuses a change of nothing, and an empty command.
    pub(crate) fn check(&self) -> Result<(), StoreError> {
        if self.command.is_none() && self.permissions.is_none() {
            return Err(StoreError::BadChange(
                "the change names neither `command` nor `permissions`".into(),
            ));
        }
        if self
            .command
            .as_ref()
            .is_some_and(|c| c.first().is_none_or(String::is_empty))
        {
            return Err(StoreError::BadChange(
                "the new command is empty: give the program and its arguments".into(),
            ));
        }
        Ok(())
    }

    /// The agent as changed.
    pub(crate) fn apply(&self, spec: &mut AgentSpec) {
        if let Some(command) = &self.command {
            spec.command.clone_from(command);
        }
        if let Some(permissions) = self.permissions {
            spec.permissions = permissions;
        }
    }
}

pub(crate) fn kind_str(kind: AgentKind) -> &'static str {
    match kind {
        AgentKind::Claude => "claude",
        AgentKind::Codex => "codex",
        AgentKind::Command => "command",
        AgentKind::Acp => "acp",
    }
}

pub(crate) fn agent_from_row(r: &impl Cols) -> Result<AgentSpec, StoreError> {
    let kind = r.text(1)?;
    let command = r.text(2)?;
    let permissions = r.opt_text(3)?;
    Ok(AgentSpec {
        name: r.text(0)?,
        kind: parse_enum(&kind)?,
        command: serde_json::from_str(&command)
            .map_err(|e| StoreError::Corrupt(format!("agent command {command:?}: {e}")))?,
        permissions: permissions
            .map(|p| {
                berth_core::Permissions::from_name(&p)
                    .ok_or_else(|| StoreError::Corrupt(format!("agent permissions {p:?}")))
            })
            .transpose()?,
    })
}

/// A project's directory, from the columns `machine, dir, display, mode`.
pub(crate) fn project_dir_from(r: &impl Cols) -> Result<ProjectDirRow, StoreError> {
    Ok(ProjectDirRow {
        machine: r.id(0)?,
        dir: r.text(1)?,
        display: r.text(2)?,
        mode: parse_enum(&r.text(3)?)?,
    })
}

pub(crate) fn agent_names(conn: &Connection) -> Result<Vec<String>, StoreError> {
    let mut stmt = conn.prepare_cached("SELECT name FROM agents ORDER BY created_at, name")?;
    let names = stmt
        .query_map([], |r| r.get(0))?
        .collect::<Result<Vec<String>, _>>()?;
    Ok(names)
}

/// Refuses a project name no project has ([`StoreError::UnknownProject`]).
pub(crate) fn require_project(conn: &Connection, name: &str) -> Result<(), StoreError> {
    let mut stmt = conn.prepare_cached("SELECT 1 FROM projects WHERE name = ?1")?;
    rules::project_known(name, stmt.exists([name])?)
}

pub(crate) fn get_agent(conn: &Connection, name: &str) -> Result<AgentSpec, StoreError> {
    let mut stmt =
        conn.prepare_cached("SELECT name, kind, command, permissions FROM agents WHERE name = ?1")?;
    let mut rows = stmt.query([name])?;
    match rows.next()? {
        Some(r) => agent_from_row(r),
        None => Err(StoreError::UnknownAgent {
            name: name.to_owned(),
            known: agent_names(conn)?,
        }),
    }
}

pub(crate) fn project_dirs(
    conn: &Connection,
    project: &str,
) -> Result<Vec<ProjectDirRow>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT machine, dir, display, mode FROM project_dirs WHERE project = ?1 ORDER BY machine",
    )?;
    let mut rows = stmt.query([project])?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(project_dir_from(r)?);
    }
    Ok(out)
}

impl Store {
    /// Registers an agent; names are unique.
    pub async fn add_agent(&self, spec: AgentSpec) -> Result<AgentSpec, StoreError> {
        on_pg!(self, pg => pg.add_agent(spec));
        self.write(move |tx, _| {
            let command = json_text(&spec.command)?;
            let inserted = tx.execute(
                "INSERT INTO agents (name, kind, command, created_at, permissions)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (name) DO NOTHING",
                params![
                    spec.name,
                    kind_str(spec.kind),
                    command,
                    clock::now(),
                    spec.permissions.map(|p| p.as_str())
                ],
            )?;
            if inserted == 0 {
                return Err(StoreError::AgentExists { name: spec.name });
            }
            Ok(spec)
        })
        .await
    }

    /// Removes an agent, unless sessions name it ([`StoreError::AgentInUse`], with
    /// their ids): each session keeps the agent it was made with.
    pub async fn remove_agent(&self, name: String) -> Result<AgentSpec, StoreError> {
        on_pg!(self, pg => pg.remove_agent(name));
        self.write(move |tx, _| {
            let spec = get_agent(tx, &name)?;
            let users = tx
                .prepare_cached("SELECT id FROM sessions WHERE agent = ?1 ORDER BY created_at, id")?
                .query_map([&name], |r| r.get(0))?
                .collect::<Result<Vec<String>, _>>()?;
            rules::unused(&name, users)?;
            tx.execute("DELETE FROM agents WHERE name = ?1", [&name])?;
            Ok(spec)
        })
        .await
    }

    /// Changes an agent's command or permissions (`None`: unchanged; permissions
    /// `Some(None)`: back to the default). Runs read the agent when they start, so it
    /// applies from the next message on.
    pub async fn edit_agent(&self, edit: AgentEdit) -> Result<AgentSpec, StoreError> {
        edit.check()?;
        on_pg!(self, pg => pg.edit_agent(edit));
        self.write(move |tx, _| {
            let mut spec = get_agent(tx, &edit.name)?;
            edit.apply(&mut spec);
            tx.execute(
                "UPDATE agents SET command = ?2, permissions = ?3 WHERE name = ?1",
                params![
                    spec.name,
                    json_text(&spec.command)?,
                    spec.permissions.map(|p| p.as_str())
                ],
            )?;
            Ok(spec)
        })
        .await
    }

    /// Every agent, oldest first.
    pub async fn list_agents(&self) -> Result<Vec<AgentSpec>, StoreError> {
        on_pg!(self, pg => pg.list_agents());
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT name, kind, command, permissions FROM agents ORDER BY created_at, name",
            )?;
            let mut rows = stmt.query([])?;
            let mut out = Vec::new();
            while let Some(r) = rows.next()? {
                out.push(agent_from_row(r)?);
            }
            Ok(out)
        })
        .await
    }

    /// Creates a project; names are unique.
    pub async fn add_project(&self, name: String) -> Result<ProjectRow, StoreError> {
        on_pg!(self, pg => pg.add_project(name));
        self.write(move |tx, _| {
            let inserted = tx.execute(
                "INSERT INTO projects (name, created_at) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
                params![name, clock::now()],
            )?;
            if inserted == 0 {
                return Err(StoreError::ProjectExists { name });
            }
            Ok(ProjectRow {
                name,
                dirs: Vec::new(),
            })
        })
        .await
    }

    /// Every project with its directories.
    pub async fn list_projects(&self) -> Result<Vec<ProjectRow>, StoreError> {
        on_pg!(self, pg => pg.list_projects());
        self.read(|conn| {
            let mut stmt = conn.prepare_cached("SELECT name FROM projects ORDER BY name")?;
            let names = stmt
                .query_map([], |r| r.get(0))?
                .collect::<Result<Vec<String>, _>>()?;
            names
                .into_iter()
                .map(|name| {
                    let dirs = project_dirs(conn, &name)?;
                    Ok(ProjectRow { name, dirs })
                })
                .collect()
        })
        .await
    }

    /// Sets a project's directory on one machine (replacing the previous one).
    pub async fn set_project_dir(
        &self,
        project: String,
        dir: ProjectDirRow,
    ) -> Result<ProjectRow, StoreError> {
        on_pg!(self, pg => pg.set_project_dir(project, dir));
        self.write(move |tx, _| {
            require_project(tx, &project)?;
            tx.execute(
                "INSERT INTO project_dirs (project, machine, dir, display, mode)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (project, machine) DO UPDATE
                 SET dir = excluded.dir, display = excluded.display, mode = excluded.mode",
                params![
                    project,
                    dir.machine.as_str(),
                    dir.dir,
                    dir.display,
                    dir.mode.as_str()
                ],
            )?;
            let dirs = project_dirs(tx, &project)?;
            Ok(ProjectRow {
                name: project,
                dirs,
            })
        })
        .await
    }

    /// Records a machine (the embedded executor, later a daemon) as seen now.
    pub async fn touch_machine(&self, id: MachineId, name: String) -> Result<(), StoreError> {
        on_pg!(self, pg => pg.touch_machine(id, name));
        self.write(move |tx, _| {
            tx.execute(
                "INSERT INTO machines (id, name, last_seen) VALUES (?1, ?2, ?3)
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name, last_seen = excluded.last_seen",
                params![id.as_str(), name, clock::now()],
            )?;
            Ok(())
        })
        .await
    }
}
