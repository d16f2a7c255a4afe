//! Per-command rules: the allow-list, forbidden flags (split, `=`, attached and abbreviated
//! forms), and which arguments are paths to check as a `Read`.

use super::glob;
use super::parse::{Op, SimpleCommand, Word};
use super::paths::{EntryKind, ReadPathCheck};
use super::programs::{awk_program, jq_program};
use super::rewrite::Expansion;

/// Most distinct working directories `cd` may lead to within one command.
const MAX_CWDS: usize = 16;

/// Commands whose arguments are only printed or cut as text, never opened or taken as
/// options that change what they do: the only ones that may get a variable's value.
const PRINTS_ITS_ARGUMENTS: [&str; 4] = ["echo", "printf", "basename", "dirname"];

/// Most files one glob may be checked against; a glob over more is not read-only.
const MAX_GLOB_MATCHES: usize = 1000;

/// Checks the simple commands of one shell command.
pub(crate) struct Checker<'a> {
    paths: &'a dyn ReadPathCheck,
    /// Directories the command being checked may run in: `""` is the starting directory.
    cwds: Vec<String>,
    /// Where a successful `cd` just checked leads, from each of `cwds`.
    cd_to: Option<Vec<String>>,
    /// For each argument of the command being checked: is it an unquoted glob?
    arg_globs: Vec<bool>,
    /// Globs without a literal prefix, expanded here; the command runs with their matches.
    expansions: Vec<Expansion>,
}

fn union(a: &[String], b: &[String]) -> Vec<String> {
    let mut out = a.to_vec();
    for x in b {
        if !out.contains(x) {
            out.push(x.clone());
        }
    }
    out
}

/// Check every simple command in order, tracking the directories `cd` may have moved to: after
/// `cd X && Y`, `Y` runs in `X`; after `cd X; Y` or `cd X || Y` it may run in either; a `cd`
/// inside a pipeline runs in a subshell and moves nothing. Returns the globs it expanded.
pub(crate) fn check_all(
    paths: &dyn ReadPathCheck,
    commands: &[SimpleCommand],
) -> Result<Vec<Expansion>, String> {
    let start = vec![String::new()];
    let mut checker = Checker::new(paths);
    // Possible directories after the last command succeeded / failed.
    let (mut succ, mut fail) = (start.clone(), start);
    // The state before the current pipeline, and the operator before it.
    let (mut before, mut pipe_op) = ((succ.clone(), fail.clone()), Op::Seq);
    for cmd in commands {
        if cmd.op != Op::Pipe {
            before = (succ.clone(), fail.clone());
            pipe_op = cmd.op;
        }
        let (prev_succ, prev_fail) = &before;
        let input = match pipe_op {
            Op::And => prev_succ.clone(),
            Op::Or => prev_fail.clone(),
            Op::Seq | Op::Pipe => union(prev_succ, prev_fail),
        };
        checker.cwds = input.clone();
        checker.cd_to = None;
        checker.check(cmd)?;
        let moved = match checker.cd_to.take() {
            Some(to) if !cmd.in_pipeline => to,
            _ => input.clone(),
        };
        (succ, fail) = match pipe_op {
            Op::And => (moved, union(prev_fail, &input)),
            Op::Or => (union(prev_succ, &moved), input),
            Op::Seq | Op::Pipe => (moved, input),
        };
        if succ.len() + fail.len() > MAX_CWDS {
            return Err(format!(
                "more than {MAX_CWDS} possible working directories after `cd`"
            ));
        }
    }
    Ok(checker.expansions)
}

/// What positional (non-option) arguments are.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pos {
    /// Files or directories that are read.
    Paths,
    /// A pattern first (unless given by an option such as `-e`/`-f`), then paths.
    PatternThenPaths,
    /// Not paths (`echo` text, `tr` sets, `seq` numbers).
    NotPaths,
    /// `date`: only `+FORMAT`; `date MMDDhhmm` sets the clock.
    DateFormat,
}

/// The option grammar of one allowed command. Long options are also matched by unambiguous
/// prefix, as GNU `getopt_long` and git accept abbreviations (`--out=f` is `--output=f`).
#[derive(Clone, Copy)]
struct Spec {
    pos: Pos,
    /// Short options that take a required value which is not a path.
    short_val: &'static str,
    /// Short options whose required value is a path that is read.
    short_path: &'static str,
    /// Short options with an optional value, which can only be attached (`date -Iseconds`).
    short_opt: &'static str,
    /// Long options that take a required value which is not a path.
    long_val: &'static [&'static str],
    /// Long options whose required value is a path that is read.
    long_path: &'static [&'static str],
    /// Short options that make the command not read-only (also inside clusters: `-nz`).
    forbid_short: &'static str,
    /// Long options that make the command not read-only (also `--opt=…` and abbreviations).
    forbid_long: &'static [&'static str],
    /// Why the forbidden options are forbidden.
    forbid_why: &'static str,
    /// Options that supply the pattern, so the first positional is a path.
    pattern_short: &'static str,
    pattern_long: &'static [&'static str],
    /// Options that make a content search recursive (directories are read as whole trees).
    recursive_short: &'static str,
    recursive_long: &'static [&'static str],
    /// Content search that always recurses into directories (`rg`), searching `.` by default.
    always_recursive: bool,
    /// Most positional arguments (a further one would be an output file: `uniq in out`).
    max_pos: Option<usize>,
}

const BASE: Spec = Spec {
    pos: Pos::Paths,
    short_val: "",
    short_path: "",
    short_opt: "",
    long_val: &[],
    long_path: &[],
    forbid_short: "",
    forbid_long: &[],
    forbid_why: "",
    pattern_short: "",
    pattern_long: &[],
    recursive_short: "",
    recursive_long: &[],
    always_recursive: false,
    max_pos: None,
};

const NOT_PATHS: Spec = Spec {
    pos: Pos::NotPaths,
    ..BASE
};

const GREP: Spec = Spec {
    pos: Pos::PatternThenPaths,
    short_val: "emABCdD",
    short_path: "f",
    long_val: &[
        "regexp",
        "max-count",
        "after-context",
        "before-context",
        "context",
        "include",
        "exclude",
        "exclude-dir",
        "label",
        "binary-files",
        "devices",
        "directories",
        "group-separator",
    ],
    long_path: &["file", "exclude-from"],
    pattern_short: "ef",
    pattern_long: &["regexp", "file"],
    recursive_short: "rR",
    recursive_long: &["recursive", "dereference-recursive"],
    ..BASE
};

const RG: Spec = Spec {
    pos: Pos::PatternThenPaths,
    short_val: "egtTmABCjMrEd",
    short_path: "f",
    long_val: &[
        "regexp",
        "glob",
        "iglob",
        "type",
        "type-not",
        "type-add",
        "type-clear",
        "max-count",
        "after-context",
        "before-context",
        "context",
        "threads",
        "max-columns",
        "replace",
        "encoding",
        "max-depth",
        "maxdepth",
        "max-filesize",
        "sort",
        "sortr",
        "color",
        "colors",
        "path-separator",
        "context-separator",
        "field-match-separator",
        "field-context-separator",
        "engine",
        "dfa-size-limit",
        "regex-size-limit",
        "pre-glob",
        "hyperlink-format",
    ],
    long_path: &["file", "ignore-file"],
    forbid_short: "z",
    forbid_long: &["pre", "hostname-bin", "search-zip"],
    forbid_why: "makes rg run another program (a preprocessor, a hostname program or decompressors)",
    pattern_short: "ef",
    pattern_long: &["regexp", "file", "files"],
    always_recursive: true,
    ..BASE
};

const GIT_GREP: Spec = Spec {
    pos: Pos::PatternThenPaths,
    short_val: "eABCm",
    short_path: "f",
    long_val: &[
        "max-depth",
        "max-count",
        "threads",
        "context",
        "after-context",
        "before-context",
    ],
    long_path: &["file"],
    forbid_short: "O",
    forbid_long: &["open-files-in-pager", "textconv"],
    forbid_why: "opens a pager or runs a text converter",
    pattern_short: "ef",
    pattern_long: &["file"],
    always_recursive: true,
    ..BASE
};

