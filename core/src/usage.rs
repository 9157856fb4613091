//! Token usage in one shape for every agent kind, so a session's or a member's tasks
//! can be added up.
//!
//! Each agent reports usage in its own words; [`Usage`] is Berth's: `input` is the input
//! the model read fresh (neither read from nor written to the prompt cache),
//! `cache_read` and `cache_write` the input that was, `output` what it wrote. The three
//! input fields add up to all the input, whichever way the agent counted it:
//!
//! - Claude Code (`result.usage`, Anthropic's Messages API words): `input_tokens` leaves
//!   the cache out, `cache_read_input_tokens` and `cache_creation_input_tokens` are
//!   apart. Its `total_cost_usd` is the only cost Berth records: the agent's own figure.
//! - Codex (`turn.completed.usage`, OpenAI's words): `input_tokens` counts all the input,
//!   `cached_input_tokens` (and `cache_write_input_tokens`, codex-cli 0.171) among it,
//!   so `input` is what is left once those are taken out. Its numbers are the thread's
//!   running total, resumed turns included (codex-cli 0.171: a second turn reports the
//!   first's tokens plus its own), so a resumed turn counts what it adds to the
//!   previous turn's report ([`Usage::codex_turn`]).
//! - ACP (`session/prompt`'s `usage`: `inputTokens`, `outputTokens`, `cachedReadTokens`,
//!   `cachedWriteTokens`, `totalTokens`): the schema's `totalTokens` is the sum of every
//!   kind, so `inputTokens` leaves the cache out (opencode 1.18 sends
//!   `totalTokens = input + output + cachedRead + cachedWrite`). Gemini CLI's
//!   `_meta.quota.token_count` arrives as `inputTokens`/`outputTokens`. A
//!   `usage_update` alone (`used` of `size`, the context window; codex-acp 0.16 sends
//!   nothing else) counts no tokens: how full the context is says nothing of what a
//!   turn spent. Its `cost` counts when its currency is `USD`.
//!
//! The numbers are the agent's, so untrusted: a count that is negative, not a number
//! or nested junk counts 0, one beyond [`MAX_TOKENS`] counts [`MAX_TOKENS`] (so a sum of
//! millions of tasks stays within an `i64`), a cost that is negative or not finite is
//! dropped, and the raw object is kept only as far as [`MAX_RAW_BYTES`] allows.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The most tokens one task's field counts (2^40, about 1.1 trillion).
pub const MAX_TOKENS: u64 = 1 << 40;
/// The most dollars one task's cost counts.
pub const MAX_COST_USD: f64 = 1_000_000.0;
/// The most bytes of the agent's own object kept under `raw`; beyond it, only its
/// top-level numbers (and short strings) are kept.
pub const MAX_RAW_BYTES: usize = 4096;
/// The most characters of a string kept in a trimmed `raw`.
const MAX_RAW_STRING: usize = 128;
/// The most entries kept in a trimmed `raw`.
const MAX_RAW_KEYS: usize = 32;

/// One task's token usage, normalized. Serialized as `{input, output, cache_read,
/// cache_write, cost_usd?, raw}`; read back from that shape or from an agent's own
/// (rows and daemons older than this shape), see [`Usage::from_stored`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    /// What the agent itself said the turn cost, in US dollars; never estimated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// The agent's own object, as it sent it (bounded).
    pub raw: Value,
}

// `cost_usd` is always finite (see `cost`), so equality is an equivalence.
impl Eq for Usage {}

impl<'de> Deserialize<'de> for Usage {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Usage, D::Error> {
        let v = Value::deserialize(d)?;
        Usage::from_stored(&v).ok_or_else(|| serde::de::Error::custom("usage is not a JSON object"))
    }
}

/// For `#[serde(deserialize_with)]` on an `Option<Usage>`: usage that is not an object
/// at all reads as none rather than failing the whole document (a daemon's `finish`,
/// a stored row).
pub fn lenient<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Usage>, D::Error> {
    let v = Option::<Value>::deserialize(d)?;
    Ok(v.as_ref().and_then(Usage::from_stored))
}

impl Usage {
    /// Claude Code's `result.usage` and its `total_cost_usd`.
    pub fn claude(raw: &Value, cost_usd: Option<f64>) -> Usage {
        Usage::named(
            raw,
            [
                "input_tokens",
                "output_tokens",
                "cache_read_input_tokens",
                "cache_creation_input_tokens",
            ],
            cost_usd,
        )
    }

    /// A report that counts input, output, cache reads and cache writes apart, under
    /// these names (in that order).
    fn named(raw: &Value, [input, output, read, write]: [&str; 4], cost_usd: Option<f64>) -> Usage {
        Usage {
            input: count(&raw[input]),
            output: count(&raw[output]),
            cache_read: count(&raw[read]),
            cache_write: count(&raw[write]),
            cost_usd: cost(cost_usd),
            raw: bounded(raw),
        }
    }

