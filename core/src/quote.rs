//! Quoting user-supplied text inside messages.
//!
//! Messages name the offending path or key in quotes. `{:?}` would do, but it doubles
//! every backslash of a Windows path (`"C:\\Users"`) and pulls Unicode printability
//! tables into the browser bundle; this writes the text as typed, escaping only what
//! could break a terminal line or the quoting itself.

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

fn write_char(f: &mut fmt::Formatter<'_>, c: char, quote: char) -> fmt::Result {
    if c == quote {
        write!(f, "\\{c}")
    } else if is_control(c) {
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
    }
}