/// The rule for an allowed command, or `None` if the command is not on the allow-list.
fn spec(name: &str) -> Option<Spec> {
    let spec = match name {
        "md5sum" | "sha1sum" | "sha224sum" | "sha256sum" | "sha384sum" | "sha512sum" | "b2sum"
        | "cksum" | "sum" => Spec {
            short_val: "a",
            long_val: &["algorithm", "length"],
            forbid_short: "c",
            forbid_long: &["check"],
            forbid_why: "reads the files a checksum list names, which cannot be checked beforehand",
            ..BASE
        },
        "cat" | "rev" | "realpath" | "readlink" => Spec {
            long_path: &["relative-to", "relative-base"],
            ..BASE
        },
        "ls" => Spec {
            short_val: "IwT",
            long_val: &[
                "ignore",
                "hide",
                "width",
                "tabsize",
                "format",
                "sort",
                "time",
                "time-style",
                "quoting-style",
                "indicator-style",
                "block-size",
            ],
            ..BASE
        },
        "head" | "tail" => Spec {
            short_val: "ncs",
            long_val: &[
                "bytes",
                "lines",
                "sleep-interval",
                "pid",
                "max-unchanged-stats",
            ],
            ..BASE
        },
        "wc" => Spec {
            forbid_long: &["files0-from"],
            forbid_why: "reads the files named in a list, which cannot be checked beforehand",
            ..BASE
        },
        "stat" => Spec {
            short_val: "c",
            long_val: &["format", "printf"],
            ..BASE
        },
        "file" => Spec {
            short_val: "FeP",
            short_path: "m",
            long_val: &["separator", "exclude", "exclude-quiet", "parameter"],
            long_path: &["magic-file"],
            forbid_short: "Cf",
            forbid_long: &["compile", "files-from"],
            forbid_why: "writes a compiled magic file or reads the files named in a list (which cannot be checked beforehand)",
            ..BASE
        },
        "nl" => Spec {
            short_val: "bdfhilnsvw",
            long_val: &[
                "body-numbering",
                "section-delimiter",
                "footer-numbering",
                "header-numbering",
                "line-increment",
                "join-blank-lines",
                "number-format",
                "number-separator",
                "starting-line-number",
                "number-width",
            ],
            ..BASE
        },
        "cut" => Spec {
            short_val: "bcdf",
            long_val: &[
                "bytes",
                "characters",
                "delimiter",
                "fields",
                "output-delimiter",
            ],
            ..BASE
        },
        "paste" => Spec {
            short_val: "d",
            long_val: &["delimiters"],
            ..BASE
        },
        "tac" => Spec {
            short_val: "s",
            long_val: &["separator"],
            ..BASE
        },
        "fold" | "fmt" => Spec {
            short_val: "wpg",
            long_val: &["width", "prefix", "goal"],
            ..BASE
        },
        "expand" | "unexpand" => Spec {
            short_val: "t",
            long_val: &["tabs"],
            ..BASE
        },
        "column" => Spec {
            short_val: "csoNEWHRl",
            long_val: &[
                "columns",
                "separator",
                "output-separator",
                "table-columns",
                "table-noextreme",
                "table-wrap",
                "table-hide",
                "table-right",
                "table-columns-limit",
            ],
            ..BASE
        },
        "comm" => Spec {
            long_val: &["output-delimiter"],
            ..BASE
        },
        "join" => Spec {
            short_val: "aejot12",
            ..BASE
        },
        "diff" => Spec {
            short_val: "CUDIFSxL",
            short_path: "X",
            long_val: &[
                "label",
                "ignore-matching-lines",
                "show-function-line",
                "starting-file",
                "exclude",
                "horizon-lines",
                "line-format",
                "old-line-format",
                "new-line-format",
                "unchanged-line-format",
                "changed-group-format",
                "old-group-format",
                "new-group-format",
                "unchanged-group-format",
                "tabsize",
                "width",
                "palette",
            ],
            long_path: &["exclude-from", "from-file", "to-file"],
            // Comparing directories reads the files in them, even without `-r`.
            always_recursive: true,
            ..BASE
        },
        "cmp" => Spec {
            short_val: "in",
            long_val: &["ignore-initial", "bytes"],
            ..BASE
        },
        "du" => Spec {
            short_val: "dBt",
            short_path: "X",
            long_val: &[
                "max-depth",
                "block-size",
                "threshold",
                "exclude",
                "time-style",
            ],
            long_path: &["exclude-from"],
            forbid_long: &["files0-from"],
            forbid_why: "reads the files named in a list, which cannot be checked beforehand",
            ..BASE
        },
        "df" => Spec {
            short_val: "Btx",
            long_val: &["block-size", "type", "exclude-type"],
            ..BASE
        },
        "od" => Spec {
            short_val: "AjNSt",
            short_opt: "w",
            long_val: &[
                "address-radix",
                "skip-bytes",
                "read-bytes",
                "format",
                "endian",
            ],
            ..BASE
        },
        "hexdump" => Spec {
            short_val: "ens",
            short_path: "f",
            ..BASE
        },
        "strings" => Spec {
            short_val: "ntTes",
            long_val: &["bytes", "radix", "encoding", "target", "output-separator"],
            ..BASE
        },
        "xxd" => Spec {
            short_val: "cglso",
            max_pos: Some(1),
            ..BASE
        },
        "uniq" => Spec {
            short_val: "fsw",
            long_val: &["skip-fields", "skip-chars", "check-chars"],
            max_pos: Some(1),
            ..BASE
        },
        "sort" => Spec {
            short_val: "ktS",
            long_val: &[
                "key",
                "field-separator",
                "buffer-size",
                "parallel",
                "batch-size",
                "sort",
            ],
            long_path: &["random-source"],
            forbid_short: "oT",
            forbid_long: &[
                "output",
                "compress-program",
                "temporary-directory",
                "files0-from",
            ],
            forbid_why: "writes a file, runs a compression program or reads the files named in a list (which cannot be checked beforehand)",
            ..BASE
        },
        "base64" | "base32" | "basenc" => Spec {
            short_val: "w",
            short_path: "i",
            long_val: &["wrap"],
            long_path: &["input"],
            forbid_short: "o",
            forbid_long: &["output"],
            forbid_why: "writes its output to a file",
            ..BASE
        },
        "tree" => Spec {
            short_val: "LPIHT",
            long_val: &["filelimit", "charset", "timefmt", "sort"],
            forbid_short: "oR",
            forbid_long: &["output"],
            forbid_why: "writes its output to files",
            ..BASE
        },
        "fd" | "fdfind" => Spec {
            pos: Pos::PatternThenPaths,
            short_val: "dteEcjSo",
            long_val: &[
                "max-depth",
                "min-depth",
                "exact-depth",
                "type",
                "extension",
                "exclude",
                "color",
                "threads",
                "size",
                "changed-within",
                "changed-before",
                "owner",
                "path-separator",
                "format",
                "max-results",
                "batch-size",
            ],
            long_path: &["search-path", "ignore-file"],
            forbid_short: "xX",
            forbid_long: &["exec", "exec-batch", "base-directory"],
            forbid_why: "runs a command for the files it finds, or changes the directory its paths are relative to",
            pattern_long: &["search-path"],
            ..BASE
        },
        "grep" | "egrep" | "fgrep" => GREP,
        "rg" => RG,
        "date" => Spec {
            pos: Pos::DateFormat,
            short_val: "d",
            short_path: "fr",
            short_opt: "I",
            long_val: &["date"],
            long_path: &["file", "reference"],
            forbid_short: "s",
            forbid_long: &["set"],
            forbid_why: "sets the system clock",
            ..BASE
        },
        "echo" | "printf" | "seq" | "expr" | "basename" | "dirname" | "tr" | "which" | "type"
        | "true" | "false" | "pwd" | "id" | "whoami" | "uname" | "nproc" | "arch" | "groups" => {
            NOT_PATHS
        }
        _ => return None,
    };
    Some(spec)
}

