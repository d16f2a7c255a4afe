//! Unquoted globs (`src/*.rs`): what a word bash expands to file names may become.
//!
//! Bash expands a glob after classification, to whatever matches then. Two things are decided
//! from the text alone, so they hold whatever matches at run time (the literal-prefix rule):
//! every match starts with the word's literal prefix, so a prefix that is not empty and does
//! not start with `-` never yields an option; and a word without `..` components whose prefix
//! lies in the workspace yields only paths below that prefix. What exists is checked too: the
//! rules list each directory a glob component could match in and check every entry that could
//! match (an over-approximation: only the literal start of a component filters) as a `Read`,
//! which resolves symlinks and applies deny rules. That part describes the file system at
//! classification time.

/// One `/`-separated component of a glob word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Component<'a> {
    /// The component's text (glob characters included).
    pub text: &'a str,
    /// Does it contain an unquoted glob character?
    pub glob: bool,
    /// The text before its first unquoted glob character (all of it when there is none).
    pub literal: &'a str,
    /// Could it match `.` and `..`? Bash matches a leading `.` only when the pattern starts
    /// with a literal `.`; a leading bracket expression is counted as able to, to be safe.
    pub dots: bool,
    /// The pattern as tokens when it has only `*` and `?` (matched exactly as bash does);
    /// `None` with a bracket expression, which is matched by its literal start only.
    pub tokens: Option<Vec<Token>>,
}

/// One piece of a glob component without brackets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Token {
    Literal(char),
    /// `?`: any one character.
    One,
    /// `*`: any run of characters.
    Any,
}

/// Does the glob word start with a glob character (no literal prefix)? Such a word is
/// expanded by muster, not by bash (see `rules::Checker::expand`).
pub(crate) fn without_prefix(globs: &[usize]) -> bool {
    globs.iter().copied().min() == Some(0)
}

/// Refuse a glob word the literal-prefix rule does not cover. `globs` are the byte offsets of
/// the unquoted glob characters in `value` (not empty).
pub(crate) fn literal_prefix_rule(value: &str, globs: &[usize]) -> Result<(), String> {
    let first = globs.iter().copied().min().unwrap_or(0);
    if first == 0 {
        return Err(format!(
            "`{value}` is a glob with no literal prefix: it could expand to file names that look like options (`-rf`); write a directory before it (`./{value}`, `src/{value}`)"
        ));
    }
    if value.starts_with('-') {
        return Err(format!(
            "`{value}` is a glob starting with `-`: it expands to options"
        ));
    }
    if value.split('/').any(|c| c == "..") {
        return Err(format!(
            "`{value}` is a glob with a `..` component, whose matches could climb out of the directory it names"
        ));
    }
    Ok(())
}

/// The non-empty components of a glob word, in order, with their glob facts.
pub(crate) fn components<'a>(value: &'a str, globs: &[usize]) -> Vec<Component<'a>> {
    let mut out = Vec::new();
    let mut start = 0;
    for part in value.split('/') {
        let end = start + part.len();
        let first_glob = globs
            .iter()
            .copied()
            .filter(|&g| g >= start && g < end)
            .min();
        if !part.is_empty() {
            let literal = match first_glob {
                Some(g) => &part[..g - start],
                None => part,
            };
            let leading_bracket = first_glob == Some(start) && part.starts_with('[');
            let local: Vec<usize> = globs
                .iter()
                .filter(|&&g| g >= start && g < end)
                .map(|g| g - start)
                .collect();
            out.push(Component {
                text: part,
                glob: first_glob.is_some(),
                literal,
                dots: first_glob.is_some()
                    && ((literal.is_empty() && leading_bracket)
                        || (!literal.is_empty() && "..".starts_with(literal))),
                tokens: tokens(part, &local),
            });
        }
        start = end + 1;
    }
    out
}

/// Could the glob component match the directory entry `name`? An over-approximation: the
/// name starts with the component's literal text, and does not start with `.` unless the
/// component can match a leading dot.
pub(crate) fn may_match(component: &Component<'_>, name: &str) -> bool {
    if !name.starts_with(component.literal) {
        return false;
    }
    let leading_bracket = component.literal.is_empty() && component.text.starts_with('[');
    let dot_ok = !name.starts_with('.') || component.literal.starts_with('.') || leading_bracket;
    dot_ok
        && component
            .tokens
            .as_deref()
            .is_none_or(|tokens| matches(tokens, &name.chars().collect::<Vec<_>>()))
}

