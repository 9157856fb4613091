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

fn now_millis() -> i64 {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    i64::try_from(ms).unwrap_or(i64::MAX)
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
}
