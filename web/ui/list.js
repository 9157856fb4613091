// The sessions list: title, agent, directory (privacy-stripped, from the server),
// mode, latest task status, updated time; filtered by state.

import { approvalShort, badge, errorText, getJSON, h, navLink, replace, shortId, when } from "./dom.js";

/**
 * The filters, each a set of latest-task states; "needs you" is the sessions the server
 * marks `needs: "approval"` (a request of the `ask` policy waits for an answer).
 */
const FILTERS = [
  ["all", "All", null],
  ["needs", "Needs you", "needs"],
  ["running", "Running", ["queued", "running"]],
  ["waiting", "Waiting", ["waiting_lock", "waiting_daemon"]],
  ["failed", "Failed", ["failed", "refused", "interrupted", "cancelled"]],
  ["ok", "Succeeded", ["succeeded"]],
  ["idle", "No task yet", [null]],
];

const POLL_MS = 3000;

/** The latest task of each session: the API lists tasks oldest first. */
function latestBySession(tasks) {
  const latest = new Map();
  for (const t of tasks) latest.set(t.session_id, t);
  return latest;
}

function updatedAt(session, task) {
  return session.updated_at ?? task?.finished_at ?? task?.started_at ?? task?.created_at ?? session.created_at;
}

/**
 * A flag for a binding that does not hold, as the CLI's `session list` flags it: its
 * directory is gone or was replaced (the next message is refused until it is linked
 * again), or its machine is offline (messages wait). Null while it holds.
 */
function bindingFlag(s) {
  const relink = `link again: berth session link ${shortId(s.id)} DIR`;
  switch (s.binding?.state) {
    case "missing":
      return { tone: "bad", text: `directory missing — ${relink}` };
    case "changed":
      return { tone: "bad", text: `directory replaced by another — ${relink}` };
    case "machine_offline":
      return { tone: "wait", text: "machine offline — messages wait for it" };
    default:
      return null;
  }
}

/** For a task waiting for a person: the commands that answer its first open request. */
function approvalFlag(task) {
  if (task?.status !== "waiting_approval") return null;
  const a = (task.approvals ?? []).find((x) => !x.decision);
  const text = a ? `berth approve ${approvalShort(a.id)} / berth deny ${approvalShort(a.id)}` : "answer with berth approvals";
  return h("span", { class: "task-flag tone-ask", data: { testid: "approval-flag" }, text });
}

function row(s, task) {
  const b = s.binding;
  const dir = b ? b.display : s.work_dir ?? null;
  const flag = bindingFlag(s);
  return h(
    "tr",
    { data: { session: s.id, state: task?.status ?? "", needs: s.needs ?? "" } },
    h("td", { class: "id mono", text: shortId(s.id), attrs: { title: s.id } }),
    h("td", { class: "title" }, navLink(`/sessions/${encodeURIComponent(s.id)}`, s.title || shortId(s.id))),
    h("td", { class: "agent", text: s.agent }),
    h(
      "td",
      { class: "path" },
      dir ? h("span", { text: dir }) : h("span", { class: "muted", text: "not bound" }),
      b ? null : dir ? h("span", { class: "muted", text: " (last run)" }) : null,
      flag ? h("span", { class: `binding-flag tone-${flag.tone}`, data: { testid: "binding-flag" }, text: flag.text }) : null,
    ),
    h("td", { class: "mode", text: b ? b.mode : "—" }),
    h(
      "td",
      {},
      s.needs === "approval" ? badge("waiting_approval", "needs you") : badge(task?.status ?? null),
      approvalFlag(task),
    ),
    h("td", { class: "time", text: when(updatedAt(s, task)) }),
  );
}

/** Shows the list in `main`; returns the function that stops its refresh. */
export function showList(main) {
  document.title = "Sessions · Berth";
  const params = new URLSearchParams(location.search);
  let filter = FILTERS.some(([k]) => k === params.get("state")) ? params.get("state") : "all";
  let data = null;
  let stopped = false;
  let timer = null;
  const abort = new AbortController();

  const buttons = FILTERS.map(([key, label]) =>
    h("button", {
      class: "filter",
      text: label,
      attrs: { type: "button", "aria-pressed": String(key === filter) },
      data: { filter: key },
      on: {
        click: () => {
          filter = key;
          const url = new URL(location.href);
          if (key === "all") url.searchParams.delete("state");
          else url.searchParams.set("state", key);
          history.replaceState(null, "", url.pathname + url.search);
          for (const b of buttons) b.setAttribute("aria-pressed", String(b.dataset.filter === key));
          render();
        },
      },
    }),
  );
  const status = h("p", { class: "muted", attrs: { role: "status" }, text: "Loading sessions…" });
  const body = h("tbody");
  const table = h(
    "table",
    { class: "sessions" },
    h(
      "thead",
      {},
      h("tr", {}, ...["Id", "Title", "Agent", "Directory", "Mode", "Latest task", "Updated"].map((t) => h("th", { attrs: { scope: "col" }, text: t }))),
    ),
    body,
  );
  replace(
    main,
    h(
      "section",
      { class: "list" },
      h("div", { class: "list-head" }, h("h1", { text: "Sessions" }), h("div", { class: "filters", attrs: { role: "group", "aria-label": "Filter by state" } }, buttons)),
      status,
      table,
    ),
  );

  function render() {
    if (!data) return;
    const allowed = FILTERS.find(([k]) => k === filter)[2];
    const shown = data.sessions.filter((s) =>
      allowed === "needs" ? s.needs === "approval" : !allowed || allowed.includes(data.latest.get(s.id)?.status ?? null),
    );
    const frag = document.createDocumentFragment();
    for (const s of shown) frag.appendChild(row(s, data.latest.get(s.id)));
    replace(body, frag);
    status.textContent =
      data.sessions.length === 0
        ? "No sessions yet. Create one with `berth session new`."
        : shown.length === 0
          ? "No session matches this filter."
          : `${shown.length} of ${data.sessions.length} sessions`;
  }

  async function load() {
    // A hidden tab does not poll once it has shown the list; it catches up when seen.
    if (document.hidden && data) {
      timer = setTimeout(load, POLL_MS);
      return;
    }
    try {
      const [sr, tr] = await Promise.all([getJSON("/api/v1/sessions", abort.signal), getJSON("/api/v1/tasks", abort.signal)]);
      if (stopped) return;
      if (!sr.ok) {
        status.textContent = `Cannot list the sessions: ${errorText(sr)}`;
      } else {
        const sessions = sr.body;
        const latest = latestBySession(tr.ok ? tr.body : []);
        // Most recently active first.
        sessions.sort((a, b) => String(updatedAt(b, latest.get(b.id))).localeCompare(String(updatedAt(a, latest.get(a.id)))));
        data = { sessions, latest };
        render();
      }
    } catch (e) {
      if (e.name === "AbortError") return;
      status.textContent = `Cannot list the sessions: ${e.message}`;
    }
    if (!stopped) timer = setTimeout(load, POLL_MS);
  }
  load();

  return () => {
    stopped = true;
    abort.abort();
    clearTimeout(timer);
  };
}
