// One session: a header that says where it runs, the live transcript, its tasks and
// the binding preview.

import { badge, duration, errorText, getJSON, h, navLink, plain, replace, shortId, shortIds, statusTone, waitText } from "./dom.js";
import { serverFacts } from "./facts.js";
import { mountPreview } from "./preview.js";
import { Transcript } from "./transcript.js";

/** The SSE event names the server sends (`event:` lines). */
const KINDS = ["message", "status", "agent", "task", "binding_changed", "undo", "approval", "delta"];

/** The longest wait between two attempts to reopen a closed stream. */
const MAX_BACKOFF_MS = 10000;

/**
 * What the header says of the bound directory: `{key, text}`, `key` naming the state
 * (a class), `text` saying in words what holds. `latest` is the session's latest task.
 */
export function bindingState(binding, latest, id) {
  if (!binding) return { key: "unbound", text: "not bound" };
  const relink = `link it again: berth session link ${shortId(id)} DIR`;
  if (latest?.status === "waiting_lock") return { key: "waiting_lock", text: `busy: ${waitText(latest) ?? "another task is using it"}` };
  if (latest?.status === "waiting_daemon") return { key: "machine_offline", text: "its machine is offline: tasks wait for it" };
  switch (binding.state) {
    case "ok":
      return { key: "ok", text: "ok" };
    case "missing":
      return { key: "missing", text: `missing: ${relink}` };
    case "changed":
      return { key: "changed", text: `replaced by another directory: ${relink}` };
    case "waiting_lock":
      return { key: "waiting_lock", text: "busy: another task is using it" };
    case "machine_offline":
      return { key: "machine_offline", text: "its machine is offline: tasks wait for it" };
    default:
      return { key: "unknown", text: String(binding.state).replace(/_/g, " ") };
  }
}

/** The agent's permission policy as the header shows it. */
function policyText(agent) {
  if (!agent) return "—";
  if (agent.kind === "command") return "not enforced (command agent)";
  return agent.permissions ?? "edit (default)";
}

/** How the latest task that ran was fenced: `fenced: ~/code/app + tmp · network on`. */
function fenceText(tasks) {
  const ran = [...tasks].reverse().find((t) => t.fence);
  if (!ran) return null;
  return ran.fence.fenced ? `fenced: ${ran.fence.text}` : `UNFENCED: ${ran.fence.text}`;
}

/** The session's tasks' usage added up (`GET sessions/{id}/usage`), as the CLI says
 * it: `1,234 in · 56 out · 7 cache read · $0.0123 (2 tasks)`; null before any task
 * reported usage. */
export function usageText(u) {
  if (!u || !u.tasks) return null;
  const n = (x) => Number(x ?? 0).toLocaleString("en-US");
  const parts = [`${n(u.input)} in`, `${n(u.output)} out`];
  if (u.cache_read) parts.push(`${n(u.cache_read)} cache read`);
  if (u.cache_write) parts.push(`${n(u.cache_write)} cache write`);
  if (typeof u.cost_usd === "number") parts.push(`$${u.cost_usd.toFixed(4)}`);
  return `${parts.join(" · ")} (${u.tasks} ${u.tasks === 1 ? "task" : "tasks"})`;
}

function header(s, latest, agent, fence, usage) {
  const b = s.binding;
  const st = bindingState(b, latest, s.id);
  const fact = (label, value, cls, title) =>
    h(
      "div",
      { class: `fact ${cls ?? ""}` },
      h("span", { class: "fact-label", text: label }),
      h("span", { class: "fact-value", text: value, attrs: { title } }),
    );
  return h(
    "header",
    { class: `session-head state-${st.key}`, attrs: { "aria-label": "Where this session runs" } },
    h("div", { class: "crumbs" }, navLink("/", "← Sessions")),
    h("h1", { class: "session-title", text: s.title || "(untitled)" }),
    h(
      "div",
      { class: "where" },
      h("span", { class: "where-label", text: b ? "Runs in" : "Not bound" }),
      h("span", { class: "where-dir", data: { testid: "bound-dir" }, text: b ? b.display : "each message runs in a scratch directory" }),
    ),
    h(
      "div",
      { class: "facts" },
      fact("mode", b ? b.mode : "—"),
      fact("machine", b ? b.daemon_name || b.daemon : "—"),
      fact("directory", st.text, `binding-state state-${st.key}`),
      fact("agent", s.agent),
      fact("permissions", policyText(agent), "policy"),
      fence ? fact("fence", fence, fence.startsWith("fenced") ? "fence" : "fence is-unfenced") : null,
      usage ? fact("usage", usage, "usage") : null,
      fact("session", shortId(s.id), "mono", s.id),
      s.work_dir && (!b || s.work_dir !== b.display) ? fact("last run in", s.work_dir, "mono") : null,
    ),
  );
}

