//! Resolution's precedence, over every combination of its inputs.
//!
//! The table below is the specification in rows: each row says, for a class of inputs,
//! which outcome docs/architecture.md requires. The test enumerates every concrete combination of
//! origin, runtime, binding (none, or on the claimer or another machine, in each mode),
//! claimer, online set and project directories, finds the first row that describes it
//! and checks the whole resolution against it; every row must describe at least one.

use super::*;
use crate::binding::{BindMode, BindingState, BindingView};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Bound {
    No,
    /// Bound on the claiming machine.
    Here,
    /// Bound on another machine, online or not.
    Elsewhere {
        online: bool,
    },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    InPlaceBinding,
    WorktreeBinding,
    ProjectInPlace,
    ProjectWorktree,
    Scratch(&'static str),
    Wait,
    Refuse(ErrorCode),
}

/// `None` in a column means "any".
struct Row {
    local_origin: Option<bool>,
    runtime: Option<Runtime>,
    bound: Option<Bound>,
    bound_mode: Option<BindMode>,
    project_here: Option<Option<BindMode>>,
    want: Want,
}

const fn row(
    local_origin: Option<bool>,
    runtime: Option<Runtime>,
    bound: Option<Bound>,
    bound_mode: Option<BindMode>,
    project_here: Option<Option<BindMode>>,
    want: Want,
) -> Row {
    Row {
        local_origin,
        runtime,
        bound,
        bound_mode,
        project_here,
        want,
    }
}

use BindMode::{InPlace as IP, Worktree as WT};
use Runtime::{Cloud, Local};

#[rustfmt::skip]
const TABLE: &[Row] = &[
    // 1. Web/channel origin or cloud runtime: never a local path.
    row(Some(false), None, Some(Bound::No), None, None, Want::Scratch("origin_never_local")),
    row(Some(true), Some(Cloud), Some(Bound::No), None, None, Want::Scratch("cloud_runtime")),
    row(Some(false), Some(Local), None, None, None, Want::Refuse(ErrorCode::OriginCannotBind)),
    row(None, Some(Cloud), None, None, None, Want::Refuse(ErrorCode::OriginCannotBind)),
    // 2. The session binding, whatever the project says.
    row(Some(true), Some(Local), Some(Bound::Here), Some(IP), None, Want::InPlaceBinding),
    row(Some(true), Some(Local), Some(Bound::Here), Some(WT), None, Want::WorktreeBinding),
    row(Some(true), Some(Local), Some(Bound::Elsewhere { online: true }), None, None, Want::Refuse(ErrorCode::DaemonMismatch)),
    row(Some(true), Some(Local), Some(Bound::Elsewhere { online: false }), None, None, Want::Wait),
    // 3. A project directory on the claiming machine.
    row(Some(true), Some(Local), Some(Bound::No), None, Some(Some(IP)), Want::ProjectInPlace),
    row(Some(true), Some(Local), Some(Bound::No), None, Some(Some(WT)), Want::ProjectWorktree),
    // 4. Scratch.
    row(Some(true), Some(Local), Some(Bound::No), None, Some(None), Want::Scratch("no_directory")),
];

fn view(machine: &str, mode: BindMode) -> BindingView {
    BindingView {
        display: format!("~/code/{machine}"),
        daemon: MachineId::parse(machine).unwrap(),
        daemon_name: machine.to_uppercase(),
        mode,
        state: BindingState::Ok,
    }
}

fn reason_code(r: &Reason) -> String {
    let tagged = serde_json::to_value(r).unwrap()["reason"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        tagged,
        r.code(),
        "Reason::code agrees with the serialized tag"
    );
    tagged
}

#[test]
fn every_combination_follows_the_table() {
    let a = MachineId::parse("a").unwrap();
    let b = MachineId::parse("b").unwrap();
    let origins = [Origin::Desktop, Origin::Api, Origin::Web, Origin::Channel];
    let onlines: [Vec<MachineId>; 4] = [
        vec![],
        vec![a.clone()],
        vec![b.clone()],
        vec![a.clone(), b.clone()],
    ];
    let bindings: Vec<Option<BindingView>> = vec![
        None,
        Some(view("a", IP)),
        Some(view("a", WT)),
        Some(view("b", IP)),
        Some(view("b", WT)),
    ];
    let projects: Vec<Vec<ProjectDir<String>>> = vec![
        vec![],
        vec![ProjectDir {
            machine: a.clone(),
            dir: "~/proj-a".into(),
            mode: IP,
        }],
        vec![ProjectDir {
            machine: a.clone(),
            dir: "~/proj-a".into(),
            mode: WT,
        }],
        vec![ProjectDir {
            machine: b.clone(),
            dir: "~/proj-b".into(),
            mode: IP,
        }],
        vec![
            ProjectDir {
                machine: b.clone(),
                dir: "~/proj-b".into(),
                mode: WT,
            },
            ProjectDir {
                machine: a.clone(),
                dir: "~/proj-a".into(),
                mode: IP,
            },
        ],
    ];
    let mut used = vec![0usize; TABLE.len()];
    let mut combos = 0;
    for origin in origins {
        for runtime in [Local, Cloud] {
            for binding in &bindings {
                for claimer in [&a, &b] {
                    for online in &onlines {
                        for project_dirs in &projects {
                            combos += 1;
                            let req = Request {
                                origin,
                                runtime,
                                binding: binding.as_ref(),
                                project_dirs,
                                claimer: Some(claimer),
                                online,
                            };
                            let got = resolve(&req);
                            let bound = match binding {
                                None => Bound::No,
                                Some(bv) if &bv.daemon == claimer => Bound::Here,
                                Some(bv) => Bound::Elsewhere {
                                    online: online.contains(&bv.daemon),
                                },
                            };
                            let project_here = project_dirs.iter().find(|p| &p.machine == claimer);
                            let (i, r) = TABLE
                                .iter()
                                .enumerate()
                                .find(|(_, r)| {
                                    r.local_origin
                                        .is_none_or(|l| l == origin.may_reach_local_paths())
                                        && r.runtime.is_none_or(|rt| rt == runtime)
                                        && r.bound.is_none_or(|bd| bd == bound)
                                        && r.bound_mode.is_none_or(|m| {
                                            binding.as_ref().is_some_and(|bv| bv.mode == m)
                                        })
                                        && r.project_here
                                            .is_none_or(|p| p == project_here.map(|pd| pd.mode))
                                })
                                .unwrap_or_else(|| panic!("no row for {req:?}"));
                            used[i] += 1;
                            let want: Resolution<String> = match r.want {
                                Want::InPlaceBinding => Resolution::InPlace {
                                    dir: binding.as_ref().unwrap().display.clone(),
                                    machine: claimer.clone(),
                                    why: Reason::SessionBinding,
                                },
                                Want::WorktreeBinding => Resolution::Worktree {
                                    dir: binding.as_ref().unwrap().display.clone(),
                                    machine: claimer.clone(),
                                    why: Reason::SessionBinding,
                                },
                                Want::ProjectInPlace => Resolution::InPlace {
                                    dir: project_here.unwrap().dir.clone(),
                                    machine: claimer.clone(),
                                    why: Reason::ProjectDirectory,
                                },
                                Want::ProjectWorktree => Resolution::Worktree {
                                    dir: project_here.unwrap().dir.clone(),
                                    machine: claimer.clone(),
                                    why: Reason::ProjectDirectory,
                                },
                                Want::Scratch(code) => {
                                    assert!(
                                        matches!(got, Resolution::Scratch { .. }),
                                        "{req:?} -> {got:?}"
                                    );
                                    assert_eq!(reason_code(got.why()), code, "{req:?}");
                                    continue;
                                }
                                Want::Wait => {
                                    let m = binding.as_ref().unwrap().daemon.clone();
                                    Resolution::Wait {
                                        machine: m.clone(),
                                        code: ErrorCode::DaemonOffline,
                                        why: Reason::BoundMachineOffline { machine: m },
                                    }
                                }
                                Want::Refuse(code) => {
                                    assert_eq!(
                                        got,
                                        Resolution::Refuse {
                                            code,
                                            why: got.why().clone()
                                        },
                                        "{req:?}"
                                    );
                                    continue;
                                }
                            };
                            assert_eq!(got, want, "{req:?}");
                            let kind = serde_json::to_value(&got).unwrap()["kind"]
                                .as_str()
                                .unwrap()
                                .to_owned();
                            assert_eq!(kind, got.kind());
                            reason_code(got.why());
                        }
                    }
                }
            }
        }
    }
    assert_eq!(combos, 4 * 2 * 5 * 2 * 4 * 5);
    for (i, n) in used.iter().enumerate() {
        assert!(*n > 0, "table row {i} describes no combination");
    }
}

#[test]
fn never_a_local_path_from_web_channel_or_cloud() {
    let a = MachineId::parse("a").unwrap();
    let bv = view("a", IP);
    for (origin, runtime) in [
        (Origin::Web, Local),
        (Origin::Channel, Local),
        (Origin::Desktop, Cloud),
    ] {
        let got = resolve(&Request {
            origin,
            runtime,
            binding: Some(&bv),
            project_dirs: &[],
            claimer: Some(&a),
            online: &[],
        });
        assert_eq!(
            got.why().clone(),
            match origin {
                Origin::Desktop | Origin::Api => Reason::BoundInCloud,
                o @ (Origin::Web | Origin::Channel) => Reason::BoundOriginCannotBind { origin: o },
            }
        );
        assert!(matches!(
            got,
            Resolution::Refuse {
                code: ErrorCode::OriginCannotBind,
                ..
            }
        ));
    }
}

#[test]
fn serialized_form_is_tagged() {
    let a = MachineId::parse("a").unwrap();
    let bv = view("a", WT);
    let got = resolve(&Request {
        origin: Origin::Desktop,
        runtime: Local,
        binding: Some(&bv),
        project_dirs: &[],
        claimer: Some(&a),
        online: &[],
    });
    assert_eq!(
        serde_json::to_value(&got).unwrap(),
        serde_json::json!({"kind": "worktree", "dir": "~/code/a", "machine": "a", "why": {"reason": "session_binding"}})
    );
}
