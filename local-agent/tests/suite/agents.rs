//! The adapters against fake `claude`/`codex`/command agents: argv, stdin,
//! environment, events, resume ids and stale resume ids.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use crate::common;

use berth_core::api::TaskStatus;
use berth_core::event::AgentEvent;
use berth_web::executor::{AgentKind, ExecEvent, TaskOutcome};
use common::fakes::{self, STALE, calls};
use common::{Sandbox, agent, in_place, run, task};
use serde_json::json;

/// The agent's own events: without the CLI's stderr and Berth's word on the fence
/// (each run has exactly one, before the agent's first).
fn agent_events(events: &[ExecEvent]) -> Vec<AgentEvent> {
    let fences = events
        .iter()
        .filter(|e| matches!(e, ExecEvent::Agent(AgentEvent::Fence { .. })))
        .count();
    assert!(fences >= 1, "every run says how it is fenced: {events:?}");
    events
        .iter()
        .filter_map(|e| match e {
            ExecEvent::Agent(AgentEvent::Stderr { .. } | AgentEvent::Fence { .. }) => None,
            ExecEvent::Agent(a) => Some(a.clone()),
            ExecEvent::Status { .. } | ExecEvent::Approval(_) => None,
        })
        .collect()
}

#[tokio::test]
async fn a_command_agent_gets_the_prompt_on_stdin_and_berth_variables() {
    let sb = Sandbox::new();
    let dir = sb.dir("work/app");
    let script = sb.script(
        "cmd.sh",
        "#!/bin/sh\nread -r line\necho \"got: $line\"\necho \"cwd: $(pwd)\"\necho \"ids: $BERTH_SESSION_ID $BERTH_TASK_ID $BERTH_WORK_DIR\"\ncase \"$BERTH_BRIEF\" in *'Berth session'*) echo brief-ok;; esac\necho \"secret: ${SECRET_TOKEN:-none}\"\n",
    );
    let exec = sb.executor();
    let (out, events) = run(
        &exec,
        task(
            "t1",
            "s1",
            agent(AgentKind::Command, &[&script]),
            "hello there\n",
            in_place(&dir),
        ),
    )
    .await;
    let d = dir.display();
    let fence = out
        .fence
        .clone()
        .expect("the outcome says how the agent was fenced");
    assert!(fence.fenced, "{fence:?}");
    assert!(fence.text.starts_with(&format!("{d} + tmp")), "{fence:?}");
    assert_eq!(
        out,
        TaskOutcome {
            status: TaskStatus::Succeeded,
            exit_code: Some(0),
            error: None,
            code: None,
            work_dir: Some(d.to_string()),
            work_dir_display: None,
            resume_id: None,
            branch: None,
            denials: Vec::new(),
            // It ran in place and wrote nothing there; fenced (this kernel has the
            // fence), the record is the whole of its writes.
            changes: Some(berth_core::api::Changes {
                fenced: true,
                ..Default::default()
            }),
            fence: out.fence.clone(),
            usage: None,
            diff: None,
        }
    );
    let text = |t: String| AgentEvent::Text { text: t };
    assert_eq!(
        agent_events(&events),
        vec![
            text("got: hello there".into()),
            text(format!("cwd: {d}")),
            text(format!("ids: s1 t1 {d}")),
            text("brief-ok".into()),
            text("secret: none".into()),
        ]
    );
    assert_eq!(
        events.first(),
        Some(&ExecEvent::Status {
            status: TaskStatus::Running,
            wait_reason: None
        })
    );
}

#[tokio::test]
async fn a_failing_command_agent_fails_with_its_exit_code() {
    let sb = Sandbox::new();
    let dir = sb.dir("work/app");
    let script = sb.script("fail.sh", "#!/bin/sh\necho oops >&2\nexit 3\n");
    let (out, events) = run(
        &sb.executor(),
        task(
            "t1",
            "s1",
            agent(AgentKind::Command, &[&script]),
            "x",
            in_place(&dir),
        ),
    )
    .await;
    assert_eq!(out.status, TaskStatus::Failed);
    assert_eq!(out.exit_code, Some(3));
    assert_eq!(out.error.as_deref(), Some("the agent exited with code 3"));
    assert!(events.contains(&ExecEvent::Agent(AgentEvent::Stderr {
        line: "oops".into()
    })));
}