/// Why a program that is not on the allow-list is never read-only, by family.
fn never_reason(name: &str) -> String {
    const INTERPRETERS: &[&str] = &[
        "python",
        "python2",
        "python3",
        "node",
        "nodejs",
        "deno",
        "bun",
        "perl",
        "ruby",
        "php",
        "lua",
        "luajit",
        "awk",
        "gawk",
        "mawk",
        "nawk",
        "bash",
        "sh",
        "zsh",
        "dash",
        "ksh",
        "fish",
        "csh",
        "tcsh",
        "osascript",
        "pwsh",
        "powershell",
        "tclsh",
        "expect",
        "Rscript",
        "irb",
        "ghci",
        "julia",
        "java",
        "jshell",
        "scala",
        "groovy",
        "jq",
        "eval",
        "source",
        "busybox",
    ];
    const WRAPPERS: &[&str] = &[
        "xargs",
        "env",
        "timeout",
        "nice",
        "nohup",
        "sudo",
        "doas",
        "su",
        "command",
        "builtin",
        "exec",
        "time",
        "watch",
        "strace",
        "ltrace",
        "gdb",
        "chroot",
        "unshare",
        "setsid",
        "stdbuf",
        "ionice",
        "taskset",
        "flock",
        "parallel",
        "script",
        "runuser",
        "fakeroot",
        "nsenter",
        "firejail",
        "caffeinate",
        "chronic",
        "unbuffer",
    ];
    const EDITORS: &[&str] = &[
        "vi", "vim", "nvim", "view", "vimdiff", "nano", "pico", "emacs", "ed", "ex", "joe",
        "micro", "code", "subl", "less", "more", "most", "man", "info", "pager",
    ];
    const BUILD: &[&str] = &[
        "npm", "npx", "yarn", "pnpm", "pip", "pip3", "pipx", "uv", "uvx", "poetry", "conda", "gem",
        "bundle", "bundler", "cargo", "rustc", "rustup", "go", "make", "cmake", "ninja", "gradle",
        "gradlew", "mvn", "ant", "apt", "apt-get", "dpkg", "yum", "dnf", "rpm", "pacman", "brew",
        "apk", "snap", "flatpak", "nix", "bazel", "meson", "scons", "composer", "dotnet", "mix",
        "stack", "cabal", "swift", "zig", "gcc", "g++", "cc", "clang", "ld", "tsc", "webpack",
        "vite", "just", "task", "tox", "nox", "pytest",
    ];
    const NETWORK: &[&str] = &[
        "curl", "wget", "ssh", "scp", "sftp", "rsync", "nc", "ncat", "netcat", "telnet", "ftp",
        "ping", "dig", "nslookup", "host", "socat", "http", "https", "aria2c", "gh", "aws",
        "gcloud", "az", "kubectl", "docker", "podman",
    ];
    const MUTATING: &[&str] = &[
        "rm",
        "rmdir",
        "mv",
        "cp",
        "touch",
        "mkdir",
        "chmod",
        "chown",
        "chgrp",
        "ln",
        "dd",
        "tee",
        "truncate",
        "install",
        "shred",
        "mkfs",
        "mount",
        "umount",
        "kill",
        "pkill",
        "killall",
        "shutdown",
        "reboot",
        "systemctl",
        "service",
        "crontab",
        "patch",
        "split",
        "csplit",
        "tar",
        "zip",
        "unzip",
        "gzip",
        "gunzip",
        "bzip2",
        "xz",
        "unxz",
        "7z",
        "mkfifo",
        "mknod",
        "link",
        "unlink",
        "sync",
        "sqlite3",
        "mysql",
        "psql",
        "export",
        "set",
        "unset",
        "alias",
        "cd-",
        "pushd",
        "popd",
        "trap",
        "ulimit",
        "umask",
        "read",
        "mapfile",
        "shift",
        "hash",
        "history",
        "fc",
        "exit",
        "logout",
        "wait",
        "jobs",
        "fg",
        "bg",
        "disown",
    ];
    let family = if INTERPRETERS.contains(&name) || name.starts_with("python") {
        "is an interpreter: it can run arbitrary code"
    } else if WRAPPERS.contains(&name) {
        "runs another command given as its arguments"
    } else if EDITORS.contains(&name) {
        "is an editor or pager (they can write files or run shell escapes)"
    } else if BUILD.contains(&name) {
        "is a package manager or build tool (it runs project code and writes files)"
    } else if NETWORK.contains(&name) {
        "is a network tool"
    } else if MUTATING.contains(&name) || name.starts_with("mkfs") {
        "changes files or shell state"
    } else {
        "is not on the read-only allow-list"
    };
    format!("`{name}` {family}")
}

#[derive(Default)]
struct Scan {
    positional: Vec<String>,
    pattern_given: bool,
    recursive: bool,
}

enum LongKind {
    Path,
    Value,
    Flag,
}

fn long_kind(spec: &Spec, opt: &str) -> LongKind {
    if spec.long_path.contains(&opt) {
        LongKind::Path
    } else if spec.long_val.contains(&opt) {
        LongKind::Value
    } else if spec.long_path.iter().any(|p| p.starts_with(opt)) {
        LongKind::Path
    } else if spec.long_val.iter().any(|p| p.starts_with(opt)) {
        LongKind::Value
    } else {
        LongKind::Flag
    }
}

fn values(words: &[Word]) -> Vec<&str> {
    words.iter().map(|w| w.value.as_str()).collect()
}

impl<'a> Checker<'a> {
    pub(crate) fn new(paths: &'a dyn ReadPathCheck) -> Self {
        Self {
            paths,
            cwds: vec![String::new()],
            cd_to: None,
            arg_globs: Vec::new(),
            expansions: Vec::new(),
        }
    }

    /// Is this simple command read-only? `Err` carries the reason.
    pub(crate) fn check(&mut self, cmd: &SimpleCommand) -> Result<(), String> {
        let name = cmd.name.as_str();
        let args = values(&cmd.args);
        if let Some(word) = cmd.args.iter().find(|w| w.expands)
            && !PRINTS_ITS_ARGUMENTS.contains(&name)
        {
            return Err(format!(
                "`{}` is a variable expansion: `$?`, `$PWD`, `$HOME`, `$USER`, `$SHELL` and `$PATH` are read-only only as arguments of {}, where they cannot become a path or an option",
                word.value,
                PRINTS_ITS_ARGUMENTS.join(", ")
            ));
        }
        // The shell opens `< file` before the program runs, from the same directory.
        for input in &cmd.inputs {
            self.read(&format!("{name} <"), input)?;
        }
        self.arg_globs = cmd.args.iter().map(|w| !w.globs.is_empty()).collect();
        if self.arg_globs.contains(&true) {
            self.glob_slots(name, &args)?;
            // A content search reads a matched directory as a whole tree.
            let tree = matches!(name, "grep" | "egrep" | "fgrep" | "rg" | "diff" | "git");
            for word in cmd.args.iter().filter(|w| !w.globs.is_empty()) {
                if option_value_glob(name, word) {
                    continue;
                }
                self.glob(name, word, tree)?;
            }
        }
        match name {
            "cd" => self.cd(&args),
            "find" => self.find(&args),
            "sed" => self.sed(&args),
            "git" => self.git(&args),
            "test" | "[" | "[[" => self.test(name, &args),
            "command" => command_lookup(&args),
            // `printf -v NAME` assigns a shell variable: `printf -v PATH ./x; ls` runs ./x/ls.
            "printf" if args.first().is_some_and(|a| a.starts_with("-v")) => Err(
                "`printf -v` assigns a shell variable, which can change what later commands run"
                    .to_string(),
            ),
            "awk" | "gawk" | "mawk" | "nawk" => self.awk(name, &args),
            "jq" => self.jq(&args),
            _ => match spec(name) {
                Some(spec) => self.generic(name, &spec, &args),
                None => Err(never_reason(name)),
            },
        }
    }

    /// Is argument `i` of the command being checked an unquoted glob?
    fn is_glob(&self, i: usize) -> bool {
        self.arg_globs.get(i).copied().unwrap_or(false)
    }

    /// Where a command may take globs at all: where every name a glob expands to is a file
    /// argument however many there are. Generic commands whose operands are all files (not
    /// `uniq`/`xxd`, whose last operand is an output, nor `echo`-like ones), `sed` after its
    /// script, git after `--`; awk and jq check their own operands. Elsewhere (`cd`, `find`,
    /// `test`, `[`, `command`, …) extra or unexpected words change what the command does.
    fn glob_slots(&self, name: &str, args: &[&str]) -> Result<(), String> {
        let refuse = |why: &str| {
            Err(format!(
                "`{name}` with an unquoted glob: {why}; quote it or name the files"
            ))
        };
        match name {
            "awk" | "gawk" | "mawk" | "nawk" | "jq" => Ok(()),
            "sed" if self.is_glob(0) || self.is_glob(1) => {
                refuse("only file operands after the script may be globs")
            }
            "sed" => Ok(()),
            "git" => {
                let end = args.iter().position(|a| *a == "--").unwrap_or(args.len());
                if (0..end).any(|i| self.is_glob(i)) {
                    refuse("git takes globs only as paths after `--`")
                } else {
                    Ok(())
                }
            }
            _ => match spec(name) {
                Some(spec)
                    if spec.max_pos.is_none()
                        && matches!(spec.pos, Pos::Paths | Pos::PatternThenPaths) =>
                {
                    Ok(())
                }
                _ => refuse("its expansion could change what the command does"),
            },
        }
    }

