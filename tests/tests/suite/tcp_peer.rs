//! A stolen token does not work from inside the fence, over TCP too: a fenced command
//! agent holding the real tokens, planted in its own directory, asks each of Berth's
//! listeners on loopback for the sessions (`GET /api/v1/sessions`) as a browser or a
//! client would:
//!
//! - `berth serve`'s web listener, plain http (the session's own server) and TLS
//!   (another `berth serve`), with the web token as its cookie;
//! - `berth-server`'s listener, plain and TLS, with the first admin's token as
//!   `Authorization: Bearer`;
//! - the control socket (unix), which needs no token.
//!
//! Each closes the connection (and logs why), while the same requests from the test
//! process get `200`; the control: the same agent with the user's `"fence": "off"`
//! gets `200` everywhere.
//!
//! Linux only: elsewhere no fence is built yet, and no peer is checked.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use berth_tests::steps::{add_command_agent, new_session, raw_http, s, send_json};
use berth_tests::tls::{Pki, https_request};
use berth_tests::{Berth, TempDir, eventually, free_port, server_bin};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Where the tokens also lie, as a user leaves them: a shell history with the
/// documented `BERTH_DAEMON_TOKEN=… berth daemon` line, and a snap Firefox profile's
/// cookies (the web token). Hidden by the fence's table (`fence::HIDDEN`).
const PLANTED: [(&str, &str); 2] = [
    ("history", "~/.bash_history"),
    (
        "snap_profile",
        "~/snap/firefox/common/.mozilla/firefox/p.default/cookies.sqlite",
    ),
];

/// The agent: first whether it can read each [`PLANTED`] file (a line `NAME: read` or
/// `NAME: refused`), then for each target of `targets.json` (in its directory), the
/// request, and a line `NAME: STATUS` (`closed` when no answer came).
const PROBE: &str = r#"
import json, os, socket, ssl, sys
for name, path in PLANTED:
    try:
        open(os.path.expanduser(path)).read()
        print("%s: read" % name, flush=True)
    except Exception as e:
        print("%s: %r" % (name, e), file=sys.stderr)
        print("%s: refused" % name, flush=True)
for t in json.load(open("targets.json")):
    try:
        if "unix" in t:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(10)
            s.connect(t["unix"])
            host = "berth"
        else:
            s = socket.create_connection(("127.0.0.1", t["port"]), timeout=10)
            host = "127.0.0.1:%d" % t["port"]
            if t.get("ca"):
                ctx = ssl.create_default_context(cafile=t["ca"])
                s = ctx.wrap_socket(s, server_hostname="127.0.0.1")
        s.sendall(("GET /api/v1/sessions HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n"
                   % (host, "".join(h + "\r\n" for h in t["headers"]))).encode())
        head = s.recv(64)
        status = head.split(b" ")[1].decode() if head.startswith(b"HTTP/1.1 ") else "closed"
    except Exception as e:
        print("%s: %r" % (t["name"], e), file=sys.stderr)
        status = "closed"
    print("%s: %s" % (t["name"], status), flush=True)
"#;

/// `berth-server` on a free loopback port, plain or TLS; killed when dropped.
struct Cloud {
    _root: TempDir,
    log: PathBuf,
    port: u16,
    token: String,
    child: Child,
}

impl Drop for Cloud {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Cloud {
    fn start(tag: &str, pki: Option<&Pki>) -> Cloud {
        let root = TempDir::new(tag);
        let home = root.path().join("server");
        let log = root.path().join("server.log");
        let port = free_port();
        let mut cmd = Command::new(server_bin());
        cmd.args(["--listen", &format!("127.0.0.1:{port}"), "--home", s(&home)]);
        if let Some(pki) = pki {
            cmd.args(["--tls-cert", s(&pki.cert), "--tls-key", s(&pki.key)]);
        }
        let out = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        let info = eventually(30, || std::fs::read_to_string(home.join("serve.json")).ok())
            .expect("berth-server writes serve.json");
        let info: Value = serde_json::from_str(&info).unwrap();
        Cloud {
            _root: root,
            log,
            port,
            token: info["token"].as_str().unwrap().to_owned(),
            child,
        }
    }
}

/// One listener the agent (and the test) asks.
struct Target {
    name: &'static str,
    port: u16,
    /// The CA to trust: a TLS listener.
    ca: Option<PathBuf>,
    headers: Vec<String>,
}

impl Target {
    fn json(&self) -> Value {
        json!({
            "name": self.name,
            "port": self.port,
            "ca": self.ca.as_deref().map(s),
            "headers": self.headers,
        })
    }

