//! Tests of the tree built from events: nesting, recursion, skip, orphans, end counters, units,
//! in-kernel summaries and per-process trees.

use super::*;

fn def(node: u64, parent: u64, phase: u32) -> Event {
    Event {
        kind: EventKind::NodeDef as u32,
        node,
        parent,
        phase,
        ..Event::default()
    }
}
fn span(node: u64, phase: u32, dur: u64, child: u64) -> Event {
    Event {
        kind: EventKind::Span as u32,
        node,
        phase,
        dur_ns: dur,
        child_ns: child,
        ..Event::default()
    }
}

#[test]
fn builds_nested_tree_with_self_time() {
    let mut a = Aggregator::new();
    a.add(&def(10, 0, 0));
    a.add(&def(11, 10, 1));
    a.add(&def(12, 10, 2));
    for _ in 0..3 {
        a.add(&span(11, 1, 100, 0));
        a.add(&span(12, 2, 50, 0));
        a.add(&span(10, 0, 200, 150));
    }
    let names = vec!["write".into(), "encode".into(), "wal".into()];
    let t = a.finish(
        &names,
        &[None, None, Some("wal".into())],
        &EndCounters::default(),
    );
    assert_eq!(t.roots.len(), 1);
    let w = &t.roots[0];
    assert_eq!((w.count, w.total_ns, w.self_ns), (3, 600, 150));
    assert_eq!(
        w.children
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        ["encode", "wal"]
    );
    assert_eq!(
        t.find(&["write", "wal"]).unwrap().role.as_deref(),
        Some("wal")
    );
    assert_eq!(t.find(&["write", "encode"]).unwrap().hist.len(), 3);
    assert_eq!(t.events, 12);
}

#[test]
fn call_rows_count_a_recursion_once_in_time_and_every_level_in_calls() {
    let names: Vec<String> = vec!["w".into(), "r".into()];
    let mut a = Aggregator::with_calls(&names, 10, 10);
    a.add(&def(1, 0, 0));
    a.add(&def(2, 1, 1));
    a.add(&def(3, 2, 1));
    let mut inner = span(3, 1, 40, 0);
    inner.depth = 2;
    let mut outer = span(2, 1, 70, 40);
    outer.depth = 1;
    a.add(&inner);
    a.add(&outer);
    a.add(&span(1, 0, 100, 70));
    let (_, calls, spans, _) = a.finish_all(&names, &[None, None], &EndCounters::default());
    assert_eq!(calls.rows.len(), 1);
    assert_eq!(calls.rows[0].phase_ns, [100, 70]);
    assert_eq!(calls.rows[0].phase_calls, [1, 2]);
    assert_eq!(spans.spans.len(), 3);
}

#[test]
fn skip_drops_early_spans_and_snapshots_name_paths() {
    let mut a = Aggregator::new();
    a.skip_before(1_000);
    a.add(&def(1, 0, 0));
    a.add(&def(2, 1, 1));
    let mut early = span(2, 1, 10, 0);
    early.start_ns = 999;
    let mut late = span(2, 1, 20, 0);
    late.start_ns = 1_000;
    a.add(&early);
    a.add(&late);
    assert_eq!(a.skipped(), 1);
    let snap = a.snapshot(&["w".into(), "e".into()]);
    assert_eq!(snap.len(), 1);
    assert_eq!(
        (snap[0].path.as_str(), snap[0].count, snap[0].total_ns),
        ("w/e", 1, 20)
    );
}

#[test]
fn span_without_definition_is_an_orphan_not_a_root() {
    let mut a = Aggregator::new();
    a.add(&span(99, 0, 10, 0));
    let t = a.finish(&["x".into()], &[None], &EndCounters::default());
    assert!(t.roots.is_empty());
    assert_eq!(t.orphan_spans, 1);
}

#[test]
fn end_counters_land_on_their_nodes() {
    let mut a = Aggregator::new();
    a.add(&def(1, 0, 0));
    a.add(&def(2, 1, 1));
    let mut end = EndCounters::default();
    end.lost.insert(2, 7);
    end.abandoned.insert(2, 1);
    end.open.insert(1, 1);
    let t = a.finish(&["r".into(), "c".into()], &[None, None], &end);
    let c = t.find(&["r", "c"]).unwrap();
    assert_eq!((c.lost, c.abandoned, c.count), (7, 1, 0));
    assert_eq!(t.roots[0].open, 1);
}

