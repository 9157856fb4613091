use super::*;
use crate::exec::AgentKind;
use proptest::prelude::*;
use serde_json::json;

fn usage(input: u64, output: u64, cache_read: u64, cache_write: u64, raw: Value) -> Usage {
    Usage {
        input,
        output,
        cache_read,
        cache_write,
        cost_usd: None,
        raw,
    }
}

/// What each pinned agent sent against the fake model APIs (the tests' `real_*`
/// suites), and what Berth makes of it.
#[test]
fn each_kind_as_the_pinned_agents_report_it() {
    // Claude Code 2.1.332's `result.usage` (two model turns added up) and its cost.
    let claude = json!({"cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":0},
        "cache_creation_input_tokens":3122,"cache_read_input_tokens":6245,"fallback_credit":null,
        "inference_geo":"","input_tokens":24980,"iterations":[],"output_tokens":71,
        "output_tokens_details":{"thinking_tokens":0},"server_tool_use":{"web_fetch_requests":0,
        "web_search_requests":0},"service_tier":"standard","speed":"standard"});
    assert_eq!(
        AgentKind::Claude.usage(&claude, Some(0.0123)),
        Some(Usage {
            cost_usd: Some(0.0123),
            ..usage(24980, 71, 6245, 3122, claude.clone())
        })
    );
    // codex-cli 0.171's `turn.completed.usage`: the input holds the cached part.
    let codex = json!({"input_tokens":24763,"cached_input_tokens":24448,"cache_write_input_tokens":0,
        "output_tokens":122,"reasoning_output_tokens":0});
    assert_eq!(
        AgentKind::Codex.usage(&codex, None),
        Some(usage(315, 122, 24448, 0, codex.clone()))
    );
    // opencode 1.18's prompt answer: `totalTokens` is the sum of every kind.
    let opencode = json!({"cachedReadTokens":1962,"cachedWriteTokens":981,"inputTokens":7849,
        "outputTokens":10,"totalTokens":10802});
    assert_eq!(
        AgentKind::Acp.usage(&opencode, None),
        Some(usage(7849, 10, 1962, 981, opencode.clone()))
    );
    // Gemini CLI's quota count, as the ACP client passes it on.
    let gemini = json!({"inputTokens":20233,"outputTokens":8});
    assert_eq!(
        AgentKind::Acp.usage(&gemini, None),
        Some(usage(20233, 8, 0, 0, gemini.clone()))
    );
    // codex-acp 0.16 sends only `usage_update`: the context window, no tokens spent.
    let codex_acp = json!({"size":258400,"used":9725});
    assert_eq!(
        AgentKind::Acp.usage(&codex_acp, None),
        Some(usage(0, 0, 0, 0, codex_acp.clone()))
    );
    // A command agent reports nothing; a report that is not an object is none.
    assert_eq!(AgentKind::Command.usage(&gemini, None), None);
    assert_eq!(AgentKind::Claude.usage(&json!(12), None), None);
    assert_eq!(AgentKind::Acp.usage(&json!("x"), None), None);
}

/// codex-cli 0.171 reports the thread's running total: a resumed turn counts what it
/// adds (the numbers the real codex sent for two turns of one session).
#[test]
fn a_resumed_codex_turn_counts_what_it_adds() {
    let first = json!({"cache_write_input_tokens":0,"cached_input_tokens":2404,"input_tokens":9617,
        "output_tokens":40,"reasoning_output_tokens":0});
    let second = json!({"cache_write_input_tokens":0,"cached_input_tokens":4850,"input_tokens":19402,
        "output_tokens":80,"reasoning_output_tokens":0});
    assert_eq!(
        Usage::codex_turn(&first, None),
        usage(7213, 40, 2404, 0, first.clone())
    );
    assert_eq!(
        Usage::codex_turn(&second, Some(&first)),
        usage(7339, 40, 2446, 0, second.clone())
    );
    // Another thread (a count went down), or a previous report not Codex's: whole.
    assert_eq!(
        Usage::codex_turn(&first, Some(&second)),
        Usage::codex(&first)
    );
    let acp = json!({"inputTokens": 1});
    assert_eq!(
        Usage::codex_turn(&second, Some(&acp)),
        Usage::codex(&second)
    );
    // Hostile previous numbers never underflow or panic.
    let junk = json!({"cached_input_tokens": "x", "input_tokens": -4, "output_tokens": 1e300});
    assert_eq!(
        Usage::codex_turn(&second, Some(&junk)),
        Usage::codex(&second)
    );
}

