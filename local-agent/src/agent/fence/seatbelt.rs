//! The fence on macOS: a Seatbelt profile generated from the run's [`FencePolicy`].
//!
//! [`Profile::new`] is pure (no I/O, no platform calls), so it is compiled and tested
//! on every platform; only macOS runs it, as
//! `/usr/bin/sandbox-exec -p PROFILE -D NAME=value … -- program args…` ([`wrap`]).
//!
//! **No path is ever part of the profile's text.** The text is made of fixed rules and
//! parameter names Berth chooses (`DIR`, `TMP`, `WRITE_0`, `READ_DENY_0`, …); every
//! path is a parameter's value, passed as its own `-D` argument and referenced with
//! `(param "NAME")`. A path holding `"`, `)` or a newline cannot change a rule: the
//! text depends only on the policy's shape (how many paths of each role, their write
//! kinds, the network setting), which the table tests prove.
//!
//! What the profile allows, in order (Seatbelt applies the **last** matching rule, so
//! a later deny inside an earlier allow is a real carve-out — what Landlock lacks):
//!
//! 1. `(deny default)`; processes may exec, fork, and signal and inspect their own
//!    sandbox; sysctls are readable; POSIX semaphores and shared memory, pseudo-ttys,
//!    and a short list of system services (directory lookups, logging, notifications;
//!    with the network on, also the TLS trust and DNS configuration services).
//! 2. Reads everywhere — or, in the strict read mode ([`Reads::Only`]), the metadata of
//!    every path (a lookup, a `stat`: no directory's listing, no file's contents) and
//!    reads beneath each root alone — then none beneath each `read_deny` path
//!    (`subpath` matches the path itself and what lies beneath it, so it is exact for
//!    files and directories alike without looking at the disk).
//! 3. Reads and writes beneath each write path (`subpath` for [`WriteKind::Subtree`],
//!    `literal` for [`WriteKind::File`]) — readable even inside a hidden location, as on
//!    Linux (the task's tmp lies in Berth's hidden home) — and the devices programs
//!    need: `/dev/null`, `/dev/zero`, `/dev/tty`, `/dev/ptmx`, `/dev/ttysN`, `/dev/fd`.
//! 4. No writes beneath each `protect` path (`.git/hooks`, `.git/config`, `.berth`),
//!    nor to the writable directories above them — the run's directory, its `.git`, and
//!    a write path holding them — as entries (`literal`: what lies in them stays
//!    writable, but they cannot be renamed, removed or re-created), so a protected path
//!    cannot be moved away from its rule, edited, and moved back.
//! 5. Network on: every socket and connection. Off: unix sockets alone, bound and
//!    reached beneath the task's tmp (no DNS, no TCP, no UDP).
//! 6. Last, whatever the network: no connection to Berth's own sockets (the control
//!    sockets given to [`Profile::new`]).
//!
//! What it assumes of its caller, and what is untested:
//!
//! - Seatbelt matches the path the kernel resolves: the paths must be given in their
//!   resolved form (`/private/var/…`, not `/var/…`; the on-disk letter case), or a rule
//!   misses. The policy's paths are passed through as they are.
//! - A hard link made in a writable place to a protected file is named by the link's
//!   path; whether Seatbelt refuses making it is untested.
//! - Nothing here has been run on macOS by Berth's tests: the text follows Apple's
//!   profile language as codex and Chromium use it, and is checked only as text.

use berth_core::LocalPath;
use berth_core::fence::{FencePolicy, Network, Reads, WriteKind};

/// Where macOS keeps `sandbox-exec`; named absolutely, never looked up on `PATH`.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// System services every fenced program may reach: user and group lookups, logging,
/// notifications, the per-user temporary directories, power assertions.
const MACH_SERVICES: &[&str] = &[
    "com.apple.system.opendirectoryd.libinfo",
    "com.apple.system.opendirectoryd.membership",
    "com.apple.system.DirectoryService.libinfo_v1",
    "com.apple.system.logger",
    "com.apple.system.notification_center",
    "com.apple.logd",
    "com.apple.diagnosticd",
    "com.apple.bsd.dirhelper",
    "com.apple.PowerManagement.control",
];

/// The services a program needs for the network: TLS trust (certificates, OCSP),
/// and the DNS and proxy configuration. Only with the network on.
const MACH_SERVICES_NETWORK: &[&str] = &[
    "com.apple.SecurityServer",
    "com.apple.trustd",
    "com.apple.trustd.agent",
    "com.apple.ocspd",
    "com.apple.networkd",
    "com.apple.SystemConfiguration.DNSConfiguration",
    "com.apple.SystemConfiguration.configd",
    "com.apple.dnssd.service",
];

