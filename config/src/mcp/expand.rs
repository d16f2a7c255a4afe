//! `${VAR}` and `${VAR:-default}` in a server's template, as Claude Code expands them: the
//! text between `${` and the next `}` is a variable name, optionally followed by `:-` and a
//! default; a set variable (even empty) gives its value, an unset one its default, and an unset
//! one without a default is an error naming it. Nothing else is special (`$VAR` stays as is).

use std::collections::BTreeMap;

/// One piece of text expanded, and every variable it reads (in order of appearance).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expanded {
    pub text: String,
    pub variables: Vec<String>,
}

/// The first variable that is unset and has no default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unset(pub String);

/// The variables `text` reads, without expanding it.
pub fn variables_in(text: &str) -> Vec<String> {
    references(text)
        .into_iter()
        .map(|reference| reference.name.to_owned())
        .collect()
}

/// `text` with each reference replaced from `env`.
pub fn expand(text: &str, env: &BTreeMap<String, String>) -> Result<Expanded, Unset> {
    let mut out = String::with_capacity(text.len());
    let mut variables = Vec::new();
    let mut rest_start = 0;
    for reference in references(text) {
        out.push_str(&text[rest_start..reference.start]);
        let value = match (env.get(reference.name), reference.default) {
            (Some(value), _) => value.as_str(),
            (None, Some(default)) => default,
            (None, None) => return Err(Unset(reference.name.to_owned())),
        };
        out.push_str(value);
        variables.push(reference.name.to_owned());
        rest_start = reference.end;
    }
    out.push_str(&text[rest_start..]);
    Ok(Expanded {
        text: out,
        variables,
    })
}

struct Reference<'t> {
    start: usize,
    end: usize,
    name: &'t str,
    default: Option<&'t str>,
}

fn references(text: &str) -> Vec<Reference<'_>> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(offset) = text[from..].find("${") {
        let start = from + offset;
        let inner_start = start + 2;
        let Some(length) = text[inner_start..].find('}') else {
            break;
        };
        let inner = &text[inner_start..inner_start + length];
        let end = inner_start + length + 1;
        if !inner.is_empty() {
            let (name, default) = match inner.split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (inner, None),
            };
            found.push(Reference {
                start,
                end,
                name,
                default,
            });
        }
        from = end;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_expand_as_claude_code_expands_them() {
        let env: BTreeMap<String, String> = [("HOME", "/home/me"), ("EMPTY", ""), ("A", "1")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        type Case<'a> = (&'a str, Result<(&'a str, &'a [&'a str]), &'a str>);
        let cases: &[Case] = &[
            ("plain", Ok(("plain", &[]))),
            ("${HOME}/proj", Ok(("/home/me/proj", &["HOME"]))),
            ("${MISSING:-/tmp}", Ok(("/tmp", &["MISSING"]))),
            ("${EMPTY:-fallback}", Ok(("", &["EMPTY"]))),
            ("${A}${A}", Ok(("11", &["A", "A"]))),
            ("$HOME stays", Ok(("$HOME stays", &[]))),
            ("${} and ${unclosed", Ok(("${} and ${unclosed", &[]))),
            ("${MISSING:-a:-b}", Ok(("a:-b", &["MISSING"]))),
            ("x ${MISSING} y", Err("MISSING")),
        ];
        for (text, expected) in cases {
            let got = expand(text, &env);
            match expected {
                Ok((out, vars)) => {
                    let got = got.unwrap_or_else(|e| panic!("{text}: {e:?}"));
                    assert_eq!(got.text, *out, "{text}");
                    assert_eq!(got.variables, *vars, "{text}");
                    assert_eq!(variables_in(text), *vars, "{text}");
                }
                Err(name) => assert_eq!(got, Err(Unset((*name).to_owned())), "{text}"),
            }
        }
    }
}
