//! The browser bundle's exports, run as WebAssembly under Node.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a panic is a failed test.
#![cfg(target_arch = "wasm32")]

use berth_wasm::{check_path, check_settings, display_path, has_local_binding, preview};
use serde_json::{Value, json};
use wasm_bindgen_test::wasm_bindgen_test;

fn parse(s: String) -> Value {
    serde_json::from_str(&s).unwrap()
}

#[wasm_bindgen_test]
fn the_bundle_has_no_local_binding() {
    assert!(!has_local_binding());
}

#[wasm_bindgen_test]
fn check_refuses_home_and_accepts_a_project() {
    assert_eq!(
        parse(check_path("linux", "/home/alice", "/home/alice")),
        json!({
            "ok": false, "code": "home_directory", "message": "~ is your home directory",
            "canonical": "/home/alice", "display": "~",
            "hint": "bind one project directory, e.g. ~/code/app, not a directory that holds homes or your whole home"
        })
    );
    assert_eq!(
        parse(check_path("linux", "~/code/app/", "/home/alice")),
        json!({
            "ok": true, "code": null, "message": "~/code/app can be bound",
            "canonical": "/home/alice/code/app", "display": "~/code/app"
        })
    );
    let win = parse(check_path("windows", "C:\\Windows\\System32", ""));
    assert_eq!(win["code"], "system_root");
    let bad = parse(check_path("plan9", "/x", ""));
    assert_eq!(bad["error"]["code"], "bad_request");
}

#[wasm_bindgen_test]
fn display_strips_the_user_name() {
    assert_eq!(
        display_path("macos", "/Users/alice/code", "/Users/alice"),
        "~/code"
    );
    assert_eq!(
        display_path("linux", "/home/bob/x", "/home/alice"),
        "/home/…/x"
    );
    assert_eq!(display_path("linux", "not a path", ""), "not a path");
}

#[wasm_bindgen_test]
fn preview_follows_resolution() {
    let bound = json!({
        "origin": "desktop",
        "binding": {"display": "~/code/app", "daemon": "m1", "daemon_name": "laptop", "mode": "in-place", "state": "ok"},
        "claimer": "m1", "online": ["m1"]
    });
    let out = parse(preview(&bound.to_string()));
    assert_eq!(
        out["resolution"],
        json!({"kind": "in_place", "dir": "~/code/app", "machine": "m1", "why": {"reason": "session_binding"}})
    );
    assert_eq!(out["message"], "the session is bound to this directory");

    let mut web = bound.clone();
    web["origin"] = json!("web");
    assert_eq!(
        parse(preview(&web.to_string()))["resolution"]["code"],
        "origin_cannot_bind"
    );

    let mut offline = bound;
    offline["claimer"] = json!("m2");
    offline["online"] = json!(["m2"]);
    assert_eq!(
        parse(preview(&offline.to_string()))["resolution"]["kind"],
        "wait"
    );

    let bad = parse(preview("{\"origin\": \"desktop\", \"dir\": \"/etc\"}"));
    assert_eq!(bad["error"]["code"], "bad_request");
}

#[wasm_bindgen_test]
fn settings_diagnostics_have_positions() {
    let out = parse(check_settings(
        "linux",
        "/p/app/.berth",
        "settings.jsonc",
        "{\n  \"agent\": 3,\n}",
    ));
    let first = &out.as_array().unwrap()[0];
    assert_eq!(
        (first["line"].clone(), first["severity"].clone()),
        (json!(2), json!("error"))
    );
    let clean = parse(check_settings(
        "linux",
        "/p/app/.berth",
        "settings.jsonc",
        "// ok\n{\"agent\": \"claude\",}",
    ));
    assert_eq!(clean, json!([]));
}