    /// The same request from the test process: its status.
    fn status(&self, pki: &Pki) -> u16 {
        let host = format!("127.0.0.1:{}", self.port);
        let mut head = format!("GET /api/v1/sessions HTTP/1.1\r\nHost: {host}\r\n");
        for h in &self.headers {
            head.push_str(&format!("{h}\r\n"));
        }
        if self.ca.is_some() {
            head.push_str("Connection: close\r\n\r\n");
            berth_tests::status_and_body(&https_request(pki, self.port, &head)).0
        } else {
            let mut tcp = std::net::TcpStream::connect(&host).unwrap();
            tcp.set_read_timeout(Some(std::time::Duration::from_secs(30)))
                .unwrap();
            raw_http(&mut tcp, &head, b"").0
        }
    }
}

/// The web listener's `host:port` and token of a running `berth serve`.
fn web(b: &Berth) -> (u16, String) {
    let (url, token) = b.serve_info();
    let port = url.rsplit(':').next().unwrap().trim_end_matches('/');
    (port.parse().unwrap(), token)
}

/// The agent's `NAME: STATUS` lines.
fn statuses(events: &[Value]) -> BTreeMap<String, String> {
    events
        .iter()
        .map(|e| &e["payload"])
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str()?.split_once(": "))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

const REFUSED_LOG: &str = "refused a connection from a fenced process";

#[test]
fn a_fenced_agent_holding_the_real_tokens_gets_nowhere_on_any_listener() {
    let mut b = Berth::new("tcp-peer");
    let app = b.user_home.join("code/app");
    std::fs::create_dir_all(&app).unwrap();
    // The PKI outside Berth's state, where a fenced agent may read the CA.
    let pki = Pki::generate(&b.root.path().join("pki"), "tcp-peer");
    b.serve();
    let mut tls = Berth::new("tcp-peer-tls");
    tls.serve_tls(&pki, &[]);
    let cloud = Cloud::start("tcp-peer-cloud", None);
    let cloud_tls = Cloud::start("tcp-peer-cloud-tls", Some(&pki));

    let cookie = |b: &Berth| format!("Cookie: berth_token={}", web(b).1);
    let bearer = |c: &Cloud| format!("Authorization: Bearer {}", c.token);
    let targets = [
        Target {
            name: "web",
            port: web(&b).0,
            ca: None,
            headers: vec![cookie(&b)],
        },
        Target {
            name: "web_tls",
            port: web(&tls).0,
            ca: Some(pki.ca.clone()),
            headers: vec![cookie(&tls)],
        },
        Target {
            name: "cloud",
            port: cloud.port,
            ca: None,
            headers: vec![bearer(&cloud)],
        },
        Target {
            name: "cloud_tls",
            port: cloud_tls.port,
            ca: Some(pki.ca.clone()),
            headers: vec![bearer(&cloud_tls)],
        },
    ];
    // The stolen tokens, planted where the agent may read them; and Berth's control
    // socket, which needs none.
    let mut planted: Vec<Value> = targets.iter().map(Target::json).collect();
    planted.push(json!({
        "name": "control_socket",
        "unix": s(&b.home.join("berth.sock")),
        "headers": [],
    }));
    std::fs::write(
        app.join("targets.json"),
        serde_json::to_string(&planted).unwrap(),
    )
    .unwrap();
    // The test itself holds the same tokens and gets in everywhere.
    for t in &targets {
        assert_eq!(t.status(&pki), 200, "{} from the test process", t.name);
    }

    // A python outside the home (the fake home has no pyenv), for the raw requests.
    let python = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("a python3 for the raw requests");
    for (i, (_, path)) in PLANTED.iter().enumerate() {
        let file = b.user_home.join(path.trim_start_matches("~/"));
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        let line = if i == 0 {
            format!(
                "BERTH_DAEMON_TOKEN={} berth daemon --server https://127.0.0.1:{}\n",
                cloud_tls.token, cloud_tls.port
            )
        } else {
            format!(
                "127.0.0.1\tFALSE\t/\tFALSE\t0\tberth_token\t{}\n",
                web(&b).1
            )
        };
        std::fs::write(&file, line).unwrap();
    }
    let probe = PROBE.replacen(
        "PLANTED",
        &format!(
            "[{}]",
            PLANTED
                .iter()
                .map(|(name, path)| format!("(\"{name}\", \"{path}\")"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        1,
    );
    add_command_agent(&b, "thief", &format!("exec {python} -c '{probe}'"));
    let session = new_session(&b, "thief", Some(&app));
    let (_, events, task) = send_json(&b, &session, "go");
    assert_eq!(task["status"], "succeeded", "{task}\n{events:?}");
    let listeners = ["web", "web_tls", "cloud", "cloud_tls", "control_socket"];
    // What the agent should see: each planted file, each listener.
    let seen = |file: &str, listener: &str| -> BTreeMap<String, String> {
        PLANTED
            .iter()
            .map(|(n, _)| ((*n).to_owned(), file.to_owned()))
            .chain(
                listeners
                    .iter()
                    .map(|n| ((*n).to_owned(), listener.to_owned())),
            )
            .collect()
    };
    let closed = seen("refused", "closed");
    assert_eq!(statuses(&events), closed, "{events:?}");
    // Each server closed it for what it is: a fenced peer.
    for (name, log) in [
        ("berth serve", b.serve_log()),
        ("berth serve --tls-cert", tls.serve_log()),
        ("berth-server", std::fs::read_to_string(&cloud.log).unwrap()),
        (
            "berth-server --tls-cert",
            std::fs::read_to_string(&cloud_tls.log).unwrap(),
        ),
    ] {
        assert!(log.contains(REFUSED_LOG), "{name} logs the refusal:\n{log}");
    }
    // The test still gets in.
    for t in &targets {
        assert_eq!(t.status(&pki), 200, "{} from the test process", t.name);
    }

    // The control: unfenced, the same agent with the same tokens reads everything.
    std::fs::write(b.config.join("settings.jsonc"), r#"{ "fence": "off" }"#).unwrap();
    let (_, events, task) = send_json(&b, &session, "again");
    assert_eq!(task["status"], "succeeded", "{task}\n{events:?}");
    assert_eq!(statuses(&events), seen("read", "200"), "{events:?}");
}