#[test]
fn the_shape_serializes_as_documented() {
    let u = Usage {
        cost_usd: Some(0.5),
        ..usage(1, 2, 3, 4, json!({"a": 1}))
    };
    assert_eq!(
        serde_json::to_value(&u).unwrap(),
        json!({"input":1,"output":2,"cache_read":3,"cache_write":4,"cost_usd":0.5,"raw":{"a":1}})
    );
    // Stored text starts with `{"input":` (the store tells new rows by it).
    assert!(
        serde_json::to_string(&u)
            .unwrap()
            .starts_with("{\"input\":")
    );
    assert_eq!(
        serde_json::to_value(usage(0, 0, 0, 0, json!({}))).unwrap(),
        json!({"input":0,"output":0,"cache_read":0,"cache_write":0,"raw":{}})
    );
}

/// Rows stored before this shape (the agent's own object) read as the new shape.
#[test]
fn old_rows_read_in_the_new_shape() {
    let cases = [
        (
            json!({"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":3,"cache_creation_input_tokens":2}),
            (10, 5, 3, 2),
        ),
        (
            json!({"input_tokens":24763,"cached_input_tokens":24448,"output_tokens":122}),
            (315, 122, 24448, 0),
        ),
        (
            json!({"inputTokens":10,"outputTokens":4,"cachedReadTokens":1}),
            (10, 4, 1, 0),
        ),
        (json!({"size":258400,"used":9725}), (0, 0, 0, 0)),
    ];
    for (old, (i, o, r, w)) in cases {
        let read: Usage = serde_json::from_value(old.clone()).unwrap();
        assert_eq!(read, usage(i, o, r, w, old.clone()), "{old}");
        // And what it reads as is stable: read again, it is the same.
        let again: Usage = serde_json::from_value(serde_json::to_value(&read).unwrap()).unwrap();
        assert_eq!(again, read);
    }
    assert!(serde_json::from_value::<Usage>(json!([1, 2])).is_err());
    #[derive(Deserialize)]
    struct Doc {
        #[serde(default, deserialize_with = "lenient")]
        usage: Option<Usage>,
    }
    let doc: Doc = serde_json::from_value(json!({"usage": 7})).unwrap();
    assert_eq!(doc.usage, None);
    let doc: Doc = serde_json::from_value(json!({"usage": null})).unwrap();
    assert_eq!(doc.usage, None);
    let doc: Doc = serde_json::from_value(json!({})).unwrap();
    assert_eq!(doc.usage, None);
}

#[test]
fn hostile_numbers_are_clamped_or_ignored() {
    let raw = json!({
        "input_tokens": -5,
        "output_tokens": 1e300,
        "cache_read_input_tokens": "123",
        "cache_creation_input_tokens": {"nested": [1, 2, 3]},
    });
    assert_eq!(
        Usage::claude(&raw, Some(-1.0)),
        usage(0, MAX_TOKENS, 123, 0, raw.clone())
    );
    let raw = json!({"input_tokens": u64::MAX, "output_tokens": "99999999999999999999999",
        "cache_read_input_tokens": 2.9, "cache_creation_input_tokens": "-3"});
    assert_eq!(
        Usage::claude(&raw, Some(f64::MAX)),
        Usage {
            cost_usd: Some(MAX_COST_USD),
            ..usage(MAX_TOKENS, 0, 2, 0, raw.clone())
        }
    );
    // Codex's cached part larger than its input: no underflow.
    let raw = json!({"input_tokens": 5, "cached_input_tokens": 50, "cache_write_input_tokens": 9});
    assert_eq!(Usage::codex(&raw), usage(0, 0, 50, 9, raw.clone()));
    assert_eq!(cost(Some(f64::NAN)), None);
    assert_eq!(cost(Some(f64::INFINITY)), None);
    // A stored row with junk in the new shape is checked again.
    let stored = json!({"input": -1, "output": "7", "cache_read": null, "cache_write": [1],
        "cost_usd": "1.0", "raw": {}});
    assert_eq!(
        Usage::from_stored(&stored),
        Some(usage(0, 7, 0, 0, json!({})))
    );
}

