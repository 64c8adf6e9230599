//! Tests of `wprof merge` on the model's sample runs: exact sums, percentiles of the merged
//! histograms, provenance, what is left out, refusals.

use super::*;
use crate::model::json::{from_json, to_json};
use crate::model::testutil::{calibrated_run, per_pid_run, phases_named, sample_run, split_run};
use crate::model::{Aggregation, SampledShare, TreeNode};

fn input(file: &str, run: Run) -> Input {
    Input {
        file: file.into(),
        run,
    }
}

fn on_host(host: &str, mut run: Run) -> Run {
    run.provenance.host = host.into();
    run
}

fn merged(runs: Vec<(&str, Run)>) -> Merged {
    merge(runs.into_iter().map(|(f, r)| input(f, r)).collect()).expect("merge")
}

fn refusal(runs: Vec<(&str, Run)>) -> String {
    match merge(runs.into_iter().map(|(f, r)| input(f, r)).collect()) {
        Ok(_) => panic!("merged"),
        Err(e) => {
            assert_eq!(crate::error::exit_code(&e), 2, "a usage error: {e:#}");
            format!("{e:#}")
        }
    }
}

/// Every node with its path, depth first.
fn nodes(run: &Run) -> Vec<(String, &TreeNode)> {
    let mut out = Vec::new();
    for r in &run.tree.roots {
        r.walk(&mut Vec::new(), &mut |p, n| out.push((p.join("/"), n)));
    }
    out
}

#[test]
fn a_run_merged_with_itself_doubles_every_count_and_keeps_every_percentile() {
    let one = sample_run();
    let m = merged(vec![("a.json", one.clone()), ("b.json", one.clone())]);
    let two = &m.run;
    let (a, b) = (nodes(&one), nodes(two));
    assert_eq!(a.len(), b.len());
    for ((pa, x), (pb, y)) in a.iter().zip(&b) {
        assert_eq!(pa, pb);
        assert_eq!(y.count, 2 * x.count, "{pa}");
        assert_eq!(y.total_ns, 2 * x.total_ns, "{pa}");
        assert_eq!(y.self_ns, 2 * x.self_ns, "{pa}");
        assert_eq!(y.hist.len(), 2 * x.hist.len(), "{pa}");
        assert_eq!(
            (y.lost, y.abandoned, y.open),
            (2 * x.lost, 2 * x.abandoned, 2 * x.open)
        );
        for q in [0.5, 0.9, 0.99] {
            assert_eq!(
                y.hist.value_at_quantile(q),
                x.hist.value_at_quantile(q),
                "{pa} q{q}"
            );
        }
        assert_eq!(y.hist.max(), x.hist.max());
        assert_eq!(y.mean_ns(), x.mean_ns());
    }
    let (c1, c2) = (&one.counters, &two.counters);
    assert_eq!(
        (
            c2.events,
            c2.lost_spans,
            c2.unmatched_returns,
            c2.abandoned,
            c2.open_at_end
        ),
        (
            2 * c1.events,
            2 * c1.lost_spans,
            2 * c1.unmatched_returns,
            2 * c1.abandoned,
            2 * c1.open_at_end
        )
    );
    assert_eq!(two.tree.events, 2 * one.tree.events);
    for (x, y) in one.phases.iter().zip(&two.phases) {
        assert_eq!(
            (y.entries, y.returns),
            (2 * x.entries, 2 * x.returns),
            "{}",
            x.name
        );
        assert_eq!(y.unmatched_returns, 2 * x.unmatched_returns);
        assert_eq!(y.probe_pair_ns, x.probe_pair_ns, "same hosts, same cost");
        assert_eq!((&y.status, &y.return_mode), (&x.status, &x.return_mode));
        assert_eq!(y.symbols, x.symbols);
    }
    assert_eq!(two.probe_cost.hits, 2 * one.probe_cost.hits);
    assert_eq!(two.probe_cost.added_ns, 2.0 * one.probe_cost.added_ns);
    assert_eq!(two.probe_cost.model, one.probe_cost.model);
    let (cpu1, cpu2) = (one.cpu.as_ref().unwrap(), two.cpu.as_ref().unwrap());
    assert_eq!(cpu2.total(), 2 * cpu1.total());
    assert_eq!((cpu2.records, cpu2.lost), (2 * cpu1.records, 2 * cpu1.lost));
    assert_eq!(cpu2.stacks.len(), cpu1.stacks.len());
    assert_eq!(two.calls.rows.len(), 2 * one.calls.rows.len());
    assert_eq!(two.calls.total_calls, 2 * one.calls.total_calls);
    assert!(two.spans.spans.is_empty());
    assert!(
        m.warnings
            .iter()
            .any(|w| w.contains("span logs") && w.contains("a.json, b.json")),
        "{:?}",
        m.warnings
    );
    let p = &two.provenance;
    assert_eq!(p.host, "ci-vm", "one host, named once");
    assert_eq!(p.sources.len(), 2);
    assert_eq!(p.sources[1].file, "b.json");
    assert_eq!(p.sources[0].provenance.host, "ci-vm");
    assert_eq!(p.sources[0].counters.lost_spans, 12);
    assert_eq!(p.profile_hash, one.provenance.profile_hash);
}

