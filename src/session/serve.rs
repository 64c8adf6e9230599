//! `--serve` during a run: the collect loop's aggregator turned into a [`Scrape`] whenever a
//! scrape asks, and, under `--per-pid`, exited processes retired into the series store once a
//! second so a run of days holds only the live ones.
//!
//! In: the aggregator (per event; with `--aggregate kernel`, or once `auto` switched, also
//! BPF's node summaries read at each scrape), the process labels, BPF's counters and the
//! overhead watch's last share. Out: the exposition published to the [`Server`]. Series are
//! what the tree shows: corrected for the probes' cost when the run calibrated.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant, SystemTime};

use anyhow::Result;
use wprof_common::{counter, hist_bucket_mid};

use super::config::TraceConfig;
use super::processes::ProcessLabels;
use crate::aggregate::{Aggregator, EndCounters, LiveNode};
use crate::args::AggregateMode;
use crate::attach::{process_alive, Tracer};
use crate::collect::kernel::read_kernel_summaries;
use crate::collect::{read_global_counters, read_node_counters};
use crate::serve::{
    store::EXPIRE, Figures, NativeHistogram, PathLosses, PhaseSeries, Scrape, Server, Store,
};

/// How often exited processes are looked for (`--per-pid`). An exited process is held until
/// the sweep after the one that found it gone, with its per-process tree (~3 MB under the
/// `postgres` profile: two histograms a node): against a server whose backends come and go at
/// pgbench -C's ~170 a second, a 1 s sweep held ~300 of them, 850 MB (benches/serve_rss.sh).
/// 200 ms is still ten drains of the ring buffer after the exit was seen.
const SWEEP: Duration = Duration::from_millis(200);

/// Publishes a run's figures to its `--serve` endpoint.
pub(super) struct Publisher {
    server: Server,
    /// The per-process series (`--per-pid`).
    store: Option<Store>,
    profile: String,
    names: Vec<String>,
    roles: Vec<Option<String>>,
    /// `--aggregate kernel`: the figures are in BPF's maps.
    kernel: bool,
    started: SystemTime,
    /// Processes found gone at the last sweep: retired at the next one, once their last
    /// spans have surely left the ring buffer.
    gone: HashSet<u32>,
    last_sweep: Instant,
}

impl Publisher {
    /// For the run `config` plans (`--per-pid` keeps per-process series, bounded by
    /// `--serve-max-series`).
    pub fn new(server: Server, config: &TraceConfig) -> Publisher {
        let profile = &config.profile;
        let max_series = config.serve.as_ref().map_or(0, |s| s.max_series);
        Publisher {
            server,
            store: config.per_pid.then(|| Store::new(max_series, EXPIRE)),
            profile: profile.name.clone(),
            names: profile.phases.iter().map(|p| p.name.clone()).collect(),
            roles: profile.phases.iter().map(|p| p.role.clone()).collect(),
            kernel: config.aggregate == AggregateMode::Kernel,
            started: SystemTime::now(),
            gone: HashSet::new(),
            last_sweep: Instant::now(),
        }
    }

    /// After each drain: retires exited processes (once a second) and publishes when a scrape
    /// waits. `switched`: `--aggregate auto` moved to the kernel; `overhead_pct`: the probes'
    /// last measured share.
    pub fn tick(
        &mut self,
        agg: &mut Aggregator,
        labels: &mut ProcessLabels,
        tracer: &mut Tracer,
        overhead_pct: f64,
        switched: bool,
    ) -> Result<()> {
        if self.last_sweep.elapsed() >= SWEEP {
            self.last_sweep = Instant::now();
            self.sweep(agg, labels);
        }
        if !self.server.wanted() {
            return Ok(());
        }
        let scrape = self.scrape(agg, labels, tracer, overhead_pct, switched)?;
        self.server.publish(scrape.protobuf(), scrape.text());
        Ok(())
    }

    /// Retires the processes found gone at the last sweep and gone still (their figures move
    /// to the store, their labels are forgotten); expires the values idle too long. A process
    /// is only retired a whole sweep after its exit was seen: spans it made just before can
    /// still be in the ring buffer, and its label must still be known when they come.
    fn sweep(&mut self, agg: &mut Aggregator, labels: &mut ProcessLabels) {
        let Some(store) = self.store.as_mut() else {
            return;
        };
        let now = Instant::now();
        let gone: HashSet<u32> = agg
            .pids()
            .into_iter()
            .chain(labels.forked())
            .filter(|&p| !process_alive(p))
            .collect();
        for &pid in self.gone.intersection(&gone) {
            let mut figures = Vec::new();
            agg.retire_pid(pid, |n| figures.push((n.node, figures_of(&n))));
            if !figures.is_empty() {
                store.process_of(pid, || labels.series_label(pid));
            }
            store.retire(pid, figures, now);
            labels.forget(pid);
        }
        self.gone = gone.difference(&self.gone).copied().collect();
        store.expire(now);
    }

