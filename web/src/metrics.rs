//! What a server counts, for Prometheus: `--metrics-listen ADDR` (or
//! `BERTH_METRICS_LISTEN`) serves `GET /metrics` there, and nothing else, without a
//! token.
//!
//! Every name starts with `berth_`. Labels are closed enums (a task's final status, why
//! a task waits, what kind of store error): never a session id, a path or a member's
//! name, so the text holds no secret and no user data.
//!
//! The format is prometheus-client's OpenMetrics text encoding. This module is a leaf:
//! it knows nothing of the store, the scheduler or the daemons; they call its typed
//! methods, and what is state rather than an event (tasks waiting, daemons online, the
//! leadership) is read at each scrape by the `sample` function [`serve`] is given.

use berth_core::api::TaskStatus;
use berth_core::exec::AgentKind;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

/// The content type of [`Metrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The longest a scrape waits for its sample (the store's count of waiting tasks):
/// with the database away, the last values are served.
pub const SAMPLE_WAIT: Duration = Duration::from_secs(2);

/// Latency buckets, in seconds: a millisecond to five minutes.
const BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// Why a task waits (`berth_tasks_waiting{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitReason {
    /// `queued` and not handed out yet: behind its session's running task, or for a
    /// free run slot.
    Queued,
    /// `waiting_lock`: another run holds its directory.
    DirectoryLock,
    /// `waiting_daemon` on a bound session: its machine is offline.
    MachineOffline,
    /// `waiting_daemon` on an unbound session: no machine of its owner is online.
    NoMachine,
    /// `waiting_approval`: its agent waits for a person's answer.
    Approval,
}

impl WaitReason {
    pub const ALL: [WaitReason; 5] = [
        WaitReason::Queued,
        WaitReason::DirectoryLock,
        WaitReason::MachineOffline,
        WaitReason::NoMachine,
        WaitReason::Approval,
    ];

    /// The label's value.
    pub const fn as_str(self) -> &'static str {
        match self {
            WaitReason::Queued => "queued",
            WaitReason::DirectoryLock => "directory_lock",
            WaitReason::MachineOffline => "machine_offline",
            WaitReason::NoMachine => "no_machine",
            WaitReason::Approval => "approval",
        }
    }
}

impl EncodeLabelValue for WaitReason {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

/// What kind of store error (`berth_store_errors_total{kind}`): the database's
/// faults, never a request's own (an unknown id, a name taken).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreErrorKind {
    /// The database cannot be reached (PostgreSQL down or restarting).
    Unavailable,
    /// The database refused a statement, a migration, or its file.
    Database,
    /// Stored data is not valid.
    Corrupt,
    /// The store's own machinery failed (a worker thread).
    Internal,
}

impl StoreErrorKind {
    pub const ALL: [StoreErrorKind; 4] = [
        StoreErrorKind::Unavailable,
        StoreErrorKind::Database,
        StoreErrorKind::Corrupt,
        StoreErrorKind::Internal,
    ];

    /// The label's value.
    pub const fn as_str(self) -> &'static str {
        match self {
            StoreErrorKind::Unavailable => "unavailable",
            StoreErrorKind::Database => "database",
            StoreErrorKind::Corrupt => "corrupt",
            StoreErrorKind::Internal => "internal",
        }
    }
}

impl EncodeLabelValue for StoreErrorKind {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

/// A task's final status, as a label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Final(TaskStatus);

impl EncodeLabelValue for Final {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.0.as_str())
    }
}

