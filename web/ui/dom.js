// Building the page safely, and the small formatting the views share.
//
// Every piece of text that came from the server (titles, paths, agent output) goes
// into the page through text nodes, never as markup: `h()` has no way to set
// innerHTML, so untrusted text cannot become an element.

/**
 * Creates an element. `props`: `class`, `text`, `attrs` (set with setAttribute;
 * never event handlers), `on` (event listeners), `data` (dataset entries).
 * Children: nodes, or strings (as text nodes); null/false are skipped.
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  if (props.class) el.className = props.class;
  if (props.text != null) el.textContent = String(props.text);
  if (props.attrs) {
    for (const [k, v] of Object.entries(props.attrs)) {
      if (v == null || v === false) continue;
      if (k.toLowerCase().startsWith("on")) throw new Error(`refusing attribute ${k}`);
      el.setAttribute(k, v === true ? "" : String(v));
    }
  }
  if (props.data) Object.assign(el.dataset, props.data);
  if (props.on) {
    for (const [k, fn] of Object.entries(props.on)) el.addEventListener(k, fn);
  }
  append(el, children);
  return el;
}

/** Appends children (nodes or strings as text) to `el`. */
export function append(el, children) {
  for (const c of children.flat()) {
    if (c == null || c === false) continue;
    el.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return el;
}

/** Replaces all of `el`'s children. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** A link that routes inside the page (see app.js). */
export function navLink(href, text, cls) {
  return h("a", { class: cls, attrs: { href }, data: { nav: "" }, text });
}

// ANSI/VT escape sequences: CSI (ESC [ … final, or the 8-bit CSI), OSC (ESC ] … BEL
// or ST), and the two-byte ESC forms; then any other C0/C1 control but tab and newline.
const ANSI = /(?:\u001b\[|\u009b)[0-?]*[ -/]*[@-~]|\u001b\][^\u0007\u001b]*(?:\u0007|\u001b\\)?|\u001b[PX^_][^\u001b]*(?:\u001b\\)?|\u001b[ -/]*[0-~]?/g;
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g;

/** Agent output as plain text: escape sequences and control characters removed. */
export function plain(text) {
  if (text == null) return "";
  const s = String(text);
  // Fast path: most lines carry no control characters at all.
  if (!/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/.test(s)) return s;
  return s.replace(ANSI, "").replace(CONTROL, "");
}

// Formatters are made once: a fresh toLocale*String() call costs far more than the
// formatting itself, and the transcript formats a time per event.
const TIME = new Intl.DateTimeFormat([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
const DATE_TIME = new Intl.DateTimeFormat([], { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
const DAY = new Intl.DateTimeFormat([], { year: "numeric", month: "numeric", day: "numeric" });

let today = { key: "", until: 0 };
let memo = { iso: "", text: "" };

/** `2026-11-30T04:10:28Z` → a short local time; today's dates show only the time. */
export function when(iso) {
  if (!iso) return "—";
  // Events come in runs with the same second: format each second once.
  const key = String(iso).slice(0, 19);
  if (memo.iso === key) return memo.text;
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return String(iso);
  const now = Date.now();
  if (now >= today.until) {
    const midnight = new Date(now);
    midnight.setHours(24, 0, 0, 0);
    today = { key: DAY.format(now), until: midnight.getTime() };
  }
  const text = DAY.format(d) === today.key ? TIME.format(d) : DATE_TIME.format(d);
  memo = { iso: key, text };
  return text;
}

/** Milliseconds → `850 ms`, `12.3 s`, `4 min 05 s`, `2 h 03 min`. */
export function duration(ms) {
  if (ms == null || !Number.isFinite(ms) || ms < 0) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${String(Math.floor(s % 60)).padStart(2, "0")} s`;
  return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, "0")} min`;
}

/** GETs JSON from the API: `{ok, status, body}`; a network failure is status 0. */
export async function getJSON(url, signal) {
  let res;
  try {
    res = await fetch(url, { headers: { accept: "application/json" }, credentials: "same-origin", signal });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    return { ok: false, status: 0, body: { error: { code: "network", message: `cannot reach the server: ${e.message}`, hint: "is `berth serve` still running?" } } };
  }
  let body = null;
  try {
    body = await res.json();
  } catch {
    body = null;
  }
  return { ok: res.ok, status: res.status, body };
}

/** The message of an API error document, or a fallback. */
export function errorText(r) {
  const e = r.body && r.body.error;
  if (e) return `${e.message}${e.hint ? ` — ${e.hint}` : ""}`;
  return `the server answered ${r.status || "nothing"}`;
}

/** Task status → the class of its badge (ok, run, ask, wait, bad, idle). */
export function statusTone(status) {
  switch (status) {
    case "succeeded":
      return "ok";
    case "queued":
    case "running":
      return "run";
    case "waiting_approval":
      // Running, and stopped on a person: the one state that needs the reader.
      return "ask";
    case "waiting_lock":
    case "waiting_daemon":
      return "wait";
    case "failed":
    case "refused":
    case "interrupted":
    case "cancelled":
      return "bad";
    default:
      return "idle";
  }
}

/** Task status → words (never the API's spelling: `waiting_lock` is not a word). */
export function statusText(status) {
  switch (status) {
    case "waiting_lock":
      return "waiting for its directory";
    case "waiting_daemon":
      return "waiting for its machine";
    case "waiting_approval":
      return "waiting for your approval";
    case undefined:
    case null:
      return "no task yet";
    default:
      return String(status).replace(/_/g, " ");
  }
}

/** An id as the page shows it: its first 8 characters (the full id goes in a title). */
export function shortId(id) {
  return id ? String(id).slice(0, 8) : "—";
}

/**
 * An approval id as a person types it: the task's first 8 characters and the
 * request's number (`3f9c0a12-1`), as web/src/store/approvals.rs `short` makes it.
 */
export function approvalShort(id) {
  const m = /^(.*)-(\d+)$/.exec(String(id ?? ""));
  return m ? `${m[1].slice(0, 8)}-${m[2]}` : String(id ?? "");
}

const UUID = /\b([0-9a-f]{8})-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/gi;

/** `text` with every UUID in it cut to its first 8 characters, as ids are shown. */
export function shortIds(text) {
  return text == null ? "" : String(text).replace(UUID, "$1");
}

/**
 * What a task waiting for its directory waits for, in words: the session holding it
 * when the server names it (`waits_for`), else the wait reason with short ids; null
 * for a task that does not wait for another.
 */
export function waitText(task) {
  const w = task?.waits_for;
  if (w?.session_title != null) {
    const title = w.session_title || "untitled";
    return `waits for session “${title}” (${shortId(w.session_id)}), task ${shortId(w.task_id)}`;
  }
  return task?.wait_reason ? shortIds(task.wait_reason) : null;
}

/** A status badge. */
export function badge(status, text) {
  return h("span", { class: `badge tone-${statusTone(status)}`, text: text ?? statusText(status) });
}
