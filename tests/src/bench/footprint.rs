//! Footprint: idle resident memory of `berth serve`, the `berth` binary's size, the
//! browser bundle raw and gzipped.

use super::{Goal, Row, progress, served, settle};
use crate::berth_bin;
use anyhow::{Context as _, Result};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

const MB: f64 = 1024.0 * 1024.0;

/// A process's resident set size in bytes, from `/proc/<pid>/status`.
pub fn rss_bytes(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("read /proc/{pid}/status"))?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("no VmRSS line")?;
    Ok(kb * 1024)
}

/// The size of `bytes` compressed by `gzip -9`.
pub fn gzipped_len(bytes: &[u8]) -> Result<u64> {
    let mut child = Command::new("gzip")
        .args(["-9", "-c"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("run gzip")?;
    let mut stdin = child.stdin.take().context("gzip stdin")?;
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output()?;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("gzip writer panicked"))??;
    Ok(out.stdout.len() as u64)
}

pub fn run(cfg: &super::Config) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let b = served("bench-footprint");
    let pid = b.server_pid().context("server pid")?;
    settle(Duration::from_secs(1));
    let rss = rss_bytes(pid)? as f64 / MB;
    progress(format!("footprint: idle RSS {rss:.1} MB"));
    rows.push(
        Row::new(
            "footprint",
            "idle `berth serve` resident memory (VmRSS)",
            rss,
            "MB",
            Some(Goal::AtMost(30.0)),
        )
        .with_note("fresh home, one agent, 1 s after it answered"),
    );
    drop(b);

    // `berth` is the lean client; `berth-full`, next to it, the whole CLI and server.
    let lean = berth_bin();
    for (figure, bin) in [
        ("`berth` binary size (the lean client)", lean.clone()),
        (
            "`berth-full` binary size",
            lean.with_file_name("berth-full"),
        ),
    ] {
        let size = std::fs::metadata(&bin)
            .with_context(|| format!("stat {}", bin.display()))?
            .len() as f64;
        let linked = match elf_interpreter(&bin) {
            Some(true) => ", dynamically linked",
            Some(false) => ", statically linked",
            None => "",
        };
        let shown = bin.strip_prefix(&cfg.workspace).unwrap_or(&bin).display();
        rows.push(
            Row::new("footprint", figure, size / MB, "MB", None)
                .with_note(format!("{shown}{linked}")),
        );
    }

    let wasm = cfg.workspace.join("web/ui/pkg/berth_wasm_bg.wasm");
    match std::fs::read(&wasm) {
        Ok(bytes) => {
            let gz = gzipped_len(&bytes)? as f64;
            rows.push(Row::new(
                "footprint",
                "wasm bundle, raw",
                bytes.len() as f64 / 1024.0,
                "KB",
                None,
            ));
            rows.push(
                Row::new(
                    "footprint",
                    "wasm bundle, gzip -9",
                    gz / 1024.0,
                    "KB",
                    Some(Goal::AtMost(60.0)),
                )
                .with_note("budget from scripts/build-wasm.sh"),
            );
        }
        Err(e) => rows.push(Row::not_available(
            "footprint",
            "wasm bundle",
            &format!(
                "{} not readable ({e}); run scripts/build-wasm.sh",
                wasm.display()
            ),
        )),
    }
    Ok(rows)
}

/// Whether an ELF executable asks for a dynamic loader (a `PT_INTERP` program
/// header); `None` when `path` is not a 64-bit little-endian ELF file.
fn elf_interpreter(path: &std::path::Path) -> Option<bool> {
    use std::io::{Read, Seek, SeekFrom};
    const PT_INTERP: u32 = 3;
    let mut f = std::fs::File::open(path).ok()?;
    let mut head = [0u8; 64];
    f.read_exact(&mut head).ok()?;
    if &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return None;
    }
    let phoff = u64::from_le_bytes(head[0x20..0x28].try_into().ok()?);
    let phentsize = u64::from(u16::from_le_bytes(head[0x36..0x38].try_into().ok()?));
    let phnum = u16::from_le_bytes(head[0x38..0x3a].try_into().ok()?);
    let mut kind = [0u8; 4];
    for i in 0..u64::from(phnum) {
        f.seek(SeekFrom::Start(phoff + i * phentsize)).ok()?;
        f.read_exact(&mut kind).ok()?;
        if u32::from_le_bytes(kind) == PT_INTERP {
            return Some(true);
        }
    }
    Some(false)
}
