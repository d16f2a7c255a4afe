//! Structural pass: parse with tree-sitter-bash and accept only plain simple commands whose
//! words are literal, joined by `&&`, `||`, `;`, `|` and newlines, with harmless redirections
//! (output to `/dev/null`, descriptor duplication, input from a file the rules path-check).
//! Everything else (other redirections, expansions, substitutions, assignments, compound
//! commands, comments, backgrounding, parse errors) is rejected with a reason naming the
//! construct.

use tree_sitter::{Node, Parser};

/// Longest command the classifier looks at; longer ones are simply not read-only.
const MAX_LEN: usize = 64 * 1024;

/// Most simple commands in one command line.
const MAX_COMMANDS: usize = 256;

/// One argument word after quote removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    /// The value the program receives (for a glob, when nothing matches).
    pub value: String,
    /// Byte offsets in `value` of unquoted glob characters (`*`, `?`, `[`, `]`), which bash
    /// expands to matching file names; empty for a literal word.
    pub globs: Vec<usize>,
    /// Where the word is in the command text (byte offsets), so muster can insert a flag
    /// after it or replace it; `None` for a word the parser supplies itself (the `]` of `[`).
    pub span: Option<std::ops::Range<usize>>,
    /// Does the word expand one of [`SHOWN_VARIABLES`] (kept in `value` as written)? The rules
    /// allow that only where no path or option can come of it (`echo`, `printf`, …).
    pub expands: bool,
}

/// Variables a read-only command may expand: none holds a secret, and each expands to text
/// the agent could learn anyway (`$?` is the last exit status).
pub(crate) const SHOWN_VARIABLES: &[&str] = &["?", "PWD", "HOME", "USER", "SHELL", "PATH"];

/// Is `raw` (`$NAME` or `${NAME}`) one of [`SHOWN_VARIABLES`]?
fn shown_variable(raw: &str) -> bool {
    let name = raw
        .strip_prefix("${")
        .and_then(|r| r.strip_suffix('}'))
        .or_else(|| raw.strip_prefix('$'));
    name.is_some_and(|name| SHOWN_VARIABLES.contains(&name))
}

impl Word {
    /// A word with no glob characters.
    pub(crate) fn literal(value: impl Into<String>) -> Word {
        Word {
            value: value.into(),
            globs: Vec::new(),
            span: None,
            expands: false,
        }
    }
}

/// How a simple command is joined to what precedes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// First command, or after `;` or a newline: runs whatever happened before.
    Seq,
    /// After `&&`: runs only if what precedes succeeded.
    And,
    /// After `||`: runs only if what precedes failed.
    Or,
    /// After `|`: a later member of the same pipeline.
    Pipe,
}

/// One simple command: its literal program name and its argument words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SimpleCommand {
    pub name: String,
    pub args: Vec<Word>,
    /// The operator before this command (for the first member of a pipeline, the operator
    /// before the pipeline).
    pub op: Op,
    /// Part of a pipeline, so run in a subshell: a `cd` here does not move later commands.
    pub in_pipeline: bool,
    /// Files the command's standard input (or another descriptor) is redirected from with
    /// `<`: the shell opens them, so they are read like file arguments.
    pub inputs: Vec<String>,
}

