//! PostgreSQL against SQLite (issue 16): `berth-server` keeping its state in `berth.db`
//! against the same server on PostgreSQL (`--database postgres://…`), then one
//! PostgreSQL replica against two on one database, all in one run on this machine.
//!
//! PostgreSQL is a throwaway cluster started for the run (`scripts/pg-cluster.sh start
//! --watch`, stopped at the end; `BERTH_TEST_DATABASE_URL`, a superuser's URL, uses that
//! server instead), with a fresh database for each configuration. It is tuned for
//! tests (fsync and synchronous commit off), so its figures leave out the disk's flush
//! that a production server would pay on every commit; SQLite's are as `berth-server`
//! runs it.
//!
//! Each configuration is its own `berth-server`s in fresh homes, the same admin token
//! on each (`BERTH_ADMIN_TOKEN`), the `cat` command agent, and `berth daemon`s (long
//! polling, each in an installation of its own) running the tasks: the sessions are
//! unbound, so the leader hands their tasks to the daemons in turn. Requests go over
//! loopback TCP on keep-alive connections with the admin's bearer token.
//!
//! - **API round trip**: one daemon; one session whose event stream
//!   (`GET /api/v1/sessions/{id}/events`) is open on every replica. A sample is from
//!   posting a message (`POST /api/v1/sessions/{id}/messages`) to its task's final
//!   `task` event arriving on the stream of the replica that took the message. One
//!   message at a time, after a few untimed ones.
//! - **Tasks per second**: three daemons; S sessions × M messages posted at once over
//!   several connections; the clock runs from the first post to the last session's
//!   stream delivering its last `task` event (every stream is open before the first
//!   post). A task is lost unless the task list shows it `succeeded`.
//! - **Two replicas**: two `berth-server`s on one database; the first started leads
//!   (it runs every task and holds the daemons' connections, whichever replica a
//!   message came through). Messages go alternately through both (the round trip's one
//!   by one, the throughput's submitting connections split between them), each
//!   session's stream is read on one of them, and the daemons are spread: the first
//!   (the round trip's one) and the third connect to the other replica, which forwards
//!   their calls to the leader; the second connects to the leader.
//! - **Listing**: `GET /api/v1/sessions` with the admin token, from request to the
//!   last byte, on a keep-alive connection, with the configuration's sessions topped
//!   up to the listed count: over the API (several connections) on SQLite, by one
//!   `INSERT … SELECT … FROM generate_series` through `psql` on PostgreSQL.

use super::http;
use super::{
    Config, Goal, Row, ms_since, new_session, percentile_rows, post_message, progress, quantile,
};
use crate::{Berth, TempDir, berth_bin, free_port};
use anyhow::{Context as _, Result, anyhow, bail, ensure};
use berth_test_support::http::{Events as SseEvents, Request};
use serde_json::{Value, json};
use std::io::BufReader;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const BENCH: &str = "postgres";

/// The agent every configuration runs.
const AGENT: &str = "cat";

/// Untimed round trips before the timed ones.
const WARM_UP: usize = 3;

/// Daemons for the throughput.
const DAEMONS: usize = 3;

/// How long a stream may stay silent before the run gives up on it.
const QUIET: Duration = Duration::from_secs(120);

/// The admin's bearer token, the same on every replica (`BERTH_ADMIN_TOKEN`).
fn admin_token() -> String {
    format!("{:064x}", 0xbe27_be4c_u64)
}

// ---- a minimal HTTP/1.1 client over TCP (http.rs reads the answers) --------------------

fn tcp(addr: &str, timeout: Duration) -> Result<BufReader<TcpStream>> {
    let s = TcpStream::connect(addr).with_context(|| format!("connect to {addr}"))?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(timeout))?;
    Ok(BufReader::with_capacity(64 * 1024, s))
}

/// One keep-alive connection to a `berth-server`, as the admin.
type Api = http::Conn<TcpStream>;

fn api(addr: &str) -> Result<Api> {
    Api::tcp(addr, &admin_token())
}

/// A session's event stream on one `berth-server`, read as it arrives.
struct Events {
    events: SseEvents<BufReader<TcpStream>>,
}

impl Events {
    fn open(addr: &str, session: &str) -> Result<Events> {
        let s = tcp(addr, QUIET)?.into_inner();
        let req = Request::get(&format!("/api/v1/sessions/{session}/events?after=0"))
            .bearer(&admin_token());
        let events = SseEvents::open(s, addr, req)
            .with_context(|| format!("events of {session} on {addr}"))?;
        Ok(Events { events })
    }

