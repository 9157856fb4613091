//! The server's secrets: random tokens, the hashes the store keeps of them, and the
//! constant-time comparison a presented secret goes through. `serve.json`'s token,
//! members' tokens and daemons' tokens are all made, stored and checked here, the
//! same way.

use sha2::{Digest, Sha256};
use std::io;
use subtle::ConstantTimeEq;

/// A fresh random token (256 bits from the OS, hex) for `serve.json`, a member or a
/// daemon.
pub fn new_token() -> io::Result<String> {
    let mut bytes = [0u8; 32];
    random(&mut bytes)?;
    Ok(hex::encode(bytes))
}

/// Whether `text` has the shape [`new_token`] gives: 64 lowercase hex digits.
pub fn is_token(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `buf` filled from the operating system's random source.
pub fn random(buf: &mut [u8]) -> io::Result<()> {
    getrandom::fill(buf).map_err(|e| io::Error::other(format!("no randomness from the OS: {e}")))
}

/// Hex SHA-256 of a token: what the store keeps.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Whether two secrets are equal, in constant time (the length is not secret).
pub fn same(a: impl AsRef<[u8]>, b: impl AsRef<[u8]>) -> bool {
    a.as_ref().ct_eq(b.as_ref()).into()
}
