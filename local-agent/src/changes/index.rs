//! Git's index file, as far as the change record needs it: read (versions 2 to 4, a
//! repository's own or the shadow's), written back (version 2, no extensions), and the
//! trees its entries make, packed in one go.
//!
//! A repository's index is input from the directory: it is parsed with every length
//! checked against the bytes there are, its checksum verified, and anything this
//! reader does not fully understand (a split index, a stage, an unknown flag) is
//! refused rather than guessed at.

use sha1::{Digest, Sha1};

/// The largest index read: a million entries take about 90 MB.
pub(super) const MAX_INDEX_BYTES: u64 = 256 * 1024 * 1024;

const HEADER: usize = 12;
const FIXED: usize = 62;
const OID: usize = 20;

/// One entry: the stat data git compares (as stored), the blob id, and the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    /// ctime, mtime (seconds, nanoseconds), dev, ino, mode, uid, gid, size: ten
    /// big-endian 32-bit words.
    pub(super) stat: [u8; 40],
    pub(super) oid: [u8; OID],
    /// The stage (0 unless the path is in conflict).
    pub(super) stage: u8,
    /// `skip-worktree` (sparse checkout) or `intent-to-add`.
    pub(super) virtual_entry: bool,
    pub(super) name: Vec<u8>,
}

impl Entry {
    fn word(&self, i: usize) -> u32 {
        u32::from_be_bytes([
            self.stat[4 * i],
            self.stat[4 * i + 1],
            self.stat[4 * i + 2],
            self.stat[4 * i + 3],
        ])
    }

    pub(super) fn mode(&self) -> u32 {
        self.word(6)
    }

    pub(super) fn size(&self) -> u32 {
        self.word(9)
    }
}

/// Why an index was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum IndexError {
    #[error("it is not a git index (no DIRC header)")]
    NotAnIndex,
    #[error("its version {0} is not one this reader knows")]
    Version(u32),
    #[error("it is truncated")]
    Truncated,
    #[error("its checksum does not match its contents")]
    Checksum,
    #[error("its entries are out of order")]
    Order,
    #[error("it is a split index (its entries live in another file)")]
    Split,
    #[error("an entry's flags are not valid")]
    Flags,
}

/// A parsed index: its entries, in the index's own order (by path, then stage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Index {
    pub(super) version: u32,
    pub(super) entries: Vec<Entry>,
}

