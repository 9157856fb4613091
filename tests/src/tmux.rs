//! A real pseudo-terminal for interactive commands: one private tmux server per test
//! (its own socket name), a window of a given size, keys sent as a user types them,
//! the screen read back as text or with its colours.

use crate::{Berth, eventually};
use std::path::Path;
use std::process::{Command, Output};

#[derive(Debug)]
pub struct Tmux {
    socket: String,
}

impl Tmux {
    /// Starts `berth ARGS` in a `cols`×`rows` terminal, in `dir`, with `b`'s environment.
    /// When the command ends the pane shows `EXIT=<code>` and stays.
    pub fn berth(b: &Berth, dir: &Path, args: &[&str], cols: u16, rows: u16) -> Tmux {
        let socket = format!(
            "berth-test-{}-{}",
            std::process::id(),
            uuid_like(dir.to_string_lossy().as_ref())
        );
        let cmd = b.cmd();
        let mut env: Vec<String> = cmd
            .get_envs()
            .filter_map(|(k, v)| Some(format!("{}={}", k.to_str()?, shell_quote(v?.to_str()?))))
            .collect();
        env.push(String::from("TERM=xterm-256color"));
        let line = format!(
            "env -u XDG_RUNTIME_DIR {} {} {}; echo EXIT=$?; sleep 600",
            env.join(" "),
            shell_quote(crate::berth_bin().to_str().expect("utf-8 path")),
            args.iter()
                .map(|a| shell_quote(a))
                .collect::<Vec<_>>()
                .join(" ")
        );
        let t = Tmux { socket };
        let out = t.tmux(&[
            "new-session",
            "-d",
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
            "-c",
            dir.to_str().expect("utf-8 path"),
            "sh",
            "-c",
            &line,
        ]);
        assert!(
            out.status.success(),
            "tmux did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        t
    }

    fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("run tmux (scripts/test.sh installs it)")
    }

    /// Sends keys in tmux's names (`Enter`, `C-c`, `Tab`) or literal text.
    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "0"];
        args.extend(keys);
        self.tmux(&args);
    }

    /// Types `text` literally (no key names).
    pub fn type_text(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "0", "-l", text]);
    }

    /// Pastes `text` as a terminal does with bracketed paste.
    pub fn paste(&self, text: &str) {
        self.tmux(&["set-buffer", "--", text]);
        self.tmux(&["paste-buffer", "-p", "-t", "0"]);
    }

    /// The screen as text, one line per row.
    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-t", "0"]).stdout).into_owned()
    }

    /// The screen with its colour and attribute escapes.
    pub fn screen_styled(&self) -> String {
        String::from_utf8_lossy(&self.tmux(&["capture-pane", "-p", "-e", "-t", "0"]).stdout)
            .into_owned()
    }

    /// Waits (up to `secs`) until the screen satisfies `f`; panics with the screen.
    pub fn wait(&self, secs: u64, what: &str, f: impl Fn(&str) -> bool) -> String {
        eventually(secs, || {
            let s = self.screen();
            f(&s).then_some(s)
        })
        .unwrap_or_else(|| panic!("the screen never showed {what}:\n{}", self.screen()))
    }

    pub fn resize(&self, cols: u16, rows: u16) {
        self.tmux(&[
            "resize-window",
            "-t",
            "0",
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
        ]);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A short tag from a path, so two tests of one process get two servers.
fn uuid_like(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    format!("{h:x}")
}