#[test]
fn units_sum_the_captured_argument_or_count_calls() {
    let names: Vec<String> = vec!["copy".into(), "multi".into(), "single".into()];
    let mut a = Aggregator::new();
    a.count_units(vec![
        None,
        Some(UnitSpec {
            name: "rows".into(),
            from_arg: true,
        }),
        Some(UnitSpec {
            name: "rows".into(),
            from_arg: false,
        }),
    ]);
    a.add(&def(1, 0, 0));
    a.add(&def(2, 1, 1));
    a.add(&def(3, 1, 2));
    for (node, phase, arg) in [(2, 1, 1000), (2, 1, 24), (3, 2, 0), (3, 2, 0), (3, 2, 0)] {
        a.add(&Event {
            arg,
            ..span(node, phase, 10, 0)
        });
    }
    a.add(&span(1, 0, 100, 50));
    let t = a.finish(&names, &[None, None, None], &EndCounters::default());
    let units = |p: &[&str]| t.find(p).unwrap().units.clone().map(|u| (u.name, u.total));
    assert_eq!(units(&["copy"]), None);
    assert_eq!(units(&["copy", "multi"]), Some(("rows".into(), 1024)));
    assert_eq!(units(&["copy", "single"]), Some(("rows".into(), 3)));
}

/// What BPF's `aggregate_call` (probes/ebpf) sums for these spans, the arithmetic
/// mirrored here: per node a summary, per (node, bucket, raw/corrected) a count.
type Folded = (Vec<(u64, NodeSummary)>, Vec<(HistKey, u64)>);

fn kernel_fold(spans: &[Event], own: &[u64]) -> Folded {
    let mut nodes: HashMap<u64, NodeSummary> = HashMap::new();
    let mut buckets: HashMap<HistKey, u64> = HashMap::new();
    for ev in spans {
        let removed = (own[ev.phase as usize] + ev.desc_probe_ns).min(ev.dur_ns);
        let s = nodes.entry(ev.node).or_default();
        s.count += 1;
        s.total_ns += ev.dur_ns;
        s.self_ns += ev.dur_ns.saturating_sub(ev.child_ns);
        s.off_ns += ev.off_ns;
        s.arg_sum = s.arg_sum.saturating_add(ev.arg);
        s.corrected_total_ns += ev.dur_ns - removed;
        s.probe_ns += removed;
        s.probe_hits += ev.desc_hits as u64 + 2;
        for (value, corrected) in [(ev.dur_ns, 0), (ev.dur_ns - removed, 1)] {
            let key = HistKey {
                node: ev.node,
                bucket: wprof_common::hist_bucket(value),
                corrected,
            };
            *buckets.entry(key).or_default() += 1;
        }
    }
    (nodes.into_iter().collect(), buckets.into_iter().collect())
}

/// The same calls aggregated per event and in the kernel give the same tree: counts,
/// totals, self, off-CPU, units and corrected figures exactly, percentiles within 1%.
#[test]
fn kernel_summaries_build_the_tree_per_event_aggregation_builds() {
    let names: Vec<String> = vec!["w".into(), "a".into(), "b".into()];
    let roles = [None, None, None];
    let own = vec![300, 200, 100];
    let mut spans = Vec::new();
    let mut x = 12_345u64;
    for i in 0..5_000u64 {
        // A spread of durations over four decades, from a small LCG.
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let a = 500 + (x >> 40) % 2_000_000;
        let b = 50 + (x >> 20) % 5_000;
        let child = |node, phase, dur| Event {
            off_ns: dur / 10,
            arg: i,
            desc_probe_ns: 0,
            desc_hits: 0,
            ..span(node, phase, dur, 0)
        };
        spans.push(child(2, 1, a));
        spans.push(child(3, 2, b));
        spans.push(Event {
            off_ns: (a + b) / 10,
            desc_probe_ns: 2 * 1_000,
            desc_hits: 4,
            ..span(1, 0, a + b + 1_000 + i % 7, a + b)
        });
    }
    spans.push(span(2, 1, 10, 0)); // shorter than its probe time: corrected to 0
    let units = vec![
        None,
        Some(UnitSpec {
            name: "rows".into(),
            from_arg: true,
        }),
        Some(UnitSpec {
            name: "calls".into(),
            from_arg: false,
        }),
    ];
    let setup = || {
        let mut a = Aggregator::new();
        a.count_units(units.clone());
        a.correct_probe_time(own.clone());
        a.track_off_cpu();
        a.add(&def(1, 0, 0));
        a.add(&def(2, 1, 1));
        a.add(&def(3, 1, 2));
        a
    };
    let mut per_event = setup();
    spans.iter().for_each(|e| per_event.add(e));
    let mut in_kernel = setup();
    let (nodes, buckets) = kernel_fold(&spans, &own);
    in_kernel.add_kernel_summaries(&nodes, &buckets);
    let end = EndCounters::default();
    let want = per_event.finish(&names, &roles, &end);
    let got = in_kernel.finish(&names, &roles, &end);
    for path in [&["w"][..], &["w", "a"], &["w", "b"]] {
        let (w, g) = (want.find(path).unwrap(), got.find(path).unwrap());
        assert_eq!(
            (
                g.count,
                g.total_ns,
                g.self_ns,
                g.off_cpu_ns,
                g.units.clone()
            ),
            (
                w.count,
                w.total_ns,
                w.self_ns,
                w.off_cpu_ns,
                w.units.clone()
            ),
            "{path:?}"
        );
        assert_eq!(g.hist.len(), w.hist.len());
        let (wc, gc) = (w.corrected.as_ref().unwrap(), g.corrected.as_ref().unwrap());
        assert_eq!(
            (gc.total_ns, gc.self_ns, gc.probe_ns, gc.probe_hits),
            (wc.total_ns, wc.self_ns, wc.probe_ns, wc.probe_hits),
            "{path:?}"
        );
        assert_eq!(gc.hist.len(), wc.hist.len());
        for q in [0.5, 0.9, 0.99, 1.0] {
            for (what, w, g) in [("raw", &w.hist, &g.hist), ("corrected", &wc.hist, &gc.hist)] {
                let (w, g) = (w.value_at_quantile(q) as f64, g.value_at_quantile(q) as f64);
                assert!(
                    (g - w).abs() <= w * 0.01,
                    "{path:?} {what} q{q}: {g} vs {w}"
                );
            }
        }
    }
}

