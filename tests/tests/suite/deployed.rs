//! `berth-server` as a team deploys it (issue 38): the binary `scripts/build-server.sh`
//! builds (the cloud build with PostgreSQL, static on musl) and the image
//! `scripts/build-image.sh` builds from it. Both take minutes to build, more than
//! `cargo test --workspace` should, so these tests are ignored there and run by
//! `scripts/test.sh` after the two scripts, with
//!
//! - `BERTH_DEPLOYED_SERVER`: the binary's path (`$(scripts/build-server.sh)`);
//! - `BERTH_IMAGE`: the image's name (`$(scripts/build-image.sh)`), read with podman;
//! - `BERTH_TEST_DATABASE_URL`: a PostgreSQL superuser's URL (else a throwaway cluster).
//!
//! What they hold the deployed build to: it starts on PostgreSQL; it has no local
//! binding (its capabilities say so, and the binding routes are not there); `/healthz`
//! and `/readyz` answer a status word without a token while `/api/v1/*` still wants
//! one; it is one static executable; and the image runs it as a non-root user, with a
//! health check, the CA bundle and a home it can write.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.

use crate::pg;

use berth_test_support::http::{self, Request};
use berth_tests::{TempDir, eventually, free_port};
use serde_json::Value;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// 64 characters, as `BERTH_ADMIN_TOKEN` wants at least 32.
const ADMIN: &str = "deployed-admin-token-0123456789abcdef0123456789abcdef0123456789ab";

fn deployed_server() -> PathBuf {
    let path = std::env::var_os("BERTH_DEPLOYED_SERVER").unwrap_or_else(|| {
        panic!(
            "BERTH_DEPLOYED_SERVER is not set: give the path scripts/build-server.sh prints \
             (BERTH_DEPLOYED_SERVER=$(scripts/build-server.sh) cargo test -p berth-tests \
             --test all -- --ignored suite::deployed::)"
        )
    });
    let path = PathBuf::from(path);
    assert!(
        path.is_file(),
        "BERTH_DEPLOYED_SERVER={} is not a file",
        path.display()
    );
    path
}

fn image() -> String {
    match std::env::var("BERTH_IMAGE") {
        Ok(i) if !i.is_empty() => i,
        _ => panic!(
            "BERTH_IMAGE is not set: give the name scripts/build-image.sh prints \
             (BERTH_IMAGE=$(scripts/build-image.sh) cargo test -p berth-tests --test all \
             -- --ignored suite::deployed::)"
        ),
    }
}

/// podman, with the storage driver build-image.sh used (PODMAN_STORAGE_DRIVER).
fn podman() -> Command {
    let mut c = Command::new("podman");
    if let Ok(driver) = std::env::var("PODMAN_STORAGE_DRIVER")
        && !driver.is_empty()
    {
        c.args(["--storage-driver", &driver]);
    }
    c.stdin(Stdio::null());
    c
}

