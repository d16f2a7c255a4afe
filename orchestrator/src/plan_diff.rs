//! The diff between two revisions of a plan (DESIGN "Wave 2 → The web inbox"), shared by
//! `muster plans` and `muster serve`.

use muster_mailbox::RequestRecord;
use similar::TextDiff;

/// A unified diff of `previous` → `current`, labelled with the two request ids; empty when
/// the texts are equal.
pub fn unified(previous: &str, current: &str, previous_id: &str, current_id: &str) -> String {
    if previous == current {
        return String::new();
    }
    TextDiff::from_lines(previous, current)
        .unified_diff()
        .context_radius(3)
        .header(previous_id, current_id)
        .to_string()
}

/// The diff from the plan of request `previous_id` to `request`'s plan (`muster plans`, the
/// person's front ends); `None` when `previous_id` is not among `requests`.
pub fn revision_diff(
    requests: &[RequestRecord],
    previous_id: &str,
    request: &RequestRecord,
) -> Option<String> {
    let previous = requests.iter().find(|r| r.request_id == previous_id)?;
    let text = |r: &RequestRecord| r.body.plan().unwrap_or_default().to_owned();
    Some(unified(
        &text(previous),
        &text(request),
        previous_id,
        &request.request_id,
    ))
}

/// One line of a diff for display: its sign and text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineChange {
    Same,
    Added,
    Removed,
}

/// Every line of both revisions in order, each marked kept, added or removed (what the web
/// page colours).
pub fn lines(previous: &str, current: &str) -> Vec<(LineChange, String)> {
    TextDiff::from_lines(previous, current)
        .iter_all_changes()
        .map(|change| {
            let kind = match change.tag() {
                similar::ChangeTag::Equal => LineChange::Same,
                similar::ChangeTag::Insert => LineChange::Added,
                similar::ChangeTag::Delete => LineChange::Removed,
            };
            (kind, change.value().trim_end_matches('\n').to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_step_shows_as_removed_and_added() {
        let before = "## Steps\n1. edit a.rs\n## Files\na.rs\n";
        let after = "## Steps\n1. edit a.rs and b.rs\n## Files\na.rs\nb.rs\n";
        let text = unified(before, after, "plan-alice-1", "plan-alice-2");
        assert!(
            text.starts_with("--- plan-alice-1\n+++ plan-alice-2\n"),
            "{text}"
        );
        assert!(
            text.contains("\n-1. edit a.rs\n+1. edit a.rs and b.rs\n"),
            "{text}"
        );
        assert!(text.contains("\n+b.rs\n"), "{text}");
        assert_eq!(unified(before, before, "a", "b"), "");
        let marked = lines(before, after);
        assert_eq!(marked[0], (LineChange::Same, "## Steps".into()));
        assert!(marked.contains(&(LineChange::Removed, "1. edit a.rs".into())));
        assert!(marked.contains(&(LineChange::Added, "b.rs".into())));
    }
}