    /// The next event's name and data; `None` when the server ends the stream.
    fn next(&mut self) -> Result<Option<(String, String)>> {
        Ok(self.events.next_event()?.map(|ev| (ev.event, ev.data)))
    }

    /// Reads until `task`'s `task` event; fails unless it succeeded.
    fn until_task(&mut self, task: &str) -> Result<()> {
        while let Some((event, data)) = self.next()? {
            if event != "task" {
                continue;
            }
            let doc: Value = serde_json::from_str(&data).context("event data is not JSON")?;
            if doc["task_id"].as_str() == Some(task) {
                let status = &doc["payload"]["task"]["status"];
                ensure!(status == "succeeded", "task {task} ended {status}");
                return Ok(());
            }
        }
        bail!("the event stream ended before task {task} finished")
    }
}

// ---- servers, daemons, databases -------------------------------------------------------

/// `berth-server` next to the `berth` under test, built (in the same profile) if
/// missing.
fn server_bin() -> Result<PathBuf> {
    let bin = berth_bin().with_file_name("berth-server");
    if !bin.exists() {
        let release = bin
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|d| d == "release");
        progress(format!("postgres: building {}", bin.display()));
        let mut c = Command::new(env!("CARGO"));
        c.args(["build", "-p", "berth-web", "--bin", "berth-server"]);
        if release {
            c.arg("--release");
        }
        let status = c.current_dir(super::workspace_root()).status()?;
        ensure!(status.success(), "building berth-server failed");
        ensure!(bin.exists(), "no {} after building it", bin.display());
    }
    Ok(bin)
}

/// One `berth-server` process, killed when dropped.
struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `berth-server` in `root/tag` on a free loopback port (on `database`, or
    /// SQLite in its home) and waits until it listens.
    fn start(root: &Path, tag: &str, database: Option<&str>) -> Result<Server> {
        let home = root.join(tag);
        let log = root.join(format!("{tag}.log"));
        let out = std::fs::File::create(&log)?;
        let addr = format!("127.0.0.1:{}", free_port());
        let mut c = Command::new(server_bin()?);
        c.arg("--listen").arg(&addr).arg("--home").arg(&home);
        if let Some(db) = database {
            c.args(["--database", db]);
        }
        let child = c
            .env("BERTH_ADMIN_TOKEN", admin_token())
            .env_remove("BERTH_DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("start berth-server")?;
        let mut server = Server { child, addr };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !home.join("serve.json").exists() {
            let said = || std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(status) = server.child.try_wait()? {
                bail!("berth-server {tag} exited ({status}): {}", said());
            }
            ensure!(
                Instant::now() < deadline,
                "berth-server {tag} did not start in 30 s: {}",
                said()
            );
            thread::sleep(Duration::from_millis(20));
        }
        // serve.json is written once the listener is bound.
        api(&server.addr)?.json("GET", "/api/v1/health", None)?;
        Ok(server)
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// One configuration: its servers (the first leads), its daemons.
struct Deployment {
    label: String,
    tag: String,
    // Dropped in this order: the daemons stop before the servers they talk to.
    daemons: Vec<Berth>,
    servers: Vec<Server>,
    /// The servers' homes and logs, removed last.
    _root: TempDir,
}

impl Deployment {
    /// `replicas` servers on `database` (SQLite when `None`: one server), started one
    /// after another so the first leads; the `cat` agent added.
    fn start(
        label: &str,
        tag: &str,
        database: Option<&str>,
        replicas: usize,
    ) -> Result<Deployment> {
        let root = TempDir::new(&format!("bench-{tag}"));
        let servers = (0..replicas)
            .map(|i| Server::start(root.path(), &format!("{tag}-{i}"), database))
            .collect::<Result<Vec<_>>>()?;
        api(&servers[0].addr)?.json(
            "POST",
            "/api/v1/agents",
            Some(&json!({"name": AGENT, "kind": "command", "command": ["cat"]})),
        )?;
        Ok(Deployment {
            label: label.to_owned(),
            tag: tag.to_owned(),
            servers,
            daemons: Vec::new(),
            _root: root,
        })
    }

    /// Starts the next daemon, connected to server `daemons.len() + 1` modulo the
    /// replicas (the first to the last replica, the next to the leader, …), and waits
    /// until it registered.
    fn add_daemon(&mut self) -> Result<()> {
        let i = self.daemons.len();
        let name = format!("m{i}");
        let doc = api(&self.servers[0].addr)?.json(
            "POST",
            "/api/v1/daemon/tokens",
            Some(&json!({ "name": name })),
        )?;
        let token = doc["token"].as_str().context("no daemon token")?;
        let via = &self.servers[(i + 1) % self.servers.len()];
        let mut d = Berth::new(&format!("{}-{name}", self.tag));
        d.daemon(&via.url(), token, &name);
        self.daemons.push(d);
        Ok(())
    }

    fn addrs(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.addr.clone()).collect()
    }
}

/// A throwaway PostgreSQL cluster, stopped when dropped; on someone else's server,
/// the databases made here are dropped instead.
struct Cluster {
    url: String,
    ours: bool,
    made: Vec<String>,
}

impl Cluster {
    fn start() -> Result<Cluster> {
        if let Ok(url) = std::env::var("BERTH_TEST_DATABASE_URL")
            && !url.is_empty()
        {
            return Ok(Cluster {
                url,
                ours: false,
                made: Vec::new(),
            });
        }
        let out = Command::new(script())
            .args(["start", "--watch", &std::process::id().to_string()])
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .context("run scripts/pg-cluster.sh")?;
        ensure!(
            out.status.success(),
            "scripts/pg-cluster.sh could not start PostgreSQL (install Debian's `postgresql` \
             package, or set BERTH_TEST_DATABASE_URL): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(Cluster {
            url: String::from_utf8(out.stdout)?.trim().to_owned(),
            ours: true,
            made: Vec::new(),
        })
    }

    /// A new, empty database; its URL.
    fn database(&mut self, tag: &str) -> Result<String> {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH)?.as_nanos();
        let name = format!("bench_{tag}_{}_{nanos}", std::process::id());
        psql(&self.url, &format!("CREATE DATABASE {name}"))?;
        self.made.push(name.clone());
        let (base, _) = self.url.rsplit_once('/').context("a URL with a database")?;
        Ok(format!("{base}/{name}"))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.ours {
            let _ = Command::new(script())
                .args(["stop", &self.url])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        } else {
            for name in &self.made {
                let _ = psql(
                    &self.url,
                    &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                );
            }
        }
    }
}

