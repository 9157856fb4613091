// The live transcript: events from the session's SSE stream, each shown once.
//
// Events carry the session's sequence number (`seq`, also the SSE id). A reconnect
// resumes after the last id the browser saw, and anything seen already is dropped
// here, so a reconnect never shows an event twice. Appends are batched per animation
// frame and built off the page (DocumentFragment), in chunks of rows that the browser
// skips while they are off screen: a backlog of thousands costs a few layouts.
//
// An `approval` event is a request the agent put to a person: shown as a block with
// the commands that answer it until the same request comes again decided, when that
// block becomes one line saying how. A replayed transcript ends the same way.
//
// A `delta` event (no `seq`: never stored) is a piece of a message as the agent
// streams it: it grows one live row, at once, and the whole message (its `text` or
// `thinking` event, stored after the last piece) takes that row's place.

import { approvalShort, h, plain, shortId as short, shortIds, statusText, when } from "./dom.js";

/** Rows per chunk of the transcript (see `append`). */
const CHUNK = 100;

/** The longest tool input shown, in characters; the rest is elided. */
const MAX_INPUT = 4000;

/** A name the server spells `like_this`, as words. */
function words(name) {
  return plain(name).replace(/_/g, " ");
}

function agentBody(p) {
  switch (p.type) {
    case "text":
      return { cls: "agent-text", who: "agent", parts: [plain(p.text)] };
    case "thinking":
      return { cls: "agent-thinking", who: "thinking", parts: [plain(p.text)] };
    case "tool_use": {
      let input = "";
      try {
        input = JSON.stringify(p.input ?? null, null, 1) ?? "";
      } catch {
        input = String(p.input);
      }
      if (input.length > MAX_INPUT) input = `${input.slice(0, MAX_INPUT)}… (${input.length - MAX_INPUT} more characters)`;
      return { cls: "agent-tool", who: `tool ${plain(p.name)}`, parts: [plain(input)] };
    }
    case "tool": {
      // An ACP agent's tool call, each time it changes.
      const where = (p.locations ?? []).map((l) => plain(l)).join(", ");
      return { cls: p.status === "failed" ? "agent-tool is-error" : "agent-tool", who: `tool ${plain(p.kind)}`, parts: [`${plain(p.title)} (${plain(p.status)})${where ? ` — ${where}` : ""}`] };
    }
    case "diff": {
      let text = plain(p.new_text ?? "");
      if (text.length > MAX_INPUT) text = `${text.slice(0, MAX_INPUT)}… (${text.length - MAX_INPUT} more characters)`;
      return { cls: "agent-diff", who: p.old_text == null ? "new file" : "changed file", parts: [`${plain(p.path)}\n${text}`] };
    }
    case "plan": {
      const mark = (s) => (s === "completed" ? "[x]" : s === "in_progress" ? "[~]" : "[ ]");
      return { cls: "agent-plan", who: "plan", parts: [(p.entries ?? []).map((e) => `${mark(e.status)} ${plain(e.content)}`).join("\n")] };
    }
    case "tool_result":
      return { cls: p.is_error ? "agent-tool-result is-error" : "agent-tool-result", who: p.is_error ? "tool error" : "tool result", parts: [plain(p.output)] };
    case "stderr":
      // Diagnostics: the CLI's own chatter and Berth's warnings, never the agent's words.
      return { cls: "agent-stderr", who: "diagnostic", parts: [plain(p.line)] };
    case "progress":
      // Berth's own wait before the agent starts: what it is doing, how far.
      return { cls: "agent-progress", who: "berth", parts: [plain(p.text)] };
    case "fence":
      // Berth's own notice: whether the kernel keeps the agent to its directory.
      return p.fenced
        ? { cls: "agent-fence", who: "fence", parts: [`fenced: ${plain(p.text)}`] }
        : { cls: "agent-fence is-warning", who: "fence", parts: [`unfenced: ${plain(p.text)}`] };
    case "error":
      return { cls: "agent-error is-error", who: "agent error", parts: [plain(p.message)] };
    case "denied":
      return { cls: "agent-denied", who: p.by === "fence" ? "denied (fence)" : "denied", parts: [`${plain(p.tool)} ${plain(p.target ?? "")}`.trim() + (p.message ? ` — ${plain(p.message)}` : "")] };
    case "ignored": {
      // Berth's own notice: project settings it did not apply, and how to trust them.
      const keys = p.keys ?? [];
      const trust = p.trust === "replaced" ? "not trusted: the directory was replaced since it was trusted" : p.trust === "trusted" ? "trusted" : "not trusted";
      const lines = [`${plain(p.file)} (${trust}): ${keys.length} setting${keys.length === 1 ? "" : "s"} ignored`];
      for (const k of keys) lines.push(`${k.line}:${k.column} ${plain(k.message)}`);
      if (p.hint) lines.push(`to apply what needs trust, run in your own shell: ${plain(p.hint)}`);
      return { cls: "agent-ignored", who: "settings ignored", parts: [lines.join("\n")] };
    }
    case "started":
      return { cls: "agent-meta", who: "agent", parts: [`started${p.model ? ` (${plain(p.model)})` : ""}${p.resume_id ? `, resume id ${shortIds(plain(p.resume_id))}` : ""}`] };
    case "result":
      return { cls: p.ok ? "agent-meta" : "agent-meta is-error", who: "result", parts: [`${p.ok ? "done" : "failed"}${p.text ? `: ${plain(p.text)}` : ""}${p.cost_usd != null ? ` ($${Number(p.cost_usd).toFixed(4)})` : ""}`] };
    default:
      return { cls: "agent-other", who: `agent ${words(p.type)}`, parts: [plain(JSON.stringify(p))] };
  }
}