#[test]
fn hosts_are_listed_and_the_fleet_wall_time_is_the_longest_run() {
    let a = on_host("seg-a", per_pid_run());
    let mut b = on_host("seg-b", per_pid_run());
    b.provenance.started_unix -= 60;
    b.provenance.duration_s = 45.5;
    b.provenance.kernel = "6.12.0".into();
    let m = merged(vec![("a.json", a.clone()), ("b.json", b)]);
    let p = &m.run.provenance;
    assert_eq!(p.host, "2 hosts: seg-a, seg-b");
    assert_eq!(p.kernel, "6.8.0-45-generic, 6.12.0");
    assert_eq!(p.started_unix, a.provenance.started_unix - 60);
    assert_eq!(p.duration_s, 45.5);
    assert_eq!(p.pids, [4242, 4242]);
    assert_eq!(p.forked, [4711, 4711]);
    assert!(p.follow_forks);
    assert_eq!(p.objects, a.provenance.objects, "the same objects, once");
    assert_eq!(p.command, a.provenance.command);
    // Per-pid trees are kept, each with its host: the two pid 4242 stay apart.
    let procs: Vec<(Option<&str>, u32)> = (m.run.processes.iter())
        .map(|p| (p.host.as_deref(), p.pid))
        .collect();
    assert_eq!(
        procs,
        [
            (Some("seg-a"), 4242),
            (Some("seg-a"), 4711),
            (Some("seg-b"), 4242),
            (Some("seg-b"), 4711)
        ]
    );
    assert_eq!(
        m.run.processes[3].tree.roots[0].count,
        a.processes[1].tree.roots[0].count
    );
    let text = crate::render::render_tree(&m.run, &Default::default());
    assert!(
        text.contains("── seg-b pid 4711: postgres: app shop [local] idle"),
        "{text}"
    );
    assert!(
        text.starts_with("merged run of 2 hosts: seg-a, seg-b (2 runs;"),
        "{text}"
    );
    // Units add.
    let units = |r: &Run| r.tree.roots[0].children[0].units.as_ref().map(|u| u.total);
    assert_eq!(units(&m.run), Some(2000));
}

#[test]
fn the_merged_histogram_gives_the_fleets_percentiles() {
    let a = sample_run();
    let mut b = on_host("slow", sample_run());
    // Host b: 1000 writes of exactly 1 ms, with no child.
    let root = &mut b.tree.roots[0];
    root.children.clear();
    root.hist = crate::model::new_histogram();
    root.hist.record_n(1_000_000, 1000).unwrap();
    (root.count, root.total_ns, root.self_ns) = (1000, 1_000_000_000, 1_000_000_000);
    let m = merged(vec![("a.json", a.clone()), ("b.json", b.clone())]);
    let w = &m.run.tree.roots[0];
    let mut all = a.tree.roots[0].hist.clone();
    all.add(&b.tree.roots[0].hist).unwrap();
    assert_eq!(w.count, 2000);
    assert_eq!(w.total_ns, a.tree.roots[0].total_ns + 1_000_000_000);
    assert_eq!(w.self_ns, a.tree.roots[0].self_ns + 1_000_000_000);
    assert!(w.hist == all, "bucket by bucket");
    // Half the calls are a's (all under 1 ms), half are 1 ms: the median is a's slowest.
    assert_eq!(w.hist.value_at_quantile(0.5), a.tree.roots[0].hist.max());
    assert_eq!(
        w.hist.value_at_quantile(0.99),
        w.hist.highest_equivalent(1_000_000)
    );
    // a's children are kept as they are: b has none.
    let wal = &w.children.iter().find(|c| c.name == "wal_append").unwrap();
    assert_eq!(wal.count, 1000);
    assert_eq!(
        m.run.tree.roots[0].name, "write_record",
        "largest total first"
    );
}

