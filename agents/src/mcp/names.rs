//! Tool names a model accepts: `^[a-zA-Z0-9_-]{1,64}$`, by one deterministic mapping.

/// The longest name a model accepts.
const MAX_NAME: usize = 64;

/// The model's name for each of `names` (`mcp__<server>__<tool>`), in order: characters
/// outside `[a-zA-Z0-9_-]` become `_`; a name longer than 64 is cut and ends in `_` and 8 hex
/// digits of a hash of the full name; a name already taken (by `taken` or an earlier one)
/// gets `_2`, `_3`, … The same input always gives the same names.
pub fn model_names(names: &[String], taken: &[&str]) -> Vec<String> {
    let mut used: Vec<String> = taken.iter().map(|name| (*name).to_owned()).collect();
    let mut mapped = Vec::with_capacity(names.len());
    for name in names {
        let base = fitted(name);
        let mut candidate = base.clone();
        let mut counter = 2u32;
        while used.contains(&candidate) {
            let suffix = format!("_{counter}");
            let keep = MAX_NAME.saturating_sub(suffix.len()).min(base.len());
            candidate = format!("{}{suffix}", &base[..keep]);
            counter += 1;
        }
        used.push(candidate.clone());
        mapped.push(candidate);
    }
    mapped
}

/// `name` with only allowed characters, at most 64 of them.
fn fitted(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if cleaned.is_empty() {
        return format!("mcp_{:08x}", fnv1a(name) as u32);
    }
    if cleaned.len() <= MAX_NAME {
        return cleaned;
    }
    let suffix = format!("_{:08x}", fnv1a(name) as u32);
    // Only ASCII is left, so any byte index is a character boundary.
    format!("{}{suffix}", &cleaned[..MAX_NAME - suffix.len()])
}

/// FNV-1a, 64 bits: small, fixed and the same on every platform.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid(name: &str) -> bool {
        (1..=MAX_NAME).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    #[test]
    fn names_fit_the_model_rules_deterministically_and_never_collide() {
        let long = format!("mcp__srv__{}", "x".repeat(80));
        let long_other = format!("mcp__srv__{}y", "x".repeat(80));
        let names: Vec<String> = [
            "mcp__docs__search",
            "mcp__docs__search.v2",
            "mcp__docs__search_v2",
            "mcp__docs__über",
            long.as_str(),
            long_other.as_str(),
        ]
        .iter()
        .map(|name| (*name).to_owned())
        .collect();
        let mapped = model_names(&names, &["Read"]);
        assert_eq!(mapped[0], "mcp__docs__search");
        assert_eq!(mapped[1], "mcp__docs__search_v2");
        assert_eq!(
            mapped[2], "mcp__docs__search_v2_2",
            "a collision gets a suffix"
        );
        assert_eq!(mapped[3], "mcp__docs___ber");
        assert_ne!(mapped[4], mapped[5], "long names differ by their hash");
        for name in &mapped {
            assert!(valid(name), "{name}");
        }
        assert_eq!(mapped, model_names(&names, &["Read"]), "deterministic");
        assert_eq!(
            model_names(&["Read".to_owned()], &["Read"]),
            ["Read_2"],
            "never one of muster's own names"
        );
    }
}
