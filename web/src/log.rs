//! Diagnostics on standard error: what the server records with `tracing` (the
//! scheduler retrying while the database is away, a daemon going offline, a replica
//! taking over as leader), one line each, at the level `BERTH_LOG` names.
//!
//! A subscriber of Berth's own, a few dozen lines: `tracing-subscriber` would bring a
//! formatting and filtering framework (and, for its environment filter, a regex
//! engine) for what is a level and a line here.

use std::fmt::Write as _;
use std::io::Write as _;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// The variable that sets the level: `error`, `warn`, `info`, `debug`, `trace` or
/// `off`.
pub const LOG_VAR: &str = "BERTH_LOG";

/// The variable that sets the format: `text` (the default) or `json` (one object a
/// line: `time`, `level`, `target`, `message`, `fields`), for log collectors.
pub const FORMAT_VAR: &str = "BERTH_LOG_FORMAT";

/// How each event is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// Why `BERTH_LOG` or `BERTH_LOG_FORMAT` was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogSetting {
    #[error(transparent)]
    Level(#[from] BadLevel),
    #[error("{FORMAT_VAR}={given:?} is not a format")]
    Format { given: String },
}

impl LogSetting {
    pub fn hint(&self) -> &'static str {
        match self {
            LogSetting::Level(b) => b.hint(),
            LogSetting::Format { .. } => "use text or json",
        }
    }
}

/// The level and format the variables name (`default` and text when unset).
///
/// # Errors
/// A variable holds something else.
pub fn settings_from_env(default: LevelFilter) -> Result<(LevelFilter, Format), LogSetting> {
    let level = level_from_env(default)?;
    let format = parse_format(std::env::var(FORMAT_VAR).ok().as_deref())?;
    Ok((level, format))
}

fn parse_format(v: Option<&str>) -> Result<Format, LogSetting> {
    Ok(match v.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("" | "text") => Format::Text,
        Some("json") => Format::Json,
        Some(_) => {
            return Err(LogSetting::Format {
                given: v.unwrap_or_default().to_owned(),
            });
        }
    })
}

/// Why `BERTH_LOG` was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{LOG_VAR}={given:?} is not a level")]
pub struct BadLevel {
    pub given: String,
}

impl BadLevel {
    pub fn hint(&self) -> &'static str {
        "use one of error, warn, info, debug, trace or off"
    }
}

/// The level `BERTH_LOG` names, or `default` when it is unset or empty.
///
/// # Errors
/// The variable holds something else.
pub fn level_from_env(default: LevelFilter) -> Result<LevelFilter, BadLevel> {
    match std::env::var(LOG_VAR) {
        Ok(v) if !v.trim().is_empty() => parse_level(&v),
        _ => Ok(default),
    }
}

fn parse_level(v: &str) -> Result<LevelFilter, BadLevel> {
    Ok(match v.trim().to_ascii_lowercase().as_str() {
        "off" => LevelFilter::OFF,
        "error" => LevelFilter::ERROR,
        "warn" | "warning" => LevelFilter::WARN,
        "info" => LevelFilter::INFO,
        "debug" => LevelFilter::DEBUG,
        "trace" => LevelFilter::TRACE,
        _ => {
            return Err(BadLevel {
                given: v.to_owned(),
            });
        }
    })
}

/// Sends every event at `level` or more severe to standard error, for the rest of the
/// process. Does nothing if a subscriber is already set (a test harness's, say).
pub fn init(level: LevelFilter, format: Format) {
    if level == LevelFilter::OFF {
        return;
    }
    let log = LineLog {
        level,
        format,
        sink: Box::new(|line| {
            // One write per line, so that lines from several threads never interleave.
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }),
    };
    let _ = tracing::subscriber::set_global_default(log);
}

/// One line per event: time, level, where it comes from, its message and fields.
struct LineLog {
    level: LevelFilter,
    format: Format,
    sink: Box<dyn Fn(&str) + Send + Sync>,
}

