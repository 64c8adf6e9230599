//! The per-process series of `--serve --per-pid`, kept bounded over days.
//!
//! Each traced process gets a `process` label value once (e.g. its PostgreSQL server's
//! `DATADIR:PORT`, shared by every backend of that server). A series is cumulative over every
//! process that had its value: when a process exits its figures move here ([`Store::retire`])
//! so the counters never go down, and wprof forgets the process. A value with no live process
//! left is dropped [`EXPIRE`] later (its series then vanish from the exposition and Prometheus
//! marks them stale); a new process that would add a value beyond `--serve-max-series` series
//! gets the value [`OTHER`] instead, counted in `wprof_serve_folded_processes_total`.
//!
//! In: pids with their figures by tree node, as the session reads them. Out: the retired
//! figures to add to the live ones at each scrape. Plain values: tested without BPF.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant, SystemTime};

use super::native::NativeHistogram;

/// The `process` label value of the processes folded together once the cap is reached.
pub const OTHER: &str = "other";

/// How long the series of a `process` value outlive its last process: Prometheus's default
/// lookback (5 minutes), so every scrape interval up to it sees the final figures.
pub const EXPIRE: Duration = Duration::from_secs(300);

/// Completed calls of one phase path (in one process, or in all): their count, total time
/// and durations.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// Completed calls.
    pub calls: u64,
    /// Their total time, ns.
    pub sum_ns: u64,
    /// Their durations.
    pub hist: NativeHistogram,
}

impl Figures {
    /// Adds another's calls.
    pub fn add(&mut self, other: &Figures) {
        self.calls += other.calls;
        self.sum_ns += other.sum_ns;
        self.hist.add(&other.hist);
    }
}

/// One `process` label value.
#[derive(Debug)]
struct Process {
    /// Figures of its exited processes, by tree node.
    retired: HashMap<u64, Figures>,
    /// Tree nodes it has series for (retired or live).
    nodes: HashSet<u64>,
    /// Its processes not yet retired.
    live: usize,
    /// Since when it has had no live process.
    idle_since: Option<Instant>,
    /// When its series began.
    created: SystemTime,
}

/// The per-process series and their bounds.
#[derive(Debug)]
pub struct Store {
    max_series: usize,
    expire: Duration,
    pids: HashMap<u32, String>,
    processes: BTreeMap<String, Process>,
    series: usize,
    folded: u64,
    said_folded: bool,
}

/// A series as the exposition shows it: the `process` value, the tree node, the figures and
/// when the series began.
pub type StoredSeries = (String, u64, Figures, SystemTime);

impl Store {
    /// At most about `max_series` series (one process's paths may go over), values dropped
    /// `expire` after their last process.
    pub fn new(max_series: usize, expire: Duration) -> Store {
        Store {
            max_series,
            expire,
            pids: HashMap::new(),
            processes: BTreeMap::new(),
            series: 0,
            folded: 0,
            said_folded: false,
        }
    }

    /// The `process` value of `pid`: decided when it is first seen (`name` is asked then),
    /// [`OTHER`] when a new value would go over the cap.
    pub fn process_of(&mut self, pid: u32, name: impl FnOnce() -> String) -> String {
        if let Some(v) = self.pids.get(&pid) {
            return v.clone();
        }
        let mut value = name();
        if !self.processes.contains_key(&value) && self.series >= self.max_series {
            value = OTHER.to_string();
            self.folded += 1;
        }
        let p = self
            .processes
            .entry(value.clone())
            .or_insert_with(|| Process {
                retired: HashMap::new(),
                nodes: HashSet::new(),
                live: 0,
                idle_since: None,
                created: SystemTime::now(),
            });
        p.live += 1;
        p.idle_since = None;
        self.pids.insert(pid, value.clone());
        value
    }

    /// Notes that `process` has a series for `node` (for the cap).
    pub fn note_node(&mut self, process: &str, node: u64) {
        if let Some(p) = self.processes.get_mut(process) {
            if p.nodes.insert(node) {
                self.series += 1;
            }
        }
    }

    /// An exited process: its figures by node join its value's, and it is forgotten.
    pub fn retire(&mut self, pid: u32, figures: Vec<(u64, Figures)>, now: Instant) {
        let Some(value) = self.pids.remove(&pid) else {
            return;
        };
        let mut new_nodes = 0;
        if let Some(p) = self.processes.get_mut(&value) {
            for (node, f) in figures {
                p.retired.entry(node).or_default().add(&f);
                if p.nodes.insert(node) {
                    new_nodes += 1;
                }
            }
            p.live = p.live.saturating_sub(1);
            if p.live == 0 {
                p.idle_since = Some(now);
            }
        }
        self.series += new_nodes;
    }