    /// Codex's `turn.completed.usage`: its input includes what came from the cache.
    pub fn codex(raw: &Value) -> Usage {
        let cache_read = count(&raw["cached_input_tokens"]);
        let cache_write = count(&raw["cache_write_input_tokens"]);
        Usage {
            input: count(&raw["input_tokens"])
                .saturating_sub(cache_read)
                .saturating_sub(cache_write),
            output: count(&raw["output_tokens"]),
            cache_read,
            cache_write,
            cost_usd: None,
            raw: bounded(raw),
        }
    }

    /// A Codex turn that continued the thread whose previous turn reported `previous`
    /// (that task's `raw`): what this report adds to it. A report smaller in any count
    /// than `previous`, or a `previous` not in Codex's words, is another thread's: the
    /// report is taken whole.
    pub fn codex_turn(raw: &Value, previous: Option<&Value>) -> Usage {
        const FIELDS: [&str; 4] = [
            "input_tokens",
            "cached_input_tokens",
            "cache_write_input_tokens",
            "output_tokens",
        ];
        let whole = Usage::codex(raw);
        let Some(prev) = previous.filter(|p| p.get("cached_input_tokens").is_some()) else {
            return whole;
        };
        let added: Option<Map<String, Value>> = FIELDS
            .iter()
            .map(|f| {
                let (now, before) = (count(&raw[*f]), count(&prev[*f]));
                now.checked_sub(before)
                    .map(|d| ((*f).to_owned(), Value::from(d)))
            })
            .collect();
        match added {
            Some(added) => Usage {
                raw: whole.raw,
                ..Usage::codex(&Value::Object(added))
            },
            None => whole,
        }
    }

    /// An ACP agent's usage: the prompt answer's `usage`, or a `usage_update` (whose
    /// `used`/`size` count no tokens).
    pub fn acp(raw: &Value, cost_usd: Option<f64>) -> Usage {
        Usage::named(
            raw,
            [
                "inputTokens",
                "outputTokens",
                "cachedReadTokens",
                "cachedWriteTokens",
            ],
            cost_usd,
        )
    }

    /// Usage as stored or sent: this shape (its numbers checked again), or, from a
    /// Berth before it, the agent's own object, whose kind is told by its field names
    /// (`cached_input_tokens`: Codex; `input_tokens`: Claude Code; otherwise ACP). Such
    /// an old object never carried the cost. `None` when `v` is not an object.
    pub fn from_stored(v: &Value) -> Option<Usage> {
        let o = v.as_object()?;
        if o.contains_key("raw") && o.contains_key("input") {
            return Some(Usage {
                input: count(&v["input"]),
                output: count(&v["output"]),
                cache_read: count(&v["cache_read"]),
                cache_write: count(&v["cache_write"]),
                cost_usd: cost(v["cost_usd"].as_f64()),
                raw: bounded(&v["raw"]),
            });
        }
        Some(if o.contains_key("cached_input_tokens") {
            Usage::codex(v)
        } else if o.contains_key("input_tokens") || o.contains_key("output_tokens") {
            Usage::claude(v, None)
        } else {
            Usage::acp(v, None)
        })
    }

    /// Every token counted, input of all kinds and output.
    pub fn tokens(&self) -> u64 {
        self.input
            .saturating_add(self.output)
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write)
    }
}

/// A token count from an agent: a non-negative integer, at most [`MAX_TOKENS`]. A
/// fraction is cut, a string of digits read; anything else counts 0.
fn count(v: &Value) -> u64 {
    let n = match v {
        Value::Number(n) => n
            .as_u64()
            .or_else(|| n.as_i64().map(|_| 0))
            .or_else(|| {
                n.as_f64().filter(|f| f.is_finite() && *f > 0.0).map(|f| {
                    if f >= MAX_TOKENS as f64 {
                        MAX_TOKENS
                    } else {
                        f as u64
                    }
                })
            })
            .unwrap_or(0),
        Value::String(s)
            if !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit()) =>
        {
            s.parse::<u64>().unwrap_or(MAX_TOKENS)
        }
        Value::Null | Value::Bool(_) | Value::String(_) | Value::Array(_) | Value::Object(_) => 0,
    };
    n.min(MAX_TOKENS)
}

/// An agent's cost: finite and not negative, at most [`MAX_COST_USD`].
fn cost(c: Option<f64>) -> Option<f64> {
    c.filter(|c| c.is_finite() && *c >= 0.0)
        .map(|c| c.min(MAX_COST_USD))
}

/// `raw` when it is small enough; else its first top-level numbers, booleans and
/// short strings, with `"truncated": true`.
fn bounded(raw: &Value) -> Value {
    let size = serde_json::to_string(raw).map_or(usize::MAX, |s| s.len());
    if size <= MAX_RAW_BYTES {
        return raw.clone();
    }
    let mut kept = Map::new();
    if let Some(o) = raw.as_object() {
        for (k, v) in o.iter().filter(|(k, _)| k.len() <= MAX_RAW_STRING) {
            if kept.len() == MAX_RAW_KEYS {
                break;
            }
            let v = match v {
                Value::Number(_) | Value::Bool(_) | Value::Null => v.clone(),
                Value::String(s) => Value::String(s.chars().take(MAX_RAW_STRING).collect()),
                Value::Array(_) | Value::Object(_) => continue,
            };
            kept.insert(k.clone(), v);
        }
    }
    kept.insert("truncated".to_owned(), Value::Bool(true));
    Value::Object(kept)
}

