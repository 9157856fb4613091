//! From a session to a [`Placement`]: core's resolution, fed with what the store knows.

use crate::executor::Placement;
use crate::store::ProjectDirRow;
use crate::store::SessionRow;
use berth_core::ErrorCode;
use berth_core::binding::MachineId;
use berth_core::resolve::{Origin, Request, Resolution, Runtime, resolve};

/// What the scheduler does with a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Run(Placement),
    /// Waits, visibly (`waiting_daemon`), with the reason.
    Wait(String),
    Refuse {
        code: ErrorCode,
        message: String,
    },
}

/// What resolution needs beyond the session.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    pub origin: Origin,
    /// The machine asking to run it (`None`: no executor attached).
    pub claimer: Option<&'a MachineId>,
    pub online: &'a [MachineId],
    /// This server runs tasks on its own machine (`berth serve`): a local runtime, even
    /// for a session its own executor does not run (a daemon's, which waits for one of
    /// its owner's machines instead of being refused as if in the cloud).
    pub local: bool,
}

/// Turns a resolution into a decision; `place` gets the directory, whether it is a
/// worktree, and whether the session's own binding chose it.
fn finish<D>(res: Resolution<D>, place: impl FnOnce(D, bool, bool) -> Decision) -> Decision {
    use berth_core::resolve::Reason;
    match res {
        Resolution::InPlace { dir, why, .. } => place(dir, false, why == Reason::SessionBinding),
        Resolution::Worktree { dir, why, .. } => place(dir, true, why == Reason::SessionBinding),
        Resolution::Scratch { .. } => Decision::Run(Placement::Scratch),
        Resolution::Wait { why, .. } => Decision::Wait(why.to_string()),
        Resolution::Refuse { code, why } => Decision::Refuse {
            code,
            message: why.to_string(),
        },
    }
}

/// Decides where a task runs, with core's precedence. Runtime is `Local` when an
/// executor is attached, `Cloud` otherwise.
#[cfg(feature = "local-binding")]
pub fn decide(session: &SessionRow, dirs: &[ProjectDirRow], claim: Claim<'_>) -> Decision {
    use berth_core::binding::Binding;
    use berth_core::resolve::ProjectDir;
    use berth_core::{LocalPath, Platform};

    let platform = Platform::native();
    let binding = match &session.binding {
        None => None,
        Some(b) => match LocalPath::parse(platform, &b.dir) {
            Ok(dir) => Some(Binding {
                dir,
                daemon: b.machine.clone(),
                mode: b.mode,
            }),
            Err(r) => {
                return Decision::Refuse {
                    code: r.code,
                    message: r.message,
                };
            }
        },
    };
    let project_dirs: Vec<ProjectDir<LocalPath>> = dirs
        .iter()
        .filter_map(|d| {
            let dir = LocalPath::parse(platform, &d.dir).ok()?;
            Some(ProjectDir {
                machine: d.machine.clone(),
                dir,
                mode: d.mode,
            })
        })
        .collect();
    let req = Request {
        origin: claim.origin,
        runtime: if claim.claimer.is_some() || claim.local {
            Runtime::Local
        } else {
            Runtime::Cloud
        },
        binding: binding.as_ref(),
        project_dirs: &project_dirs,
        claimer: claim.claimer,
        online: claim.online,
    };
    // The session's own binding carries the directory's identity from link time.
    let linked = session.binding.as_ref().and_then(|b| b.identity);
    finish(resolve(&req), |dir, worktree, by_binding| {
        let identity = if by_binding { linked } else { None };
        Decision::Run(if worktree {
            Placement::Worktree { dir, identity }
        } else {
            Placement::InPlace { dir, identity }
        })
    })
}

