//! What the probed threads get done, read from /proc without a probe: their read and write
//! calls (`/proc/PID/task/TID/io`: syscr, syscw) and their waits (`status`:
//! voluntary_ctxt_switches) per ns on the CPU (`schedstat`). Under a duty cycle
//! (`super::duty`) the budget compares that rate while the probes are live with the rate while
//! they are paused: the program's own slowdown. The calibration and the samples in uprobe
//! handling price the traps only; on db_bench the probes' live windows ran 37% fewer writes
//! per second while they priced the probes at 27% (a trap also slows the code after it:
//! caches, TLB, the return stack buffer), and the budget's ops/s came out at 0.79-0.83.
//!
//! Why by hand: no crate reads these per-thread /proc counters (procfs reads a process's
//! `io` and `status`, not schedstat's ns).
//!
//! In: at each switch of the duty cycle, the probed threads. Out: the work per CPU second of
//! the live and the paused windows ([`Progress::reading`]).

use std::collections::{HashMap, HashSet};

/// Fewer units of work than this in either state say nothing (a program that neither reads,
/// writes nor waits, e.g. a spinning benchmark).
const MIN_WORK: u64 = 200;

/// Nor less CPU time than this in either state, ns: a live window of db_bench at a 2 s cycle
/// and 20% live holds ~0.3 s.
const MIN_CPU_NS: u64 = 100_000_000;

/// Nor fewer windows of either state.
const MIN_WINDOWS: u32 = 1;

/// One thread's counters: units of work (read + write calls + waits) and ns on the CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Reading {
    work: u64,
    cpu_ns: u64,
}

/// What one state (live or paused) of the duty cycle added up to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Tally {
    /// Units of work: read and write calls and waits of the probed threads.
    pub work: u64,
    /// Their time on the CPU, ns.
    pub cpu_ns: u64,
    /// Windows counted.
    pub windows: u32,
}

impl Tally {
    /// Units of work per CPU second.
    pub fn rate(&self) -> f64 {
        self.work as f64 / (self.cpu_ns.max(1) as f64 / 1e9)
    }

    fn enough(&self) -> bool {
        self.work >= MIN_WORK && self.cpu_ns >= MIN_CPU_NS && self.windows >= MIN_WINDOWS
    }
}

/// The probed threads' work per CPU second, probes live against paused.
#[derive(Debug, Default)]
pub(super) struct Progress {
    last: HashMap<u64, Reading>,
    /// Whether the window going on now is live (None before the first switch).
    live_now: Option<bool>,
    /// Per thread: its live windows' tally and its paused windows'.
    threads: HashMap<u64, (Tally, Tally)>,
    /// Windows closed: live, paused.
    windows: (u32, u32),
}

impl Progress {
    /// The probes just went live (`live`) or paused: closes the window that ended, over the
    /// probed `threads` (`pid << 32 | tid`) read at both of its ends.
    pub fn switched(&mut self, live: bool, threads: &HashSet<u64>) {
        let now: HashMap<u64, Reading> = threads
            .iter()
            .filter_map(|&k| Some((k, read_thread((k >> 32) as u32, k as u32)?)))
            .collect();
        if let Some(was_live) = self.live_now {
            for (k, a) in &now {
                let Some(b) = self.last.get(k) else {
                    continue;
                };
                let (l, p) = self.threads.entry(*k).or_default();
                let t = if was_live { l } else { p };
                t.work += a.work.saturating_sub(b.work);
                t.cpu_ns += a.cpu_ns.saturating_sub(b.cpu_ns);
                t.windows += 1;
            }
            if was_live {
                self.windows.0 += 1;
            } else {
                self.windows.1 += 1;
            }
        }
        self.last = now;
        self.live_now = Some(live);
    }

    /// The threads with enough of both states, and the work each did in both: the weight of
    /// its figure (a flush thread that writes a file in a few large calls says little next to
    /// a writer's call a write).
    fn measured(&self) -> impl Iterator<Item = (&Tally, &Tally, f64)> {
        self.threads
            .values()
            .filter(|(l, p)| l.enough() && p.enough())
            .map(|(l, p)| (l, p, (l.work + p.work) as f64))
    }

    /// The share of the probed threads' work per CPU second lost while the probes are live
    /// (each thread's, weighted by its work), once a thread has enough of both states to say
    /// it (0 when the live windows did more).
    pub fn slowdown(&self) -> Option<f64> {
        let (mut lost, mut weight) = (0.0, 0.0);
        for (l, p, w) in self.measured() {
            lost += w * (1.0 - l.rate() / p.rate());
            weight += w;
        }
        (weight > 0.0).then(|| (lost / weight).max(0.0))
    }