    /// `cmd` gets the expansion of the glob `word`: the literal-prefix rule, then a `Read`
    /// (a tree read when `tree`) of every file it could match now and of the word itself,
    /// which bash passes when nothing matches. See [`glob`].
    fn glob(&mut self, cmd: &str, word: &Word, tree: bool) -> Result<(), String> {
        if glob::without_prefix(&word.globs) {
            return self.expand(cmd, word, tree);
        }
        glob::literal_prefix_rule(&word.value, &word.globs).map_err(|e| format!("`{cmd}`: {e}"))?;
        let components = glob::components(&word.value, &word.globs);
        let start = if word.value.starts_with('/') { "/" } else { "" };
        for cwd in &self.cwds {
            let mut candidates = vec![start.to_string()];
            for component in &components {
                if component.glob {
                    candidates = self.glob_step(cmd, cwd, &candidates, component)?;
                } else {
                    for candidate in &mut candidates {
                        *candidate = glob::join(candidate, component.text);
                    }
                }
            }
            for candidate in &candidates {
                let path = Self::joined(cwd, candidate);
                let checked = if tree {
                    self.paths.check_read_tree(&path)
                } else {
                    self.paths.check_read(&path)
                };
                checked.map_err(|e| {
                    format!(
                        "`{cmd} {}` could expand to a path `Read` refuses: {e}",
                        word.value
                    )
                })?;
            }
        }
        if tree {
            self.read_tree(cmd, &word.value)
        } else {
            self.read(cmd, &word.value)
        }
    }

    /// A glob without a literal prefix (`*.rs`): expanded here exactly as bash would now, every
    /// match checked as a `Read` (a tree read when `tree`), and recorded so that the command
    /// runs with the matches, not the pattern. Refused where the expansion cannot be exact:
    /// bracket expressions, a component that could match `.`/`..`, `..`, more than one
    /// possible working directory, or a checker that cannot list and stat.
    fn expand(&mut self, cmd: &str, word: &Word, tree: bool) -> Result<(), String> {
        let value = &word.value;
        let refuse = |why: &str| {
            Err(format!(
                "`{cmd}`: the glob `{value}` {why}; write a directory before it (`./{value}`, `src/{value}`) or name the files"
            ))
        };
        let (Some(span), [cwd]) = (word.span.clone(), self.cwds.as_slice()) else {
            return refuse("has no literal prefix and may run in more than one directory");
        };
        let cwd = cwd.clone();
        let components = glob::components(value, &word.globs);
        if value.split('/').any(|c| c == "..")
            || components
                .iter()
                .any(|c| c.glob && (c.tokens.is_none() || c.dots))
        {
            return refuse(
                "has no literal prefix and a `[…]`, `..` or leading-dot pattern muster cannot expand exactly",
            );
        }
        // Exact here: without brackets a component's tokens match as bash does, and none can
        // match `.`/`..` (refused above), so the candidates are bash's matches.
        let mut matches = vec![String::new()];
        for component in &components {
            matches = if component.glob {
                self.glob_step(cmd, &cwd, &matches, component)?
            } else {
                matches
                    .iter()
                    .map(|dir| glob::join(dir, component.text))
                    .collect()
            };
        }
        let want_dir = value.ends_with('/');
        let mut kept = Vec::new();
        for candidate in matches {
            let Some(kind) = self.paths.entry_kind(&Self::joined(&cwd, &candidate)) else {
                return refuse("matches files that cannot be listed and checked");
            };
            match kind {
                EntryKind::Missing => {}
                EntryKind::Other if want_dir => {}
                _ => kept.push(if want_dir {
                    format!("{candidate}/")
                } else {
                    candidate
                }),
            }
        }
        // Bash sorts the matches; in the C locale by bytes, as here.
        kept.sort();
        if let Some(option) = kept.iter().find(|m| m.starts_with('-')) {
            return refuse(&format!(
                "matches `{option}`, which the command would take as an option"
            ));
        }
        for found in &kept {
            let path = Self::joined(&cwd, found);
            let checked = if tree {
                self.paths.check_read_tree(&path)
            } else {
                self.paths.check_read(&path)
            };
            checked
                .map_err(|e| format!("`{cmd} {value}` expands to a path `Read` refuses: {e}"))?;
        }
        // With no match bash passes the pattern itself, which the command gets quoted.
        let values = if kept.is_empty() {
            vec![value.clone()]
        } else {
            kept
        };
        self.expansions.push(Expansion { span, values });
        Ok(())
    }

    /// The paths one glob component could extend `dirs` to: each directory is checked as a
    /// `Read` and listed, and every entry that may match is kept.
    fn glob_step(
        &self,
        cmd: &str,
        cwd: &str,
        dirs: &[String],
        component: &glob::Component<'_>,
    ) -> Result<Vec<String>, String> {
        let mut next = Vec::new();
        for dir in dirs {
            let shown = if dir.is_empty() { "." } else { dir.as_str() };
            let path = Self::joined(cwd, shown);
            self.paths.check_read(&path).map_err(|e| {
                format!("`{cmd}` would list a directory `Read` refuses for a glob: {e}")
            })?;
            let names = self.paths.list_dir(&path).ok_or_else(|| {
                format!(
                    "`{cmd}`: the files the glob `{}` could match in `{shown}` cannot be listed and checked; name them",
                    component.text
                )
            })?;
            let dots: &[&str] = if component.dots { &[".", ".."] } else { &[] };
            let names = names.iter().map(String::as_str);
            for name in names
                .filter(|n| glob::may_match(component, n))
                .chain(dots.iter().copied())
            {
                next.push(glob::join(dir, name));
            }
            if next.len() > MAX_GLOB_MATCHES {
                return Err(format!(
                    "`{cmd}`: the glob `{}` could match more than {MAX_GLOB_MATCHES} files to check; narrow it",
                    component.text
                ));
            }
        }
        Ok(next)
    }

    fn joined(cwd: &str, arg: &str) -> String {
        if cwd.is_empty() || arg.starts_with('/') || arg.starts_with('~') {
            arg.to_string()
        } else if arg.is_empty() {
            cwd.to_string()
        } else {
            format!("{cwd}/{arg}")
        }
    }

    /// `cmd` reads the file or directory `arg`.
    fn read(&self, cmd: &str, arg: &str) -> Result<(), String> {
        if arg == "-" {
            return Ok(());
        }
        for cwd in &self.cwds {
            self.paths
                .check_read(&Self::joined(cwd, arg))
                .map_err(|e| format!("`{cmd}` would read a path `Read` refuses: {e}"))?;
        }
        Ok(())
    }

    /// `cmd` reads everything under `arg`.
    fn read_tree(&self, cmd: &str, arg: &str) -> Result<(), String> {
        if arg == "-" {
            return Ok(());
        }
        for cwd in &self.cwds {
            self.paths
                .check_read_tree(&Self::joined(cwd, arg))
                .map_err(|e| format!("`{cmd}` would search a path `Read` refuses: {e}"))?;
        }
        Ok(())
    }

