//! Run identifiers, and the patterns that hide them (and slugs) from request hashes so a
//! recorded run replays under a new run id and slug.

use muster_agents::model::Redaction;

/// `r` and ten random letters and digits: at most 16 characters, as run ids must be.
pub fn new_run_id(rng: &mut fastrand::Rng) -> String {
    std::iter::once('r')
        .chain((0..10).map(|_| rng.alphanumeric().to_ascii_lowercase()))
        .collect()
}

/// What the drift hash replaces before hashing a request: run ids as [`new_run_id`] makes
/// them, and plan file names built from a three-word slug (`{slug}.md`, `{slug}-agent-…`).
pub fn hash_redactions() -> Vec<Redaction> {
    [
        (r"\br[a-z0-9]{10}\b", "<run>"),
        (r"\b[a-z]+-[a-z]+-[a-z]+\.md\b", "<slug>.md"),
        (r"\b[a-z]+-[a-z]+-[a-z]+-agent-", "<slug>-agent-"),
    ]
    .into_iter()
    .filter_map(|(pattern, placeholder)| Redaction::pattern(pattern, placeholder).ok())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_short_and_plain() {
        let mut rng = fastrand::Rng::with_seed(7);
        let id = new_run_id(&mut rng);
        assert_eq!(id.len(), 11);
        assert!(muster_mailbox::validate_run_id(&id).is_ok());
        assert_eq!(hash_redactions().len(), 3, "every pattern compiles");
    }
}
