//! Who the traced processes are: a label per pid (its command line, or the title a server
//! gives its workers, e.g. `postgres: app db [local] INSERT`) and, with `--follow-forks`,
//! which traced process forked it.
//!
//! Labels are read from /proc while the processes run (a backend may be gone by the end of
//! the run) and refreshed, because a forked child only sets its title after the fork.
//!
//! In: the traced pids, the forks BPF saw, /proc. Out: [`ProcessLabels`] (a label and a
//! parent per pid), and the untraced processes that map a probed object.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::resolve::ResolvedPhase;
use crate::symbolize::{MappingKind, ProcessMaps};

/// How often the labels of live processes are read again.
const REFRESH: Duration = Duration::from_millis(500);

/// Labels and parents of the processes a run saw.
#[derive(Debug, Default)]
pub struct ProcessLabels {
    labels: BTreeMap<u32, String>,
    parents: BTreeMap<u32, u32>,
    last: Option<Instant>,
}

impl ProcessLabels {
    /// Starts with the processes traced from the beginning.
    pub fn new(pids: &[u32]) -> ProcessLabels {
        let mut l = ProcessLabels::default();
        for &p in pids {
            l.note(p);
        }
        l
    }

    /// Records forks seen so far ((child, parent) pairs). Thread creations come through the
    /// same kernel event; they are recognised by a Tgid different from the pid and skipped.
    pub fn forks(&mut self, forks: &[(u32, u32)]) {
        for &(child, parent) in forks {
            if self.parents.contains_key(&child) || is_thread(child) {
                continue;
            }
            self.parents.insert(child, parent);
            self.note(child);
        }
    }

    /// Makes sure `pid` has a label and re-reads every live one at most every
    /// [`REFRESH`].
    pub fn refresh(&mut self, seen: impl IntoIterator<Item = u32>) {
        for pid in seen {
            if !self.labels.contains_key(&pid) {
                self.note(pid);
            }
        }
        if self.last.is_some_and(|t| t.elapsed() < REFRESH) {
            return;
        }
        self.last = Some(Instant::now());
        for (pid, label) in self.labels.iter_mut() {
            if let Some(now) = read_label(*pid) {
                *label = now;
            }
        }
    }

    fn note(&mut self, pid: u32) {
        let label = read_label(pid).unwrap_or_else(|| "(exited)".to_string());
        self.labels.insert(pid, label);
    }

    /// The last label read for `pid`.
    pub fn label(&self, pid: u32) -> String {
        self.labels
            .get(&pid)
            .cloned()
            .or_else(|| read_label(pid))
            .unwrap_or_else(|| "(exited)".to_string())
    }

    /// The traced process `pid` was forked from.
    pub fn parent(&self, pid: u32) -> Option<u32> {
        self.parents.get(&pid).copied()
    }

    /// Every process the run traces or traced: the first ones and those forked since.
    pub fn pids(&self) -> Vec<u32> {
        self.labels.keys().copied().collect()
    }

    /// Processes traced by following forks, by pid.
    pub fn forked(&self) -> Vec<u32> {
        self.parents.keys().copied().collect()
    }

    /// Forgets an exited process (`--serve`: a run of days must not keep every backend that
    /// ever was); its children keep their own entries.
    pub fn forget(&mut self, pid: u32) {
        self.labels.remove(&pid);
        self.parents.remove(&pid);
    }

    /// The `process` label of `pid` for `--serve --per-pid`: `DATADIR:PORT` of the PostgreSQL
    /// server it belongs to when it or a traced ancestor is a postmaster (so every backend of
    /// a segment shares one value, whatever its title says now), else its own label at first
    /// sight, at most [`MAX_PROCESS_LABEL`] characters.
    pub fn series_label(&self, pid: u32) -> String {
        let mut p = pid;
        for _ in 0..64 {
            if let Some(server) = postgres_server(p, &self.label(p)) {
                return server;
            }
            match self.parent(p) {
                Some(q) => p = q,
                None => break,
            }
        }
        self.label(pid).chars().take(MAX_PROCESS_LABEL).collect()
    }
}

