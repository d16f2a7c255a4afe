//! Text for people: times, one-line cuts and aligned tables, shared by the CLI's listings and
//! the web pages.

use std::time::{Duration, UNIX_EPOCH};

/// `2026-11-30 09:12:03` (UTC).
pub fn time(millis: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_millis(millis.max(0) as u64);
    humantime::format_rfc3339_seconds(at)
        .to_string()
        .replace('T', " ")
        .trim_end_matches('Z')
        .to_owned()
}

/// A merge's passing test gate (the request's `tested`) in a phrase:
/// `` `cargo test`, 12.3s, on 1a2b3c4… ``.
pub fn tests_passed(tested: &serde_json::Value) -> String {
    format!(
        "`{}`, {:.1}s, on {}",
        tested["command"].as_str().unwrap_or_default(),
        tested["seconds"].as_f64().unwrap_or_default(),
        tested["head"].as_str().unwrap_or_default()
    )
}

/// A cost in dollars to four places, or `unpriced` when a model has no price.
pub fn dollars(cost: Option<f64>) -> String {
    cost.map_or_else(|| "unpriced".to_owned(), |c| format!("${c:.4}"))
}

/// Cuts `text` to `max` characters on one line; says whether it cut.
pub fn cut(text: &str, max: usize) -> (String, bool) {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= max {
        (one_line, false)
    } else {
        let kept: String = one_line.chars().take(max.saturating_sub(1)).collect();
        (format!("{kept}…"), true)
    }
}

/// Left-aligned columns separated by two spaces; the last column is not padded.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            out.push_str(cell);
            if i < last {
                out.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            }
        }
        out.trim_end().to_owned()
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push('\n');
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_cuts_say_so() {
        let rendered = table(
            &["ID", "NAME"],
            &[
                vec!["1".into(), "alpha".into()],
                vec!["200".into(), "b".into()],
            ],
        );
        assert_eq!(rendered, "ID   NAME\n1    alpha\n200  b");
        assert_eq!(cut("short", 10), ("short".into(), false));
        assert_eq!(cut("a rather\nlong body", 8), ("a rathe…".into(), true));
        assert_eq!(time(0), "1970-01-01 00:00:00");
    }
}
