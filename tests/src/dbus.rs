//! A private D-Bus session bus for a test, with `dbus-monitor` recording every call to
//! `org.freedesktop.Notifications` on it: what a desktop would be shown, without a
//! desktop. `scripts/test.sh` installs dbus (`ensure_dbus`).
//!
//! The bus reads a configuration of its own (no service files, so nothing is ever
//! activated, whatever the machine has installed) and listens on a socket in the
//! test's directory. Nobody owns `org.freedesktop.Notifications` on it: a `Notify`
//! call is answered with an error by the bus, and the monitor sees it all the same.

use crate::eventually;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The bus and its monitor; both are killed when dropped.
#[derive(Debug)]
pub struct SessionBus {
    /// The bus's address, for `DBUS_SESSION_BUS_ADDRESS`.
    pub address: String,
    log: PathBuf,
    daemon: Child,
    monitor: Child,
}

impl SessionBus {
    /// Starts a bus with its socket and the monitor's log in `dir`, and waits until
    /// the monitor listens.
    pub fn start(dir: &Path) -> SessionBus {
        let config = dir.join("bus.conf");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"#,
                dir.join("bus.sock").display()
            ),
        )
        .expect("write the bus's configuration");
        let mut daemon = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--print-address"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("bus.log")).expect("the bus's log"))
            .spawn()
            .expect("run dbus-daemon (scripts/test.sh installs it: apt-get install dbus)");
        let mut address = String::new();
        BufReader::new(daemon.stdout.take().expect("its stdout"))
            .read_line(&mut address)
            .expect("the bus's address");
        let address = address.trim().to_owned();
        assert!(!address.is_empty(), "dbus-daemon printed no address");
        let log = dir.join("monitor.log");
        let monitor = Command::new("dbus-monitor")
            .args([
                "--address",
                &address,
                "interface='org.freedesktop.Notifications'",
            ])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).expect("the monitor's log"))
            .stderr(std::fs::File::create(dir.join("monitor.err")).expect("its errors"))
            .spawn()
            .expect("run dbus-monitor (scripts/test.sh installs it: apt-get install dbus)");
        let bus = SessionBus {
            address,
            log,
            daemon,
            monitor,
        };
        // Becoming a monitor, its connection loses its name (NameLost): from then on it
        // sees every call that matches.
        eventually(30, || bus.seen().contains("NameLost").then_some(()))
            .expect("dbus-monitor did not attach to the bus");
        bus
    }

    /// What the monitor has recorded so far.
    pub fn seen(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The `Notify` calls recorded so far: each call's text as `dbus-monitor` prints it.
    pub fn notify_calls(&self) -> Vec<String> {
        self.seen()
            .split("method call ")
            .filter(|call| call.contains("member=Notify"))
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for SessionBus {
    fn drop(&mut self) {
        for child in [&mut self.monitor, &mut self.daemon] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
