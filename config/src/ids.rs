//! Agent ids (DESIGN.md "Files and identifiers"): `[a-z][a-z0-9-]{0,31}`, with `lead`, `human`
//! and `policy` reserved.

/// Names no teammate may take: the lead and the two reserved responders of every team.
pub const RESERVED_NAMES: &[&str] = &["lead", "human", "policy"];

/// The longest id.
pub const MAX_ID_LEN: usize = 32;

/// Checks `text` against `[a-z][a-z0-9-]{0,31}`; the error says what was expected and found.
pub fn check_id(text: &str) -> Result<(), String> {
    let valid = !text.is_empty()
        && text.len() <= MAX_ID_LEN
        && text.starts_with(|c: char| c.is_ascii_lowercase())
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "expected an id of lowercase letters, digits and `-`, starting with a letter, at most {MAX_ID_LEN} characters ([a-z][a-z0-9-]{{0,31}}), found {text:?}"
        ))
    }
}

/// Checks a teammate name: a valid id that is not reserved.
pub fn check_teammate_name(text: &str) -> Result<(), String> {
    check_id(text)?;
    if RESERVED_NAMES.contains(&text) {
        return Err(format!(
            "`{text}` is reserved (lead, human and policy cannot name teammates)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_design_rules() {
        let cases = [
            ("alice", true),
            ("worker-2", true),
            ("a", true),
            (&"a".repeat(32), true),
            (&"a".repeat(33), false),
            ("", false),
            ("2nd", false),
            ("Alice", false),
            ("al_ice", false),
            ("-x", false),
        ];
        for (id, valid) in cases {
            assert_eq!(check_id(id).is_ok(), valid, "{id:?}");
        }
        assert_eq!(
            check_teammate_name("human").unwrap_err(),
            "`human` is reserved (lead, human and policy cannot name teammates)"
        );
    }
}