fn be32(b: &[u8], at: usize) -> Result<u32, IndexError> {
    let s = b.get(at..at + 4).ok_or(IndexError::Truncated)?;
    Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

fn be16(b: &[u8], at: usize) -> Result<u16, IndexError> {
    let s = b.get(at..at + 2).ok_or(IndexError::Truncated)?;
    Ok(u16::from_be_bytes([s[0], s[1]]))
}

/// Git's offset varint (version 4's prefix lengths): 7 bits a byte, most significant
/// first, each continuation adding one.
fn varint(b: &[u8], at: &mut usize) -> Result<usize, IndexError> {
    let mut c = *b.get(*at).ok_or(IndexError::Truncated)?;
    *at += 1;
    let mut val = usize::from(c & 0x7f);
    while c & 0x80 != 0 {
        c = *b.get(*at).ok_or(IndexError::Truncated)?;
        *at += 1;
        val = val
            .checked_add(1)
            .and_then(|v| v.checked_mul(128))
            .and_then(|v| v.checked_add(usize::from(c & 0x7f)))
            .ok_or(IndexError::Truncated)?;
    }
    Ok(val)
}

/// Reads an index file's bytes.
pub(super) fn parse(bytes: &[u8]) -> Result<Index, IndexError> {
    if bytes.len() < HEADER + OID {
        return Err(IndexError::Truncated);
    }
    if &bytes[..4] != b"DIRC" {
        return Err(IndexError::NotAnIndex);
    }
    let version = be32(bytes, 4)?;
    if !(2..=4).contains(&version) {
        return Err(IndexError::Version(version));
    }
    let count = be32(bytes, 8)? as usize;
    let end = bytes.len() - OID;
    let trailer = &bytes[end..];
    // `index.skipHash` writes zeros instead of the checksum.
    if trailer.iter().any(|b| *b != 0) && Sha1::digest(&bytes[..end]).as_slice() != trailer {
        return Err(IndexError::Checksum);
    }
    let body = &bytes[..end];
    // Every entry takes at least its fixed part and one byte of name.
    if count > body.len() / (FIXED + 1) {
        return Err(IndexError::Truncated);
    }
    let mut entries: Vec<Entry> = Vec::with_capacity(count);
    let mut at = HEADER;
    let mut previous: Vec<u8> = Vec::new();
    for _ in 0..count {
        let start = at;
        let fixed = body.get(at..at + FIXED).ok_or(IndexError::Truncated)?;
        let mut stat = [0u8; 40];
        stat.copy_from_slice(&fixed[..40]);
        let mut oid = [0u8; OID];
        oid.copy_from_slice(&fixed[40..60]);
        let flags = be16(body, at + 60)?;
        at += FIXED;
        let mut extended = 0u16;
        if flags & 0x4000 != 0 {
            if version < 3 {
                return Err(IndexError::Flags);
            }
            extended = be16(body, at)?;
            at += 2;
            // skip-worktree, intent-to-add; the rest is reserved.
            if extended & !0x6000 != 0 {
                return Err(IndexError::Flags);
            }
        }
        // The "assume valid" bit: git then trusts the entry without a look at the
        // file, which a copy must not.
        if flags & 0x8000 != 0 {
            return Err(IndexError::Flags);
        }
        let stage = ((flags >> 12) & 3) as u8;
        let name = if version == 4 {
            let strip = varint(body, &mut at)?;
            if strip > previous.len() {
                return Err(IndexError::Truncated);
            }
            let rest = body.get(at..).ok_or(IndexError::Truncated)?;
            let nul = rest
                .iter()
                .position(|b| *b == 0)
                .ok_or(IndexError::Truncated)?;
            let mut name = previous[..previous.len() - strip].to_vec();
            name.extend_from_slice(&rest[..nul]);
            at += nul + 1;
            name
        } else {
            let rest = body.get(at..).ok_or(IndexError::Truncated)?;
            let len = usize::from(flags & 0x0fff);
            let len = if len == 0x0fff {
                rest.iter()
                    .position(|b| *b == 0)
                    .ok_or(IndexError::Truncated)?
            } else {
                len
            };
            if rest.get(len) != Some(&0) {
                return Err(IndexError::Truncated);
            }
            let name = rest[..len].to_vec();
            // Padded with NULs to a multiple of eight from the entry's start.
            at = start + ((at - start + len + 8) & !7);
            if at > body.len() {
                return Err(IndexError::Truncated);
            }
            name
        };
        if name.is_empty() {
            return Err(IndexError::Order);
        }
        if let Some(last) = entries.last() {
            let ordered = match last.name.as_slice().cmp(&name) {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Equal => last.stage < stage,
                std::cmp::Ordering::Greater => false,
            };
            if !ordered {
                return Err(IndexError::Order);
            }
        }
        previous.clone_from(&name);
        entries.push(Entry {
            stat,
            oid,
            stage,
            virtual_entry: extended != 0,
            name,
        });
    }
    // Extensions: each a signature and a length. A split index keeps its entries
    // elsewhere ("link"): those read here would be only part of them.
    while at < end {
        let sig = body.get(at..at + 4).ok_or(IndexError::Truncated)?;
        if sig == b"link" {
            return Err(IndexError::Split);
        }
        let len = be32(body, at + 4)? as usize;
        at = at
            .checked_add(8 + len)
            .filter(|a| *a <= end)
            .ok_or(IndexError::Truncated)?;
    }
    Ok(Index { version, entries })
}

/// An index of version 2 with these entries (stage 0, no extensions), checksummed.
pub(super) fn write(entries: &[Entry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + entries.len() * 96 + OID);
    out.extend_from_slice(b"DIRC");
    out.extend_from_slice(&2u32.to_be_bytes());
    out.extend_from_slice(&(entries.len() as u32).to_be_bytes());
    for e in entries {
        let start = out.len();
        out.extend_from_slice(&e.stat);
        out.extend_from_slice(&e.oid);
        let len = u16::try_from(e.name.len().min(0x0fff)).unwrap_or(0x0fff);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&e.name);
        let padded = (FIXED + e.name.len() + 8) & !7;
        out.resize(start + padded, 0);
    }
    let sum = Sha1::digest(&out);
    out.extend_from_slice(sum.as_slice());
    out
}

/// A tree object: its id and its content.
pub(super) type Tree = ([u8; OID], Vec<u8>);