impl Subscriber for LineLog {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= self.level
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.level)
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        // Spans carry nothing that is printed: one id serves them all.
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let meta = event.metadata();
        if self.format == Format::Json {
            let mut fields = Fields::default();
            event.record(&mut fields);
            let doc = serde_json::json!({
                "time": crate::clock::now(),
                "level": meta.level().as_str(),
                "target": meta.target(),
                "message": fields.message,
                "fields": fields.fields,
            });
            (self.sink)(&format!("{doc}\n"));
            return;
        }
        let mut line = format!(
            "{} {} {}:",
            crate::clock::now(),
            meta.level(),
            meta.target()
        );
        event.record(&mut Line(&mut line));
        line.push('\n');
        (self.sink)(&line);
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// An event's message and fields, as JSON values (numbers and booleans as such).
#[derive(Default)]
struct Fields {
    message: String,
    fields: serde_json::Map<String, serde_json::Value>,
}

impl Fields {
    fn put(&mut self, field: &Field, value: serde_json::Value) {
        if field.name() == "message" {
            self.message = match value.as_str() {
                Some(s) => s.to_owned(),
                None => value.to_string(),
            };
        } else {
            self.fields.insert(field.name().to_owned(), value);
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
}

/// Appends an event's fields: the message as it is, the others as `name=value`.
struct Line<'a>(&'a mut String);

impl Visit for Line<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, " {value:?}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_and_anything_else_is_refused() {
        assert_eq!(parse_level("WARN"), Ok(LevelFilter::WARN));
        assert_eq!(parse_level(" info "), Ok(LevelFilter::INFO));
        assert_eq!(parse_level("off"), Ok(LevelFilter::OFF));
        let bad = parse_level("loud").unwrap_err();
        assert_eq!(bad.to_string(), "BERTH_LOG=\"loud\" is not a level");
    }

    #[test]
    fn an_event_is_one_line_with_its_fields_at_its_level_or_above() {
        use std::sync::{Arc, Mutex};
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let seen = lines.clone();
        let log = LineLog {
            level: LevelFilter::INFO,
            format: Format::Text,
            sink: Box::new(move |l| seen.lock().unwrap().push(l.to_owned())),
        };
        tracing::subscriber::with_default(log, || {
            tracing::warn!(task = %"t1", tries = 3, "could not record events");
            tracing::info!(why = "the leader left", "taking over");
            tracing::debug!("not at this level");
        });
        let lines = lines.lock().unwrap();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].ends_with(
                " WARN berth_web::log::tests: could not record events task=t1 tries=3\n"
            ),
            "{:?}",
            lines[0]
        );
        assert!(
            lines[1]
                .ends_with(" INFO berth_web::log::tests: taking over why=\"the leader left\"\n"),
            "{:?}",
            lines[1]
        );
    }

    #[test]
    fn json_lines_are_one_object_each_with_typed_fields() {
        use std::sync::{Arc, Mutex};
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let seen = lines.clone();
        let log = LineLog {
            level: LevelFilter::INFO,
            format: Format::Json,
            sink: Box::new(move |l| seen.lock().unwrap().push(l.to_owned())),
        };
        tracing::subscriber::with_default(log, || {
            tracing::warn!(task = %"t1", tries = 3, ok = false, "could not record \"events\"\nagain");
            tracing::debug!("not at this level");
        });
        let lines = lines.lock().unwrap();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].ends_with('\n') && lines[0].matches('\n').count() == 1);
        let doc: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(doc["level"], "WARN");
        assert_eq!(doc["target"], "berth_web::log::tests");
        assert_eq!(doc["message"], "could not record \"events\"\nagain");
        assert_eq!(
            doc["fields"],
            serde_json::json!({"task": "t1", "tries": 3, "ok": false})
        );
        assert!(doc["time"].as_str().unwrap().ends_with('Z'), "{doc}");
    }

    #[test]
    fn the_format_is_text_or_json_and_anything_else_is_refused() {
        assert_eq!(parse_format(None), Ok(Format::Text));
        assert_eq!(parse_format(Some("")), Ok(Format::Text));
        assert_eq!(parse_format(Some("json")), Ok(Format::Json));
        assert_eq!(parse_format(Some(" JSON ")), Ok(Format::Json));
        let bad = parse_format(Some("yaml")).unwrap_err();
        assert_eq!(bad.to_string(), "BERTH_LOG_FORMAT=\"yaml\" is not a format");
        assert_eq!(bad.hint(), "use text or json");
    }
}
