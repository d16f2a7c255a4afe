//! The store's clock, whichever the backend: wall-clock milliseconds since the Unix epoch.

use crate::types::UnixMillis;

pub(crate) fn now_millis() -> UnixMillis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