function describe(ev) {
  const p = ev.payload ?? {};
  switch (ev.kind) {
    case "message":
      return { cls: "message", who: `you (${plain(p.origin ?? "?")})`, parts: [plain(p.text)] };
    case "status": {
      // In words: `task 1a2b3c4d is waiting for the directory: in use by task 9f8e7d6c`.
      const reason = p.wait_reason ? shortIds(plain(p.wait_reason)) : "";
      const what = reason.startsWith("waiting for") ? reason : `${statusText(plain(p.status))}${reason ? `: ${reason}` : ""}`;
      return { cls: "status", who: "status", parts: [`task ${short(ev.task_id ?? p.task_id)} is ${what}`] };
    }
    case "agent":
      return agentBody(p);
    case "task": {
      const t = p.task ?? {};
      const bits = [`task ${short(t.id ?? ev.task_id)} ended: ${statusText(plain(t.status))}`];
      if (t.exit_code != null) bits.push(`exit code ${t.exit_code}`);
      if (t.work_dir) bits.push(`in ${plain(t.work_dir)}`);
      if (t.error_code) bits.push(`[${plain(t.error_code)}]`);
      if (t.error) bits.push(shortIds(plain(t.error)));
      if (t.denials?.length) bits.push(`${t.denials.length} action${t.denials.length === 1 ? "" : "s"} denied`);
      return { cls: `task tone-${t.status === "succeeded" ? "ok" : "bad"}`, who: "task", parts: [bits.join(" · ")] };
    }
    case "undo": {
      const n = Array.isArray(p.files) ? p.files.length : 0;
      const how = p.commit ? " (a revert commit)" : "";
      return {
        cls: "undo",
        who: "undo",
        parts: [`task ${short(ev.task_id ?? p.task_id)} undone: ${n} file${n === 1 ? "" : "s"} put back as before it${how}`],
      };
    }
    case "binding_changed":
      return {
        cls: "binding-changed",
        who: "binding",
        parts: [`changed from ${p.from == null ? "no binding" : plain(p.from)} to ${p.to == null ? "no binding" : plain(p.to)}; the next message runs there`],
      };
    default:
      return { cls: "other", who: words(ev.kind), parts: [plain(JSON.stringify(p))] };
  }
}