const FINAL: [TaskStatus; 5] = [
    TaskStatus::Succeeded,
    TaskStatus::Failed,
    TaskStatus::Cancelled,
    TaskStatus::Interrupted,
    TaskStatus::Refused,
];

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StatusLabel {
    status: Final,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReasonLabel {
    reason: WaitReason,
}

/// A decision, as a label value: `allow`, `deny` or `timeout` (a deny nobody made).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DecisionKind(&'static str);

impl DecisionKind {
    pub const ALL: [DecisionKind; 3] = [
        DecisionKind("allow"),
        DecisionKind("deny"),
        DecisionKind("timeout"),
    ];

    /// The label of a decision.
    pub fn of(d: &berth_core::approval::Decision) -> DecisionKind {
        use berth_core::approval::{DecidedBy, Verdict};
        match (d.decision, d.by) {
            (_, DecidedBy::Timeout) => DecisionKind("timeout"),
            (Verdict::Allow, _) => DecisionKind("allow"),
            (Verdict::Deny, _) => DecisionKind("deny"),
        }
    }
}

impl EncodeLabelValue for DecisionKind {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DecisionLabel {
    decision: DecisionKind,
}

/// Which tokens (`berth_tokens_total{direction}`): the fields of a task's usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Input,
    Output,
    CacheRead,
    CacheWrite,
}

impl Direction {
    pub const ALL: [Direction; 4] = [
        Direction::Input,
        Direction::Output,
        Direction::CacheRead,
        Direction::CacheWrite,
    ];

    /// The label's value: the usage field's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Direction::Input => "input",
            Direction::Output => "output",
            Direction::CacheRead => "cache_read",
            Direction::CacheWrite => "cache_write",
        }
    }

    fn of(self, u: &berth_core::usage::Usage) -> u64 {
        match self {
            Direction::Input => u.input,
            Direction::Output => u.output,
            Direction::CacheRead => u.cache_read,
            Direction::CacheWrite => u.cache_write,
        }
    }
}

impl EncodeLabelValue for Direction {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

/// An agent kind, as a label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Kind(&'static str);

impl Kind {
    const fn of(kind: AgentKind) -> Kind {
        Kind(match kind {
            AgentKind::Claude => "claude",
            AgentKind::Codex => "codex",
            AgentKind::Command => "command",
            AgentKind::Acp => "acp",
        })
    }
}

const KINDS: [AgentKind; 4] = [
    AgentKind::Claude,
    AgentKind::Codex,
    AgentKind::Command,
    AgentKind::Acp,
];

impl EncodeLabelValue for Kind {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TokensLabel {
    direction: Direction,
    agent_kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct KindLabel {
    kind: StoreErrorKind,
}

/// A server's metrics; cheap to clone, every clone counts into the same registry.
#[derive(Debug, Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    registry: Registry,
    finished: Family<StatusLabel, Counter>,
    waiting: Family<ReasonLabel, Gauge>,
    dispatch: Histogram,
    claim: Histogram,
    daemons_online: Gauge,
    sse_clients: Gauge,
    store_errors: Family<KindLabel, Counter>,
    leader: Gauge,
    approvals: Family<DecisionLabel, Counter>,
    tokens: Family<TokensLabel, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every family registered, every label value present (at zero), so a scrape
    /// shows a counter before it first moves.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("berth");
        let finished = Family::<StatusLabel, Counter>::default();
        for s in FINAL {
            drop(finished.get_or_create(&StatusLabel { status: Final(s) }));
        }
        registry.register(
            "tasks_finished",
            "Tasks that reached a final status, by status.",
            finished.clone(),
        );
        let waiting = Family::<ReasonLabel, Gauge>::default();
        for reason in WaitReason::ALL {
            drop(waiting.get_or_create(&ReasonLabel { reason }));
        }
        registry.register(
            "tasks_waiting",
            "Tasks waiting now, by reason (read from the store at each scrape).",
            waiting.clone(),
        );
        let dispatch = Histogram::new(BUCKETS);
        registry.register_with_unit(
            "dispatch_latency",
            "From a task being queued to its hand-over to an executor or a daemon's queue.",
            Unit::Seconds,
            dispatch.clone(),
        );
        let claim = Histogram::new(BUCKETS);
        registry.register_with_unit(
            "claim_latency",
            "From a task being queued for a daemon's machine to that daemon claiming it.",
            Unit::Seconds,
            claim.clone(),
        );
        let daemons_online = Gauge::default();
        registry.register(
            "daemons_online",
            "Remote daemons online (known to the leader).",
            daemons_online.clone(),
        );
        let sse_clients = Gauge::default();
        registry.register(
            "sse_clients",
            "Event streams open on this process.",
            sse_clients.clone(),
        );
        let store_errors = Family::<KindLabel, Counter>::default();
        for kind in StoreErrorKind::ALL {
            drop(store_errors.get_or_create(&KindLabel { kind }));
        }
        registry.register(
            "store_errors",
            "Store calls that failed for the database's sake, by kind.",
            store_errors.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this process leads (runs the tasks), else 0.",
            leader.clone(),
        );
        let approvals = Family::<DecisionLabel, Counter>::default();
        for decision in DecisionKind::ALL {
            drop(approvals.get_or_create(&DecisionLabel { decision }));
        }
        registry.register(
            "approvals",
            "Requests put to a person (the ask policy) and decided, by decision.",
            approvals.clone(),
        );
        let tokens = Family::<TokensLabel, Counter>::default();
        for direction in Direction::ALL {
            for kind in KINDS {
                drop(tokens.get_or_create(&TokensLabel {
                    direction,
                    agent_kind: Kind::of(kind),
                }));
            }
        }
        registry.register(
            "tokens",
            "Tokens the agents reported for finished tasks, by direction and agent kind.",
            tokens.clone(),
        );
        Metrics {
            inner: Arc::new(Inner {
                tokens,
                approvals,
                registry,
                finished,
                waiting,
                dispatch,
                claim,
                daemons_online,
                sse_clients,
                store_errors,
                leader,
            }),
        }
    }

