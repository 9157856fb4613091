// Berth's web UI in a real browser (headless Chromium driven by playwright-core):
// `berth serve` with fake `command` agents, sessions made and messages sent through
// the CLI, and the page checked for what docs/architecture.md's trust model promises.
//
// Run: scripts/test-browser.sh (builds what it needs), or, with the binary and the
// wasm bundle built: cd tests/browser && node --test ui.test.mjs
// Env: BERTH_BIN (default target/debug/berth), CHROMIUM (default /usr/bin/chromium).

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "../..");
const BIN = process.env.BERTH_BIN || path.join(repo, "target/debug/berth");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const ARTIFACTS = path.join(repo, "tests/artifacts");
/** The fake user: the test asserts this name never reaches the page. */
const USER = "alice-7f3a";

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "berth-ui-"));
const home = path.join(tmp, "home", USER);
const env = {
  ...process.env,
  HOME: home,
  USER,
  LOGNAME: USER,
  BERTH_HOME: path.join(tmp, "berth"),
  BERTH_CONFIG_DIR: path.join(tmp, "config"),
  BERTH_LOCK_DIR: path.join(tmp, "lock"),
  // A daemon that stops is offline after 1.5 s rather than 15.
  BERTH_DAEMON_WINDOW_MS: "1500",
  NO_COLOR: "1",
};

let server = null;
let serveLog = "";
let proxy = null;
let context = null;
let base = "";
let token = "";
const ids = {};
const figures = {};

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

/** Runs the CLI; resolves with stdout, rejects with its stderr. */
function berth(args, timeout = 30000, withEnv = env) {
  return new Promise((resolve, reject) => {
    execFile(BIN, args, { env: withEnv, timeout, cwd: tmp }, (err, stdout, stderr) => {
      if (err) reject(new Error(`berth ${args.join(" ")} failed: ${err.message}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

function agentScript(name, body) {
  const file = path.join(tmp, "agents", `${name}.sh`);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, `#!/bin/sh\ncat >/dev/null\n${body}\n`, { mode: 0o755 });
  return file;
}

async function waitFor(what, fn, ms = 20000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}\n--- serve log ---\n${serveLog}`);
    await sleep(100);
  }
}

async function api(p) {
  const res = await fetch(`${base}${p}`, { headers: { authorization: `Bearer ${token}` } });
  return res.json();
}

/**
 * A pass-through HTTP proxy to the web listener (rewriting Host, which the listener
 * checks) whose open event streams the test can cut: a dropped SSE connection.
 */
function startProxy(target) {
  const streams = new Set();
  const srv = http.createServer((req, res) => {
    const up = http.request(
      { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: { ...req.headers, host: target.host } },
      (r) => {
        res.writeHead(r.statusCode, r.headers);
        res.flushHeaders();
        r.pipe(res);
      },
    );
    up.on("error", () => res.destroy());
    req.pipe(up);
    if (req.url.includes("/events")) {
      const pair = { req, res, up };
      streams.add(pair);
      res.on("close", () => streams.delete(pair));
    }
  });
  return new Promise((resolve) =>
    srv.listen(0, "127.0.0.1", () =>
      resolve({
        url: `http://127.0.0.1:${srv.address().port}`,
        cut() {
          const n = streams.size;
          for (const s of streams) {
            s.up.destroy();
            s.res.socket?.destroy();
          }
          streams.clear();
          return n;
        },
        close: () => new Promise((r) => srv.close(r)).catch(() => {}),
        server: srv,
      }),
    ),
  );
}

before(async () => {
  for (const d of ["code/app", "code/big", "code/tick", "code/shared", "code/moved", "code/moved-to", "code/remote"]) fs.mkdirSync(path.join(home, d), { recursive: true });
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  assert.ok(fs.existsSync(BIN), `no berth binary at ${BIN}: cargo build -p berth-local-agent --bin berth --bin berth-full`);
  assert.ok(fs.existsSync(CHROMIUM), `no Chromium at ${CHROMIUM}`);

  server = spawn(BIN, ["serve", "--listen", "127.0.0.1:0", "--allow-daemons"], { env, cwd: tmp, stdio: ["ignore", "pipe", "pipe"] });
  // Also when the runner is interrupted and `after` does not run.
  process.once("exit", () => server.exitCode == null && server.kill("SIGKILL"));
  server.stdout.on("data", (d) => (serveLog += d));
  server.stderr.on("data", (d) => (serveLog += d));
  const serveJson = path.join(env.BERTH_HOME, "serve.json");
  const info = await waitFor("serve.json", () => {
    if (server.exitCode != null) throw new Error(`berth serve exited with ${server.exitCode}\n${serveLog}`);
    try {
      return JSON.parse(fs.readFileSync(serveJson, "utf8"));
    } catch {
      return null;
    }
  });
  base = info.url.replace(/\/$/, "");
  token = info.token;
  assert.match(base, /^http:\/\/127\.0\.0\.1:\d+$/, "the web listener is on loopback");

  // Streams slowly, with hostile output: markup, an ANSI colour, a 5,000-character line.
  const stream = agentScript(
    "stream",
    `echo "first line from the agent"
sleep 1
echo '<script>window.__pwned = 1</script>'
echo '<img src=x onerror="window.__pwned = 2">'
printf '\\033[31mred\\033[0m and plain\\n'
echo "to stderr" >&2
printf 'L%.0s' $(seq 1 5000); echo
sleep 2
echo "last line from the agent"`,
  );
  const many = agentScript("many", `seq 1 5000 | sed 's/^/line /'`);
  const tick = agentScript("tick", `i=1; while [ $i -le 40 ]; do echo "tick $i"; i=$((i+1)); sleep 0.1; done`);
  await berth(["agent", "add", "stream", "--kind", "command", "--command", "sh", stream]);
  await berth(["agent", "add", "many", "--kind", "command", "--command", "sh", many]);
  await berth(["agent", "add", "tick", "--kind", "command", "--command", "sh", tick]);
  const newSession = async (agent, title, dir) =>
    JSON.parse(await berth(["session", "new", "--agent", agent, "--title", title, "--dir", path.join(home, dir), "--json"])).id;
  ids.stream = await newSession("stream", "Hostile <b>title</b> & co", "code/app");
  ids.many = await newSession("many", "Five thousand lines", "code/big");
  ids.tick = await newSession("tick", "Ticker", "code/tick");
  // The 5,000-line session is run to its end before any page opens.
  await berth(["send", ids.many, "count to 5000"], 60000);

  const profile = path.join(tmp, "profile");
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless=new",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
    viewport: { width: 1400, height: 900 },
    timeout: 30000,
  });
  context.setDefaultTimeout(15000);
});

after(async () => {
  await context?.close().catch(() => {});
  await proxy?.close();
  if (server && server.exitCode == null) {
    server.kill("SIGTERM");
    const exited = await Promise.race([new Promise((r) => server.once("exit", () => r(true))), sleep(5000).then(() => false)]);
    if (!exited) server.kill("SIGKILL");
  }
  fs.rmSync(tmp, { recursive: true, force: true });
  if (Object.keys(figures).length) console.log(`figures: ${JSON.stringify(figures)}`);
});

/** Pages of the running test, for the failure report. */
let open = [];

/**
 * `test()` that, on failure, saves a screenshot of each page the test opened to
 * tests/artifacts/failed-<test>-<n>.png and adds what the server logged.
 */
function uiTest(name, opts, fn) {
  test(name, opts, async (t) => {
    open = [];
    try {
      await fn(t);
    } catch (e) {
      const slug = name.replace(/[^a-z0-9]+/gi, "-").slice(0, 40);
      for (const [i, page] of open.entries()) {
        if (page.isClosed()) continue;
        await page.screenshot({ path: path.join(ARTIFACTS, `failed-${slug}-${i}.png`), fullPage: true }).catch(() => {});
      }
      e.message += `\n--- serve log (last 2,000 characters) ---\n${serveLog.slice(-2000)}`;
      throw e;
    }
  });
}

/** A page that records every request it issues. */
async function openPage() {
  const page = await context.newPage();
  open.push(page);
  const requests = [];
  page.on("request", (r) => requests.push({ method: r.method(), url: r.url() }));
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  return { page, requests, errors };
}

const bodyText = (page) => page.evaluate(() => document.body.innerText);