    /// The figures for the run's JSON, once there are enough: the rates of the threads
    /// measured, summed.
    pub fn reading(&self) -> Option<crate::model::ProgressCheck> {
        let slowdown = self.slowdown()?;
        let (mut live, mut paused) = (Tally::default(), Tally::default());
        for (l, p, _) in self.measured() {
            for (sum, t) in [(&mut live, l), (&mut paused, p)] {
                sum.work += t.work;
                sum.cpu_ns += t.cpu_ns;
            }
        }
        Some(crate::model::ProgressCheck {
            live_per_cpu_s: live.rate(),
            paused_per_cpu_s: paused.rate(),
            slowdown_pct: slowdown * 100.0,
            live_windows: self.windows.0,
            paused_windows: self.windows.1,
        })
    }

    /// "; with the probes live the probed threads did N% less work …" for the budget's
    /// messages, once there is a figure.
    pub fn phrase(&self) -> String {
        match self.slowdown() {
            Some(s) => format!(
                "; with the probes live the probed threads did {:.0}% less work per CPU second \
                 (reads, writes and waits; {} live and {} paused windows)",
                s * 100.0,
                self.windows.0,
                self.windows.1
            ),
            None => String::new(),
        }
    }
}

/// One thread's counters now; None once it is gone.
fn read_thread(pid: u32, tid: u32) -> Option<Reading> {
    let dir = format!("/proc/{pid}/task/{tid}");
    let schedstat = std::fs::read_to_string(format!("{dir}/schedstat")).ok()?;
    let cpu_ns = schedstat.split_whitespace().next()?.parse().ok()?;
    let io = std::fs::read_to_string(format!("{dir}/io")).ok()?;
    let status = std::fs::read_to_string(format!("{dir}/status")).ok()?;
    let work =
        field(&io, "syscr:")? + field(&io, "syscw:")? + field(&status, "voluntary_ctxt_switches:")?;
    Some(Reading { work, cpu_ns })
}

/// The number after `name` at the start of a line of `text`.
fn field(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn this_thread() -> HashSet<u64> {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u64;
        [(std::process::id() as u64) << 32 | tid].into()
    }

    /// Writes to /dev/null, spinning `spin` iterations between writes, for `ms`.
    fn work(ms: u64, spin: u64) {
        use std::io::Write;
        let mut null = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .expect("/dev/null");
        let end = std::time::Instant::now() + std::time::Duration::from_millis(ms);
        let mut x = 1u64;
        while std::time::Instant::now() < end {
            for _ in 0..spin {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            null.write_all(&x.to_le_bytes()).expect("write");
        }
    }

    #[test]
    fn a_slower_live_window_reads_as_the_share_of_work_it_lost() {
        let me = this_thread();
        let mut p = Progress::default();
        p.switched(true, &me);
        assert_eq!(p.slowdown(), None, "nothing measured yet");
        // "Live" windows spin three times as long between writes as "paused" ones: the work
        // per CPU second is about a third or less (a write costs a little too).
        for _ in 0..2 {
            work(120, 3_000);
            p.switched(false, &me);
            assert_eq!(p.windows.1 + 1, p.windows.0);
            work(120, 1_000);
            p.switched(true, &me);
        }
        let s = p.slowdown().expect("enough windows and work");
        assert!((0.45..0.75).contains(&s), "slowdown {s}: {p:?}");
        assert!(
            p.phrase().contains("less work per CPU second"),
            "{}",
            p.phrase()
        );
        let r = p.reading().expect("reading");
        assert_eq!((r.live_windows, r.paused_windows), (2, 2));
        assert!(r.live_per_cpu_s < r.paused_per_cpu_s);
    }

    #[test]
    fn a_thread_that_neither_reads_writes_nor_waits_says_nothing() {
        let me = this_thread();
        let mut p = Progress::default();
        p.switched(true, &me);
        for _ in 0..3 {
            for live in [false, true] {
                let end = std::time::Instant::now() + std::time::Duration::from_millis(60);
                while std::time::Instant::now() < end {}
                p.switched(live, &me);
            }
        }
        let (l, p2) = p.threads.values().next().expect("this thread");
        assert!(l.cpu_ns > 0 && p2.cpu_ns > 0, "{p:?}");
        assert_eq!(p.slowdown(), None, "{p:?}");
        assert_eq!(p.phrase(), "");
    }

    #[test]
    fn fields_are_read_by_name() {
        let io = "rchar: 10\nwchar: 20\nsyscr: 3\nsyscw: 4\n";
        assert_eq!(field(io, "syscr:"), Some(3));
        assert_eq!(field(io, "syscw:"), Some(4));
        assert_eq!(field(io, "nope:"), None);
    }
}