#[tokio::test]
async fn claude_is_driven_in_stream_json_with_resume_and_stale_resume_retry() {
    let sb = Sandbox::new();
    let dir = sb.dir("work/app");
    let (bin, log) = fakes::claude(&sb);
    let exec = sb.executor();
    let spec = agent(AgentKind::Claude, &[&bin]);
    let (out, events) = run(
        &exec,
        task("t1", "s1", spec.clone(), "fix it", in_place(&dir)),
    )
    .await;
    assert_eq!(out.status, TaskStatus::Succeeded, "{out:?}");
    assert_eq!(out.resume_id.as_deref(), Some("claude-sess-1"));
    assert_eq!(
        agent_events(&events),
        vec![
            AgentEvent::Started {
                resume_id: Some("claude-sess-1".into()),
                model: Some("fake-model".into())
            },
            AgentEvent::Thinking { text: "hmm".into() },
            AgentEvent::Text {
                text: "on it".into()
            },
            AgentEvent::ToolUse {
                id: Some("tu_1".into()),
                name: "Read".into(),
                input: json!({"file_path": "a.txt"})
            },
            AgentEvent::ToolResult {
                id: Some("tu_1".into()),
                output: "file text".into(),
                is_error: false
            },
            AgentEvent::Result {
                ok: true,
                text: Some("Done.".into()),
                usage: Some(json!({"input_tokens": 3})),
                cost_usd: Some(0.012)
            },
        ]
    );
    let first = &calls(&log)[0];
    let argv: Vec<String> = serde_json::from_value(first["argv"].clone()).unwrap();
    // The default policy, `edit`, lets Claude Code accept edits in the directory, and
    // fenced (this kernel has the fence), run shell commands there.
    assert_eq!(
        &argv[..8],
        [
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-partial-messages",
            "--permission-mode=acceptEdits",
            "--allowedTools=Bash",
            "--append-system-prompt"
        ]
    );
    assert!(argv[8].starts_with("# Berth session"), "{argv:?}");
    assert_eq!(argv.len(), 9, "the prompt is not an argument: {argv:?}");
    assert_eq!(first["stdin"], "fix it");
    assert_eq!(first["cwd"], dir.display().to_string());
    assert_eq!(
        first["claude_md"],
        serde_json::Value::Null,
        "nothing written in the directory"
    );

    // Next turn: the resume id is passed on.
    let mut t2 = task("t2", "s1", spec.clone(), "more", in_place(&dir));
    t2.resume_id = out.resume_id.clone();
    let (out2, _) = run(&exec, t2).await;
    assert_eq!(out2.status, TaskStatus::Succeeded);
    let argv: Vec<String> = serde_json::from_value(calls(&log)[1]["argv"].clone()).unwrap();
    assert_eq!(&argv[9..], ["--resume", "claude-sess-1"]);

    // A stale id: detected, cleared, and the turn retried fresh once.
    let mut t3 = task("t3", "s1", spec, "again", in_place(&dir));
    t3.resume_id = Some(STALE.into());
    let (out3, events3) = run(&exec, t3).await;
    assert_eq!(out3.status, TaskStatus::Succeeded, "{out3:?}");
    assert_eq!(out3.resume_id.as_deref(), Some("claude-sess-1"));
    let all = calls(&log);
    assert_eq!(all.len(), 4);
    let retry: Vec<String> = serde_json::from_value(all[3]["argv"].clone()).unwrap();
    assert!(!retry.contains(&"--resume".to_owned()), "{retry:?}");
    let results = agent_events(&events3)
        .into_iter()
        .filter(|e| matches!(e, AgentEvent::Result { .. }))
        .count();
    assert_eq!(
        results, 1,
        "the stale attempt's error result is not reported as the turn's"
    );
}

