//! The environment read-only Bash runs with.
//!
//! The classifier proves the command text harmless, but git reads configuration the command
//! text does not show: `core.fsmonitor` runs a program on `git status`, `core.pager` and
//! `pager.<cmd>` pick the pager, `diff.<driver>.textconv`/`.command` (selected by
//! `.gitattributes`, which file tools can write) run converters, `gpg.program` runs on
//! `--show-signature`, hooks run when a command rewrites the index (`git diff` refreshes it),
//! and partial clones fetch missing objects over the network. Text converters and diff driver
//! programs are selected by attributes: the work tree's and index's `.gitattributes` are
//! switched off with `attr.tree`, the user's (`core.attributesFile`) and the system's
//! (`GIT_ATTR_NOSYSTEM`) too, which leaves only `.git/info/attributes` (file tools cannot
//! write under `.git/`). No variable switches `diff.external` off, so the classifier forces
//! `--no-ext-diff` into the commands that run it by default (`git diff`, `git stash show`).

/// The hash of the empty tree (SHA-1). `attr.tree` pointing at it means no `.gitattributes`
/// from the work tree or index are read, so no diff driver (textconv, external command) is
/// selected by them. A repository where this object does not exist (SHA-256) reads no
/// attributes either.
const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// Configuration forced through `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`;
/// these override every configuration file, including the repository's.
const GIT_OVERRIDES: &[(&str, &str)] = &[
    ("core.fsmonitor", "false"),
    ("core.pager", "cat"),
    ("attr.tree", EMPTY_TREE),
    // The user's attributes file could select a text converter for any path.
    ("core.attributesFile", "/dev/null"),
    ("log.showSignature", "false"),
    ("gpg.program", "false"),
    ("gpg.openpgp.program", "false"),
    ("gpg.x509.program", "false"),
    ("gpg.ssh.program", "false"),
    ("protocol.allow", "never"),
    ("core.hooksPath", "/dev/null"),
];

/// Variables to set for read-only Bash: the git configuration overrides above,
/// `GIT_ATTR_NOSYSTEM=1` (no system-wide attributes file), `GIT_PAGER=cat`
/// and `PAGER=cat` (no pager program from configuration), `GIT_OPTIONAL_LOCKS=0` (`git status`
/// does not rewrite `.git/index`), `GIT_TERMINAL_PROMPT=0` and `GIT_NO_LAZY_FETCH=1` (no network
/// fetches from partial clones).
///
/// Remove the inherited variables [`remove_from_read_only_env`] names first, then set these.
pub fn read_only_git_env() -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = [
        ("GIT_CONFIG_COUNT", GIT_OVERRIDES.len().to_string()),
        ("GIT_ATTR_NOSYSTEM", "1".to_string()),
        ("GIT_PAGER", "cat".to_string()),
        ("PAGER", "cat".to_string()),
        ("GIT_OPTIONAL_LOCKS", "0".to_string()),
        ("GIT_TERMINAL_PROMPT", "0".to_string()),
        ("GIT_NO_LAZY_FETCH", "1".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for (n, (key, value)) in GIT_OVERRIDES.iter().enumerate() {
        env.push((format!("GIT_CONFIG_KEY_{n}"), (*key).to_string()));
        env.push((format!("GIT_CONFIG_VALUE_{n}"), (*value).to_string()));
    }
    env
}

/// Variables inherited from the parent process that read-only Bash must not see, because they
/// make the shell or an allowed program run code or write files the command text does not show.
pub const READ_ONLY_ENV_REMOVE: &[&str] = &[
    "BASH_ENV",
    "ENV",
    "CDPATH",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "GLOBIGNORE",
    "RIPGREP_CONFIG_PATH",
    "GREP_OPTIONS",
    "GIT_EXTERNAL_DIFF",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "GIT_EXEC_PATH",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_ATTR_SOURCE",
    "LESSOPEN",
    "LESSCLOSE",
    "POSIXLY_CORRECT",
];

/// Prefixes of inherited variables to remove: exported bash functions (`BASH_FUNC_ls%%` would
/// replace `ls`), dynamic-linker injection, and git trace files (which write to a path).
pub const READ_ONLY_ENV_REMOVE_PREFIXES: &[&str] = &[
    "BASH_FUNC_",
    "LD_",
    "DYLD_",
    "GIT_TRACE",
    "GIT_CONFIG_KEY_",
    "GIT_CONFIG_VALUE_",
];

/// Must the inherited variable `name` be removed before running read-only Bash?
pub fn remove_from_read_only_env(name: &str) -> bool {
    READ_ONLY_ENV_REMOVE.contains(&name)
        || READ_ONLY_ENV_REMOVE_PREFIXES
            .iter()
            .any(|prefix| name.starts_with(prefix))
}

/// `PATH` for read-only Bash: the inherited value without empty or relative entries, which
/// would let a file in the workspace named `ls` or `cat` replace the real program.
pub fn read_only_path(path: &str) -> String {
    path.split(':')
        .filter(|entry| entry.starts_with('/'))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_env_is_consistent() {
        let env = read_only_git_env();
        let get = |k: &str| {
            env.iter()
                .find(|(key, _)| *key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("GIT_CONFIG_COUNT"), Some("11"));
        assert_eq!(get("GIT_CONFIG_KEY_0"), Some("core.fsmonitor"));
        assert_eq!(get("GIT_CONFIG_VALUE_0"), Some("false"));
        assert_eq!(get("GIT_CONFIG_KEY_3"), Some("core.attributesFile"));
        assert_eq!(get("GIT_CONFIG_KEY_9"), Some("protocol.allow"));
        assert_eq!(get("GIT_ATTR_NOSYSTEM"), Some("1"));
        assert_eq!(get("GIT_PAGER"), Some("cat"));
        assert_eq!(get("GIT_OPTIONAL_LOCKS"), Some("0"));
        assert!(remove_from_read_only_env("BASH_FUNC_ls%%"));
        assert!(remove_from_read_only_env("GIT_EXTERNAL_DIFF"));
        assert!(!remove_from_read_only_env("PATH"));
        assert!(!remove_from_read_only_env("GIT_CONFIG_COUNT"));
        assert_eq!(read_only_path("/usr/bin::.:bin:/bin:"), "/usr/bin:/bin");
    }
}
