//! The first record of a plain directory, read in parallel (issue 57).
//!
//! A directory with no git index to seed from has every file read once at its first
//! record. `git update-index` does that on one thread, a file at a time (22 s for
//! 100,000 small files here). This reads and hashes them on every core instead, writes
//! the blobs straight into one pack (its `.idx` too) and the shadow's index with each
//! file's stat data, exactly as git would have: the tree is the one git's own scan
//! records (a test compares them), and the next record finds every file stat-clean.
//!
//! Memory stays bounded: a worker holds one file at a time (files over the record's
//! size cap are never read), and the pack goes to disk as it grows. Anything unusual —
//! a `.gitattributes` (git may convert content on the way in), a nested repository, a
//! special file, a file that changes while read — returns an error, and the caller
//! lets git do it as before.

use super::index::{self, Entry};
use super::progress::Progress;
use super::shadow::Shadow;
use sha1::{Digest, Sha1};
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The fewest files worth the parallel read: below it, git's one call is as quick.
pub(super) const FROM: usize = 2_000;

#[cfg(test)]
thread_local! {
    /// Tests only: git's own read, for the same record to compare with.
    pub(super) static BY_GIT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Tests only: how many first records this thread read here.
    pub(super) static READ_HERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Whether a first record of `n` files is read here rather than by git.
pub(super) fn worth(n: usize) -> bool {
    #[cfg(test)]
    if BY_GIT.with(std::cell::Cell::get) {
        return false;
    }
    n >= FROM
}

/// One object in the pack being written: its id, where it starts, its CRC-32.
type Placed = ([u8; 20], u64, u32);

/// The pack being written, shared by the workers.
struct PackOut {
    file: BufWriter<File>,
    at: u64,
    seen: std::collections::HashSet<[u8; 20]>,
    placed: Vec<Placed>,
}

impl Shadow {
    /// Reads `paths` (sorted, relative to the work tree, none recorded yet) on every
    /// core into one pack and writes the shadow's index with them. `Err` says why not;
    /// nothing is then left behind but an unused temporary pack.
    pub(super) fn check_in(
        &self,
        paths: &[&[u8]],
        limit: u64,
        progress: &Progress,
    ) -> Result<(), String> {
        if let Some(p) = paths
            .iter()
            .find(|p| p.rsplit(|b| *b == b'/').next() == Some(b".gitattributes".as_slice()))
        {
            return Err(format!(
                "{} may make git convert content",
                String::from_utf8_lossy(p)
            ));
        }
        let pack_dir = self.git_dir.join("objects").join("pack");
        std::fs::create_dir_all(&pack_dir).map_err(|e| e.to_string())?;
        let tmp = pack_dir.join(format!("tmp_berth_{}.pack", std::process::id()));
        let result = self.check_in_to(paths, limit, progress, &pack_dir, &tmp);
        let _ = std::fs::remove_file(&tmp);
        #[cfg(test)]
        if result.is_ok() {
            READ_HERE.with(|n| n.set(n.get() + 1));
        }
        result
    }

    fn check_in_to(
        &self,
        paths: &[&[u8]],
        limit: u64,
        progress: &Progress,
        pack_dir: &Path,
        tmp: &Path,
    ) -> Result<(), String> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(tmp)
            .map_err(|e| e.to_string())?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        // The count is written at the end, once duplicates are known.
        out.write_all(b"PACK\0\0\0\x02\0\0\0\0")
            .map_err(|e| e.to_string())?;
        let pack = Mutex::new(PackOut {
            file: out,
            at: 12,
            seen: std::collections::HashSet::new(),
            placed: Vec::new(),
        });
        let next = AtomicUsize::new(0);
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(8));
        let entries: Vec<Result<Vec<(usize, Entry)>, String>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    s.spawn(|| {
                        let mut mine = Vec::new();
                        let mut buf = Vec::new();
                        let mut packed = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(path) = paths.get(i) else {
                                return Ok(mine);
                            };
                            let entry = self.read_one(path, limit, &mut buf)?;
                            packed.clear();
                            index::pack_entry(index::BLOB, &buf, &mut packed);
                            let crc = crc32(&packed);
                            {
                                let mut p = pack.lock().map_err(|_| "a worker panicked")?;
                                if p.seen.insert(entry.oid) {
                                    let at = p.at;
                                    p.file.write_all(&packed).map_err(|e| e.to_string())?;
                                    p.at += packed.len() as u64;
                                    p.placed.push((entry.oid, at, crc));
                                }
                            }
                            progress.add(1);
                            mine.push((i, entry));
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("a worker panicked".to_owned()))
                })
                .collect()
        });
        let mut all = Vec::with_capacity(paths.len());
        for part in entries {
            all.extend(part?);
        }
        all.sort_by_key(|(i, _)| *i);
        let entries: Vec<Entry> = all.into_iter().map(|(_, e)| e).collect();
        let PackOut { file, placed, .. } = pack.into_inner().map_err(|_| "a worker panicked")?;
        let mut file = file.into_inner().map_err(|e| e.to_string())?;
        let count = u32::try_from(placed.len()).map_err(|_| "too many objects for one pack")?;
        file.seek(SeekFrom::Start(8)).map_err(|e| e.to_string())?;
        file.write_all(&count.to_be_bytes())
            .map_err(|e| e.to_string())?;
        // The pack's checksum covers every byte, the count included: read it back.
        file.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
        let mut hasher = Sha1::new();
        let mut chunk = vec![0u8; 1 << 20];
        loop {
            let n = file.read(&mut chunk).map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            hasher.update(&chunk[..n]);
        }
        let mut sum = [0u8; 20];
        sum.copy_from_slice(hasher.finalize().as_slice());
        file.write_all(&sum).map_err(|e| e.to_string())?;
        file.sync_all().map_err(|e| e.to_string())?;
        drop(file);
        let name = hex(&sum);
        let idx = pack_index(placed, &sum);
        let final_pack = pack_dir.join(format!("pack-{name}.pack"));
        std::fs::rename(tmp, &final_pack).map_err(|e| e.to_string())?;
        let idx_tmp = pack_dir.join(format!("tmp_berth_{}.idx", std::process::id()));
        std::fs::write(&idx_tmp, idx).map_err(|e| e.to_string())?;
        std::fs::rename(&idx_tmp, pack_dir.join(format!("pack-{name}.idx")))
            .map_err(|e| e.to_string())?;
        let index_tmp = self.git_dir.join("index.berth-tmp");
        std::fs::write(&index_tmp, index::write(&entries)).map_err(|e| e.to_string())?;
        std::fs::rename(&index_tmp, self.git_dir.join("index")).map_err(|e| e.to_string())?;
        Ok(())
    }

    /// One path's index entry, its blob's bytes left in `buf`: a regular file's content
    /// or a symbolic link's target, read without following a link.
    fn read_one(&self, path: &[u8], limit: u64, buf: &mut Vec<u8>) -> Result<Entry, String> {
        let full = self.work_tree.join(std::ffi::OsStr::from_bytes(path));
        let shown = || String::from_utf8_lossy(path).into_owned();
        let md = std::fs::symlink_metadata(&full).map_err(|e| format!("{}: {e}", shown()))?;
        buf.clear();
        let (md, mode) = if md.file_type().is_symlink() {
            let target = std::fs::read_link(&full).map_err(|e| format!("{}: {e}", shown()))?;
            buf.extend_from_slice(target.as_os_str().as_bytes());
            (md, 0o120000)
        } else if md.is_file() {
            let mut f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc_flags())
                .open(&full)
                .map_err(|e| format!("{}: {e}", shown()))?;
            let opened = f.metadata().map_err(|e| e.to_string())?;
            if !opened.is_file() || opened.ino() != md.ino() || opened.len() > limit {
                return Err(format!("{} changed while it was read", shown()));
            }
            f.read_to_end(buf)
                .map_err(|e| format!("{}: {e}", shown()))?;
            let after = f.metadata().map_err(|e| e.to_string())?;
            if buf.len() as u64 != after.len()
                || after.mtime_nsec() != opened.mtime_nsec()
                || after.mtime() != opened.mtime()
            {
                return Err(format!("{} changed while it was read", shown()));
            }
            let mode = if opened.mode() & 0o100 != 0 {
                0o100755
            } else {
                0o100644
            };
            (opened, mode)
        } else {
            return Err(format!("{} is not a file git records here", shown()));
        };
        let mut stat = [0u8; 40];
        // As git keeps them: each value cut to 32 bits, big-endian.
        let words = [
            md.ctime() as u32,
            md.ctime_nsec() as u32,
            md.mtime() as u32,
            md.mtime_nsec() as u32,
            md.dev() as u32,
            md.ino() as u32,
            mode,
            md.uid(),
            md.gid(),
            md.size() as u32,
        ];
        for (i, w) in words.iter().enumerate() {
            stat[4 * i..4 * i + 4].copy_from_slice(&w.to_be_bytes());
        }
        let mut h = Sha1::new();
        h.update(format!("blob {}\0", buf.len()).as_bytes());
        h.update(&buf[..]);
        let mut oid = [0u8; 20];
        oid.copy_from_slice(h.finalize().as_slice());
        Ok(Entry {
            stat,
            oid,
            stage: 0,
            virtual_entry: false,
            name: path.to_vec(),
        })
    }
}