/** What a request is about, on one line: its command, else its paths, else its title. */
function asked(a) {
  if (a.command != null) return plain(a.command);
  if (a.paths?.length) return a.paths.map((p) => plain(p)).join(", ");
  return plain(a.title);
}

/** How a request was decided, in words (as the CLI says it: `allowed by alice via cli`). */
function decided(d) {
  const verdict = d.decision === "allow" ? "allowed" : "denied";
  switch (d.by) {
    case "timeout":
      return "denied: nobody answered in time (approval_timeout)";
    case "cancel":
      return "denied: the task was cancelled while it waited";
    case "policy":
      return `${verdict} by the policy`;
    case "rule":
      return `${verdict} by rule${d.via ? ` (${plain(d.via)})` : ""}`;
    default: {
      const how = `${verdict} by ${d.who ? plain(d.who) : "you"}${d.via ? ` via ${plain(d.via)}` : ""}`;
      // The person's own reason, when they gave one.
      const reason = d.reason ? `: ${plain(d.reason)}` : "";
      return `${how}${d.always ? ", always for this session" : ""}${reason}`;
    }
  }
}

/** A command to copy: read-only, with a Copy button that says what it did in `said`. */
function copyable(label, command, said) {
  const input = h("input", { class: "command", attrs: { type: "text", readonly: true, "aria-label": `The command that would ${label} it` } });
  input.value = command;
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(command);
      said.textContent = `copied: ${command}`;
    } catch {
      input.select();
      said.textContent = "selected: press Ctrl+C (or ⌘C) to copy";
    }
  };
  return [h("span", { class: "approval-label", text: label }), input, h("button", { text: "Copy", attrs: { type: "button" }, on: { click: copy } })];
}

/** The block of a request that waits: what, until when, and the two commands that answer it. */
function pendingBox(a) {
  const id = approvalShort(a.id);
  const what = asked(a);
  const title = plain(a.title);
  const options = (a.options ?? []).map((o) => plain(o.name)).join(" · ");
  let input = "";
  try {
    input = JSON.stringify(a.input ?? null, null, 1) ?? "";
  } catch {
    input = String(a.input);
  }
  if (input.length > MAX_INPUT) input = `${input.slice(0, MAX_INPUT)}… (${input.length - MAX_INPUT} more characters)`;
  const said = h("span", { class: "copied muted", attrs: { role: "status" } });
  return h(
    "div",
    { class: "ev-text approval-box" },
    h(
      "div",
      { class: "approval-head" },
      h("strong", { text: "Waiting for your answer" }),
      h("span", { class: "approval-deadline", attrs: { title: a.deadline ? `denied as unanswered at ${plain(a.deadline)}` : null }, text: ` · until ${when(a.deadline)}, then denied` }),
    ),
    h("div", { class: "approval-what" }, h("span", { class: "approval-kind", text: plain(a.kind) }), title && title !== what ? ` ${title}` : null),
    h("pre", { class: "approval-command", data: { testid: "approval-command" }, text: what }),
    options ? h("div", { class: "approval-options", text: `the agent offers: ${options}` }) : null,
    input && input !== "null" ? h("details", { class: "approval-input" }, h("summary", { text: "the agent's input" }), h("pre", { text: plain(input) })) : null,
    h("div", { class: "approval-answer" }, copyable("allow", `berth approve ${id}`, said), copyable("deny", `berth deny ${id}`, said)),
    h("div", { class: "approval-note muted" }, "This page cannot answer: run one of these in your shell. ", said),
  );
}

/** Shows request `a` in `row`: the block while it waits, else one line. `ended` says
 * how its task ended, for a request it never decided. */