/** Whether a task in `status` is under way: its duration counts (a wait for a person
 * too, as the agent was started). */
function underWay(status) {
  return ["run", "ask"].includes(statusTone(status));
}

/** Start and end of each task, from the transcript's timestamps, and its message. */
class TaskClock {
  constructor() {
    this.t = new Map();
  }
  see(ev) {
    const id = ev.task_id ?? ev.payload?.task_id ?? ev.payload?.task?.id;
    if (!id) return;
    if (ev.kind === "message" && typeof ev.payload?.text === "string") {
      const t = this.t.get(id) ?? {};
      t.message = ev.payload.text;
      this.t.set(id, t);
    }
    if (!ev.at) return;
    const at = Date.parse(ev.at);
    if (Number.isNaN(at)) return;
    const t = this.t.get(id) ?? {};
    t.created ??= at;
    if (ev.kind === "status" && ev.payload?.status === "running") t.started ??= at;
    if (ev.kind === "task") t.finished = at;
    this.t.set(id, t);
  }
  /** The text of the message that made `task`, once the transcript has shown it. */
  message(task) {
    return this.t.get(task.id)?.message ?? null;
  }
  /** `[start, end]` in ms since the epoch; `end` null while running. */
  span(task) {
    const seen = this.t.get(task.id) ?? {};
    const start = Date.parse(task.started_at ?? "") || seen.started || null;
    const end = Date.parse(task.finished_at ?? "") || seen.finished || null;
    return [start, end];
  }
}

/** A task's changes in its directory, under its status: `2 files +3 −1`, the files in
 * the title. Nothing for a task without a record (a scratch run). */
function diffstat(changes) {
  if (!changes) return null;
  const files = changes.files ?? [];
  if (files.length === 0) return h("div", { class: "changes muted", data: { testid: "diffstat" }, text: "no changes" });
  const added = files.reduce((n, f) => n + (f.added ?? 0), 0);
  const removed = files.reduce((n, f) => n + (f.removed ?? 0), 0);
  const lines = files.map((f) => {
    const counts = f.added == null ? "binary" : `+${f.added} −${f.removed}`;
    return `${f.status} ${f.from ? `${f.from} → ` : ""}${f.path} ${counts}`;
  });
  for (const s of changes.skipped ?? []) lines.push(`not tracked ${s.path} (${s.reason})`);
  if (changes.undone_at) lines.push(`undone ${changes.undone_at}: the files are back as they were before it`);
  return h(
    "div",
    { class: "changes", data: { testid: "diffstat" }, attrs: { title: lines.join("\n") } },
    h("span", { text: `${files.length} file${files.length === 1 ? "" : "s"} ` }),
    h("span", { class: "add", text: `+${added}` }),
    h("span", { text: " " }),
    h("span", { class: "del", text: `−${removed}` }),
    changes.undone_at ? h("span", { class: "muted", data: { testid: "undone" }, text: " · undone" }) : null,
  );
}

/** The button that shows a task's lines under the columns. */
function linesButton(t, onDiff) {
  if (!t.changes?.files?.length) return null;
  return h("button", { class: "link", attrs: { type: "button", title: "show the lines this task changed" }, data: { testid: "show-diff" }, on: { click: () => onDiff(t.id) }, text: "show lines" });
}

/** How one line of a unified diff is marked: added, removed, a hunk's head, or git's
 * header lines (`diff --git`, `index`, `---`, `+++`, renames, modes). */
function lineClass(line, inHunk) {
  if (line.startsWith("@@")) return "hunk";
  if (!inHunk) return "meta";
  if (line.startsWith("+")) return "add";
  if (line.startsWith("-")) return "del";
  return "ctx";
}