fn object_id(kind: &str, content: &[u8]) -> [u8; OID] {
    let mut h = Sha1::new();
    h.update(format!("{kind} {}\0", content.len()).as_bytes());
    h.update(content);
    let mut oid = [0u8; OID];
    oid.copy_from_slice(h.finalize().as_slice());
    oid
}

/// Every tree the entries make (stage-0 entries in index order, which is also the
/// order git sorts a tree's entries in), the root last. `None` for an entry whose
/// mode or path no tree can hold.
pub(super) fn trees(entries: &[Entry]) -> Option<Vec<Tree>> {
    let mut out = Vec::new();
    build(entries, 0, &mut out)?;
    Some(out)
}

fn build(entries: &[Entry], base: usize, out: &mut Vec<Tree>) -> Option<[u8; OID]> {
    let mut content = Vec::new();
    let mut i = 0;
    while i < entries.len() {
        let rest = entries[i].name.get(base..)?;
        if let Some(slash) = rest.iter().position(|b| *b == b'/') {
            let dir = &rest[..slash];
            if dir.is_empty() {
                return None;
            }
            let mut j = i;
            while j < entries.len()
                && entries[j]
                    .name
                    .get(base..)
                    .is_some_and(|r| r.len() > slash && &r[..slash] == dir && r[slash] == b'/')
            {
                j += 1;
            }
            let oid = build(&entries[i..j], base + slash + 1, out)?;
            content.extend_from_slice(b"40000 ");
            content.extend_from_slice(dir);
            content.push(0);
            content.extend_from_slice(&oid);
            i = j;
        } else {
            let e = &entries[i];
            let mode: &[u8] = match e.mode() {
                0o100644 => b"100644",
                0o100755 => b"100755",
                0o120000 => b"120000",
                0o160000 => b"160000",
                _ => return None,
            };
            if rest.is_empty() || e.stage != 0 {
                return None;
            }
            content.extend_from_slice(mode);
            content.push(b' ');
            content.extend_from_slice(rest);
            content.push(0);
            content.extend_from_slice(&e.oid);
            i += 1;
        }
    }
    let oid = object_id("tree", &content);
    out.push((oid, content));
    Some(oid)
}

/// A pack entry's object type: a tree.
pub(super) const TREE: u8 = 2;
/// A pack entry's object type: a blob.
pub(super) const BLOB: u8 = 3;

/// An object's entry in a pack: its type and size (four bits, then seven at a time),
/// then its bytes as stored deflate blocks.
pub(super) fn pack_entry(kind: u8, content: &[u8], out: &mut Vec<u8>) {
    let mut size = content.len();
    let mut byte = (kind << 4) | (size & 0x0f) as u8;
    size >>= 4;
    while size > 0 {
        out.push(byte | 0x80);
        byte = (size & 0x7f) as u8;
        size >>= 7;
    }
    out.push(byte);
    stored_zlib(content, out);
}

/// A pack (version 2) of these trees, for `git index-pack --stdin`: each object
/// deflated as stored blocks (trees are small, and time is what counts here).
pub(super) fn pack(trees: &[Tree]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"PACK");
    out.extend_from_slice(&2u32.to_be_bytes());
    out.extend_from_slice(&(trees.len() as u32).to_be_bytes());
    for (_, content) in trees {
        pack_entry(TREE, content, &mut out);
    }
    let sum = Sha1::digest(&out);
    out.extend_from_slice(sum.as_slice());
    out
}