function fillApproval(row, a, at, ended) {
  const d = a.decision;
  const state = d ? d.decision : ended ? "ended" : "pending";
  row.className = `ev ev-approval ${state === "pending" ? "is-pending" : `is-decided is-${state}`}`;
  row.dataset.approval = a.id;
  row.dataset.state = state;
  const time = el("span", "ev-at", when(at));
  if (at) time.title = at;
  const text =
    state === "pending"
      ? pendingBox(a)
      : el("div", "ev-text", `${plain(a.kind)} ${asked(a)} — ${d ? decided(d) : `not answered: the task ended (${statusText(plain(ended))})`}`);
  row.replaceChildren(el("span", "ev-who", state === "pending" ? "approval asked" : "approval"), time, text);
}

/** An element with a class and text. */
function el(tag, cls, text) {
  const e = document.createElement(tag);
  e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}

// Plain DOM calls: this runs once per event, thousands of times on a long session.
// A row from the same source in the same second as the one before it leaves out the
// label and the time (`ev-cont`): half the elements on a chatty agent, and less noise.
function node(ev, prev) {
  const d = describe(ev);
  const at = when(ev.at);
  const key = `${d.who}\u0000${at}`;
  const row = el("div", key === prev ? `ev ev-${d.cls} ev-cont` : `ev ev-${d.cls}`);
  row.dataset.seq = String(ev.seq);
  if (key !== prev) {
    row.appendChild(el("span", "ev-who", d.who));
    const time = row.appendChild(el("span", "ev-at", at));
    if (ev.at) time.title = ev.at;
  }
  row.appendChild(el("div", "ev-text", d.parts.join("")));
  return [row, key];
}

/** A transcript rendered into `container`; `onEvent(ev)` sees each new event once. */
export class Transcript {
  constructor(container, onEvent) {
    this.container = container;
    this.onEvent = onEvent;
    this.seen = new Set();
    this.lastSeq = 0;
    this.pending = [];
    this.frame = 0;
    this.prevKey = "";
    /** Each request shown, by id: `{row, a}`, its row and the request as it stands. */
    this.asks = new Map();
    /** The message streaming now: `{task, thought, next, row, text}`. */
    this.live = null;
  }

  /** Takes one event from the stream; duplicates (by `seq`) are ignored. */
  push(ev) {
    if (ev.kind === "delta") return this.delta(ev);
    if (typeof ev.seq !== "number" || this.seen.has(ev.seq)) return;
    this.seen.add(ev.seq);
    if (ev.seq > this.lastSeq) this.lastSeq = ev.seq;
    this.pending.push(ev);
    if (!this.frame) this.frame = requestAnimationFrame(() => this.flush());
  }

  flush() {
    this.frame = 0;
    const batch = this.pending;
    this.pending = [];
    if (batch.length === 0) return;
    batch.sort((a, b) => a.seq - b.seq);
    const c = this.container;
    const stick = c.scrollHeight - c.scrollTop - c.clientHeight < 40;
    const lastRow = c.lastElementChild?.lastElementChild;
    if (lastRow && Number(lastRow.dataset.seq) > batch[0].seq) {
      this.insertLate(batch);
    } else {
      this.append(batch);
    }
    c.dataset.count = String(this.seen.size);
    c.dataset.lastSeq = String(this.lastSeq);
    if (stick) c.scrollTop = c.scrollHeight;
    for (const ev of batch) this.onEvent?.(ev);
  }

  // Rows go into chunks of CHUNK rows, and a chunk off screen skips style, layout and
  // paint (content-visibility in style.css): the browser tracks a few dozen chunks
  // instead of thousands of rows. The open chunk is filled first, then new chunks are
  // built off the page and added with one fragment.
  append(batch) {
    const c = this.container;
    const rows = [];
    for (const ev of batch) {
      const row = this.row(ev);
      if (row) rows.push(row);
    }
    let i = 0;
    const open = c.lastElementChild;
    if (open && open.childElementCount < CHUNK) {
      const frag = document.createDocumentFragment();
      for (; i < rows.length && open.childElementCount + frag.childElementCount < CHUNK; i++) frag.appendChild(rows[i]);
      open.appendChild(frag);
    }
    const frag = document.createDocumentFragment();
    while (i < rows.length) {
      const chunk = el("div", "ev-chunk");
      for (let n = 0; n < CHUNK && i < rows.length; n++, i++) chunk.appendChild(rows[i]);
      frag.appendChild(chunk);
    }
    c.appendChild(frag);
  }