    fn scan(&self, name: &str, spec: &Spec, args: &[&str]) -> Result<Scan, String> {
        let forbidden = |opt: &str| format!("`{name} {opt}` {}", spec.forbid_why);
        let mut out = Scan::default();
        let mut i = 0;
        let mut end = false;
        while let Some(&a) = args.get(i) {
            i += 1;
            if end || a == "-" || !a.starts_with('-') {
                out.positional.push(a.to_string());
                continue;
            }
            if a == "--" {
                end = true;
                continue;
            }
            if let Some(long) = a.strip_prefix("--") {
                let (opt, inline) = match long.split_once('=') {
                    Some((opt, value)) => (opt, Some(value)),
                    None => (long, None),
                };
                if spec.forbid_long.iter().any(|f| f.starts_with(opt)) {
                    return Err(forbidden(a));
                }
                if spec.pattern_long.iter().any(|p| p.starts_with(opt)) {
                    out.pattern_given = true;
                }
                if spec.recursive_long.iter().any(|p| p.starts_with(opt)) {
                    out.recursive = true;
                }
                match long_kind(spec, opt) {
                    LongKind::Path | LongKind::Value => {
                        let path = matches!(long_kind(spec, opt), LongKind::Path);
                        let value = match inline {
                            Some(v) => Some(v),
                            None => {
                                i += 1;
                                args.get(i - 1).copied()
                            }
                        };
                        if let Some(v) = value {
                            if path {
                                self.read(name, v)?;
                            } else if v == "recurse" {
                                out.recursive = true;
                            }
                        }
                    }
                    LongKind::Flag => {
                        // An option this table does not know: its value, if any, is checked
                        // as a path in case it names one.
                        if let Some(v) = inline {
                            self.read(name, v)?;
                        }
                    }
                }
                continue;
            }
            let cluster: Vec<char> = a.chars().skip(1).collect();
            for (k, &c) in cluster.iter().enumerate() {
                if spec.forbid_short.contains(c) {
                    return Err(forbidden(&format!("-{c}")));
                }
                if spec.recursive_short.contains(c) {
                    out.recursive = true;
                }
                if spec.short_opt.contains(c) {
                    break;
                }
                let path = spec.short_path.contains(c);
                if path || spec.short_val.contains(c) {
                    if spec.pattern_short.contains(c) {
                        out.pattern_given = true;
                    }
                    let rest: String = cluster[k + 1..].iter().collect();
                    let value = if rest.is_empty() {
                        i += 1;
                        args.get(i - 1).map(|v| (*v).to_string())
                    } else {
                        Some(rest)
                    };
                    if let Some(v) = value {
                        if path {
                            self.read(name, &v)?;
                        } else if v == "recurse" {
                            out.recursive = true;
                        }
                    }
                    break;
                }
            }
        }
        Ok(out)
    }

    fn generic(&self, name: &str, spec: &Spec, args: &[&str]) -> Result<(), String> {
        if spec.pos == Pos::NotPaths {
            // These print their arguments or compute from them; they read no files.
            return Ok(());
        }
        let scan = self.scan(name, spec, args)?;
        if let Some(max) = spec.max_pos
            && scan.positional.len() > max
        {
            return Err(format!(
                "`{name}` with more than {max} file argument(s) writes to the last one"
            ));
        }
        let recursive = spec.always_recursive || scan.recursive;
        match spec.pos {
            Pos::NotPaths => Ok(()),
            Pos::DateFormat => match scan.positional.iter().find(|p| !p.starts_with('+')) {
                Some(p) => Err(format!("`date {p}` sets the system clock")),
                None => Ok(()),
            },
            Pos::Paths | Pos::PatternThenPaths => {
                let skip = usize::from(spec.pos == Pos::PatternThenPaths && !scan.pattern_given);
                let files = scan.positional.get(skip..).unwrap_or(&[]);
                if files.is_empty() && recursive {
                    return self.read_tree(name, ".");
                }
                for file in files {
                    if recursive {
                        self.read_tree(name, file)?;
                    } else {
                        self.read(name, file)?;
                    }
                }
                Ok(())
            }
        }
    }

    /// `awk [-F FS] [-v NAME=VALUE] PROGRAM [FILE | NAME=VALUE]…` with a program
    /// [`awk_program`] accepts; every file is path-checked. Other options are refused: `-f`
    /// and `-i`/`--include` read program files, `-l`/`--load` loads extensions, `-E`/`--exec`
    /// takes the program from a file, and an option this does not know may do either.
    fn awk(&self, name: &str, args: &[&str]) -> Result<(), String> {
        let refuse = |a: &str| {
            Err(format!(
                "`{name} {a}` is not an option read-only awk allows (only -F FS, -v NAME=VALUE and --)"
            ))
        };
        let mut i = 0;
        while let Some(&a) = args.get(i) {
            if a == "--" {
                i += 1;
                break;
            }
            if !a.starts_with('-') || a == "-" {
                break;
            }
            i += 1;
            let value = match a {
                "-F" | "-v" | "--field-separator" | "--assign" => {
                    i += 1;
                    args.get(i - 1).copied()
                }
                _ if a.starts_with("-F") || a.starts_with("-v") => Some(&a[2..]),
                _ => match a.split_once('=') {
                    Some(("--field-separator" | "--assign", v)) => Some(v),
                    _ => return refuse(a),
                },
            };
            if value.is_some_and(|v| v.contains("ARGV") || v.contains("ARGC")) {
                return refuse(a);
            }
        }
        let Some((program, operands)) = args.get(i..).and_then(<[&str]>::split_first) else {
            return Err(format!("`{name}` without a program reads it from nowhere"));
        };
        awk_program(program).map_err(|e| format!("`{name}`: {e}"))?;
        // A glob expands to file names, which could become the program or option values.
        if (0..=i).any(|j| self.is_glob(j)) {
            return Err(format!(
                "`{name}` with an unquoted glob before its file operands; quote it"
            ));
        }
        for (k, operand) in operands.iter().enumerate() {
            if awk_assignment(operand) {
                if self.is_glob(i + 1 + k) {
                    return Err(format!("`{name} {operand}` is a glob assignment; quote it"));
                }
                // `NAME=VALUE` sets a variable before the next file; it reads nothing.
                if operand.starts_with("ARGV") || operand.starts_with("ARGC") {
                    return Err(format!("`{name} {operand}` changes the files awk reads"));
                }
                continue;
            }
            self.read(name, operand)?;
        }
        Ok(())
    }

    /// `jq [options] FILTER [FILE…]` with a filter [`jq_program`] accepts. Files, and the
    /// files of `--slurpfile`/`--rawfile`, are path-checked; `-f`/`--from-file` (the program
    /// from a file) and `-L`/`--library-path` (modules from a directory) are refused, as is an
    /// option this does not know.
    fn jq(&self, args: &[&str]) -> Result<(), String> {
        const FLAGS: &[&str] = &[
            "--raw-output",
            "--join-output",
            "--ascii-output",
            "--compact-output",
            "--null-input",
            "--slurp",
            "--exit-status",
            "--sort-keys",
            "--color-output",
            "--monochrome-output",
            "--raw-input",
            "--tab",
            "--seq",
            "--stream",
            "--stream-errors",
            "--unbuffered",
            "--raw-output0",
            "--help",
            "--version",
            "--build-configuration",
        ];
        const SHORT_FLAGS: &str = "rjacnseSCMRhV";
        let refuse = |a: &str| {
            Err(format!(
                "`jq {a}` is not an option read-only jq allows (-f and -L load programs or modules from files)"
            ))
        };
        let mut filter: Option<&str> = None;
        let mut files = Vec::new();
        // After `--args`/`--jsonargs` positionals are values for `$ARGS`, not files.
        let mut positional_args = false;
        let mut file_indices = Vec::new();
        let mut end = false;
        let mut i = 0;
        while let Some(&a) = args.get(i) {
            i += 1;
            if end || !a.starts_with('-') || a == "-" {
                if filter.is_none() {
                    filter = Some(a);
                } else if !positional_args {
                    files.push(a);
                    file_indices.push(i - 1);
                }
                continue;
            }
            match a {
                "--" => end = true,
                "--args" | "--jsonargs" => positional_args = true,
                "--indent" => i += 1,
                "--arg" | "--argjson" => i += 2,
                "--slurpfile" | "--rawfile" => {
                    if let Some(file) = args.get(i + 1) {
                        self.read(&format!("jq {a}"), file)?;
                    }
                    i += 2;
                }
                _ if FLAGS.contains(&a) => {}
                _ if !a.starts_with("--") && a[1..].chars().all(|c| SHORT_FLAGS.contains(c)) => {}
                _ => return refuse(a),
            }
        }
        let Some(filter) = filter else {
            return Ok(());
        };
        jq_program(filter).map_err(|e| format!("`jq`: {e}"))?;
        // A glob expands to file names, which anywhere but among the files could become the
        // filter, a variable's file or an option value.
        if (0..args.len()).any(|j| self.is_glob(j) && !file_indices.contains(&j)) {
            return Err(
                "`jq` with an unquoted glob outside its file operands; quote it".to_string(),
            );
        }
        for file in files {
            self.read("jq", file)?;
        }
        Ok(())
    }

