//! The fenced agent's seccomp filter: a small classic-BPF program, built in the parent.
//!
//! Every fenced agent carries one, whatever its network setting: the filter is the
//! kernel's mark of a fenced process, inherited by every descendant and never removed,
//! which Berth's sockets check ([`super::peer_is_fenced`]). What it refuses:
//!
//! - any other architecture's system calls (the i386 `int 0x80` entry, whose
//!   `socketcall` would bypass the checks below): the process is killed;
//! - on x86-64, the x32 numbers (`ENOSYS`);
//! - `io_uring_setup` (`ENOSYS`, callers fall back to plain system calls): io_uring
//!   creates sockets without the `socket` system call;
//! - with the network off, `socket` for every family but `AF_UNIX`
//!   (`EAFNOSUPPORT`, which tools read as "no network"). `socketpair` stays.

use berth_core::fence::Network;

/// An architecture the filter is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Arch {
    /// `AUDIT_ARCH_*`, as the kernel reports it in `seccomp_data.arch`.
    audit: u32,
    /// Whether `__X32_SYSCALL_BIT` numbers exist (x86-64 only).
    x32: bool,
    socket: u32,
    io_uring_setup: u32,
}

pub(crate) const X86_64: Arch = Arch {
    audit: 0xC000_003E,
    x32: true,
    socket: 41,
    io_uring_setup: 425,
};

pub(crate) const AARCH64: Arch = Arch {
    audit: 0xC000_00B7,
    x32: false,
    socket: 198,
    io_uring_setup: 425,
};

/// This build's architecture, if the filter is written for it.
pub(crate) const NATIVE: Option<Arch> = if cfg!(target_arch = "x86_64") {
    Some(X86_64)
} else if cfg!(target_arch = "aarch64") {
    Some(AARCH64)
} else {
    None
};

const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;
/// The low 32 bits of `args[0]` (little-endian; `socket`'s domain is an `int`).
const ARG0_LOW: u32 = 16;

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

fn load(offset: u32) -> libc::sock_filter {
    stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, offset)
}

fn ret(action: u32) -> libc::sock_filter {
    stmt(libc::BPF_RET | libc::BPF_K, action)
}

fn errno(e: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA)
}

