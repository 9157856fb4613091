//! Quoting user-supplied text inside messages.
//!
//! Messages name the offending path or key in quotes. `{:?}` would do, but it doubles
//! every backslash of a Windows path (`"C:\\Users"`) and pulls Unicode printability
//! tables into the browser bundle; this writes the text as typed, escaping only what
//! could break a terminal line or the quoting itself.

use std::borrow::Cow;
use std::fmt;

/// `"text"`, with `"` and control characters escaped.
#[derive(Debug, Clone, Copy)]
pub struct Quoted<'a>(pub &'a str);

/// Quotes `s` for a message.
pub fn q(s: &str) -> Quoted<'_> {
    Quoted(s)
}

/// `s` as one word of a POSIX shell command line, for hints the user can paste: as
/// it is when it holds nothing the shell would read, else in single quotes. A leading
/// `~/` stays outside the quotes, so the shell still expands it.
pub fn shell_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_./+-,:@%=".contains(c);
    let (prefix, rest) = match s.strip_prefix("~/") {
        Some(rest) => ("~/", rest),
        None if s == "~" => return s.to_owned(),
        None => ("", s),
    };
    if !rest.is_empty() && rest.chars().all(plain) {
        return s.to_owned();
    }
    format!("{prefix}'{}'", rest.replace('\'', "'\\''"))
}

fn is_control(c: char) -> bool {
    let n = c as u32;
    n < 0x20 || (0x7f..=0x9f).contains(&n)
}

/// Whether `c` can move the cursor, recolour or rewrite what a terminal shows, or hide or
/// reorder how the text around it reads: every control character (C0, DEL, C1), the
/// bidirectional marks, embeddings, overrides and isolates (U+061C, U+200E, U+200F,
/// U+202A–U+202E, U+2066–U+2069: the "Trojan Source" characters), the line and paragraph
/// separators (U+2028, U+2029), and the invisible format characters that hide text
/// (U+200B, U+2060–U+2064, U+FEFF, the interlinear annotations U+FFF9–U+FFFB). The
/// joiners U+200C and U+200D stay: scripts and emoji need them, and they move nothing.
pub fn is_unsafe_char(c: char) -> bool {
    is_control(c)
        || matches!(
            c,
            '\u{061c}'
                | '\u{200b}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{2069}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
        )
}

/// Escapes what a terminal would act on in one line of untrusted text (a path, a name,
/// a title, an agent's words): `\n`, `\t`, `\r`, and `\x1b` or `\u{202e}` for every
/// other [unsafe character](is_unsafe_char), so a directory named with an escape
/// sequence prints as its name, never as the sequence, and a right-to-left override
/// shows as itself instead of reversing what follows. A backslash stays as it is; text
/// with nothing to escape is borrowed.
pub fn escape(text: &str) -> Cow<'_, str> {
    escape_but(text, &[])
}

/// [`escape`], keeping the newlines of a message of several lines.
pub fn escape_lines(text: &str) -> Cow<'_, str> {
    escape_but(text, &['\n'])
}

/// [`escape`], keeping newlines and tabs: for text of several lines laid out by its
/// author (an agent's reply, a title shown in a list).
pub fn escape_text(text: &str) -> Cow<'_, str> {
    escape_but(text, &['\n', '\t'])
}

fn escape_but<'a>(text: &'a str, keep: &[char]) -> Cow<'a, str> {
    let unsafe_here = |c: char| !keep.contains(&c) && is_unsafe_char(c);
    if !text.chars().any(unsafe_here) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !unsafe_here(c) => out.push(c),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x100 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

fn write_char(f: &mut fmt::Formatter<'_>, c: char, quote: char) -> fmt::Result {
    if c == quote {
        write!(f, "\\{c}")
    } else if is_unsafe_char(c) {
        write!(f, "\\u{{{:x}}}", c as u32)
    } else {
        write!(f, "{c}")
    }
}

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        for c in self.0.chars() {
            write_char(f, c, '"')?;
        }
        f.write_str("\"")
    }
}

/// `'c'`, escaped like [`Quoted`].
#[derive(Debug, Clone, Copy)]
pub struct QuotedChar(pub char);

impl fmt::Display for QuotedChar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("'")?;
        write_char(f, self.0, '\'')?;
        f.write_str("'")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words() {
        let cases = [
            ("~/code/app", "~/code/app"),
            ("/srv/app-1", "/srv/app-1"),
            ("~/my app", "~/'my app'"),
            ("/it's", "'/it'\\''s'"),
            ("~", "~"),
            ("", "''"),
            ("/a;rm -rf", "'/a;rm -rf'"),
        ];
        for (input, want) in cases {
            assert_eq!(shell_word(input), want, "{input}");
        }
    }

    #[test]
    fn quoting() {
        assert_eq!(q("C:\\Users\\x").to_string(), "\"C:\\Users\\x\"");
        assert_eq!(q("a\"b\nc").to_string(), "\"a\\\"b\\u{a}c\"");
        assert_eq!(QuotedChar('|').to_string(), "'|'");
        assert_eq!(QuotedChar('\u{1}').to_string(), "'\\u{1}'");
        assert_eq!(q("a\u{202e}b").to_string(), "\"a\\u{202e}b\"");
    }

    #[test]
    fn terminal_escapes() {
        let hostile = "t\u{1b}[2J\u{9b}1m\u{7}\u{202e}\u{2067}\u{200f}\u{61c}\u{feff}\u{200b}x";
        assert_eq!(
            escape(hostile),
            "t\\x1b[2J\\x9b1m\\x07\\u{202e}\\u{2067}\\u{200f}\\u{61c}\\u{feff}\\u{200b}x"
        );
        assert_eq!(escape("a\nb\tc\r"), "a\\nb\\tc\\r");
        assert_eq!(escape_lines("a\nb\tc"), "a\nb\\tc");
        assert_eq!(escape_text("a\nb\tc\u{202d}"), "a\nb\tc\\u{202d}");
        // Nothing to escape: borrowed, and joiners, accents, emoji as they are.
        let plain = "caf\u{e9} \u{1f468}\u{200d}\u{1f4bb} C:\\x";
        assert!(matches!(escape(plain), Cow::Borrowed(_)));
    }
}
