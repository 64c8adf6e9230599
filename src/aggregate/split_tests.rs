//! Tests of root-call splitting: which root calls go to which half, and that each half's
//! figures are those of its own calls.

use wprof_common::{Event, EventKind};

use super::phase_id;
use crate::aggregate::{Aggregator, EndCounters};
use crate::model::PhaseTree;

/// Phases: w (root) > a > b > p (the split phase), and w > c; p may also sit under c.
const NAMES: [&str; 5] = ["w", "a", "b", "p", "c"];
const P: u32 = 3;

fn names() -> Vec<String> {
    NAMES.iter().map(|s| s.to_string()).collect()
}

fn def(node: u64, parent: u64, phase: u32) -> Event {
    Event {
        kind: EventKind::NodeDef as u32,
        node,
        parent,
        phase,
        ..Event::default()
    }
}

/// A span of `node` (phase `phase`, depth `depth`) on thread `tid`, from `start` for `dur` ns.
fn span(tid: u32, node: u64, phase: u32, depth: u32, start: u64, dur: u64) -> Event {
    Event {
        kind: EventKind::Span as u32,
        pid: 7,
        tid,
        node,
        phase,
        depth,
        start_ns: start,
        dur_ns: dur,
        ..Event::default()
    }
}

/// Node ids: 1 w, 2 w>a, 3 w>a>b, 4 w>a>b>p, 5 w>c, 6 w>c>p, 7 w>a>b>p>p (recursion).
fn aggregator() -> Aggregator {
    let mut a = Aggregator::new();
    for (node, parent, phase) in [
        (1, 0, 0),
        (2, 1, 1),
        (3, 2, 2),
        (4, 3, P),
        (5, 1, 4),
        (6, 5, P),
        (7, 4, P),
    ] {
        a.add(&def(node, parent, phase));
    }
    a.split_by(P);
    a
}

/// A root call at `t` on `tid` that goes w > a > b > p (p deep, at depth 3): 100 µs.
fn with_deep_p(a: &mut Aggregator, tid: u32, t: u64) {
    a.add(&span(tid, 4, P, 3, t + 30, 60));
    a.add(&span(tid, 3, 2, 2, t + 20, 75));
    a.add(&span(tid, 2, 1, 1, t + 10, 85));
    a.add(&span(tid, 1, 0, 0, t, 100));
}

/// A root call at `t` on `tid` that goes w > a > b and w > c, no p: 40 ns.
fn without_p(a: &mut Aggregator, tid: u32, t: u64) {
    a.add(&span(tid, 3, 2, 2, t + 2, 5));
    a.add(&span(tid, 2, 1, 1, t + 1, 10));
    a.add(&span(tid, 5, 4, 1, t + 20, 10));
    a.add(&span(tid, 1, 0, 0, t, 40));
}

fn halves(mut a: Aggregator) -> (PhaseTree, crate::model::SplitTrees) {
    let names = names();
    let roles = vec![None; names.len()];
    let split = a.finish_split(&names, &roles).expect("split");
    let merged = a.finish(&names, &roles, &EndCounters::default());
    (merged, split)
}

fn count(t: &PhaseTree, path: &[&str]) -> u64 {
    t.find(path).map_or(0, |n| n.count)
}

#[test]
fn root_calls_with_the_phase_deep_inside_go_apart_from_the_others() {
    let mut a = aggregator();
    for i in 0..3 {
        with_deep_p(&mut a, 1, 1_000 * i);
    }
    for i in 3..10 {
        without_p(&mut a, 1, 1_000 * i);
    }
    let (merged, s) = halves(a);
    assert_eq!(s.phase, "p");
    assert_eq!(count(&merged, &["w"]), 10);
    let (w, wo) = (&s.with, &s.without);
    assert_eq!(count(w, &["w"]), 3);
    assert_eq!(count(wo, &["w"]), 7);
    assert_eq!(count(w, &["w", "a", "b", "p"]), 3);
    assert!(wo.find(&["w", "a", "b", "p"]).is_none(), "no p without p");
    assert!(
        w.find(&["w", "c"]).is_none(),
        "c only came in root calls without p"
    );
    assert_eq!(count(wo, &["w", "c"]), 7);
    // Each half's figures are its own calls': means, totals, percentiles.
    let root = |t: &PhaseTree| t.find(&["w"]).unwrap().clone();
    assert_eq!((root(w).total_ns, root(w).mean_ns()), (300, 100.0));
    assert_eq!((root(wo).total_ns, root(wo).mean_ns()), (280, 40.0));
    assert_eq!(root(w).hist.value_at_quantile(0.99), 100);
    assert_eq!(root(wo).hist.max(), 40);
    assert_eq!(w.events + wo.events, 3 * 4 + 7 * 4);
    assert_eq!((s.unattributed_spans, s.oversized_roots), (0, 0));
    // The halves add up to the merged tree, node by node.
    let a_total = |t: &PhaseTree| t.find(&["w", "a"]).map_or(0, |n| n.total_ns);
    assert_eq!(a_total(w) + a_total(wo), a_total(&merged));
}

