//! A small YAML tree with positions, built from `saphyr-parser` events, for agent front matter.
//! Anchors' aliases are refused; nesting is capped so hostile input cannot exhaust the stack.

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

use crate::diagnostic::Position;

/// How deep collections may nest.
const MAX_DEPTH: usize = 64;

/// A YAML value and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct YamlNode {
    pub value: YamlValue,
    pub position: Position,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum YamlValue {
    /// A scalar's text; `plain` when unquoted (so `null`, `true` keep their YAML meaning).
    Scalar {
        text: String,
        plain: bool,
    },
    Sequence(Vec<YamlNode>),
    Mapping(Vec<(YamlNode, YamlNode)>),
}

impl YamlNode {
    /// `a string "x"`, `a list`, `a mapping`: how a found value is named in messages.
    pub fn describe(&self) -> String {
        match &self.value {
            YamlValue::Scalar { text, plain: true } if is_null(text) => "null".to_string(),
            YamlValue::Scalar { text, plain: true } if text == "true" || text == "false" => {
                format!("a boolean {text}")
            }
            YamlValue::Scalar { text, plain: true } if text.parse::<f64>().is_ok() => {
                format!("a number {text}")
            }
            YamlValue::Scalar { text, .. } => format!("a string {text:?}"),
            YamlValue::Sequence(_) => "a list".to_string(),
            YamlValue::Mapping(_) => "a mapping".to_string(),
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(&self.value, YamlValue::Scalar { text, plain: true } if is_null(text))
    }

    /// The text of a scalar that is not null.
    pub fn as_text(&self) -> Option<&str> {
        match &self.value {
            YamlValue::Scalar { text, .. } if !self.is_null() => Some(text),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match &self.value {
            YamlValue::Scalar { text, plain: true } if text == "true" => Some(true),
            YamlValue::Scalar { text, plain: true } if text == "false" => Some(false),
            _ => None,
        }
    }
}

fn is_null(text: &str) -> bool {
    matches!(text, "" | "~" | "null" | "Null" | "NULL")
}

/// A YAML syntax error with its position.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct YamlError {
    pub message: String,
    pub position: Position,
}

/// Parses one YAML document. `first_line` is the line of `text` in its file (1 when `text` is
/// the whole file). An empty document is `None`.
pub(crate) fn parse_yaml(text: &str, first_line: usize) -> Result<Option<YamlNode>, YamlError> {
    let position = |span: &Span| Position {
        line: span.start.line() + first_line - 1,
        column: span.start.col() + 1,
    };
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<(YamlNode, Option<YamlNode>)> = Vec::new();
    let mut root: Option<YamlNode> = None;
    let mut documents = 0usize;
    while let Some(next) = parser.next_event() {
        let (event, span) = next.map_err(|error| YamlError {
            message: format!("invalid YAML: {}", error.info()),
            position: Position {
                line: error.marker().line() + first_line - 1,
                column: error.marker().col() + 1,
            },
        })?;
        let node = match event {
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => continue,
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    return Err(YamlError {
                        message: "expected one YAML document, found a second one".to_string(),
                        position: position(&span),
                    });
                }
                continue;
            }
            Event::Alias(_) => {
                return Err(YamlError {
                    message: "aliases (`*name`) are not supported here".to_string(),
                    position: position(&span),
                });
            }
            Event::Scalar(text, style, _, _) => YamlNode {
                value: YamlValue::Scalar {
                    text: text.into_owned(),
                    plain: style == ScalarStyle::Plain,
                },
                position: position(&span),
            },
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(YamlError {
                        message: format!("nesting deeper than {MAX_DEPTH} levels"),
                        position: position(&span),
                    });
                }
                let value = if matches!(event, Event::SequenceStart(..)) {
                    YamlValue::Sequence(Vec::new())
                } else {
                    YamlValue::Mapping(Vec::new())
                };
                stack.push((
                    YamlNode {
                        value,
                        position: position(&span),
                    },
                    None,
                ));
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some((node, _)) => node,
                None => continue,
            },
        };
        match stack.last_mut() {
            None => root = Some(node),
            Some((parent, pending_key)) => match &mut parent.value {
                YamlValue::Sequence(items) => items.push(node),
                YamlValue::Mapping(entries) => match pending_key.take() {
                    None => *pending_key = Some(node),
                    Some(key) => entries.push((key, node)),
                },
                YamlValue::Scalar { .. } => {}
            },
        }
    }
    Ok(root.filter(|node| !node.is_null()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_a_tree_with_positions() {
        let node = parse_yaml("name: a\ntools:\n  - Read\n  - 'Bash'\n", 2)
            .unwrap()
            .unwrap();
        let YamlValue::Mapping(entries) = &node.value else {
            panic!("not a mapping")
        };
        assert_eq!(entries[0].0.as_text(), Some("name"));
        assert_eq!(entries[0].0.position, Position { line: 2, column: 1 });
        let YamlValue::Sequence(tools) = &entries[1].1.value else {
            panic!("not a list")
        };
        assert_eq!(tools[1].as_text(), Some("Bash"));
        assert_eq!(tools[1].position, Position { line: 5, column: 5 });
    }

    #[test]
    fn errors_carry_positions_and_empty_is_none() {
        let error = parse_yaml("name: [a\n", 1).unwrap_err();
        assert!(error.message.starts_with("invalid YAML"), "{error:?}");
        assert_eq!(parse_yaml("", 1).unwrap(), None);
        assert_eq!(parse_yaml("~\n", 1).unwrap(), None);
        let deep = "[".repeat(500);
        assert!(parse_yaml(&deep, 1).is_err());
        assert!(
            parse_yaml("a: &x 1\nb: *x\n", 1)
                .unwrap_err()
                .message
                .contains("aliases")
        );
    }
}
