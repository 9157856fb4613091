//! Which machines are online: a daemon registering (and its token bound to its
//! machine), its heartbeats, its leaving, the monitor that takes silent machines
//! offline, their bindings' state in the store, and which machine runs unbound work.

use super::runs::{back_in_line, outcome};
use super::tokens::{AuthError, Caller};
use super::{Daemons, Machine, State, lock};
use crate::daemon::DAEMON_RETRY_CAP;
use crate::daemon::wire::{HeartbeatReply, Registered};
use crate::store::{StoreError, TokenChange};
use berth_core::TaskId;
use berth_core::api::TaskStatus;
use berth_core::binding::MachineId;
use std::time::{Duration, Instant};

impl Daemons {
    /// Every machine registered with this process: whose it is and its user's home as
    /// its daemon said it. What the display rule needs to show each machine's paths by
    /// its own home (see `api::redact`).
    pub fn homes(&self) -> Vec<MachineHome> {
        lock(&self.inner.state)
            .machines
            .iter()
            .map(|(id, m)| MachineHome {
                machine: id.clone(),
                member: m.member.clone(),
                home: m.home.clone(),
            })
            .collect()
    }

    /// The machines online now.
    pub fn online(&self) -> Vec<MachineId> {
        lock(&self.inner.state)
            .machines
            .iter()
            .filter(|(_, m)| m.online)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The online machine of `owner` (whose token is `owner`'s) with the least work,
    /// for a task any of their machines may run (scratch), taking turns among equals.
    pub fn pick(&self, owner: &str) -> Option<MachineId> {
        let mut state = lock(&self.inner.state);
        let mut online: Vec<(&MachineId, usize)> = state
            .machines
            .iter()
            .filter(|(_, m)| m.online && crate::store::owner_name(m.member.as_deref()) == owner)
            .map(|(id, m)| (id, m.load()))
            .collect();
        online.sort();
        let least = online.first()?.1;
        let equals: Vec<MachineId> = online
            .iter()
            .filter(|(_, l)| *l == least)
            .map(|(id, _)| (*id).clone())
            .collect();
        let pick = equals[state.turn % equals.len()].clone();
        state.turn = state.turn.wrapping_add(1);
        Some(pick)
    }

    /// The member a machine's token belongs to: `None` for a machine not registered
    /// in this process, `Some(None)` for one without a member (`berth serve`).
    pub fn machine_member(&self, machine: &MachineId) -> Option<Option<String>> {
        lock(&self.inner.state)
            .machines
            .get(machine)
            .map(|m| m.member.clone())
    }

    /// A daemon (re)starting: binds its token to its machine the first time, brings
    /// the machine online, and ends `interrupted` whatever an earlier process of the
    /// same machine was running.
    pub async fn register(
        &self,
        token: Option<&str>,
        machine: Option<&str>,
        name: String,
        instance: String,
        home: Option<berth_core::LocalPath>,
    ) -> Result<Result<Registered, AuthError>, StoreError> {
        let (row, machine) = match self.authenticate(token, machine) {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        if row.machine.is_none() {
            match self
                .inner
                .store
                .bind_token(row.name.clone(), machine.clone())
                .await?
            {
                TokenChange::Done(bound) => {
                    lock(&self.inner.state)
                        .tokens
                        .insert(bound.hash.clone(), bound);
                }
                TokenChange::OtherMachine(_) => {
                    return Ok(Err(AuthError::OtherMachine { name: row.name }));
                }
                TokenChange::Unknown | TokenChange::Exists => {
                    return Ok(Err(AuthError::Revoked { name: row.name }));
                }
            }
        }
        self.inner
            .store
            .touch_machine(machine.clone(), name.clone())
            .await?;
        let came_online = {
            let mut state = lock(&self.inner.state);
            let now = Instant::now();
            let m = state.machines.entry(machine.clone()).or_insert_with(|| {
                Machine::new(name.clone(), row.member.clone(), instance.clone(), now)
            });
            m.name.clone_from(&name);
            m.member.clone_from(&row.member);
            m.home = home;
            m.last_seen = now;
            if m.instance != instance {
                m.instance.clone_from(&instance);
                let stale: Vec<TaskId> = m
                    .runs
                    .iter()
                    .filter(|(_, r)| r.instance != instance)
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in stale {
                    if let Some(run) = m.runs.remove(&id) {
                        let _ = run.link.done.send(outcome(
                            TaskStatus::Interrupted,
                            format!("the daemon on machine {name} restarted while the task ran"),
                        ));
                    }
                }
            }
            let came = !m.online;
            m.online = true;
            came
        };
        if came_online {
            self.sync_bindings(&machine).await?;
            self.inner.online.send_modify(|n| *n = n.wrapping_add(1));
        }
        let c = self.inner.config;
        Ok(Ok(Registered {
            machine_id: machine.clone(),
            name,
            heartbeat_ms: millis(c.window / 3),
            window_ms: millis(c.window),
            claim_wait_ms: millis(c.claim_wait),
            local_binding: berth_core::LOCAL_BINDING,
            claim_numbers: true,
        }))
    }

    /// A heartbeat: the machine is alive. Claimed tasks the daemon does not list for
    /// longer than the window never reached it (a lost claim answer): back in line if
    /// nothing was heard of them, `interrupted` otherwise. A daemon that numbers its
    /// claims says which it had handled when it wrote the list (`claimed_through`): a
    /// task from a later claim is not judged by it (the list may be older than the
    /// answer that carried the task). Answers the tasks to stop
    /// (those cancelled, and those it lists that the server no longer expects) and the
    /// decisions its runs' requests wait for.
    pub fn heartbeat(
        &self,
        caller: &Caller,
        instance: &str,
        running: &[TaskId],
        claimed_through: Option<u64>,
    ) -> Result<HeartbeatReply, AuthError> {
        let window = self.inner.config.window;
        let mut state = lock(&self.inner.state);
        let m = current(&mut state, caller, instance)?;
        let lost: Vec<TaskId> = m
            .runs
            .iter_mut()
            .filter_map(|(id, r)| {
                if running.contains(id) {
                    r.misses = 0;
                    return None;
                }
                if r.claimed_at.elapsed() <= window {
                    return None;
                }
                r.misses = r.misses.saturating_add(1);
                let judged = match (claimed_through, r.claim_seq) {
                    // The list was written after the claim's answer was handled.
                    (Some(through), Some(seq)) => seq <= through,
                    // A run the last leader handed over: its claim's number is not
                    // known here. A daemon's heartbeats go one at a time, so the
                    // second that misses it was written after the first was answered,
                    // after the run was here.
                    (Some(_), None) => r.misses >= 2,
                    // A daemon that does not number its claims.
                    (None, _) => true,
                };
                judged.then(|| id.clone())
            })
            .collect();
        for id in lost {
            if let Some(run) = m.runs.remove(&id) {
                let out = if run.received() == 0 {
                    back_in_line(&m.name)
                } else {
                    outcome(
                        TaskStatus::Interrupted,
                        format!("machine {} lost the task while it ran", m.name),
                    )
                };
                let _ = run.link.done.send(out);
            }
        }
        // Stop what was cancelled, and what the server no longer expects (it ended
        // while the daemon was out of reach, or the server restarted).
        let mut cancel: Vec<TaskId> = m
            .runs
            .iter()
            .filter(|(_, r)| *r.link.cancel.borrow())
            .map(|(id, _)| id.clone())
            .collect();
        cancel.extend(
            running
                .iter()
                .filter(|id| !m.runs.contains_key(*id) && !m.finished.iter().any(|(f, _)| f == *id))
                .cloned(),
        );
        // Decisions for its runs' requests, each handed over once.
        let answers = m
            .runs
            .values_mut()
            .flat_map(|r| std::mem::take(&mut r.answers))
            .collect();
        Ok(HeartbeatReply { cancel, answers })
    }

    /// A daemon stopping cleanly: its machine is offline at once. Whatever it still
    /// held (it reports its tasks before leaving) ends as for a missed window.
    pub async fn leave(&self, caller: &Caller, instance: &str) -> Result<(), StoreError> {
        let left = {
            let mut state = lock(&self.inner.state);
            let window = self.inner.config.window;
            match state.machines.get_mut(&caller.machine) {
                Some(m) if m.instance == instance && m.online => {
                    m.take_offline(window);
                    true
                }
                Some(_) | None => false,
            }
        };
        if left {
            tracing::info!(machine = %caller.machine, "a daemon left");
            self.sync_bindings(&caller.machine).await?;
        }
        Ok(())
    }

    /// Takes machines silent for longer than the window offline.
    pub(super) async fn expire(&self) {
        let window = self.inner.config.window;
        let grace = window + DAEMON_RETRY_CAP + DAEMON_RETRY_CAP / 5;
        let gone: Vec<MachineId> = {
            let mut state = lock(&self.inner.state);
            let mut gone = Vec::new();
            for (id, m) in state.machines.iter_mut() {
                if m.online && m.last_seen.elapsed() > window {
                    m.take_offline(window);
                    gone.push(id.clone());
                } else if !m.online && !m.runs.is_empty() && m.last_seen.elapsed() > grace {
                    // Runs carried over from the last leader whose daemon did not
                    // come back.
                    m.interrupt_runs(&format!(
                        "machine {} did not come back within {} s after the server that handed it the task stopped",
                        m.name,
                        grace.as_secs_f64()
                    ));
                }
            }
            gone
        };
        for id in gone {
            tracing::warn!(machine = %id, "a daemon missed its heartbeat window; it is offline");
            if let Err(e) = self.sync_bindings(&id).await {
                tracing::error!(error = %e, "could not record a machine going offline");
            }
        }
    }

    /// Writes the machine's current online state onto the bindings made there.
    async fn sync_bindings(&self, machine: &MachineId) -> Result<(), StoreError> {
        let _serial = self.inner.sync.lock().await;
        let (online, name) = {
            let state = lock(&self.inner.state);
            match state.machines.get(machine) {
                Some(m) => (m.online, m.name.clone()),
                None => return Ok(()),
            }
        };
        self.inner
            .store
            .set_machine_online(machine.clone(), online)
            .await?;
        if !online {
            self.inner
                .store
                .touch_machine(machine.clone(), name)
                .await?;
        }
        Ok(())
    }
}

/// A machine as the display rule knows it ([`Daemons::homes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineHome {
    pub machine: MachineId,
    /// The member of its token (`None` on `berth serve`: see `store::owner_name`).
    pub member: Option<String>,
    /// Its user's home, if its daemon said it (see `wire::Register::home`).
    pub home: Option<berth_core::LocalPath>,
}

/// The caller's machine as its current process (`instance`) may use it, marked seen:
/// registered, online and not since registered again by another process.
pub(super) fn current<'a>(
    state: &'a mut State,
    caller: &Caller,
    instance: &str,
) -> Result<&'a mut Machine, AuthError> {
    match state.machines.get_mut(&caller.machine) {
        Some(m) if m.instance == instance && m.online => {
            m.last_seen = Instant::now();
            Ok(m)
        }
        _ => Err(AuthError::NotRegistered {
            machine: caller.machine.to_string(),
        }),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