/// Decides where a task runs in the cloud build: never in a local directory.
#[cfg(not(feature = "local-binding"))]
pub fn decide(session: &SessionRow, _dirs: &[ProjectDirRow], claim: Claim<'_>) -> Decision {
    use berth_core::binding::BindingView;
    let _ = session;
    let req = Request::<BindingView> {
        origin: claim.origin,
        runtime: Runtime::Cloud,
        binding: None,
        project_dirs: &[],
        claimer: claim.claimer,
        online: claim.online,
    };
    finish(resolve(&req), |dir, _, _| Decision::Refuse {
        code: ErrorCode::OriginCannotBind,
        message: format!("the cloud server cannot run in the local directory {dir}"),
    })
}

#[cfg(test)]
#[cfg(feature = "local-binding")]
mod tests {
    use super::*;
    use crate::store::StoredBinding;
    use berth_core::binding::{BindMode, BindingState};
    use berth_core::{LocalPath, Platform};

    fn session(bound_on: Option<&str>) -> SessionRow {
        SessionRow {
            id: berth_core::SessionId::parse("s").unwrap(),
            title: "t".into(),
            agent: "a".into(),
            origin: Origin::Desktop,
            project: None,
            created_at: String::new(),
            updated_at: String::new(),
            binding: bound_on.map(|m| StoredBinding {
                dir: "/srv/app".into(),
                display: "/srv/app".into(),
                identity: Some(crate::executor::DirIdentity { dev: 1, ino: 2 }),
                machine: MachineId::parse(m).unwrap(),
                machine_name: m.into(),
                mode: BindMode::Worktree,
                state: BindingState::Ok,
            }),
            binding_rev: 0,
            work_dir: None,
            work_dir_display: None,
            resume_id: None,
            owner: None,
            archived_at: None,
            needs: None,
        }
    }

    #[test]
    fn decisions_follow_core_precedence() {
        let here = MachineId::parse("here").unwrap();
        let online = [here.clone()];
        let dir = LocalPath::parse(Platform::native(), "/srv/app").unwrap();
        let project = [ProjectDirRow {
            machine: here.clone(),
            dir: "/srv/app".into(),
            display: "/srv/app".into(),
            mode: BindMode::InPlace,
        }];
        let claim = |origin| Claim {
            origin,
            claimer: Some(&here),
            online: &online,
            local: true,
        };
        let cases: Vec<(SessionRow, &[ProjectDirRow], Claim<'_>, Decision)> = vec![
            (
                session(None),
                &[],
                claim(Origin::Desktop),
                Decision::Run(Placement::Scratch),
            ),
            (
                session(None),
                &project,
                claim(Origin::Desktop),
                Decision::Run(Placement::InPlace {
                    dir: dir.clone(),
                    identity: None,
                }),
            ),
            (
                session(None),
                &project,
                claim(Origin::Web),
                Decision::Run(Placement::Scratch),
            ),
            (
                session(Some("here")),
                &[],
                claim(Origin::Api),
                Decision::Run(Placement::Worktree {
                    dir,
                    identity: Some(crate::executor::DirIdentity { dev: 1, ino: 2 }),
                }),
            ),
        ];
        for (s, dirs, c, want) in cases {
            assert_eq!(decide(&s, dirs, c), want, "{:?} {:?}", s.binding, c.origin);
        }
        let refused = decide(&session(Some("here")), &[], claim(Origin::Channel));
        assert!(
            matches!(
                refused,
                Decision::Refuse {
                    code: ErrorCode::OriginCannotBind,
                    ..
                }
            ),
            "{refused:?}"
        );
        let waits = decide(&session(Some("laptop")), &[], claim(Origin::Desktop));
        assert!(
            matches!(waits, Decision::Wait(ref why) if why.contains("laptop")),
            "{waits:?}"
        );
        let no_executor = Claim {
            origin: Origin::Desktop,
            claimer: None,
            online: &[],
            local: false,
        };
        assert!(matches!(
            decide(&session(Some("here")), &[], no_executor),
            Decision::Refuse {
                code: ErrorCode::OriginCannotBind,
                ..
            }
        ));
    }
}