/// Parse `src` into the simple commands it runs, in source order, or say why it is not a plain
/// list of literal commands.
pub(crate) fn parse(src: &str) -> Result<Vec<SimpleCommand>, String> {
    if src.len() > MAX_LEN {
        return Err(format!("the command is longer than {MAX_LEN} bytes"));
    }
    if let Some(c) = src
        .chars()
        .find(|c| c.is_control() && *c != '\n' && *c != '\t')
    {
        return Err(format!(
            "the command contains the control character U+{:04X}",
            u32::from(c)
        ));
    }
    if src.trim().is_empty() {
        return Err("the command is empty".to_string());
    }
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_bash::LANGUAGE.into())
        .map_err(|e| format!("the bash grammar failed to load: {e}"))?;
    let Some(tree) = parser.parse(ascii_shadow(src), None) else {
        return Err("the command could not be parsed".to_string());
    };
    let root = tree.root_node();
    if root.has_error() {
        return Err("the command does not parse as bash (syntax error)".to_string());
    }
    let bytes = src.as_bytes();
    if !only(&bytes[..root.start_byte().min(bytes.len())], b" \t\n")
        || !only(&bytes[root.end_byte().min(bytes.len())..], b" \t\n")
    {
        return Err("the command has text outside what the parser understood".to_string());
    }
    let mut out = Vec::new();
    let mut stack = vec![(root, Op::Seq, false, Vec::new())];
    while let Some((node, op, in_pipeline, inputs)) = stack.pop() {
        if node.is_error() || node.is_missing() {
            return Err("the command does not parse as bash (syntax error)".to_string());
        }
        match node.kind() {
            "program" | "list" | "pipeline" => {
                check_gaps(node, bytes, b" \t\n")?;
                let mut cursor = node.walk();
                let mut statements = Vec::new();
                let pipeline = node.kind() == "pipeline";
                let mut next_op = op;
                if !inputs.is_empty() && !pipeline {
                    return Err(format!(
                        "`{}` redirects the input of a list of commands",
                        shorten(text(node, bytes))
                    ));
                }
                for child in node.children(&mut cursor) {
                    if child.is_named() {
                        statements.push((child, next_op, in_pipeline || pipeline, Vec::new()));
                        continue;
                    }
                    match child.kind() {
                        "&&" => next_op = Op::And,
                        "||" => next_op = Op::Or,
                        ";" => next_op = Op::Seq,
                        "|" => next_op = Op::Pipe,
                        "&" => {
                            return Err(
                                "`&` runs a command in the background; only `&&`, `||`, `;`, `|` and newlines may join commands".to_string(),
                            );
                        }
                        "|&" => {
                            return Err(
                                "`|&` redirects standard error into the pipe (a redirection)"
                                    .to_string(),
                            );
                        }
                        other => {
                            return Err(format!(
                                "`{other}` is not one of `&&`, `||`, `;`, `|` or a newline"
                            ));
                        }
                    }
                }
                // Bash applies a redirection after a pipeline to its last member.
                if let Some(last) = statements.last_mut() {
                    last.3 = inputs;
                }
                stack.extend(statements.into_iter().rev());
            }
            "redirected_statement" => {
                let (body, more) = redirected(node, bytes)?;
                stack.push((body, op, in_pipeline, [inputs, more].concat()));
            }
            "test_command" => {
                let (name, args) = test_command(node, bytes)?;
                out.push(SimpleCommand {
                    name,
                    args,
                    op,
                    in_pipeline,
                    inputs,
                });
            }
            "command" => {
                let (name, args, own) = command(node, bytes)?;
                out.push(SimpleCommand {
                    name,
                    args,
                    op,
                    in_pipeline,
                    inputs: [inputs, own].concat(),
                });
            }
            other => return Err(construct(other, text(node, bytes))),
        }
    }
    if out.is_empty() {
        return Err("the command is empty".to_string());
    }
    if out.len() > MAX_COMMANDS {
        return Err(format!(
            "the command chains more than {MAX_COMMANDS} commands"
        ));
    }
    Ok(out)
}

/// The reason for rejecting a node of a kind the read-only subset does not include.
fn construct(kind: &str, text: &str) -> String {
    let what = match kind {
        "redirected_statement" | "file_redirect" => "a redirection",
        "heredoc_redirect" | "heredoc_body" | "heredoc_start" => "a heredoc",
        "herestring_redirect" => "a here-string",
        "subshell" => "a subshell `( … )`",
        "compound_statement" => "a group `{ … }` or an arithmetic command `(( … ))`",
        "function_definition" => "a function definition",
        "if_statement"
        | "while_statement"
        | "for_statement"
        | "c_style_for_statement"
        | "case_statement"
        | "do_group" => "control flow",
        "negated_command" => "a negated command `!`",
        "test_command" => "a test expression `[[ … ]]`",
        "extglob_pattern" | "regex" => "a pattern",
        "variable_assignment" | "variable_assignments" => "a variable assignment",
        "declaration_command" | "unset_command" => "a variable declaration or unset",
        "comment" => "a comment",
        "command_substitution" => "a command substitution",
        "process_substitution" => "a process substitution",
        "simple_expansion" | "expansion" => "a variable expansion",
        "arithmetic_expansion" => "an arithmetic expansion",
        "brace_expression" => "a brace expansion",
        "ansi_c_string" => "ANSI-C quoting `$'…'`",
        "translated_string" => "a locale string `$\"…\"`",
        _ => "a construct outside plain commands",
    };
    format!("`{}` is {what}", shorten(text))
}

