//! Dispatch (issue 4): one message's round trip through Berth with a `cat` agent,
//! against spawning `cat` directly, in the same loop.

use super::http::{Conn, Sse};
use super::{
    CAT_AGENT, Config, Goal, Row, ms_since, new_session, percentile_rows, post_message, progress,
    quantile, served, served_by, served_with, socket, succeeded,
};
use crate::Berth;
use anyhow::{Context as _, Result, bail, ensure};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Round trips before the timed ones: the page cache, the store, the first spawn.
const WARM_UP: usize = 5;

/// Pipes `msg` through a fresh `cat` and checks it came back.
pub fn bare_cat(msg: &str) -> Result<()> {
    let mut child = Command::new("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("spawn cat")?;
    let mut stdin = child.stdin.take().context("cat stdin")?;
    stdin.write_all(msg.as_bytes())?;
    drop(stdin);
    let mut out = String::new();
    child
        .stdout
        .take()
        .context("cat stdout")?
        .read_to_string(&mut out)?;
    let status = child.wait()?;
    ensure!(status.success() && out == msg, "cat echoed {out:?}");
    Ok(())
}

/// The round trips, one sample each per message: `api` on a server whose agents are
/// fenced (the default, where the kernel can), `api_unfenced` on one whose user
/// settings turn the fence off.
#[derive(Debug, Default)]
struct Samples {
    bare: Vec<f64>,
    cli: Vec<f64>,
    api: Vec<f64>,
    api_unfenced: Vec<f64>,
}

/// The CLI's own start (issue 17): `berth --version` and `berth session list` on an
/// empty store, against `cat /dev/null`, in one loop.
fn startup(n: usize) -> Result<Vec<Row>> {
    let b = served("bench-startup");
    let (mut cat, mut version, mut list) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..WARM_UP + n {
        let t = Instant::now();
        let out = Command::new("cat").arg("/dev/null").output()?;
        let c = ms_since(t);
        ensure!(out.status.success(), "cat /dev/null failed");
        let t = Instant::now();
        let out = b.run(&["--version"]);
        let v = ms_since(t);
        ensure!(out.status.success(), "berth --version failed");
        let t = Instant::now();
        let out = b.run(&["session", "list", "--json"]);
        let l = ms_since(t);
        ensure!(
            out.status.success() && out.stdout.starts_with(b"["),
            "berth session list failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        if i >= WARM_UP {
            cat.push(c);
            version.push(v);
            list.push(l);
        }
    }
    let p50 = |v: &[f64]| quantile(v, 0.5).unwrap_or(f64::NAN);
    let mut rows = vec![
        Row::new(
            "dispatch",
            &format!("`cat /dev/null` p50 (n={n})"),
            p50(&cat),
            "ms",
            None,
        ),
        Row::new(
            "dispatch",
            &format!("`berth --version` p50 (n={n})"),
            p50(&version),
            "ms",
            None,
        ),
        Row::new(
            "dispatch",
            &format!("`berth session list`, empty store p50 (n={n})"),
            p50(&list),
            "ms",
            None,
        ),
    ];
    rows.push(Row::new(
        "dispatch",
        "`berth --version` p50 / `cat` p50",
        p50(&version) / p50(&cat),
        "x",
        None,
    ));
    rows.push(Row::new(
        "dispatch",
        "`berth session list` p50 / `cat` p50",
        p50(&list) / p50(&cat),
        "x",
        None,
    ));
    Ok(rows)
}

/// What the fence's in-place layer adds (issue 34): a session bound to a git
/// repository, whose `.git/hooks` and `.git/config` the fence binds read-only for the
/// run, on a server with the layer and on one without it (`BERTH_FENCE_PROBE=no-binds`,
/// the guard alone), in one loop.
fn binds(n: usize) -> Result<Vec<Row>> {
    let mut loops = Vec::new();
    for (tag, layer) in [("bench-binds", true), ("bench-no-binds", false)] {
        let env: &[(&str, &str)] = if layer {
            &[]
        } else {
            &[("BERTH_FENCE_PROBE", "no-binds")]
        };
        let b = served_with(tag, env);
        let repo = b.user_home.join("code/repo");
        std::fs::create_dir_all(&repo)?;
        let git = Command::new("git")
            .args(["init", "-q"])
            .current_dir(&repo)
            .status()?;
        ensure!(git.success(), "git init failed in {}", repo.display());
        let sock = socket(&b);
        let mut conn = Conn::connect(&sock)?;
        let doc = conn.json(
            "POST",
            "/api/v1/sessions",
            Some(&serde_json::json!({
                "agent": CAT_AGENT,
                "title": tag,
                "dir": repo.to_str().context("a UTF-8 path")?,
            })),
        )?;
        let session = doc["id"].as_str().context("no session id")?.to_owned();
        let sse = Sse::open(&sock, &session, 0, Duration::from_secs(60))?;
        loops.push((b, conn, session, sse, Vec::new(), layer));
    }
    for i in 0..WARM_UP + n {
        for (_, conn, session, sse, samples, layer) in &mut loops {
            let t = Instant::now();
            let task = post_message(conn, session, &format!("message {i}"))?;
            let done = sse.until_task(&task)?;
            let ms = ms_since(t);
            ensure!(succeeded(&done), "API task {task} ended {done}");
            let bound = done["fence"]["text"]
                .as_str()
                .is_some_and(|t| t.contains("read-only during the run"));
            if i == 0 && *layer && !bound {
                // This machine refuses the namespace: nothing to measure.
                return Ok(vec![]);
            }
            ensure!(
                bound == *layer,
                "the layer is {layer} but the task says {done}"
            );
            if i >= WARM_UP {
                samples.push(ms);
            }
        }
    }
    let p50 = |v: &[f64]| quantile(v, 0.5).unwrap_or(f64::NAN);
    let (with, without) = (&loops[0].4, &loops[1].4);
    let mut rows = percentile_rows(
        "dispatch",
        "API round trip, fenced in a git repository (read-only binds)",
        with,
        Some(Goal::AtMost(3.0)),
    );
    rows.extend(percentile_rows(
        "dispatch",
        "API round trip, fenced in a git repository (guard alone)",
        without,
        None,
    ));
    // A ratio, not a difference: the layer costs less than the loop's noise, and a
    // difference of two noisy medians can come out below zero.
    rows.push(
        Row::new(
            "dispatch",
            "the read-only binds: p50 with / without",
            p50(with) / p50(without),
            "x",
            None,
        )
        .with_note("issue 34: the fence's in-place layer, in the same loop"),
    );
    Ok(rows)
}

/// A scripted ACP peer: answers Berth's requests in the order Berth makes them
/// (`initialize`, the session, the prompt with one message chunk), as a real agent
/// would, and nothing else.
const ACP_PEER: &str = r#"#!/bin/sh
read -r _
printf '%s\n' '{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"sessionCapabilities":{"resume":{}}}}}'
read -r _
printf '%s\n' '{"jsonrpc":"2.0","id":1,"result":{"sessionId":"bench"}}'
read -r _
printf '%s\n' '{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"bench","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hello"}}}}' '{"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}'
"#;

/// An ACP agent's first update (issue 36): a scripted ACP peer ([`ACP_PEER`]) against
/// the `cat` command agent, in one loop, on one server: from the message's POST to the
/// turn's first agent text on the session's event stream (for the peer, its
/// `session/update` after `initialize`, `session/new` or `session/resume`, and
/// `session/prompt`).
fn acp(n: usize) -> Result<Vec<Row>> {
    let b = served("bench-acp");
    let peer = b.root.path().join("acp-peer.sh");
    std::fs::write(&peer, ACP_PEER)?;
    b.ok(&[
        "agent",
        "add",
        "acp-peer",
        "--kind",
        "acp",
        "--command",
        "sh",
        peer.to_str().context("a UTF-8 path")?,
    ]);
    let sock = socket(&b);
    let mut conn = Conn::connect(&sock)?;
    let mut loops = Vec::new();
    for agent in [CAT_AGENT, "acp-peer"] {
        let session = new_session(&mut conn, agent, agent)?;
        let sse = Sse::open(&sock, &session, 0, Duration::from_secs(60))?;
        loops.push((session, sse, Vec::new()));
    }
    for i in 0..WARM_UP + n {
        for (session, sse, samples) in &mut loops {
            let t = Instant::now();
            let task = post_message(&mut conn, session, &format!("message {i}"))?;
            let mut first = None;
            loop {
                let ev = sse.next_event()?.context("the stream ended mid-task")?;
                let doc = ev.json();
                if doc["task_id"] != task.as_str() {
                    continue;
                }
                if first.is_none() && doc["kind"] == "agent" && doc["payload"]["type"] == "text" {
                    first = Some(ms_since(t));
                }
                if ev.event == "task" {
                    ensure!(
                        succeeded(&doc["payload"]["task"]),
                        "task {task} ended {doc}"
                    );
                    break;
                }
            }
            let first = first.context("the turn had no text")?;
            if i >= WARM_UP {
                samples.push(first);
            }
        }
    }
    let p50 = |v: &[f64]| quantile(v, 0.5).unwrap_or(f64::NAN);
    let mut rows = percentile_rows(
        "dispatch",
        "command agent (`cat`): POST → first agent text",
        &loops[0].2,
        None,
    );
    rows.extend(percentile_rows(
        "dispatch",
        "ACP agent (a scripted peer): POST → first session/update as text",
        &loops[1].2,
        None,
    ));
    rows.push(
        Row::new(
            "dispatch",
            "ACP first update p50 / command first text p50",
            p50(&loops[1].2) / p50(&loops[0].2),
            "x",
            None,
        )
        .with_note("issue 36: the ACP handshake's cost, in the same loop"),
    );
    Ok(rows)
}

/// One side of an [`alternating`] loop: a session on a server, the client's keep-alive
/// connection to it and the session's open event stream.
struct Side<'a> {
    conn: &'a mut Conn,
    session: &'a str,
    sse: &'a mut Sse,
}