    /// A task reached `status`; a status that is not final is not counted.
    pub fn task_finished(&self, status: TaskStatus) {
        if status.is_final() {
            self.inner
                .finished
                .get_or_create(&StatusLabel {
                    status: Final(status),
                })
                .inc();
        }
    }

    /// A task of an agent of `kind` finished having reported `usage`.
    pub fn tokens(&self, kind: AgentKind, usage: &berth_core::usage::Usage) {
        for direction in Direction::ALL {
            self.inner
                .tokens
                .get_or_create(&TokensLabel {
                    direction,
                    agent_kind: Kind::of(kind),
                })
                .inc_by(direction.of(usage));
        }
    }

    /// A request was decided.
    pub fn approval_decided(&self, d: &berth_core::approval::Decision) {
        self.inner
            .approvals
            .get_or_create(&DecisionLabel {
                decision: DecisionKind::of(d),
            })
            .inc();
    }

    /// How many tasks wait for `reason` now.
    pub fn set_waiting(&self, reason: WaitReason, count: i64) {
        self.inner
            .waiting
            .get_or_create(&ReasonLabel { reason })
            .set(count);
    }

    /// A task was handed to an executor (or a daemon's queue) `latency` after it was
    /// queued.
    pub fn dispatch_latency(&self, latency: Duration) {
        self.inner.dispatch.observe(latency.as_secs_f64());
    }

    /// A daemon claimed a task `latency` after it was queued for its machine.
    pub fn claim_latency(&self, latency: Duration) {
        self.inner.claim.observe(latency.as_secs_f64());
    }

    pub fn set_daemons_online(&self, count: usize) {
        self.inner
            .daemons_online
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    pub fn set_leader(&self, leads: bool) {
        self.inner.leader.set(i64::from(leads));
    }

    /// A store call failed with an error of `kind`.
    pub fn store_error(&self, kind: StoreErrorKind) {
        self.inner
            .store_errors
            .get_or_create(&KindLabel { kind })
            .inc();
    }

    /// Counts an event stream while the guard lives.
    pub fn sse_client(&self) -> SseClient {
        self.inner.sse_clients.inc();
        SseClient(self.inner.sse_clients.clone())
    }

    /// The OpenMetrics text of every family ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &self.inner.registry) {
            tracing::error!(error = %e, "could not encode the metrics");
        }
        text
    }
}

/// One open event stream, counted in `berth_sse_clients` until dropped.
#[derive(Debug)]
pub struct SseClient(Gauge);