/// The tokens of a component whose only glob characters are `*` and `?`; `globs` are the
/// offsets of its unquoted glob characters.
fn tokens(part: &str, globs: &[usize]) -> Option<Vec<Token>> {
    part.char_indices()
        .map(|(i, c)| match (globs.contains(&i), c) {
            (true, '*') => Some(Token::Any),
            (true, '?') => Some(Token::One),
            (true, _) => None,
            (false, c) => Some(Token::Literal(c)),
        })
        .collect()
}

/// Does `name` match the tokens (the whole name)?
fn matches(tokens: &[Token], name: &[char]) -> bool {
    // can[j]: the tokens so far can match the first j characters.
    let mut can = vec![false; name.len() + 1];
    can[0] = true;
    for token in tokens {
        let mut next = vec![false; name.len() + 1];
        for j in 0..=name.len() {
            if !can[j] {
                continue;
            }
            match token {
                Token::Any => next[j..].iter_mut().for_each(|n| *n = true),
                Token::One if j < name.len() => next[j + 1] = true,
                Token::Literal(c) if name.get(j) == Some(c) => next[j + 1] = true,
                _ => {}
            }
        }
        can = next;
    }
    can[name.len()]
}

/// `base` joined with `name` by one `/` (`base` empty means the starting directory).
pub(crate) fn join(base: &str, name: &str) -> String {
    if base.is_empty() {
        name.to_string()
    } else if base.ends_with('/') {
        format!("{base}{name}")
    } else {
        format!("{base}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(value: &str) -> Vec<usize> {
        value
            .char_indices()
            .filter(|(_, c)| matches!(c, '*' | '?' | '[' | ']'))
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn the_literal_prefix_rule() {
        let table: &[(&str, bool)] = &[
            ("src/*.rs", true),
            ("./*.md", true),
            ("docs/*/index.md", true),
            ("a*", true),
            ("/workspace/project/src/*", true),
            ("*", false),
            ("*.rs", false),
            ("?", false),
            ("[ab].txt", false),
            ("-*", false),
            ("--include=*.rs", false),
            ("../*", false),
            ("src/../../*", false),
            ("src/*/../../x", false),
        ];
        for (value, ok) in table {
            assert_eq!(
                literal_prefix_rule(value, &offsets(value)).is_ok(),
                *ok,
                "{value}"
            );
        }
    }

    #[test]
    fn components_and_matching() {
        let comps = components("src//*.rs", &offsets("src//*.rs"));
        assert_eq!(comps.len(), 2);
        assert!(!comps[0].glob && comps[1].glob && comps[1].literal.is_empty());
        let star = &comps[1];
        assert!(
            may_match(star, "main.rs") && may_match(star, "-rf.rs") && !may_match(star, ".env")
        );
        let dot = &components(".e*", &offsets(".e*"))[0];
        assert!(may_match(dot, ".env") && !may_match(dot, "env") && !dot.dots);
        let dots = &components("src/.*", &offsets("src/.*"))[1];
        assert!(dots.dots && may_match(dots, ".git"));
        let bracket = &components("x/[.]*", &offsets("x/[.]*"))[1];
        assert!(bracket.dots && may_match(bracket, ".env"));
        let rs = &components("src/*.rs", &offsets("src/*.rs"))[1];
        assert!(may_match(rs, "main.rs") && !may_match(rs, ".rs.rs"));
        assert!(!may_match(rs, "link") && !may_match(rs, "main.rsx"));
        let one = &components("mod?.rs", &offsets("mod?.rs"))[0];
        assert!(may_match(one, "mod1.rs") && !may_match(one, "mod.rs"));
        let bracket = &components("[ab]*.rs", &offsets("[ab]*.rs"))[0];
        assert!(may_match(bracket, "zzz") && may_match(bracket, ".env"));
        let quoted = Component {
            text: "a*b*",
            glob: true,
            literal: "a*b",
            dots: false,
            tokens: tokens("a*b*", &[3]),
        };
        assert!(may_match(&quoted, "a*bcd") && !may_match(&quoted, "axbcd"));
        assert_eq!(join("", "a"), "a");
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("src", "a"), "src/a");
    }
}
