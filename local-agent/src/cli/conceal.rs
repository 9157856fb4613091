//! What other processes may learn of Berth's long-running processes (`berth serve`,
//! `berth daemon`): not their environment, not a daemon token given on the command line.
//!
//! Their environment holds secrets (a chat channel's signing secret, `BERTH_DAEMON_TOKEN`),
//! and `/proc/PID/environ` shows it to any process the kernel lets ptrace-read them: every
//! process of the same user, an agent run unfenced among them (the fence's `auto` mode
//! where the kernel has no Landlock, or the user's `"fence": "off"`). [`seal`] makes the
//! process non-dumpable, so only a holder of `CAP_SYS_PTRACE` (root's own processes, not
//! a fenced agent of root: it holds no capability) may read it. Agents are not affected:
//! `execve` of a program that is not set-user-id makes the new program dumpable again.
//!
//! `/proc/PID/cmdline` is readable by every local user whatever the process's state, so
//! a token given with `--token` is overwritten in the process's own argument memory
//! ([`scrub_command_line`]) as soon as `berth daemon` starts.

/// Makes this process non-dumpable (`PR_SET_DUMPABLE` 0): its `/proc/PID/environ`,
/// `mem`, `fd/` and the like are root's, readable only with `CAP_SYS_PTRACE`; no core
/// dump is written (it would hold the same secrets). Linux only; elsewhere nothing.
///
/// The fence's read-only binds write the child's `/proc/self/uid_map` between `clone`
/// and `execve`, which a non-dumpable process of a user may not: the child makes itself
/// dumpable for those writes and not after (`crate::agent::fence::binds`).
pub(super) fn seal() -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)?;
    Ok(())
}

/// Overwrites every occurrence of `secret` in this process's command line (the memory
/// `/proc/self/cmdline` shows, from `arg_start` to `arg_end` of `/proc/self/stat`) with
/// `*`, through `/proc/self/mem`; whether anything was overwritten. Call it before
/// [`seal`]: a user's non-dumpable process may not open its own `mem`.
///
/// The arguments were parsed before: nothing reads them again. Between the `exec` and
/// this call the token is still there to read (a few milliseconds); the warning
/// `--token` prints says so, and names the ways that never show it.
#[cfg(target_os = "linux")]
pub(super) fn scrub_command_line(secret: &str) -> std::io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let (start, end) = arg_range(&stat).ok_or_else(|| {
        std::io::Error::other("/proc/self/stat does not give this process's arguments")
    })?;
    let len = usize::try_from(end.saturating_sub(start)).map_err(std::io::Error::other)?;
    let mut mem = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/proc/self/mem")?;
    let mut args = vec![0u8; len];
    mem.seek(SeekFrom::Start(start))?;
    mem.read_exact(&mut args)?;
    if !mask(&mut args, secret.as_bytes()) {
        return Ok(false);
    }
    mem.seek(SeekFrom::Start(start))?;
    mem.write_all(&args)?;
    Ok(true)
}

/// Elsewhere the command line is left as it is (the warning stands).
#[cfg(not(target_os = "linux"))]
pub(super) fn scrub_command_line(_secret: &str) -> std::io::Result<bool> {
    Ok(false)
}

/// `arg_start` and `arg_end` (fields 48 and 49) of a `/proc/PID/stat` line. Fields are
/// counted after the command's `(…)`, which may itself hold spaces and parentheses.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn arg_range(stat: &str) -> Option<(u64, u64)> {
    let (_, rest) = stat.rsplit_once(") ")?;
    // `rest` starts at field 3 (the state).
    let mut fields = rest.split_ascii_whitespace().skip(48 - 3);
    let start = fields.next()?.parse().ok()?;
    let end = fields.next()?.parse().ok()?;
    (start != 0 && end > start).then_some((start, end))
}

/// Replaces every occurrence of `secret` in `args` with `*` bytes; whether there was one.
/// An empty secret matches nothing.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn mask(args: &mut [u8], secret: &[u8]) -> bool {
    if secret.is_empty() {
        return false;
    }
    let mut found = false;
    let mut i = 0;
    while i + secret.len() <= args.len() {
        if args[i..].starts_with(secret) {
            args[i..i + secret.len()].fill(b'*');
            found = true;
            i += secret.len();
        } else {
            i += 1;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_occurrence_is_masked_and_nothing_else() {
        let mut args = b"berth\0daemon\0--token\0abc\0--name\0xabcx\0".to_vec();
        assert!(mask(&mut args, b"abc"));
        assert_eq!(args, b"berth\0daemon\0--token\0***\0--name\0x***x\0");
        assert!(!mask(&mut args, b"abc"));
        assert!(!mask(&mut args, b""));
    }

    #[test]
    fn the_argument_range_is_read_past_a_command_with_spaces_and_parentheses() {
        let mut fields: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
        fields[48 - 3] = "1000".into();
        fields[49 - 3] = "1040".into();
        let stat = format!("42 (a) b (c) {}", fields.join(" "));
        assert_eq!(arg_range(&stat), Some((1000, 1040)));
        assert_eq!(arg_range("42 (x) R 1 2"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_finds_its_own_arguments() {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let (start, end) = arg_range(&stat).unwrap();
        let cmdline = std::fs::read("/proc/self/cmdline").unwrap();
        assert_eq!(usize::try_from(end - start).unwrap(), cmdline.len());
    }
}
