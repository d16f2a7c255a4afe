//! Retry policy: exponential backoff with jitter, server-requested delays, caps, and an
//! injectable sleeper so tests never wait.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Waits between attempts. The default sleeps on the tokio timer; tests inject
/// [`RecordingSleeper`], which returns at once and records each delay.
pub trait Sleeper: Send + Sync + fmt::Debug {
    fn sleep(&self, delay: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>>;
}

/// Sleeps on the tokio timer.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, delay: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        Box::pin(tokio::time::sleep(delay))
    }
}

/// Returns at once and records every delay asked for.
#[derive(Debug, Clone, Default)]
pub struct RecordingSleeper {
    delays: Arc<Mutex<Vec<Duration>>>,
}

impl RecordingSleeper {
    pub fn new() -> Self {
        Self::default()
    }

    /// The delays asked for so far, in order.
    pub fn delays(&self) -> Vec<Duration> {
        self.delays.lock().map(|d| d.clone()).unwrap_or_default()
    }
}

impl Sleeper for RecordingSleeper {
    fn sleep(&self, delay: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + 'static>> {
        if let Ok(mut d) = self.delays.lock() {
            d.push(delay);
        }
        Box::pin(std::future::ready(()))
    }
}

/// How often and how long to retry.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Retries after the first attempt (attempts = `max_retries + 1`).
    pub max_retries: u32,
    /// The first computed backoff; doubled on each retry.
    pub initial_backoff: Duration,
    /// The largest computed backoff.
    pub max_backoff: Duration,
    /// The cap on the sum of all waits for one request; a wait that would pass it ends the
    /// retries.
    pub max_total_wait: Duration,
    /// Server-requested delays (`retry-after-ms`, `retry-after`) longer than this are replaced
    /// by the computed backoff (the official SDKs use 60 s).
    pub max_retry_after: Duration,
    /// Multiply computed backoffs by a random factor in (0.75, 1].
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 6,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            max_total_wait: Duration::from_secs(120),
            max_retry_after: Duration::from_secs(60),
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// The delay before retry number `retry` (1 = the first retry), honouring a delay the
    /// server asked for when it is positive and at most `max_retry_after`.
    pub fn delay(&self, retry: u32, server_asked: Option<Duration>) -> Duration {
        if let Some(asked) = server_asked
            && !asked.is_zero()
            && asked <= self.max_retry_after
        {
            return asked;
        }
        let factor = 2u32.saturating_pow(retry.saturating_sub(1).min(20));
        let base = self
            .initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff);
        if self.jitter {
            base.mul_f64(1.0 - 0.25 * fastrand::f64())
        } else {
            base
        }
    }
}

/// Reads `retry-after-ms` (milliseconds), then `retry-after` (seconds, or an HTTP date
/// relative to `now`).
pub fn retry_after(
    headers: &reqwest::header::HeaderMap,
    now: std::time::SystemTime,
) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    // `try_from_secs_f64` refuses NaN, negative and huge values: no panic on any header.
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && let Ok(delay) = Duration::try_from_secs_f64(ms / 1000.0)
    {
        return Some(delay);
    }
    let value = text("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let when = parse_http_date(value)?;
    Some(when.duration_since(now).unwrap_or_default())
}

/// Parses an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn parse_http_date(s: &str) -> Option<std::time::SystemTime> {
    let parts: Vec<&str> = s.split_whitespace().collect();
    let [_, day, month, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    let day: u64 = day.parse().ok()?;
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = months.iter().position(|m| m == month)? as u64 + 1;
    let year: u64 = year.parse().ok()?;
    let hms: Vec<u64> = time
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let [h, m, sec] = hms.as_slice() else {
        return None;
    };
    if !(1970..=9999).contains(&year) || !(1..=31).contains(&day) || *h > 23 || *m > 59 || *sec > 60
    {
        return None;
    }
    // Days from 1970-01-01 (civil-from-days inverse, Howard Hinnant).
    let (y, mo) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * mo + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    let secs = days * 86_400 + h * 3600 + m * 60 + sec;
    std::time::UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_date_parses() {
        let t = parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(
            t.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()),
            Some(Duration::from_secs(784_111_777))
        );
    }

    #[test]
    fn retry_after_headers_never_panic() {
        use reqwest::header::{HeaderMap, HeaderValue};
        let now = std::time::UNIX_EPOCH + Duration::from_secs(784_111_000);
        let read = |name: &'static str, value: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(name, HeaderValue::from_static(value));
            retry_after(&h, now)
        };
        assert_eq!(
            read("retry-after-ms", "250"),
            Some(Duration::from_millis(250))
        );
        assert_eq!(read("retry-after", "3"), Some(Duration::from_secs(3)));
        assert_eq!(
            read("retry-after", "1.5"),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            read("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(Duration::from_secs(777))
        );
        for bad in [
            "NaN",
            "-5",
            "1e300",
            "inf",
            "soon",
            "Sun, 99 Nov 1994 99:49:37 GMT",
        ] {
            assert_eq!(read("retry-after", bad), None, "{bad}");
            assert_eq!(read("retry-after-ms", bad), None, "{bad}");
        }
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let p = RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
            jitter: false,
            ..RetryPolicy::default()
        };
        let d: Vec<u128> = (1..=4).map(|r| p.delay(r, None).as_millis()).collect();
        assert_eq!(d, vec![100, 200, 350, 350]);
        assert_eq!(p.delay(1, Some(Duration::from_millis(20))).as_millis(), 20);
        assert_eq!(p.delay(1, Some(Duration::from_secs(600))).as_millis(), 100);
        let j = RetryPolicy { jitter: true, ..p };
        for _ in 0..50 {
            let d = j.delay(2, None).as_millis();
            assert!((150..=200).contains(&d), "{d}");
        }
    }
}