/// `O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC`: never a link's target, never a wait on a
/// FIFO swapped in after the check.
fn libc_flags() -> i32 {
    use rustix::fs::OFlags;
    (OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC).bits() as i32
}

/// A version 2 pack index of `placed`, for the pack whose checksum is `pack_sum`.
fn pack_index(mut placed: Vec<Placed>, pack_sum: &[u8; 20]) -> Vec<u8> {
    placed.sort_by_key(|a| a.0);
    let mut out = Vec::with_capacity(8 + 1024 + placed.len() * 28 + 40);
    out.extend_from_slice(&[0xff, b't', b'O', b'c', 0, 0, 0, 2]);
    let mut fanout = [0u32; 256];
    for (oid, _, _) in &placed {
        fanout[oid[0] as usize] += 1;
    }
    let mut total = 0u32;
    for n in fanout {
        total += n;
        out.extend_from_slice(&total.to_be_bytes());
    }
    for (oid, _, _) in &placed {
        out.extend_from_slice(oid);
    }
    for (_, _, crc) in &placed {
        out.extend_from_slice(&crc.to_be_bytes());
    }
    let mut large = Vec::new();
    for (_, at, _) in &placed {
        match u32::try_from(*at) {
            Ok(small) if small < 0x8000_0000 => out.extend_from_slice(&small.to_be_bytes()),
            _ => {
                let i = 0x8000_0000u32 | large.len() as u32;
                out.extend_from_slice(&i.to_be_bytes());
                large.push(*at);
            }
        }
    }
    for at in large {
        out.extend_from_slice(&at.to_be_bytes());
    }
    out.extend_from_slice(pack_sum);
    let sum = Sha1::digest(&out);
    out.extend_from_slice(sum.as_slice());
    out
}

/// CRC-32 (IEEE), as a pack index keeps for each object.
fn crc32(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, slot) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
            *slot = c;
        }
        t
    });
    let mut c = !0u32;
    for b in data {
        c = table[((c ^ u32::from(*b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_is_ieees() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }
}