/// `data` as a zlib stream of uncompressed ("stored") deflate blocks.
fn stored_zlib(data: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&[0x78, 0x01]);
    let mut chunks = data.chunks(0xffff).peekable();
    if chunks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
    }
    while let Some(chunk) = chunks.next() {
        out.push(u8::from(chunks.peek().is_none()));
        let len = chunk.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    // Adler-32, reduced once per 5,552 bytes (the most that cannot overflow).
    let (mut a, mut b) = (1u32, 0u32);
    for block in data.chunks(5552) {
        for byte in block {
            a += u32::from(*byte);
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    out.extend_from_slice(&((b << 16) | a).to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, mode: u32, size: u32, fill: u8) -> Entry {
        let mut stat = [fill; 40];
        stat[24..28].copy_from_slice(&mode.to_be_bytes());
        stat[36..40].copy_from_slice(&size.to_be_bytes());
        Entry {
            stat,
            oid: [fill; OID],
            stage: 0,
            virtual_entry: false,
            name: name.as_bytes().to_vec(),
        }
    }

    #[test]
    fn written_indexes_read_back() {
        let long = "d/".repeat(2100) + "f";
        let entries = vec![
            entry("a-b", 0o100644, 3, 1),
            entry("a/c", 0o100755, 4, 2),
            entry("a0", 0o120000, 5, 3),
            entry(&long, 0o100644, 6, 4),
        ];
        let bytes = write(&entries);
        let read = parse(&bytes).unwrap();
        assert_eq!(read.version, 2);
        assert_eq!(read.entries, entries);
        assert_eq!(read.entries[1].mode(), 0o100755);
        assert_eq!(read.entries[2].size(), 5);
    }

    #[test]
    fn damage_is_refused_never_guessed() {
        let bytes = write(&[entry("x", 0o100644, 1, 7), entry("y", 0o100644, 1, 8)]);
        // Any byte flipped: the checksum.
        for at in 0..bytes.len() - OID {
            let mut b = bytes.clone();
            b[at] ^= 0x40;
            assert!(parse(&b).is_err(), "a flip at {at} was read");
        }
        // Every truncation, with and without a valid checksum.
        for len in 0..bytes.len() {
            let mut b = bytes[..len].to_vec();
            assert!(parse(&b).is_err(), "truncated at {len} was read");
            b.extend_from_slice(&[0u8; OID]);
            // Cut just before the checksum, it is a whole index without one.
            if len != bytes.len() - OID {
                assert!(parse(&b).is_err(), "truncated at {len} (unsummed) was read");
            }
        }
        // Out of order.
        let b = write(&[entry("y", 0o100644, 1, 7), entry("x", 0o100644, 1, 8)]);
        assert_eq!(parse(&b), Err(IndexError::Order));
        // A split index.
        let mut b = write(&[entry("x", 0o100644, 1, 7)]);
        b.truncate(b.len() - OID);
        b.extend_from_slice(b"link");
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(&[0u8; OID]);
        assert_eq!(parse(&b), Err(IndexError::Split));
    }

    /// Git's own index, of every version, reads as `git ls-files --stage` lists it,
    /// and the trees built from it are the ones `git write-tree` writes.
    #[test]
    fn reads_what_git_writes_and_builds_its_trees() {
        let dir = berth_test_support::TempDir::new("berth-index");
        let root = dir.path();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .args(args)
                .current_dir(root)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .output()
                .unwrap();
            assert!(out.status.success(), "{args:?}: {out:?}");
            String::from_utf8(out.stdout).unwrap()
        };
        git(&["init", "-q"]);
        for p in ["a-b", "a/c", "a/d/e", "a0", "z z", "ü/ñ"] {
            let path = root.join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, p).unwrap();
        }
        std::os::unix::fs::symlink("a0", root.join("link")).unwrap();
        git(&["add", "-A"]);
        for version in ["2", "3", "4"] {
            git(&["update-index", "--index-version", version]);
            let bytes = std::fs::read(root.join(".git/index")).unwrap();
            let index = parse(&bytes).unwrap();
            // Asked for 3, git writes 2 when no entry needs the extended flags.
            let expected = if version == "3" { "2" } else { version };
            assert_eq!(index.version.to_string(), expected);
            let listed: Vec<String> = index
                .entries
                .iter()
                .map(|e| {
                    format!(
                        "{:o} {} 0\t{}",
                        e.mode(),
                        hex::encode(e.oid),
                        String::from_utf8_lossy(&e.name)
                    )
                })
                .collect();
            let stage = git(&["-c", "core.quotepath=false", "ls-files", "--stage"]);
            assert_eq!(listed, stage.lines().collect::<Vec<_>>());
            let built = trees(&index.entries).unwrap();
            let root_tree = hex::encode(built.last().unwrap().0);
            assert_eq!(root_tree, git(&["write-tree"]).trim());
        }
        // A pack of them is one git takes.
        let bytes = std::fs::read(root.join(".git/index")).unwrap();
        let built = trees(&parse(&bytes).unwrap().entries).unwrap();
        let mut child = std::process::Command::new("git")
            .args(["index-pack", "--stdin"])
            .current_dir(root)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(&pack(&built))
            .unwrap();
        assert!(child.wait_with_output().unwrap().status.success());
        for (oid, content) in &built {
            let out = std::process::Command::new("git")
                .args(["cat-file", "tree", &hex::encode(oid)])
                .current_dir(root)
                .output()
                .unwrap();
            assert_eq!(&out.stdout, content);
        }
    }
}