    /// What a scrape shows now.
    fn scrape(
        &mut self,
        agg: &Aggregator,
        labels: &ProcessLabels,
        tracer: &mut Tracer,
        overhead_pct: f64,
        switched: bool,
    ) -> Result<Scrape> {
        let mut by_path: BTreeMap<(Option<String>, String), PhaseSeries> = BTreeMap::new();
        let mut add = |process: Option<String>, node: u64, f: &Figures, created: SystemTime| {
            let path = agg.path_of(node, &self.names).join("/");
            if path.is_empty() {
                // Its definition has not come yet.
                return;
            }
            let role = agg
                .phase_of(node)
                .and_then(|p| self.roles.get(p as usize).cloned().flatten());
            by_path
                .entry((process.clone(), path.clone()))
                .or_insert_with(|| PhaseSeries {
                    phase: path,
                    role,
                    process,
                    figures: Figures::default(),
                    created,
                })
                .figures
                .add(f);
        };
        let (mut processes, mut folded) = (0, 0);
        match self.store.as_mut() {
            None => {
                let mut merged: BTreeMap<u64, Figures> = BTreeMap::new();
                agg.live_nodes(|n| merged.entry(n.node).or_default().add(&figures_of(&n)));
                if self.kernel || switched {
                    add_kernel(&mut merged, tracer, agg.corrects())?;
                }
                for (node, f) in &merged {
                    add(None, *node, f, self.started);
                }
            }
            Some(store) => {
                let mut live: BTreeMap<(String, u64), Figures> = BTreeMap::new();
                for pid in agg.pids() {
                    let value = store.process_of(pid, || labels.series_label(pid));
                    agg.live_pid_nodes(pid, |n| {
                        live.entry((value.clone(), n.node))
                            .or_default()
                            .add(&figures_of(&n))
                    });
                }
                for (value, node) in live.keys() {
                    store.note_node(value, *node);
                }
                if store.first_fold() {
                    eprintln!(
                        "wprof: --serve: {} series reached (--serve-max-series); new processes are \
                         served as process=\"other\" (counted in {})",
                        store.series_count(),
                        crate::serve::names::FOLDED
                    );
                }
                for (value, node, f, created) in store.series(live) {
                    add(Some(value), node, &f, created);
                }
                processes = store.processes();
                folded = store.folded();
            }
        }
        let global = read_global_counters(tracer)?;
        let g = |i: u32| global.get(i as usize).copied().unwrap_or(0);
        Ok(Scrape {
            profile: self.profile.clone(),
            started: self.started,
            series: by_path.into_values().collect(),
            losses: self.losses(agg, tracer)?,
            lost_events: g(counter::LOST_SPANS) + g(counter::LOST_NODE_DEFS),
            unmatched_returns: g(counter::UNMATCHED_RETURNS),
            overhead_ratio: overhead_pct / 100.0,
            folded_processes: folded,
            processes,
        })
    }

    /// BPF's lost and abandoned calls so far, by path.
    fn losses(&self, agg: &Aggregator, tracer: &Tracer) -> Result<Vec<PathLosses>> {
        let mut nodes = EndCounters::default();
        read_node_counters(tracer, &mut nodes)?;
        let mut by_path: BTreeMap<String, PathLosses> = BTreeMap::new();
        let all: HashSet<u64> = nodes
            .lost
            .keys()
            .chain(nodes.abandoned.keys())
            .copied()
            .collect();
        for node in all {
            let phase = agg.path_of(node, &self.names).join("/");
            if phase.is_empty() {
                continue;
            }
            let role = agg
                .phase_of(node)
                .and_then(|p| self.roles.get(p as usize).cloned().flatten());
            let l = by_path.entry(phase.clone()).or_insert_with(|| PathLosses {
                phase,
                role,
                ..PathLosses::default()
            });
            l.lost += nodes.lost.get(&node).copied().unwrap_or(0);
            l.abandoned += nodes.abandoned.get(&node).copied().unwrap_or(0);
        }
        Ok(by_path.into_values().collect())
    }
}

/// A node's figures as a series holds them.
fn figures_of(n: &LiveNode<'_>) -> Figures {
    let mut hist = NativeHistogram::new();
    hist.add_hdr(n.hist);
    Figures {
        calls: n.count,
        sum_ns: n.total_ns,
        hist,
    }
}

/// Adds what BPF aggregated so far (`--aggregate kernel`) to `merged`: the same figures
/// [`Aggregator::add_kernel_summaries`] takes at the end, each in-kernel bucket at its middle.
fn add_kernel(
    merged: &mut BTreeMap<u64, Figures>,
    tracer: &mut Tracer,
    corrects: bool,
) -> Result<()> {
    let k = read_kernel_summaries(tracer)?;
    for (node, s) in &k.nodes {
        let f = merged.entry(*node).or_default();
        f.calls += s.count;
        f.sum_ns += if corrects {
            s.corrected_total_ns
        } else {
            s.total_ns
        };
    }
    for (key, calls) in &k.buckets {
        if (key.corrected != 0) == corrects {
            merged
                .entry(key.node)
                .or_default()
                .hist
                .record_n(hist_bucket_mid(key.bucket).max(1), *calls);
        }
    }
    Ok(())
}