    fn cd(&mut self, args: &[&str]) -> Result<(), String> {
        let mut targets = Vec::new();
        let mut end = false;
        for &a in args {
            match a {
                "--" if !end => end = true,
                "-L" | "-P" if !end => {}
                "-" if !end => {
                    return Err(
                        "`cd -` goes to $OLDPWD, which cannot be checked before running"
                            .to_string(),
                    );
                }
                flag if !end && flag.starts_with('-') => {
                    return Err(format!("`cd {flag}` is not a plain directory change"));
                }
                target => targets.push(target),
            }
        }
        let [target] = targets.as_slice() else {
            return Err(if targets.is_empty() {
                "`cd` without a directory goes to $HOME, outside the workspace".to_string()
            } else {
                "`cd` with more than one directory".to_string()
            });
        };
        self.read("cd", target)?;
        let to: Vec<String> = self
            .cwds
            .iter()
            .map(|cwd| Self::joined(cwd, target))
            .collect();
        self.cd_to = Some(union(&to, &[]));
        Ok(())
    }

    /// `test`, `[ … ]`, `[[ … ]]`: harmless but for three things. File tests read metadata, so
    /// their operands are path-checked. Bash evaluates the operands of `-eq`…`-ge` inside
    /// `[[ ]]` (and the name after `-v`/`-R` everywhere) arithmetically, where `a[$(cmd)]` runs
    /// a command, so those must be plain integers / plain names. Every word that looks like an
    /// operator is treated as one (more checks, never fewer).
    fn test(&self, name: &str, args: &[&str]) -> Result<(), String> {
        const FILE_UNARY: &[&str] = &[
            "-a", "-b", "-c", "-d", "-e", "-f", "-g", "-h", "-k", "-p", "-r", "-s", "-u", "-w",
            "-x", "-G", "-L", "-N", "-O", "-S",
        ];
        const FILE_BINARY: &[&str] = &["-nt", "-ot", "-ef"];
        const ARITHMETIC: &[&str] = &["-eq", "-ne", "-lt", "-le", "-gt", "-ge"];
        let operand = |i: Option<usize>| i.and_then(|i| args.get(i)).copied().unwrap_or("");
        for (i, &a) in args.iter().enumerate() {
            let (before, after) = (operand(i.checked_sub(1)), operand(Some(i + 1)));
            if FILE_UNARY.contains(&a) && !after.is_empty() {
                self.read(name, after)?;
            } else if FILE_BINARY.contains(&a) {
                self.read(name, before)?;
                self.read(name, after)?;
            } else if ARITHMETIC.contains(&a) || a == "-t" {
                let operands: &[&str] = if a == "-t" {
                    &[after]
                } else {
                    &[before, after]
                };
                if let Some(bad) = operands.iter().find(|o| !integer(o)) {
                    return Err(format!(
                        "`{name} … {a}` evaluates `{bad}` arithmetically, which can run commands (`a[$(cmd)]`); only plain integers are read-only"
                    ));
                }
            } else if matches!(a, "-v" | "-R") && !identifier(after) {
                return Err(format!(
                    "`{name} {a} {after}` evaluates a subscript arithmetically, which can run commands; only plain variable names are read-only"
                ));
            }
        }
        Ok(())
    }

    fn find(&self, args: &[&str]) -> Result<(), String> {
        const FORBIDDEN_PREFIXES: &[&str] =
            &["-exec", "-ok", "-delete", "-fls", "-fprint", "-files0"];
        const VALUE: &[&str] = &[
            "-name",
            "-iname",
            "-path",
            "-ipath",
            "-wholename",
            "-iwholename",
            "-regex",
            "-iregex",
            "-lname",
            "-ilname",
            "-type",
            "-xtype",
            "-maxdepth",
            "-mindepth",
            "-size",
            "-mtime",
            "-mmin",
            "-atime",
            "-amin",
            "-ctime",
            "-cmin",
            "-perm",
            "-user",
            "-group",
            "-uid",
            "-gid",
            "-links",
            "-inum",
            "-printf",
            "-fstype",
            "-regextype",
            "-used",
            "-context",
        ];
        const PATH: &[&str] = &["-newer", "-anewer", "-cnewer", "-samefile"];
        if let Some(bad) = args
            .iter()
            .find(|a| FORBIDDEN_PREFIXES.iter().any(|f| a.starts_with(f)))
        {
            return Err(format!(
                "`find {bad}` runs commands, deletes or writes files, or reads starting points from a list that cannot be checked"
            ));
        }
        let mut i = 0;
        while let Some(&a) = args.get(i) {
            match a {
                "-H" | "-L" | "-P" => i += 1,
                "-D" => i += 2,
                o if o.starts_with("-O") => i += 1,
                _ => break,
            }
        }
        let expression = |a: &str| a.starts_with('-') || matches!(a, "(" | ")" | "!" | ",");
        while let Some(&a) = args.get(i) {
            if expression(a) {
                break;
            }
            self.read("find", a)?;
            i += 1;
        }
        while let Some(&a) = args.get(i) {
            i += 1;
            let newer_xy = a.len() == 8 && a.starts_with("-newer");
            if VALUE.contains(&a) || (newer_xy && a.ends_with('t')) {
                i += 1;
            } else if PATH.contains(&a) || newer_xy {
                if let Some(v) = args.get(i) {
                    self.read("find", v)?;
                }
                i += 1;
            } else if !expression(a) {
                self.read("find", a)?;
            }
        }
        Ok(())
    }

    fn sed(&self, args: &[&str]) -> Result<(), String> {
        match args {
            [quiet, script, files @ ..]
                if matches!(*quiet, "-n" | "--quiet" | "--silent")
                    && sed_print_script(script)
                    && files.iter().all(|f| !f.starts_with('-')) =>
            {
                for file in files {
                    self.read("sed", file)?;
                }
                Ok(())
            }
            _ => Err(
                "`sed` is read-only only as `sed -n N[,M]p [file…]` (no -i, no w/e/s commands)"
                    .to_string(),
            ),
        }
    }

    fn git(&self, args: &[&str]) -> Result<(), String> {
        // `-C dir` moves git the way `cd` moves the shell: later paths are relative to it.
        let mut here = Checker {
            paths: self.paths,
            cwds: self.cwds.clone(),
            cd_to: None,
            arg_globs: self.arg_globs.clone(),
            expansions: Vec::new(),
        };
        let mut i = 0;
        while let Some(&a) = args.get(i) {
            if !a.starts_with('-') {
                break;
            }
            i += 1;
            let (opt, inline) = match a.split_once('=') {
                Some((o, v)) if a.starts_with("--") => (o, Some(v)),
                _ => (a, None),
            };
            match opt {
                "-C" | "--git-dir" | "--work-tree" => {
                    let value = match inline {
                        Some(v) => Some(v),
                        None => {
                            i += 1;
                            args.get(i - 1).copied()
                        }
                    };
                    let Some(v) = value else {
                        return Err(format!("`git {a}` is missing its directory"));
                    };
                    here.read("git", v)?;
                    if opt == "-C" {
                        here.cwds = here.cwds.iter().map(|c| Self::joined(c, v)).collect();
                    }
                }
                "--namespace" => {
                    if inline.is_none() {
                        i += 1;
                    }
                }
                "--no-pager"
                | "-P"
                | "--no-optional-locks"
                | "--literal-pathspecs"
                | "--glob-pathspecs"
                | "--noglob-pathspecs"
                | "--icase-pathspecs"
                | "--no-replace-objects"
                | "--bare"
                | "--version"
                | "--no-advice" => {}
                c if c.starts_with("-c") || c.starts_with("--conf") => {
                    return Err(format!(
                        "`git {a}` sets configuration, which can make git run programs (core.pager, core.fsmonitor, diff.external)"
                    ));
                }
                "-p" | "--paginate" => {
                    return Err(format!("`git {a}` starts a pager"));
                }
                c if c.starts_with("-C") => {
                    let v = &c[2..];
                    here.read("git", v)?;
                    here.cwds = here.cwds.iter().map(|c| Self::joined(c, v)).collect();
                }
                other => {
                    return Err(format!(
                        "`git {other}` is not a global option the classifier knows to be harmless"
                    ));
                }
            }
        }
        here.git_subcommand(args.get(i..).unwrap_or(&[]))
    }