/// The devices every program may read and write, besides the terminals.
const DEVICES: &[&str] = &[
    "(literal \"/dev/null\")",
    "(literal \"/dev/zero\")",
    "(subpath \"/dev/fd\")",
];

/// The terminals: read, written, and driven by ioctls (a shell's job control, `openpty`).
const TERMINALS: &[&str] = &[
    "(literal \"/dev/tty\")",
    "(literal \"/dev/ptmx\")",
    "(regex #\"^/dev/ttys[0-9]+$\")",
];

/// The first rules of every profile: the process itself, and the system around it.
const BASE: &str = "(version 1)
(deny default)
(allow process-exec process-fork)
(allow signal (target same-sandbox))
(allow process-info* (target same-sandbox))
(allow sysctl-read)
(allow ipc-posix-sem ipc-posix-shm)
(allow pseudo-tty)
(allow iokit-open (iokit-registry-entry-class \"RootDomainUserClient\"))
";

/// What a path stands for in the profile; each role has its own parameter names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The run's directory: `DIR`.
    Dir,
    /// The task's temporary directory: `TMP`.
    Tmp,
    Write,
    /// A root of the strict read mode.
    Read,
    ReadDeny,
    Protect,
    /// A directory between the run's directory and a protected path.
    ProtectParent,
    ControlSocket,
}

impl Role {
    const fn prefix(self) -> &'static str {
        match self {
            Role::Dir => "DIR",
            Role::Tmp => "TMP",
            Role::Write => "WRITE",
            Role::Read => "READ",
            Role::ReadDeny => "READ_DENY",
            Role::Protect => "PROTECT",
            Role::ProtectParent => "PROTECT_PARENT",
            Role::ControlSocket => "CONTROL_SOCKET",
        }
    }

    /// Whether the role names one path (`DIR`), not a list (`WRITE_0`, `WRITE_1`, …).
    const fn single(self) -> bool {
        matches!(self, Role::Dir | Role::Tmp)
    }
}

/// A Seatbelt profile and the values of its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The profile (Seatbelt's profile language): fixed rules and parameter names,
    /// never a path.
    pub text: String,
    /// Each parameter the text references, once, in the order of first reference:
    /// `(name, path)`, for `sandbox-exec -D name=path`.
    pub params: Vec<(String, String)>,
}

/// The parameters gathered while the text is written.
#[derive(Default)]
struct Params {
    list: Vec<(Role, String, String)>,
}

impl Params {
    /// `(param "NAME")` for `path` in `role`; a path met again in the same role
    /// keeps its name.
    fn param(&mut self, role: Role, path: &LocalPath) -> String {
        let value = path.as_str();
        let known = self
            .list
            .iter()
            .find(|(r, _, v)| *r == role && (role.single() || v == value));
        let name = match known {
            Some((_, name, _)) => name.clone(),
            None => {
                let name = if role.single() {
                    role.prefix().to_owned()
                } else {
                    let n = self.list.iter().filter(|(r, _, _)| *r == role).count();
                    format!("{}_{n}", role.prefix())
                };
                self.list.push((role, name.clone(), value.to_owned()));
                name
            }
        };
        format!("(param \"{name}\")")
    }
}

/// Appends `(head filter…)`, one filter a line; nothing when there is no filter (a
/// rule without one would apply everywhere).
fn rule(out: &mut String, head: &str, filters: &[String]) {
    if filters.is_empty() {
        return;
    }
    out.push('(');
    out.push_str(head);
    for filter in filters {
        out.push_str("\n  ");
        out.push_str(filter);
    }
    out.push_str(")\n");
}

fn mach_lookup(out: &mut String, services: &[&str]) {
    let filters: Vec<String> = services
        .iter()
        .map(|s| format!("(global-name \"{s}\")"))
        .collect();
    rule(out, "allow mach-lookup", &filters);
}

