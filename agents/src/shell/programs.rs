//! Programs given to `awk` and `jq` on the command line: read-only only when a conservative
//! look at the program text finds none of the constructs that run commands, write files or
//! read files the path check never saw. These are not parsers: they refuse on any occurrence
//! of a risky word or character anywhere in the text (strings and regular expressions
//! included), so a program they accept cannot hide one from them.

/// Words whose appearance anywhere in an awk program makes it not read-only.
const AWK_FORBIDDEN: &[(&str, &str)] = &[
    ("system", "runs a shell command"),
    (
        "getline",
        "reads from a command or a file the path check never saw",
    ),
    (
        "ENVIRON",
        "reads the environment (which may hold credentials)",
    ),
    ("ARGV", "can change the files awk reads"),
    ("ARGC", "can change the files awk reads"),
    (
        "/inet",
        "opens a network connection (gawk's /inet special files)",
    ),
    (
        "@",
        "loads extensions or source files, or calls a function by name (gawk's @load, @include, @f())",
    ),
];

/// Is this awk program read-only? It may not mention [`AWK_FORBIDDEN`] words, may not use `|`
/// except in `||` (output and input pipes, `|&` coprocesses), and may not have a `>` anywhere
/// after its first `print`/`printf` (output redirection; a comparison before any `print`,
/// `$3 > 100 { print $1 }`, is fine, and so is one inside parentheses before it).
pub(crate) fn awk_program(program: &str) -> Result<(), String> {
    for (word, why) in AWK_FORBIDDEN {
        if program.contains(word) {
            return Err(format!("the awk program uses `{word}`, which {why}"));
        }
    }
    if lone_pipe(program) {
        return Err(
            "the awk program has a `|` (a pipe to or from a command, or a coprocess); only `||` is read-only"
                .to_string(),
        );
    }
    if let Some(print) = program.find("print")
        && program[print..].contains('>')
    {
        return Err(
            "the awk program has a `>` after `print`, which may redirect output to a file; compare before printing or use `<`"
                .to_string(),
        );
    }
    Ok(())
}

/// A `|` that is not half of `||`.
fn lone_pipe(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'|' {
            if bytes.get(i + 1) == Some(&b'|') {
                i += 2;
                continue;
            }
            return true;
        }
        i += 1;
    }
    false
}

/// Identifiers whose use in a jq program makes it not read-only. A field access `.env` is
/// fine; these are the names as builtins, keywords or variables.
const JQ_FORBIDDEN: &[(&str, &str)] = &[
    (
        "import",
        "loads a module or data file from the library search path",
    ),
    ("include", "loads a module from the library search path"),
    (
        "modulemeta",
        "reads module files from the library search path",
    ),
    ("env", "reads the environment (which may hold credentials)"),
    ("$ENV", "reads the environment (which may hold credentials)"),
];

/// Is this jq program read-only? jq cannot run commands or write files; it reads files only
/// through modules (`import`, `include`, `modulemeta`) and options the caller checks. It may
/// still read the environment, which is refused too.
pub(crate) fn jq_program(program: &str) -> Result<(), String> {
    for (start, token) in identifiers(program) {
        let field =
            start > 0 && program[..start].ends_with('.') && !program[..start].ends_with("..");
        if field {
            continue;
        }
        if let Some((word, why)) = JQ_FORBIDDEN.iter().find(|(word, _)| *word == token) {
            return Err(format!("the jq program uses `{word}`, which {why}"));
        }
    }
    Ok(())
}

/// The identifiers of a program (`$` included as the first character of a variable), with
/// their byte offsets.
fn identifiers(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    for (i, c) in text.char_indices() {
        let part = c.is_ascii_alphanumeric() || c == '_' || (c == '$' && start.is_none());
        match (part, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s, &text[s..i]));
                start = None;
            }
            _ => {}
        }
        // A `$` inside a word starts a new one: `a$ENV` is `a` then `$ENV`.
        if c == '$'
            && let Some(s) = start
            && s != i
        {
            out.push((s, &text[s..i]));
            start = Some(i);
        }
    }
    if let Some(s) = start {
        out.push((s, &text[s..]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn awk_programs() {
        let table: &[(&str, bool)] = &[
            ("{print $1}", true),
            ("NR<=5", true),
            ("$3 > 100 {print $1}", true),
            ("{if ($3 > 100) print $1}", true),
            ("/fn /{print FILENAME\": \"$0}", true),
            ("END {print NR}", true),
            ("{sum += $3} END {print sum}", true),
            ("$1 == \"a\" || $2 == \"b\"", true),
            ("{ n[$1]++ } END { for (k in n) print k, n[k] }", true),
            ("BEGIN{system(\"id\")}", false),
            ("{print | \"sh\"}", false),
            ("{print |& \"sh\"}", false),
            ("{\"date\" | getline d; print d}", false),
            ("{getline line < \"/etc/passwd\"; print line}", false),
            ("{getline}", false),
            ("{print > \"out.txt\"}", false),
            ("{print >> \"out.txt\"}", false),
            ("{printf \"%s\", $0 > \"/dev/stderr\"}", false),
            ("{print $1; if ($2 > 3) n++}", false),
            ("@load \"filefuncs\"", false),
            ("@include \"lib.awk\"", false),
            ("BEGIN { f = \"sys\" \"tem\"; @f(\"id\") }", false),
            ("BEGIN { print ENVIRON[\"HOME\"] }", false),
            (
                "BEGIN { ARGV[1] = \"/etc/passwd\"; ARGC = 2 } {print}",
                false,
            ),
            (
                "BEGIN { s = \"/inet/tcp/0/example.com/80\"; print \"x\" |& s }",
                false,
            ),
            ("/a|b/", false),
        ];
        for (program, ok) in table {
            assert_eq!(awk_program(program).is_ok(), *ok, "{program}");
        }
    }

    #[test]
    fn jq_programs() {
        let table: &[(&str, bool)] = &[
            (".", true),
            (".cells | length", true),
            ("-r", true),
            (".dependencies | keys[]", true),
            (".env", true),
            (".config.env.PATH", true),
            (".[] | {id, name}", true),
            ("$__loc__", true),
            ("input_filename", true),
            (".important", true),
            ("[.[] | select(.included)]", true),
            ("import \"x\" as x; .", false),
            ("include \"x\"; .", false),
            ("import \"data\" as $d; $d", false),
            ("\"x\" | modulemeta", false),
            ("env", false),
            ("env.HOME", false),
            ("$ENV.ANTHROPIC_API_KEY", false),
            ("$ENV", false),
            ("\"\\(env.HOME)\"", false),
            ("..env", false),
            ("{env}", false),
        ];
        for (program, ok) in table {
            assert_eq!(jq_program(program).is_ok(), *ok, "{program}");
        }
    }
}