fn shorten(s: &str) -> String {
    const MAX: usize = 60;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(MAX).collect();
        t.push('…');
        t
    }
}

/// The source text of a node. A node that does not start and end on character boundaries
/// (possible only inside a run of non-ASCII characters, see [`ascii_shadow`]) reads as a NUL,
/// which every later check refuses.
fn text<'a>(node: Node<'_>, bytes: &'a [u8]) -> &'a str {
    bytes
        .get(node.start_byte()..node.end_byte())
        .and_then(|b| std::str::from_utf8(b).ok())
        .unwrap_or("\0")
}

/// `src` with every non-ASCII character replaced by as many `x` as it has bytes, so byte offsets
/// stay the same. tree-sitter-bash crashes (SIGSEGV) on some non-ASCII input, e.g. `{` followed
/// by U+E0000, so it only ever sees ASCII. Bash treats non-ASCII characters as ordinary word
/// characters, as it does `x`, so the parse is the same; node texts are then read from the
/// original.
pub(crate) fn ascii_shadow(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for c in src.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            out.extend(std::iter::repeat_n('x', c.len_utf8()));
        }
    }
    out
}

fn only(bytes: &[u8], allowed: &[u8]) -> bool {
    bytes.iter().all(|b| allowed.contains(b))
}

/// The source between a node's children (and around them) must be plain blanks: this rejects a
/// backslash-newline line continuation, which tree-sitter drops but bash uses to join words.
fn check_gaps(node: Node<'_>, bytes: &[u8], allowed: &[u8]) -> Result<(), String> {
    let mut pos = node.start_byte();
    let mut cursor = node.walk();
    for child in node.children(&mut cursor) {
        let gap = bytes.get(pos..child.start_byte()).unwrap_or(&[]);
        if !only(gap, allowed) {
            return Err(format!(
                "`{}` between words is not plain whitespace (line continuation?)",
                shorten(&String::from_utf8_lossy(gap))
            ));
        }
        pos = child.end_byte();
    }
    let tail = bytes.get(pos..node.end_byte()).unwrap_or(&[]);
    if !only(tail, allowed) {
        return Err("the command has text outside its words".to_string());
    }
    Ok(())
}

/// `[ … ]` or `[[ … ]]` as a simple command named `[` or `[[` whose arguments are the
/// expression's words and operators in source order (and `]` for `[`), for the rules to
/// check like `test`. Patterns (`== y*`, `=~`), `<` and `>` (a redirection inside `[ ]`) and
/// every expansion are refused.
fn test_command(node: Node<'_>, bytes: &[u8]) -> Result<(String, Vec<Word>), String> {
    let mut cursor = node.walk();
    let children: Vec<Node<'_>> = node.children(&mut cursor).collect();
    let (Some(open), Some(close)) = (children.first(), children.last()) else {
        return Err(construct("test_command", text(node, bytes)));
    };
    let name = match (open.kind(), close.kind()) {
        ("[", "]") => "[",
        ("[[", "]]") => "[[",
        _ => return Err(construct("test_command", text(node, bytes))),
    };
    let mut args = Vec::new();
    for child in &children[1..children.len() - 1] {
        test_tokens(*child, bytes, &mut args)?;
    }
    if name == "[" {
        // The `[` builtin receives the closing bracket as its last argument.
        args.push(Word::literal("]"));
    }
    Ok((name.to_string(), args))
}