fn script() -> PathBuf {
    super::workspace_root().join("scripts/pg-cluster.sh")
}

/// Runs `sql` through `psql` on `url`; its unaligned output.
fn psql(url: &str, sql: &str) -> Result<String> {
    let out = Command::new("psql")
        .args([
            url,
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ])
        .stdin(Stdio::null())
        .output()
        .context("run psql (Debian's postgresql-client)")?;
    ensure!(
        out.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

// ---- the measurements ------------------------------------------------------------------

/// `n` timed round trips (after [`WARM_UP`]) on one session, posted through the
/// replicas in turn; the samples (ms) by the replica that took the message.
fn round_trips(d: &Deployment, n: usize) -> Result<Vec<Vec<f64>>> {
    let addrs = d.addrs();
    let mut conns = addrs.iter().map(|a| api(a)).collect::<Result<Vec<_>>>()?;
    let session = new_session(&mut conns[0], AGENT, "round trips")?;
    let mut streams = addrs
        .iter()
        .map(|a| Events::open(a, &session))
        .collect::<Result<Vec<_>>>()?;
    let mut out = vec![Vec::new(); addrs.len()];
    for i in 0..WARM_UP + n {
        let k = i % addrs.len();
        let t = Instant::now();
        let task = post_message(&mut conns[k], &session, &format!("message {i}"))?;
        streams[k].until_task(&task)?;
        if i >= WARM_UP {
            out[k].push(ms_since(t));
        }
        if (i + 1) % 100 == 0 {
            progress(format!(
                "postgres: {} round trips {}/{}",
                d.label,
                i + 1,
                WARM_UP + n
            ));
        }
    }
    Ok(out)
}

/// What one throughput run saw.
struct Rate {
    total: usize,
    ended: usize,
    secs: f64,
    submit_s: f64,
    lost: usize,
}

impl Rate {
    fn per_s(&self) -> f64 {
        self.ended as f64 / self.secs
    }
}

/// `sessions` × `per` messages at once over `submitters` connections (spread over the
/// replicas), watched on streams spread the same way.
fn throughput(d: &Deployment, sessions: usize, per: usize, submitters: usize) -> Result<Rate> {
    let addrs = d.addrs();
    let mut conn = api(&addrs[0])?;
    let ids = (0..sessions)
        .map(|i| new_session(&mut conn, AGENT, &format!("throughput {i}")))
        .collect::<Result<Vec<_>>>()?;
    // Every stream is open before the first message, so no task event is missed.
    let mut streams = Vec::new();
    for (i, s) in ids.iter().enumerate() {
        streams.push(Events::open(&addrs[i % addrs.len()], s)?);
    }
    let watchers: Vec<_> = streams
        .into_iter()
        .map(|mut ev| {
            thread::spawn(move || -> (Option<Instant>, usize) {
                let mut ended = 0;
                while ended < per {
                    match ev.next() {
                        Ok(Some((e, _))) if e == "task" => ended += 1,
                        Ok(Some(_)) => {}
                        Ok(None) | Err(_) => return (None, ended),
                    }
                }
                (Some(Instant::now()), ended)
            })
        })
        .collect();
    let total = sessions * per;
    progress(format!(
        "postgres: {}: {sessions} × {per} = {total} messages over {submitters} connections",
        d.label
    ));
    let start = Instant::now();
    let posters: Vec<_> = (0..submitters)
        .map(|k| {
            let mine: Vec<String> = ids.iter().skip(k).step_by(submitters).cloned().collect();
            let addr = addrs[k % addrs.len()].clone();
            thread::spawn(move || -> Result<usize> {
                let mut conn = api(&addr)?;
                for j in 0..per {
                    for s in &mine {
                        post_message(&mut conn, s, &format!("message {j}"))?;
                    }
                }
                Ok(mine.len() * per)
            })
        })
        .collect();
    let mut submitted = 0;
    for h in posters {
        submitted += h.join().map_err(|_| anyhow!("a submitter panicked"))??;
    }
    ensure!(submitted == total, "{submitted} of {total} messages posted");
    let submit_s = start.elapsed().as_secs_f64();
    let (mut last, mut ended) = (None::<Instant>, 0);
    for h in watchers {
        let (at, n) = h.join().map_err(|_| anyhow!("a watcher panicked"))?;
        ended += n;
        last = last.max(at);
    }
    let secs = last
        .map(|t| t.duration_since(start).as_secs_f64())
        .context("no session finished its tasks")?;
    let tasks = conn.json("GET", "/api/v1/tasks", None)?;
    let ok = tasks
        .as_array()
        .context("the task list is not an array")?
        .iter()
        .filter(|t| {
            t["status"] == "succeeded"
                && t["session_id"]
                    .as_str()
                    .is_some_and(|s| ids.iter().any(|i| i == s))
        })
        .count();
    progress(format!(
        "postgres: {}: {ended}/{total} ended in {secs:.2} s, {ok} succeeded",
        d.label
    ));
    Ok(Rate {
        total,
        ended,
        secs,
        submit_s,
        lost: total.saturating_sub(ok),
    })
}

/// The number of sessions `conn` lists.
fn listed(conn: &mut Api) -> Result<usize> {
    let list = conn.json("GET", "/api/v1/sessions", None)?;
    Ok(list.as_array().map_or(0, Vec::len))
}

/// What the listing measured: lists of an unchanged set (ms), lists each just after a
/// new session (ms; a replica cannot serve what it kept), and the answer's size.
struct Listing {
    unchanged: Vec<f64>,
    changed: Vec<f64>,
    bytes: usize,
}

/// Tops the deployment's sessions up to `n` with `fill(missing)`, then times `requests`
/// listings of those, and `requests` more each after one more session.
fn listing(
    d: &Deployment,
    n: usize,
    requests: usize,
    fill: impl FnOnce(usize) -> Result<()>,
) -> Result<Listing> {
    let mut conn = api(&d.servers[0].addr)?;
    let have = listed(&mut conn)?;
    ensure!(
        have <= n,
        "{} already has {have} sessions, more than the {n} to list",
        d.label
    );
    progress(format!("postgres: {}: {} more sessions", d.label, n - have));
    fill(n - have)?;
    let count = listed(&mut conn)?;
    ensure!(
        count == n,
        "{}: listed {count} sessions, expected {n}",
        d.label
    );
    let (mut unchanged, mut bytes) = (Vec::with_capacity(requests), 0);
    for _ in 0..requests {
        let t = Instant::now();
        let (status, body) = conn.request("GET", "/api/v1/sessions", None)?;
        unchanged.push(ms_since(t));
        ensure!(status == 200, "GET /api/v1/sessions: HTTP {status}");
        bytes = body.len();
    }
    let mut changed = Vec::with_capacity(requests);
    for i in 0..requests {
        new_session(&mut conn, AGENT, &format!("changed {i}"))?;
        let t = Instant::now();
        let (status, body) = conn.request("GET", "/api/v1/sessions", None)?;
        changed.push(ms_since(t));
        ensure!(status == 200, "GET /api/v1/sessions: HTTP {status}");
        let count = serde_json::from_slice::<Vec<serde_json::Value>>(&body)?.len();
        ensure!(
            count == n + i + 1,
            "{}: listed {count} sessions just after creating one more, expected {}",
            d.label,
            n + i + 1
        );
    }
    Ok(Listing {
        unchanged,
        changed,
        bytes,
    })
}

/// `n` sessions over the API, `connections` at once.
fn create_over_api(addr: &str, n: usize, connections: usize) -> Result<()> {
    let makers: Vec<_> = (0..connections)
        .map(|k| {
            let addr = addr.to_owned();
            let count = (k..n).step_by(connections).count();
            thread::spawn(move || -> Result<()> {
                let mut conn = api(&addr)?;
                for i in 0..count {
                    new_session(&mut conn, AGENT, &format!("listed {k}-{i}"))?;
                }
                Ok(())
            })
        })
        .collect();
    for h in makers {
        h.join()
            .map_err(|_| anyhow!("a session maker panicked"))??;
    }
    Ok(())
}

/// `n` sessions of the admin's, inserted by one statement.
fn insert_sessions(database: &str, n: usize) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    psql(
        database,
        &format!(
            "INSERT INTO sessions (id, title, agent, origin, created_at, updated_at, owner)
             SELECT gen_random_uuid()::text, 'listed ' || i, '{AGENT}', 'web', at, at, 'admin'
             FROM generate_series(1, {n}) i,
                  LATERAL (SELECT to_char((now() AT TIME ZONE 'UTC') + i * interval '1 ms',
                                          'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS at) t"
        ),
    )?;
    Ok(())
}

/// Everything one configuration measures.
struct Figures {
    trips: Vec<Vec<f64>>,
    rate: Rate,
    list: Option<Listing>,
}

/// Tops a deployment's sessions up by the given count.
type Fill<'a> = &'a dyn Fn(&Deployment, usize) -> Result<()>;

/// Round trips with one daemon, then throughput with [`DAEMONS`], then (when `fill`
/// is given) the listing.
fn measure(cfg: &Config, mut d: Deployment, fill: Option<Fill<'_>>) -> Result<Figures> {
    progress(format!("postgres: {}", d.label));
    d.add_daemon()?;
    let trips = round_trips(&d, cfg.pg_round_trips)?;
    while d.daemons.len() < DAEMONS {
        d.add_daemon()?;
    }
    let rate = throughput(&d, cfg.pg_sessions, cfg.pg_messages, cfg.submitters)?;
    let list = match fill {
        Some(fill) => Some(listing(&d, cfg.list_sessions, cfg.list_requests, |m| {
            fill(&d, m)
        })?),
        None => None,
    };
    Ok(Figures { trips, rate, list })
}

fn p50(v: &[f64]) -> f64 {
    quantile(v, 0.5).unwrap_or(f64::NAN)
}

pub fn run(cfg: &Config) -> Result<Vec<Row>> {
    let mut cluster = match Cluster::start() {
        Ok(c) => c,
        Err(e) => {
            return Ok(vec![Row::not_available(
                BENCH,
                "PostgreSQL against SQLite",
                &format!("{e:#}"),
            )]);
        }
    };
    let submitters = cfg.submitters;
    let sqlite = measure(
        cfg,
        Deployment::start("SQLite, 1 server", "pg-sqlite", None, 1)?,
        Some(&|d: &Deployment, m| create_over_api(&d.servers[0].addr, m, submitters)),
    )?;
    let one_db = cluster.database("one")?;
    let one = measure(
        cfg,
        Deployment::start("PostgreSQL, 1 server", "pg-one", Some(&one_db), 1)?,
        Some(&|_: &Deployment, m| insert_sessions(&one_db, m)),
    )?;
    let two_db = cluster.database("two")?;
    let two = measure(
        cfg,
        Deployment::start("PostgreSQL, 2 replicas", "pg-two", Some(&two_db), 2)?,
        None,
    )?;
    drop(cluster);

    let mut rows = Vec::new();
    let all = |f: &Figures| f.trips.concat();
    let configs = [
        ("SQLite, 1 server", &sqlite),
        ("PostgreSQL, 1 server", &one),
        ("PostgreSQL, 2 replicas, alternating", &two),
    ];
    for (label, f) in configs {
        rows.extend(percentile_rows(
            BENCH,
            &format!("API round trip, {label}"),
            &all(f),
            None,
        ));
    }
    if let [leader, other] = &two.trips[..] {
        rows.push(
            Row::new(
                BENCH,
                "API round trip, 2 replicas, posted via the leader p50",
                p50(leader),
                "ms",
                None,
            )
            .with_note(format!("n={}", leader.len())),
        );
        rows.push(
            Row::new(
                BENCH,
                "API round trip, 2 replicas, posted via the other replica p50",
                p50(other),
                "ms",
                None,
            )
            .with_note(format!(
                "n={}; the task still runs through the leader: the message reaches its \
                 scheduler by NOTIFY, the stream by NOTIFY back",
                other.len()
            )),
        );
    }
    rows.push(
        Row::new(
            BENCH,
            "round trip p50, PostgreSQL / SQLite (1 server)",
            p50(&all(&one)) / p50(&all(&sqlite)),
            "x",
            Some(Goal::AtMost(1.5)),
        )
        .with_note("what the database adds to a message's round trip; issue 57's goal"),
    );
    rows.push(Row::new(
        BENCH,
        "round trip p50, 2 replicas / 1 (PostgreSQL)",
        p50(&all(&two)) / p50(&all(&one)),
        "x",
        None,
    ));
    let (s, m) = (cfg.pg_sessions, cfg.pg_messages);
    for (label, f) in configs {
        let r = &f.rate;
        let mut note = format!(
            "{} of {} tasks ended in {:.2} s; all posted in {:.2} s",
            r.ended, r.total, r.secs, r.submit_s
        );
        if f.trips.len() > 1 {
            note.push_str("; every task runs through the leader");
        }
        rows.push(
            Row::new(
                BENCH,
                &format!("tasks/s, {label}, {s} sessions × {m} messages, {DAEMONS} daemons"),
                r.per_s(),
                "tasks/s",
                None,
            )
            .with_note(note),
        );
    }
    rows.push(Row::new(
        BENCH,
        "tasks/s, PostgreSQL / SQLite (1 server)",
        one.rate.per_s() / sqlite.rate.per_s(),
        "x",
        None,
    ));
    rows.push(Row::new(
        BENCH,
        "tasks/s, 2 replicas / 1 (PostgreSQL)",
        two.rate.per_s() / one.rate.per_s(),
        "x",
        None,
    ));
    rows.push(Row::new(
        BENCH,
        "lost tasks (not `succeeded`), all three throughput runs",
        configs.iter().map(|(_, f)| f.rate.lost).sum::<usize>() as f64,
        "tasks",
        Some(Goal::AtMost(0.0)),
    ));
    let n = cfg.list_sessions;
    for (label, f) in [("SQLite", &sqlite), ("PostgreSQL", &one)] {
        let Some(l) = &f.list else {
            continue;
        };
        let mut list = percentile_rows(
            BENCH,
            &format!("GET /api/v1/sessions, {n} sessions, berth-server on {label}"),
            &l.unchanged,
            Some(Goal::AtMost(20.0)),
        );
        if let Some(first) = list.first_mut() {
            first.note = Some(format!(
                "{} KB of JSON per answer; nothing changed between lists",
                l.bytes / 1024
            ));
        }
        rows.extend(list);
        let mut list = percentile_rows(
            BENCH,
            &format!("GET /api/v1/sessions, {n}+ sessions, each just after a new one, on {label}"),
            &l.changed,
            None,
        );
        if let Some(first) = list.first_mut() {
            first.note = Some("read again: a new session is a change to the list".into());
        }
        rows.extend(list);
    }
    Ok(rows)
}
