//! Desktop notifications: freedesktop's `org.freedesktop.Notifications.Notify` over the
//! session bus on Linux (zbus, no libdbus), the notification center through
//! `osascript` on macOS, nothing elsewhere.
//!
//! Off when `"notify": {"desktop": false}`, and on Linux when there is no session bus
//! (`DBUS_SESSION_BUS_ADDRESS` unset, or a bus that cannot be reached): a server on a
//! machine without a desktop says so once in its log, at debug level, and never as an
//! error. [`Desktop::show`] never waits: one background task talks to the bus, and a
//! notification that finds its queue full is dropped.

/// One notification: a summary line and a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub summary: String,
    pub body: String,
}

/// How many notifications wait for the bus at most.
#[cfg(any(target_os = "linux", target_os = "macos"))]
const QUEUE_LEN: usize = 16;

/// The sending end, where this system has a desktop to notify.
#[derive(Debug, Clone)]
pub struct Desktop {
    #[cfg(any(target_os = "linux", target_os = "macos"))]
    queue: tokio::sync::mpsc::Sender<Message>,
}

impl Desktop {
    /// Starts the task that shows notifications (on the current tokio runtime), or
    /// `None` where they are off (`enabled` false, no session bus, another system).
    pub fn start(enabled: bool) -> Option<Desktop> {
        if !enabled {
            tracing::debug!("desktop notifications are off (\"notify\": {{\"desktop\": false}})");
            return None;
        }
        imp::start()
    }

    /// Shows `message`, later; dropped if the queue is full.
    pub fn show(&self, message: Message) {
        #[cfg(any(target_os = "linux", target_os = "macos"))]
        if self.queue.try_send(message).is_err() {
            tracing::debug!("a desktop notification was dropped: too many wait");
        }
        #[cfg(not(any(target_os = "linux", target_os = "macos")))]
        let _ = message;
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use super::{Desktop, Message, QUEUE_LEN};
    use std::collections::HashMap;
    use std::time::Duration;
    use zbus::Variant;
    use zbus::connection::{Builder, Connection};

    /// The variable naming the session bus.
    pub const BUS_VAR: &str = "DBUS_SESSION_BUS_ADDRESS";

    /// The longest wait for the bus: to connect, and for `Notify`'s answer.
    const BUS_TIMEOUT: Duration = Duration::from_secs(5);

    pub fn start() -> Option<Desktop> {
        let address = std::env::var(BUS_VAR).ok().filter(|a| !a.trim().is_empty());
        let Some(address) = address else {
            tracing::debug!("desktop notifications are off: no session bus ({BUS_VAR} is not set)");
            return None;
        };
        let (queue, mut rx) = tokio::sync::mpsc::channel::<Message>(QUEUE_LEN);
        tokio::spawn(async move {
            let mut bus: Option<Connection> = None;
            let mut said = false;
            while let Some(message) = rx.recv().await {
                if bus.is_none() {
                    match connect(&address).await {
                        Ok(c) => bus = Some(c),
                        Err(e) => {
                            if !said {
                                tracing::debug!(error = %e, "desktop notifications are off: the session bus cannot be reached");
                                said = true;
                            }
                            continue;
                        }
                    }
                }
                let Some(conn) = &bus else { continue };
                match notify(conn, &message).await {
                    Ok(()) => {}
                    // The bus answered (no notification server on it, say): it is there.
                    Err(Shown::Refused(e)) => {
                        tracing::debug!(error = %e, "a desktop notification was not shown");
                    }
                    // The bus may have gone: the next one connects afresh.
                    Err(Shown::Lost(e)) => {
                        tracing::debug!(error = %e, "a desktop notification was not shown");
                        bus = None;
                    }
                }
            }
        });
        Some(Desktop { queue })
    }

    async fn connect(address: &str) -> Result<Connection, String> {
        let build = Builder::address(address).build();
        match tokio::time::timeout(BUS_TIMEOUT, build).await {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {} s", BUS_TIMEOUT.as_secs())),
        }
    }

    /// Why a notification was not shown.
    #[derive(Debug)]
    enum Shown {
        /// The call reached the bus and was answered with an error.
        Refused(String),
        /// No answer: the connection broke, or the bus took too long.
        Lost(String),
    }

    /// `Notify(app_name, replaces_id, app_icon, summary, body, actions, hints,
    /// expire_timeout)`, as the Desktop Notifications Specification has it.
    async fn notify(conn: &Connection, m: &Message) -> Result<(), Shown> {
        let hints: HashMap<&str, Variant<'_>> = HashMap::new();
        let actions: Vec<&str> = Vec::new();
        let body = (
            "Berth",
            0u32,
            "",
            m.summary.as_str(),
            markup_escaped(&m.body),
            actions,
            hints,
            -1i32,
        );
        let call = conn.call_method(
            Some("org.freedesktop.Notifications"),
            "/org/freedesktop/Notifications",
            Some("org.freedesktop.Notifications"),
            "Notify",
            &body,
        );
        match tokio::time::timeout(BUS_TIMEOUT, call).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e @ (zbus::Error::MethodError(..) | zbus::Error::FDO(_)))) => {
                Err(Shown::Refused(e.to_string()))
            }
            Ok(Err(e)) => Err(Shown::Lost(e.to_string())),
            Err(_) => Err(Shown::Lost(format!(
                "no answer within {} s",
                BUS_TIMEOUT.as_secs()
            ))),
        }
    }

    /// The body with `&`, `<` and `>` escaped: a server may read it as markup.
    pub fn markup_escaped(text: &str) -> String {
        text.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn the_body_is_not_markup() {
            assert_eq!(super::markup_escaped("a <b> & c"), "a &lt;b&gt; &amp; c");
        }
    }
}

#[cfg(target_os = "macos")]
mod imp {
    use super::{Desktop, Message, QUEUE_LEN};
    use std::process::Stdio;
    use std::time::Duration;

    /// The longest `osascript` may take.
    const TIMEOUT: Duration = Duration::from_secs(10);

    pub fn start() -> Option<Desktop> {
        let (queue, mut rx) = tokio::sync::mpsc::channel::<Message>(QUEUE_LEN);
        tokio::spawn(async move {
            while let Some(m) = rx.recv().await {
                let script = format!(
                    "display notification {} with title \"Berth\" subtitle {}",
                    quoted(&m.body),
                    quoted(&m.summary)
                );
                let run = tokio::process::Command::new("/usr/bin/osascript")
                    .arg("-e")
                    .arg(script)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .kill_on_drop(true)
                    .status();
                match tokio::time::timeout(TIMEOUT, run).await {
                    Ok(Ok(s)) if s.success() => {}
                    Ok(Ok(s)) => {
                        tracing::debug!(status = %s, "osascript did not show the notification")
                    }
                    Ok(Err(e)) => tracing::debug!(error = %e, "osascript could not run"),
                    Err(_) => tracing::debug!("osascript took too long"),
                }
            }
        });
        Some(Desktop { queue })
    }

    /// `text` as an AppleScript string literal.
    fn quoted(text: &str) -> String {
        let mut out = String::with_capacity(text.len() + 2);
        out.push('"');
        for c in text.chars() {
            match c {
                '"' | '\\' => {
                    out.push('\\');
                    out.push(c);
                }
                '\n' | '\r' => out.push(' '),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
mod imp {
    use super::Desktop;

    pub fn start() -> Option<Desktop> {
        tracing::debug!("desktop notifications are off: this system has none Berth can reach");
        None
    }
}
