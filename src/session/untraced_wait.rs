//! The traced threads' wait for a CPU before the probes go live: what an untraced thread of
//! the program is preempted for, per ns it runs. With it, the corrected times keep the
//! program's own preemptions at the untraced odds (`aggregate::preempted::Carry`) instead
//! of every preemption in its own time: a traced host is busier, and on db_bench the writer
//! waited 3-5× as long per ns on the CPU while traced (benchmarks §40).
//!
//! In: the processes `wprof attach` is about to trace. Out: per thread and per process, ns
//! waited runnable per ns on the CPU over [`WINDOW`], read from the kernel's
//! `/proc/PID/task/TID/schedstat` (time on the CPU, time waiting on a run queue) at both
//! ends while wprof does nothing; and the totals for the run's JSON.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::probed_threads::tids_of;
use crate::aggregate::preempted::WaitBaseline;
use crate::model::PreemptionBaseline;

/// How long the threads are watched before the probes go live. A writer busy on the CPU
/// runs ~200 ms in it, a few dozen time slices: enough for its rate to within a few
/// hundredths, and a quarter of a second is little next to attaching and calibrating.
pub const WINDOW: Duration = Duration::from_millis(250);

/// Time on the CPU in the window below which a thread (or a process) says nothing of its
/// own rate: its threads then take their process's, or keep the draw's odds.
const MIN_CPU_NS: u64 = 5_000_000;

/// The baseline and its totals, or None when the processes ran too little in the window.
pub fn measure(pids: &[u32]) -> Option<(WaitBaseline, PreemptionBaseline)> {
    let before = read(pids);
    let started = Instant::now();
    std::thread::sleep(WINDOW);
    let after = read(pids);
    baseline(&before, &after, started.elapsed())
}

/// Per (process, thread): ns on the CPU and ns waiting for one, since the thread began.
type Times = HashMap<(u32, u32), (u64, u64)>;

fn read(pids: &[u32]) -> Times {
    let mut times = HashMap::new();
    for &pid in pids {
        for tid in tids_of(pid) {
            if let Some(t) = schedstat(&format!("/proc/{pid}/task/{tid}/schedstat")) {
                times.insert((pid, tid), t);
            }
        }
    }
    times
}

/// `schedstat`'s first two fields: ns on the CPU, ns runnable on a run queue.
fn schedstat(path: &str) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut f = text.split_whitespace().map(|v| v.parse::<u64>().ok());
    Some((f.next()??, f.next()??))
}

/// The rates over the threads seen at both ends.
fn baseline(
    before: &Times,
    after: &Times,
    window: Duration,
) -> Option<(WaitBaseline, PreemptionBaseline)> {
    let mut b = WaitBaseline::default();
    let mut per_pid: HashMap<u32, (u64, u64)> = HashMap::new();
    let mut total = PreemptionBaseline {
        window_ms: window.as_secs_f64() * 1e3,
        ..PreemptionBaseline::default()
    };
    for (&(pid, tid), &(cpu1, wait1)) in after {
        let Some(&(cpu0, wait0)) = before.get(&(pid, tid)) else {
            continue;
        };
        let (cpu, wait) = (cpu1.saturating_sub(cpu0), wait1.saturating_sub(wait0));
        if cpu == 0 {
            continue;
        }
        total.threads += 1;
        total.cpu_ns += cpu;
        total.wait_ns += wait;
        let p = per_pid.entry(pid).or_default();
        p.0 += cpu;
        p.1 += wait;
        if cpu >= MIN_CPU_NS {
            b.by_tid.insert(tid, wait as f64 / cpu as f64);
        }
    }
    for (pid, (cpu, wait)) in per_pid {
        if cpu >= MIN_CPU_NS {
            b.by_pid.insert(pid, wait as f64 / cpu as f64);
        }
    }
    (!b.by_pid.is_empty()).then_some((b, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_come_from_the_threads_that_ran_at_both_ends() {
        let before: Times = [
            ((10, 11), (1_000_000_000, 50_000_000)),
            ((10, 12), (2_000_000, 0)),
            ((10, 13), (0, 0)),
        ]
        .into();
        let after: Times = [
            // 200 ms on the CPU, 10 ms waiting: 0.05.
            ((10, 11), (1_200_000_000, 60_000_000)),
            // 1 ms on the CPU: too little for its own rate, counted in its process's.
            ((10, 12), (3_000_000, 1_000_000)),
            // Idle.
            ((10, 13), (0, 0)),
            // Born in the window: no start to count from.
            ((10, 14), (9_000_000, 0)),
        ]
        .into();
        let (b, total) = baseline(&before, &after, WINDOW).unwrap();
        assert_eq!(b.by_tid.len(), 1);
        assert!((b.by_tid[&11] - 0.05).abs() < 1e-9);
        assert!((b.by_pid[&10] - 11.0 / 201.0).abs() < 1e-9);
        assert_eq!(
            (total.threads, total.cpu_ns, total.wait_ns),
            (2, 201_000_000, 11_000_000)
        );
        assert!((total.window_ms - 250.0).abs() < 1e-9);
        // A process that hardly ran gives nothing to go by.
        assert!(baseline(&before, &before, WINDOW).is_none());
    }

    #[test]
    fn this_process_reads_its_own_threads() {
        let t = read(&[std::process::id()]);
        assert!(!t.is_empty());
        // This thread has run, so its CPU time is above zero.
        assert!(t.values().any(|&(cpu, _)| cpu > 0));
    }
}