/// The longest `process` label value `--serve` gives a command line.
pub const MAX_PROCESS_LABEL: usize = 120;

/// `DATADIR:PORT` (or `DATADIR`) when `cmdline` is a postmaster's: its program is `postgres`
/// or `postmaster`. The data directory is its `-D`, else its working directory (a postmaster
/// changes into it); the port its `-p` or `-c port=`, else line 4 of `postmaster.pid`.
fn postgres_server(pid: u32, cmdline: &str) -> Option<String> {
    let args: Vec<&str> = cmdline.split_whitespace().collect();
    let program = Path::new(args.first()?).file_name()?.to_str()?;
    if program != "postgres" && program != "postmaster" {
        return None;
    }
    let datadir = arg_value(&args, "-D").or_else(|| {
        std::fs::read_link(format!("/proc/{pid}/cwd"))
            .ok()
            .map(|p| p.to_string_lossy().into_owned())
    })?;
    let port = arg_value(&args, "-p")
        .or_else(|| {
            args.iter()
                .find_map(|a| a.strip_prefix("port="))
                .map(String::from)
        })
        .or_else(|| {
            let root = format!("/proc/{pid}/root");
            let dir = Path::new(&root).join(datadir.trim_start_matches('/'));
            let text = std::fs::read_to_string(dir.join("postmaster.pid")).ok()?;
            port_of_pid_file(&text)
        });
    Some(match port {
        Some(p) => format!("{datadir}:{p}"),
        None => datadir,
    })
}

/// The value of option `flag` in `args` (`-D DIR` or `-DDIR`).
fn arg_value(args: &[&str], flag: &str) -> Option<String> {
    args.iter().enumerate().find_map(|(i, a)| {
        if *a == flag {
            args.get(i + 1).map(|v| v.to_string())
        } else {
            a.strip_prefix(flag)
                .filter(|v| !v.is_empty())
                .map(String::from)
        }
    })
}

/// The port in a `postmaster.pid` (its fourth line).
fn port_of_pid_file(text: &str) -> Option<String> {
    let port = text.lines().nth(3)?.trim();
    port.parse::<u16>().ok().map(|p| p.to_string())
}

/// `/proc/PID/cmdline` with its NULs as spaces (a process title set by overwriting argv has
/// one long first argument padded with NULs).
fn read_label(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let text: String = String::from_utf8_lossy(&raw)
        .split('\0')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let text = text.trim().to_string();
    if text.is_empty() {
        // Kernel threads and zombies have no command line.
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .ok()
            .map(|c| format!("[{}]", c.trim()))
    } else {
        Some(text)
    }
}

/// Whether `tid` is a thread of another process (its Tgid differs).
fn is_thread(tid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Tgid:"))
                .and_then(|v| v.trim().parse::<u32>().ok())
        })
        .is_some_and(|tgid| tgid != tid)
}

/// Processes other than `traced` that map one of `objects` (paths as /proc/PID/maps shows
/// them): under `--follow-forks` each of them takes a probe hit per call of a probed function.
pub fn others_mapping(objects: &[String], traced: &[u32]) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| !traced.contains(pid))
        .filter(|&pid| {
            // Executable mappings only: uprobes fire in code.
            ProcessMaps::read(pid).is_ok_and(|maps| {
                maps.mappings().iter().any(|m| {
                    matches!(&m.kind, MappingKind::File { path, .. }
                        if objects.iter().any(|o| Path::new(o) == path))
                })
            })
        })
        .collect();
    out.sort_unstable();
    out
}

