// The binding preview: a path checked by core's rules (in wasm) on every keystroke,
// where the session's next message would run if it were linked there (core's
// resolution, in wasm), and the CLI command that would do it. Nothing here writes:
// the page can only show the command; the user runs it in their own shell.

import { h, replace } from "./dom.js";
import { loadWasm } from "./facts.js";

/** The platforms Berth runs on: the paths a binding can name. */
const PLATFORMS = ["linux", "macos"];
const MODES = ["in-place", "worktree"];

/** The server's platform when it does not say: the browser's, if a Mac, else Linux. */
function guessPlatform() {
  return /Macintosh|Mac OS X/.test(navigator.userAgent) ? "macos" : "linux";
}

/** `text` as one shell word (POSIX quoting; `~` left bare so the shell expands it). */
export function shellWord(text) {
  if (/^[A-Za-z0-9_@%+=:,./~-]+$/.test(text)) return text;
  const q = `'${text.replace(/'/g, `'\\''`)}'`;
  return text.startsWith("~/") ? `~/${shellWord(text.slice(2))}` : q;
}

function parse(json) {
  try {
    return JSON.parse(json);
  } catch {
    return { error: { message: `the preview module answered something unreadable: ${json}` } };
  }
}

/** The binding fields the preview reads (the read view; never a real path). */
function readView(b) {
  return b ? { display: b.display, daemon: b.daemon, daemon_name: b.daemon_name, mode: b.mode, state: b.state } : null;
}

/** `out` of wasm `preview` in words; `name` turns a machine id into its name. */
function resolutionText(out, name) {
  if (out.error) return { kind: "error", text: out.error.message };
  const r = out.resolution;
  switch (r.kind) {
    case "in_place":
      return { kind: r.kind, text: `in place, in ${r.dir}, on ${name(r.machine)}` };
    case "worktree":
      return { kind: r.kind, text: `in a git worktree of ${r.dir}, on ${name(r.machine)}` };
    case "scratch":
      return { kind: r.kind, text: "in the session's scratch directory" };
    case "wait":
      return { kind: r.kind, text: `nowhere yet: it waits for ${name(r.machine)}` };
    case "refuse":
      return { kind: r.kind, text: `nowhere: refused (${r.code})` };
    default:
      return { kind: String(r.kind), text: String(r.kind) };
  }
}

/**
 * Mounts the preview for `session` into `box`; `facts` from serverFacts(). Returns
 * `{update(session, latestTask)}` for when the session changes.
 */
export function mountPreview(box, session, facts) {
  const homePlatform = facts.platform && PLATFORMS.includes(facts.platform) ? facts.platform : guessPlatform();
  let platform = homePlatform;
  let mode = session.binding?.mode ?? "in-place";
  let wasm = null;
  /** The status of the session's latest task, as the page last saw it. */
  let latestStatus = null;

  const fieldId = (n) => `preview-${n}`;
  const radio = (name, value, checked, onPick) =>
    h(
      "label",
      { class: "choice" },
      h("input", { attrs: { type: "radio", name, value, checked }, on: { change: () => onPick(value) } }),
      h("span", { text: value }),
    );
  const platforms = h(
    "fieldset",
    { class: "choices", data: { testid: "platform" } },
    h("legend", { text: "Platform" }),
    PLATFORMS.map((p) =>
      radio("preview-platform", p, p === platform, (v) => {
        platform = v;
        run();
      }),
    ),
  );
  const modes = h(
    "fieldset",
    { class: "choices" },
    h("legend", { text: "Mode" }),
    MODES.map((m) =>
      radio("preview-mode", m, m === mode, (v) => {
        mode = v;
        run();
      }),
    ),
  );
  const input = h("input", {
    class: "path-input",
    attrs: {
      id: fieldId("path"),
      type: "text",
      spellcheck: "false",
      autocomplete: "off",
      autocapitalize: "off",
      placeholder: "/path/to/a/project",
      "aria-describedby": fieldId("verdict"),
    },
    on: { input: () => run() },
  });
  const verdict = h("div", { class: "verdict", attrs: { id: fieldId("verdict"), role: "status", "aria-live": "polite" }, data: { testid: "verdict" } });
  const where = h("div", { class: "where-next", data: { testid: "where-next" } });
  const command = h("input", {
    class: "command",
    attrs: { type: "text", readonly: true, "aria-label": "The command that would link this path", placeholder: "type an acceptable path above" },
    data: { testid: "link-command" },
  });
  const copied = h("span", { class: "copied muted", attrs: { role: "status" } });
  const copy = h("button", { text: "Copy", attrs: { type: "button", disabled: true }, on: { click: () => copyCommand() } });

  replace(
    box,
    h("h2", { text: "Binding preview" }),
    h("p", { class: "muted small", text: "Checks a directory as a link would, and shows where the next message would run. Nothing here changes the session: copy the command and run it in your shell." }),
    h("div", { class: "row" }, platforms, modes),
    h("label", { class: "field-label", attrs: { for: fieldId("path") }, text: "Directory" }),
    input,
    verdict,
    where,
    h("label", { class: "field-label", text: "Command" }),
    h("div", { class: "command-row" }, command, copy),
    copied,
  );

  function home() {
    // The server's home applies only to its own platform's paths.
    return platform === homePlatform ? facts.home : "";
  }

  function resolve(binding, origin) {
    // As the scheduler does: the bound machine claims while it is online, else this
    // server's. It is offline when its binding says so, or, live, when the session's
    // latest task waits for it.
    const offline = session.binding?.state === "machine_offline" || latestStatus === "waiting_daemon";
    const claimer = session.binding && !offline ? session.binding.daemon : facts.machine;
    const online = [facts.machine];
    if (session.binding && !offline) online.push(session.binding.daemon);
    return parse(wasm.preview(JSON.stringify({ origin, binding, claimer, online })));
  }

  function machineName(id) {
    const b = session.binding;
    if (b && id === b.daemon) return `machine ${b.daemon_name || id}`;
    if (id === facts.machine) return facts.machineName ? `this machine (${facts.machineName})` : "this machine";
    return `machine ${id}`;
  }

  function showWhere(label, out, cls) {
    const r = resolutionText(out, machineName);
    return h(
      "div",
      { class: `resolution kind-${r.kind} ${cls ?? ""}` },
      h("span", { class: "resolution-label", text: label }),
      h("span", { class: "resolution-text", text: r.text }),
      out.message ? h("span", { class: "resolution-why", text: `because ${out.message}` }) : null,
    );
  }

  function run() {
    if (!wasm) return;
    const typed = input.value;
    const now = resolve(readView(session.binding), "desktop");
    if (typed.trim() === "") {
      replace(verdict, h("span", { class: "muted", text: "Type a directory to check it." }));
      replace(where, showWhere("Next message from the CLI runs", now));
      command.value = "";
      copy.disabled = true;
      return;
    }
    const report = parse(wasm.check_path(platform, typed, home()));
    if (report.error) {
      replace(verdict, h("span", { class: "verdict-bad", text: report.error.message }));
      command.value = "";
      copy.disabled = true;
      return;
    }
    verdict.dataset.ok = String(report.ok);
    verdict.dataset.code = report.code ?? "";
    replace(
      verdict,
      h("span", { class: report.ok ? "verdict-ok" : "verdict-bad", text: report.ok ? "✓ can be bound" : "✗ refused" }),
      report.code ? h("code", { class: "verdict-code", text: report.code }) : null,
      h("span", { class: "verdict-message", text: report.message }),
      report.display ? h("span", { class: "verdict-display" }, "shown as ", h("code", { text: report.display })) : null,
      report.hint ? h("span", { class: "verdict-hint", text: report.hint }) : null,
      !report.ok && report.code === "path_not_absolute" && typed.trim().startsWith("~") && !home()
        ? h("span", { class: "verdict-hint", text: "The server did not say where home is: type the full path." })
        : null,
    );
    if (!report.ok) {
      replace(where, showWhere("Next message from the CLI still runs", now));
      command.value = "";
      copy.disabled = true;
      return;
    }
    const b = session.binding;
    const next = {
      display: report.display,
      daemon: b?.daemon ?? facts.machine,
      daemon_name: b?.daemon_name ?? facts.machineName ?? facts.machine,
      mode,
      state: "ok",
    };
    replace(
      where,
      showWhere("After linking, the next message from the CLI runs", resolve(next, "desktop")),
      showWhere("A message from a chat channel or this page would run", resolve(next, "channel"), "secondary"),
    );
    const modeFlag = mode === "in-place" ? "" : ` --mode ${mode}`;
    command.value = `berth session link ${session.id} ${shellWord(typed.trim())}${modeFlag}`;
    copy.disabled = false;
  }

  async function copyCommand() {
    if (!command.value) return;
    try {
      await navigator.clipboard.writeText(command.value);
      copied.textContent = "copied";
    } catch {
      command.select();
      copied.textContent = "selected: press Ctrl+C (or ⌘C) to copy";
    }
  }

  replace(verdict, h("span", { class: "muted", text: "Loading the checker…" }));
  // The module loads once the page is idle: on a long session the transcript's backlog
  // comes first, and compiling the module would compete with it for the main thread.
  const start = () => loadWasm().then(ready);
  if (window.requestIdleCallback) requestIdleCallback(start, { timeout: 1500 });
  else setTimeout(start, 0);
  function ready(w) {
    if (w.error) {
      box.dataset.unavailable = "true";
      input.disabled = true;
      replace(verdict, h("span", { class: "verdict-bad", data: { testid: "preview-unavailable" }, text: `The preview is unavailable: ${w.error}` }));
      return;
    }
    wasm = w.mod;
    box.dataset.ready = "true";
    run();
  }

  return {
    update(s, latest) {
      session = s;
      latestStatus = latest?.status ?? null;
      run();
    },
  };
}
