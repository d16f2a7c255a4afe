//! The machine a process runs on, as process-group records name it: the host name and the
//! kernel's boot id. A process group is a number that means something only on one machine
//! and only until it reboots, so a recorded group is signalled only where both match
//! (DESIGN, "Wave 2 → Workers").

use std::sync::OnceLock;

/// One boot of one machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    pub host: String,
    pub boot_id: String,
}

/// Where a recorded process group runs, seen from this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupPlace {
    /// Here, in this boot (or recorded before groups carried a machine: a local run's).
    Here,
    /// On this host, but before it rebooted: the group is gone, and its number may now be
    /// another process's.
    EarlierBoot,
    /// On another host: only that host can stop it.
    Elsewhere(String),
}

/// This machine, read once per process.
pub fn this_machine() -> &'static Machine {
    static MACHINE: OnceLock<Machine> = OnceLock::new();
    MACHINE.get_or_init(|| Machine {
        host: host_name(),
        boot_id: boot_id(),
    })
}

/// The host name (the UTS namespace's), as `muster workers` shows it.
pub fn host_name() -> String {
    first_line(&["/proc/sys/kernel/hostname", "/etc/hostname"])
        .unwrap_or_else(|| "localhost".into())
}

/// The kernel's random id of this boot; empty where the kernel does not say (then every
/// boot of the host looks alike, as before groups carried a boot id).
pub fn boot_id() -> String {
    first_line(&["/proc/sys/kernel/random/boot_id"]).unwrap_or_default()
}

fn first_line(paths: &[&str]) -> Option<String> {
    paths.iter().find_map(|path| {
        std::fs::read_to_string(path)
            .ok()
            .map(|text| text.trim().to_owned())
            .filter(|text| !text.is_empty())
    })
}

impl Machine {
    /// Where a group recorded with `host` and `boot_id` runs. A record without a host
    /// predates the machine fields: it was written by a run on the machine resuming it.
    pub fn place_of(&self, host: Option<&str>, boot_id: Option<&str>) -> GroupPlace {
        match host {
            None => GroupPlace::Here,
            Some(host) if host != self.host => GroupPlace::Elsewhere(host.to_owned()),
            Some(_) => match boot_id {
                Some(boot) if !boot.is_empty() && boot != self.boot_id => GroupPlace::EarlierBoot,
                _ => GroupPlace::Here,
            },
        }
    }
}

/// Whether process group `group` has a member on this machine now.
pub fn group_exists(group: i32) -> bool {
    rustix::process::Pid::from_raw(group)
        .is_some_and(|pid| rustix::process::test_kill_process_group(pid).is_ok())
}

/// SIGKILL to process group `group`; whether a signal was delivered.
pub fn kill_group(group: i32) -> bool {
    rustix::process::Pid::from_raw(group).is_some_and(|pid| {
        rustix::process::kill_process_group(pid, rustix::process::Signal::KILL).is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_here_only_on_this_host_in_this_boot() {
        let here = Machine {
            host: "a".into(),
            boot_id: "b1".into(),
        };
        let rows: [(Option<&str>, Option<&str>, GroupPlace); 6] = [
            (None, None, GroupPlace::Here),
            (Some("a"), Some("b1"), GroupPlace::Here),
            (Some("a"), None, GroupPlace::Here),
            (Some("a"), Some(""), GroupPlace::Here),
            (Some("a"), Some("b0"), GroupPlace::EarlierBoot),
            (Some("z"), Some("b1"), GroupPlace::Elsewhere("z".into())),
        ];
        for (host, boot, expected) in rows {
            assert_eq!(here.place_of(host, boot), expected, "{host:?} {boot:?}");
        }
    }

    #[test]
    fn this_machine_has_a_host_and_on_linux_a_boot_id() {
        let machine = this_machine();
        assert!(!machine.host.is_empty());
        if std::path::Path::new("/proc/sys/kernel/random/boot_id").exists() {
            assert_eq!(machine.boot_id.len(), 36, "{machine:?}");
        }
    }
}