impl Profile {
    /// The profile confining a run to `policy` (see the module's documentation), with
    /// no connection to any of `control_sockets` (Berth's own sockets).
    pub fn new(policy: &FencePolicy, control_sockets: &[LocalPath]) -> Profile {
        let mut params = Params::default();
        let mut text = String::from(BASE);
        mach_lookup(&mut text, MACH_SERVICES);

        match &policy.reads {
            Reads::Everywhere => text.push_str("(allow file-read*)\n"),
            Reads::Only(roots) => {
                text.push_str("(allow file-read-metadata)\n");
                let readable: Vec<String> = roots
                    .iter()
                    .map(|p| {
                        let param = if *p == policy.dir {
                            params.param(Role::Dir, p)
                        } else {
                            params.param(Role::Read, p)
                        };
                        format!("(subpath {param})")
                    })
                    .collect();
                rule(&mut text, "allow file-read*", &readable);
            }
        }
        let hidden: Vec<String> = policy
            .read_deny
            .iter()
            .map(|p| format!("(subpath {})", params.param(Role::ReadDeny, p)))
            .collect();
        rule(&mut text, "deny file-read*", &hidden);

        let writable: Vec<String> = policy
            .write
            .iter()
            .map(|(p, kind)| {
                let param = if *p == policy.dir {
                    params.param(Role::Dir, p)
                } else if *p == policy.tmp {
                    params.param(Role::Tmp, p)
                } else {
                    params.param(Role::Write, p)
                };
                match kind {
                    WriteKind::Subtree => format!("(subpath {param})"),
                    WriteKind::File => format!("(literal {param})"),
                }
            })
            .collect();
        rule(&mut text, "allow file-read* file-write*", &writable);
        let fixed = |list: &[&str]| list.iter().map(|d| (*d).to_owned()).collect::<Vec<_>>();
        rule(
            &mut text,
            "allow file-read* file-write*",
            &[fixed(DEVICES), fixed(TERMINALS)].concat(),
        );
        rule(&mut text, "allow file-ioctl", &fixed(TERMINALS));

        let mut protected: Vec<String> = policy
            .protect
            .iter()
            .map(|p| format!("(subpath {})", params.param(Role::Protect, p)))
            .collect();
        for parent in protect_parents(policy) {
            let param = if parent == policy.dir {
                params.param(Role::Dir, &parent)
            } else {
                params.param(Role::ProtectParent, &parent)
            };
            let filter = format!("(literal {param})");
            if !protected.contains(&filter) {
                protected.push(filter);
            }
        }
        rule(&mut text, "deny file-write*", &protected);

        match policy.network {
            Network::On => {
                text.push_str("(allow network*)\n(allow system-socket)\n");
                mach_lookup(&mut text, MACH_SERVICES_NETWORK);
            }
            Network::Off => {
                let tmp = params.param(Role::Tmp, &policy.tmp);
                text.push_str("(allow system-socket (socket-domain AF_UNIX))\n");
                text.push_str(&format!(
                    "(allow network-bind network-inbound (local unix-socket (subpath {tmp})))\n"
                ));
                text.push_str(&format!(
                    "(allow network-outbound (remote unix-socket (subpath {tmp})))\n"
                ));
            }
        }
        for socket in control_sockets {
            let param = params.param(Role::ControlSocket, socket);
            text.push_str(&format!(
                "(deny network-outbound (remote unix-socket (path-literal {param})))\n"
            ));
        }

        Profile {
            text,
            params: params
                .list
                .into_iter()
                .map(|(_, name, value)| (name, value))
                .collect(),
        }
    }
}

/// The directories above each protected path that the agent could otherwise rename
/// or remove (those a write rule covers: the run's directory, `.git`, and any write
/// path holding them), each once, outermost first.
fn protect_parents(policy: &FencePolicy) -> Vec<LocalPath> {
    let writable = |dir: &LocalPath| {
        policy.write.iter().any(|(w, kind)| match kind {
            WriteKind::Subtree => dir.starts_with(w),
            WriteKind::File => dir == w,
        })
    };
    let mut out: Vec<LocalPath> = Vec::new();
    for path in &policy.protect {
        let mut chain = Vec::new();
        let mut next = path.parent();
        while let Some(parent) = next {
            next = parent.parent();
            if writable(&parent) {
                chain.push(parent);
            }
        }
        for parent in chain.into_iter().rev() {
            if !out.contains(&parent) {
                out.push(parent);
            }
        }
    }
    out
}

/// A program and its arguments, ready to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wrapped {
    pub program: String,
    pub args: Vec<String>,
}

/// `program args…` run inside `profile`:
/// `/usr/bin/sandbox-exec -p TEXT -D NAME=path … -- program args…`. Each parameter is
/// one argument of its own after `-D` (a path is never split or interpreted by a
/// shell), and `--` ends `sandbox-exec`'s options, whatever the program is called.
pub fn wrap(profile: &Profile, program: &str, args: &[String]) -> Wrapped {
    let mut out = vec!["-p".to_owned(), profile.text.clone()];
    for (name, value) in &profile.params {
        out.push("-D".to_owned());
        out.push(format!("{name}={value}"));
    }
    out.push("--".to_owned());
    out.push(program.to_owned());
    out.extend(args.iter().cloned());
    Wrapped {
        program: SANDBOX_EXEC.to_owned(),
        args: out,
    }
}

#[cfg(test)]
mod tests;
