//! The full-screen composer: raw mode on the alternate screen, redrawn from the
//! [`View`] and the [`Editor`] on every change (and every resize).
//!
//! Three sources feed one loop: the terminal's keys, pastes and resizes (read on a
//! thread of their own), the session's event stream (a task that reconnects and
//! resumes after the last `seq`), and a one-second tick that reads the session again,
//! so a binding changed elsewhere or a machine gone offline shows within a second.

use super::editor::Editor;
use super::slash::{self, Slash};
use super::view::{Line, Style, Tone, View};
use super::{Chat, Said, error_lines};
use crate::cli::client::{Client, SseEvent};
use crate::cli::error::CliError;
use crossterm::cursor::{Hide, MoveTo, Show};
use crossterm::event::{
    DisableBracketedPaste, EnableBracketedPaste, Event, KeyCode, KeyEvent, KeyEventKind,
    KeyModifiers,
};
use crossterm::style::{
    Attribute, Color, Print, ResetColor, SetAttribute, SetBackgroundColor, SetForegroundColor,
};
use crossterm::terminal::{self, Clear, ClearType, EnterAlternateScreen, LeaveAlternateScreen};
use crossterm::{execute, queue};
use std::io::Write;
use std::time::Duration;
use tokio::sync::mpsc;
use unicode_width::UnicodeWidthChar;

/// What wakes the loop.
#[derive(Debug)]
enum Input {
    Term(Event),
    Sse(SseEvent),
    /// The stream broke (the server stopped?); it reconnects by itself.
    Lost(String),
    Connected,
}

/// Raw mode and the alternate screen, undone on drop (an error or a panic included).
#[derive(Debug)]
struct Terminal;

impl Terminal {
    fn enter() -> Result<Terminal, CliError> {
        terminal::enable_raw_mode().map_err(|e| {
            CliError::new(
                format!("cannot put the terminal in raw mode: {e}"),
                "run berth chat --line for the plain line mode",
            )
        })?;
        let t = Terminal;
        execute!(
            std::io::stdout(),
            EnterAlternateScreen,
            EnableBracketedPaste,
            Clear(ClearType::All)
        )
        .map_err(|e| CliError::new(format!("cannot draw on the terminal: {e}"), "try --line"))?;
        Ok(t)
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = execute!(
            std::io::stdout(),
            DisableBracketedPaste,
            ResetColor,
            Show,
            LeaveAlternateScreen
        );
        let _ = terminal::disable_raw_mode();
    }
}

/// The keyboard thread: blocking reads forwarded to the loop. It ends with the process.
fn read_terminal(tx: mpsc::UnboundedSender<Input>) {
    std::thread::spawn(move || {
        while let Ok(ev) = crossterm::event::read() {
            if tx.send(Input::Term(ev)).is_err() {
                break;
            }
        }
    });
}

