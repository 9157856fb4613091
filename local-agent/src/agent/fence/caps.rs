//! The fence's capability step: a fenced agent holds no capability, whoever runs Berth.
//!
//! Run as root (a container, CI, a small server), Berth holds every capability, and a
//! child keeps them across `execve`: a fenced agent of root could then pass the
//! kernel's ptrace-based checks on `/proc` (`CAP_SYS_PTRACE`, or a permitted set no
//! smaller than Berth's) and read `berth serve`'s `/proc/PID/environ`, a chat channel's
//! secret included, or use `CAP_DAC_OVERRIDE` past every file mode. So, in the child,
//! after the read-only binds (which need `CAP_SYS_ADMIN`) and before
//! `PR_SET_NO_NEW_PRIVS`, Landlock and seccomp:
//!
//! - the ambient set is cleared, for every fenced agent (a user's Berth given ambient
//!   capabilities would pass them on through `execve`);
//! - when Berth runs as root: the securebits of a pure capability process, locked
//!   ([`SECUREBITS`]: uid 0 gets nothing at `execve`, ambient capabilities can never be
//!   raised), every capability dropped from the bounding set, and the effective,
//!   permitted and inheritable sets emptied (`capset`).
//!
//! After the `execve` the agent's five sets are empty (`CapInh`, `CapPrm`, `CapEff`,
//! `CapBnd`, `CapAmb` in its `/proc/self/status`), and `PR_SET_NO_NEW_PRIVS` keeps a
//! set-user-id or file-capability program from granting any back. The agent keeps its
//! uid: it is still root to file modes (its own files), not to anything a capability
//! decides.
//!
//! Only fenced agents: an agent run with the user's `"fence": "off"` runs as Berth
//! would run it, as that setting says; the capabilities are part of the fence, like
//! Landlock.
//!
//! A root without `CAP_SETPCAP` (a container started with every capability dropped)
//! cannot set securebits or shrink its bounding set; there the securebits are left
//! alone, a bounding set that is already empty needs nothing, and one that is not
//! fails the step (the fence could not be applied), never runs the agent with it.

use std::sync::OnceLock;

/// `SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
/// SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE
/// | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED` (`<linux/securebits.h>`): uid 0 is not special
/// at `execve` or on a uid change, `PR_SET_KEEPCAPS` stays off, nothing is raised into
/// the ambient set, and none of it can be undone.
pub const SECUREBITS: libc::c_ulong = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80;

/// `CAP_SETPCAP`: what setting securebits and dropping from the bounding set need.
const CAP_SETPCAP: u32 = 8;

/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit sets, in two 32-bit halves.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The capability step of one process's agents, decided once in the parent (Berth's
/// uid and capabilities do not change while it runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drop {
    /// Berth runs as root: drop everything, not only the ambient set.
    root: bool,
    /// Berth may set securebits (`CAP_SETPCAP` in its effective set).
    securebits: bool,
}

/// Which call of [`Drop::apply`] failed, for the fence's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Ambient,
    Securebits,
    Bounding,
    Capset,
}

impl Step {
    /// The system call, as the fence's error names it.
    pub fn call(self) -> &'static str {
        match self {
            Step::Ambient => "prctl(PR_CAP_AMBIENT_CLEAR_ALL)",
            Step::Securebits => "prctl(PR_SET_SECUREBITS)",
            Step::Bounding => "prctl(PR_CAPBSET_DROP) (emptying the bounding set)",
            Step::Capset => "capset (emptying the effective, permitted and inheritable sets)",
        }
    }
}

impl Drop {
    /// The step for agents of this process: what its uid and its own effective set
    /// (`CapEff` of `/proc/self/status`) call for.
    pub fn of_this_process() -> Drop {
        static THIS: OnceLock<Drop> = OnceLock::new();
        *THIS.get_or_init(|| {
            let effective = std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("CapEff:"))
                        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                })
                .unwrap_or(0);
            Drop {
                root: rustix::process::geteuid().is_root(),
                securebits: effective & (1 << CAP_SETPCAP) != 0,
            }
        })
    }

    /// Applies the step to the calling process (see the module's documentation); the
    /// step that failed, with errno left set.
    ///
    /// # Safety
    /// Async-signal-safe: system calls only, on the stack, no allocation. For the child
    /// between `clone`/`fork` and `execve`: it changes the calling thread's credentials.
    #[allow(unsafe_code)]
    pub unsafe fn apply(&self) -> Result<(), Step> {
        // SAFETY: each call is one system call on values on this stack frame, which
        // live until it returns.
        unsafe {
            if libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(Step::Ambient);
            }
            if !self.root {
                // A user's capabilities end at `execve` but for the ambient set.
                return Ok(());
            }
            if self.securebits && libc::prctl(libc::PR_SET_SECUREBITS, SECUREBITS, 0, 0, 0) != 0 {
                return Err(Step::Securebits);
            }
            // Up to the kernel's last capability: beyond it PR_CAPBSET_READ says EINVAL.
            for cap in 0..64 as libc::c_ulong {
                match libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) {
                    1 => {
                        if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                            return Err(Step::Bounding);
                        }
                    }
                    0 => {}
                    _ => break,
                }
            }
            let header = CapHeader {
                version: CAPABILITY_VERSION_3,
                pid: 0,
            };
            let none = [CapData {
                effective: 0,
                permitted: 0,
                inheritable: 0,
            }; 2];
            if libc::syscall(libc::SYS_capset, &raw const header, none.as_ptr()) != 0 {
                return Err(Step::Capset);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a child of this test, the step leaves no capability behind: checked from a
    /// shell it then runs (its five sets are what the kernel says after `execve`).
    #[test]
    fn after_the_step_an_agent_holds_no_capability() {
        use std::os::unix::process::CommandExt;
        let drop = Drop::of_this_process();
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "grep '^Cap' /proc/self/status"]);
        // SAFETY: the closure runs in the forked child before exec: `apply` is system
        // calls only, and the error is built from errno without allocating.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(move || {
                drop.apply().map_err(|_| std::io::Error::last_os_error())?;
                // As the fence does next: nothing granted at the exec.
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        let sets: Vec<(&str, &str)> = text
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k, v.trim()))
            .collect();
        for (set, value) in &sets {
            // A user's bounding set is not its own to empty, and grants nothing.
            if *set == "CapBnd" && !drop.root {
                continue;
            }
            assert_eq!(*value, "0000000000000000", "{set} in {text}");
        }
        assert_eq!(sets.len(), 5, "{text}");
    }
}