    /// Drops the values whose last process was retired more than the expiry ago.
    pub fn expire(&mut self, now: Instant) {
        let expire = self.expire;
        let mut dropped = 0;
        self.processes.retain(|_, p| {
            let keep = p
                .idle_since
                .is_none_or(|t| now.saturating_duration_since(t) < expire);
            if !keep {
                dropped += p.nodes.len();
            }
            keep
        });
        self.series -= dropped;
    }

    /// Every series: the retired figures plus `live` ((process, node) -> figures of its live
    /// processes), with when each began.
    pub fn series(&self, live: BTreeMap<(String, u64), Figures>) -> Vec<StoredSeries> {
        let mut all: BTreeMap<(String, u64), Figures> = live;
        for (value, p) in &self.processes {
            for (node, f) in &p.retired {
                all.entry((value.clone(), *node)).or_default().add(f);
            }
        }
        all.into_iter()
            .map(|((value, node), f)| {
                let created = self
                    .processes
                    .get(&value)
                    .map_or_else(SystemTime::now, |p| p.created);
                (value, node, f, created)
            })
            .collect()
    }

    /// Processes folded into [`OTHER`] so far.
    pub fn folded(&self) -> u64 {
        self.folded
    }

    /// True the first time processes were folded (to say so once).
    pub fn first_fold(&mut self) -> bool {
        let first = self.folded > 0 && !self.said_folded;
        self.said_folded |= first;
        first
    }

    /// The `process` values kept now.
    pub fn processes(&self) -> usize {
        self.processes.len()
    }

    /// Series kept now (for the cap).
    pub fn series_count(&self) -> usize {
        self.series
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(calls: u64, ns: u64) -> Figures {
        let mut hist = NativeHistogram::new();
        hist.record_n(ns, calls);
        Figures {
            calls,
            sum_ns: calls * ns,
            hist,
        }
    }

    #[test]
    fn retired_processes_keep_their_values_counters_growing() {
        let mut s = Store::new(100, EXPIRE);
        let t0 = Instant::now();
        // Two backends of one server share its value.
        assert_eq!(
            s.process_of(10, || "/srv/seg0:6000".into()),
            "/srv/seg0:6000"
        );
        assert_eq!(
            s.process_of(11, || "/srv/seg0:6000".into()),
            "/srv/seg0:6000"
        );
        assert_eq!(s.process_of(10, || unreachable!()), "/srv/seg0:6000");
        s.retire(10, vec![(7, figures(3, 1000))], t0);
        let live = BTreeMap::from([(("/srv/seg0:6000".to_string(), 7), figures(2, 1000))]);
        let all = s.series(live);
        assert_eq!(all.len(), 1);
        assert_eq!((all[0].2.calls, all[0].2.sum_ns), (5, 5000));
        // Still one live process: nothing expires.
        s.expire(t0 + EXPIRE * 2);
        assert_eq!(s.processes(), 1);
        s.retire(11, vec![(7, figures(2, 1000))], t0);
        s.expire(t0 + EXPIRE / 2);
        assert_eq!(s.series(BTreeMap::new())[0].2.calls, 5);
        s.expire(t0 + EXPIRE);
        assert_eq!((s.processes(), s.series_count()), (0, 0));
        assert!(s.series(BTreeMap::new()).is_empty());
    }

    #[test]
    fn new_processes_fold_into_other_at_the_cap_and_it_is_said_once() {
        let mut s = Store::new(2, EXPIRE);
        let a = s.process_of(1, || "a".into());
        s.note_node(&a, 1);
        s.note_node(&a, 2);
        assert!(!s.first_fold());
        assert_eq!(s.process_of(2, || "b".into()), OTHER);
        assert_eq!(
            s.process_of(3, || "a".into()),
            "a",
            "a known value still fits"
        );
        assert_eq!(s.process_of(4, || "c".into()), OTHER);
        assert_eq!(s.folded(), 2);
        assert!(s.first_fold());
        assert!(!s.first_fold());
        // Once "a" expires there is room again.
        let t0 = Instant::now();
        s.retire(1, vec![], t0);
        s.retire(3, vec![], t0);
        s.expire(t0 + EXPIRE);
        assert_eq!(s.process_of(5, || "d".into()), "d");
    }
}
