//! The composer's input line: a small multi-line editor with history.
//!
//! Pure state, no terminal: the screen asks it for its lines and cursor, the key loop
//! feeds it edits. Enter submits, Ctrl-J (or a pasted newline) inserts a line break.

/// The text being composed, the cursor (a char index) and the sent history.
#[derive(Debug, Default)]
pub struct Editor {
    text: Vec<char>,
    cursor: usize,
    history: Vec<String>,
    /// Which history entry is shown while browsing (index into `history`).
    browsing: Option<usize>,
    /// What was being typed before browsing started.
    draft: Vec<char>,
}

impl Editor {
    pub fn text(&self) -> String {
        self.text.iter().collect()
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    pub fn cursor(&self) -> usize {
        self.cursor
    }

    /// Replaces the text and puts the cursor at its end.
    pub fn set(&mut self, text: &str) {
        self.text = text.chars().collect();
        self.cursor = self.text.len();
    }

    pub fn clear(&mut self) {
        self.set("");
        self.browsing = None;
    }

    /// Adds an entry to the history (consecutive duplicates once).
    pub fn remember(&mut self, entry: &str) {
        if entry.trim().is_empty() || self.history.last().map(String::as_str) == Some(entry) {
            return;
        }
        self.history.push(entry.to_owned());
    }

    /// Takes the text for sending: it joins the history and the editor is cleared.
    pub fn submit(&mut self) -> String {
        let text = self.text();
        self.remember(&text);
        self.clear();
        text
    }

    pub fn insert(&mut self, c: char) {
        self.text.insert(self.cursor, c);
        self.cursor += 1;
    }

    /// A paste: line endings normalised, other control characters dropped, tabs kept.
    pub fn insert_str(&mut self, s: &str) {
        let s = s.replace("\r\n", "\n").replace('\r', "\n");
        for c in s.chars() {
            if c == '\n' || c == '\t' || !c.is_control() {
                self.insert(c);
            }
        }
    }

    pub fn backspace(&mut self) {
        if self.cursor > 0 {
            self.cursor -= 1;
            self.text.remove(self.cursor);
        }
    }

    pub fn delete(&mut self) {
        if self.cursor < self.text.len() {
            self.text.remove(self.cursor);
        }
    }

    pub fn left(&mut self) {
        self.cursor = self.cursor.saturating_sub(1);
    }

    pub fn right(&mut self) {
        self.cursor = (self.cursor + 1).min(self.text.len());
    }

    fn line_start(&self) -> usize {
        self.text[..self.cursor]
            .iter()
            .rposition(|c| *c == '\n')
            .map_or(0, |i| i + 1)
    }

    fn line_end(&self) -> usize {
        self.text[self.cursor..]
            .iter()
            .position(|c| *c == '\n')
            .map_or(self.text.len(), |i| self.cursor + i)
    }

    pub fn home(&mut self) {
        self.cursor = self.line_start();
    }

    pub fn end(&mut self) {
        self.cursor = self.line_end();
    }

    /// Ctrl-U: deletes from the start of the line to the cursor.
    pub fn kill_before(&mut self) {
        let start = self.line_start();
        self.text.drain(start..self.cursor);
        self.cursor = start;
    }

    /// Ctrl-K: deletes from the cursor to the end of the line.
    pub fn kill_after(&mut self) {
        let end = self.line_end();
        self.text.drain(self.cursor..end);
    }

    /// Ctrl-W: deletes the word before the cursor (and the blanks after it).
    pub fn kill_word(&mut self) {
        let mut start = self.cursor;
        while start > 0 && self.text[start - 1].is_whitespace() {
            start -= 1;
        }
        while start > 0 && !self.text[start - 1].is_whitespace() {
            start -= 1;
        }
        self.text.drain(start..self.cursor);
        self.cursor = start;
    }

    fn on_first_line(&self) -> bool {
        !self.text[..self.cursor].contains(&'\n')
    }

    fn on_last_line(&self) -> bool {
        !self.text[self.cursor..].contains(&'\n')
    }

    /// Up: the line above, or the previous history entry from the first line.
    pub fn up(&mut self) {
        if !self.on_first_line() {
            let col = self.cursor - self.line_start();
            let prev_end = self.line_start() - 1;
            let prev_start = self.text[..prev_end]
                .iter()
                .rposition(|c| *c == '\n')
                .map_or(0, |i| i + 1);
            self.cursor = (prev_start + col).min(prev_end);
            return;
        }
        let next = match self.browsing {
            None if self.history.is_empty() => return,
            None => {
                self.draft = self.text.clone();
                self.history.len() - 1
            }
            Some(0) => return,
            Some(i) => i - 1,
        };
        self.browsing = Some(next);
        let entry = self.history[next].clone();
        self.set(&entry);
    }

    /// Down: the line below, or the next history entry (then the draft) from the last
    /// line.
    pub fn down(&mut self) {
        if !self.on_last_line() {
            let col = self.cursor - self.line_start();
            let next_start = self.line_end() + 1;
            let next_end = self.text[next_start..]
                .iter()
                .position(|c| *c == '\n')
                .map_or(self.text.len(), |i| next_start + i);
            self.cursor = (next_start + col).min(next_end);
            return;
        }
        match self.browsing {
            None => {}
            Some(i) if i + 1 < self.history.len() => {
                self.browsing = Some(i + 1);
                let entry = self.history[i + 1].clone();
                self.set(&entry);
            }
            Some(_) => {
                self.browsing = None;
                let draft: String = std::mem::take(&mut self.draft).into_iter().collect();
                self.set(&draft);
            }
        }
    }

    /// The text before the cursor on its line (what completion looks at).
    pub fn before_cursor(&self) -> String {
        self.text[..self.cursor].iter().collect()
    }

    /// Replaces the `len` chars before the cursor with `with`.
    pub fn replace_before(&mut self, len: usize, with: &str) {
        let start = self.cursor.saturating_sub(len);
        self.text.drain(start..self.cursor);
        self.cursor = start;
        for c in with.chars() {
            self.insert(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Editor;

    fn typed(s: &str) -> Editor {
        let mut e = Editor::default();
        for c in s.chars() {
            e.insert(c);
        }
        e
    }

    #[test]
    fn editing_moves_and_kills() {
        let mut e = typed("hello world");
        e.kill_word();
        assert_eq!(e.text(), "hello ");
        e.home();
        e.insert('>');
        assert_eq!((e.text().as_str(), e.cursor()), (">hello ", 1));
        e.end();
        e.backspace();
        e.left();
        e.left();
        e.kill_after();
        assert_eq!(e.text(), ">hel");
        e.kill_before();
        assert_eq!((e.text().as_str(), e.cursor()), ("", 0));
        e.delete();
        e.backspace();
        assert!(e.is_empty());
    }

    #[test]
    fn history_browses_and_keeps_the_draft() {
        let mut e = typed("first");
        assert_eq!(e.submit(), "first");
        e.set("second");
        e.submit();
        e.set("second");
        e.submit();
        e.set("draft");
        e.up();
        assert_eq!(e.text(), "second");
        e.up();
        assert_eq!(e.text(), "first");
        e.up();
        assert_eq!(e.text(), "first", "the oldest entry stays");
        e.down();
        e.down();
        assert_eq!(e.text(), "draft");
    }

    #[test]
    fn multi_line_text_moves_by_line_before_history() {
        let mut e = Editor::default();
        e.remember("old");
        e.insert_str("ab\r\ncdef\u{1b}[31m");
        assert_eq!(
            e.text(),
            "ab\ncdef[31m",
            "paste keeps newlines, drops controls"
        );
        e.set("ab\ncdef");
        e.up();
        assert_eq!(e.cursor(), 2, "column 4 is past the end of `ab`");
        e.up();
        assert_eq!(e.text(), "old");
        e.set("ab\ncd");
        e.home();
        e.up();
        e.down();
        e.end();
        assert_eq!(e.before_cursor(), "ab\ncd");
        e.replace_before(2, "xyz");
        assert_eq!(e.text(), "ab\nxyz");
    }
}