/// Follows the session's events from `after`, reconnecting after a break.
fn follow(
    client: Client,
    session: String,
    mut after: i64,
    tx: mpsc::UnboundedSender<Input>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            match client.events(&session, Some(after)).await {
                Ok(mut stream) => {
                    let _ = tx.send(Input::Connected);
                    loop {
                        match stream.next().await {
                            Ok(Some(ev)) => {
                                if let Some(seq) = ev.id.as_deref().and_then(|i| i.parse().ok()) {
                                    after = seq;
                                }
                                if tx.send(Input::Sse(ev)).is_err() {
                                    return;
                                }
                            }
                            Ok(None) => {
                                let _ = tx.send(Input::Lost(String::from(
                                    "the server closed the event stream",
                                )));
                                break;
                            }
                            Err(e) => {
                                let _ = tx.send(Input::Lost(e.message));
                                break;
                            }
                        }
                    }
                }
                Err(e) => {
                    if tx.send(Input::Lost(e.message)).is_err() {
                        return;
                    }
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

/// The loop's own state beside the view.
#[derive(Debug, Default)]
struct Ui {
    editor: Editor,
    /// The status line: a note for the user until the next key.
    status: Option<(Style, String)>,
    /// Ctrl-C was pressed once on an idle, empty prompt.
    quit_armed: bool,
    /// Rows scrolled up from the bottom of the transcript.
    scroll: usize,
    /// The event stream is down (the reason).
    offline: Option<String>,
    quit: bool,
}

pub async fn run(chat: &mut Chat) -> Result<u8, CliError> {
    let _terminal = Terminal::enter()?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    read_terminal(tx.clone());
    let mut stream = follow(chat.client.clone(), chat.view.id(), 0, tx.clone());
    let mut ui = Ui::default();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut size = terminal::size().unwrap_or((80, 24));
    loop {
        draw(&chat.view, &ui, size);
        if ui.quit {
            break;
        }
        tokio::select! {
            input = rx.recv() => {
                let Some(input) = input else { break };
                match input {
                    Input::Term(Event::Resize(w, h)) => {
                        size = (w, h);
                        let _ = execute!(std::io::stdout(), Clear(ClearType::All));
                    }
                    Input::Term(Event::Paste(text)) => {
                        ui.quit_armed = false;
                        ui.editor.insert_str(&text);
                    }
                    Input::Term(Event::Key(key)) if key.kind != KeyEventKind::Release => {
                        let before = chat.view.id();
                        key_press(chat, &mut ui, key).await;
                        if chat.view.id() != before {
                            // `/new`: follow the new session's stream instead.
                            stream.abort();
                            stream = follow(chat.client.clone(), chat.view.id(), 0, tx.clone());
                        }
                    }
                    Input::Term(_) => {}
                    Input::Sse(ev) => {
                        let Ok(data) = serde_json::from_str::<serde_json::Value>(&ev.data) else {
                            continue;
                        };
                        if ev.event == "message"
                            && data["payload"]["origin"] == "desktop"
                            && let Some(t) = data["payload"]["text"].as_str()
                        {
                            ui.editor.remember(t);
                        }
                        if chat.view.event(&ev.event, &data) {
                            let _ = chat.refresh().await;
                        }
                    }
                    Input::Lost(why) => ui.offline = Some(why),
                    Input::Connected => {
                        ui.offline = None;
                        let _ = chat.refresh().await;
                    }
                }
            }
            _ = tick.tick() => {
                if let Err(e) = chat.refresh().await {
                    ui.offline = Some(e.message);
                }
            }
        }
    }
    stream.abort();
    Ok(0)
}

fn say(chat: &mut Chat, said: Said) {
    for (style, text) in said {
        chat.view.push(style, text);
    }
}

async fn key_press(chat: &mut Chat, ui: &mut Ui, key: KeyEvent) {
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    let alt = key.modifiers.contains(KeyModifiers::ALT);
    let is_ctrl_c = ctrl && matches!(key.code, KeyCode::Char('c'));
    if !is_ctrl_c {
        ui.quit_armed = false;
    }
    ui.status = None;
    // A request waits and nothing is being typed: y / n / a / d answer it.
    if !ctrl && !alt && ui.editor.is_empty() && !chat.view.pending.is_empty() {
        let answer = match key.code.as_char() {
            Some('y') => Some((true, false)),
            Some('n') => Some((false, false)),
            Some('a') => Some((true, true)),
            Some('d') => {
                if let Some(a) = chat.view.pending.first().cloned() {
                    for line in View::details(&a) {
                        chat.view.push(Style::Dim, line);
                    }
                }
                return;
            }
            Some(_) | None => None,
        };
        if let Some((allow, always)) = answer {
            match chat.answer(allow, always).await {
                Ok(said) => say(chat, said),
                Err(e) => say(chat, error_lines(&e)),
            }
            return;
        }
    }
    match key.code {
        KeyCode::Char('c') if ctrl => {
            if chat.view.running().is_some() {
                match chat.cancel().await {
                    Ok(said) => say(chat, said),
                    Err(e) => say(chat, error_lines(&e)),
                }
            } else if !ui.editor.is_empty() {
                ui.editor.clear();
            } else if ui.quit_armed {
                ui.quit = true;
            } else {
                ui.quit_armed = true;
                ui.status = Some((
                    Style::Alert,
                    String::from(
                        "press Ctrl-C again to quit (the session stays; berth chat ID returns to it)",
                    ),
                ));
            }
        }
        KeyCode::Char('d') if ctrl => {
            if ui.editor.is_empty() {
                ui.quit = true;
            } else {
                ui.editor.delete();
            }
        }
        KeyCode::Char('j') if ctrl => ui.editor.insert('\n'),
        KeyCode::Enter if alt || key.modifiers.contains(KeyModifiers::SHIFT) => {
            ui.editor.insert('\n');
        }
        KeyCode::Enter => submit(chat, ui).await,
        KeyCode::Char('a') if ctrl => ui.editor.home(),
        KeyCode::Char('e') if ctrl => ui.editor.end(),
        KeyCode::Char('u') if ctrl => ui.editor.kill_before(),
        KeyCode::Char('k') if ctrl => ui.editor.kill_after(),
        KeyCode::Char('w') if ctrl => ui.editor.kill_word(),
        KeyCode::Char('l') if ctrl => {
            let _ = execute!(std::io::stdout(), Clear(ClearType::All));
        }
        KeyCode::Char(c) if !ctrl && !alt => ui.editor.insert(c),
        KeyCode::Backspace => ui.editor.backspace(),
        KeyCode::Delete => ui.editor.delete(),
        KeyCode::Left => ui.editor.left(),
        KeyCode::Right => ui.editor.right(),
        KeyCode::Home => ui.editor.home(),
        KeyCode::End => ui.editor.end(),
        KeyCode::Up => ui.editor.up(),
        KeyCode::Down => ui.editor.down(),
        KeyCode::PageUp => ui.scroll += 10,
        KeyCode::PageDown => ui.scroll = ui.scroll.saturating_sub(10),
        KeyCode::Tab => {
            let c = slash::complete(&ui.editor.before_cursor(), &chat.cwd, &chat.home);
            if let Some(ins) = c.insertion() {
                ui.editor.replace_before(c.replace, &ins);
            }
            if c.candidates.len() > 1 {
                ui.status = Some((Style::Info, c.candidates.join("  ")));
            } else if c.candidates.is_empty() {
                ui.status = Some((Style::Dim, String::from("no completion")));
            }
        }
        KeyCode::Esc => ui.scroll = 0,
        // Keys the composer does not use (and control chords it does not bind).
        KeyCode::Char(_)
        | KeyCode::BackTab
        | KeyCode::Insert
        | KeyCode::F(_)
        | KeyCode::Null
        | KeyCode::CapsLock
        | KeyCode::ScrollLock
        | KeyCode::NumLock
        | KeyCode::PrintScreen
        | KeyCode::Pause
        | KeyCode::Menu
        | KeyCode::KeypadBegin
        | KeyCode::Media(_)
        | KeyCode::Modifier(_) => {}
    }
}

async fn submit(chat: &mut Chat, ui: &mut Ui) {
    let text = ui.editor.submit();
    if text.trim().is_empty() {
        return;
    }
    ui.scroll = 0;
    match slash::parse(&text) {
        Some(Ok(Slash::Quit)) => ui.quit = true,
        Some(Ok(cmd)) => {
            chat.view.push(Style::You, format!("› {}", text.trim()));
            match chat.command(cmd).await {
                Ok(said) => say(chat, said),
                Err(e) => say(chat, error_lines(&e)),
            }
        }
        Some(Err(why)) => say(chat, vec![(Style::Alert, why)]),
        None => {
            if let Err(e) = chat.send(slash::message_text(&text)).await {
                say(chat, error_lines(&e));
            }
        }
    }
}

/// The display width of a char (0 for the controls `inert` leaves: tabs show as one).
fn width(c: char) -> usize {
    if c == '\t' { 1 } else { c.width().unwrap_or(0) }
}

/// Word-wraps one line to `cols` columns.
fn wrap(text: &str, cols: usize) -> Vec<String> {
    let cols = cols.max(1);
    let mut out = Vec::new();
    let mut line = String::new();
    let mut used = 0;
    let mut last_space: Option<(usize, usize)> = None;
    for c in text.chars() {
        let c = if c == '\t' { ' ' } else { c };
        let w = width(c);
        if used + w > cols {
            match last_space {
                Some((byte, at)) if at > 0 => {
                    let rest = line[byte + 1..].to_owned();
                    line.truncate(byte);
                    out.push(std::mem::take(&mut line));
                    used = rest.chars().map(width).sum();
                    line = rest;
                }
                _ => {
                    out.push(std::mem::take(&mut line));
                    used = 0;
                }
            }
            last_space = None;
        }
        if c == ' ' {
            last_space = Some((line.len(), used));
        }
        line.push(c);
        used += w;
    }
    out.push(line);
    out
}

/// Cuts `text` to `cols` columns, with `…` when it was longer.
fn fit(text: &str, cols: usize) -> String {
    let total: usize = text.chars().map(width).sum();
    if total <= cols {
        return text.to_owned();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = width(c);
        if used + w + 1 > cols {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    out
}

/// The editor's rows (prompt included) and the cursor's (row, column) among them.
fn input_rows(editor: &Editor, cols: usize) -> (Vec<String>, (usize, usize)) {
    let cols = cols.max(4);
    let mut rows = vec![String::from("› ")];
    let mut used = 2;
    let mut cursor = (0, 2);
    let text: Vec<char> = editor.text().chars().collect();
    for (i, c) in text.iter().enumerate() {
        if i == editor.cursor() {
            cursor = (rows.len() - 1, used);
        }
        if *c == '\n' {
            rows.push(String::from("  "));
            used = 2;
            continue;
        }
        let w = width(*c);
        if used + w > cols {
            rows.push(String::from("  "));
            used = 2;
        }
        if let Some(last) = rows.last_mut() {
            last.push(*c);
        }
        used += w;
    }
    if editor.cursor() >= text.len() {
        if used >= cols {
            rows.push(String::from("  "));
            used = 2;
        }
        cursor = (rows.len() - 1, used);
    }
    (rows, cursor)
}

fn tone_colors(tone: Tone) -> (Color, Color) {
    match tone {
        Tone::Bound => (Color::White, Color::DarkBlue),
        Tone::Unbound => (Color::White, Color::DarkGrey),
        Tone::Waiting => (Color::Black, Color::DarkYellow),
        Tone::Offline => (Color::White, Color::DarkMagenta),
        Tone::Problem => (Color::White, Color::DarkRed),
        Tone::Relinked => (Color::Black, Color::DarkCyan),
    }
}

fn style_of(out: &mut Vec<u8>, style: Style) {
    let _ = match style {
        Style::Plain => Ok(()),
        Style::You => queue!(out, SetAttribute(Attribute::Bold)),
        Style::Dim => queue!(out, SetAttribute(Attribute::Dim)),
        Style::Alert => queue!(out, SetForegroundColor(Color::Yellow)),
        Style::Denied => queue!(
            out,
            SetAttribute(Attribute::Bold),
            SetForegroundColor(Color::Red)
        ),
        Style::Info => queue!(out, SetForegroundColor(Color::Cyan)),
        Style::Added => queue!(out, SetForegroundColor(Color::Green)),
        Style::Removed => queue!(out, SetForegroundColor(Color::Red)),
    };
}

/// One row: moved to, styled, cut to the width, the rest of the row cleared.
fn row(out: &mut Vec<u8>, y: u16, cols: usize, style: Style, text: &str) {
    let _ = queue!(out, MoveTo(0, y));
    style_of(out, style);
    let _ = queue!(
        out,
        Print(fit(text, cols)),
        SetAttribute(Attribute::Reset),
        ResetColor,
        Clear(ClearType::UntilNewLine)
    );
}

fn draw(view: &View, ui: &Ui, (w, h): (u16, u16)) {
    let cols = usize::from(w);
    let mut out: Vec<u8> = Vec::with_capacity(8192);
    let _ = queue!(out, Hide);
    if w < 20 || h < 8 {
        let _ = queue!(out, Clear(ClearType::All));
        row(
            &mut out,
            0,
            cols,
            Style::Alert,
            "berth chat: the terminal is too small",
        );
        let _ = std::io::stdout().write_all(&out);
        let _ = std::io::stdout().flush();
        return;
    }
    // The header, in its tone's colours, padded across the row.
    let (fg, bg) = tone_colors(view.tone());
    let mut header = view.header();
    if let Some(why) = &ui.offline {
        header[2] = format!("not connected: {why} (retrying)");
    }
    for (y, text) in header.iter().enumerate() {
        let text = fit(text, cols);
        let pad = cols.saturating_sub(text.chars().map(width).sum());
        let _ = queue!(
            out,
            MoveTo(0, y as u16),
            SetForegroundColor(fg),
            SetBackgroundColor(bg),
        );
        if y == 1 {
            let _ = queue!(out, SetAttribute(Attribute::Bold));
        }
        let _ = queue!(
            out,
            Print(text),
            Print(" ".repeat(pad)),
            SetAttribute(Attribute::Reset),
            ResetColor
        );
    }
    let header_rows = header.len();
    // The input, at most a quarter of the screen, showing the cursor's rows.
    let (rows, (cy, cx)) = input_rows(&ui.editor, cols);
    let max_input = (usize::from(h) / 4).max(1);
    let shown = rows.len().min(max_input);
    let first = (cy + 1).saturating_sub(shown);
    let input_top = usize::from(h) - shown;
    let status_y = input_top - 1;
    let transcript_rows = status_y - header_rows;
    // The transcript: wrapped from the end backwards, only as far as the screen needs.
    let need = transcript_rows + ui.scroll;
    let mut wrapped: Vec<(Style, String)> = Vec::new();
    for Line { style, text } in view.lines.iter().rev() {
        let mut parts = wrap(text, cols);
        while let Some(p) = parts.pop() {
            wrapped.push((*style, p));
        }
        if wrapped.len() >= need {
            break;
        }
    }
    let scroll = ui.scroll.min(wrapped.len().saturating_sub(transcript_rows));
    let visible: Vec<&(Style, String)> =
        wrapped.iter().skip(scroll).take(transcript_rows).collect();
    for i in 0..transcript_rows {
        let y = (header_rows + transcript_rows - 1 - i) as u16;
        match visible.get(i) {
            Some((style, text)) => row(&mut out, y, cols, *style, text),
            None => row(&mut out, y, cols, Style::Plain, ""),
        }
    }
    let asking = view.pending.first().map(|a| {
        format!(
            "the agent asks: {} {} · y allow · n deny · a always (this session) · d details",
            berth_local_agent::front::render::inert(a["kind"].as_str().unwrap_or("?")),
            crate::cli::approvals::what(a)
        )
    });
    let (style, status) = match (&ui.status, scroll, asking) {
        (Some((style, text)), _, _) => (*style, text.clone()),
        (None, _, Some(ask)) if ui.editor.is_empty() => (Style::Alert, ask),
        (None, s, _) if s > 0 => (
            Style::Dim,
            format!("── scrolled up {s} rows · PgDn or Esc returns ──"),
        ),
        (None, _, _) => (Style::Dim, "─".repeat(cols)),
    };
    row(&mut out, status_y as u16, cols, style, &status);
    for (i, text) in rows.iter().skip(first).take(shown).enumerate() {
        row(&mut out, (input_top + i) as u16, cols, Style::Plain, text);
    }
    let _ = queue!(
        out,
        MoveTo(cx.min(cols - 1) as u16, (input_top + cy - first) as u16),
        Show
    );
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(&out);
    let _ = stdout.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_breaks_at_words_and_counts_wide_chars() {
        assert_eq!(wrap("the quick brown fox", 10), ["the quick", "brown fox"]);
        assert_eq!(wrap("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        assert_eq!(wrap("日本語の文", 4), ["日本", "語の", "文"]);
        assert_eq!(wrap("", 4), [""]);
        assert_eq!(fit("~/code/application", 8), "~/code/…");
        assert_eq!(fit("short", 8), "short");
    }

    #[test]
    fn the_input_wraps_and_keeps_the_cursor() {
        let mut e = Editor::default();
        e.insert_str("abcdefgh\nxy");
        let (rows, cursor) = input_rows(&e, 6);
        assert_eq!(rows, ["› abcd", "  efgh", "  xy"]);
        assert_eq!(cursor, (2, 4));
        e.home();
        assert_eq!(input_rows(&e, 6).1, (2, 2));
    }
}
