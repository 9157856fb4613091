//! Fuzzes the webhooks' intake: Slack's v0 signature, Lark's signature, Lark's
//! AES-256-CBC `encrypt` payloads, the URL challenges and the events' JSON, through
//! `hooks::read_request`, the pure function both handlers call before touching the
//! store. No input may panic it, nothing unsigned may get past Slack's check, and no
//! unsigned Lark event may become a message while an encrypt key is configured.
//!
//! The input is split so the fuzzer reaches the code behind the signatures:
//!
//! | bytes | meaning |
//! |---|---|
//! | 0 | flags: see the `FLAG_*` constants |
//! | 1–2 | the timestamp's distance from now, seconds (i16, little-endian) |
//! | 3 | `n`, the length of the next field |
//! | 4 .. 4+n | the signature sent when not signing correctly, or else the nonce |
//! | rest | the body (for `FLAG_ENCRYPT`, the plaintext put into `{"encrypt": …}`) |
//!
//! With `FLAG_SIGN` the target signs the body itself, so about half the inputs are
//! authentic and their JSON is read.
#![no_main]

use berth_web::api::ApiError;
use berth_web::hooks::{
    ChannelConfig, Intake, LarkConfig, Platform, Secret, SlackConfig, Thread, crypto, read_request,
};
use http::{HeaderMap, HeaderName, HeaderValue};
use libfuzzer_sys::fuzz_target;

/// Lark instead of Slack.
const FLAG_LARK: u8 = 1;
/// Sign the request correctly.
const FLAG_SIGN: u8 = 1 << 1;
/// Lark: send the body encrypted, as `{"encrypt": …}`.
const FLAG_ENCRYPT: u8 = 1 << 2;
/// Lark: configure the verification token.
const FLAG_TOKEN: u8 = 1 << 3;
/// Lark: configure the encrypt key.
const FLAG_KEY: u8 = 1 << 4;
/// Leave the timestamp header out.
const FLAG_NO_TIMESTAMP: u8 = 1 << 5;
/// Leave the nonce header out (Lark).
const FLAG_NO_NONCE: u8 = 1 << 6;
/// Leave the signature header out.
const FLAG_NO_SIGNATURE: u8 = 1 << 7;

const NOW: i64 = 1_700_000_000;
const SLACK_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
const LARK_TOKEN: &str = "lark-verification-token";
const LARK_KEY: &str = "lark encrypt key";

fn config(flags: u8) -> ChannelConfig {
    ChannelConfig {
        slack: Some(SlackConfig {
            signing_secret: Secret::new(SLACK_SECRET),
            bot_token: None,
            api_url: "http://127.0.0.1:9/slack".into(),
        }),
        lark: (flags & (FLAG_TOKEN | FLAG_KEY) != 0).then(|| LarkConfig {
            verification_token: (flags & FLAG_TOKEN != 0).then(|| Secret::new(LARK_TOKEN)),
            encrypt_key: (flags & FLAG_KEY != 0).then(|| Secret::new(LARK_KEY)),
            app: None,
            api_url: "http://127.0.0.1:9/lark".into(),
        }),
        agent: None,
    }
}

fn insert(headers: &mut HeaderMap, name: &'static str, value: &[u8]) {
    // A value HTTP cannot carry never reaches a handler.
    if let Ok(v) = HeaderValue::from_bytes(value) {
        headers.insert(HeaderName::from_static(name), v);
    }
}

fuzz_target!(|data: &[u8]| {
    let [flags, s0, s1, n, rest @ ..] = data else {
        return;
    };
    let skew = i64::from(i16::from_le_bytes([*s0, *s1]));
    let (field, body) = rest.split_at(usize::from(*n).min(rest.len()));
    let platform = if flags & FLAG_LARK != 0 {
        Platform::Lark
    } else {
        Platform::Slack
    };
    let sign = flags & FLAG_SIGN != 0;
    let ts = (NOW + skew).to_string();
    let body: Vec<u8> = if platform == Platform::Lark && flags & FLAG_ENCRYPT != 0 {
        let data = crypto::lark_encrypt(LARK_KEY, [0x5a; 16], body);
        format!("{{\"encrypt\":\"{data}\"}}").into_bytes()
    } else {
        body.to_vec()
    };
    let mut headers = HeaderMap::new();
    match platform {
        Platform::Slack => {
            let sig = if sign {
                crypto::slack_signature(SLACK_SECRET.as_bytes(), &ts, &body).into_bytes()
            } else {
                field.to_vec()
            };
            if flags & FLAG_NO_TIMESTAMP == 0 {
                insert(&mut headers, "x-slack-request-timestamp", ts.as_bytes());
            }
            if flags & FLAG_NO_SIGNATURE == 0 {
                insert(&mut headers, "x-slack-signature", &sig);
            }
        }
        Platform::Lark => {
            let nonce = String::from_utf8_lossy(field);
            let sig = if sign {
                crypto::lark_signature(&ts, &nonce, LARK_KEY, &body).into_bytes()
            } else {
                field.to_vec()
            };
            if flags & FLAG_NO_TIMESTAMP == 0 {
                insert(&mut headers, "x-lark-request-timestamp", ts.as_bytes());
            }
            if flags & FLAG_NO_NONCE == 0 {
                insert(&mut headers, "x-lark-request-nonce", nonce.as_bytes());
            }
            if flags & FLAG_NO_SIGNATURE == 0 {
                insert(&mut headers, "x-lark-signature", &sig);
            }
        }
    }
    let result = read_request(platform, &config(*flags), &headers, &body, NOW);

    let fresh = skew.abs() <= crypto::MAX_SKEW_SECS;
    let sent_signed = sign && fresh && flags & (FLAG_NO_TIMESTAMP | FLAG_NO_SIGNATURE) == 0;
    match platform {
        Platform::Slack if sent_signed => assert!(
            !matches!(result, Err(ApiError::BadSignature { .. })),
            "a correctly signed Slack request was refused: {result:?}"
        ),
        Platform::Slack => assert!(
            matches!(result, Err(ApiError::BadSignature { .. })),
            "an unsigned Slack request got through: {result:?}"
        ),
        Platform::Lark if flags & FLAG_KEY != 0 && !sent_signed => assert!(
            !matches!(result, Ok(Intake::Message(_))),
            "an unsigned Lark event became a message: {result:?}"
        ),
        Platform::Lark => {}
    }
    if let Ok(Intake::Message(msg)) = &result {
        // What is stored must name the same conversation when read back.
        assert_eq!(
            Thread::from_key(msg.thread.platform().as_str(), &msg.thread.key()).as_ref(),
            Some(&msg.thread),
            "the thread does not survive its stored key"
        );
        assert!(!msg.event_id.is_empty(), "a message without an event id");
        assert!(!msg.text.trim().is_empty(), "a message without text");
    }
});