#[test]
fn raw_is_bounded() {
    let big: Map<String, Value> = (0..500)
        .map(|i| (format!("k{i:03}"), json!({"deep": "x".repeat(100)})))
        .chain([
            ("input_tokens".to_owned(), json!(7)),
            ("note".to_owned(), json!("y".repeat(1000))),
        ])
        .collect();
    let raw = Value::Object(big);
    let u = Usage::claude(&raw, None);
    assert_eq!(u.input, 7, "the counts are read from the whole object");
    let kept = serde_json::to_string(&u.raw).unwrap();
    assert!(kept.len() <= MAX_RAW_BYTES, "{} bytes", kept.len());
    assert_eq!(u.raw["truncated"], json!(true));
    assert_eq!(u.raw["input_tokens"], json!(7));
    assert_eq!(u.raw["note"].as_str().map(str::len), Some(MAX_RAW_STRING));
    let small = json!({"input_tokens": 1});
    assert_eq!(Usage::claude(&small, None).raw, small);
}

#[test]
fn totals_read_as_a_line() {
    let t = UsageTotals {
        tasks: 2,
        input: 1_234_567,
        output: 89,
        cache_read: 1000,
        cache_write: 0,
        cost_usd: Some(0.01234),
    };
    assert_eq!(
        t.line(),
        "1,234,567 in · 89 out · 1,000 cache read · $0.0123 (2 tasks)"
    );
    assert_eq!(UsageTotals::default().line(), "0 in · 0 out (0 tasks)");
    assert_eq!(t.tokens(), 1_235_656);
    assert_eq!(t.brief(), "1,235,656 tokens, $0.0123");
    assert_eq!(UsageTotals::default().brief(), "0 tokens");
}

#[test]
fn since_and_by_parse_or_refuse() {
    assert_eq!(since("2026-12-01").as_deref(), Some("2026-12-01"));
    assert_eq!(
        since("2026-12-01T10:00:00Z").as_deref(),
        Some("2026-12-01T10:00:00.000Z")
    );
    assert_eq!(
        since("2026-12-01T10:00:00.1Z").as_deref(),
        Some("2026-12-01T10:00:00.100Z")
    );
    assert_eq!(
        since("2026-12-01T10:00:00.123456Z").as_deref(),
        Some("2026-12-01T10:00:00.123Z")
    );
    for bad in [
        "",
        "yesterday",
        "2026-13-01",
        "2026-12-32",
        "2026-1-01",
        "2026-12-01T10:00",
        "2026-12-01T10:00:00+02:00",
        "2026-12-01 10:00:00Z",
        "2026-12-01T10:00:00.Z",
        "٢٠٢٦-12-01",
    ] {
        assert_eq!(since(bad), None, "{bad:?}");
    }
    assert_eq!(UsageBy::parse("day"), Some(UsageBy::Day));
    assert_eq!(UsageBy::parse("Day"), None);
    for b in UsageBy::ALL {
        assert_eq!(UsageBy::parse(b.as_str()), Some(b));
        assert_eq!(serde_json::to_value(b).unwrap(), json!(b.as_str()));
    }
}

proptest! {
    /// Whatever an agent sends, normalizing never panics, every count is within
    /// bounds, and reading the stored shape back gives the same usage (idempotent).
    #[test]
    fn normalizing_is_bounded_and_idempotent(
        a in any::<i64>(), b in any::<f64>(), c in "[0-9a-z-]{0,24}", d in any::<u64>(),
        cost_in in any::<f64>(), kind in 0..3u8,
    ) {
        let raw = json!({"input_tokens": a, "output_tokens": b.to_string(), "cached_input_tokens": c,
            "cache_read_input_tokens": d, "inputTokens": d, "outputTokens": a, "cachedReadTokens": c});
        let kind = [AgentKind::Claude, AgentKind::Codex, AgentKind::Acp][kind as usize];
        let u = kind.usage(&raw, Some(cost_in)).unwrap();
        for n in [u.input, u.output, u.cache_read, u.cache_write] {
            prop_assert!(n <= MAX_TOKENS);
        }
        prop_assert!(u.cost_usd.is_none_or(|c| c.is_finite() && (0.0..=MAX_COST_USD).contains(&c)));
        // JSON's text keeps a cost to within a unit in the last place.
        let back: Usage = serde_json::from_str(&serde_json::to_string(&u).unwrap()).unwrap();
        let close = match (back.cost_usd, u.cost_usd) {
            (Some(x), Some(y)) => (x - y).abs() <= y * 1e-12,
            (x, y) => x == y,
        };
        prop_assert!(close);
        prop_assert_eq!(Usage { cost_usd: None, ..back }, Usage { cost_usd: None, ..u });
    }
}