/// `n` API round trips on each side (after [`WARM_UP`] more), in one loop, and which
/// side goes first alternates: the second of a pair pays for the first's tail (its
/// server's work after the `task` event, the client's wake-ups), about a tenth of a
/// millisecond on a two-core machine, which would otherwise always land on one side.
/// Each side's round trips in order, and whether its first task ran fenced.
fn alternating(sides: &mut [Side<'_>; 2], n: usize, what: &str) -> Result<[(Vec<f64>, bool); 2]> {
    let mut out = [(Vec::new(), false), (Vec::new(), false)];
    for i in 0..WARM_UP + n {
        let msg = format!("message {i}");
        for k in if i % 2 == 0 { [0, 1] } else { [1, 0] } {
            let side = &mut sides[k];
            let t = Instant::now();
            let task = post_message(side.conn, side.session, &msg)?;
            let done = side.sse.until_task(&task)?;
            let ms = ms_since(t);
            ensure!(succeeded(&done), "{what}: task {task} ended {done}");
            if i == 0 {
                out[k].1 = done["fence"]["fenced"] == true;
            }
            if i >= WARM_UP {
                out[k].0.push(ms);
            }
        }
        if (i + 1) % 100 == 0 {
            progress(format!("{what}: {}/{}", i + 1, WARM_UP + n));
        }
    }
    Ok(out)
}

/// The median of the per-iteration differences `a[i] - b[i]`.
fn paired_p50(a: &[f64], b: &[f64]) -> f64 {
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    quantile(&d, 0.5).unwrap_or(f64::NAN)
}

/// Two builds of Berth in one loop (`berth-bench --compare OTHER`): this build
/// (`BERTH_BIN`) and `other` (a `berth` with its `berth-full` beside it), each serving
/// one session of the `cat` agent, fenced where the kernel can, their API round trips
/// [`alternating`]. Separate runs of one build differ by more than most changes gain or
/// cost, so a change is judged here, against the build without it, in the same loop.
pub fn compare(cfg: &Config, other: &Path) -> Result<Vec<Row>> {
    for name in ["berth", "berth-full"] {
        let bin = other.with_file_name(name);
        ensure!(
            bin.is_file(),
            "{} is not a file: --compare names a build's `berth`, with its `berth-full` beside it",
            bin.display()
        );
    }
    let servers = [
        served("bench-compare-this"),
        served_by("bench-compare-other", other),
    ];
    let mut rows = Vec::new();
    // A scratch session, then one bound to a git repository of 200 files (the change
    // record's git steps and the guard run at each message there), then one of 20k
    // files: the change record's steady state, what it costs at every message in a
    // big repository where nothing changed.
    for files in [0, 200, cfg.compare_big_files] {
        let in_repo = files > 0;
        let mut open = Vec::new();
        for b in &servers {
            let sock = socket(b);
            let mut conn = Conn::connect(&sock)?;
            let session = if in_repo {
                repo_session(b, &mut conn, "compare in a repository", files)?
            } else {
                new_session(&mut conn, CAT_AGENT, "compare")?
            };
            let sse = Sse::open(&sock, &session, 0, Duration::from_secs(60))?;
            open.push((conn, session, sse));
        }
        let [(c0, s0, e0), (c1, s1, e1)] = &mut open[..] else {
            bail!("two servers expected");
        };
        let n = match files {
            0 => cfg.dispatch_messages,
            200 => cfg.dispatch_messages.min(300),
            _ => cfg.dispatch_messages.min(100),
        };
        let size = if files >= 1000 {
            format!("{}k", files / 1000)
        } else {
            files.to_string()
        };
        let [(this, fenced), (that, other_fenced)] = alternating(
            &mut [
                Side {
                    conn: c0,
                    session: s0,
                    sse: e0,
                },
                Side {
                    conn: c1,
                    session: s1,
                    sse: e1,
                },
            ],
            n,
            "compare",
        )?;
        ensure!(
            fenced == other_fenced,
            "the two builds fence differently here (this one: {fenced}, the other: {other_fenced}): their round trips do not compare"
        );
        let place = match files {
            0 => String::new(),
            200 => ", in a git repository (200 files)".to_owned(),
            _ => {
                format!(", in a git repository of {size} files (the change record's steady state)")
            }
        };
        rows.extend(percentile_rows(
            "compare",
            &format!("API round trip{place}, this build"),
            &this,
            None,
        ));
        rows.extend(percentile_rows(
            "compare",
            &format!("API round trip{place}, {}", other.display()),
            &that,
            None,
        ));
        rows.push(
            Row::new(
                "compare",
                &format!("this build − the other{place}: p50 of the paired differences"),
                paired_p50(&this, &that),
                "ms",
                None,
            )
            .with_note(if fenced {
                "below zero: this build is faster; both fenced"
            } else {
                "below zero: this build is faster; neither fenced (no fence on this machine)"
            }),
        );
    }
    Ok(rows)
}

/// A session of `b`'s cat agent bound to a new git repository of `files` committed
/// files (a hundred a directory) in `b`'s home.
fn repo_session(b: &Berth, conn: &mut Conn, title: &str, files: usize) -> Result<String> {
    let repo = b.user_home.join(format!("code/repo{files}"));
    for i in 0..files {
        let dir = repo.join(format!("src/d{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        std::fs::write(dir.join(format!("f{i}.rs")), format!("// {i}\n"))?;
    }
    for args in [
        &["init", "-q"][..],
        &["add", "-A"],
        &[
            "-c",
            "user.name=B",
            "-c",
            "user.email=b@b",
            "commit",
            "-qm",
            "one",
        ],
    ] {
        let ok = Command::new("git")
            .args(args)
            .current_dir(&repo)
            .status()?
            .success();
        ensure!(ok, "git {args:?} failed in {}", repo.display());
    }
    let doc = conn.json(
        "POST",
        "/api/v1/sessions",
        Some(&serde_json::json!({
            "agent": CAT_AGENT,
            "title": title,
            "dir": repo.to_str().context("a UTF-8 path")?,
        })),
    )?;
    Ok(doc["id"].as_str().context("no session id")?.to_owned())
}

pub fn run(cfg: &Config) -> Result<Vec<Row>> {
    let startup_rows = startup(cfg.dispatch_messages.min(100))?;
    let binds_rows = binds(cfg.dispatch_messages.min(200))?;
    let acp_rows = acp(cfg.dispatch_messages.min(200))?;
    let b = served("bench-dispatch");
    let sock = socket(&b);
    let mut conn = Conn::connect(&sock)?;
    let cli_session = new_session(&mut conn, CAT_AGENT, "dispatch via the CLI")?;
    let api_session = new_session(&mut conn, CAT_AGENT, "dispatch via the API")?;
    let mut sse = Sse::open(&sock, &api_session, 0, Duration::from_secs(60))?;
    // The same round trip with the fence off, in the same loop: what the fence adds.
    let off = served("bench-dispatch-unfenced");
    std::fs::write(off.config.join("settings.jsonc"), r#"{ "fence": "off" }"#)?;
    let off_sock = socket(&off);
    let mut off_conn = Conn::connect(&off_sock)?;
    let off_session = new_session(&mut off_conn, CAT_AGENT, "dispatch, fence off")?;
    let mut off_sse = Sse::open(&off_sock, &off_session, 0, Duration::from_secs(60))?;

    let mut s = Samples::default();
    // Whether this machine's kernel fences (the first fenced task says).
    let mut fenced_here = false;
    let n = cfg.dispatch_messages;
    for i in 0..WARM_UP + n {
        let msg = format!("message {i}");
        let t = Instant::now();
        bare_cat(&msg)?;
        let bare = ms_since(t);

        let t = Instant::now();
        let out = b.run(&["send", &cli_session, &msg]);
        let cli = ms_since(t);
        if !out.status.success() {
            bail!(
                "berth send failed on message {i}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }

        let t = Instant::now();
        let task = post_message(&mut conn, &api_session, &msg)?;
        let done = sse.until_task(&task)?;
        let api = ms_since(t);
        ensure!(succeeded(&done), "API task {task} ended {done}");
        if i == 0 {
            fenced_here = done["fence"]["fenced"] == true;
        }

        let t = Instant::now();
        let task = post_message(&mut off_conn, &off_session, &msg)?;
        let done = off_sse.until_task(&task)?;
        let api_unfenced = ms_since(t);
        ensure!(succeeded(&done), "API task {task} (fence off) ended {done}");
        if i == 0 {
            ensure!(
                done["fence"]["fenced"] == false,
                "the fence-off server's task ran fenced: {done}"
            );
        }

        if i >= WARM_UP {
            s.bare.push(bare);
            s.cli.push(cli);
            s.api.push(api);
            s.api_unfenced.push(api_unfenced);
        }
        if (i + 1) % 100 == 0 {
            progress(format!("dispatch: {}/{}", i + 1, WARM_UP + n));
        }
    }

    let mut rows = Vec::new();
    rows.extend(percentile_rows(
        "dispatch",
        "bare `cat` spawn",
        &s.bare,
        None,
    ));
    rows.extend(percentile_rows(
        "dispatch",
        "`berth send` CLI round trip",
        &s.cli,
        None,
    ));
    rows.extend(percentile_rows(
        "dispatch",
        "API round trip (persistent client)",
        &s.api,
        None,
    ));
    rows.extend(percentile_rows(
        "dispatch",
        "API round trip, fence off",
        &s.api_unfenced,
        None,
    ));
    // The fence's cost, in a loop of its own where the two take turns going first: in
    // the loop above the unfenced round trip always follows the fenced one and pays
    // for its tail, which hid most of what the fence costs.
    let [(fenced_rt, _), (unfenced_rt, _)] = alternating(
        &mut [
            Side {
                conn: &mut conn,
                session: &api_session,
                sse: &mut sse,
            },
            Side {
                conn: &mut off_conn,
                session: &off_session,
                sse: &mut off_sse,
            },
        ],
        n,
        "dispatch: fenced and not, alternating",
    )?;
    // A median of differences: below zero is noise, and said so.
    let cost = paired_p50(&fenced_rt, &unfenced_rt);
    rows.push(
        Row::new(
            "dispatch",
            "the fence's cost: fenced − fence off, p50 of paired round trips (alternating)",
            cost.max(0.0),
            "ms",
            None,
        )
        .with_note(if !fenced_here {
            "this machine has no fence: both runs are unfenced"
        } else if cost < 0.0 {
            "issue 34: fenced came out faster (noise)"
        } else {
            "issue 34: in a loop of their own, each going first every other time"
        }),
    );
    let p50 = |v: &[f64]| quantile(v, 0.5).unwrap_or(f64::NAN);
    rows.push(
        Row::new(
            "dispatch",
            "API p50 / bare spawn p50",
            p50(&s.api) / p50(&s.bare),
            "x",
            Some(Goal::AtMost(1.5)),
        )
        .with_note("issue 57's goal (issue 17's was 2x, issue 4's 3x)"),
    );
    rows.push(
        Row::new(
            "dispatch",
            "CLI p50 / bare spawn p50",
            p50(&s.cli) / p50(&s.bare),
            "x",
            Some(Goal::AtMost(2.5)),
        )
        .with_note(
            "issue 57's goal (issue 17's was 3x): includes starting the `berth` client process",
        ),
    );
    rows.extend(binds_rows);
    rows.extend(acp_rows);
    rows.extend(startup_rows);
    Ok(rows)
}
