//! Landlock's own reports of the fence's refusals (issue 51): where the kernel's audit
//! is on (Landlock ABI 7, Linux 6.15+) and Berth may read it (root), a denial the
//! agent's output hides is still the task's denial by the fence.
//!
//! The agent writes outside its directory with its errors thrown away
//! (`2>/dev/null`): nothing Berth could read from its output names a refusal. With the
//! system's audit off (the control), the task lists no denial; with it on, it lists the
//! kernel's two: the existing file written (`fs.write_file`, its path) and the new
//! file made (`fs.make_reg`, its directory), and the transcript shows them.
//!
//! The test turns the system's audit on for the length of its run and puts it back
//! as it was (Berth never does: it only reads the records where they are written
//! already). Its own test binary: no other test runs beside it while audit is on.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::Berth;
use berth_tests::steps::{add_command_agent, new_session, send_json};
use serde_json::Value;
use std::process::Command;

/// `AUDIT_GET`, and `AUDIT_SET` of `enabled` when an argument is given, over a netlink
/// audit socket: prints `enabled` before the change.
const AUDIT_CTL: &str = r#"
import socket, struct, sys
s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 9)
s.bind((0, 0))
s.send(struct.pack("=IHHII", 16, 1000, 1, 1, 0))
d = s.recv(4096)
if struct.unpack("=H", d[4:6])[0] != 1000:
    sys.exit("AUDIT_GET refused")
print(struct.unpack("=I", d[20:24])[0])
if len(sys.argv) > 1:
    body = struct.pack("=10I", 1, int(sys.argv[1]), 0, 0, 0, 0, 0, 0, 0, 0)
    s.send(struct.pack("=IHHII", 16 + len(body), 1001, 5, 2, 0) + body)
    d = s.recv(4096)
    err = struct.unpack("=i", d[16:20])[0]
    if err != 0:
        sys.exit(f"AUDIT_SET answered {err}")
"#;

fn audit_ctl(set: Option<u32>) -> Result<u32, String> {
    let mut cmd = Command::new("python3");
    cmd.args(["-c", AUDIT_CTL]);
    if let Some(v) = set {
        cmd.arg(v.to_string());
    }
    let out = cmd.output().map_err(|e| format!("python3: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
    }
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .map_err(|e| format!("{e}"))
}

/// The system's audit on while it lives, as it was after.
struct AuditOn {
    before: u32,
}

impl AuditOn {
    fn new() -> Result<AuditOn, String> {
        let before = audit_ctl(Some(1))?;
        Ok(AuditOn { before })
    }
}

impl Drop for AuditOn {
    fn drop(&mut self) {
        if self.before != 1 {
            let _ = audit_ctl(Some(self.before));
        }
    }
}

fn landlock_abi() -> i64 {
    // `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`, as the CLI
    // reports it.
    let out = Command::new("python3")
        .args([
            "-c",
            "import ctypes; print(ctypes.CDLL(None).syscall(444, None, 0, 1))",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

fn fence_denials(task: &Value) -> Vec<(String, String)> {
    task["denials"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["by"] == "fence")
        .map(|d| {
            (
                d["tool"].as_str().unwrap().to_owned(),
                d["target"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_refusal_the_agent_hides_is_read_from_the_kernels_audit() {
    if !is_root() || landlock_abi() < 7 {
        eprintln!("skipped: needs root and Landlock ABI 7 (Linux 6.15+) for audit records");
        return;
    }
    let mut b = Berth::new("audit");
    let home = b.user_home.clone();
    let app = home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::write(home.join("notes.txt"), "mine\n").unwrap();
    b.serve();
    add_command_agent(
        &b,
        "quiet",
        "{ echo pwn >> \"$HOME/notes.txt\"; echo pwn > \"$HOME/planted.txt\"; } 2>/dev/null; \
         echo ok > inside.txt; echo finished",
    );
    let session = new_session(&b, "quiet", Some(&app));

    // The control: with the system's audit off, nothing the agent printed names a
    // refusal, and the task lists none.
    let was = audit_ctl(None).expect("AUDIT_GET as root");
    if was == 0 {
        let (_, _, task) = send_json(&b, &session, "quietly");
        assert_eq!(task["status"], "succeeded", "{task}");
        assert_eq!(fence_denials(&task), vec![], "{task}");
    }

    let on = AuditOn::new().expect("AUDIT_SET as root");
    // Berth asks whether the audit is on at most once a second.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (_, events, task) = send_json(&b, &session, "quietly, audited");
    drop(on);
    assert_eq!(task["status"], "succeeded", "{task}");
    let notes = home.join("notes.txt").to_string_lossy().into_owned();
    let home_s = home.to_string_lossy().into_owned();
    let denials = fence_denials(&task);
    assert!(
        denials.contains(&("fs.write_file".to_owned(), notes.clone())),
        "the write to {notes} is listed: {task}"
    );
    assert!(
        denials.contains(&("fs.make_reg".to_owned(), home_s.clone())),
        "the new file in {home_s} is listed: {task}"
    );
    // Nothing inside the directory, nothing else.
    assert_eq!(denials.len(), 2, "{task}");
    let shown = events
        .iter()
        .filter(|e| e["payload"]["type"] == "denied" && e["payload"]["by"] == "fence")
        .count();
    assert_eq!(shown, 2, "{events:?}");
    assert_eq!(
        std::fs::read_to_string(home.join("notes.txt")).unwrap(),
        "mine\n"
    );
    assert!(!home.join("planted.txt").exists());
    assert!(app.join("inside.txt").exists());
}

fn is_root() -> bool {
    let out = Command::new("id").arg("-u").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}