#[test]
fn corrected_times_add_and_each_calibration_stays_with_its_host() {
    let a = on_host("a", calibrated_run());
    let b = on_host("b", calibrated_run());
    let m = merged(vec![("a.json", a.clone()), ("b.json", b)]);
    let (x, y) = (&a.tree.roots[0], &m.run.tree.roots[0]);
    let (cx, cy) = (x.corrected.as_ref().unwrap(), y.corrected.as_ref().unwrap());
    assert_eq!(cy.total_ns, 2 * cx.total_ns);
    assert_eq!(cy.self_ns, 2 * cx.self_ns);
    assert_eq!(
        (cy.probe_ns, cy.probe_hits, cy.error_ns),
        (2 * cx.probe_ns, 2 * cx.probe_hits, 2 * cx.error_ns)
    );
    assert_eq!(
        cy.hist.value_at_quantile(0.99),
        cx.hist.value_at_quantile(0.99)
    );
    assert!(m.run.is_corrected());
    assert!(
        m.run.probe_cost.calibration.is_none(),
        "no one calibration for two hosts"
    );
    assert!(
        m.run.probe_cost.model.contains("provenance.sources"),
        "{}",
        m.run.probe_cost.model
    );
    for s in &m.run.provenance.sources {
        assert_eq!(s.probe_cost.calibration, a.probe_cost.calibration);
    }
}

#[test]
fn corrected_and_raw_runs_merge_raw_and_say_so() {
    let m = merged(vec![
        ("cal.json", calibrated_run()),
        ("raw.json", sample_run()),
    ]);
    assert!(!m.run.is_corrected());
    assert!(
        m.warnings
            .iter()
            .any(|w| w.contains("only cal.json carry times corrected")),
        "{:?}",
        m.warnings
    );
    assert_eq!(
        m.run.tree.roots[0].total_ns,
        2 * sample_run().tree.roots[0].total_ns
    );
}

#[test]
fn merging_merged_runs_equals_merging_the_runs_at_once() {
    let (a, b, c) = (
        on_host("a", per_pid_run()),
        on_host("b", per_pid_run()),
        on_host("c", per_pid_run()),
    );
    let ab = merged(vec![("a.json", a.clone()), ("b.json", b.clone())]).run;
    let nested = merged(vec![("ab.json", ab), ("c.json", c.clone())]).run;
    let flat = merged(vec![("a.json", a), ("b.json", b), ("c.json", c)]).run;
    assert_eq!(to_json(&nested), to_json(&flat));
    assert_eq!(flat.provenance.host, "3 hosts: a, b, c");
    let files: Vec<&str> = flat
        .provenance
        .sources
        .iter()
        .map(|s| s.file.as_str())
        .collect();
    assert_eq!(files, ["a.json", "b.json", "c.json"]);
}

#[test]
fn a_merged_run_round_trips_and_validates_against_the_published_schema() {
    let m = merged(vec![
        ("a.json", on_host("a", per_pid_run())),
        ("b.json", on_host("b", calibrated_run())),
    ]);
    let v = to_json(&m.run);
    assert_eq!(v["provenance"]["sources"][1]["provenance"]["host"], "b");
    assert_eq!(v["provenance"]["sources"][1]["file"], "b.json");
    assert_eq!(v["processes"][0]["host"], "a");
    let back = from_json(&v.to_string()).expect("read back");
    assert_eq!(to_json(&back), v);
    let schema = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/json-schema-v1.json");
    if let Err(e) = crate::testing::validate_json_schema(schema, &v.to_string()) {
        panic!("docs/json-schema-v1.json rejects a merged run:\n{e}");
    }
    // A run of one host says nothing of sources or hosts.
    let one = to_json(&sample_run());
    assert!(one["provenance"].get("sources").is_none());
}

#[test]
fn split_trees_add_when_split_alike_and_are_left_out_otherwise() {
    let s = split_run();
    let m = merged(vec![("a.json", s.clone()), ("b.json", s.clone())]);
    let (x, y) = (s.split.as_ref().unwrap(), m.run.split.as_ref().unwrap());
    assert_eq!(y.with.roots[0].count, 2 * x.with.roots[0].count);
    assert_eq!(y.without.roots[0].count, 2 * x.without.roots[0].count);
    assert_eq!(y.unattributed_spans, 2 * x.unattributed_spans);
    let m = merged(vec![("a.json", s), ("b.json", sample_run())]);
    assert!(m.run.split.is_none());
    assert!(
        m.warnings
            .iter()
            .any(|w| w.contains("a.json by persist_block, b.json not split")),
        "{:?}",
        m.warnings
    );
}

