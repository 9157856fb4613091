//! The server's secrets: random tokens, the hashes the store keeps of them, and the
//! constant-time comparison a presented secret goes through. `serve.json`'s token,
//! members' tokens and daemons' tokens are all made, stored and checked here, the
//! same way.

use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{self, Read};
use subtle::ConstantTimeEq;

/// A fresh random token (256 bits, hex) for `serve.json`.
pub fn new_token() -> io::Result<String> {
    let mut bytes = [0u8; 32];
    File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(hex(&bytes))
}

/// Hex SHA-256 of a token: what the store keeps.
pub fn token_hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

/// Whether two secrets are equal, in constant time (the length is not secret).
pub fn same(a: impl AsRef<[u8]>, b: impl AsRef<[u8]>) -> bool {
    a.as_ref().ct_eq(b.as_ref()).into()
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    out
}