fn ok(c: &mut Command) -> Output {
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("cannot run {c:?}: {e}"));
    assert!(
        out.status.success(),
        "{c:?} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A running `berth-server`, killed when dropped.
struct Running {
    child: Child,
    /// Where to connect: `127.0.0.1:PORT`.
    addr: String,
    log: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    /// Starts `bin ARGS` with `home` as its `BERTH_HOME` and the fixed admin token;
    /// waits for its `serve.json` (and fails with its log if it exits or never writes
    /// one).
    fn start(bin: &Path, root: &Path, port: u16, args: &[&str]) -> Running {
        let home = root.join("home");
        let log = root.join("server.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(bin)
            .args(args)
            .env("BERTH_HOME", &home)
            .env("BERTH_ADMIN_TOKEN", ADMIN)
            .env_remove("BERTH_DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let mut running = Running {
            child,
            addr: format!("127.0.0.1:{port}"),
            log,
        };
        let started = eventually(30, || {
            if let Ok(Some(status)) = running.child.try_wait() {
                panic!(
                    "{} exited ({status}): {}",
                    bin.display(),
                    running.log_text()
                );
            }
            home.join("serve.json").exists().then_some(())
        });
        assert!(
            started.is_some(),
            "{} did not start in 30 s: {}",
            bin.display(),
            running.log_text()
        );
        running
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// One request on a fresh connection: status, `Content-Type`, body.
    fn call(&self, req: Request) -> (u16, String, String) {
        let stream = TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let a = http::exchange(stream, &self.addr, &req.close())
            .unwrap_or_else(|e| panic!("no answer from {}: {e}", self.addr));
        let ty = a.header("content-type").unwrap_or_default().to_owned();
        (a.status, ty, a.text())
    }

    fn admin_json(&self, method: &str, path: &str) -> (u16, Value) {
        let (status, _, body) = self.call(Request::new(method, path).bearer(ADMIN));
        (
            status,
            serde_json::from_str(&body).unwrap_or(Value::String(body)),
        )
    }

    /// `/healthz` and `/readyz` answer 200 and a status word alone, without a token;
    /// `berth-server healthcheck` agrees.
    fn assert_health(&self, bin: &Path) {
        for (path, word) in [("/healthz", "ok"), ("/readyz", "ready")] {
            let (status, ty, body) = eventually(15, || {
                let answer = self.call(Request::get(path));
                (answer.0 == 200).then_some(answer)
            })
            .unwrap_or_else(|| {
                panic!(
                    "{path} never answered 200: {:?}\n{}",
                    self.call(Request::get(path)),
                    self.log_text()
                )
            });
            assert_eq!(status, 200);
            assert_eq!(body.trim(), word, "{path} answers its status word alone");
            assert!(ty.starts_with("text/plain"), "{path}: {ty}");
            let url = format!("http://{}{path}", self.addr);
            let out = ok(Command::new(bin).args(["healthcheck", &url]));
            let line = String::from_utf8_lossy(&out.stdout);
            assert_eq!(line.lines().count(), 1, "one line: {line:?}");
            assert!(line.contains("200"), "{line}");
        }
    }
}

/// The deployed server: started on PostgreSQL, no local binding, health without a
/// token, the API with one only, `--version` and a failing `healthcheck` when nothing
/// answers.
#[test]
#[ignore = "run by scripts/test.sh after scripts/build-server.sh and scripts/build-image.sh"]
fn the_deployed_server_runs_on_postgres_without_local_binding() {
    let bin = deployed_server();
    let out = ok(Command::new(&bin).arg("--version"));
    let version = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        version.trim(),
        format!("berth-server {}", env!("CARGO_PKG_VERSION")),
        "--version"
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    let database = rt.block_on(pg::fresh_database());
    let root = TempDir::new("deployed");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let server = Running::start(
        &bin,
        root.path(),
        port,
        &["--listen", &listen, "--database", &database],
    );
    let log = server.log_text();
    assert!(
        !log.contains("no PostgreSQL support"),
        "the deployed build takes --database: {log}"
    );

    // On PostgreSQL indeed: the schema is in the fresh database.
    let tables = rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&database, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
            .query_one(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    });
    assert!(tables > 0, "berth-server made no tables in {database}");
    assert!(
        !root.path().join("home/berth.db").exists(),
        "on PostgreSQL there is no berth.db"
    );

    // No local binding: the capabilities say so, and the binding routes are absent
    // (a build with local-binding answers them on this listener too).
    let (status, caps) = server.admin_json("GET", "/api/v1/capabilities");
    assert_eq!(status, 200, "{caps}");
    assert_eq!(caps["local_binding"], Value::Bool(false), "{caps}");
    assert_eq!(caps["surface"], "cloud", "{caps}");
    assert!(caps.get("home").is_none_or(Value::is_null), "{caps}");
    let (status, v) = server.admin_json("POST", "/api/v1/check");
    assert_eq!(
        status, 404,
        "POST /api/v1/check on a build without local-binding: {v}"
    );
    let (status, v) = server.admin_json("PUT", "/api/v1/sessions/s1/binding");
    assert_eq!(
        status, 404,
        "PUT …/binding on a build without local-binding: {v}"
    );

    server.assert_health(&bin);

    // The API still wants a token; health is the only thing outside the guard.
    for path in ["/api/v1/sessions", "/api/v1/capabilities", "/api/v1/me"] {
        let (status, _, body) = server.call(Request::get(path));
        assert_eq!(status, 401, "{path} without a token: {body}");
    }
    let (status, me) = server.admin_json("GET", "/api/v1/me");
    assert_eq!(status, 200, "{me}");

    // Nothing listening: the probe fails, in one line, quickly.
    drop(server);
    let started = std::time::Instant::now();
    let out = Command::new(&bin)
        .args(["healthcheck", &format!("http://{listen}/healthz")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(said.lines().count(), 1, "{said:?}");
    assert!(said.starts_with("error: "), "{said}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// The musl build is one static executable: no program interpreter (PT_INTERP), so
/// it runs in a `FROM scratch` image with no loader or libc.
#[test]
#[ignore = "run by scripts/test.sh after scripts/build-server.sh and scripts/build-image.sh"]
fn the_deployed_server_is_static() {
    let bin = deployed_server();
    if !bin.to_string_lossy().contains("-linux-musl/") {
        eprintln!(
            "note: {} is not a musl build (build-server.sh builds one on x86_64 and aarch64 Linux only); not checked",
            bin.display()
        );
        return;
    }
    let elf = std::fs::read(&bin).unwrap();
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert!(
        !program_headers(&elf).contains(&PT_INTERP),
        "{} names a program interpreter: it is dynamically linked",
        bin.display()
    );
    if let Ok(out) = Command::new("file").arg("-L").arg(&bin).output() {
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            said.contains("statically linked") || said.contains("static-pie linked"),
            "{said}"
        );
    }
}

const PT_INTERP: u32 = 3;

/// The `p_type` of every program header of a 64-bit little-endian ELF file.
fn program_headers(elf: &[u8]) -> Vec<u32> {
    assert_eq!(elf[4], 2, "not a 64-bit ELF file");
    assert_eq!(elf[5], 1, "not a little-endian ELF file");
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap()) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    (0..phnum)
        .map(|i| {
            let o = phoff + i * phentsize;
            u32::from_le_bytes(elf[o..o + 4].try_into().unwrap())
        })
        .collect()
}

/// The image: its configuration, and its files taken out of `podman save`'s layers
/// (no container is run): a non-root user with a passwd line and a home it owns, the
/// health check and entry point, the CA bundle, and a binary that answers `--version`,
/// starts with the image's own command (on another port) and serves `/healthz`.
#[test]
#[ignore = "run by scripts/test.sh after scripts/build-server.sh and scripts/build-image.sh"]
fn the_image_runs_the_static_server_as_a_non_root_user() {
    let image = image();
    let out = ok(podman().args(["image", "inspect", &image]));
    let inspect: Value = serde_json::from_slice(&out.stdout).unwrap();
    let config = &inspect[0]["Config"];
    assert!(config.is_object(), "no Config in {inspect}");

    // USER: numeric and not root.
    let user = config["User"].as_str().unwrap_or_default();
    let uid: u32 = user
        .split(':')
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("USER {user:?} is not numeric"));
    assert_ne!(uid, 0, "the image runs as root");

    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let entrypoint = strings(&config["Entrypoint"]);
    assert_eq!(entrypoint, ["/usr/local/bin/berth-server"], "{config}");
    let cmd = strings(&config["Cmd"]);
    assert!(
        cmd.windows(2).any(|w| w == ["--listen", "0.0.0.0:4733"]),
        "the command listens on every address, port 4733: {cmd:?}"
    );
    assert!(config["ExposedPorts"]["4733/tcp"].is_object(), "{config}");
    let env = strings(&config["Env"]);
    assert!(
        env.iter().any(|e| e == "BERTH_HOME=/var/lib/berth"),
        "{env:?}"
    );
    // The health check: the binary's own probe, whose default URL is the command's port.
    let check = &inspect[0]["Healthcheck"];
    let check = if check.is_object() {
        check
    } else {
        &config["Healthcheck"]
    };
    assert_eq!(
        strings(&check["Test"]),
        ["CMD", "/usr/local/bin/berth-server", "healthcheck"],
        "HEALTHCHECK (kept in docker format only): {inspect}"
    );

    // The files, layer by layer, as `podman save` writes them.
    let work = TempDir::new("image");
    let archive = work.path().join("image.tar");
    ok(podman()
        .args(["save", "--format", "docker-archive", "-o"])
        .arg(&archive)
        .arg(&image));
    let unpacked = work.path().join("archive");
    std::fs::create_dir(&unpacked).unwrap();
    ok(Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(&unpacked));
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(unpacked.join("manifest.json")).unwrap()).unwrap();
    let layers = strings(&manifest[0]["Layers"]);
    assert!(!layers.is_empty(), "{manifest}");
    let rootfs = work.path().join("rootfs");
    std::fs::create_dir(&rootfs).unwrap();
    let mut listing = String::new();
    for layer in &layers {
        let layer = unpacked.join(layer);
        let out = ok(Command::new("tar")
            .args(["-tvf"])
            .arg(&layer)
            .arg("--numeric-owner"));
        listing.push_str(&String::from_utf8_lossy(&out.stdout));
        ok(Command::new("tar")
            .arg("-xf")
            .arg(&layer)
            .arg("-C")
            .arg(&rootfs)
            .args(["--no-same-owner", "--no-same-permissions"]));
    }

    // Nothing but what the Containerfile copies: no shell.
    assert!(!rootfs.join("bin/sh").exists(), "a shell in the image");
    let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
    assert!(
        passwd
            .lines()
            .any(|l| l.split(':').nth(2) == Some(&uid.to_string())),
        "no /etc/passwd line for uid {uid}: {passwd}"
    );
    let home_line = listing
        .lines()
        .find(|l| {
            l.trim_end()
                .trim_end_matches('/')
                .ends_with(" var/lib/berth")
        })
        .unwrap_or_else(|| panic!("no var/lib/berth in the layers:\n{listing}"));
    assert!(
        home_line.starts_with('d') && home_line.contains(&format!(" {uid}/")),
        "BERTH_HOME is the user's directory: {home_line}"
    );
    let ca = std::fs::read_to_string(rootfs.join("etc/ssl/certs/ca-certificates.crt")).unwrap();
    assert!(
        ca.matches("BEGIN CERTIFICATE").count() > 10,
        "the CA bundle is in the image"
    );

    // The binary in the image: its version, then the image's command (on a free port).
    let bin = rootfs.join("usr/local/bin/berth-server");
    let elf = std::fs::read(&bin).unwrap();
    assert!(!program_headers(&elf).contains(&PT_INTERP), "not static");
    let out = ok(Command::new(&bin).arg("--version"));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("berth-server {}", env!("CARGO_PKG_VERSION"))
    );
    let port = free_port();
    let args: Vec<String> = cmd
        .iter()
        .map(|a| a.replace(":4733", &format!(":{port}")))
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = TempDir::new("imagerun");
    let server = Running::start(&bin, run.path(), port, &args);
    assert!(
        server.log_text().contains(&format!("0.0.0.0:{port}")),
        "{}",
        server.log_text()
    );
    server.assert_health(&bin);
    let (status, _, _) = server.call(Request::get("/api/v1/sessions"));
    assert_eq!(status, 401);
}
