//! Kernel phases: a profile's `syscall = "NAME"` or `tracepoint = ["cat:enter", "cat:exit"]`
//! -> the two tracepoints that open and close the phase, with their tracefs event ids.
//!
//! The BPF side tells the tracepoints apart by the `common_type` every trace record starts
//! with, which is the event id tracefs publishes in `events/CATEGORY/NAME/id`; so one program
//! serves every kernel phase and no syscall number table is needed.

use std::path::{Path, PathBuf};

use crate::model::profile::Phase;

/// One tracepoint, found in tracefs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracepoint {
    /// Category (`syscalls`, `sched`, `block`...).
    pub category: String,
    /// Event name within the category.
    pub name: String,
    /// The event id (`common_type` of its records).
    pub id: u32,
    /// For a syscalls:sys_enter_X / sys_exit_X tracepoint: X's number on this architecture
    /// (those records carry it instead of a usable common_type).
    pub syscall_nr: Option<u32>,
    /// Whether it is a sys_exit_* tracepoint.
    pub syscall_exit: bool,
}

impl std::fmt::Display for Tracepoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.category, self.name)
    }
}

/// The tracepoints of one kernel phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelPhase {
    /// Opens the phase on the thread that hits it.
    pub enter: Tracepoint,
    /// Closes it on the same thread.
    pub exit: Tracepoint,
}

/// Where tracefs is mounted, if it is.
pub fn tracefs() -> Option<PathBuf> {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.join("events").is_dir())
}

/// Why a kernel phase could not be resolved, and names to suggest.
#[derive(Debug, Clone)]
pub struct KernelError {
    /// What went wrong, with the fix.
    pub reason: String,
    /// Similar event names.
    pub nearest: Vec<String>,
}

/// Whether a tracefs is mounted at all (it may be, and still not be readable by this user).
pub fn tracefs_mounted() -> bool {
    std::fs::read_to_string("/proc/mounts").is_ok_and(|m| {
        m.lines()
            .any(|l| l.split_whitespace().nth(2) == Some("tracefs"))
    })
}

/// Finds the enter/exit tracepoints of a kernel phase.
pub fn resolve_kernel_phase(phase: &Phase) -> Result<KernelPhase, KernelError> {
    let Some(root) = tracefs() else {
        let reason = if tracefs_mounted() {
            "tracefs is mounted but this user cannot read it (run as root, or remount it \
             readable: mount -o remount,mode=755 /sys/kernel/tracing)"
        } else {
            "tracefs is not mounted (mount it with `mount -t tracefs nodev /sys/kernel/tracing`)"
        };
        return Err(KernelError {
            reason: reason.into(),
            nearest: Vec::new(),
        });
    };
    let (enter, exit) = match (&phase.syscall, &phase.tracepoint) {
        (Some(sc), _) => {
            let sc = sc.trim_start_matches("sys_");
            (
                format!("syscalls:sys_enter_{sc}"),
                format!("syscalls:sys_exit_{sc}"),
            )
        }
        (None, Some(pair)) => (pair.enter.clone(), pair.exit.clone()),
        (None, None) => {
            return Err(KernelError {
                reason: "not a kernel phase".into(),
                nearest: Vec::new(),
            })
        }
    };
    Ok(KernelPhase {
        enter: find(&root, &enter, phase.syscall.is_some())?,
        exit: find(&root, &exit, phase.syscall.is_some())?,
    })
}