/**
 * A task's lines (`GET tasks/{id}/diff?format=json`): per file a collapsible block,
 * added and removed lines marked, renames and binary files said, and where the bounds
 * cut it, the command that shows all. Everything is text (`textContent`), never markup:
 * the lines are whatever the agent wrote.
 */
export function diffView(doc, taskId) {
  const files = doc.files ?? [];
  const head = h("div", { class: "panel-head" }, h("h2", { text: `Lines of task ${shortId(taskId)}` }));
  if (files.length === 0) {
    return [head, h("p", { class: "muted", data: { testid: "diff-empty" }, text: "No lines kept for this task: it changed no files, or ran without a change record." })];
  }
  const blocks = files.map((f) => {
    let inHunk = false;
    const rows = (f.text ?? "").split("\n").filter((l, i, all) => l !== "" || i < all.length - 1).map((l) => {
      if (l.startsWith("@@")) inHunk = true;
      const cls = lineClass(l, inHunk);
      return h("span", { class: `line ${cls}`, data: { mark: cls }, text: `${l}\n` });
    });
    const what = f.from ? `${f.from} → ${f.path}` : f.path;
    const notes = [f.binary ? "binary: no lines shown" : null, f.cut_lines ? `${f.cut_lines} more line${f.cut_lines === 1 ? "" : "s"} cut` : null].filter(Boolean);
    return h(
      "details",
      { class: "diff-file", attrs: { open: true }, data: { testid: "diff-file", path: f.path, status: f.status } },
      h("summary", {}, h("span", { class: `badge file-${f.status}`, text: f.status }), " ", h("span", { class: "mono", text: what }), notes.length ? h("span", { class: "muted", text: ` · ${notes.join(" · ")}` }) : null),
      rows.length ? h("pre", { class: "diff-lines" }, ...rows) : null,
    );
  });
  const cut = doc.note ? h("p", { class: "diff-cut", data: { testid: "diff-cut" }, text: doc.note }) : null;
  return [head, ...blocks, cut];
}

/**
 * The Tasks panel: per task a row (id, status, duration) and under it, across the
 * panel's width, the message that made it (one line, whole in its title) and how it
 * ended or what it waits for. Full width, the reason wraps between words: the side
 * column is 300-420px, too narrow for a fourth column.
 */
function tasksTable(tasks, clock, onDiff) {
  if (tasks.length === 0) return h("p", { class: "muted", text: "No task yet: messages sent with `berth send` appear here." });
  const now = Date.now();
  return h(
    "table",
    { class: "tasks" },
    h("thead", {}, h("tr", {}, ...["Task", "Status", "Duration"].map((t) => h("th", { attrs: { scope: "col" }, text: t })))),
    h(
      "tbody",
      {},
      [...tasks].reverse().flatMap((t) => {
        const [start, end] = clock.span(t);
        const running = underWay(t.status);
        const ms = start ? (end ?? (running ? now : null)) - start : null;
        const parts = [t.exit_code != null ? `code ${t.exit_code}` : null, t.error_code ? `[${t.error_code}]` : null];
        const exit = [...parts, t.error ? shortIds(t.error) : null, t.status === "waiting_lock" ? waitText(t) : t.wait_reason ? shortIds(t.wait_reason) : null]
          .filter(Boolean)
          .join(" · ");
        const exitTitle = [...parts, t.error || null, t.wait_reason || null].filter(Boolean).join(" · ");
        const said = clock.message(t);
        const message = said == null ? null : plain(said);
        const denied = t.denials?.length ?? 0;
        const deniedTitle = (t.denials ?? []).map((d) => `${d.tool} ${d.target ?? ""}`.trim()).join("\n");
        const marks = denied ? "has-denials" : "";
        return [
          h(
            "tr",
            { class: `task-main ${marks}`, data: { task: t.id, status: t.status, denials: String(denied) } },
            h("td", { class: "mono", text: shortId(t.id), attrs: { title: t.id } }),
            h(
              "td",
              {},
              badge(t.status),
              denied ? h("span", { class: "badge denied", data: { testid: "denied" }, attrs: { title: deniedTitle }, text: `${denied} denied` }) : null,
              diffstat(t.changes),
              linesButton(t, onDiff),
            ),
            h("td", { class: "num", text: ms != null && ms >= 0 ? `${duration(ms)}${end ? "" : " so far"}` : "—" }),
          ),
          h(
            "tr",
            { class: `task-detail ${marks}`, data: { detailOf: t.id } },
            h(
              "td",
              { attrs: { colspan: "3" } },
              message != null ? h("div", { class: "task-msg", data: { testid: "task-message" }, attrs: { title: message }, text: message }) : null,
              h("div", { class: "exit", attrs: { title: exitTitle || null }, text: exit || "—" }),
            ),
          ),
        ];
      }),
    ),
  );
}

