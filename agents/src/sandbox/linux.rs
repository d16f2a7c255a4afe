//! Confinement on Linux: a mount namespace with read-only binds, Landlock, seccomp.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope, path_beneath_rules,
};
use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::statvfs::{FsFlags, statvfs};
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

use super::{SandboxError, SandboxPolicy, SandboxProfile, SandboxSupport};

/// The newest Landlock ABI this code was written and tested against: its file rights and its
/// scopes (signals, abstract UNIX sockets). Older kernels get the subset they know.
const TESTED_ABI: ABI = ABI::V6;

/// Every ABI this build knows, newest first, for [`probe`].
const KNOWN_ABIS: [(ABI, u32); 6] = [
    (ABI::V6, 6),
    (ABI::V5, 5),
    (ABI::V4, 4),
    (ABI::V3, 3),
    (ABI::V2, 2),
    (ABI::V1, 1),
];

pub(super) fn probe() -> SandboxSupport {
    let landlock_abi = KNOWN_ABIS
        .iter()
        .find(|(abi, _)| {
            Ruleset::default()
                .set_compatibility(CompatLevel::HardRequirement)
                .handle_access(AccessFs::from_all(*abi))
                .and_then(Ruleset::create)
                .is_ok()
        })
        .map_or(0, |(_, number)| *number);
    SandboxSupport {
        landlock_abi,
        mount_namespace: mount_namespace_likely(),
        seccomp: std::fs::read_to_string("/proc/self/status")
            .is_ok_and(|status| status.lines().any(|line| line.starts_with("Seccomp:"))),
    }
}

/// Can a process here make a mount namespace? Root can; others need unprivileged user
/// namespaces, which distributions switch off in several ways. (A heuristic: the
/// trampoline finds out for certain and reports it when the policy requires it.)
fn mount_namespace_likely() -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .map(|t| t.trim().to_owned())
    };
    let max = read("/proc/sys/user/max_user_namespaces").and_then(|t| t.parse::<u64>().ok());
    max.is_some_and(|max| max > 0)
        && read("/proc/sys/kernel/unprivileged_userns_clone").is_none_or(|v| v == "1")
        && read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").is_none_or(|v| v == "0")
}

/// Confines this process as `policy` says. Single-threaded callers only (user namespaces
/// refuse multi-threaded processes).
pub(super) fn confine(policy: &SandboxPolicy, tmp: &Path) -> Result<(), SandboxError> {
    if !policy.protected.is_empty()
        && let Err(reason) = protect(&policy.protected)
        && policy.required
    {
        return Err(SandboxError::Unsupported(format!(
            "cannot keep .git/ and .muster/ read-only: {reason}"
        )));
    }
    landlock(policy, tmp)?;
    if !policy.network {
        block_network()?;
    }
    Ok(())
}

/// A private mount namespace in which each existing path of `protected` is bound read-only
/// onto itself (inside a user namespace when not root).
fn protect(protected: &[PathBuf]) -> Result<(), String> {
    let existing: Vec<&PathBuf> = protected.iter().filter(|p| p.exists()).collect();
    if existing.is_empty() {
        return Ok(());
    }
    let uid = rustix::process::getuid();
    let gid = rustix::process::getgid();
    if uid.is_root() {
        unshare(CloneFlags::CLONE_NEWNS).map_err(|e| format!("unshare(CLONE_NEWNS): {e}"))?;
    } else {
        unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS)
            .map_err(|e| format!("unshare(CLONE_NEWUSER|CLONE_NEWNS): {e}"))?;
        // The same ids inside as outside, so files keep their owner and git its trust.
        let write = |file: &str, text: String| {
            std::fs::write(file, text).map_err(|e| format!("writing {file}: {e}"))
        };
        write("/proc/self/setgroups", "deny".to_owned())?;
        write("/proc/self/uid_map", format!("{0} {0} 1", uid.as_raw()))?;
        write("/proc/self/gid_map", format!("{0} {0} 1", gid.as_raw()))?;
    }
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("making mounts private: {e}"))?;
    for path in existing {
        bind_read_only(path)?;
    }
    Ok(())
}

fn bind_read_only(path: &Path) -> Result<(), String> {
    let shown = path.display();
    mount(
        Some(path),
        path,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| format!("binding {shown}: {e}"))?;
    // A remount must keep the flags the original mount locks (nosuid, nodev, …), or a user
    // namespace is refused.
    let kept = statvfs(path)
        .map(|stat| locked_flags(stat.flags()))
        .map_err(|e| format!("reading the mount flags of {shown}: {e}"))?;
    mount(
        None::<&str>,
        path,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | kept,
        None::<&str>,
    )
    .map_err(|e| format!("remounting {shown} read-only: {e}"))
}

fn locked_flags(flags: FsFlags) -> MsFlags {
    [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ]
    .into_iter()
    .filter(|(st, _)| flags.contains(*st))
    .fold(MsFlags::empty(), |all, (_, ms)| all | ms)
}

/// Landlock: read and execute everywhere; write only the private temporary directory,
/// `/dev/null` and (workspace-write) the writable roots; no signals to and no abstract UNIX
/// sockets of processes outside the sandbox.
fn landlock(policy: &SandboxPolicy, tmp: &Path) -> Result<(), SandboxError> {
    let abi = TESTED_ABI;
    let failed = |e: landlock::RulesetError| SandboxError::Confine(format!("Landlock: {e}"));
    let mut writable: Vec<&Path> = vec![tmp, Path::new("/dev/null")];
    if policy.profile == SandboxProfile::WorkspaceWrite {
        writable.extend(policy.writable.iter().map(PathBuf::as_path));
    }
    // Best effort: an older ABI enforces what it knows; `required` refuses only a kernel that
    // enforces nothing (the run start refuses it first, naming the ABI).
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(failed)?
        .scope(Scope::from_all(abi))
        .map_err(failed)?
        .create()
        .map_err(failed)?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))
        .map_err(failed)?
        // Paths that do not exist (a cache never created) are skipped by the helper.
        .add_rules(path_beneath_rules(writable, AccessFs::from_all(abi)))
        .map_err(failed)?
        .restrict_self()
        .map_err(failed)?;
    if policy.required && status.ruleset == RulesetStatus::NotEnforced {
        return Err(SandboxError::Unsupported(
            "the kernel enforces no Landlock rules".to_owned(),
        ));
    }
    Ok(())
}

/// seccomp: `socket` fails with EPERM for every address family but `AF_UNIX`, and
/// `io_uring_setup` (whose operations could open sockets without `socket`) fails too.
fn block_network() -> Result<(), SandboxError> {
    fn failed(e: impl std::fmt::Display) -> SandboxError {
        SandboxError::Confine(format!("seccomp: {e}"))
    }
    let only_unix = SeccompRule::new(vec![
        SeccompCondition::new(
            0,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::Ne,
            nix::libc::AF_UNIX as u64,
        )
        .map_err(failed)?,
    ])
    .map_err(failed)?;
    let rules = [
        (nix::libc::SYS_socket, vec![only_unix]),
        (nix::libc::SYS_io_uring_setup, Vec::new()),
    ]
    .into_iter()
    .collect();
    let arch: seccompiler::TargetArch = std::env::consts::ARCH.try_into().map_err(failed)?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(nix::libc::EPERM as u32),
        arch,
    )
    .map_err(failed)?;
    let program: seccompiler::BpfProgram = filter.try_into().map_err(failed)?;
    seccompiler::apply_filter(&program).map_err(failed)
}