fn find(root: &Path, spec: &str, syscall: bool) -> Result<Tracepoint, KernelError> {
    let Some((category, name)) = spec.split_once(':') else {
        return Err(KernelError {
            reason: format!("tracepoint '{spec}' is not CATEGORY:NAME"),
            nearest: Vec::new(),
        });
    };
    let dir = root.join("events").join(category).join(name);
    match std::fs::read_to_string(dir.join("id")) {
        Ok(text) => match text.trim().parse() {
            Ok(id) => {
                let (syscall_nr, syscall_exit) = syscall_of(category, name);
                if category == "syscalls" && syscall_nr.is_none() {
                    return Err(KernelError {
                        reason: format!(
                            "tracepoint {spec}: wprof does not know the number of this syscall \
                             on this architecture"
                        ),
                        nearest: Vec::new(),
                    });
                }
                Ok(Tracepoint {
                    category: category.to_string(),
                    name: name.to_string(),
                    id,
                    syscall_nr,
                    syscall_exit,
                })
            }
            Err(_) => Err(KernelError {
                reason: format!("{}: unexpected content {text:?}", dir.join("id").display()),
                nearest: Vec::new(),
            }),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let what = if syscall {
                let sc = name
                    .trim_start_matches("sys_enter_")
                    .trim_start_matches("sys_exit_");
                format!("no syscall '{sc}' on this kernel (no tracepoint {spec})")
            } else {
                format!("no tracepoint {spec} on this kernel")
            };
            Err(KernelError {
                reason: what,
                nearest: nearest_events(root, category, name),
            })
        }
        Err(e) => Err(KernelError {
            reason: format!("read {}: {e} (wprof needs root for tracefs)", dir.display()),
            nearest: Vec::new(),
        }),
    }
}

/// The syscall number and exit flag of a syscalls:sys_{enter,exit}_NAME tracepoint. The
/// number comes from the `syscalls` crate's table for the architecture wprof was built for.
fn syscall_of(category: &str, name: &str) -> (Option<u32>, bool) {
    if category != "syscalls" {
        return (None, false);
    }
    let (exit, sc) = match (
        name.strip_prefix("sys_enter_"),
        name.strip_prefix("sys_exit_"),
    ) {
        (Some(sc), _) => (false, sc),
        (_, Some(sc)) => (true, sc),
        _ => return (None, false),
    };
    let nr = sc
        .parse::<syscalls::Sysno>()
        .ok()
        .and_then(|s| u32::try_from(s.id()).ok())
        .filter(|&n| n < wprof_common::SYS_EXIT_BIT);
    (nr, exit)
}

/// Up to five event names of `category` closest to `name` (or categories, if it has none).
fn nearest_events(root: &Path, category: &str, name: &str) -> Vec<String> {
    let list = |dir: PathBuf| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter(|e| e.path().is_dir())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let (pool, wanted, prefix) = match list(root.join("events").join(category)) {
        v if !v.is_empty() => (v, name, format!("{category}:")),
        _ => (list(root.join("events")), category, String::new()),
    };
    super::suggest::nearest_names(pool.iter().map(String::as_str), wanted, 5)
        .into_iter()
        .map(|n| format!("{prefix}{n}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(toml_text: &str) -> Phase {
        let p = crate::model::profile::Profile::parse(
            &format!("name = \"t\"\n[[phase]]\nname = \"k\"\n{toml_text}\n"),
            "test",
        )
        .unwrap();
        p.phases[0].clone()
    }

    fn have_tracefs() -> bool {
        crate::testing::require(tracefs().is_some(), "mounted tracefs")
    }

    #[test]
    fn syscall_resolves_to_its_enter_and_exit_tracepoints() {
        if !have_tracefs() {
            return;
        }
        let k = resolve_kernel_phase(&phase("syscall = \"fdatasync\"")).unwrap();
        assert_eq!(k.enter.to_string(), "syscalls:sys_enter_fdatasync");
        assert_eq!(k.exit.to_string(), "syscalls:sys_exit_fdatasync");
        assert_ne!(k.enter.id, k.exit.id);
        assert_eq!(k.enter.syscall_nr, Some(libc::SYS_fdatasync as u32));
        assert!(k.exit.syscall_exit && !k.enter.syscall_exit);
    }

    #[test]
    fn unknown_syscall_says_so_and_suggests() {
        if !have_tracefs() {
            return;
        }
        let e = resolve_kernel_phase(&phase("syscall = \"fdatasyn\"")).unwrap_err();
        assert!(e.reason.contains("no syscall 'fdatasyn'"), "{}", e.reason);
        assert!(
            e.nearest
                .iter()
                .any(|n| n == "syscalls:sys_enter_fdatasync"),
            "{:?}",
            e.nearest
        );
    }

    #[test]
    fn tracepoint_pair_resolves() {
        if !have_tracefs() {
            return;
        }
        let k = resolve_kernel_phase(&phase(
            "tracepoint = [\"syscalls:sys_enter_write\", \"syscalls:sys_exit_write\"]",
        ))
        .unwrap();
        assert_eq!(k.exit.name, "sys_exit_write");
    }
}