#[test]
fn a_root_call_of_the_phase_itself_is_with_it_and_other_roots_are_without() {
    let mut a = Aggregator::new();
    a.add(&def(1, 0, 0)); // w
    a.add(&def(2, 0, P)); // p as a root of its own
    a.split_by(P);
    a.add(&span(1, 2, P, 0, 10, 5));
    a.add(&span(1, 1, 0, 0, 20, 5));
    let (_, s) = halves(a);
    assert_eq!(count(&s.with, &["p"]), 1);
    assert!(s.with.find(&["w"]).is_none());
    assert_eq!(count(&s.without, &["w"]), 1);
    assert!(s.without.find(&["p"]).is_none());
}

#[test]
fn recursion_of_the_phase_counts_its_root_call_once() {
    let mut a = aggregator();
    // w > a > b > p > p: the inner p's span first.
    a.add(&span(1, 7, P, 4, 40, 10));
    with_deep_p(&mut a, 1, 0);
    without_p(&mut a, 1, 1_000);
    let (_, s) = halves(a);
    assert_eq!(count(&s.with, &["w"]), 1);
    assert_eq!(count(&s.with, &["w", "a", "b", "p"]), 1);
    assert_eq!(count(&s.with, &["w", "a", "b", "p", "p"]), 1);
    assert_eq!(count(&s.without, &["w"]), 1);
}

#[test]
fn recursion_of_the_root_phase_stays_inside_its_root_call() {
    let mut a = Aggregator::new();
    a.add(&def(1, 0, 0)); // w
    a.add(&def(2, 1, 0)); // w > w
    a.add(&def(3, 2, P)); // w > w > p
    a.split_by(P);
    // An outer w with an inner w that calls p, then a w alone.
    a.add(&span(1, 3, P, 2, 12, 3));
    a.add(&span(1, 2, 0, 1, 10, 10));
    a.add(&span(1, 1, 0, 0, 0, 30));
    a.add(&span(1, 1, 0, 0, 100, 30));
    let (_, s) = halves(a);
    assert_eq!(count(&s.with, &["w"]), 1);
    assert_eq!(count(&s.with, &["w", "w", "p"]), 1);
    assert_eq!(count(&s.without, &["w"]), 1);
    assert!(s.without.find(&["w", "w"]).is_none());
}

#[test]
fn a_lost_root_span_never_lends_its_calls_to_the_next_root_call() {
    let mut a = aggregator();
    // A root call with p whose own span was lost: only its children arrive...
    a.add(&span(1, 4, P, 3, 30, 60));
    a.add(&span(1, 3, 2, 2, 20, 75));
    a.add(&span(1, 2, 1, 1, 10, 85));
    // ...then a root call without p: it must not be counted as one with p.
    without_p(&mut a, 1, 1_000);
    // A lost child span: its root call is classified by what came.
    a.add(&span(1, 3, 2, 2, 2_020, 75)); // p's span (w > a > b > p) never came
    a.add(&span(1, 2, 1, 1, 2_010, 85));
    a.add(&span(1, 1, 0, 0, 2_000, 100));
    with_deep_p(&mut a, 1, 3_000);
    let (merged, s) = halves(a);
    assert_eq!(count(&s.with, &["w"]), 1, "only the root call whose p came");
    assert_eq!(count(&s.without, &["w"]), 2);
    assert_eq!(
        s.unattributed_spans, 3,
        "the lost root call's three children"
    );
    assert_eq!(count(&s.without, &["w", "a"]), 2);
    // The merged tree keeps every span, as before.
    assert_eq!(count(&merged, &["w", "a", "b", "p"]), 2);
}

#[test]
fn threads_hold_their_own_root_calls() {
    let mut a = aggregator();
    // Thread 1 runs a root call with p while thread 2 runs one without, interleaved.
    a.add(&span(1, 4, P, 3, 30, 60));
    a.add(&span(2, 3, 2, 2, 2, 5));
    a.add(&span(1, 3, 2, 2, 20, 75));
    a.add(&span(2, 2, 1, 1, 1, 10));
    a.add(&span(2, 5, 4, 1, 20, 10));
    a.add(&span(1, 2, 1, 1, 10, 85));
    a.add(&span(2, 1, 0, 0, 0, 40));
    a.add(&span(1, 1, 0, 0, 0, 100));
    let (_, s) = halves(a);
    assert_eq!(count(&s.with, &["w"]), 1);
    assert_eq!(s.with.find(&["w"]).unwrap().total_ns, 100);
    assert_eq!(count(&s.without, &["w"]), 1);
    assert_eq!(count(&s.without, &["w", "c"]), 1);
}

