//! Other tracers of the processes a run traces. Every tracer's uprobes on a process fire:
//! another wprof's probe hits inflate the times measured here, and this run's probe-cost
//! correction knows nothing of them. Found two ways, each where /proc lets wprof look:
//! - processes holding a uprobe_multi BPF link on a traced pid (the link's fdinfo names the
//!   pid and the object; pid 0 means every process, then the object must be one this run
//!   probes): any BPF tracer, among the processes whose fds wprof may read;
//! - other wprof processes whose command line, parsed as wprof parses its own, attaches to a
//!   traced pid, follows forks from one of its ancestors, or records it: readable whoever
//!   runs them (a wprof with file capabilities hides its fds even from its own user).
//!
//! In: the traced pids and the probed objects. Out: one warning on stderr per other tracer.

use std::collections::BTreeMap;

use super::config::TargetSpec;
use crate::resolve::ResolvedPhase;

/// Warns on stderr of every other process that has, or is about to have, uprobes on one of
/// `pids` or on the objects `phases` probe.
pub fn warn_other_tracers(pids: &[u32], phases: &[ResolvedPhase]) {
    let objects: Vec<String> = phases
        .iter()
        .flat_map(|p| p.targets.iter().map(|t| t.display_object.clone()))
        .collect();
    for (other, what) in other_tracers(pids, &objects) {
        eprintln!(
            "wprof: warning: pid {other} ({what}) has uprobes on the traced process too: its \
             probe hits add to the times measured here, and this run's probe-cost correction \
             does not count them (stop it, or read these times as inflated)"
        );
    }
}

/// Other tracers of `pids`, by their pid, each with what it is.
fn other_tracers(pids: &[u32], objects: &[String]) -> BTreeMap<u32, String> {
    let me = std::process::id();
    let mut found = BTreeMap::new();
    for pid in all_pids().into_iter().filter(|&p| p != me) {
        if let Some(what) = wprof_tracing(pid, pids) {
            found.insert(pid, what);
        } else if holds_uprobe_link(pid, pids, objects) {
            found.insert(pid, comm(pid));
        }
    }
    found
}

fn all_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

/// When `other` is a wprof whose command traces one of `pids`: "wprof attach" or "wprof
/// record".
fn wprof_tracing(other: u32, pids: &[u32]) -> Option<String> {
    if comm(other) != "wprof" {
        return None;
    }
    let raw = std::fs::read(format!("/proc/{other}/cmdline")).ok()?;
    let argv: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let traces = match TargetSpec::of_command_line(&argv)? {
        TargetSpec::Pids {
            pids: theirs,
            follow_forks,
        } => pids.iter().any(|&p| {
            theirs.contains(&p) || (follow_forks && ancestors(p).iter().any(|q| theirs.contains(q)))
        }),
        // record traces its own child only.
        TargetSpec::Command { .. } => pids.iter().any(|&p| parent(p) == Some(other)),
    };
    let verb = argv.get(1).cloned().unwrap_or_default();
    traces.then(|| format!("wprof {verb}"))
}

/// Whether `holder` has a uprobe_multi link on one of `pids`, or on every process (pid 0)
/// at one of `objects`.
fn holds_uprobe_link(holder: u32, pids: &[u32], objects: &[String]) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{holder}/fd")) else {
        return false;
    };
    fds.filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == "anon_inode:bpf_link")
        })
        .filter_map(|e| {
            let fd = e.file_name();
            std::fs::read_to_string(format!("/proc/{holder}/fdinfo/{}", fd.to_string_lossy())).ok()
        })
        .any(|info| uprobe_link_matches(&info, pids, objects))
}

/// Whether a bpf link's fdinfo text is a uprobe_multi (or uretprobe_multi) link on one of
/// `pids`, or on every process at one of `objects`.
fn uprobe_link_matches(fdinfo: &str, pids: &[u32], objects: &[String]) -> bool {
    let field = |name: &str| {
        fdinfo
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    if !matches!(field("link_type"), Some("uprobe_multi" | "uretprobe_multi")) {
        return false;
    }
    match field("pid").and_then(|p| p.parse::<u32>().ok()) {
        Some(0) => field("path").is_some_and(|p| objects.iter().any(|o| o == p)),
        Some(pid) => pids.contains(&pid),
        None => false,
    }
}

/// The parent of `pid`, from /proc/PID/stat (the field after the command name).
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// `pid`'s ancestors, nearest first, up to init.
fn ancestors(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut p = pid;
    // Bounded: a pid reused into a loop while walking must not hang wprof.
    while let Some(q) = parent(p).filter(|&q| q > 1 && out.len() < 256) {
        out.push(q);
        p = q;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "pos:\t0\nflags:\t02000000\nlink_type:\tuprobe_multi\nlink_id:\t8\n\
                        uprobe_cnt:\t1\npid:\t4242\npath:\t/usr/lib/libc.so.6\n";

    #[test]
    fn uprobe_links_match_by_pid_or_by_object_for_every_process() {
        let objs = ["/usr/lib/libc.so.6".to_string()];
        assert!(uprobe_link_matches(INFO, &[4242], &[]));
        assert!(!uprobe_link_matches(INFO, &[4243], &objs));
        let ret = INFO.replace("\tuprobe_multi", "\turetprobe_multi");
        assert!(uprobe_link_matches(&ret, &[4242], &[]));
        let all = INFO.replace("pid:\t4242", "pid:\t0");
        assert!(uprobe_link_matches(&all, &[1], &objs));
        assert!(!uprobe_link_matches(&all, &[1], &[]));
        let kprobe = INFO.replace("uprobe_multi", "kprobe_multi");
        assert!(!uprobe_link_matches(&kprobe, &[4242], &objs));
    }

    #[test]
    fn ancestors_lead_from_a_child_to_this_process() {
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let up = ancestors(child.id());
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(up.first(), Some(&std::process::id()), "{up:?}");
        assert_eq!(parent(child.id()), None, "reaped");
        assert!(other_tracers(&[child.id()], &[]).is_empty());
    }
}