#[tokio::test]
async fn codex_is_driven_with_exec_json_closed_stdin_and_flags_before_resume() {
    let sb = Sandbox::new();
    let dir = sb.dir("work/app");
    let (bin, log) = fakes::codex(&sb);
    let exec = sb.executor();
    let spec = agent(AgentKind::Codex, &[&bin]);
    let (out, events) = run(
        &exec,
        task("t1", "s1", spec.clone(), "fix it", in_place(&dir)),
    )
    .await;
    assert_eq!(out.status, TaskStatus::Succeeded, "{out:?}");
    assert_eq!(out.resume_id.as_deref(), Some("codex-thread-1"));
    assert_eq!(
        agent_events(&events),
        vec![
            AgentEvent::Started {
                resume_id: Some("codex-thread-1".into()),
                model: None
            },
            AgentEvent::ToolUse {
                id: Some("item_1".into()),
                name: "command".into(),
                input: json!({"command": "bash -lc ls"})
            },
            AgentEvent::ToolResult {
                id: Some("item_1".into()),
                output: "a.txt\n".into(),
                is_error: false
            },
            AgentEvent::Text {
                text: "Done.".into()
            },
            AgentEvent::Result {
                ok: true,
                text: None,
                usage: Some(
                    json!({"input_tokens": 24763, "cached_input_tokens": 24448, "output_tokens": 122})
                ),
                cost_usd: None
            },
        ]
    );
    let first = &calls(&log)[0];
    let argv: Vec<String> = serde_json::from_value(first["argv"].clone()).unwrap();
    let d = dir.display().to_string();
    assert_eq!(
        &argv[..9],
        [
            "exec",
            "--json",
            "-C",
            d.as_str(),
            // Fenced (this kernel has the fence): codex's own sandbox cannot start
            // inside it, and Berth's fence enforces the policy instead.
            "--sandbox",
            "danger-full-access",
            "-c",
            "approval_policy=\"never\"",
            "--skip-git-repo-check"
        ]
    );
    let prompt = &argv[9];
    assert!(
        prompt.starts_with("<berth-brief>\n# Berth session"),
        "{prompt}"
    );
    assert!(prompt.ends_with("</berth-brief>\n\nfix it"), "{prompt}");
    assert_eq!(first["stdin"], "", "stdin is /dev/null: at EOF at once");
    assert_eq!(first["cwd"], d);

    let mut t2 = task("t2", "s1", spec.clone(), "more", in_place(&dir));
    t2.resume_id = Some(STALE.into());
    let (out2, _) = run(&exec, t2).await;
    assert_eq!(out2.status, TaskStatus::Succeeded, "{out2:?}");
    assert_eq!(out2.resume_id.as_deref(), Some("codex-thread-1"));
    let all = calls(&log);
    let stale: Vec<String> = serde_json::from_value(all[1]["argv"].clone()).unwrap();
    assert_eq!(
        &stale[9..11],
        ["resume", STALE],
        "-C and --sandbox come before resume"
    );
    let retry: Vec<String> = serde_json::from_value(all[2]["argv"].clone()).unwrap();
    assert!(!retry.contains(&"resume".to_owned()));

    let mut t3 = task("t3", "s1", spec, "-starts with a dash", in_place(&dir));
    t3.resume_id = Some("codex-thread-1".into());
    let (out3, _) = run(&exec, t3).await;
    assert_eq!(out3.status, TaskStatus::Succeeded);
    let last = &calls(&log)[3];
    let argv: Vec<String> = serde_json::from_value(last["argv"].clone()).unwrap();
    assert_eq!(&argv[9..11], ["resume", "codex-thread-1"]);
    // The brief leads the prompt, so even a prompt starting with `-` is no flag.
    assert!(argv[11].starts_with("<berth-brief>") && argv[11].ends_with("\n\n-starts with a dash"));
    assert_eq!(last["stdin"], "");
}

/// The stderr diagnostics of a run (Berth's own warnings among them).
fn diagnostics(events: &[ExecEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| {
            if let ExecEvent::Agent(AgentEvent::Stderr { line }) = e {
                Some(line.clone())
            } else {
                None
            }
        })
        .collect()
}