/** Shows session `id` in `main`; returns the function that closes its stream. */
export function showSession(main, id) {
  document.title = "Session · Berth";
  const abort = new AbortController();
  let stopped = false;
  let es = null;
  let retryTimer = 0;
  let refreshTimer = 0;
  let tickTimer = 0;
  let backoff = 500;
  let session = null;
  let agent = null;
  let tasks = [];
  let usage = null;
  const clock = new TaskClock();

  const headBox = h("div", { class: "head-box" });
  const live = h("span", { class: "live", attrs: { role: "status", "aria-live": "polite" }, data: { state: "connecting" }, text: "connecting…" });
  const events = h("div", { class: "transcript", attrs: { "aria-label": "Transcript", tabindex: "0" } });
  const tasksBox = h("div", { class: "tasks-box" });
  const previewBox = h("section", { class: "panel preview", attrs: { "aria-label": "Binding preview" } });
  const diffBox = h("section", { class: "panel diff-panel", attrs: { "aria-label": "A task's lines", hidden: true }, data: { testid: "diff" } });
  const transcript = new Transcript(events, onEvent);
  let preview = null;

  replace(main, h("p", { class: "muted", text: "Loading the session…" }));

  function setLive(state, text) {
    live.dataset.state = state;
    live.textContent = text;
  }

  function paint() {
    const latest = tasks[tasks.length - 1];
    replace(headBox, header(session, latest, agent, fenceText(tasks), usageText(usage)));
    replace(tasksBox, tasksTable(tasks, clock, showDiff));
    preview?.update(session, latest);
    tick();
  }

  // While a task runs, its duration counts up once a second.
  function tick() {
    clearTimeout(tickTimer);
    const latest = tasks[tasks.length - 1];
    if (latest && underWay(latest.status) && !stopped) {
      tickTimer = setTimeout(() => {
        replace(tasksBox, tasksTable(tasks, clock, showDiff));
        tick();
      }, 1000);
    }
  }

  // A task's lines, under the columns: read when asked for (a GET, like every read).
  async function showDiff(taskId) {
    diffBox.hidden = false;
    replace(diffBox, h("p", { class: "muted", text: "Loading the task's lines…" }));
    const r = await getJSON(`/api/v1/tasks/${encodeURIComponent(taskId)}/diff?format=json`, abort.signal);
    if (stopped) return;
    if (!r.ok) {
      replace(diffBox, h("p", { class: "error", text: `Cannot show the lines: ${errorText(r)}` }));
      return;
    }
    replace(diffBox, ...diffView(r.body, taskId));
    diffBox.scrollIntoView({ block: "start" });
  }

  async function refresh() {
    const [sr, tr, ar, ur] = await Promise.all([
      getJSON(`/api/v1/sessions/${encodeURIComponent(id)}`, abort.signal),
      getJSON(`/api/v1/tasks?session=${encodeURIComponent(id)}`, abort.signal),
      getJSON("/api/v1/agents", abort.signal),
      getJSON(`/api/v1/sessions/${encodeURIComponent(id)}/usage`, abort.signal),
    ]);
    if (stopped) return;
    if (sr.ok) session = sr.body;
    if (tr.ok) tasks = tr.body;
    if (ur.ok) usage = ur.body;
    if (ar.ok && session) agent = ar.body.find((a) => a.name === session.agent) ?? null;
    paint();
  }

  function refreshSoon() {
    if (refreshTimer) return;
    refreshTimer = setTimeout(() => {
      refreshTimer = 0;
      refresh().catch(() => {});
    }, 150);
  }

  function onEvent(ev) {
    clock.see(ev);
    // A task event carries the final task document: show it now, not after a refetch.
    // Only over a task still shown unfinished: a replayed event is older than a task
    // the server has served since (an undo marks its changes later).
    const done = ev.kind === "task" ? ev.payload?.task : null;
    if (done && session) {
      const i = tasks.findIndex((t) => t.id === done.id);
      if (i >= 0 && !["ok", "bad"].includes(statusTone(tasks[i].status))) {
        tasks[i] = { ...tasks[i], ...done };
        paint();
      }
    }
    if (["status", "task", "binding_changed", "message", "approval"].includes(ev.kind)) refreshSoon();
  }

  function onMessage(e) {
    let ev;
    try {
      ev = JSON.parse(e.data);
    } catch {
      return;
    }
    transcript.push(ev);
  }

  function connect() {
    if (stopped) return;
    // The browser resends the last id it saw as Last-Event-ID when it reconnects by
    // itself; a stream reopened here resumes with `?after=`.
    const after = transcript.lastSeq ? `?after=${transcript.lastSeq}` : "";
    es = new EventSource(`/api/v1/sessions/${encodeURIComponent(session?.id ?? id)}/events${after}`);
    for (const k of KINDS) es.addEventListener(k, onMessage);
    es.onmessage = onMessage;
    es.onopen = () => {
      backoff = 500;
      setLive("live", "live");
    };
    es.onerror = () => {
      if (stopped) return;
      setLive("reconnecting", "reconnecting…");
      if (es.readyState === EventSource.CLOSED) {
        es.close();
        retryTimer = setTimeout(connect, backoff);
        backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
      }
    };
  }

  // The stream opens at once, alongside the documents: on a long session the backlog
  // is the bulk of what there is to load. The id may be a prefix; the server resolves it.
  connect();
  (async () => {
    const [sr, tr, ar, facts] = await Promise.all([
      getJSON(`/api/v1/sessions/${encodeURIComponent(id)}`, abort.signal),
      getJSON(`/api/v1/tasks?session=${encodeURIComponent(id)}`, abort.signal),
      getJSON("/api/v1/agents", abort.signal),
      serverFacts(),
    ]);
    if (stopped) return;
    if (!sr.ok) {
      stopped = true;
      es?.close();
      transcript.close();
      const code = sr.body?.error?.code;
      const unknown = sr.status === 404 || code === "unknown_session";
      document.title = unknown ? "No such session · Berth" : "Error · Berth";
      replace(
        main,
        h(
          "section",
          { class: "notice", data: { testid: unknown ? "no-such-session" : "session-error" } },
          h("h1", { text: unknown ? "No such session" : "This session cannot be shown" }),
          h("p", {}, unknown ? "No session has the id " : "The server said: ", h("code", { text: unknown ? id : errorText(sr) }), "."),
          unknown ? h("p", { class: "muted", text: "It may have been typed wrong, or the link belongs to another Berth home." }) : null,
          h("p", {}, navLink("/", "← Back to the sessions")),
        ),
      );
      return;
    }
    session = sr.body;
    tasks = tr.ok ? tr.body : [];
    // The header's permissions fact, also for a session no event has refreshed yet.
    agent = ar.ok ? ar.body.find((a) => a.name === session.agent) ?? null : null;
    document.title = `${session.title || session.id.slice(0, 8)} · Berth`;
    preview = mountPreview(previewBox, session, facts);
    replace(
      main,
      h(
        "div",
        { class: "session" },
        headBox,
        h(
          "div",
          { class: "columns" },
          h("section", { class: "panel transcript-panel" }, h("div", { class: "panel-head" }, h("h2", { text: "Transcript" }), live), events),
          h("div", { class: "side" }, h("section", { class: "panel" }, h("h2", { text: "Tasks" }), tasksBox), previewBox),
        ),
        diffBox,
      ),
    );
    paint();
  })().catch((e) => {
    if (e.name !== "AbortError") replace(main, h("p", { class: "error", text: `Cannot show the session: ${e.message}` }));
  });

  return () => {
    stopped = true;
    abort.abort();
    es?.close();
    transcript.close();
    clearTimeout(retryTimer);
    clearTimeout(refreshTimer);
    clearTimeout(tickTimer);
  };
}
