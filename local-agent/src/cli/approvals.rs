//! `berth approvals`, `berth approve`, `berth deny` and `berth session rules`: what the
//! `ask` policy puts to you, answered from the shell.

use super::client::{Client, encode};
use super::error::CliError;
use super::render::print_json;
use berth_core::ErrorCode;
use hyper::Method;
use serde_json::json;

/// What the person says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Say {
    Allow { always: bool },
    Deny { reason: Option<String> },
}

pub use super::render::{decided, what};
use berth_core::approval::Approval;

/// [`Approval::short_id`]: how a request's id is typed.
fn short_id(id: &str) -> String {
    Approval::short_id(id)
}

/// `berth approvals [--all] [--json]`.
pub async fn list(c: &Client, all: bool, json: bool) -> Result<u8, CliError> {
    let path = if all {
        "/api/v1/approvals?all=true"
    } else {
        "/api/v1/approvals"
    };
    let v = c.get(path).await?;
    if json {
        print_json(&v);
        return Ok(0);
    }
    let list = v["approvals"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        println!(
            "nothing waits for your answer{}",
            if all {
                ", and nothing was asked lately"
            } else {
                ""
            }
        );
        return Ok(0);
    }
    for a in &list {
        let id = short_id(a["id"].as_str().unwrap_or_default());
        let session = super::render::short(&a["session_id"]);
        let kind = a["kind"].as_str().unwrap_or("?");
        match a.get("decision").filter(|d| d.is_object()) {
            None => println!(
                "{id}  session {session}  {kind}: {}  (until {})",
                what(a),
                a["deadline"].as_str().unwrap_or("?")
            ),
            Some(d) => println!(
                "{id}  session {session}  {kind}: {}  {}",
                what(a),
                decided(d)
            ),
        }
    }
    if list.iter().any(|a| a["decision"].is_null()) {
        println!("answer with: berth approve ID [--always] | berth deny ID [--reason TEXT]");
    }
    Ok(0)
}

/// The full id of the request `typed` names: among what waits first (a request a
/// person may still answer), else among recent decided ones (so a late or second
/// answer hears the server's `expired` or `already_decided`).
async fn resolve(c: &Client, typed: &str) -> Result<String, CliError> {
    let v = c.get("/api/v1/approvals?all=true").await?;
    let list = v["approvals"].as_array().cloned().unwrap_or_default();
    let ids = |pending: bool| -> Vec<String> {
        list.iter()
            .filter(|a| a["decision"].is_null() == pending)
            .filter_map(|a| a["id"].as_str())
            .filter(|id| *id == typed || id.starts_with(typed) || short_id(id).starts_with(typed))
            .map(str::to_owned)
            .collect()
    };
    for pending in [true, false] {
        let found = ids(pending);
        match found.as_slice() {
            [] => continue,
            [one] => return Ok(one.clone()),
            many => {
                let shown: Vec<String> = many.iter().map(|id| short_id(id)).collect();
                return Err(CliError {
                    code: Some(ErrorCode::AmbiguousId),
                    ..CliError::new(
                        format!("{typed:?} matches several requests: {}", shown.join(", ")),
                        "give more characters of the id",
                    )
                });
            }
        }
    }
    Err(CliError {
        code: Some(ErrorCode::UnknownApproval),
        ..CliError::new(
            format!("no request {typed:?} waits for you"),
            "`berth approvals` lists what waits",
        )
    })
}

/// `berth approve ID [--always]` / `berth deny ID [--reason TEXT]`.
pub async fn answer(c: &Client, typed: &str, say: Say, json: bool) -> Result<u8, CliError> {
    let id = resolve(c, typed).await?;
    let body = match &say {
        Say::Allow { always } => json!({"decision": "allow", "always": always, "via": "cli"}),
        Say::Deny { reason } => json!({"decision": "deny", "reason": reason, "via": "cli"}),
    };
    let a = c
        .call(
            Method::POST,
            &format!("/api/v1/approvals/{}", encode(&id)),
            Some(&body),
        )
        .await?;
    if json {
        print_json(&a);
        return Ok(0);
    }
    let verdict = match say {
        Say::Allow { always: true } => "allowed, and from now on in this session,",
        Say::Allow { always: false } => "allowed",
        Say::Deny { .. } => "denied",
    };
    println!("{verdict} {}: {}", short_id(&id), what(&a));
    if matches!(say, Say::Allow { always: true }) {
        let session = super::render::short(&a["session_id"]);
        println!("the rule is listed by: berth session rules {session}");
    }
    Ok(0)
}

/// `berth session rules ID [--remove N] [--json]`.
pub async fn rules(c: &Client, id: &str, remove: Option<i64>, json: bool) -> Result<u8, CliError> {
    if let Some(n) = remove {
        let gone = c
            .call(
                Method::DELETE,
                &format!("/api/v1/sessions/{}/rules/{n}", encode(id)),
                None,
            )
            .await?;
        if json {
            print_json(&gone);
        } else {
            println!(
                "removed rule {n}: {} (the agent is asked again)",
                gone["rule"].as_str().unwrap_or("?")
            );
        }
        return Ok(0);
    }
    let v = c
        .get(&format!("/api/v1/sessions/{}/rules", encode(id)))
        .await?;
    if json {
        print_json(&v);
        return Ok(0);
    }
    let list = v["rules"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        println!("no rules: every request the policy leaves open is asked");
        return Ok(0);
    }
    for r in &list {
        println!(
            "{:>3}  {}  (since {})",
            r["n"],
            r["rule"].as_str().unwrap_or("?"),
            r["added_at"].as_str().unwrap_or("?")
        );
    }
    println!("remove one with: berth session rules {id} --remove N");
    Ok(0)
}
