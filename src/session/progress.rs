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

use crate::attach::ThreadEntries;

/// Fewer units of work than this in either state say nothing (a program that neither reads,
/// writes nor waits, e.g. a spinning benchmark).
const MIN_WORK: u64 = 200;

/// Nor less CPU time than this in either state, ns: a live window of db_bench at a 2 s cycle
/// and 20% live holds ~0.3 s.
const MIN_CPU_NS: u64 = 100_000_000;

/// Nor fewer windows of either state.
const MIN_WINDOWS: u32 = 1;

/// Fewer probe hits than this in the live windows price no hit.
const MIN_HITS: u64 = 1_000;

/// One thread's counters: units of work (read + write calls + waits), ns on the CPU and the
/// calls it entered (BPF's count, wrapping; None when BPF holds no stack for it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Reading {
    work: u64,
    cpu_ns: u64,
    entries: Option<ThreadEntries>,
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
    /// Probe hits on the thread (two a call entered), in the windows BPF's count of its calls
    /// was read at both ends of (its stack can go and come back with the count from 0).
    pub hits: u64,
    /// The work of those windows.
    pub hit_work: u64,
    /// Their CPU time, ns.
    pub hit_cpu_ns: u64,
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

/// The probes' hits since the last switch, every thread's, and what the calibration priced
/// them at, ns (what the tree's correction takes out for them).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Hits {
    /// Entry and return hits.
    pub hits: u64,
    /// Their calibrated price, ns.
    pub priced_ns: f64,
}

/// What a probe hit cost the code after it on the threads seen in `root`'s calls.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct RootExcess {
    /// The root's phase id.
    pub root: u32,
    /// Beyond the hit's calibrated price, ns.
    pub ns_per_hit: f64,
    /// The live hits it was measured over.
    pub hits: u64,
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
    /// The live windows' probe hits, every thread's, and their price.
    live_hits: Hits,
    /// Per thread: the phases of the root calls it was last in at the readings.
    roots: HashMap<u64, Vec<u32>>,
}

