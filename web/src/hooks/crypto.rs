//! The webhooks' cryptography: Slack's v0 signature, Lark's signature and its
//! AES-256-CBC payloads, and the strict base64 and hex they are carried in; and the
//! signature of the webhooks Berth sends itself ([`berth_signature`]).
//!
//! Every comparison of a secret or a signature is constant-time ([`crate::secret::same`]).

use aes::Aes256;
use cbc::cipher::block_padding::Pkcs7;
use cbc::cipher::{BlockModeDecrypt, BlockModeEncrypt, KeyIvInit};
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use crate::secret::same;

/// How far a signed request's timestamp may be from now, either way.
pub const MAX_SKEW_SECS: i64 = 300;

/// Why a request's authenticity could not be established.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the {0} header is missing")]
    MissingHeader(&'static str),
    #[error("the timestamp {0:?} is not a number of seconds")]
    BadTimestamp(String),
    #[error("the timestamp is {skew} s away from now (at most {MAX_SKEW_SECS} s allowed)")]
    Stale { skew: i64 },
    #[error("the signature does not match")]
    Mismatch,
    #[error("the verification token does not match")]
    TokenMismatch,
}

/// Checks a timestamp (seconds since the epoch) against `now`.
pub fn check_window(timestamp: &str, now: i64) -> Result<(), SignatureError> {
    let ts: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| SignatureError::BadTimestamp(timestamp.to_owned()))?;
    let skew = now.saturating_sub(ts).saturating_abs();
    if skew > MAX_SKEW_SECS {
        return Err(SignatureError::Stale { skew });
    }
    Ok(())
}