  // An event older than the last shown (only if the server sent out of order) goes
  // to its place. Called only when a row is shown already.
  insertLate(batch) {
    const rows = Array.from(this.container.getElementsByClassName("ev"));
    for (const ev of batch) {
      const row = this.row(ev);
      if (!row) continue;
      let at = rows.length - 1;
      while (at >= 0 && Number(rows[at].dataset.seq) > ev.seq) at--;
      if (at >= 0) rows[at].after(row);
      else rows[0].before(row);
      rows.splice(at + 1, 0, row);
    }
  }

  // A piece of a message: shown now, after every event before it. Its first piece
  // opens a live row; a piece missed (joined late) leaves the message to its whole.
  delta(ev) {
    const p = ev.payload ?? {};
    const thought = p.thought === true;
    const l = this.live;
    if (p.part === 0) {
      if (this.frame) cancelAnimationFrame(this.frame);
      this.flush();
      l?.row.remove();
      const row = el("div", `ev ev-${thought ? "agent-thinking" : "agent-text"} ev-live`);
      row.appendChild(el("span", "ev-who", thought ? "thinking" : "agent"));
      const text = row.appendChild(el("div", "ev-text", plain(p.text)));
      let chunk = this.container.lastElementChild;
      if (!chunk || chunk.childElementCount >= CHUNK) chunk = this.container.appendChild(el("div", "ev-chunk"));
      const c = this.container;
      const stick = c.scrollHeight - c.scrollTop - c.clientHeight < 40;
      chunk.appendChild(row);
      if (stick) c.scrollTop = c.scrollHeight;
      this.prevKey = "";
      this.live = { task: ev.task_id, thought, next: 1, row, text };
    } else if (l && l.task === ev.task_id && l.thought === thought && l.next === p.part) {
      l.next += 1;
      l.text.textContent += plain(p.text);
    }
  }

  /** The row of a new event; null when it changed a row shown already (a decision). */
  row(ev) {
    const l = this.live;
    if (l && ev.kind === "agent" && l.task === ev.task_id && (ev.payload?.type === (l.thought ? "thinking" : "text"))) {
      // The whole message, in place of its pieces.
      l.row.remove();
      this.live = null;
    }
    if (ev.kind === "approval") return this.approval(ev);
    if (ev.kind === "task") this.ended(ev.payload?.task ?? {}, ev.at);
    const [row, key] = node(ev, this.prevKey);
    this.prevKey = key;
    return row;
  }

  // A request's first event makes its row; the same request again (decided) redraws
  // that row in place, and makes none.
  approval(ev) {
    const a = ev.payload ?? {};
    const known = this.asks.get(a.id);
    if (known) {
      if (a.decision) {
        known.a = a;
        fillApproval(known.row, a, ev.at);
      }
      return null;
    }
    const row = document.createElement("div");
    row.dataset.seq = String(ev.seq);
    fillApproval(row, a, ev.at);
    this.asks.set(a.id, { row, a });
    this.prevKey = "";
    return row;
  }

  // A task that ended with a request still shown open: its block takes the decision
  // the final task document keeps, else says the task ended (a restart interrupted it)
  // rather than wait on.
  ended(task, at) {
    for (const ask of this.asks.values()) {
      if (ask.a.decision || ask.a.task_id !== task.id) continue;
      const kept = (task.approvals ?? []).find((x) => x.id === ask.a.id && x.decision);
      if (kept) ask.a = kept;
      fillApproval(ask.row, ask.a, at, task.status ?? "ended");
    }
  }

  /** Stops any pending frame. */
  close() {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = 0;
  }
}