/// The policy of a run: the agent's own, else the user settings' default; an untrusted
/// project layer narrows it and can never widen it, and both are said in the transcript.
#[tokio::test]
async fn the_user_layer_sets_the_default_policy_and_an_untrusted_project_layer_only_narrows() {
    use berth_core::Permissions::{Edit, Full};
    let sb = Sandbox::new();
    let dir = sb.dir("work/app");
    let (bin, log) = fakes::claude(&sb);
    let exec = sb.executor();
    let config = exec.config().config_dir.clone();
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("settings.jsonc"),
        format!(r#"{{ "permissions": "read-only", {} }}"#, sb.fence()),
    )
    .unwrap();
    let project = dir.join(".berth");
    std::fs::create_dir_all(&project).unwrap();
    let argv = |n: usize| -> Vec<String> {
        serde_json::from_value(calls(&log)[n]["argv"].clone()).unwrap()
    };
    let with = |p| {
        let mut spec = agent(AgentKind::Claude, &[&bin]);
        spec.permissions = p;
        spec
    };

    // No policy of its own: the user default, read-only.
    let (out, _) = run(&exec, task("t1", "s1", with(None), "x", in_place(&dir))).await;
    assert_eq!(out.status, TaskStatus::Succeeded, "{out:?}");
    assert_eq!(
        &argv(0)[5..7],
        [
            "--permission-mode=default",
            "--disallowedTools=Write,Edit,MultiEdit,NotebookEdit"
        ]
    );

    // `full`, narrowed to `edit` by the project, visibly.
    std::fs::write(
        project.join("settings.jsonc"),
        r#"{ "permissions": "edit" }"#,
    )
    .unwrap();
    let (_, events) = run(
        &exec,
        task("t2", "s2", with(Some(Full)), "x", in_place(&dir)),
    )
    .await;
    assert_eq!(argv(1)[5], "--permission-mode=acceptEdits");
    // Fenced `edit`: the shell, and none of `full`'s other tools.
    assert_eq!(
        argv(1)
            .iter()
            .filter(|a| a.starts_with("--allowedTools"))
            .collect::<Vec<_>>(),
        ["--allowedTools=Bash"],
        "{:?}",
        argv(1)
    );
    assert!(
        diagnostics(&events).contains(
            &"berth: permissions edit: the project settings narrow the agent's full".to_owned()
        ),
        "{:?}",
        diagnostics(&events)
    );

    // An untrusted project asking for more than the agent has gets nothing, and the
    // run names the key, its place and the command that would trust the directory.
    std::fs::write(
        project.join("settings.jsonc"),
        r#"{ "permissions": "full" }"#,
    )
    .unwrap();
    let (_, events) = run(
        &exec,
        task("t3", "s3", with(Some(Edit)), "x", in_place(&dir)),
    )
    .await;
    assert_eq!(
        &argv(2)[5..8],
        [
            "--permission-mode=acceptEdits",
            "--allowedTools=Bash",
            "--append-system-prompt"
        ]
    );
    let ignored: Vec<_> = events
        .iter()
        .filter_map(|e| {
            if let ExecEvent::Agent(AgentEvent::Ignored { keys, hint, .. }) = e {
                Some((keys.clone(), hint.clone()))
            } else {
                None
            }
        })
        .collect();
    assert_eq!(ignored.len(), 1, "{events:?}");
    let (keys, hint) = &ignored[0];
    assert_eq!(
        (keys[0].key.as_str(), keys[0].line, keys[0].column),
        ("permissions", 1, 3)
    );
    assert_eq!(
        keys[0].message,
        "\"permissions\": \"full\" is ignored: it would widen the agent's edit, and the directory is not trusted"
    );
    assert!(
        hint.as_deref()
            .is_some_and(|h| h.starts_with("berth trust ")),
        "{hint:?}"
    );

    // A command agent asks no permissions: fenced, the fence holds it and the run says
    // nothing more; unfenced, nothing does, and the run says so.
    let script = sb.script("ok.sh", "#!/bin/sh\necho ok\n");
    let mut spec = agent(AgentKind::Command, &[&script]);
    spec.permissions = Some(Full);
    std::fs::remove_file(project.join("settings.jsonc")).unwrap();
    let unenforced = "permissions full are not enforced for the command agent \"test\"";
    let (_, events) = run(&exec, task("t4", "s4", spec.clone(), "x", in_place(&dir))).await;
    assert!(
        !diagnostics(&events).iter().any(|l| l.contains(unenforced)),
        "fenced: {:?}",
        diagnostics(&events)
    );
    std::fs::write(
        config.join("settings.jsonc"),
        r#"{ "permissions": "read-only", "fence": "off" }"#,
    )
    .unwrap();
    let (_, events) = run(&exec, task("t5", "s5", spec, "x", in_place(&dir))).await;
    assert!(
        diagnostics(&events)
            .iter()
            .any(|l| l.contains(unenforced) && l.contains("this run is unfenced")),
        "{:?}",
        diagnostics(&events)
    );
}