    /// A git subcommand and its arguments, after the global options.
    fn git_subcommand(&self, args: &[&str]) -> Result<(), String> {
        let Some((&sub, rest)) = args.split_first() else {
            return Ok(());
        };
        const FORBID: &[&str] = &[
            "output",
            "ext-diff",
            "textconv",
            "exec",
            "paginate",
            "open-files-in-pager",
            "help",
            "upload-pack",
            "receive-pack",
            "filters",
            "config-env",
        ];
        for a in rest {
            if let Some(long) = a.strip_prefix("--") {
                let opt = long.split_once('=').map_or(long, |(o, _)| o);
                if !opt.is_empty() && FORBID.iter().any(|f| f.starts_with(opt)) {
                    return Err(format!(
                        "`git {sub} {a}` can write a file or run a program (pager, external diff, text converter, help viewer)"
                    ));
                }
            }
        }
        match sub {
            "status" | "log" | "show" | "diff" | "shortlog" | "whatchanged" | "rev-parse"
            | "ls-files" | "ls-tree" | "cat-file" | "blame" | "describe" | "merge-base"
            | "rev-list" | "name-rev" | "show-ref" | "for-each-ref" | "count-objects"
            | "check-ignore" | "version" | "grep" => {}
            "branch" => {
                return self.git_list(
                    sub,
                    rest,
                    &[
                        "-a",
                        "-r",
                        "-v",
                        "-vv",
                        "--all",
                        "--remotes",
                        "--verbose",
                        "--show-current",
                    ],
                    "arv",
                );
            }
            "tag" => return self.git_list(sub, rest, &["-n"], "n"),
            "remote" => {
                return match rest {
                    [] | ["-v" | "--verbose"] | ["get-url", _] => Ok(()),
                    _ => Err(
                        "only `git remote`, `git remote -v` and `git remote get-url NAME` are read-only (`remote show` contacts the remote)"
                            .to_string(),
                    ),
                };
            }
            "stash" => {
                return match rest.first() {
                    Some(&verb @ ("list" | "show")) => {
                        if patch_flag(&rest[1..]) && !rest.contains(&"--no-ext-diff") {
                            return Err(ext_diff(&format!("stash {verb}")));
                        }
                        self.git_args("stash", &rest[1..])
                    }
                    _ => {
                        Err("only `git stash list` and `git stash show` are read-only".to_string())
                    }
                };
            }
            "reflog" => {
                return match rest.first() {
                    None => Ok(()),
                    Some(&"show") => self.git_args("reflog", &rest[1..]),
                    Some(a) if a.starts_with('-') => self.git_args("reflog", rest),
                    Some(_) => Err("only `git reflog [show]` is read-only".to_string()),
                };
            }
            "config" => return self.git_config(rest),
            "worktree" => {
                return match rest.first() {
                    Some(&"list") => Ok(()),
                    _ => Err("only `git worktree list` is read-only".to_string()),
                };
            }
            other => {
                return Err(format!(
                    "`git {other}` is not a read-only git subcommand (read-only: status, log, show, diff, branch, tag, grep, blame, ls-files, rev-parse, …)"
                ));
            }
        }
        if sub == "grep" && rest.iter().any(|a| *a == "-O" || a.starts_with("-O")) {
            return Err("`git grep -O` opens files in a pager".to_string());
        }
        if sub == "status"
            && rest
                .iter()
                .any(|a| a.starts_with("-v") || *a == "--verbose")
        {
            return Err(
                "`git status -v` prints a patch, which can run an external diff program; use `git diff --no-ext-diff`"
                    .to_string(),
            );
        }
        if sub == "diff" && diff_prints_patch(rest) && !rest.contains(&"--no-ext-diff") {
            return Err(ext_diff(sub));
        }
        if sub == "grep" {
            return self.generic("git grep", &GIT_GREP, rest);
        }
        self.git_args(sub, rest)
    }

    /// Positional arguments of read-only git subcommands are revisions or paths; each is
    /// checked as a path (a revision checks harmlessly), and so is the path after `rev:`.
    fn git_args(&self, sub: &str, rest: &[&str]) -> Result<(), String> {
        const VALUE_SHORT: &[&str] = &["-n", "-S", "-G", "-U", "-L"];
        const VALUE_LONG: &[&str] = &[
            "--max-count",
            "--skip",
            "--author",
            "--committer",
            "--grep",
            "--since",
            "--until",
            "--after",
            "--before",
            "--format",
            "--pretty",
            "--date",
            "--unified",
            "--diff-filter",
            "--abbrev",
            "--encoding",
            "--glob",
            "--exclude",
            "--sort",
            "--points-at",
            "--contains",
            "--merged",
            "--no-merged",
        ];
        const PATH_LONG: &[&str] = &[
            "--contents",
            "--ignore-revs-file",
            "--pathspec-from-file",
            "--exclude-from",
        ];
        let cmd = format!("git {sub}");
        let mut end = false;
        let mut i = 0;
        while let Some(&a) = rest.get(i) {
            i += 1;
            if !end && a == "--" {
                end = true;
                continue;
            }
            if !end && a.starts_with('-') {
                let (opt, inline) = a.split_once('=').map_or((a, None), |(o, v)| (o, Some(v)));
                let file_opt = a
                    .strip_prefix("-X")
                    .or_else(|| a.strip_prefix("-S").filter(|_| sub == "blame"));
                if let Some(attached) = file_opt {
                    // `-X <file>` (ls-files excludes), `blame -S <revs-file>` read a file.
                    let value = if attached.is_empty() {
                        i += 1;
                        rest.get(i - 1).copied()
                    } else {
                        Some(attached)
                    };
                    if let Some(v) = value {
                        self.read(&cmd, v)?;
                    }
                } else if let Some(order) = a.strip_prefix("-O") {
                    // `-O<orderfile>` reads a file.
                    let value = if order.is_empty() {
                        i += 1;
                        rest.get(i - 1).copied()
                    } else {
                        Some(order)
                    };
                    if let Some(v) = value {
                        self.read(&cmd, v)?;
                    }
                } else if opt.len() > 3 && PATH_LONG.iter().any(|p| p.starts_with(opt)) {
                    let value = inline.or_else(|| {
                        i += 1;
                        rest.get(i - 1).copied()
                    });
                    if let Some(v) = value {
                        self.read(&cmd, v)?;
                    }
                } else if inline.is_none() && (VALUE_SHORT.contains(&a) || VALUE_LONG.contains(&a))
                {
                    i += 1;
                }
                continue;
            }
            self.read(&cmd, a)?;
            if let Some((_, path)) = a.split_once(':')
                && !path.is_empty()
            {
                self.read(&cmd, path)?;
            }
        }
        Ok(())
    }

    /// `git config` that only reads: `--get`, `--get-all`, `--get-regexp`, `--get-urlmatch`,
    /// `--list`, a single name (a get), or git 2.46's `get`/`list`, in the default, `--local` or
    /// `--worktree` scope or from a `--file`/`--blob` (the file path-checked). Setting,
    /// `--edit` (runs an editor), and `--global`/`--system` (read a file outside the workspace
    /// by name) are refused. The default scope still reads the user's and the system's git
    /// configuration, as every git command does.
    fn git_config(&self, rest: &[&str]) -> Result<(), String> {
        const ACTIONS: &[&str] = &[
            "--get",
            "--get-all",
            "--get-regexp",
            "--get-urlmatch",
            "--list",
            "-l",
        ];
        const FLAGS: &[&str] = &[
            "--show-origin",
            "--show-scope",
            "--null",
            "-z",
            "--name-only",
            // Not `--includes`: with `--file` it would follow `include.path` to files
            // outside the workspace.
            "--no-includes",
            "--local",
            "--worktree",
            "--bool",
            "--int",
            "--bool-or-int",
            "--path",
            "--expiry-date",
            "--all",
            "--regexp",
            "--show-names",
            "--no-show-names",
        ];
        const VALUE: &[&str] = &["--type", "--default", "--blob", "--url", "--value"];
        let (verb, rest) = match rest.split_first() {
            Some((&verb @ ("get" | "list"), tail)) => (Some(verb), tail),
            _ => (None, rest),
        };
        let refuse = |a: &str| {
            Err(format!(
                "`git config {a}` is not a read-only `git config` form (only --get, --get-all, --get-regexp, --list and `git config NAME`, without --global/--system/--edit)"
            ))
        };
        let mut action = verb.is_some();
        let mut positional = 0;
        let mut i = 0;
        while let Some(&a) = rest.get(i) {
            i += 1;
            let (opt, inline) = a.split_once('=').map_or((a, None), |(o, v)| (o, Some(v)));
            if ACTIONS.contains(&opt) && inline.is_none() {
                action = true;
            } else if FLAGS.contains(&opt) && inline.is_none() {
            } else if VALUE.contains(&opt) {
                if inline.is_none() {
                    i += 1;
                }
            } else if matches!(opt, "--file" | "-f") {
                let value = inline.or_else(|| {
                    i += 1;
                    rest.get(i - 1).copied()
                });
                let Some(file) = value else {
                    return refuse(a);
                };
                self.read("git config", file)?;
            } else if a.starts_with('-') {
                return refuse(a);
            } else {
                positional += 1;
            }
        }
        let reads = if action {
            positional <= 2
        } else {
            positional == 1
        };
        if reads {
            Ok(())
        } else {
            Err(
                "`git config NAME VALUE` sets configuration; only reading (`git config --get NAME`, `--list`) is read-only"
                    .to_string(),
            )
        }
    }