uiTest("the list shows the sessions, the token leaves the address bar", { timeout: 30000 }, async () => {
  const { page, errors } = await openPage();
  await page.goto(`${base}/?token=${token}`);
  await page.locator(`tr[data-session="${ids.stream}"]`).waitFor();
  assert.equal(new URL(page.url()).search, "", "the token is stripped from the address bar");
  const row = page.locator(`tr[data-session="${ids.stream}"]`);
  assert.equal(await row.locator("td.title a").textContent(), "Hostile <b>title</b> & co");
  assert.equal(await row.locator("td.path").textContent(), "~/code/app");
  // The short id, as the CLI prints it: its own column, monospace, the whole id in its title.
  assert.deepEqual(await page.evaluate(() => [...document.querySelectorAll("table.sessions th")].map((th) => th.textContent)), [
    "Id",
    "Title",
    "Agent",
    "Directory",
    "Mode",
    "Latest task",
    "Updated",
  ]);
  const idCell = row.locator("td.id");
  assert.equal(await idCell.textContent(), ids.stream.slice(0, 8));
  assert.equal(await idCell.getAttribute("title"), ids.stream);
  assert.match(await idCell.evaluate((e) => getComputedStyle(e).fontFamily), /mono/i);
  assert.ok(!(await bodyText(page)).includes(ids.stream), "no full id in the list's text");
  const done = page.locator(`tr[data-session="${ids.many}"]`);
  assert.equal(await done.getAttribute("data-state"), "succeeded");
  // Filter by state: "Succeeded" keeps only the finished session.
  await page.click('button[data-filter="ok"]');
  assert.equal(await page.locator("tbody tr").count(), 1);
  assert.match(page.url(), /\?state=ok$/);
  await page.click('button[data-filter="all"]');
  assert.equal(await page.locator("tbody tr").count(), 3);
  assert.ok(!(await bodyText(page)).includes(USER), "the user's name is not on the list");
  await page.screenshot({ path: path.join(ARTIFACTS, "list.png"), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
});

uiTest("the session streams the agent's output, inertly, under a header that says where it runs", { timeout: 60000 }, async () => {
  const { page, requests, errors } = await openPage();
  await page.goto(`${base}/sessions/${ids.stream}`);
  await page.locator(".live[data-state=live]").waitFor();
  await berth(["send", ids.stream, "please stream", "--detach"]);

  // Output appears while the task is still running.
  await page.locator(".transcript .ev-text", { hasText: "first line from the agent" }).waitFor();
  const during = await api(`/api/v1/tasks?session=${ids.stream}`);
  assert.equal(during.at(-1).status, "running", "the first line showed before the task ended");
  assert.equal(await page.locator(".transcript .ev-text", { hasText: "last line from the agent" }).count(), 0);
  await page.locator(".transcript .ev-task").waitFor({ timeout: 20000 });

  // The header: display form, mode, machine, state; never the user's name.
  assert.equal(await page.locator(".where-dir").textContent(), "~/code/app");
  assert.equal(await page.locator(".binding-state .fact-value").textContent(), "ok");
  assert.equal(await page.locator(".session-title").textContent(), "Hostile <b>title</b> & co");
  const text = await bodyText(page);
  assert.ok(!text.includes(USER), "the user's name is not in the session view");

  // Hostile output is text: no element made from it, no script ran, no escape codes.
  const t = await page.evaluate(() => {
    const tr = document.querySelector(".transcript");
    return {
      pwned: window.__pwned,
      scripts: tr.querySelectorAll("script, img, b").length,
      text: tr.textContent,
      overflow: tr.scrollWidth - tr.clientWidth,
      long: Math.max(...[...tr.querySelectorAll(".ev-text")].map((e) => e.getBoundingClientRect().width)),
      width: tr.getBoundingClientRect().width,
    };
  });
  assert.equal(t.pwned, undefined);
  assert.equal(t.scripts, 0);
  assert.ok(t.text.includes("<script>window.__pwned = 1</script>"), "markup shows as literal text");
  assert.ok(t.text.includes('<img src=x onerror="window.__pwned = 2">'));
  assert.ok(t.text.includes("red and plain"), "ANSI colour codes are stripped");
  assert.ok(!t.text.includes("\u001b") && !t.text.includes("[31m"), "no escape codes shown");
  assert.ok(t.text.includes("to stderr"));
  assert.ok(t.text.includes("L".repeat(5000)), "the long line is whole");
  assert.ok(t.overflow <= 1 && t.long <= t.width, "the long line wraps inside the transcript");

  // Tasks: the finished task with its duration and exit state.
  const taskRow = page.locator(".tasks tbody tr").first();
  await page.locator('.tasks tbody tr[data-status="succeeded"]').waitFor();
  assert.match(await taskRow.locator("td.num").textContent(), /^\d+(\.\d)? s$|ms$/);
  assert.equal(await exitOf(page, during.at(-1).id).textContent(), "code 0");
  await page.screenshot({ path: path.join(ARTIFACTS, "session.png"), fullPage: true });

  // Nothing the page did itself was a write.
  const methods = [...new Set(requests.map((r) => r.method))];
  assert.deepEqual(methods, ["GET"], `the page issued only GETs: ${JSON.stringify(requests.filter((r) => r.method !== "GET"))}`);
  assert.deepEqual(errors, [], "no script error, no failed load");
  // And a write from the page's context is refused by the listener (the browser logs
  // each 405, which is the point).
  const writes = await page.evaluate(async (id) => {
    const out = [];
    for (const [m, u, body] of [
      ["POST", "/api/v1/sessions", "{}"],
      ["POST", `/api/v1/sessions/${id}/messages`, '{"text":"hi"}'],
      ["PUT", `/api/v1/sessions/${id}/binding`, '{"dir":"/tmp"}'],
      ["DELETE", `/api/v1/sessions/${id}/binding`, null],
      ["POST", "/api/v1/agents", "{}"],
      ["POST", "/api/v1/check", '{"path":"/tmp"}'],
    ]) {
      const r = await fetch(u, { method: m, body, headers: { "content-type": "application/json" } });
      out.push(`${m} ${u.replace(id, "ID")} ${r.status}`);
    }
    return out;
  }, ids.stream);
  assert.deepEqual(writes, [
    "POST /api/v1/sessions 405",
    "POST /api/v1/sessions/ID/messages 405",
    "PUT /api/v1/sessions/ID/binding 405",
    "DELETE /api/v1/sessions/ID/binding 405",
    "POST /api/v1/agents 405",
    "POST /api/v1/check 405",
  ]);
  const after = await api(`/api/v1/tasks?session=${ids.stream}`);
  assert.equal(after.length, 1, "no task was created from the page");

  // A reload lands on the same view, with the same transcript once.
  const count = await page.locator(".transcript .ev").count();
  await page.reload();
  await page.locator(".transcript .ev-task").waitFor();
  assert.equal(await page.locator(".where-dir").textContent(), "~/code/app");
  await page.waitForFunction((n) => document.querySelectorAll(".transcript .ev").length >= n, count);
  assert.equal(await page.locator(".transcript .ev").count(), count);
  await page.close();
});

uiTest("an ACP agent's message grows as it is written, then stands once, whole", { timeout: 60000 }, async () => {
  // The scripted ACP peer of the end-to-end tests: each prompt line is a step.
  const peer = path.join(tmp, "agents", "stream_peer.py");
  fs.mkdirSync(path.dirname(peer), { recursive: true });
  fs.copyFileSync(path.join(repo, "tests/src/peers/stream_peer.py"), peer);
  // The JSON-RPC module the peers share, beside it.
  fs.copyFileSync(path.join(repo, "tests/src/peers/acp_rpc.py"), path.join(path.dirname(peer), "acp_rpc.py"));
  await berth(["agent", "add", "streamer", "--kind", "acp", "--command", "python3", peer]);
  fs.mkdirSync(path.join(home, "code/streams"), { recursive: true });
  const id = JSON.parse(await berth(["session", "new", "--agent", "streamer", "--title", "Streams", "--dir", path.join(home, "code/streams"), "--json"])).id;
  const { page, errors } = await openPage();
  await page.goto(`${base}/sessions/${id}`);
  await page.locator(".live[data-state=live]").waitFor();
  const gate = path.join(home, "code/streams/seen");
  await berth(["send", id, `gap-ms: 100\ngate: ${gate}\nchunks: first <b>piece</b> |second piece |and the end.`, "--detach"]);

  // The first pieces show while the agent still waits to write its last.
  const live = page.locator(".transcript .ev-live .ev-text");
  await page.waitForFunction(() => document.querySelector(".transcript .ev-live .ev-text")?.textContent.includes("second piece"));
  assert.equal(await live.textContent(), "first <b>piece</b> second piece ", "pieces are text, held to whole words");
  assert.equal(await page.locator(".transcript .ev-live b").count(), 0, "no element made from a piece");
  fs.writeFileSync(gate, "");

  // Then the whole message, once, in place of its pieces.
  await page.locator(".transcript .ev-task").waitFor({ timeout: 20000 });
  const texts = await page.locator(".transcript .ev-agent-text .ev-text").allTextContents();
  assert.deepEqual(texts, ["first <b>piece</b> second piece and the end."]);
  assert.equal(await page.locator(".transcript .ev-live").count(), 0);
  assert.deepEqual(errors, []);
  await page.close();
});

uiTest("the binding preview checks paths in wasm and shows the command, never runs it", { timeout: 30000 }, async () => {
  const { page, requests, errors } = await openPage();
  await page.goto(`${base}/sessions/${ids.stream}`);
  await page.locator(".preview[data-ready=true]").waitFor();
  const input = page.locator(".path-input");
  const verdict = page.locator("[data-testid=verdict]");
  const command = page.locator("[data-testid=link-command]");

  // The panel checks on each input event, synchronously: the verdict is there at once.
  const shown = async () => ({
    ok: await verdict.getAttribute("data-ok"),
    code: await verdict.getAttribute("data-code"),
    command: await command.inputValue(),
  });
  await input.fill(home);
  const caps = await api("/api/v1/capabilities");
  assert.deepEqual(
    await shown(),
    { ok: "false", code: "home_directory", command: "" },
    `the home directory is refused (GET capabilities: ${JSON.stringify(caps)}; the browser knows the home only from its \`home\`)`,
  );

  const project = path.join(home, "code", "app");
  await input.fill(project);
  assert.deepEqual(await shown(), { ok: "true", code: "", command: `berth session link ${ids.stream} ${project}` });
  assert.equal(await verdict.locator(".verdict-display code").textContent(), "~/code/app");
  assert.equal(await command.getAttribute("readonly"), "");
  assert.match(await page.locator("[data-testid=where-next] .resolution-text").first().textContent(), /^in place, in ~\/code\/app/);
  await page.screenshot({ path: path.join(ARTIFACTS, "session-preview.png"), fullPage: true });

  // Each keystroke is checked: a partial path on its way to a refused one.
  await input.fill("");
  await input.pressSequentially("/etc");
  assert.equal(await verdict.getAttribute("data-ok"), "false");
  assert.equal(await verdict.getAttribute("data-code"), "system_root");

  // The platform switch offers the platforms Berth runs on, and no other.
  assert.deepEqual(await page.evaluate(() => [...document.querySelectorAll("input[name=preview-platform]")].map((i) => i.value)), ["linux", "macos"]);
  await page.check("input[name=preview-platform][value=macos]");
  await input.fill("/Users/someone/app");
  assert.equal(await verdict.getAttribute("data-ok"), "true");
  await page.check("input[name=preview-platform][value=linux]");

  assert.deepEqual([...new Set(requests.map((r) => r.method))], ["GET"]);
  assert.ok(!(await bodyText(page)).includes(USER));
  assert.deepEqual(errors, []);
  await page.close();
});

uiTest("the path check's speed in the page (printed, not asserted)", { timeout: 20000 }, async () => {
  const { page } = await openPage();
  await page.goto(`${base}/sessions/${ids.stream}`);
  await page.locator(".preview[data-ready=true]").waitFor();
  // The path check's speed, in the page, through the same module the panel uses.
  // With the home directory, as the panel calls it when the server names it. The
  // first 1,000 calls run partly in V8's baseline tier; the figure after 2,000 more
  // is the steady state.
  const [cold, warm] = await page.evaluate(async ({ p, h }) => {
    const w = await import("/ui/pkg/berth_wasm.js");
    await w.default();
    const n = 1000;
    const time = (tag) => {
      const t0 = performance.now();
      for (let i = 0; i < n; i++) w.check_path("linux", `${p}/${tag}${i}`, h);
      return ((performance.now() - t0) * 1000) / n;
    };
    const first = time("cold");
    for (let i = 0; i < 2 * n; i++) w.check_path("linux", `${p}/warm${i}`, h);
    return [first, time("dir")];
  }, { p: path.join(home, "code", "app"), h: home });
  figures.check_path_us_per_call_first_1000 = Number(cold.toFixed(2));
  figures.check_path_us_per_call_warm = Number(warm.toFixed(2));
  console.log(`path check in the browser: ${cold.toFixed(2)} µs/call over the first 1,000 calls, ${warm.toFixed(2)} µs/call warm`);
  await page.close();
});

uiTest("an unknown session id is a clear page with a way back", { timeout: 20000 }, async () => {
  const { page } = await openPage();
  await page.goto(`${base}/sessions/no-such-session-0000`);
  await page.locator("[data-testid=no-such-session]").waitFor();
  assert.equal(await page.locator("h1").textContent(), "No such session");
  assert.ok((await bodyText(page)).includes("no-such-session-0000"));
  await page.click("text=Back to the sessions");
  await page.locator(`tr[data-session="${ids.stream}"]`).waitFor();
  assert.equal(new URL(page.url()).pathname, "/");
  await page.close();
});

uiTest("a dropped event stream reconnects without gaps or duplicates", { timeout: 60000 }, async () => {
  proxy = await startProxy(new URL(base));
  const { page } = await openPage();
  await page.goto(`${proxy.url}/sessions/${ids.tick}?token=${token}`);
  await page.locator(".live[data-state=live]").waitFor();
  await berth(["send", ids.tick, "tick", "--detach"]);
  await page.locator(".transcript .ev-text", { hasText: /^tick 8$/ }).waitFor();
  assert.equal(proxy.cut(), 1, "one event stream was open");
  await page.locator(".live[data-state=reconnecting]").waitFor({ timeout: 5000 });
  await page.locator(".transcript .ev-task").waitFor({ timeout: 30000 });
  await page.locator(".live[data-state=live]").waitFor();
  const seen = await page.evaluate(() => ({
    seqs: [...document.querySelectorAll(".transcript .ev")].map((e) => Number(e.dataset.seq)),
    ticks: [...document.querySelectorAll(".transcript .ev-text")].map((e) => e.textContent).filter((t) => /^tick \d+$/.test(t)),
  }));
  const expected = Array.from({ length: seen.seqs.length }, (_, i) => i + 1);
  assert.deepEqual(seen.seqs, expected, "every seq once, in order");
  assert.deepEqual(seen.ticks, Array.from({ length: 40 }, (_, i) => `tick ${i + 1}`));
  // The server resumes exactly, so the page's own guard against replays is checked
  // directly: the same events pushed twice, out of order, render once and in order.
  const replay = await page.evaluate(async () => {
    const { Transcript } = await import("/ui/transcript.js");
    const box = document.createElement("div");
    const t = new Transcript(box);
    const ev = (seq) => ({ seq, task_id: "t", kind: "agent", at: null, payload: { type: "text", text: `e${seq}` } });
    for (const seq of [1, 2, 3]) t.push(ev(seq));
    t.flush();
    for (const seq of [2, 3, 5, 4, 1, 5]) t.push(ev(seq));
    t.flush();
    t.close();
    return [...box.querySelectorAll(".ev-text")].map((e) => e.textContent);
  });
  assert.deepEqual(replay, ["e1", "e2", "e3", "e4", "e5"]);
  await page.close();
});

uiTest("a task waiting for its directory says in words whom it waits for: the session, by name, and short ids", { timeout: 90000 }, async () => {
  // An agent that holds the directory until the test lets it go.
  const release = path.join(tmp, "release-busy");
  const blocker = agentScript("blocker", `echo "holding the directory"\ni=0; while [ ! -f '${release}' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done`);
  await berth(["agent", "add", "blocker", "--kind", "command", "--command", "sh", blocker]);
  fs.mkdirSync(path.join(home, "code/busy"), { recursive: true });
  const newSession = async (title) =>
    JSON.parse(await berth(["session", "new", "--agent", "blocker", "--title", title, "--dir", path.join(home, "code/busy"), "--json"])).id;
  const first = await newSession("Fix login");
  const second = await newSession("Second in line");
  await berth(["send", first, "fix the login form", "--detach"]);
  const holder = await waitFor("the first task to run", async () => {
    const t = (await api(`/api/v1/tasks?session=${first}`)).at(-1);
    return t?.status === "running" ? t : null;
  });
  await berth(["send", second, "go", "--detach"]);
  const waiting = await waitFor("the second task to wait", async () => {
    const t = (await api(`/api/v1/tasks?session=${second}`)).at(-1);
    return t?.status === "waiting_lock" ? t : null;
  });
  // The server names the holder's session (the local user sees every session).
  assert.deepEqual(waiting.waits_for, { task_id: holder.id, session_id: first, session_title: "Fix login" });
  assert.equal(holder.waits_for, undefined, "a running task waits for nobody");

  const { page, errors } = await openPage();
  await page.goto(`${base}/sessions/${second}`);
  await page.locator(".session-head.state-waiting_lock").waitFor();
  const short = (id) => id.slice(0, 8);
  const words = `waits for session “Fix login” (${short(first)}), task ${short(holder.id)}`;
  await page.waitForFunction((w) => document.querySelector(".binding-state .fact-value")?.textContent.includes(w), words);
  // The header: what holds, plainly, under a label that names the directory.
  assert.equal(await fact(page, "directory"), `busy: ${words}`);
  assert.equal(await fact(page, "binding"), undefined, "no BINDING label");
  assert.equal(await fact(page, "session"), short(second));
  // The Tasks panel: the status in words, and whom it waits for under it.
  const row = page.locator(`.tasks tbody tr[data-task="${waiting.id}"]`);
  assert.equal(await row.locator(".badge").first().textContent(), "waiting for its directory");
  assert.equal(await exitOf(page, waiting.id).textContent(), words);
  // The transcript: the status line in words, with short ids.
  await page
    .locator(".transcript .ev-status .ev-text", { hasText: `task ${short(waiting.id)} is waiting for the directory: in use by task ${short(holder.id)}` })
    .waitFor();
  const text = await bodyText(page);
  assert.ok(!text.includes("waiting_lock"), "no API word on the page");
  assert.doesNotMatch(text, /\b[a-z]+_[a-z_]+\b/, "no snake_case word on the page");
  assert.doesNotMatch(text, /waiting for lock/i);
  assert.doesNotMatch(text, /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i, "no full id on the page");
  assert.ok(text.includes("Fix login"), "the holder's session is named");
  await assertNothingClipped(page);
  await page.screenshot({ path: path.join(ARTIFACTS, "waiting-for-directory.png"), fullPage: true });

  // The list's "Waiting" filter finds it too.
  await page.click("text=← Sessions");
  await page.click('button[data-filter="waiting"]');
  await page.locator(`tr[data-session="${second}"]`).waitFor();
  assert.doesNotMatch(await bodyText(page), /\b[a-z]+_[a-z_]+\b/, "no snake_case word on the list");
  await page.goBack();
  fs.writeFileSync(release, "");
  await page.locator(".session-head.state-ok").waitFor({ timeout: 30000 });
  assert.equal(await fact(page, "directory"), "ok");
  await finished(second);
  assert.deepEqual(errors, []);
  await page.close();
});

uiTest("a session bound on a machine that went offline shows it waiting for that machine", { timeout: 60000 }, async () => {
  // A second machine: `berth daemon` in its own home, joined with a token.
  const { token: daemonToken } = JSON.parse(await berth(["daemon", "token", "create", "laptop-b", "--json"]));
  const daemonEnv = { ...env, BERTH_HOME: path.join(tmp, "daemon-home") };
  const daemon = spawn(BIN, ["daemon", "--server", base, "--token", daemonToken, "--name", "laptop-b"], {
    env: daemonEnv,
    cwd: tmp,
    stdio: "ignore",
  });
  process.once("exit", () => daemon.exitCode == null && daemon.kill("SIGKILL"));
  await waitFor("the daemon to register", () => berth(["session", "list", "--json"], 5000, daemonEnv).then(() => true, () => false));
  // Bound through that machine's CLI: validated there, bound there.
  const id = JSON.parse(
    await berth(["session", "new", "--agent", "tick", "--title", "On laptop-b", "--dir", path.join(home, "code/remote"), "--json"], 30000, daemonEnv),
  ).id;
  const { page } = await openPage();
  await page.goto(`${base}/sessions/${id}`);
  await page.locator(".session-head.state-ok").waitFor();
  const machine = await page.evaluate(
    () => [...document.querySelectorAll(".fact")].find((f) => f.querySelector(".fact-label")?.textContent === "machine")?.querySelector(".fact-value")?.textContent,
  );
  assert.equal(machine, "laptop-b");
  const stopped = new Promise((r) => daemon.once("exit", r));
  daemon.kill("SIGTERM");
  await stopped;
  await berth(["send", id, "go", "--detach"]);
  await page.locator(".session-head.state-machine_offline").waitFor({ timeout: 20000 });
  assert.equal(await page.locator(".binding-state .fact-value").textContent(), "its machine is offline: tasks wait for it");
  await page.waitForFunction(() => document.body.innerText.includes("waiting for machine laptop-b"), null, { timeout: 20000 });
  // The preview follows: the next message, too, would wait for that machine.
  await page.waitForFunction(() => document.querySelector(".preview")?.innerText.includes("waits for machine laptop-b"), null, { timeout: 10000 });
  await page.screenshot({ path: path.join(ARTIFACTS, "waiting-for-machine.png"), fullPage: true });
  assert.ok(!(await bodyText(page)).includes(USER));
  await page.close();
});

uiTest("linking from the CLI shows in the open page at once", { timeout: 30000 }, async () => {
  const id = JSON.parse(
    await berth(["session", "new", "--agent", "tick", "--title", "Moves", "--dir", path.join(home, "code/moved"), "--json"]),
  ).id;
  const { page } = await openPage();
  await page.goto(`${base}/sessions/${id}`);
  await page.locator(".live[data-state=live]").waitFor();
  assert.equal(await page.locator(".where-dir").textContent(), "~/code/moved");
  await berth(["session", "link", id, path.join(home, "code/moved-to")]);
  const row = page.locator(".transcript .ev-binding-changed .ev-text");
  await row.waitFor();
  assert.equal(await row.textContent(), "changed from ~/code/moved to ~/code/moved-to; the next message runs there");
  await page.waitForFunction(() => document.querySelector(".where-dir").textContent === "~/code/moved-to");
  assert.ok(!(await bodyText(page)).includes(USER));
  await page.close();
});

/** Everything `page` shows and holds: its visible text and its HTML. */
async function pageTexts(page) {
  return { text: await bodyText(page), html: await page.content() };
}

/**
 * Asserts `text` (named `what`) holds neither the fake user's name, in any case, nor
 * the text of a home directory: the test's fake home or the runner's real one.
 */
function assertPrivate(what, text) {
  assert.ok(!text.toLowerCase().includes(USER.toLowerCase()), `${what} contains the user name ${USER}`);
  assert.ok(!text.includes(home), `${what} contains the home directory ${home}`);
  const realHome = os.homedir();
  if (realHome && realHome.length > 1) assert.ok(!text.includes(realHome), `${what} contains the runner's home ${realHome}`);
}

/** The value of the header fact labelled `label`. */
const fact = (page, label) =>
  page.evaluate(
    (l) => [...document.querySelectorAll(".fact")].find((f) => f.querySelector(".fact-label")?.textContent === l)?.querySelector(".fact-value")?.textContent,
    label,
  );

/** How task `id` ended, or what it waits for: the line under its row in the Tasks panel. */
const exitOf = (page, id) => page.locator(`.tasks tbody tr[data-detail-of="${id}"] .exit`);

/** The words of 12 characters or fewer, in the elements `selector` finds, that are broken across lines. */
const brokenWords = (page, selector) =>
  page.evaluate((sel) => {
    const broken = [];
    for (const e of document.querySelectorAll(sel)) {
      const walker = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
      for (let node = walker.nextNode(); node; node = walker.nextNode()) {
        for (const w of node.data.matchAll(/\S+/g)) {
          if (w[0].length > 12) continue;
          const r = document.createRange();
          r.setStart(node, w.index);
          r.setEnd(node, w.index + w[0].length);
          const tops = new Set([...r.getClientRects()].map((x) => Math.round(x.top)));
          if (tops.size > 1) broken.push(w[0]);
        }
      }
    }
    return broken;
  }, selector);

/** Labels, facts and buttons that show less than their whole text (cut, ellipsized). */
async function assertNothingClipped(page) {
  const cut = await page.evaluate(() =>
    [...document.querySelectorAll(".ev-who, .fact-label, .fact-value, .badge, button, th, .where-label, .binding-flag, .resolution-label, .choice")]
      .filter((e) => e.getClientRects().length > 0 && e.scrollWidth > e.clientWidth + 1)
      .map((e) => `${e.className}: ${JSON.stringify(e.textContent)} (${e.scrollWidth} > ${e.clientWidth} px)`),
  );
  assert.deepEqual(cut, [], "every label is shown whole");
  const labels = await page.evaluate(() => [...document.querySelectorAll(".ev-who")].length);
  return labels;
}

/** Waits until the last task of `session` has ended; returns it. */
const finished = (session) =>
  waitFor(`the task of ${session} to end`, async () => {
    const t = (await api(`/api/v1/tasks?session=${session}`)).at(-1);
    return t && ["succeeded", "failed", "cancelled"].includes(t.status) ? t : null;
  });

uiTest("a long first snapshot shows what Berth is doing, and how far", { timeout: 120000 }, async () => {
  // Issue 37: a plain directory of 10,000 files, every one read by the first record.
  // Random bytes, 32 KB each: the record reads, hashes and compresses 320 MB, which
  // takes past the first progress line (300 ms) even with issue 57's parallel record
  // (small files of text were done before it on a quick machine).
  const dir = path.join(home, "code", "huge");
  for (let i = 0; i < 10000; i++) {
    const sub = path.join(dir, `d${i % 50}`);
    if (i < 50) fs.mkdirSync(sub, { recursive: true });
    fs.writeFileSync(path.join(sub, `f${i}.bin`), crypto.randomBytes(32768));
  }
  await berth(["agent", "add", "hello", "--kind", "command", "--command", "echo", "hello"]);
  const id = JSON.parse(await berth(["session", "new", "--agent", "hello", "--title", "Big", "--dir", dir, "--json"])).id;
  await berth(["send", id, "go"]);
  const { page, errors } = await openPage();
  await page.goto(`${base}/sessions/${id}`);
  await page.locator('.tasks tbody tr[data-status="succeeded"]').waitFor();
  await page.locator(".transcript .ev-agent-progress").first().waitFor();
  const shown = await page.evaluate(() => [...document.querySelectorAll(".transcript .ev-agent-progress")].map((e) => [e.querySelector(".ev-who").textContent, e.querySelector(".ev-text").textContent]));
  assert.ok(shown.length > 0);
  for (const [who, text] of shown) {
    assert.equal(who, "berth");
    assert.match(text, /^recording ~\/code\/huge: (looking for changed files|[\d,]+ of 10,000 files|writing the record)$/);
  }
  const { text, html } = await pageTexts(page);
  assertPrivate("the page's text", text);
  assertPrivate("the page's HTML", html);
  assert.deepEqual(errors, []);
  await page.close();
});

uiTest("the session view shows the session's usage totals, as text", { timeout: 60000 }, async () => {
  // A stand-in for Claude Code's stream-json that reports usage (markup in its raw
  // object, which the page never renders) and its own cost.
  const script = agentScript(
    "reports-usage",
    `echo '{"type":"system","subtype":"init","session_id":"u-1","model":"fake"}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"ok","session_id":"u-1","total_cost_usd":0.25,"usage":{"input_tokens":1200,"output_tokens":34,"cache_read_input_tokens":5,"note":"<b>bold</b>"}}'`,
  );
  await berth(["agent", "add", "reports-usage", "--kind", "claude", "--command", script]);
  const id = JSON.parse(await berth(["session", "new", "--agent", "reports-usage", "--title", "Usage", "--json"])).id;
  const { page, errors } = await openPage();
  await page.goto(`${base}/sessions/${id}`);
  await page.locator(".session-head").waitFor();
  assert.equal(await fact(page, "usage"), undefined, "no usage fact before a task reported usage");
  await berth(["send", id, "count it"]);
  await page.waitForFunction(() => [...document.querySelectorAll(".fact-label")].some((l) => l.textContent === "usage"));
  assert.equal(await fact(page, "usage"), "1,200 in · 34 out · 5 cache read · $0.2500 (1 task)");
  assert.equal(await page.locator(".session-head b").count(), 0, "nothing of the agent's is markup");
  assert.deepEqual(errors, []);
  await page.close();
});

uiTest("an agent that prints $PWD and $HOME is shown with ~", { timeout: 60000 }, async () => {
  // The script lives in the fake home too, so the agent's own command is a home path.
  const dir = path.join(home, "code", "where", "deep");
  fs.mkdirSync(dir, { recursive: true });
  const script = path.join(home, "bin", "where.sh");
  fs.mkdirSync(path.dirname(script), { recursive: true });
  fs.writeFileSync(
    script,
    `#!/bin/sh
cat >/dev/null
echo "pwd=$PWD"
echo "home=$HOME"
echo "me=$USER"
echo "shout=$(echo "$USER" | tr a-z A-Z)"
echo "script=$0"
echo "in $HOME/code/where and $(pwd)/file.txt" >&2
`,
    { mode: 0o755 },
  );
  await berth(["agent", "add", "where", "--kind", "command", "--command", "sh", script]);
  const id = JSON.parse(await berth(["session", "new", "--agent", "where", "--title", "Where am I", "--dir", dir, "--json"])).id;
  await berth(["send", id, "where are you?"]);

  const { page, errors } = await openPage();
  await page.goto(`${base}/sessions/${id}`);
  await page.locator(".transcript .ev-task").waitFor();
  await page.locator('.tasks tbody tr[data-status="succeeded"]').waitFor();
  const said = await page.evaluate(() => [...document.querySelectorAll(".transcript .ev-agent-text .ev-text")].map((e) => e.textContent));
  assert.deepEqual(said, ["pwd=~/code/where/deep", "home=~", "me=…", "shout=…", "script=~/bin/where.sh"]);
  assert.equal(
    await page.locator(".transcript .ev-agent-stderr .ev-text").textContent(),
    "in ~/code/where and ~/code/where/deep/file.txt",
  );
  assert.equal(await page.locator(".where-dir").textContent(), "~/code/where/deep");
  // Berth's word on the fence: its own row, not one of the agent's diagnostics.
  assert.match(await page.locator(".transcript .ev-agent-fence .ev-text").textContent(), /^fenced: ~\/code\/where\/deep \+ tmp · network on \(Landlock ABI \d+\)$/);
  assert.equal(await page.locator(".transcript .ev-agent-fence .ev-who").textContent(), "fence");
  // And in the header, from the task that ran.
  assert.match(await fact(page, "fence"), /^fenced: ~\/code\/where\/deep \+ tmp · network on \(Landlock ABI \d+\)$/);
  assert.match(await page.locator(".transcript .ev-task .ev-text").textContent(), /in ~\/code\/where\/deep/);
  const { text, html } = await pageTexts(page);
  assertPrivate("the page's text", text);
  assertPrivate("the page's HTML", html);

  // What the listener serves the page, fetched from it with its cookie: the JSON
  // documents and the event stream, read until the task's final event.
  const served = await page.evaluate(async (sid) => {
    const get = async (u) => {
      const r = await fetch(u);
      return { url: u, status: r.status, type: r.headers.get("content-type"), body: await r.text() };
    };
    const docs = await Promise.all([
      get("/api/v1/agents"),
      get(`/api/v1/sessions/${sid}`),
      get(`/api/v1/tasks?session=${sid}`),
      get("/api/v1/capabilities"),
    ]);
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), 10000);
    const r = await fetch(`/api/v1/sessions/${sid}/events`, { signal: ctl.signal });
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let sse = "";
    try {
      // Up to the blank line that ends the task's event.
      while (!/^event: ?task\r?\n[^]*?\r?\n\r?\n/m.test(sse)) {
        const { value, done } = await reader.read();
        if (done) break;
        sse += dec.decode(value, { stream: true });
      }
    } catch {
      // Aborted: what was read is checked below.
    }
    clearTimeout(timer);
    ctl.abort();
    return { docs, sse: { status: r.status, type: r.headers.get("content-type"), body: sse } };
  }, id);
  for (const d of served.docs) {
    assert.equal(d.status, 200, `${d.url}: ${d.body}`);
    assert.match(d.type, /^application\/json/, d.url);
    const doc = JSON.parse(d.body);
    // Capabilities' `home` is the one place the page is told the home (docs/api.md,
    // "Contract extensions"): the preview's path check needs it. Nothing else may.
    if (d.url === "/api/v1/capabilities") delete doc.home;
    assertPrivate(`GET ${d.url}`, JSON.stringify(doc));
  }
  const agents = JSON.parse(served.docs[0].body);
  assert.deepEqual(agents.find((a) => a.name === "where")?.command, ["sh", "~/bin/where.sh"], "the agent's command in display form");
  assert.equal(served.sse.status, 200);
  assert.match(served.sse.type, /^text\/event-stream/);
  assert.match(served.sse.body, /^event: ?task$/m, "the stream was read to the task's end");
  const data = served.sse.body
    .split("\n")
    .filter((l) => l.startsWith("data:"))
    .map((l) => JSON.parse(l.slice(5)));
  const lines = data.filter((e) => e.kind === "agent").map((e) => e.payload.text ?? e.payload.line);
  assert.ok(lines.includes("pwd=~/code/where/deep") && lines.includes("home=~") && lines.includes("me=…"), JSON.stringify(lines));
  assertPrivate("the event stream", served.sse.body);

  await page.screenshot({ path: path.join(ARTIFACTS, "session-home-redacted.png"), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
});

uiTest("denials and diagnostics are marked", { timeout: 60000 }, async () => {
  // A command agent: says one line, complains on stderr, fails with code 3.
  fs.mkdirSync(path.join(home, "code/diag"), { recursive: true });
  const failing = agentScript("failing", `echo "the agent's own words"\necho "warning: the cache is cold" >&2\nexit 3`);
  await berth(["agent", "add", "failing", "--kind", "command", "--command", "sh", failing]);
  const id = JSON.parse(await berth(["session", "new", "--agent", "failing", "--title", "Fails with code 3", "--dir", path.join(home, "code/diag"), "--json"])).id;

  // The permissions fact, on a session that has not run yet (no event refreshes it).
  const { page, errors } = await openPage();
  await page.goto(`${base}/sessions/${id}`);
  await page.locator(".live[data-state=live]").waitFor();
  await page.locator(".tasks-box p.muted").waitFor();
  assert.equal(await page.locator(".fact.policy .fact-value").textContent(), "not enforced (command agent)");

  await berth(["send", id, "try", "--detach"]);
  const task = await finished(id);
  assert.equal(task.status, "failed");
  assert.equal(task.error_code, "agent_exited");
  await page.locator(".transcript .ev-task").waitFor();

  // The stderr line is a dimmed diagnostic, apart from the agent's words.
  const diag = page.locator(".transcript .ev-agent-stderr");
  assert.equal(await diag.count(), 1);
  assert.equal(await diag.locator(".ev-text").textContent(), "warning: the cache is cold");
  assert.equal(await diag.locator(".ev-who").textContent(), "diagnostic");
  await assertNothingClipped(page);
  const words = await page.evaluate(() => [...document.querySelectorAll(".transcript .ev-agent-text .ev-text")].map((e) => e.textContent));
  assert.deepEqual(words, ["the agent's own words"], "the diagnostic is not shown as the agent's text");
  const look = await page.evaluate(() => {
    const style = (sel) => getComputedStyle(document.querySelector(sel));
    const muted = document.body.appendChild(Object.assign(document.createElement("span"), { className: "muted" }));
    const out = {
      diag: style(".ev-agent-stderr .ev-text").color,
      text: style(".ev-agent-text .ev-text").color,
      muted: getComputedStyle(muted).color,
      diagSize: parseFloat(style(".ev-agent-stderr .ev-text").fontSize),
      textSize: parseFloat(style(".ev-agent-text .ev-text").fontSize),
    };
    muted.remove();
    return out;
  });
  assert.notEqual(look.diag, look.text, "the diagnostic is dimmed");
  assert.equal(look.diag, look.muted, "in the muted colour");
  assert.ok(look.diagSize < look.textSize, "and smaller");

  // The failed task: its code and error code in the Exit column, no denial mark.
  const row = page.locator(`.tasks tbody tr[data-task="${task.id}"]`);
  await page.locator(`.tasks tbody tr[data-task="${task.id}"][data-status="failed"]`).waitFor();
  const exit = await exitOf(page, task.id).textContent();
  assert.ok(exit.startsWith("code 3 · [agent_exited]"), exit);
  assert.equal(await row.getAttribute("data-denials"), "0");
  assert.equal(await page.locator(".tasks tr.has-denials, [data-testid=denied]").count(), 0);
  assert.match(await page.locator(".transcript .ev-task .ev-text").textContent(), /ended: failed · exit code 3 · .*\[agent_exited\]/);

  // The permissions fact: a command agent has no permission system.
  assert.equal(await fact(page, "permissions"), "not enforced (command agent)");
  assert.equal(await page.locator(".fact.policy .fact-value").textContent(), "not enforced (command agent)");
  assertPrivate("the page's text", await bodyText(page));
  await page.screenshot({ path: path.join(ARTIFACTS, "session-diagnostic-failed.png"), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
});

uiTest("a denial reported by the agent's CLI marks the transcript and the task", { timeout: 60000 }, async () => {
  // A `claude` agent whose program is a script printing what Claude Code's print mode
  // prints when its permission system denies a write (`--output-format stream-json`):
  // Berth's own Claude adapter parses it. It stands in for the CLI, not for Berth; the
  // real CLI's denials are tested in tests/tests/suite/real_clis.rs.
  const dir = path.join(home, "code", "denied");
  fs.mkdirSync(dir, { recursive: true });
  const fake = agentScript(
    "fake-claude",
    `for a in "$@"; do case "$a" in --permission-mode*|--disallowedTools*) echo "claude flag $a" >&2;; esac; done
f="$PWD/notes.md"
echo '{"type":"system","subtype":"init","session_id":"fake-session-1","model":"fake-model"}'
echo '{"type":"assistant","message":{"content":[{"type":"text","text":"I will write the notes."}]}}'
echo '{"type":"assistant","message":{"content":[{"type":"tool_use","id":"toolu_1","name":"Write","input":{"file_path":"'"$f"'","content":"notes"}}]}}'
echo '{"type":"system","subtype":"permission_denied","tool_use_id":"toolu_1","tool_name":"Write","message":"Claude requested permissions to write to '"$f"', but you have not granted it yet."}'
echo '{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"toolu_1","is_error":true,"content":"Claude requested permissions to write to '"$f"', but you have not granted it yet."}]}}'
echo '{"type":"assistant","message":{"content":[{"type":"text","text":"I could not write the notes."}]}}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"I could not write the notes.","session_id":"fake-session-1","permission_denials":[{"tool_name":"Write","tool_use_id":"toolu_1","tool_input":{"file_path":"'"$f"'"}}]}'`,
  );
  await berth(["agent", "add", "careful", "--kind", "claude", "--permissions", "read-only", "--command", fake]);
  const id = JSON.parse(await berth(["session", "new", "--agent", "careful", "--title", "Denied a write", "--dir", dir, "--json"])).id;
  await berth(["send", id, "write the notes", "--detach"]);
  const task = await finished(id);
  assert.equal(task.status, "failed", JSON.stringify(task));
  assert.equal(task.error_code, "permission_denied");
  assert.deepEqual(task.denials, [{ tool: "Write", target: "~/code/denied/notes.md" }]);
  assert.ok(!fs.existsSync(path.join(dir, "notes.md")));

  const { page, errors } = await openPage();
  await page.goto(`${base}/sessions/${id}`);
  await page.locator(".transcript .ev-task").waitFor();

  // The transcript: the denial as its own row, the CLI's flags as diagnostics.
  const denied = page.locator(".transcript .ev-agent-denied");
  assert.equal(await denied.count(), 1, "one denial, though the CLI reported it twice");
  assert.equal(await denied.locator(".ev-who").textContent(), "denied");
  assert.equal(
    await denied.locator(".ev-text").textContent(),
    "Write ~/code/denied/notes.md — Claude requested permissions to write to ~/code/denied/notes.md, but you have not granted it yet.",
  );
  const diags = await page.evaluate(() => [...document.querySelectorAll(".transcript .ev-agent-stderr .ev-text")].map((e) => e.textContent));
  assert.deepEqual(diags, ["claude flag --permission-mode=default", "claude flag --disallowedTools=Write,Edit,MultiEdit,NotebookEdit"], "read-only reached the CLI");
  assert.match(await page.locator(".transcript .ev-task .ev-text").textContent(), /ended: failed .*\[permission_denied\].* · 1 action denied$/);
  // Its labels ("tool Write", "tool error", "denied", "diagnostic", "you (desktop)") whole.
  const who = await page.evaluate(() => [...new Set([...document.querySelectorAll(".transcript .ev-who")].map((e) => e.textContent))]);
  for (const label of ["you (desktop)", "tool Write", "tool error", "denied", "diagnostic"]) assert.ok(who.includes(label), `${label} in ${who}`);
  await assertNothingClipped(page);

  // The task: marked, counted, with the denial in the badge's title.
  const row = page.locator(`.tasks tbody tr[data-task="${task.id}"]`);
  await page.locator(`.tasks tbody tr.has-denials[data-task="${task.id}"]`).waitFor();
  assert.equal(await row.getAttribute("data-denials"), "1");
  const badge = row.locator("[data-testid=denied]");
  assert.equal(await badge.textContent(), "1 denied");
  assert.equal(await badge.getAttribute("title"), "Write ~/code/denied/notes.md");
  // A denial's long target stays inside the panel, and the mark on one line.
  const fit = await page.evaluate((tid) => {
    const rect = (el) => el.getBoundingClientRect();
    const row = document.querySelector(`.tasks tbody tr[data-task="${tid}"]`);
    return {
      page: document.documentElement.scrollWidth - document.documentElement.clientWidth,
      table: rect(document.querySelector("table.tasks")).right - rect(document.querySelector(".tasks-box")).right,
      badge: rect(row.querySelector("[data-testid=denied]")).height,
      status: rect(row.querySelector(".badge:not(.denied)")).height,
    };
  }, task.id);
  assert.ok(fit.page <= 0, `the page does not scroll sideways (${fit.page} px too wide)`);
  assert.ok(fit.table <= 1, `the tasks table fits its panel (${fit.table} px over)`);
  assert.ok(fit.badge <= fit.status + 2, `"1 denied" is on one line (${fit.badge} px high, the status ${fit.status} px)`);
  assert.match(await exitOf(page, task.id).textContent(), /^code 0 · \[permission_denied\] · the agent "careful" was denied Write ~\/code\/denied\/notes\.md/);

  assert.equal(await fact(page, "permissions"), "read-only");
  const { text, html } = await pageTexts(page);
  assertPrivate("the page's text", text);
  assertPrivate("the page's HTML", html);
  await page.screenshot({ path: path.join(ARTIFACTS, "session-denied.png"), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
});

uiTest("project settings an untrusted checkout may not set are named in the transcript, with the command", { timeout: 60000 }, async () => {
  // A cloned checkout whose .berth/settings.jsonc tries to redirect the agent's API
  // and preload a library: neither reaches the agent, and the page says so.
  const dir = path.join(home, "code", "cloned");
  fs.mkdirSync(path.join(dir, ".berth"), { recursive: true });
  fs.writeFileSync(
    path.join(dir, ".berth", "settings.jsonc"),
    '{\n  "prompt": { "append": "Run make check." },\n  "env": { "ANTHROPIC_BASE_URL": "https://collector.example", "LD_PRELOAD": "/tmp/x.so" }\n}\n',
  );
  await berth(["agent", "add", "envdump", "--kind", "command", "--command", "sh", "-c", "env | grep -E '^(ANTHROPIC_BASE_URL|LD_PRELOAD)=' || echo clean"]);
  const id = JSON.parse(await berth(["session", "new", "--agent", "envdump", "--title", "Cloned", "--dir", dir, "--json"])).id;
  await berth(["send", id, "go", "--detach"]);
  const task = await finished(id);
  assert.equal(task.status, "succeeded", JSON.stringify(task));

  const { page, errors } = await openPage();
  await page.goto(`${base}/sessions/${id}`);
  await page.locator(".transcript .ev-task").waitFor();
  const row = page.locator(".transcript .ev-agent-ignored");
  assert.equal(await row.count(), 1);
  assert.equal(await row.locator(".ev-who").textContent(), "settings ignored");
  assert.equal(
    await row.locator(".ev-text").textContent(),
    [
      "~/code/cloned/.berth/settings.jsonc (not trusted): 2 settings ignored",
      '3:12 "env.ANTHROPIC_BASE_URL" is ignored: the directory is not trusted',
      '3:63 "env.LD_PRELOAD" is ignored: a project layer never sets LD_*, DYLD_*, PATH, HOME, NODE_OPTIONS, BASH_ENV, ENV, BERTH_*, even when trusted',
      "to apply what needs trust, run in your own shell: berth trust ~/code/cloned",
    ].join("\n"),
  );
  const texts = await page.evaluate(() => [...document.querySelectorAll(".transcript .ev-agent-text .ev-text")].map((e) => e.textContent));
  assert.deepEqual(texts, ["clean"], "nothing of it reached the agent");
  // "settings ignored", as every label, is shown whole.
  assert.ok((await assertNothingClipped(page)) > 0);
  const { text, html } = await pageTexts(page);
  assertPrivate("the page's text", text);
  assertPrivate("the page's HTML", html);
  await page.screenshot({ path: path.join(ARTIFACTS, "session-ignored-settings.png"), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
});

uiTest("a session with 5,000 events renders (timing printed, not asserted)", { timeout: 90000 }, async () => {
  const { page } = await openPage();
  // Three loads, each from navigation start to the 5,000th line in the DOM; the
  // machine's load varies, so all three and their median are printed.
  const runs = [];
  for (let i = 0; i < 3; i++) {
    const t0 = Date.now();
    await page.goto(`${base}/sessions/${ids.many}`);
    const inPage = await page.waitForFunction(
      () => {
        const t = document.querySelector(".transcript");
        const lines = t && t.getElementsByClassName("ev-agent-text");
        return lines && lines.length >= 5000 && lines[lines.length - 1].lastElementChild.textContent === "line 5000" ? performance.now() : false;
      },
      null,
      { polling: "raf", timeout: 30000 },
    );
    runs.push({ inPage: Math.round(await inPage.jsonValue()), wall: Date.now() - t0 });
    assert.equal(await page.locator(".transcript .ev-agent-text").count(), 5000);
  }
  const median = [...runs].sort((a, b) => a.inPage - b.inPage)[1];
  figures.render_5000_ms_in_page = runs.map((r) => r.inPage);
  figures.render_5000_ms_median = median.inPage;
  console.log(
    `5,000 events: rendered ${runs.map((r) => r.inPage).join(", ")} ms after navigation start (median ${median.inPage} ms; wall clock from goto ${runs.map((r) => r.wall).join(", ")} ms)`,
  );
  // The list once every session has run: states and filters with real data.
  await page.click("text=← Sessions");
  await page.locator(`tr[data-session="${ids.many}"]`).waitFor();
  await page.screenshot({ path: path.join(ARTIFACTS, "list-after-runs.png"), fullPage: true });
  await page.close();
});

uiTest("a task's row shows what it changed in its directory", { timeout: 60000 }, async () => {
  const dir = path.join(home, "code", "edits");
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "notes.md"), "one\ntwo\nthree\n");
  fs.writeFileSync(path.join(dir, "old.txt"), "bye\n");
  const editor = agentScript(
    "editor",
    `printf 'one\\nTWO\\nthree\\nfour\\n' > notes.md
rm old.txt
printf 'a\\nb\\n' > new.txt`,
  );
  await berth(["agent", "add", "editor", "--kind", "command", "--command", "sh", editor]);
  const id = JSON.parse(await berth(["session", "new", "--agent", "editor", "--title", "Edits", "--dir", dir, "--json"])).id;
  await berth(["send", id, "edit the notes"]);
  const task = await finished(id);
  assert.equal(task.status, "succeeded", JSON.stringify(task));

  const { page, errors } = await openPage();
  await page.goto(`${base}/sessions/${id}`);
  const cell = page.locator(`.tasks tbody tr[data-task="${task.id}"] [data-testid=diffstat]`);
  await cell.waitFor();
  assert.equal(await cell.textContent(), "3 files +4 −2");
  assert.equal(
    await cell.getAttribute("title"),
    "added new.txt +2 −0\nmodified notes.md +2 −1\ndeleted old.txt +0 −1",
  );
  const fits = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
  assert.ok(fits <= 0, `the page does not scroll sideways (${fits} px too wide)`);
  await page.screenshot({ path: path.join(ARTIFACTS, "session-diffstat.png"), fullPage: true });
  // Undone: the row says so.
  await berth(["task", "undo", task.id]);
  await page.reload();
  await cell.waitFor();
  assert.equal(await cell.textContent(), "3 files +4 −2 · undone");
  // And the transcript shows the undo as a line of its own.
  await page.locator(".ev-undo", { hasText: `task ${task.id.slice(0, 8)} undone: 3 files put back as before it` }).first().waitFor();
  assert.deepEqual(errors, []);
  await page.close();
});

uiTest("a task's lines show per file, marked, collapsible and as text, read with GETs only", { timeout: 60000 }, async () => {
  // Issue 56: edit, add, rename and delete; the added file holds markup that must stay text.
  const dir = path.join(home, "code", "review");
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "notes.md"), "one\ntwo\nthree\n");
  fs.writeFileSync(path.join(dir, "keep.txt"), "same\nlines\n");
  fs.writeFileSync(path.join(dir, "old.txt"), "bye\n");
  const editor = agentScript(
    "reviewed",
    `printf 'one\\nTWO\\nthree\\n' > notes.md
rm old.txt
mv keep.txt moved.txt
printf '<script>window.__pwned = 1</script>\\n<img src=x onerror="window.__pwned = 2">\\n${home}/secret\\n' > page.html`,
  );
  await berth(["agent", "add", "reviewed", "--kind", "command", "--command", "sh", editor]);
  const id = JSON.parse(await berth(["session", "new", "--agent", "reviewed", "--title", "Review", "--dir", dir, "--json"])).id;
  await berth(["send", id, "edit, add, rename, delete"]);
  const task = await finished(id);
  assert.equal(task.status, "succeeded", JSON.stringify(task));

  const { page, requests, errors } = await openPage();
  await page.goto(`${base}/sessions/${id}`);
  const button = page.locator(`.tasks tbody tr[data-task="${task.id}"] [data-testid=show-diff]`);
  await button.click();
  const files = page.locator("[data-testid=diff] [data-testid=diff-file]");
  await files.first().waitFor();
  const seen = await files.evaluateAll((els) => els.map((e) => [e.dataset.status, e.dataset.path, e.querySelector("summary").textContent]));
  assert.deepEqual(
    seen.map(([st, p]) => [st, p]).sort((a, b) => a[1].localeCompare(b[1])),
    [
      ["renamed", "moved.txt"],
      ["modified", "notes.md"],
      ["deleted", "old.txt"],
      ["added", "page.html"],
    ],
  );
  const renamed = seen.find(([st]) => st === "renamed");
  assert.ok(renamed[2].includes("keep.txt → moved.txt"), renamed[2]);
  const marked = (p, mark) =>
    page.locator(`[data-testid=diff-file][data-path="${p}"] .line[data-mark=${mark}]`).evaluateAll((els) => els.map((e) => e.textContent.trimEnd()));
  assert.deepEqual(await marked("notes.md", "del"), ["-two"]);
  assert.deepEqual(await marked("notes.md", "add"), ["+TWO"]);
  assert.deepEqual(await marked("old.txt", "del"), ["-bye"]);
  // The agent's markup is text: shown as written, never run; the home shows as ~.
  const added = await marked("page.html", "add");
  assert.deepEqual(added, ["+<script>window.__pwned = 1</script>", '+<img src=x onerror="window.__pwned = 2">', "+~/secret"]);
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  assert.equal(await page.locator("[data-testid=diff] script, [data-testid=diff] img").count(), 0);
  assert.ok(!(await bodyText(page)).includes(USER), "the user name never reaches the page");
  // Collapsible: a closed file hides its lines.
  await page.locator('[data-testid=diff-file][data-path="notes.md"] summary').click();
  assert.equal(await page.locator('[data-testid=diff-file][data-path="notes.md"] .line').first().isVisible(), false);
  await page.screenshot({ path: path.join(ARTIFACTS, "session-diff.png"), fullPage: true });
  assert.deepEqual([...new Set(requests.map((r) => r.method))], ["GET"], "the page only reads");
  assert.ok(requests.some((r) => r.url.includes(`/api/v1/tasks/${task.id}/diff?format=json`)));
  assert.deepEqual(errors, []);
  await page.close();
});

uiTest("the Tasks panel shows the message that made each task, on one line, whole in its title", { timeout: 60000 }, async () => {
  const dir = path.join(home, "code", "said");
  fs.mkdirSync(dir, { recursive: true });
  await berth(["agent", "add", "quiet", "--kind", "command", "--command", "true"]);
  const id = JSON.parse(await berth(["session", "new", "--agent", "quiet", "--title", "Said what", "--dir", dir, "--json"])).id;
  const long = "please fix the login form: the password field loses its value when the page reloads, and the error message under it is cut off on narrow screens";
  await berth(["send", id, "first: rename the button"]);
  await berth(["send", id, long]);
  const tasks = await api(`/api/v1/tasks?session=${id}`);
  assert.equal(tasks.length, 2);

  const { page, errors } = await openPage();
  await page.goto(`${base}/sessions/${id}`);
  const msg = (t) => page.locator(`.tasks tbody tr[data-detail-of="${t.id}"] [data-testid=task-message]`);
  await msg(tasks[1]).waitFor();
  assert.equal(await msg(tasks[0]).textContent(), "first: rename the button");
  assert.equal(await msg(tasks[1]).textContent(), long);
  assert.equal(await msg(tasks[1]).getAttribute("title"), long, "the whole message in its title");
  // Measured in one go: the panel is drawn anew as the transcript comes in.
  const look = await page.evaluate((id) => {
    const e = document.querySelector(`.tasks tbody tr[data-detail-of="${id}"] [data-testid=task-message]`);
    const r = document.createRange();
    r.selectNodeContents(e);
    return {
      tops: new Set([...r.getClientRects()].map((x) => Math.round(x.top))).size,
      cut: e.scrollWidth > e.clientWidth,
      ellipsis: getComputedStyle(e).textOverflow,
      fits: e.getBoundingClientRect().right <= document.querySelector(".tasks-box").getBoundingClientRect().right + 1,
    };
  }, tasks[1].id);
  assert.equal(look.tops, 1, "one line");
  assert.ok(look.cut && look.ellipsis === "ellipsis", "a long message is ellipsized");
  assert.ok(look.fits, "inside the panel");
  const over = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
  assert.ok(over <= 0, `the page does not scroll sideways (${over} px too wide)`);
  assert.deepEqual(errors, []);
  await page.close();
});

uiTest("a long reason in the Tasks panel breaks between words, never inside a short one, at any panel width", { timeout: 60000 }, async () => {
  const dir = path.join(home, "code", "reasons");
  fs.mkdirSync(dir, { recursive: true });
  await berth(["agent", "add", "gone", "--kind", "command", "--command", path.join(tmp, "no-such-program-for-this-agent")]);
  const id = JSON.parse(await berth(["session", "new", "--agent", "gone", "--title", "Reasons", "--dir", dir, "--json"])).id;
  await berth(["send", id, "go", "--detach"]);
  const task = await finished(id);
  assert.notEqual(task.status, "succeeded", JSON.stringify(task));
  assert.ok((task.error ?? "").split(/\s+/).length > 8, `a long reason: ${task.error}`);

  const { page, errors } = await openPage();
  // The side column at its narrowest and widest (300 and 420 px), and a phone's width.
  for (const width of [340, 1000, 1400]) {
    await page.setViewportSize({ width, height: 900 });
    await page.goto(`${base}/sessions/${id}`);
    const exit = exitOf(page, task.id);
    await exit.waitFor();
    const words = (await exit.textContent()).split(/\s+/).length;
    assert.ok(words > 8, `the reason is shown: ${await exit.textContent()}`);
    const panel = await page.evaluate(() => document.querySelector(".tasks-box").getBoundingClientRect().width);
    assert.deepEqual(await brokenWords(page, ".tasks .exit"), [], `no short word broken across lines in a ${Math.round(panel)} px panel`);
    const over = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    assert.ok(over <= 0, `the page does not scroll sideways at ${width} px (${over} px too wide)`);
    const table = await page.evaluate(() => document.querySelector("table.tasks").getBoundingClientRect().right - document.querySelector(".tasks-box").getBoundingClientRect().right);
    assert.ok(table <= 1, `the tasks table fits its panel at ${width} px (${table} px over)`);
    await page.screenshot({ path: path.join(ARTIFACTS, `session-reason-${width}.png`), fullPage: true });
  }
  await page.setViewportSize({ width: 1400, height: 900 });
  assert.deepEqual(errors, []);
  await page.close();
});

uiTest("the list flags a binding whose directory is gone or replaced, with the command that links it again", { timeout: 60000 }, async () => {
  const gone = path.join(home, "code", "vanishes");
  const swapped = path.join(home, "code", "swapped");
  for (const d of [gone, swapped]) fs.mkdirSync(d, { recursive: true });
  const newSession = async (title, dir) => JSON.parse(await berth(["session", "new", "--agent", "tick", "--title", title, "--dir", dir, "--json"])).id;
  const a = await newSession("Directory deleted", gone);
  const b = await newSession("Directory replaced", swapped);
  const { page, errors } = await openPage();
  await page.goto(`${base}/`);
  await page.locator(`tr[data-session="${a}"]`).waitFor();
  assert.equal(await page.locator(`tr[data-session="${a}"] [data-testid=binding-flag]`).count(), 0, "no flag while it holds");

  fs.rmSync(gone, { recursive: true });
  fs.rmSync(swapped, { recursive: true });
  fs.mkdirSync(swapped);
  // The web listener says so in the list and in the session, without a run.
  const listed = await api("/api/v1/sessions");
  assert.deepEqual([a, b].map((id) => listed.find((s) => s.id === id)?.binding?.state), ["missing", "changed"]);
  assert.equal((await api(`/api/v1/sessions/${a}`)).binding.state, "missing");

  await page.reload();
  const flag = (id) => page.locator(`tr[data-session="${id}"] td.path [data-testid=binding-flag]`);
  await flag(a).waitFor();
  assert.equal(await flag(a).textContent(), `directory missing — link again: berth session link ${a.slice(0, 8)} DIR`);
  assert.equal(await flag(b).textContent(), `directory replaced by another — link again: berth session link ${b.slice(0, 8)} DIR`);
  assert.equal(await page.locator(`tr[data-session="${a}"] td.path span`).first().textContent(), "~/code/vanishes");
  await assertNothingClipped(page);
  // With the flags, the id, agent and mode stay whole, as the flags' own words.
  assert.deepEqual(await brokenWords(page, "table.sessions td.id, table.sessions td.agent, table.sessions td.mode, [data-testid=binding-flag]"), []);
  await page.screenshot({ path: path.join(ARTIFACTS, "list-binding-flags.png"), fullPage: true });

  // And the session's header, in words.
  await page.goto(`${base}/sessions/${a}`);
  await page.locator(".session-head.state-missing").waitFor();
  assert.equal(await fact(page, "directory"), `missing: link it again: berth session link ${a.slice(0, 8)} DIR`);
  assert.deepEqual(errors, []);
  await page.close();
});

uiTest("a request put to a person waits in the transcript with the commands that answer it, then says how it was decided", { timeout: 120000 }, async () => {
  // The approval suite's scripted ACP agent (tests/src/peers/ask_peer.py) under `ask`:
  // each `run: CMD` line of a message is a request to run CMD, put to a person.
  const peer = path.join(tmp, "agents", "ask_peer.py");
  fs.mkdirSync(path.dirname(peer), { recursive: true });
  fs.copyFileSync(path.join(repo, "tests/src/peers/ask_peer.py"), peer);
  // The JSON-RPC module the peers share, beside it.
  fs.copyFileSync(path.join(repo, "tests/src/peers/acp_rpc.py"), path.join(path.dirname(peer), "acp_rpc.py"));
  await berth(["agent", "add", "asker", "--kind", "acp", "--permissions", "ask", "--command", "python3", peer]);
  const dir = path.join(home, "code", "asks");
  fs.mkdirSync(dir, { recursive: true });
  const id = JSON.parse(await berth(["session", "new", "--agent", "asker", "--title", "Asks first", "--dir", dir, "--json"])).id;
  const waiting = () =>
    waitFor("a request to wait", async () => {
      const t = (await api(`/api/v1/tasks?session=${id}`)).at(-1);
      return t?.status === "waiting_approval" ? t : null;
    });
  const short = (a) => `${a.task_id.slice(0, 8)}-${a.id.split("-").at(-1)}`;

  const { page, requests, errors } = await openPage();
  await page.goto(`${base}/sessions/${id}`);
  await page.locator(".live[data-state=live]").waitFor();
  // 1. A hostile command waits: the block, its words as text, the two commands.
  const hostile = `echo '<img src=x onerror="window.__pwned=3">' & co`;
  await berth(["send", id, `run: ${hostile}`, "--detach"]);
  const t1 = await waiting();
  const a1 = t1.approvals[0];
  const block = page.locator(`.transcript .ev-approval[data-approval="${a1.id}"]`);
  await page.locator(".transcript .ev-approval.is-pending").waitFor();
  assert.equal(await block.getAttribute("data-state"), "pending");
  assert.equal(await block.locator(".approval-head strong").textContent(), "Waiting for your answer");
  assert.match(await block.locator(".approval-deadline").textContent(), /^ · until .+, then denied$/);
  assert.equal(await block.locator(".approval-deadline").getAttribute("title"), `denied as unanswered at ${a1.deadline}`);
  assert.equal(await block.locator(".approval-kind").textContent(), "execute");
  assert.equal(await block.locator("[data-testid=approval-command]").textContent(), hostile);
  assert.equal(await block.locator(".approval-options").textContent(), "the agent offers: Allow · Always allow · Reject");
  const commands = await block.locator(".approval-answer input").evaluateAll((es) => es.map((e) => [e.value, e.readOnly]));
  assert.deepEqual(commands, [
    [`berth approve ${short(a1)}`, true],
    [`berth deny ${short(a1)}`, true],
  ]);
  // Copy: to the clipboard, else the command is selected to copy by hand.
  await block.locator(".approval-answer button").nth(1).click();
  await block.locator(".copied", { hasText: /./ }).waitFor();
  assert.match(await block.locator(".copied").textContent(), new RegExp(`^copied: berth deny ${short(a1)}$|^selected: press Ctrl`));
  const inert = await page.evaluate(() => ({
    pwned: window.__pwned,
    elements: document.querySelectorAll(".transcript img, .transcript script").length,
    text: document.querySelector(".transcript").textContent,
  }));
  assert.equal(inert.pwned, undefined, "no script ran");
  assert.equal(inert.elements, 0, "no element made from the command");
  assert.ok(inert.text.includes(`<img src=x onerror="window.__pwned=3">`), "the command shows as literal text");
  // The task's state, in words, where statuses show: the Tasks panel and the list.
  const badge = page.locator(`.tasks tbody tr[data-task="${t1.id}"] .badge`).first();
  await page.waitForFunction((tid) => document.querySelector(`.tasks tbody tr[data-task="${tid}"]`)?.dataset.status === "waiting_approval", t1.id);
  assert.equal(await badge.textContent(), "waiting for your approval");
  assert.match(await badge.getAttribute("class"), /\btone-ask\b/);
  assert.match(await exitOf(page, t1.id).textContent(), new RegExp(`berth approve ${short(a1)} / berth deny ${short(a1)}$`));
  await assertNothingClipped(page);
  await page.screenshot({ path: path.join(ARTIFACTS, "session-approval-waiting.png"), fullPage: true });
  await page.click("text=← Sessions");
  // The list marks it "needs you" (issue 55), apart from what waits for a lock or a
  // machine, and its own filter finds it; the API lists it under ?needs=approval.
  await page.click('button[data-filter="needs"]');
  const listed = page.locator(`tr[data-session="${id}"]`);
  await listed.waitFor();
  assert.equal(await listed.getAttribute("data-needs"), "approval");
  assert.equal(await listed.locator(".badge").textContent(), "needs you");
  assert.match(await listed.locator(".badge").getAttribute("class"), /\btone-ask\b/);
  assert.equal(await listed.locator("[data-testid=approval-flag]").textContent(), `berth approve ${short(a1)} / berth deny ${short(a1)}`);
  assert.deepEqual((await api("/api/v1/sessions?needs=approval")).map((x) => x.id), [id]);
  await page.screenshot({ path: path.join(ARTIFACTS, "list-needs-you.png"), fullPage: true });
  await page.click('button[data-filter="waiting"]');
  await page.waitForFunction((sid) => !document.querySelector(`tr[data-session="${sid}"]`), id);
  await page.goBack();
  await block.waitFor();

  // 2. Denied from the CLI: the block becomes one line, in the open page.
  await berth(["deny", short(a1)]);
  await page.locator(`.transcript .ev-approval[data-approval="${a1.id}"][data-state=deny]`).waitFor();
  assert.equal(await block.locator(".ev-text").textContent(), `execute ${hostile} — denied by you via cli`);
  assert.equal(await page.locator(".transcript .ev-approval.is-pending").count(), 0, "no block left waiting");
  await finished(id);

  // 3. Allowed "always", then the same command again: allowed by the session's rule.
  await berth(["send", id, "run: true", "--detach"]);
  const a2 = (await waiting()).approvals[0];
  await page.locator(`.transcript .ev-approval.is-pending[data-approval="${a2.id}"]`).waitFor();
  await berth(["approve", short(a2), "--always"]);
  await finished(id);
  await berth(["send", id, "run: true", "--detach"]);
  await finished(id);

  // 4. Nobody answers within a deadline of a second: denied as timed out, never as a "no".
  const settings = path.join(env.BERTH_CONFIG_DIR, "settings.jsonc");
  fs.mkdirSync(env.BERTH_CONFIG_DIR, { recursive: true });
  fs.writeFileSync(settings, '{ "ask": { "deadline_secs": 1 } }\n');
  try {
    await berth(["send", id, "run: sh ./never.sh", "--detach"]);
    await waitFor("the request to time out", async () => (await api(`/api/v1/tasks?session=${id}`)).at(-1).approvals?.[0]?.decision);
  } finally {
    fs.rmSync(settings);
  }
  await finished(id);

  const lines = () =>
    page.evaluate(() =>
      [...document.querySelectorAll(".transcript .ev-approval")].map((e) => `${e.dataset.state}: ${e.querySelector(".ev-text").textContent}`),
    );
  const expected = [
    `deny: execute ${hostile} — denied by you via cli`,
    "allow: execute true — allowed by you via cli, always for this session",
    "allow: execute true — allowed by rule (session rule 1: execute: true)",
    "deny: execute sh ./never.sh — denied: nobody answered in time (approval_timeout)",
  ];
  await page.waitForFunction((n) => document.querySelectorAll(".transcript .ev-approval.is-decided").length === n, expected.length);
  assert.deepEqual(await lines(), expected);
  await page.screenshot({ path: path.join(ARTIFACTS, "session-approval-decided.png"), fullPage: true });

  // 5. Replayed from the stored transcript: the same end, each request once.
  await page.reload();
  await page.waitForFunction((n) => document.querySelectorAll(".transcript .ev-approval.is-decided").length === n, expected.length);
  await page.locator(".transcript .ev-task").last().waitFor();
  assert.deepEqual(await lines(), expected);
  assert.equal(await page.locator(".transcript .ev-approval.is-pending").count(), 0);
  const { text, html } = await pageTexts(page);
  assertPrivate("the page's text", text);
  assertPrivate("the page's HTML", html);
  assert.deepEqual([...new Set(requests.map((r) => r.method))], ["GET"], "the page only reads");
  assert.deepEqual(errors, []);
  await page.close();
});

// Last: a cookie names no port, so its members' cookies replace the one `berth serve`'s
// pages use on 127.0.0.1.
uiTest("on a team server the page is one member's: their sessions, their name", { timeout: 60000 }, async () => {
  // `berth-server` (beside the berth binary), with its own home and a member, ann.
  const serverBin = path.join(path.dirname(BIN), "berth-server");
  const teamHome = path.join(tmp, "team");
  const port = await new Promise((resolve) => {
    const s = http.createServer().listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
  const team = spawn(serverBin, ["--listen", `127.0.0.1:${port}`, "--home", teamHome], {
    env: { ...env, BERTH_HOME: teamHome },
    stdio: ["ignore", "ignore", "pipe"],
  });
  try {
    const info = await waitFor("berth-server's serve.json", () => {
      try {
        return JSON.parse(fs.readFileSync(path.join(teamHome, "serve.json"), "utf8"));
      } catch {
        return null;
      }
    });
    const url = info.url.replace(/\/$/, "");
    const admin = info.token;
    const run = (args) =>
      new Promise((resolve, reject) =>
        execFile(serverBin, [...args, "--home", teamHome, "--json"], { env }, (err, stdout, stderr) =>
          err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(JSON.parse(stdout)),
        ),
      );
    const ann = (await run(["member", "add", "ann"])).token;
    const call = async (tok, method, p, body) => {
      const res = await fetch(`${url}${p}`, {
        method,
        headers: { authorization: `Bearer ${tok}`, "content-type": "application/json" },
        body: body ? JSON.stringify(body) : undefined,
      });
      const text = await res.text();
      assert.ok(res.ok, `${method} ${p}: ${res.status} ${text}`);
      return JSON.parse(text);
    };
    await call(admin, "POST", "/api/v1/agents", { name: "cat", kind: "command", command: ["cat"] });
    const mine = await call(ann, "POST", "/api/v1/sessions", { agent: "cat", title: "Ann's work" });
    const theirs = await call(admin, "POST", "/api/v1/sessions", { agent: "cat", title: "Admin's own" });

    // Ann: her session only, and her name in the header.
    const { page, errors } = await openPage();
    await page.goto(`${url}/?token=${ann}`);
    await page.locator(`tr[data-session="${mine.id}"]`).waitFor();
    await page.locator("#who:not([hidden])").waitFor();
    assert.equal(await page.locator("#who").textContent(), "ann");
    assert.equal(await page.locator(`tr[data-session="${theirs.id}"]`).count(), 0, "another member's session shows");
    assert.equal(new URL(page.url()).search, "", "the token is stripped from the address bar");
    await page.screenshot({ path: path.join(ARTIFACTS, "team-member.png"), fullPage: true });
    assert.deepEqual(errors, []);
    // Her cookie does not open another member's session either (the console then
    // logs that 404).
    const res = await page.evaluate(async (id) => (await fetch(`/api/v1/sessions/${id}`)).status, theirs.id);
    assert.equal(res, 404);
    await page.close();

    // The admin sees both, and is named as such.
    const second = await context.newPage();
    open.push(second);
    await second.goto(`${url}/?token=${admin}`);
    await second.locator(`tr[data-session="${theirs.id}"]`).waitFor();
    await second.locator(`tr[data-session="${mine.id}"]`).waitFor();
    assert.equal(await second.locator("#who").textContent(), "admin (admin: every session)");
    await second.close();
  } finally {
    team.kill("SIGTERM");
  }
});