/// Slack's v0 signature: `v0=` + hex(HMAC-SHA256(secret, "v0:" + timestamp + ":" + body)).
pub fn slack_signature(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(b"v0:");
    mac.update(timestamp.as_bytes());
    mac.update(b":");
    mac.update(body);
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

/// The signature of Berth's own outgoing webhooks (`notify.webhook` of `berth serve`):
/// `sha256=` + hex(HMAC-SHA256(secret, timestamp + "." + body)), sent as
/// `X-Berth-Signature` beside `X-Berth-Timestamp`. The timestamp is inside what is
/// signed, so a receiver that keeps a window (as [`check_window`] does) refuses a
/// replayed request.
pub fn berth_signature(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Verifies a Slack request: the window first, then the signature, constant-time.
pub fn verify_slack(
    secret: &[u8],
    timestamp: &str,
    signature: &str,
    body: &[u8],
    now: i64,
) -> Result<(), SignatureError> {
    check_window(timestamp, now)?;
    check_signature(&slack_signature(secret, timestamp, body), signature.trim())
}

/// Lark's signature: hex(SHA-256(timestamp + nonce + encrypt_key + body)).
pub fn lark_signature(timestamp: &str, nonce: &str, encrypt_key: &str, body: &[u8]) -> String {
    let digest = Sha256::new()
        .chain_update(timestamp.as_bytes())
        .chain_update(nonce.as_bytes())
        .chain_update(encrypt_key.as_bytes())
        .chain_update(body)
        .finalize();
    hex::encode(digest)
}

/// Verifies a Lark request's signature (the window first), constant-time.
pub fn verify_lark(
    timestamp: &str,
    nonce: &str,
    signature: &str,
    encrypt_key: &str,
    body: &[u8],
    now: i64,
) -> Result<(), SignatureError> {
    check_window(timestamp, now)?;
    let given = signature.trim().to_ascii_lowercase();
    check_signature(&lark_signature(timestamp, nonce, encrypt_key, body), &given)
}

/// Whether the signature given is the one expected, constant-time.
fn check_signature(expected: &str, given: &str) -> Result<(), SignatureError> {
    if same(expected, given) {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

/// Why an encrypted Lark payload could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecryptError {
    #[error("the payload is not valid base64")]
    Base64,
    #[error("the payload is shorter than an IV and one block, or not whole blocks")]
    Length,
    #[error("the payload does not decrypt with the configured key (bad padding)")]
    Padding,
}

fn lark_key(encrypt_key: &str) -> [u8; 32] {
    Sha256::digest(encrypt_key.as_bytes()).into()
}

/// Decrypts Lark's `{"encrypt": …}`: base64 of IV (16 bytes) + AES-256-CBC ciphertext
/// with PKCS#7 padding, under the key SHA-256(encrypt_key).
pub fn lark_decrypt(encrypt_key: &str, data: &str) -> Result<Vec<u8>, DecryptError> {
    let raw = base64_decode(data.trim()).ok_or(DecryptError::Base64)?;
    if raw.len() < 32 || !raw.len().is_multiple_of(16) {
        return Err(DecryptError::Length);
    }
    let (iv, ciphertext) = raw.split_at(16);
    let mut buf = ciphertext.to_vec();
    let key = lark_key(encrypt_key);
    let dec =
        cbc::Decryptor::<Aes256>::new_from_slices(&key, iv).map_err(|_| DecryptError::Length)?;
    let len = dec
        .decrypt_padded::<Pkcs7>(&mut buf)
        .map_err(|_| DecryptError::Padding)?
        .len();
    buf.truncate(len);
    Ok(buf)
}

/// Encrypts like Lark does (for tests and tools): base64(IV + AES-256-CBC(plaintext)).
pub fn lark_encrypt(encrypt_key: &str, iv: [u8; 16], plaintext: &[u8]) -> String {
    let key = lark_key(encrypt_key);
    let mut buf = plaintext.to_vec();
    buf.resize(plaintext.len() + 16 - plaintext.len() % 16, 0);
    let enc = cbc::Encryptor::<Aes256>::new_from_slices(&key, &iv)
        .unwrap_or_else(|_| unreachable!("key and IV have the right lengths"));
    let ct = enc
        .encrypt_padded::<Pkcs7>(&mut buf, plaintext.len())
        .unwrap_or_else(|_| unreachable!("the buffer has room for the padding"))
        .to_vec();
    let mut out = iv.to_vec();
    out.extend_from_slice(&ct);
    base64_encode(&out)
}

/// Strict standard base64 (RFC 4648 §4) with padding: whole quads only, `=` only at
/// the end, no whitespace, and the unused bits of the last quad zero. `None` for
/// anything else.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// Standard base64 with padding.
pub fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A receiver computes the same with any HMAC library (the vector is Python's
    /// `hmac.new(b"shh", b"1700000000.{...}", hashlib.sha256).hexdigest()`).
    #[test]
    fn berth_signature_is_hmac_sha256_of_timestamp_dot_body() {
        assert_eq!(
            berth_signature(b"shh", "1700000000", br#"{"event":"task_finished"}"#),
            "sha256=4f3cd9d0a0f061135dcff91f69f9e536d5f1c37d426b0171b97e24eb50d7f980"
        );
    }

    #[test]
    fn base64_round_trips_and_matches_rfc4648_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(base64_encode(plain.as_bytes()), encoded);
            assert_eq!(base64_decode(encoded), Some(plain.as_bytes().to_vec()));
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(base64_decode(&base64_encode(&all)), Some(all));
    }

    #[test]
    fn base64_refuses_anything_loose() {
        for bad in [
            "Zg", "Zg=", "Zg===", "Z===", "Zm9v\n", " Zm9v", "Zg==Zm9v", "Zh==", "Zm9=", "Zm-v",
            "Zm_v", "Zm9v====",
        ] {
            assert_eq!(base64_decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn slack_signature_matches_slacks_documented_example() {
        // From Slack's "Verifying requests from Slack" guide.
        let secret = b"8f742231b10e8888abcd99yyyzzz85a5";
        let ts = "1531420618";
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let sig = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        assert_eq!(slack_signature(secret, ts, body), sig);
        assert_eq!(verify_slack(secret, ts, sig, body, 1_531_420_618), Ok(()));
        assert_eq!(
            verify_slack(secret, ts, sig, b"tampered", 1_531_420_618),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify_slack(secret, ts, sig, body, 1_531_420_618 + 301),
            Err(SignatureError::Stale { skew: 301 })
        );
        assert_eq!(
            verify_slack(secret, ts, sig, body, 1_531_420_618 - 301),
            Err(SignatureError::Stale { skew: 301 })
        );
        assert_eq!(verify_slack(secret, ts, sig, body, 1_531_420_918), Ok(()));
    }

    #[test]
    fn lark_payloads_decrypt_and_tampering_is_caught() {
        let key = "test key";
        let text = br#"{"challenge":"abc","token":"t","type":"url_verification"}"#;
        let enc = lark_encrypt(key, [7; 16], text);
        assert_eq!(lark_decrypt(key, &enc), Ok(text.to_vec()));
        assert_eq!(lark_decrypt(key, "not base64!"), Err(DecryptError::Base64));
        assert_eq!(
            lark_decrypt(key, &base64_encode(&[0; 20])),
            Err(DecryptError::Length)
        );
        assert!(lark_decrypt("another key", &enc) != Ok(text.to_vec()));
    }

    #[test]
    fn lark_decrypts_its_documented_sample() {
        // From Lark's event subscription guide: key "test key", plaintext "hello world".
        let data = "P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=";
        assert_eq!(lark_decrypt("test key", data), Ok(b"hello world".to_vec()));
    }

    #[test]
    fn lark_signature_is_sha256_hex_of_the_concatenation() {
        let sig = lark_signature("1", "n", "k", b"{}");
        assert_eq!(sig, hex::encode(Sha256::digest(b"1nk{}")));
        assert_eq!(verify_lark("1", "n", &sig, "k", b"{}", 1), Ok(()));
        assert_eq!(
            verify_lark("1", "n", &sig, "k", b"{ }", 1),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify_lark("x", "n", &sig, "k", b"{}", 1),
            Err(SignatureError::BadTimestamp("x".into()))
        );
    }
}