fn test_tokens(node: Node<'_>, bytes: &[u8], out: &mut Vec<Word>) -> Result<(), String> {
    let raw = text(node, bytes);
    match node.kind() {
        "unary_expression" | "binary_expression" | "parenthesized_expression" => {
            check_gaps(node, bytes, b" \t")?;
            let mut cursor = node.walk();
            for child in node.children(&mut cursor) {
                test_tokens(child, bytes, out)?;
            }
            Ok(())
        }
        "test_operator" => {
            out.push(Word::literal(raw));
            Ok(())
        }
        "!" | "(" | ")" | "&&" | "||" | "=" | "==" | "!=" => {
            out.push(Word::literal(raw));
            Ok(())
        }
        "word" | "raw_string" | "string" | "number" | "concatenation" => {
            out.push(word(&[node], bytes)?);
            Ok(())
        }
        other => Err(format!(
            "`{}` in a test expression is {}",
            shorten(raw),
            match other {
                "<" | ">" => "a comparison that `[` reads as a redirection".to_string(),
                _ => construct(other, raw),
            }
        )),
    }
}

/// A statement with redirections after it: its body (a command or a pipeline) and the files
/// its redirections read.
fn redirected<'t>(node: Node<'t>, bytes: &[u8]) -> Result<(Node<'t>, Vec<String>), String> {
    check_gaps(node, bytes, b" \t")?;
    let mut cursor = node.walk();
    let mut body: Option<Node<'t>> = None;
    let mut inputs = Vec::new();
    let mut prev_end = None;
    for child in node.children(&mut cursor) {
        match (child.kind(), body) {
            ("command" | "pipeline", None) => body = Some(child),
            ("file_redirect", Some(_)) => {
                inputs.extend(redirect(child, bytes, prev_end)?);
            }
            (other, _) => return Err(construct(other, text(child, bytes))),
        }
        prev_end = Some(child.end_byte());
    }
    let body = body.ok_or_else(|| construct("redirected_statement", text(node, bytes)))?;
    Ok((body, inputs))
}

/// One `file_redirect`: `Ok(Some(path))` for input from a file (to be checked as a read),
/// `Ok(None)` for a harmless one: output to `/dev/null` (`>`, `>>`, `&>`, `&>>`, `>|`,
/// `>&`), descriptor duplication (`2>&1`, `>&2`, `<&0`) and input from `/dev/null`. Anything
/// else writes or creates a file, closes a descriptor or opens something the path check cannot
/// see. `prev_end` is where the word before it ends: a redirection glued to it (`{fd}>`, `x2>`)
/// is one bash may read differently from tree-sitter.
fn redirect(
    node: Node<'_>,
    bytes: &[u8],
    prev_end: Option<usize>,
) -> Result<Option<String>, String> {
    let raw = text(node, bytes);
    let refuse = |why: &str| Err(format!("`{}` {why}", shorten(raw)));
    if prev_end == Some(node.start_byte()) {
        return refuse("is joined to the word before it; put a space before the redirection");
    }
    check_gaps(node, bytes, b" \t")?;
    let mut cursor = node.walk();
    let mut operators = Vec::new();
    let mut targets = Vec::new();
    for child in node.children(&mut cursor) {
        match child.kind() {
            "file_descriptor" => {}
            _ if !child.is_named() => operators.push(child.kind()),
            _ => targets.push(child),
        }
    }
    let ([operator], [target]) = (operators.as_slice(), targets.as_slice()) else {
        return refuse("is not a redirection of one descriptor to one plain word");
    };
    let target = word(&[*target], bytes)?;
    if target.expands {
        return refuse("expands a variable in its target");
    }
    if !target.globs.is_empty() {
        // Bash expands a redirection target to the one file it matches.
        return refuse("has a glob in its target");
    }
    let target = target.value;
    let is_fd = !target.is_empty() && target.chars().all(|c| c.is_ascii_digit());
    match *operator {
        ">" | ">>" | "&>" | "&>>" | ">|" if target == "/dev/null" => Ok(None),
        ">&" | "<&" if is_fd => Ok(None),
        ">&" if target == "/dev/null" => Ok(None),
        "<" if target == "/dev/null" => Ok(None),
        "<" => Ok(Some(target)),
        ">" | ">>" | "&>" | "&>>" | ">|" | ">&" => refuse(
            "is a redirection that writes a file (only `/dev/null` and `N>&M` are read-only)",
        ),
        _ => refuse("is a redirection the read-only subset does not include"),
    }
}