/// Under `--follow-forks` the probes sit on the objects for every process: say which
/// untraced processes map them and so pay a probe hit per probed call while wprof runs.
pub fn note_untraced_mappers(phases: &[ResolvedPhase], traced: &[u32]) {
    let mut objects: Vec<String> = phases
        .iter()
        .flat_map(|p| p.targets.iter().map(|t| t.display_object.clone()))
        .collect();
    objects.sort();
    objects.dedup();
    let others = others_mapping(&objects, traced);
    if others.is_empty() {
        return;
    }
    let shown: Vec<String> = others.iter().take(8).map(|p| p.to_string()).collect();
    let more = if others.len() > 8 { ", ..." } else { "" };
    eprintln!(
        "wprof: note: --follow-forks probes {} for every process; {} untraced process(es) map them \
         and pay ~1-12 µs per call of a probed function while wprof runs (pid {}{more})",
        objects.join(", "),
        others.len(),
        shown.join(", ")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_gets_its_command_line_and_its_threads_are_recognised() {
        let me = std::process::id();
        let l = ProcessLabels::new(&[me]);
        assert!(!l.label(me).is_empty());
        assert!(!is_thread(me));
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let _ = done_rx.recv();
        });
        let tid = rx.recv().unwrap();
        assert!(is_thread(tid), "thread {tid} of {me}");
        let mut labels = ProcessLabels::new(&[me]);
        labels.forks(&[(tid, me)]);
        assert_eq!(
            labels.forked(),
            Vec::<u32>::new(),
            "a thread is not a forked process"
        );
        done_tx.send(()).unwrap();
        t.join().unwrap();
    }

    #[test]
    fn other_processes_mapping_an_object_are_found() {
        let sleep = std::fs::canonicalize("/bin/sleep").unwrap();
        let sleep = sleep.to_string_lossy().into_owned();
        let mut child = std::process::Command::new(&sleep)
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        // Its maps show the executable once exec is done.
        let mut found = Vec::new();
        for _ in 0..100 {
            found = others_mapping(std::slice::from_ref(&sleep), &[]);
            if found.contains(&pid) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let excluded = others_mapping(std::slice::from_ref(&sleep), &[pid]);
        let _ = child.kill();
        let _ = child.wait();
        assert!(found.contains(&pid), "{pid} not in {found:?}");
        assert!(!excluded.contains(&pid));
        assert!(others_mapping(&["/no/such/object".into()], &[]).is_empty());
    }

    #[test]
    fn a_postmaster_names_its_data_directory_and_port() {
        let me = std::process::id();
        let pg = |c: &str| postgres_server(me, c);
        assert_eq!(
            pg("/usr/lib/postgresql/15/bin/postgres -D /srv/seg0 -p 6000").as_deref(),
            Some("/srv/seg0:6000")
        );
        assert_eq!(
            pg("postgres -D/srv/seg1 -c port=6001").as_deref(),
            Some("/srv/seg1:6001")
        );
        // No -D: the working directory (this test's), no port found there.
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(pg("postgres"), Some(cwd.to_string_lossy().into_owned()));
        assert_eq!(pg("postgres: app db [local] INSERT"), None);
        assert_eq!(pg("/usr/bin/python3 -D x"), None);
        assert_eq!(
            port_of_pid_file("4242\n/srv/seg0\n1700000000\n6000\n/tmp\n"),
            Some("6000".into())
        );
        assert_eq!(port_of_pid_file("4242\n"), None);
    }

    #[test]
    fn a_backend_takes_its_postmasters_label_and_others_their_own() {
        let me = std::process::id();
        let mut l = ProcessLabels::default();
        l.labels.insert(
            1,
            "/usr/lib/postgresql/15/bin/postgres -D /srv/seg0 -p 6000".into(),
        );
        l.labels
            .insert(me, "postgres: app db [local] INSERT".into());
        l.parents.insert(me, 1);
        assert_eq!(l.series_label(me), "/srv/seg0:6000");
        l.labels.insert(2, "x".repeat(500));
        assert_eq!(l.series_label(2).len(), MAX_PROCESS_LABEL);
        l.forget(me);
        assert_eq!(l.parent(me), None);
    }

    #[test]
    fn a_gone_pid_is_labelled_exited() {
        let l = ProcessLabels::new(&[u32::MAX - 1]);
        assert_eq!(l.label(u32::MAX - 1), "(exited)");
    }
}