#[test]
fn profiles_only_some_runs_have_are_left_out() {
    let mut b = sample_run();
    b.cpu = None;
    b.off_cpu = Some(crate::model::StackProfile {
        unit: "ns".into(),
        ..Default::default()
    });
    b.tree.roots[0].off_cpu_ns = Some(5);
    let m = merged(vec![("a.json", sample_run()), ("b.json", b)]);
    assert!(m.run.cpu.is_none() && m.run.off_cpu.is_none());
    assert_eq!(m.run.tree.roots[0].off_cpu_ns, None);
    let said = m.warnings.join("\n");
    assert!(
        said.contains("CPU samples (--cpu-sample) only in a.json"),
        "{said}"
    );
    assert!(
        said.contains("off-CPU time (--off-cpu) only in b.json"),
        "{said}"
    );
    assert!(said.contains("only 1 of the 2 runs tracked it"), "{said}");
    let mut fast = sample_run();
    fast.cpu.as_mut().unwrap().frequency_hz = Some(999);
    let m = merged(vec![("a.json", sample_run()), ("b.json", fast)]);
    assert!(m.run.cpu.is_none());
    assert!(m.warnings.join("\n").contains("different weights"));
}

#[test]
fn a_phase_sampled_on_one_host_and_probed_on_another_merges_as_an_estimate() {
    let mut b = sample_run();
    let encode = (b.tree.roots[0].children.iter_mut())
        .find(|c| c.name == "encode_record")
        .unwrap();
    let est = encode.total_ns;
    *encode = TreeNode::empty(6, "encode_record".into(), None);
    (encode.total_ns, encode.self_ns) = (est, est);
    encode.sampled = Some(SampledShare::new(20, 100));
    let m = merged(vec![("a.json", sample_run()), ("b.json", b)]);
    let e = m.run.tree.find(&["write_record", "encode_record"]).unwrap();
    assert_eq!((e.count, e.hist.len()), (0, 0));
    assert_eq!(e.total_ns, 2 * est);
    assert_eq!(
        e.sampled.map(|s| (s.samples, s.parent_samples)),
        Some((20, 100))
    );
    assert!(m
        .warnings
        .join("\n")
        .contains("write_record/encode_record probed in some runs"));
}

#[test]
fn runs_that_do_not_measure_the_same_thing_are_refused() {
    let e = refusal(vec![("a.json", sample_run())]);
    assert!(e.contains("at least two runs, got 1: a.json"), "{e}");
    let mut pax = sample_run();
    pax.provenance.profile_name = "pax".into();
    let e = refusal(vec![("a.json", sample_run()), ("b.json", pax)]);
    assert!(e.contains("cannot merge a.json and b.json: a.json is a run of profile 'kv' and b.json of profile 'pax'"), "{e}");
    let mut other = sample_run();
    other.phases = phases_named(&["write_record", "persist_block", "fsync"]);
    let e = refusal(vec![("a.json", sample_run()), ("b.json", other)]);
    assert!(e.contains("different phases"), "{e}");
    assert!(e.contains("only in b.json: fsync"), "{e}");
    assert!(e.contains("only in a.json: flush_block, wal_append"), "{e}");
    let mut kernel = sample_run();
    kernel.provenance.aggregation = Aggregation::Kernel;
    let e = refusal(vec![
        ("a.json", sample_run()),
        ("b.json", sample_run()),
        ("k.json", kernel),
    ]);
    assert!(e.contains("cannot merge a.json and k.json: a.json was aggregated per event and k.json in the kernel"), "{e}");
}

#[test]
fn different_profile_texts_with_the_same_phases_merge_with_a_warning() {
    let mut b = sample_run();
    b.provenance.profile_hash = "0badc0de".into();
    let m = merged(vec![("a.json", sample_run()), ("b.json", b)]);
    assert_eq!(m.run.provenance.profile_hash, "3f9a1c2e, 0badc0de");
    assert!(
        m.warnings.join("\n").contains("hashes 3f9a1c2e, 0badc0de"),
        "{:?}",
        m.warnings
    );
}

#[test]
fn runs_aggregated_in_the_kernel_merge_their_trees() {
    let kernel = || {
        let mut r = sample_run();
        r.provenance.aggregation = Aggregation::Kernel;
        r.calls = Default::default();
        r.spans = Default::default();
        r
    };
    let m = merged(vec![("a.json", kernel()), ("b.json", kernel())]);
    assert_eq!(m.run.provenance.aggregation, Aggregation::Kernel);
    assert_eq!(m.run.tree.roots[0].count, 2000);
    assert!(m.run.calls.rows.is_empty() && m.run.calls.total_calls == 0);
    assert!(
        !m.warnings.iter().any(|w| w.contains("span logs")),
        "{:?}",
        m.warnings
    );
}