fn command(node: Node<'_>, bytes: &[u8]) -> Result<(String, Vec<Word>, Vec<String>), String> {
    check_gaps(node, bytes, b" \t")?;
    let mut cursor = node.walk();
    let mut inputs = Vec::new();
    let mut name: Option<(String, usize)> = None;
    // Argument nodes grouped into shell words: tree-sitter can give one word as adjacent
    // sibling nodes (`'-de'\lete` is a raw string then a word), which bash joins.
    let mut groups: Vec<Vec<Node<'_>>> = Vec::new();
    let mut prev_end: Option<usize> = None;
    let mut redirect_end: Option<usize> = None;
    for child in node.children(&mut cursor) {
        if !child.is_named() {
            return Err(format!(
                "`{}` is not part of a plain command",
                shorten(text(child, bytes))
            ));
        }
        let adjacent = prev_end == Some(child.start_byte());
        if adjacent && redirect_end == prev_end {
            return Err(format!(
                "`{}` is joined to the redirection before it; put a space after the redirection",
                shorten(text(child, bytes))
            ));
        }
        if child.kind() == "file_redirect" {
            inputs.extend(redirect(child, bytes, prev_end)?);
            prev_end = Some(child.end_byte());
            redirect_end = prev_end;
            continue;
        }
        prev_end = Some(child.end_byte());
        match (child.kind(), &name) {
            ("command_name", None) => {
                name = Some((command_name(child, bytes)?, child.end_byte()));
            }
            ("command_name", Some(_)) => {
                return Err("a command has two program names".to_string());
            }
            (_, None) => return Err(construct(child.kind(), text(child, bytes))),
            (_, Some((name, name_end))) => {
                if child.start_byte() == *name_end {
                    return Err(format!(
                        "the program name `{name}{}` is not a bare literal name (no paths, quotes, escapes or expansions)",
                        shorten(text(child, bytes))
                    ));
                }
                match groups.last_mut() {
                    Some(group) if adjacent => group.push(child),
                    _ => groups.push(vec![child]),
                }
            }
        }
    }
    let Some((name, _)) = name else {
        return Err("a command has no program name".to_string());
    };
    let args = groups
        .iter()
        .map(|group| word(group, bytes))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((name, args, inputs))
}

fn command_name(node: Node<'_>, bytes: &[u8]) -> Result<String, String> {
    let raw = text(node, bytes);
    let mut cursor = node.walk();
    let children: Vec<Node<'_>> = node.children(&mut cursor).collect();
    let plain = matches!(children.as_slice(), [only] if only.kind() == "word")
        && raw
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        && raw
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '+' | '-'));
    if plain {
        Ok(raw.to_string())
    } else {
        Err(format!(
            "the program name `{}` is not a bare literal name (no paths, quotes, escapes or expansions)",
            shorten(raw)
        ))
    }
}

/// What the unquoted parts of one word contain, for brace expansion: bash expands `{…}` only
/// with an unquoted `,` or `..` inside, so `HEAD@{1}` is literal but `{a,b}` is not.
#[derive(Default)]
struct Unquoted {
    brace: bool,
    comma_or_range: bool,
    /// A [`SHOWN_VARIABLES`] expansion was kept as written.
    expands: bool,
    /// Offsets of unquoted glob characters in the value.
    globs: Vec<usize>,
}

