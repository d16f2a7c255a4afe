//! The front matter of skills and slash commands, read leniently as Claude Code reads it: a
//! file without front matter is all body, YAML that does not parse is read line by line
//! (`key: rest of the line`), and every value is taken as text (a list joined with `, `).

use crate::agents::{plain_front_matter, split_front_matter};
use crate::diagnostic::Diagnostic;
use crate::yaml::{YamlNode, YamlValue, parse_yaml};

/// A file's front matter as text values, and its body.
#[derive(Debug, Clone, Default)]
pub(crate) struct FrontMatter {
    fields: Vec<(String, String)>,
    pub body: String,
}

impl FrontMatter {
    /// Reads `text`; what is wrong with its front matter comes back as warnings about `label`.
    pub(crate) fn read(label: &str, text: &str) -> (FrontMatter, Vec<Diagnostic>) {
        let mut warnings = Vec::new();
        let (front, first_line, body) = match split_front_matter(text) {
            Ok(parts) => parts,
            Err(_) => {
                let text = text.strip_prefix('\u{feff}').unwrap_or(text);
                return (
                    FrontMatter {
                        fields: Vec::new(),
                        body: text.to_owned(),
                    },
                    warnings,
                );
            }
        };
        let root = match parse_yaml(front, first_line) {
            Ok(root) => root,
            Err(error) => {
                warnings.push(
                    Diagnostic::new(format!(
                        "the front matter is not valid YAML ({}); read as Claude Code reads it, \
                         each `key: value` line as plain text",
                        error.message
                    ))
                    .in_source(label)
                    .at(Some(error.position)),
                );
                Some(plain_front_matter(front, first_line))
            }
        };
        let mut fields = Vec::new();
        match root {
            Some(YamlNode {
                value: YamlValue::Mapping(entries),
                ..
            }) => {
                for (key, value) in entries {
                    let Some(key) = key.as_text() else { continue };
                    if let Some(text) = as_text(&value) {
                        fields.push((key.to_owned(), text));
                    }
                }
            }
            Some(other) => warnings.push(
                Diagnostic::new(format!(
                    "expected a mapping of keys in the front matter, found {}; it is ignored",
                    other.describe()
                ))
                .in_source(label)
                .at(Some(other.position)),
            ),
            None => {}
        }
        (
            FrontMatter {
                fields,
                body: body.to_owned(),
            },
            warnings,
        )
    }

    /// The value of `key`, trimmed; `None` when absent or empty.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.trim())
            .filter(|value| !value.is_empty())
    }
}

/// A scalar as its text, a list of scalars joined with `, `; a mapping is no text.
fn as_text(node: &YamlNode) -> Option<String> {
    match &node.value {
        YamlValue::Scalar { .. } if node.is_null() => None,
        YamlValue::Scalar { .. } => node.as_text().map(str::to_owned),
        YamlValue::Sequence(items) => Some(
            items
                .iter()
                .filter_map(YamlNode::as_text)
                .collect::<Vec<_>>()
                .join(", "),
        ),
        YamlValue::Mapping(_) => None,
    }
}

/// The first paragraph of a Markdown body that is not a heading: Claude Code's description
/// of a skill or command that gives none.
pub(crate) fn first_paragraph(body: &str) -> String {
    let mut paragraph = Vec::new();
    for line in body.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            if paragraph.is_empty() {
                continue;
            }
            break;
        }
        paragraph.push(line);
    }
    paragraph.join(" ")
}