/// The filter for `arch` and `network`, as described in the module's documentation.
pub(crate) fn program(arch: Arch, network: Network) -> Vec<libc::sock_filter> {
    let jeq = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    let jge = libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K;
    let mut p = vec![
        load(ARCH),
        jump(jeq, arch.audit, 1, 0),
        ret(libc::SECCOMP_RET_KILL_PROCESS),
        load(NR),
    ];
    if arch.x32 {
        p.extend([jump(jge, X32_SYSCALL_BIT, 0, 1), ret(errno(libc::ENOSYS))]);
    }
    p.extend([
        jump(jeq, arch.io_uring_setup, 0, 1),
        ret(errno(libc::ENOSYS)),
    ]);
    match network {
        Network::On => {}
        Network::Off => p.extend([
            // Not `socket`: skip the three instructions to the final allow.
            jump(jeq, arch.socket, 0, 3),
            load(ARG0_LOW),
            jump(jeq, libc::AF_UNIX as u32, 1, 0),
            ret(errno(libc::EAFNOSUPPORT)),
        ]),
    }
    p.push(ret(libc::SECCOMP_RET_ALLOW));
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic-BPF interpreter for the instructions [`program`] uses, over one
    /// system call: what the kernel would answer.
    fn run(p: &[libc::sock_filter], arch: u32, nr: u32, arg0: u64) -> u32 {
        let word = |k: u32| match k {
            NR => nr,
            ARCH => arch,
            ARG0_LOW => arg0 as u32,
            other => panic!("load of offset {other}"),
        };
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let i = p[pc];
            let code = u32::from(i.code);
            pc += 1;
            if code == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS {
                acc = word(i.k);
            } else if code == libc::BPF_RET | libc::BPF_K {
                return i.k;
            } else {
                let taken = if code == libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K {
                    acc == i.k
                } else if code == libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K {
                    acc >= i.k
                } else {
                    panic!("instruction {code:#x}")
                };
                pc += usize::from(if taken { i.jt } else { i.jf });
            }
            assert!(pc < p.len(), "ran off the end");
        }
    }

    const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
    const KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;
    const AF_INET: u64 = libc::AF_INET as u64;
    const AF_INET6: u64 = libc::AF_INET6 as u64;
    const AF_NETLINK: u64 = libc::AF_NETLINK as u64;
    const AF_UNIX: u64 = libc::AF_UNIX as u64;

    #[test]
    fn what_each_filter_answers() {
        let enosys = errno(libc::ENOSYS);
        let noaf = errno(libc::EAFNOSUPPORT);
        let read = 0; // read(2) on x86-64; io_submit… on aarch64: allowed either way
        for arch in [X86_64, AARCH64] {
            let other_arch = if arch == X86_64 { AARCH64 } else { X86_64 };
            // (network, nr, arg0, answer)
            let rows = [
                (Network::On, read, 0, ALLOW),
                (Network::On, arch.socket, AF_INET, ALLOW),
                (Network::On, arch.socket, AF_UNIX, ALLOW),
                (Network::On, arch.io_uring_setup, 0, enosys),
                (Network::Off, read, 0, ALLOW),
                (Network::Off, arch.socket, AF_UNIX, ALLOW),
                // The upper half of the argument is not the domain: ignored, as the
                // kernel ignores it.
                (Network::Off, arch.socket, AF_UNIX | 1 << 32, ALLOW),
                (Network::Off, arch.socket, AF_INET, noaf),
                (Network::Off, arch.socket, AF_INET6, noaf),
                (Network::Off, arch.socket, AF_NETLINK, noaf),
                (Network::Off, arch.io_uring_setup, 0, enosys),
            ];
            for (network, nr, arg0, want) in rows {
                let p = program(arch, network);
                assert_eq!(
                    run(&p, arch.audit, nr, arg0),
                    want,
                    "{arch:?} {network:?} nr={nr} arg0={arg0:#x}"
                );
                // Another architecture's numbers mean other calls: killed.
                assert_eq!(run(&p, other_arch.audit, nr, arg0), KILL);
                assert_eq!(run(&p, 0x4000_0003, nr, arg0), KILL, "i386");
            }
        }
        // x32 numbers on x86-64.
        for network in Network::ALL {
            let p = program(X86_64, network);
            assert_eq!(run(&p, X86_64.audit, X32_SYSCALL_BIT | 41, AF_INET), enosys);
        }
        // No x32 check where there is no x32.
        let p = program(AARCH64, Network::On);
        assert_eq!(run(&p, AARCH64.audit, X32_SYSCALL_BIT | 1, 0), ALLOW);
    }

    #[test]
    fn the_programs_instructions() {
        let jeq = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
        let p = program(X86_64, Network::Off);
        let listing: Vec<(u16, u8, u8, u32)> =
            p.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect();
        let ld = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
        let jge = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
        let rt = (libc::BPF_RET | libc::BPF_K) as u16;
        assert_eq!(
            listing,
            vec![
                (ld, 0, 0, ARCH),
                (jeq, 1, 0, 0xC000_003E),
                (rt, 0, 0, KILL),
                (ld, 0, 0, NR),
                (jge, 0, 1, X32_SYSCALL_BIT),
                (rt, 0, 0, errno(libc::ENOSYS)),
                (jeq, 0, 1, 425),
                (rt, 0, 0, errno(libc::ENOSYS)),
                (jeq, 0, 3, 41),
                (ld, 0, 0, ARG0_LOW),
                (jeq, 1, 0, 1),
                (rt, 0, 0, errno(libc::EAFNOSUPPORT)),
                (rt, 0, 0, ALLOW),
            ]
        );
        assert_eq!(program(X86_64, Network::On).len(), 9);
        assert_eq!(program(AARCH64, Network::On).len(), 7);
    }

    /// The syscall numbers written above are this build's.
    #[test]
    fn the_native_numbers_match_libc() {
        let native = NATIVE.expect("an architecture the filter is written for");
        assert_eq!(i64::from(native.socket), libc::SYS_socket);
        assert_eq!(i64::from(native.io_uring_setup), libc::SYS_io_uring_setup);
    }
}