    /// `git branch` / `git tag`: only listing. `extra` are further allowed flags, `cluster` the
    /// short flags allowed in a cluster.
    fn git_list(
        &self,
        sub: &str,
        rest: &[&str],
        extra: &[&str],
        cluster: &str,
    ) -> Result<(), String> {
        const LIST_MODE: &[&str] = &[
            "--list",
            "-l",
            "--contains",
            "--no-contains",
            "--merged",
            "--no-merged",
            "--points-at",
        ];
        const TAKES_VALUE: &[&str] = &[
            "--contains",
            "--no-contains",
            "--points-at",
            "--format",
            "--sort",
        ];
        const OK: &[&str] = &[
            "--no-color",
            "--color",
            "-i",
            "--ignore-case",
            "--omit-empty",
            "--column",
            "--no-column",
        ];
        let mut list_mode = false;
        let mut positional = 0;
        let mut i = 0;
        while let Some(&a) = rest.get(i) {
            i += 1;
            let opt = a.split_once('=').map_or(a, |(o, _)| o);
            if LIST_MODE.contains(&opt) {
                list_mode = true;
                if TAKES_VALUE.contains(&a) {
                    i += 1;
                }
            } else if TAKES_VALUE.contains(&a) {
                i += 1;
            } else if TAKES_VALUE.contains(&opt) || OK.contains(&opt) || extra.contains(&a) {
            } else if let Some(flags) = a.strip_prefix('-').filter(|f| !f.starts_with('-')) {
                let tag_lines = sub == "tag"
                    && flags.starts_with('n')
                    && flags[1..].chars().all(|c| c.is_ascii_digit());
                if !(tag_lines
                    || (!flags.is_empty()
                        && flags.chars().all(|c| cluster.contains(c) || c == 'l')))
                {
                    return Err(format!(
                        "`git {sub} {a}` is not a listing option; only listing {sub}es is read-only"
                    ));
                }
                if flags.contains('l') {
                    list_mode = true;
                }
            } else if a.starts_with('-') {
                return Err(format!(
                    "`git {sub} {a}` is not a listing option; only listing {sub}es is read-only"
                ));
            } else {
                positional += 1;
            }
        }
        if positional > 0 && !list_mode {
            return Err(format!(
                "`git {sub} NAME` creates a {sub}; only listing is read-only (use `git {sub} --list PATTERN`)"
            ));
        }
        Ok(())
    }
}

/// `command -v NAME…` / `command -V NAME…` only say what a name is; every other form of
/// `command` runs its arguments as a command (`command rm x`).
fn command_lookup(args: &[&str]) -> Result<(), String> {
    match args.split_first() {
        Some((&("-v" | "-V"), names))
            if !names.is_empty() && names.iter().all(|n| !n.starts_with('-')) =>
        {
            Ok(())
        }
        _ => Err(
            "`command` runs another command given as its arguments; only `command -v NAME` is read-only"
                .to_string(),
        ),
    }
}

/// A plain decimal integer literal (an optional sign, then digits).
fn integer(s: &str) -> bool {
    let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
    !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
}

/// A plain shell variable name, without a subscript.
fn identifier(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Is `word` a glob in the value of a long option that takes a value which is not a path
/// (`--include=*.rs`)? Every name it can expand to starts with the same `--NAME=`, so each is
/// that option again with another value: harmless for options of this kind (an exact name, not
/// an abbreviation, and not a forbidden one). Bash leaves it unexpanded unless the directory
/// holds files named `--NAME=…`.
fn option_value_glob(name: &str, word: &Word) -> bool {
    let Some(first) = word.globs.iter().copied().min() else {
        return false;
    };
    let Some((option, _)) = word.value.get(..first).and_then(|p| p.split_once('=')) else {
        return false;
    };
    let Some(long) = option.strip_prefix("--") else {
        return false;
    };
    spec(name).is_some_and(|spec| {
        spec.long_val.contains(&long)
            && !spec.long_path.contains(&long)
            && !spec.forbid_long.iter().any(|f| f.starts_with(long))
    })
}

/// Is an awk operand a variable assignment (`NAME=VALUE`, NAME an identifier) rather than a
/// file?
fn awk_assignment(operand: &str) -> bool {
    operand.split_once('=').is_some_and(|(name, _)| {
        name.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

fn ext_diff(sub: &str) -> String {
    format!(
        "`git {sub}` prints a patch, which runs the external diff program the repository may configure (diff.external); add --no-ext-diff (`git {sub} --no-ext-diff …`), or use --stat/--name-only"
    )
}

/// Does the argument list ask for patch output explicitly?
fn patch_flag(args: &[&str]) -> bool {
    args.iter().any(|a| {
        matches!(
            *a,
            "-p" | "-u"
                | "--patch"
                | "--patch-with-stat"
                | "--patch-with-raw"
                | "--cc"
                | "-c"
                | "--remerge-diff"
                | "--full-diff"
                | "--binary"
                | "-m"
                | "--dd"
        ) || a.starts_with("-L")
            || a.starts_with("--word-diff")
            || a.starts_with("--color-words")
            || a.starts_with("--diff-merges")
            || a.starts_with("-U")
            || a.starts_with("--unified")
            || (a.starts_with('-') && !a.starts_with("--") && (a.contains('p') || a.contains('u')))
    })
}

/// Would `git diff` with these arguments print a patch? Only `git diff` (and `git stash show
/// -p`, checked separately) runs an external diff program by default: `diff.external` and a
/// diff driver's `command`. `log`, `show`, `whatchanged` and `reflog` print patches with git's
/// internal diff unless `--ext-diff` is given (git's `cmd_log_init_defaults` never sets
/// `allow_external`; `--ext-diff` is refused), so their patches need no flag. Environment
/// variables cannot switch `diff.external` off for `git diff` (an empty `diff.external` makes
/// git try to run an empty command and fail), so it still needs `--no-ext-diff`, which
/// [`super::rewrite`] inserts before these rules run; the check stays for any command it could
/// not rewrite.
fn diff_prints_patch(args: &[&str]) -> bool {
    let no_patch = args.iter().any(|a| {
        matches!(
            *a,
            "-s" | "--no-patch"
                | "--numstat"
                | "--shortstat"
                | "--name-only"
                | "--name-status"
                | "--summary"
                | "--raw"
                | "--quiet"
                | "--check"
                | "--compact-summary"
        ) || a.starts_with("--stat")
            || a.starts_with("--dirstat")
    });
    patch_flag(args) || !no_patch
}

/// A `sed -n` script that only prints: `p`, `Np`, `$p`, `/re/p`, `N,Mp` (addresses: numbers,
/// `$` or `/re/` without backslashes).
fn sed_print_script(script: &str) -> bool {
    fn address(s: &str) -> Option<&str> {
        if let Some(rest) = s.strip_prefix('$') {
            return Some(rest);
        }
        if let Some(rest) = s.strip_prefix('/') {
            let end = rest.find('/')?;
            let re = &rest[..end];
            if re.contains('\\') || re.contains('\n') {
                return None;
            }
            return Some(&rest[end + 1..]);
        }
        let digits = s.chars().take_while(char::is_ascii_digit).count();
        (digits > 0).then(|| &s[digits..])
    }
    let Some(body) = script.strip_suffix('p') else {
        return false;
    };
    if body.is_empty() {
        return true;
    }
    let Some(rest) = address(body) else {
        return false;
    };
    if rest.is_empty() {
        return true;
    }
    rest.strip_prefix(',')
        .and_then(address)
        .is_some_and(str::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sed_scripts() {
        for (s, ok) in [
            ("1,20p", true),
            ("5p", true),
            ("$p", true),
            ("p", true),
            ("/foo/p", true),
            ("/a/,/b/p", true),
            ("1,$p", true),
            ("1,20", false),
            ("1w x", false),
            ("s/a/b/p", false),
            ("1e id", false),
            ("1,2p;w x", false),
            ("/a\\/p", false),
            ("", false),
        ] {
            assert_eq!(sed_print_script(s), ok, "{s}");
        }
    }
}