/// Tasks' usage added up (by the store, in the database): how many tasks reported
/// usage, the sums of their fields, and the sum of the costs the agents reported
/// (`None` when none did).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageTotals {
    pub tasks: u64,
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

// Sums of finite costs, each at most `MAX_COST_USD`: finite.
impl Eq for UsageTotals {}

impl UsageTotals {
    /// Every token counted.
    pub fn tokens(&self) -> u64 {
        self.input
            .saturating_add(self.output)
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write)
    }

    /// One line for people: `12,345 in · 678 out · 9,000 cache read · 1,000 cache
    /// write · $0.0123 (4 tasks)`; the cache and cost parts only when not zero.
    pub fn line(&self) -> String {
        let mut parts = vec![
            format!("{} in", grouped(self.input)),
            format!("{} out", grouped(self.output)),
        ];
        if self.cache_read > 0 {
            parts.push(format!("{} cache read", grouped(self.cache_read)));
        }
        if self.cache_write > 0 {
            parts.push(format!("{} cache write", grouped(self.cache_write)));
        }
        if let Some(c) = self.cost_usd {
            parts.push(format!("${c:.4}"));
        }
        let tasks = if self.tasks == 1 { "task" } else { "tasks" };
        format!("{} ({} {tasks})", parts.join(" · "), self.tasks)
    }
}

impl UsageTotals {
    /// Short, for a header: `12,412 tokens` (`, $0.0123` when a cost was reported).
    pub fn brief(&self) -> String {
        match self.cost_usd {
            Some(c) => format!("{} tokens, ${c:.4}", grouped(self.tokens())),
            None => format!("{} tokens", grouped(self.tokens())),
        }
    }
}

/// `1234567` as `1,234,567`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// How `GET usage` groups its totals (`?by=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UsageBy {
    /// The session's agent, by name.
    Agent,
    Session,
    /// The UTC day the task finished on, `YYYY-MM-DD`.
    Day,
}

impl UsageBy {
    pub const ALL: [UsageBy; 3] = [UsageBy::Agent, UsageBy::Session, UsageBy::Day];

    pub const fn as_str(self) -> &'static str {
        match self {
            UsageBy::Agent => "agent",
            UsageBy::Session => "session",
            UsageBy::Day => "day",
        }
    }

    /// `agent`, `session` or `day`; `None` for anything else.
    pub fn parse(s: &str) -> Option<UsageBy> {
        UsageBy::ALL.into_iter().find(|b| b.as_str() == s)
    }
}

/// What to give for a `since` that [`since`] refuses.
pub const SINCE_HINT: &str =
    "give a UTC date, YYYY-MM-DD (2026-12-01), or a time, YYYY-MM-DDTHH:MM:SSZ";
/// What to give for a `by` that [`UsageBy::parse`] refuses.
pub const BY_HINT: &str = "group by agent, session or day";

/// A `--since`/`?since=` date, `YYYY-MM-DD` (the start of that UTC day) or an RFC 3339
/// UTC time `YYYY-MM-DDTHH:MM:SS[.f…]Z`, as the text the store compares its times to:
/// they are stored as `YYYY-MM-DDTHH:MM:SS.mmmZ`, so a time is given its milliseconds
/// (text order is then time order). `None` when it is neither.
pub fn since(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    if !(digits(0..4)
        && b.get(4) == Some(&b'-')
        && digits(5..7)
        && b.get(7) == Some(&b'-')
        && digits(8..10))
    {
        return None;
    }
    let month: u32 = s.get(5..7)?.parse().ok()?;
    let day: u32 = s.get(8..10)?.parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    if b.len() == 10 {
        return Some(s.to_owned());
    }
    let clock = b.get(10) == Some(&b'T')
        && digits(11..13)
        && b.get(13) == Some(&b':')
        && digits(14..16)
        && b.get(16) == Some(&b':')
        && digits(17..19)
        && b.last() == Some(&b'Z');
    let fraction = match b.len() {
        20 => Some(""),
        n if n > 21 && b[19] == b'.' && digits(20..n - 1) => s.get(20..n - 1),
        _ => None,
    };
    let fraction = fraction.filter(|_| clock)?;
    let millis: String = fraction.chars().chain("000".chars()).take(3).collect();
    Some(format!("{}.{millis}Z", &s[..19]))
}

/// One group of a usage report: its key (an agent's name, a session id, a day) and its
/// totals. A session's group also has its title.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageGroup {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(flatten)]
    pub totals: UsageTotals,
}

/// `GET usage`'s answer: the caller's tasks' usage (an admin's: everyone's) since a time,
/// grouped, and all of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageReport {
    pub since: Option<String>,
    pub by: UsageBy,
    pub groups: Vec<UsageGroup>,
    pub total: UsageTotals,
}

#[cfg(test)]
mod tests;
