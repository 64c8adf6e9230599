//! The threads that run probed code, and the CPU time they use: what `--max-overhead`
//! measures the probes against. A process's CPU time also holds threads no probe slows
//! (RocksDB's compactions, PostgreSQL's background writer), and against it a probe that
//! halves the writing thread's speed read as a small share: db_bench lost 24% of its writes
//! a second while its probes took 4.9% of the process's CPU time (benchmarks §23).
//!
//! In: the traced processes at the start (a baseline for their threads), then each tick the
//! threads BPF holds a stack of phases for ([`Tracer::threads_in_phases`]). Out: the CPU time
//! those threads used since the last tick.

use std::collections::{HashMap, HashSet};

use super::overhead::{stat_cpu_ns, MIN_CPU_NS};

/// Thread keys (`pid << 32 | tid`) and their CPU time, ns.
pub(super) struct ProbedThreads {
    /// Every thread of the traced processes when the run began, with its CPU time then.
    at_start: HashMap<u64, u64>,
    /// The probed threads known so far, with their CPU time when last read.
    last: HashMap<u64, u64>,
}

impl ProbedThreads {
    /// Reads the CPU time of every thread of `pids` now (threads that come later start
    /// from zero: all their time is the run's).
    pub fn new(pids: &[u32]) -> ProbedThreads {
        let mut at_start = HashMap::new();
        for &pid in pids {
            for tid in tids_of(pid) {
                if let Some(ns) = thread_cpu_ns(pid, tid) {
                    at_start.insert(key(pid, tid), ns);
                }
            }
        }
        ProbedThreads {
            at_start,
            last: HashMap::new(),
        }
    }

    /// Learns threads that entered a probed phase (`keys` as BPF keys its stacks; a Go
    /// goroutine's key names no thread and is skipped).
    pub fn learn(&mut self, keys: impl IntoIterator<Item = u64>) {
        for k in keys {
            if k & wprof_common::GOROUTINE_KEY_BIT == 0 && !self.last.contains_key(&k) {
                let start = self.at_start.get(&k).copied().unwrap_or(0);
                self.last.insert(k, start);
            }
        }
    }

    /// CPU time the probed threads used since the last call, ns; a thread gone since is
    /// forgotten.
    pub fn used_ns(&mut self) -> u64 {
        let mut used = 0;
        self.last
            .retain(|&k, last| match thread_cpu_ns((k >> 32) as u32, k as u32) {
                Some(now) => {
                    used += now.saturating_sub(*last);
                    *last = now;
                    true
                }
                None => false,
            });
        used
    }

    /// What a share of the probes' time is measured against since the last call: the probed
    /// threads' CPU time, ns, and true; or, when they used too little to say anything (none
    /// known yet, a Go program's goroutines), `processes_ns` and false.
    pub fn cpu_against(&mut self, processes_ns: u64) -> (u64, bool) {
        let probed = self.used_ns();
        if probed >= MIN_CPU_NS {
            (probed, true)
        } else {
            (processes_ns, false)
        }
    }

    /// The probed threads known so far (empty: none yet, or a Go program's goroutines).
    pub fn keys(&self) -> HashSet<u64> {
        self.last.keys().copied().collect()
    }

    /// How many probed threads are known.
    pub fn len(&self) -> usize {
        self.last.len()
    }
}

/// A thread's key as BPF makes it.
fn key(pid: u32, tid: u32) -> u64 {
    (pid as u64) << 32 | tid as u64
}

/// User + system CPU time of one thread, ns; None once it is gone.
/// The threads of process `pid` now (none when it is gone).
pub(super) fn tids_of(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    (tasks.flatten())
        .filter_map(|t| t.file_name().to_str()?.parse().ok())
        .collect()
}

fn thread_cpu_ns(pid: u32, tid: u32) -> Option<u64> {
    stat_cpu_ns(&format!("/proc/{pid}/task/{tid}/stat"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_thread_of_this_process_is_counted_once_learned() {
        let pid = std::process::id();
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        let mut t = ProbedThreads::new(&[pid]);
        assert!(t.at_start.contains_key(&key(pid, tid)));
        // Spins until this thread has had `ms` of CPU time, not of wall time: on a loaded host
        // (a CI run next to it) 60 ms of wall time gave it less than 40 ms of CPU.
        let spin = |ms: u64| {
            let end = crate::probe_cost::thread_cpu_ns() + ms * 1_000_000;
            let mut x = 0u64;
            while crate::probe_cost::thread_cpu_ns() < end {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        };
        spin(60);
        // Not learned yet: nothing counted.
        assert_eq!(t.used_ns(), 0);
        t.learn([key(pid, tid), 1 << 63 | 7]);
        assert_eq!(t.keys().len(), 1, "a goroutine key is no thread");
        // Learned with its baseline from the start: the 60 ms spun since count (/proc ticks
        // at 10 ms).
        let used = t.used_ns();
        assert!(used >= 40_000_000, "{used}");
        assert!(t.used_ns() < 20_000_000);
        // A thread that does not exist is forgotten.
        t.learn([key(pid, u32::MAX)]);
        t.used_ns();
        assert_eq!(t.keys().len(), 1);
    }
}