#[test]
fn kernel_summaries_without_correction_leave_corrected_out() {
    let mut a = Aggregator::new();
    a.add(&def(1, 0, 0));
    let spans = [span(1, 0, 1_000, 0), span(1, 0, 3_000, 0)];
    let (nodes, buckets) = kernel_fold(&spans, &[0]);
    a.add_kernel_summaries(&nodes, &buckets);
    // A span that came before the mode was switched on adds up with the summaries.
    a.add(&span(1, 0, 2_000, 0));
    let t = a.finish(&["w".into()], &[None], &EndCounters::default());
    let w = &t.roots[0];
    assert_eq!((w.count, w.total_ns, w.hist.len()), (3, 6_000, 3));
    assert!(w.corrected.is_none());
    let p50 = w.hist.value_at_quantile(0.5) as f64;
    assert!((p50 - 2_000.0).abs() <= 20.0, "{p50}");
}

#[test]
fn per_pid_trees_hold_only_what_each_process_reached() {
    let names: Vec<String> = vec!["r".into(), "a".into(), "b".into()];
    let mut a = Aggregator::new();
    a.track_per_pid();
    a.add(&def(1, 0, 0));
    a.add(&def(2, 1, 1));
    a.add(&def(3, 1, 2));
    let at = |pid: u32, node: u64, phase: u32, dur: u64| Event {
        pid,
        ..span(node, phase, dur, 0)
    };
    a.add(&at(10, 2, 1, 5));
    a.add(&at(10, 1, 0, 20));
    a.add(&at(20, 3, 2, 7));
    a.add(&at(20, 3, 2, 7));
    a.add(&at(20, 1, 0, 30));
    a.add(&Event {
        kind: EventKind::Fork as u32,
        pid: 20,
        tid: 1,
        ..Event::default()
    });
    assert_eq!(a.take_forks(), vec![(20, 1)]);
    assert!(a.take_forks().is_empty());
    let mut pids = a.pids();
    pids.sort();
    assert_eq!(pids, vec![10, 20]);
    let roles = [None, None, None];
    let (merged, _, _, procs) = a.finish_all(&names, &roles, &EndCounters::default());
    assert_eq!(merged.find(&["r"]).unwrap().count, 2);
    assert_eq!(procs.iter().map(|p| p.pid).collect::<Vec<_>>(), [10, 20]);
    let (t10, t20) = (&procs[0].tree, &procs[1].tree);
    assert_eq!(t10.find(&["r", "a"]).unwrap().count, 1);
    assert!(t10.find(&["r", "b"]).is_none(), "pid 10 never reached b");
    assert_eq!(t20.find(&["r", "b"]).unwrap().count, 2);
    assert_eq!(t20.find(&["r"]).unwrap().total_ns, 30);
    assert!(t20.find(&["r", "a"]).is_none());
}

#[test]
fn phase_edges_count_the_kernels_calls_too() {
    // xlog (phase 1) under exec (phase 0) and, once, as a root of its own (node 3).
    let mut a = Aggregator::new();
    a.add(&def(1, 0, 0));
    a.add(&def(2, 1, 1));
    a.add(&def(3, 0, 1));
    // Nothing read yet (an in-kernel run): the edges are there, with no calls.
    let bare = a.phase_edges();
    assert_eq!(bare.get(&(Some(0), 1)), Some(&0));
    assert_eq!(bare.get(&(None, 1)), Some(&0));
    // With the kernel's counts, xlog is a root in 1 call of 1,001.
    let counts: std::collections::HashMap<u64, u64> = [(1, 500), (2, 1_000), (3, 1)].into();
    let edges = a.phase_edges_with(&counts);
    assert_eq!(edges.get(&(Some(0), 1)), Some(&1_000));
    assert_eq!(edges.get(&(None, 1)), Some(&1));
    assert_eq!(edges.get(&(None, 0)), Some(&500));
}