/// One shell word from adjacent argument nodes.
fn word(nodes: &[Node<'_>], bytes: &[u8]) -> Result<Word, String> {
    let mut value = String::new();
    let mut seen = Unquoted::default();
    for node in nodes {
        piece(*node, bytes, &mut value, &mut seen, true)?;
    }
    if seen.brace && seen.comma_or_range {
        let raw = match (nodes.first(), nodes.last()) {
            (Some(first), Some(last)) => bytes
                .get(first.start_byte()..last.end_byte())
                .map(String::from_utf8_lossy)
                .unwrap_or_default()
                .into_owned(),
            _ => String::new(),
        };
        return Err(format!(
            "`{}` has an unquoted `{{…}}` with `,` or `..` (brace expansion); quote it",
            shorten(&raw)
        ));
    }
    Ok(Word {
        value,
        globs: seen.globs,
        span: match (nodes.first(), nodes.last()) {
            (Some(first), Some(last)) => Some(first.start_byte()..last.end_byte()),
            _ => None,
        },
        expands: seen.expands,
    })
}

fn piece(
    node: Node<'_>,
    bytes: &[u8],
    value: &mut String,
    seen: &mut Unquoted,
    top: bool,
) -> Result<(), String> {
    let raw = text(node, bytes);
    match node.kind() {
        "word" | "number" => unquoted(raw, value, seen),
        "raw_string" => {
            let inner = raw
                .strip_prefix('\'')
                .and_then(|r| r.strip_suffix('\''))
                .ok_or_else(|| format!("`{}` is not a closed '…' string", shorten(raw)))?;
            value.push_str(inner);
            Ok(())
        }
        "simple_expansion" | "expansion" if shown_variable(raw) => {
            seen.expands = true;
            value.push_str(raw);
            Ok(())
        }
        "string" => {
            let mut cursor = node.walk();
            for child in node.children(&mut cursor) {
                let kind = child.kind();
                let shown = matches!(kind, "simple_expansion" | "expansion")
                    && shown_variable(text(child, bytes));
                if child.is_named() && kind != "string_content" && !shown {
                    return Err(construct(kind, text(child, bytes)));
                }
            }
            let inner = raw
                .strip_prefix('"')
                .and_then(|r| r.strip_suffix('"'))
                .ok_or_else(|| format!("`{}` is not a closed \"…\" string", shorten(raw)))?;
            double_quoted(inner, value, seen)
        }
        "concatenation" if top => {
            let mut cursor = node.walk();
            let mut pos = node.start_byte();
            for child in node.children(&mut cursor) {
                if !child.is_named() {
                    return Err(format!(
                        "`{}` in `{}` is an expansion character",
                        text(child, bytes),
                        shorten(raw)
                    ));
                }
                if child.start_byte() != pos {
                    return Err(format!("`{}` is not one contiguous word", shorten(raw)));
                }
                pos = child.end_byte();
                piece(child, bytes, value, seen, false)?;
            }
            if pos != node.end_byte() {
                return Err(format!("`{}` is not one contiguous word", shorten(raw)));
            }
            Ok(())
        }
        other => Err(construct(other, raw)),
    }
}

/// An unquoted word: backslash escapes make the next character literal; expansion, glob, brace
/// and tilde characters are rejected because the shell would rewrite the word after
/// classification.
fn unquoted(raw: &str, value: &mut String, seen: &mut Unquoted) -> Result<(), String> {
    let mut chars = raw.chars().peekable();
    let mut prev: Option<char> = None;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') | None => {
                    return Err(format!(
                        "`{}` ends in a backslash (line continuation)",
                        shorten(raw)
                    ));
                }
                Some(escaped) => {
                    value.push(escaped);
                    prev = Some(escaped);
                    continue;
                }
            },
            // Recorded, not refused: the rules decide whether the names it may expand to
            // are harmless (the literal-prefix rule) and check them.
            '*' | '?' | '[' | ']' => {
                seen.globs.push(value.len());
                value.push(c);
            }
            '{' | '}' => {
                seen.brace = true;
                value.push(c);
            }
            ',' => {
                seen.comma_or_range = true;
                value.push(c);
            }
            '.' if prev == Some('.') => {
                seen.comma_or_range = true;
                value.push(c);
            }
            '~' if prev.is_none() || matches!(prev, Some('=' | ':')) => {
                return Err(format!(
                    "`{}` starts a tilde expansion `~` (home directory)",
                    shorten(raw)
                ));
            }
            '$' | '`' => {
                return Err(format!(
                    "`{}` has an unquoted `{c}` (expansion)",
                    shorten(raw)
                ));
            }
            c if c.is_alphanumeric()
                || matches!(
                    c,
                    '-' | '_'
                        | '.'
                        | '/'
                        | ','
                        | ':'
                        | '='
                        | '+'
                        | '@'
                        | '%'
                        | '^'
                        | '~'
                        | '!'
                        | '#'
                ) =>
            {
                value.push(c);
            }
            other => {
                return Err(format!(
                    "`{}` has the unquoted character `{other}`",
                    shorten(raw)
                ));
            }
        }
        prev = Some(c);
    }
    Ok(())
}