impl Progress {
    /// The probes just went live (`live`) or paused: closes the window that ended, over the
    /// probed `threads` (`pid << 32 | tid`) read at both of its ends; `hits` are the probes'
    /// since the last switch (in a paused window, the stragglers of its start), `entries` the
    /// calls each thread entered so far (BPF's count).
    pub fn switched(
        &mut self,
        live: bool,
        threads: &HashSet<u64>,
        hits: Hits,
        entries: &HashMap<u64, ThreadEntries>,
    ) {
        let now: HashMap<u64, Reading> = threads
            .iter()
            .filter_map(|&k| {
                let mut r = read_thread((k >> 32) as u32, k as u32)?;
                r.entries = entries.get(&k).copied();
                Some((k, r))
            })
            .collect();
        if let Some(was_live) = self.live_now {
            for (k, a) in &now {
                let Some(b) = self.last.get(k) else {
                    continue;
                };
                let (l, p) = self.threads.entry(*k).or_default();
                let t = if was_live { l } else { p };
                let (work, cpu_ns) = (
                    a.work.saturating_sub(b.work),
                    a.cpu_ns.saturating_sub(b.cpu_ns),
                );
                t.work += work;
                t.cpu_ns += cpu_ns;
                t.windows += 1;
                let entered = a
                    .entries
                    .zip(b.entries)
                    .and_then(|(x, y)| x.entries.checked_sub(y.entries));
                if let (Some(n), Some(x)) = (entered, a.entries) {
                    t.hits += 2 * u64::from(n);
                    t.hit_work += work;
                    t.hit_cpu_ns += cpu_ns;
                    let seen = self.roots.entry(*k).or_default();
                    if !seen.contains(&x.root) {
                        seen.push(x.root);
                    }
                }
            }
            if was_live {
                self.live_hits.hits += hits.hits;
                self.live_hits.priced_ns += hits.priced_ns;
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

    /// What a probe hit costs the traced code beyond its price, ns, per root phase, each over
    /// the threads seen in its calls at the readings: the CPU time the measured threads' live
    /// windows took over what their work would have taken at their paused windows' rate, less
    /// their hits' calibrated price and the CPU sampler's `sampler_share` of it when it pauses
    /// with the probes, per hit (at least 0). A trap also slows the code after it (caches,
    /// TLB, branch predictors): on db_bench this is ~0.5 µs a hit on the writer, which the
    /// calibration on empty functions cannot see. Each thread's own hits count, and each root
    /// its threads' (a flush thread's burst of cheap calls is no measure of the writer's; a
    /// backend that runs statements and commits counts for both). Also returns every measured
    /// thread's together (None: fewer than [`MIN_HITS`] hits).
    pub fn excess_ns_per_hit(&self, sampler_share: f64) -> (Option<f64>, Vec<RootExcess>) {
        if self.live_hits.hits == 0 {
            return (None, Vec::new());
        }
        let price = self.live_hits.priced_ns / self.live_hits.hits as f64;
        let mut by_root: HashMap<u32, (f64, u64)> = HashMap::new();
        let mut all = (0.0, 0u64);
        for (k, (l, p)) in &self.threads {
            if !(l.enough() && p.enough()) {
                continue;
            }
            let Some(roots) = self.roots.get(k) else {
                continue;
            };
            // Over the live windows whose hits are known.
            let extra = l.hit_cpu_ns as f64 - l.hit_work as f64 / p.rate() * 1e9;
            let excess = extra - sampler_share * l.hit_cpu_ns as f64 - l.hits as f64 * price;
            for root in roots {
                let r = by_root.entry(*root).or_default();
                r.0 += excess;
                r.1 += l.hits;
            }
            all.0 += excess;
            all.1 += l.hits;
        }
        let per_hit = |(excess, hits): (f64, u64)| {
            (hits >= MIN_HITS).then(|| (excess / hits as f64).max(0.0))
        };
        let mut roots: Vec<RootExcess> = by_root
            .into_iter()
            .filter_map(|(root, r)| {
                Some(RootExcess {
                    root,
                    ns_per_hit: per_hit(r)?,
                    hits: r.1,
                })
            })
            .collect();
        roots.sort_by_key(|r| r.root);
        (per_hit(all), roots)
    }

    /// The figures for the run's JSON, once there are enough: the rates of the threads
    /// measured, summed, and what a hit cost beyond its price (`sampler_share`: see
    /// [`Progress::excess_ns_per_hit`]); `names` by phase id.
    pub fn reading(
        &self,
        sampler_share: f64,
        names: &[String],
    ) -> Option<crate::model::ProgressCheck> {
        let (excess, roots) = self.excess_ns_per_hit(sampler_share);
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
            live_hits: self.measured().map(|(l, _, _)| l.hits).sum(),
            excess_ns_per_hit: excess,
            excess_by_root: roots
                .iter()
                .filter_map(|r| {
                    Some(crate::model::RootExcess {
                        root: names.get(r.root as usize)?.clone(),
                        ns_per_hit: r.ns_per_hit,
                        hits: r.hits,
                    })
                })
                .collect(),
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
    Some(Reading {
        work,
        cpu_ns,
        entries: None,
    })
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

    /// Writes to /dev/null, spinning `spin` iterations between writes, for `ms` of this
    /// thread's CPU time (on a loaded host 120 ms of wall time can leave too little CPU for
    /// a reading); returns the writes made and the CPU time they took.
    fn work(ms: u64, spin: u64) -> (u64, u64) {
        use std::io::Write;
        let mut null = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .expect("/dev/null");
        let cpu_before = crate::probe_cost::thread_cpu_ns();
        let end = cpu_before + ms * 1_000_000;
        let mut x = 1u64;
        let mut writes = 0;
        while crate::probe_cost::thread_cpu_ns() < end {
            for _ in 0..spin {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            null.write_all(&x.to_le_bytes()).expect("write");
            writes += 1;
        }
        (writes, crate::probe_cost::thread_cpu_ns() - cpu_before)
    }

    #[test]
    fn a_slower_live_window_reads_as_the_share_of_work_it_lost() {
        let me = this_thread();
        let mut p = Progress::default();
        p.switched(true, &me, Hits::default(), &HashMap::new());
        assert_eq!(p.slowdown(), None, "nothing measured yet");
        // "Live" windows spin ten times as long between writes as "paused" ones. How much
        // less work per CPU second that is depends on the machine (a write's cost against
        // the spin's: 0.42 on one CI host, 0.67 here with a 3:1 spin), so the expectation is
        // this thread's own count of its writes over its own CPU clock.
        let (mut live, mut paused) = ((0, 0), (0, 0));
        for _ in 0..2 {
            let (w, ns) = work(120, 10_000);
            live = (live.0 + w, live.1 + ns);
            p.switched(false, &me, Hits::default(), &HashMap::new());
            assert_eq!(p.windows.1 + 1, p.windows.0);
            let (w, ns) = work(120, 1_000);
            paused = (paused.0 + w, paused.1 + ns);
            p.switched(true, &me, Hits::default(), &HashMap::new());
        }
        let rate = |(w, ns): (u64, u64)| w as f64 / ns as f64;
        let expected = 1.0 - rate(live) / rate(paused);
        assert!(
            expected > 0.3,
            "the spin made live windows slower: {expected}"
        );
        let s = p.slowdown().expect("enough windows and work");
        assert!(
            (s - expected).abs() < 0.1,
            "slowdown {s}, by the thread's own count {expected}: {p:?}"
        );
        assert!(
            p.phrase().contains("less work per CPU second"),
            "{}",
            p.phrase()
        );
        let r = p.reading(0.0, &[]).expect("reading");
        assert_eq!((r.live_windows, r.paused_windows), (2, 2));
        assert!(r.live_per_cpu_s < r.paused_per_cpu_s);
    }

    #[test]
    fn a_thread_that_neither_reads_writes_nor_waits_says_nothing() {
        let me = this_thread();
        let mut p = Progress::default();
        p.switched(true, &me, Hits::default(), &HashMap::new());
        for _ in 0..3 {
            for live in [false, true] {
                let end = std::time::Instant::now() + std::time::Duration::from_millis(60);
                while std::time::Instant::now() < end {}
                p.switched(live, &me, Hits::default(), &HashMap::new());
            }
        }
        let (l, p2) = p.threads.values().next().expect("this thread");
        assert!(l.cpu_ns > 0 && p2.cpu_ns > 0, "{p:?}");
        assert_eq!(p.slowdown(), None, "{p:?}");
        assert_eq!(p.phrase(), "");
    }

    /// A thread's tallies: live (work, CPU ns, hits) and paused (work, CPU ns).
    fn tallies(live: (u64, u64, u64), paused: (u64, u64)) -> (Tally, Tally) {
        let l = Tally {
            work: live.0,
            cpu_ns: live.1,
            windows: 2,
            hits: live.2,
            hit_work: live.0,
            hit_cpu_ns: live.1,
        };
        let p = Tally {
            work: paused.0,
            cpu_ns: paused.1,
            windows: 2,
            ..Tally::default()
        };
        (l, p)
    }

    #[test]
    fn each_root_takes_what_its_threads_hits_cost_beyond_their_price() {
        let mut p = Progress::default();
        // The writer: 100,000 writes in 1 s live, 200,000 in 1 s paused, so live it spent
        // 0.5 s more than its work took at the paused rate; 200,000 hits priced at 1 µs
        // each (0.2 s) and a sampler at 5% (0.05 s) leave 0.25 s: 1,250 ns a hit.
        p.threads.insert(
            1,
            tallies((100_000, 1_000_000_000, 200_000), (200_000, 1_000_000_000)),
        );
        // A flush thread: as slow live as paused, 1,000,000 cheap hits: nothing beyond their
        // price (it would pull a pooled figure down to ~200 ns).
        p.threads.insert(
            2,
            tallies((1_000, 1_000_000_000, 1_000_000), (1_000, 1_000_000_000)),
        );
        p.roots.insert(1, vec![0]);
        p.roots.insert(2, vec![1]);
        p.live_hits = Hits {
            hits: 1_200_000,
            priced_ns: 1_200_000.0 * 1_000.0,
        };
        let (all, roots) = p.excess_ns_per_hit(0.05);
        assert_eq!(roots.len(), 2, "{roots:?}");
        assert_eq!((roots[0].root, roots[0].hits), (0, 200_000));
        assert!((roots[0].ns_per_hit - 1_250.0).abs() < 1e-6, "{roots:?}");
        // Less than its price: at least 0.
        assert_eq!(roots[1].ns_per_hit, 0.0, "{roots:?}");
        let all = all.expect("pooled figure");
        assert!(all < 300.0, "{all}");
        // A thread seen in two roots counts for both.
        p.roots.insert(1, vec![0, 1]);
        let (_, roots) = p.excess_ns_per_hit(0.05);
        assert_eq!(roots[1].hits, 1_200_000, "{roots:?}");
    }

    #[test]
    fn a_window_whose_call_count_went_back_prices_no_hit() {
        let me = this_thread();
        let mut p = Progress::default();
        let entries = |n: u32| -> HashMap<u64, ThreadEntries> {
            me.iter()
                .map(|&k| {
                    (
                        k,
                        ThreadEntries {
                            entries: n,
                            root: 3,
                        },
                    )
                })
                .collect()
        };
        p.switched(true, &me, Hits::default(), &entries(5_000));
        work(120, 1_000);
        // The stack was freed and made again: its count restarted below the last.
        p.switched(false, &me, Hits::default(), &entries(10));
        let (l, _) = p.threads.values().next().expect("this thread");
        assert_eq!((l.hits, l.hit_cpu_ns), (0, 0), "{l:?}");
        assert!(l.cpu_ns > 0);
        work(120, 1_000);
        p.switched(true, &me, Hits::default(), &entries(2_010));
        work(120, 1_000);
        p.switched(false, &me, Hits::default(), &entries(3_010));
        let (l, _) = p.threads.values().next().expect("this thread");
        assert_eq!(l.hits, 2_000, "{l:?}");
        assert!(l.hit_cpu_ns > 0 && l.hit_cpu_ns < l.cpu_ns, "{l:?}");
        assert_eq!(p.roots.values().next(), Some(&vec![3]));
    }

    #[test]
    fn fields_are_read_by_name() {
        let io = "rchar: 10\nwchar: 20\nsyscr: 3\nsyscw: 4\n";
        assert_eq!(field(io, "syscr:"), Some(3));
        assert_eq!(field(io, "syscw:"), Some(4));
        assert_eq!(field(io, "nope:"), None);
    }
}
