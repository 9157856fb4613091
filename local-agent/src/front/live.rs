//! A message as it streams: the pieces (`delta` events) a live view has shown, so that
//! when the whole message arrives (the transcript's `text` or `thinking` event) the
//! view shows only what it has not shown yet, and never the message twice.
//!
//! A view that missed a piece (it joined mid-message, or fell behind) shows nothing
//! more of that message until the whole arrives, and then shows it whole.

use serde_json::Value;

/// The message being shown piece by piece.
#[derive(Debug, Default)]
pub struct Live {
    current: Option<Streamed>,
}

#[derive(Debug)]
struct Streamed {
    task: String,
    thought: bool,
    /// The `part` the next piece must have.
    next: u64,
    /// What was shown of it.
    shown: String,
    /// A piece was missed: nothing more is shown until the whole arrives.
    broken: bool,
}

/// A piece to show now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece<'a> {
    pub text: &'a str,
    /// The agent's reasoning, not its words.
    pub thought: bool,
    /// The first piece of a message: a view starts a new line (or a label) for it.
    pub first: bool,
}

/// What a view shows of a whole message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Whole<'a> {
    /// Nothing of it was shown: all of it.
    All,
    /// Its start was shown as pieces: only the rest (possibly empty), then the line
    /// ends.
    Rest(&'a str),
    /// Pieces were shown that are not its start: end the line, then show all of it.
    Again,
}

impl Live {
    /// A `delta` event's payload for `task`: the piece to show, if it continues (or
    /// starts) the message being shown.
    pub fn delta<'a>(&mut self, task: &str, p: &'a Value) -> Option<Piece<'a>> {
        let text = p["text"].as_str()?;
        let thought = p["thought"].as_bool().unwrap_or(false);
        let part = p["part"].as_u64()?;
        if part == 0 {
            self.current = Some(Streamed {
                task: task.to_owned(),
                thought,
                next: 1,
                shown: text.to_owned(),
                broken: false,
            });
            return Some(Piece {
                text,
                thought,
                first: true,
            });
        }
        let s = self.current.as_mut()?;
        if s.broken || s.task != task || s.thought != thought {
            return None;
        }
        if s.next != part {
            s.broken = true;
            return None;
        }
        s.next += 1;
        s.shown.push_str(text);
        Some(Piece {
            text,
            thought,
            first: false,
        })
    }

    /// Whether a message is being shown piece by piece (a view that prints other
    /// lines meanwhile ends its line first).
    pub fn open(&self) -> bool {
        self.current.is_some()
    }

    /// The whole message (`thought` for a `thinking` event) of `task`: what is left to
    /// show of it. Ends the message being streamed.
    pub fn whole<'a>(&mut self, task: &str, thought: bool, text: &'a str) -> Whole<'a> {
        let Some(s) = self.current.take() else {
            return Whole::All;
        };
        if s.task != task || s.thought != thought {
            // Another message's pieces: that one ends unfinished here.
            return Whole::Again;
        }
        match text.strip_prefix(s.shown.as_str()) {
            Some(rest) if !s.broken => Whole::Rest(rest),
            Some(_) | None => Whole::Again,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn piece(text: &str, thought: bool, first: bool) -> Option<Piece<'_>> {
        Some(Piece {
            text,
            thought,
            first,
        })
    }

    #[test]
    fn pieces_then_the_whole_show_the_message_once() {
        let mut live = Live::default();
        let (a, b) = (
            json!({"text": "Hel", "part": 0}),
            json!({"text": "lo", "part": 1}),
        );
        assert_eq!(live.delta("t", &a), piece("Hel", false, true));
        assert_eq!(live.delta("t", &b), piece("lo", false, false));
        assert_eq!(live.whole("t", false, "Hello!"), Whole::Rest("!"));
        // Ended: the next whole message is shown all.
        assert_eq!(live.whole("t", false, "Next."), Whole::All);
    }

    #[test]
    fn a_missed_piece_waits_for_the_whole() {
        let mut live = Live::default();
        // Joined mid-message: nothing shown of it.
        assert_eq!(live.delta("t", &json!({"text": "lo", "part": 1})), None);
        assert_eq!(live.whole("t", false, "Hello"), Whole::All);
        let (a, c, d) = (
            json!({"text": "a ", "part": 0}),
            json!({"text": "c ", "part": 2}),
            json!({"text": "d", "part": 3}),
        );
        assert_eq!(live.delta("t", &a), piece("a ", false, true));
        assert_eq!(live.delta("t", &c), None);
        assert_eq!(live.delta("t", &d), None);
        assert_eq!(live.whole("t", false, "a b c d"), Whole::Again);
    }

    #[test]
    fn thought_and_words_are_two_messages() {
        let mut live = Live::default();
        let t = json!({"text": "hm", "thought": true, "part": 0});
        assert_eq!(live.delta("t", &t), piece("hm", true, true));
        assert_eq!(live.whole("t", true, "hm"), Whole::Rest(""));
        let w = json!({"text": "Done", "part": 0});
        assert_eq!(live.delta("t", &w), piece("Done", false, true));
        // A whole that is not what was shown (another task's, or rewritten).
        assert_eq!(live.whole("u", false, "Done"), Whole::Again);
    }
}