/// The inside of a double-quoted string: only `\$ \` \" \\` and backslash-newline are escapes;
/// any `$` or backquote would expand and is rejected.
fn double_quoted(inner: &str, value: &mut String, seen: &mut Unquoted) -> Result<(), String> {
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '$' if let Some(variable) = leading_shown_variable(chars.as_str()) => {
                seen.expands = true;
                value.push('$');
                value.push_str(variable);
                for _ in variable.chars() {
                    chars.next();
                }
            }
            '\\' => match chars.next() {
                Some(e @ ('$' | '`' | '"' | '\\')) => value.push(e),
                Some('\n') => {}
                Some(other) => {
                    value.push('\\');
                    value.push(other);
                }
                None => value.push('\\'),
            },
            '$' | '`' => {
                return Err(format!(
                    "\"{}\" contains `{c}`, which expands inside double quotes",
                    shorten(inner)
                ));
            }
            other => value.push(other),
        }
    }
    Ok(())
}

/// The `NAME` or `{NAME}` at the start of `rest` (just after a `$`) when it is one of
/// [`SHOWN_VARIABLES`] and ends there (`$PATHX` is another variable).
fn leading_shown_variable(rest: &str) -> Option<&str> {
    if let Some(braced) = rest.strip_prefix('{') {
        let end = braced.find('}')?;
        let name = &braced[..end];
        return SHOWN_VARIABLES.contains(&name).then(|| &rest[..end + 2]);
    }
    if rest.starts_with('?') {
        return Some(&rest[..1]);
    }
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    let name = &rest[..end];
    SHOWN_VARIABLES.contains(&name).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(src: &str) -> Result<Vec<Vec<String>>, String> {
        parse(src).map(|cmds| {
            cmds.into_iter()
                .map(|c| {
                    std::iter::once(c.name)
                        .chain(c.args.into_iter().map(|w| w.value))
                        .collect()
                })
                .collect()
        })
    }

    #[test]
    fn plain_commands_parse_to_argv() {
        let table: &[(&str, &[&[&str]])] = &[
            ("ls -la", &[&["ls", "-la"]]),
            ("ls -la\ngit status", &[&["ls", "-la"], &["git", "status"]]),
            ("cat a | head -5", &[&["cat", "a"], &["head", "-5"]]),
            ("a && b || c; d", &[&["a"], &["b"], &["c"], &["d"]]),
            ("echo 'x y' \"a\\\"b\"", &[&["echo", "x y", "a\"b"]]),
            (
                "find . \\( -name a \\)",
                &[&["find", ".", "(", "-name", "a", ")"]],
            ),
            ("echo a'b'\"c\"", &[&["echo", "abc"]]),
            ("git show HEAD~1:a.md", &[&["git", "show", "HEAD~1:a.md"]]),
            ("git show HEAD@{1}", &[&["git", "show", "HEAD@{1}"]]),
            ("find . '-de'\\lete", &[&["find", ".", "-delete"]]),
            ("echo 'b c'\\* '~'\\~", &[&["echo", "b c*", "~~"]]),
            ("echo {'a,b'}", &[&["echo", "{a,b}"]]),
        ];
        for (src, want) in table {
            let want: Vec<Vec<String>> = want
                .iter()
                .map(|c| c.iter().map(|s| (*s).to_string()).collect())
                .collect();
            assert_eq!(argv(src), Ok(want), "{src:?}");
        }
    }

    #[test]
    fn input_redirections_are_recorded() {
        let inputs = |src: &str| -> Result<Vec<Vec<String>>, String> {
            parse(src).map(|cmds| cmds.into_iter().map(|c| c.inputs).collect())
        };
        let table: &[(&str, &[&[&str]])] = &[
            ("wc -l < a", &[&["a"]]),
            ("ls 2>/dev/null", &[&[]]),
            ("cat < a | sort < b", &[&["a"], &["b"]]),
            ("ls | sort < b", &[&[], &["b"]]),
            ("sort < /dev/null", &[&[]]),
            ("2>&1 cat < 'x y'", &[&["x y"]]),
        ];
        for (src, want) in table {
            let want: Vec<Vec<String>> = want
                .iter()
                .map(|c| c.iter().map(|s| (*s).to_string()).collect())
                .collect();
            assert_eq!(inputs(src), Ok(want), "{src:?}");
        }
    }

    #[test]
    fn operators_are_recorded() {
        let ops = |src: &str| -> Vec<(Op, bool)> {
            parse(src)
                .unwrap_or_default()
                .into_iter()
                .map(|c| (c.op, c.in_pipeline))
                .collect()
        };
        use Op::*;
        assert_eq!(
            ops("a && b || c; d\ne"),
            vec![
                (Seq, false),
                (And, false),
                (Or, false),
                (Seq, false),
                (Seq, false)
            ]
        );
        assert_eq!(
            ops("a | b && c || d | e"),
            vec![
                (Seq, true),
                (Pipe, true),
                (And, false),
                (Or, true),
                (Pipe, true)
            ]
        );
    }

    #[test]
    fn shown_variables_are_kept_as_written_and_marked() {
        for (src, value) in [
            ("echo $HOME", "$HOME"),
            ("echo \"$PWD/x\"", "$PWD/x"),
            ("echo \"${USER}@\"", "${USER}@"),
            ("echo \"exit $?\"", "exit $?"),
        ] {
            let commands = parse(src).expect(src);
            let word = &commands[0].args[0];
            assert_eq!(word.value, value, "{src}");
            assert!(word.expands, "{src}");
        }
        let literal = parse("echo '$HOME' \"\\$HOME\"").expect("literal dollars");
        assert!(literal[0].args.iter().all(|w| !w.expands));
    }

    #[test]
    fn constructs_are_rejected() {
        for src in [
            "ls >x",
            "ls 2>x",
            "ls >&x",
            "ls 0<x y",
            "ls 2>&-",
            "ls {fd}>/dev/null",
            "ls >/dev/null x",
            "(ls) >/dev/null",
            "a && b < x",
            "ls &",
            "echo $'x'",
            "cat${IFS}x",
            "\\rm x",
            "r''m x",
            "\"rm\" x",
            "echo a\\\nb",
            "ls >*.txt",
            "cat < src/*.rs",
            "ls {a,b}",
            "ls {a'',b}",
            "ls x{a,'b'}",
            "ls {a..c}",
            "ls {1..3}",
            "ls ~/x",
            "echo $(id)",
            "echo `id`",
            "a=1 ls",
            "(ls)",
            "{ ls; }",
            "ls # c",
            "! ls",
            "ls |& cat",
            "echo a$",
            "",
            "   ",
            "ls\r",
            "if true; then ls; fi",
            "f() { ls; }",
            "cat <<EOF\nx\nEOF",
            "cat <<< x",
            "diff <(ls) <(ls)",
            "echo $((1+2))",
            "echo \"$SECRET\"",
            "echo $HOMEX",
            "echo ${HOME:-x}",
            "[[ x == y* ]]",
            "[[ x =~ y ]]",
            "[ a > b ]",
            "[[ $x ]]",
            "[ \"$(id)\" ]",
            "ls &&",
        ] {
            assert!(argv(src).is_err(), "{src:?} should be rejected");
        }
    }
}
