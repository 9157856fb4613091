// Berth's read-only web UI: routing and what the views share.
//
// `/` is the sessions list and `/sessions/<id>` a session; the server answers both
// with this page, so a bookmark or a reload lands on the same view. Nothing in this
// page writes: it only GETs the API (the web listener answers anything else 405).

import { h, navLink, replace } from "./dom.js";
import { showList } from "./list.js";
import { showSession } from "./session.js";

const main = document.getElementById("main");

// The token came as `?token=` once and is now a cookie: take it out of the address
// bar, the history and anything the user copies or bookmarks.
function forgetToken() {
  const url = new URL(location.href);
  if (!url.searchParams.has("token")) return;
  url.searchParams.delete("token");
  history.replaceState(history.state, "", url.pathname + url.search + url.hash);
}

let dispose = null;

function route() {
  if (dispose) {
    dispose();
    dispose = null;
  }
  const path = location.pathname;
  const m = /^\/sessions\/([^/]+)\/?$/.exec(path);
  if (path === "/" || path === "") {
    dispose = showList(main);
  } else if (m) {
    let id = m[1];
    try {
      id = decodeURIComponent(id);
    } catch {
      // A malformed escape is shown as typed; the server then answers "no such session".
    }
    dispose = showSession(main, id);
  } else {
    document.title = "Not found · Berth";
    replace(
      main,
      h("section", { class: "notice" }, h("h1", { text: "No such page" }), h("p", {}, navLink("/", "Back to the sessions"))),
    );
  }
}

/** Goes to `href` inside the page, as a link would. */
function navigate(href) {
  history.pushState(null, "", href);
  route();
  window.scrollTo(0, 0);
}

document.addEventListener("click", (e) => {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const a = e.target.closest && e.target.closest("a[data-nav]");
  if (!a) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin) return;
  e.preventDefault();
  navigate(url.pathname + url.search);
});
window.addEventListener("popstate", route);

// On a team server the page is one member's: say whose (an admin sees every session).
async function showWho() {
  try {
    const res = await fetch("/api/v1/me", { headers: { accept: "application/json" } });
    if (!res.ok) return;
    const me = await res.json();
    if (!me.member) return;
    const who = document.getElementById("who");
    who.textContent = me.admin ? `${me.member} (admin: every session)` : me.member;
    who.title = "The sessions shown are this member's";
    who.hidden = false;
  } catch {
    // The header simply names no one.
  }
}

forgetToken();
route();
showWho();
