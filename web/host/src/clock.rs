//! Timestamps as the contract writes them: RFC 3339, UTC, millisecond precision.
//!
//! Written by hand (days-from-civil) so the server needs no date crate; the fixed
//! width makes the text sort in time order, which the store relies on.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Now, as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn now() -> String {
    format_millis(now_millis())
}

/// Now, since the Unix epoch (zero if the clock is before it).
fn since_epoch() -> std::time::Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Now, in milliseconds since the Unix epoch.
pub fn now_millis() -> i64 {
    i64::try_from(since_epoch().as_millis()).unwrap_or(i64::MAX)
}

/// Seconds since the Unix epoch.
pub fn now_secs() -> i64 {
    i64::try_from(since_epoch().as_secs()).unwrap_or(i64::MAX)
}

/// Now, or a millisecond after the last time this gave out if that is not earlier:
/// strictly increasing within the process. For what is listed in the order it was
/// made (sessions): two made in the same millisecond keep their order, where the
/// text of [`now`] would tie. Made rarely, it runs ahead of the clock by little.
pub fn now_ordered() -> String {
    static LAST: AtomicI64 = AtomicI64::new(i64::MIN);
    let now = now_millis();
    let prev = LAST
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
            Some(now.max(last.saturating_add(1)))
        })
        .unwrap_or(now);
    format_millis(now.max(prev.saturating_add(1)))
}

/// Formats milliseconds since the Unix epoch.
pub fn format_millis(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

/// Milliseconds since the Unix epoch of a time [`format_millis`] wrote; `None` for any
/// other text. How long ago a stored time was (a task's wait, for the metrics).
pub fn parse_millis(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let shape = b.len() == 24
        && [
            (4, b'-'),
            (7, b'-'),
            (10, b'T'),
            (13, b':'),
            (16, b':'),
            (19, b'.'),
            (23, b'Z'),
        ]
        .iter()
        .all(|&(i, c)| b[i] == c);
    if !shape {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        let digits = text.get(from..to)?;
        digits
            .bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| digits.parse().ok())?
    };
    let (y, m, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (h, min, sec, ms) = (num(11, 13)?, num(14, 16)?, num(17, 19)?, num(20, 23)?);
    let days = days_from_civil(y, m, d);
    Some(((days * 86_400 + h * 3600 + min * 60 + sec) * 1000) + ms)
}

/// How long ago a time [`format_millis`] wrote was (zero for one in the future).
pub fn age(text: &str) -> Option<std::time::Duration> {
    let ms = now_millis().saturating_sub(parse_millis(text)?).max(0);
    Some(std::time::Duration::from_millis(
        u64::try_from(ms).unwrap_or(0),
    ))
}

/// Howard Hinnant's `days_from_civil`: the day number of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Howard Hinnant's `civil_from_days`: proleptic Gregorian date of a day number.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordered_times_never_tie_even_within_a_millisecond() {
        let times: Vec<String> = (0..2000).map(|_| now_ordered()).collect();
        assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_millis(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(format_millis(1_795_924_702_001), "2026-11-29T03:58:22.001Z");
    }

    #[test]
    fn parses_what_it_formats_and_nothing_else() {
        for ms in [0, 951_782_400_123, 1_795_924_702_001, 4_102_444_799_999] {
            assert_eq!(parse_millis(&format_millis(ms)), Some(ms));
        }
        for bad in [
            "",
            "2026-11-29",
            "2026-11-29T03:58:22Z",
            "2026-11-29T03:58:22.0a1Z",
        ] {
            assert_eq!(parse_millis(bad), None, "{bad}");
        }
    }
}
