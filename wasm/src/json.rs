//! A minimal JSON writer and reader for the bundle.
//!
//! `serde_json` (its deserializer in particular, with the float formatting its error
//! messages pull in) doubled the bundle; the exports' shapes are few and fixed, so
//! they are written and read here directly. Reading reuses `jsonc-parser`, which the
//! settings check links anyway.

use jsonc_parser::ast::Value;
use jsonc_parser::{CollectOptions, ParseOptions, parse_to_ast};

/// Builds one JSON object, field by field.
#[derive(Debug, Default)]
pub struct Obj {
    out: String,
}

impl Obj {
    pub fn new() -> Obj {
        Obj {
            out: String::from("{"),
        }
    }

    fn key(&mut self, k: &str) {
        if self.out.len() > 1 {
            self.out.push(',');
        }
        push_str(&mut self.out, k);
        self.out.push(':');
    }

    pub fn str(mut self, k: &str, v: &str) -> Obj {
        self.key(k);
        push_str(&mut self.out, v);
        self
    }

    pub fn opt_str(self, k: &str, v: Option<&str>) -> Obj {
        match v {
            Some(v) => self.str(k, v),
            None => self.raw(k, "null"),
        }
    }

    pub fn bool(self, k: &str, v: bool) -> Obj {
        self.raw(k, if v { "true" } else { "false" })
    }

    pub fn num(self, k: &str, v: usize) -> Obj {
        let text = v.to_string();
        self.raw(k, &text)
    }

    /// A field whose value is already JSON.
    pub fn raw(mut self, k: &str, json: &str) -> Obj {
        self.key(k);
        self.out.push_str(json);
        self
    }

    pub fn end(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

/// A JSON array of already-encoded items.
pub fn array(items: impl IntoIterator<Item = String>) -> String {
    let mut out = String::from("[");
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&item);
    }
    out.push(']');
    out
}

/// Appends `s` as a JSON string literal.
pub fn push_str(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                out.push_str("\\u00");
                out.push(HEX[(c as usize) >> 4] as char);
                out.push(HEX[(c as usize) & 15] as char);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `{"error": {"code": "bad_request", "message": ...}}`.
pub fn bad_request(message: &str) -> String {
    Obj::new()
        .raw(
            "error",
            &Obj::new()
                .str("code", "bad_request")
                .str("message", message)
                .end(),
        )
        .end()
}

/// Parses strict-enough JSON (comments and trailing commas tolerated).
pub fn parse(text: &str) -> Result<Value<'_>, String> {
    match parse_to_ast(text, &CollectOptions::default(), &ParseOptions::default()) {
        Ok(parsed) => parsed
            .value
            .ok_or_else(|| String::from("the input is empty")),
        Err(e) => Err(e.to_string()),
    }
}