#[test]
fn both_halves_keep_the_probe_corrected_figures_call_by_call() {
    let mut a = aggregator();
    a.correct_probe_time(vec![4, 3, 2, 1, 5]);
    let with_probes = |mut e: Event, hits: u32, probe: u64| {
        e.desc_hits = hits;
        e.desc_probe_ns = probe;
        e
    };
    // w > a > b > p with descendants' probe time on the way up; then w > c.
    a.add(&span(1, 4, P, 3, 30, 60));
    a.add(&with_probes(span(1, 3, 2, 2, 20, 75), 2, 10));
    a.add(&with_probes(span(1, 2, 1, 1, 10, 85), 4, 20));
    a.add(&with_probes(span(1, 1, 0, 0, 0, 100), 6, 30));
    a.add(&span(1, 5, 4, 1, 210, 10));
    a.add(&with_probes(span(1, 1, 0, 0, 200, 40), 2, 10));
    let (merged, s) = halves(a);
    let c = |t: &PhaseTree, p: &[&str]| t.find(p).unwrap().corrected.clone().unwrap();
    // w with p: 100 - own 4 - descendants' 30; w without: 40 - 4 - 10.
    let (w, wo) = (c(&s.with, &["w"]), c(&s.without, &["w"]));
    assert_eq!((w.total_ns, w.probe_ns, w.probe_hits), (66, 34, 8));
    assert_eq!((wo.total_ns, wo.probe_ns, wo.probe_hits), (26, 14, 4));
    assert_eq!(w.total_ns + wo.total_ns, c(&merged, &["w"]).total_ns);
    assert_eq!(c(&s.with, &["w", "a", "b", "p"]).total_ns, 60 - 1);
    assert_eq!(w.hist.max(), 66);
    // Corrected self time: the corrected total less the children's corrected totals.
    let a_total = c(&s.with, &["w", "a"]).total_ns;
    assert_eq!(w.self_ns, 66 - a_total);
}

#[test]
fn an_oversized_root_call_is_left_out_and_counted() {
    let mut a = aggregator();
    a.split_by_holding(P, 3);
    // Four calls inside one root call: more than the 3 held.
    a.add(&span(1, 4, P, 3, 30, 60));
    a.add(&span(1, 3, 2, 2, 20, 75));
    a.add(&span(1, 2, 1, 1, 10, 85));
    a.add(&span(1, 5, 4, 1, 96, 2));
    a.add(&span(1, 1, 0, 0, 0, 100));
    without_p(&mut a, 1, 1_000);
    let (merged, s) = halves(a);
    assert_eq!(s.oversized_roots, 1);
    assert_eq!(s.unattributed_spans, 5);
    assert!(s.with.roots.is_empty());
    assert_eq!(
        count(&s.without, &["w"]),
        1,
        "the next root call is split again"
    );
    assert_eq!(count(&merged, &["w"]), 2);
}

#[test]
fn calls_of_a_root_call_still_open_at_the_end_are_unattributed() {
    let mut a = aggregator();
    with_deep_p(&mut a, 1, 0);
    a.add(&span(1, 2, 1, 1, 1_010, 85)); // its root call never returned
    let (_, s) = halves(a);
    assert_eq!(count(&s.with, &["w"]), 1);
    assert_eq!(s.unattributed_spans, 1);
}

#[test]
fn spans_skipped_by_skip_do_not_reach_the_halves() {
    let mut a = aggregator();
    a.skip_before(500);
    // The root call starts before the cut, its children after: the root span is skipped.
    a.add(&span(1, 4, P, 3, 530, 60));
    a.add(&span(1, 1, 0, 0, 490, 200));
    without_p(&mut a, 1, 1_000);
    let (_, s) = halves(a);
    assert!(s.with.roots.is_empty());
    assert_eq!(count(&s.without, &["w"]), 1);
    assert_eq!(s.unattributed_spans, 1);
}

#[test]
fn an_unknown_phase_is_a_usage_error_naming_the_phases() {
    assert_eq!(phase_id(&names(), "p").unwrap(), P);
    let e = phase_id(&names(), "persist").unwrap_err();
    assert!(matches!(e, crate::error::WprofError::Usage(_)), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("'persist'") && text.contains("w, a, b, p, c"),
        "{text}"
    );
}

#[test]
fn without_split_by_there_are_no_halves() {
    let mut a = Aggregator::new();
    a.add(&def(1, 0, 0));
    a.add(&span(1, 1, 0, 0, 0, 5));
    assert!(a.finish_split(&names(), &vec![None; 5]).is_none());
}
