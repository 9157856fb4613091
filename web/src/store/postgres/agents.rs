//! Agents, projects with their directories, and machines, on PostgreSQL.

use super::Pg;
use super::pool::Q;
use crate::clock;
use crate::executor::AgentSpec;
use crate::store::agents::{agent_from_row, kind_str, project_dir_from};
use crate::store::rows::Cols;
use crate::store::rules::{self, json_text};
use crate::store::{AgentEdit, ProjectDirRow, ProjectRow, StoreError};
use berth_core::binding::MachineId;
use tokio_postgres::GenericClient;

pub(super) async fn agent_names<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
) -> Result<Vec<String>, StoreError> {
    q.rows("SELECT name FROM agents ORDER BY created_at, name", &[])
        .await?
        .iter()
        .map(|r| r.text(0))
        .collect()
}

/// Refuses a project name no project has ([`StoreError::UnknownProject`]).
pub(super) async fn require_project<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    name: &str,
) -> Result<(), StoreError> {
    let found = q
        .opt("SELECT 1 FROM projects WHERE name = $1", &[&name])
        .await?;
    rules::project_known(name, found.is_some())
}

pub(super) async fn get_agent<C: GenericClient + Sync>(
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

pub(super) async fn project_dirs<C: GenericClient + Sync>(
    q: &mut Q<'_, C>,
    project: &str,
) -> Result<Vec<ProjectDirRow>, StoreError> {
    q.rows(
        "SELECT machine, dir, display, mode FROM project_dirs WHERE project = $1 ORDER BY machine",
        &[&project],
    )
    .await?
    .iter()
    .map(project_dir_from)
    .collect()
}

impl Pg {
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

    pub(crate) async fn remove_agent(&self, name: String) -> Result<AgentSpec, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let spec = get_agent(&mut w.q(), &name).await?;
        let users = w
            .q()
            .rows(
                "SELECT id FROM sessions WHERE agent = $1 ORDER BY created_at, id",
                &[&name],
            )
            .await?
            .iter()
            .map(|r| r.text(0))
            .collect::<Result<Vec<_>, _>>()?;
        rules::unused(&name, users)?;
        w.q()
            .exec("DELETE FROM agents WHERE name = $1", &[&name])
            .await?;
        self.publish(w).await?;
        Ok(spec)
    }

    pub(crate) async fn edit_agent(&self, edit: AgentEdit) -> Result<AgentSpec, StoreError> {
        let mut lease = self.lease().await?;
        let mut w = lease.begin().await?;
        let mut spec = get_agent(&mut w.q(), &edit.name).await?;
        edit.apply(&mut spec);
        w.q()
            .exec(
                "UPDATE agents SET command = $2, permissions = $3 WHERE name = $1",
                &[
                    &spec.name,
                    &json_text(&spec.command)?,
                    &spec.permissions.map(|p| p.as_str()),
                ],
            )
            .await?;
        self.publish(w).await?;
        Ok(spec)
    }

    pub(crate) async fn list_agents(&self) -> Result<Vec<AgentSpec>, StoreError> {
        self.all(
            "SELECT name, kind, command, permissions FROM agents ORDER BY created_at, name",
            &[],
            agent_from_row,
        )
        .await
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
        require_project(&mut w.q(), &project).await?;
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
}