impl Drop for SseClient {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Serves `GET /metrics` (and only that: any other path is 404) on `listener` until
/// `until` resolves. Before each answer, `sample` reads what is state rather than an
/// event into `metrics` (bounded by [`SAMPLE_WAIT`]). No token: the text holds counts
/// and closed labels only.
pub async fn serve<F, Fut>(
    listener: tokio::net::TcpListener,
    metrics: Metrics,
    sample: F,
    until: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    axum::serve(listener, router(metrics, sample))
        .with_graceful_shutdown(until)
        .await
}

fn router<F, Fut>(metrics: Metrics, sample: F) -> axum::Router
where
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let scrape = move || {
        let (metrics, sample) = (metrics.clone(), sample.clone());
        async move {
            if tokio::time::timeout(SAMPLE_WAIT, sample()).await.is_err() {
                tracing::warn!("the metrics' sample took too long; serving the last values");
            }
            (
                [(axum::http::header::CONTENT_TYPE, CONTENT_TYPE)],
                metrics.encode(),
            )
        }
    };
    axum::Router::new()
        .route("/metrics", axum::routing::get(scrape))
        .fallback(|| async { (axum::http::StatusCode::NOT_FOUND, "not found\n") })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// The value of the sample line `line` starts with (`name{labels}`), if present.
    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    }

    #[test]
    fn every_family_is_berth_prefixed_and_present_at_zero() {
        let text = Metrics::new().encode();
        let families: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split(' ').next().unwrap())
            .collect();
        assert_eq!(
            families,
            [
                "berth_tasks_finished",
                "berth_tasks_waiting",
                "berth_dispatch_latency_seconds",
                "berth_claim_latency_seconds",
                "berth_daemons_online",
                "berth_sse_clients",
                "berth_store_errors",
                "berth_leader",
                "berth_approvals",
                "berth_tokens",
            ]
        );
        for d in ["allow", "deny", "timeout"] {
            assert_eq!(
                value(&text, &format!("berth_approvals_total{{decision=\"{d}\"}}")),
                Some(0.0),
                "{text}"
            );
        }
        assert_eq!(
            value(&text, r#"berth_tasks_waiting{reason="approval"}"#),
            Some(0.0)
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert_eq!(
            value(&text, r#"berth_tasks_finished_total{status="succeeded"}"#),
            Some(0.0)
        );
        assert_eq!(
            value(&text, r#"berth_tasks_waiting{reason="machine_offline"}"#),
            Some(0.0)
        );
        assert_eq!(
            value(&text, r#"berth_store_errors_total{kind="unavailable"}"#),
            Some(0.0)
        );
    }

    #[test]
    fn tokens_count_by_direction_and_agent_kind() {
        let m = Metrics::new();
        let text = m.encode();
        for d in Direction::ALL {
            for k in ["claude", "codex", "command", "acp"] {
                let series = format!(
                    "berth_tokens_total{{direction=\"{}\",agent_kind=\"{k}\"}}",
                    d.as_str()
                );
                assert_eq!(value(&text, &series), Some(0.0), "{series} at zero: {text}");
            }
        }
        let usage = |input, output, cache_read, cache_write| berth_core::usage::Usage {
            input,
            output,
            cache_read,
            cache_write,
            cost_usd: None,
            raw: serde_json::json!({}),
        };
        m.tokens(AgentKind::Claude, &usage(10, 2, 3, 4));
        m.tokens(AgentKind::Claude, &usage(1, 1, 0, 0));
        m.tokens(AgentKind::Acp, &usage(7, 0, 0, 0));
        let text = m.encode();
        let got = |d: &str, k: &str| {
            value(
                &text,
                &format!("berth_tokens_total{{direction=\"{d}\",agent_kind=\"{k}\"}}"),
            )
        };
        assert_eq!(
            [
                got("input", "claude"),
                got("output", "claude"),
                got("cache_read", "claude"),
                got("cache_write", "claude")
            ],
            [Some(11.0), Some(3.0), Some(3.0), Some(4.0)]
        );
        assert_eq!(
            (got("input", "acp"), got("input", "codex")),
            (Some(7.0), Some(0.0))
        );
    }

    #[test]
    fn counters_gauges_and_histograms_move() {
        let m = Metrics::new();
        m.task_finished(TaskStatus::Succeeded);
        m.task_finished(TaskStatus::Succeeded);
        m.task_finished(TaskStatus::Refused);
        // Not final: not counted.
        m.task_finished(TaskStatus::Running);
        m.set_waiting(WaitReason::NoMachine, 3);
        m.dispatch_latency(Duration::from_millis(3));
        m.claim_latency(Duration::from_secs(2));
        m.set_daemons_online(2);
        m.set_leader(true);
        m.store_error(StoreErrorKind::Unavailable);
        m.set_waiting(WaitReason::Approval, 1);
        let decided = |decision, by| berth_core::approval::Decision {
            decision,
            by,
            who: None,
            via: None,
            at: String::new(),
            reason: None,
            always: false,
        };
        use berth_core::approval::{DecidedBy, Verdict};
        m.approval_decided(&decided(Verdict::Allow, DecidedBy::Human));
        m.approval_decided(&decided(Verdict::Allow, DecidedBy::Rule));
        m.approval_decided(&decided(Verdict::Deny, DecidedBy::Timeout));
        // The second client through a clone: it counts in the same registry.
        #[allow(clippy::redundant_clone)]
        let clients = [m.sse_client(), m.clone().sse_client()];
        let text = m.encode();
        let got = |series: &str| value(&text, series);
        assert_eq!(got(r#"berth_approvals_total{decision="allow"}"#), Some(2.0));
        assert_eq!(got(r#"berth_approvals_total{decision="deny"}"#), Some(0.0));
        assert_eq!(
            got(r#"berth_approvals_total{decision="timeout"}"#),
            Some(1.0)
        );
        assert_eq!(got(r#"berth_tasks_waiting{reason="approval"}"#), Some(1.0));
        assert_eq!(
            got(r#"berth_tasks_finished_total{status="succeeded"}"#),
            Some(2.0)
        );
        assert_eq!(
            got(r#"berth_tasks_finished_total{status="refused"}"#),
            Some(1.0)
        );
        assert_eq!(
            text.matches("berth_tasks_finished_total{").count(),
            FINAL.len(),
            "{text}"
        );
        assert_eq!(
            got(r#"berth_tasks_waiting{reason="no_machine"}"#),
            Some(3.0)
        );
        assert_eq!(got("berth_dispatch_latency_seconds_count"), Some(1.0));
        assert_eq!(
            got(r#"berth_dispatch_latency_seconds_bucket{le="0.005"}"#),
            Some(1.0)
        );
        assert_eq!(
            got(r#"berth_dispatch_latency_seconds_bucket{le="0.0025"}"#),
            Some(0.0)
        );
        assert_eq!(got("berth_claim_latency_seconds_count"), Some(1.0));
        assert_eq!(got("berth_daemons_online"), Some(2.0));
        assert_eq!(got("berth_leader"), Some(1.0));
        assert_eq!(
            got(r#"berth_store_errors_total{kind="unavailable"}"#),
            Some(1.0)
        );
        assert_eq!(got("berth_sse_clients"), Some(2.0));
        drop(clients);
        assert_eq!(value(&m.encode(), "berth_sse_clients"), Some(0.0));
    }

    #[tokio::test]
    async fn serves_metrics_and_nothing_else() {
        use tower::ServiceExt as _;
        let m = Metrics::new();
        let sampled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let s = sampled.clone();
        let metrics = m.clone();
        let app = router(m, move || {
            let (s, metrics) = (s.clone(), metrics.clone());
            async move {
                s.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                metrics.set_daemons_online(5);
            }
        });
        let get = |path: &str| {
            axum::http::Request::get(path)
                .body(axum::body::Body::empty())
                .unwrap()
        };
        let res = app.clone().oneshot(get("/metrics")).await.unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["content-type"], CONTENT_TYPE);
        let body = http_body_util::BodyExt::collect(res.into_body())
            .await
            .unwrap()
            .to_bytes();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert_eq!(value(&text, "berth_daemons_online"), Some(5.0), "{text}");
        assert_eq!(sampled.load(std::sync::atomic::Ordering::SeqCst), 1);
        for path in ["/", "/healthz", "/api/v1/sessions", "/metrics/x"] {
            let res = app.clone().oneshot(get(path)).await.unwrap();
            assert_eq!(res.status(), 404, "{path}");
        }
    }
}
