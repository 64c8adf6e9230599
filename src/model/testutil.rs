//! Test inputs: hand-built runs with known figures, for the tests of the model and of every
//! output format.
//!
//! The sample is a key-value store's write path, 1000 `write_record` calls:
//! ```text
//! write_record (n=1000)
//! ├─ wal_append (n=1000) → wal_sync (n=1000, C function, uretprobe)
//! ├─ persist_block (n=250) → compress_block, flush_block (12 lost, 3 abandoned)
//! └─ encode_record (n=1000, ~5.9 µs: its probes are a fifth of it, so it is flagged)
//! vacuum_page (n=3)
//! ```
//! plus an unresolved `checkpoint` phase. Durations follow fixed patterns, so every figure is
//! reproducible.

use crate::model::{Counters, ObjectInfo, PhaseInfo, ProbeCost, Provenance, Run};
use crate::model::{PhaseTree, TreeNode};

/// `n` durations `base + k·spread/100` with k cycling over 0..=100 in a scrambled order.
fn durations(n: usize, base: u64, spread: u64) -> Vec<u64> {
    (0..n)
        .map(|i| base + (i as u64 * 37 % 101) * spread / 100)
        .collect()
}

fn node(phase: u32, name: &str, durs: &[u64], children: Vec<TreeNode>) -> TreeNode {
    let mut t = TreeNode::empty(phase, name.to_string(), None);
    for &d in durs {
        t.count += 1;
        t.total_ns += d;
        t.hist.saturating_record(d.max(1));
    }
    let child_total: u64 = children.iter().map(|c| c.total_ns).sum();
    assert!(
        child_total <= t.total_ns,
        "{name}: children longer than the node"
    );
    t.self_ns = t.total_ns - child_total;
    t.children = children;
    t
}

fn add(a: &[u64], b: &[u64]) -> Vec<u64> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

/// Phase ids of the sample.
const NAMES: [&str; 9] = [
    "write_record",
    "persist_block",
    "flush_block",
    "wal_append",
    "wal_sync",
    "compress_block",
    "encode_record",
    "vacuum_page",
    "checkpoint",
];

/// Phases with these names, ids in order, nothing else known.
pub fn phases_named(names: &[&str]) -> Vec<PhaseInfo> {
    (names.iter().enumerate())
        .map(|(i, n)| PhaseInfo {
            id: i as u32,
            name: n.to_string(),
            ..Default::default()
        })
        .collect()
}

/// The durations of the sample's calls, ns, by phase: 1000 writes, every 4th persisting.
struct SampleCalls {
    wal_sync: Vec<u64>,
    wal_append: Vec<u64>,
    compress: Vec<u64>,
    flush: Vec<u64>,
    persist: Vec<u64>,
    encode: Vec<u64>,
    /// `write_record`'s own time.
    own: Vec<u64>,
}

impl SampleCalls {
    fn new() -> SampleCalls {
        let wal_sync = durations(1000, 140_000, 20_000);
        let compress = durations(250, 380_000, 40_000);
        let flush = durations(250, 170_000, 20_000);
        SampleCalls {
            wal_append: add(&wal_sync, &durations(1000, 2_500, 700)),
            persist: add(&add(&compress, &flush), &durations(250, 18_000, 4_000)),
            encode: durations(1000, 5_000, 1_800),
            own: durations(1000, 2_600, 800),
            wal_sync,
            compress,
            flush,
        }
    }
}

/// The sample tree.
pub fn sample_tree() -> PhaseTree {
    let SampleCalls {
        wal_sync,
        wal_append,
        compress,
        flush,
        persist,
        encode,
        own,
    } = SampleCalls::new();
    let write: Vec<u64> = (0..1000)
        .map(|i| {
            let p = if i % 4 == 0 { persist[i / 4] } else { 0 };
            wal_append[i] + encode[i] + own[i] + p
        })
        .collect();

    let mut flush_block = node(2, NAMES[2], &flush, vec![]);
    flush_block.lost = 12;
    flush_block.abandoned = 3;
    let persist_block = node(
        1,
        NAMES[1],
        &persist,
        vec![node(5, NAMES[5], &compress, vec![]), flush_block],
    );
    let wal = node(
        3,
        NAMES[3],
        &wal_append,
        vec![node(4, NAMES[4], &wal_sync, vec![])],
    );
    let mut root = node(
        0,
        NAMES[0],
        &write,
        vec![wal, persist_block, node(6, NAMES[6], &encode, vec![])],
    );
    root.role = Some("insert".into());
    root.open = 1;
    let vacuum = node(7, NAMES[7], &[2_000_000, 2_500_000, 40_000_000], vec![]);
    let events = 8 + [1000u64, 1000, 1000, 250, 250, 250, 1000, 3]
        .iter()
        .sum::<u64>();
    PhaseTree {
        roots: vec![root, vacuum],
        orphan_spans: 0,
        events,
    }
}

/// The sample run: the tree plus the phases table, counters and provenance.
pub fn sample_run() -> Run {
    let tree = sample_tree();
    let mut counts = [0u64; 9];
    let mut extra = [(0u64, 0u64, 0u64); 9];
    for r in &tree.roots {
        r.walk(&mut Vec::new(), &mut |_, n| {
            counts[n.phase as usize] += n.count;
            extra[n.phase as usize] = (n.lost, n.abandoned, n.open);
        });
    }
    let lib = "/usr/lib/x86_64-linux-gnu/libkv.so.1";
    let sym = |id: usize| match id {
        0 => "_ZN2kv5Store11WriteRecordERKNS_6RecordE",
        1 => "_ZN2kv11BlockWriter7PersistEv",
        2 => "_ZN2kv11BlockWriter5FlushEv",
        3 => "_ZN2kv3Wal6AppendEPKvm",
        4 => "kv_wal_sync",
        5 => "_ZN2kv5codec10CompressorINS0_3Lz4EE8compressERKSt6vectorIhSaIhEE",
        6 => "_ZN2kv6Record6EncodeEv",
        _ => "vacuum_page",
    };
    let mut phases = Vec::new();
    let (mut hits, mut added) = (0u64, 0.0);
    for (id, name) in NAMES.iter().enumerate() {
        let (lost, abandoned, open) = extra[id];
        let c_function = id == 4 || id == 7;
        let pair = match id {
            2 => 6_400.0,
            6 => 2_500.0,
            8 => 0.0,
            _ => 1_300.0,
        };
        let entries = counts[id] + lost + abandoned + open;
        let returns = counts[id] + lost + if id == 4 { 2 } else { 0 };
        hits += entries + returns;
        added += (entries + returns) as f64 * pair / 2.0;
        phases.push(if id == 8 {
            PhaseInfo {
                id: id as u32,
                name: name.to_string(),
                object: lib.into(),
                return_mode: "-".into(),
                status: "unresolved: no symbol 'kv::Store::Checkpoint' in libkv.so.1".into(),
                ..PhaseInfo::default()
            }
        } else {
            PhaseInfo {
                id: id as u32,
                name: name.to_string(),
                role: (id == 0).then(|| "insert".to_string()),
                object: if id == 7 {
                    "/usr/bin/kvd".into()
                } else {
                    lib.into()
                },
                symbols: if id == 3 {
                    vec![sym(id).into(), "_ZN2kv3Wal6AppendEPKvm.cold".into()]
                } else {
                    vec![sym(id).into()]
                },
                return_mode: if c_function { "uretprobe" } else { "ret-sites" }.into(),
                entry_cost: if id == 6 { "single-step" } else { "nop" }.into(),
                // vacuum_page starts with endbr64: probed at +4.
                entry_offset: if id == 7 { 4 } else { 0 },
                exit_sites: if c_function { 0 } else { 2 + id as u32 % 3 },
                status: "attached".into(),
                entries,
                returns,
                unmatched_returns: if id == 4 { 2 } else { 0 },
                overflow: 0,
                outside_under: 0,
                probe_pair_ns: pair,
                probe_own_ns: 0.0,
            }
        });
    }
    let counters = Counters {
        events: tree.events,
        lost_spans: 12,
        lost_node_defs: 0,
        orphan_spans: 0,
        unmatched_returns: 2,
        abandoned: 3,
        open_at_end: 1,
        overflow: 0,
        no_stack: 0,
        skipped_spans: 0,
        unwind: Default::default(),
    };
    Run {
        provenance: Provenance {
            probes_live_fraction: None,
            live_windows: Vec::new(),
            wprof_version: "0.1.0".into(),
            host: "ci-vm".into(),
            kernel: "6.8.0-45-generic".into(),
            started_unix: 1_790_000_000,
            duration_s: 30.021,
            pids: vec![4242],
            follow_forks: false,
            forked: Vec::new(),
            command: Some(vec!["kvd".into(), "--bench".into()]),
            profile_name: "kv".into(),
            profile_origin: "builtin:kv".into(),
            profile_hash: "3f9a1c2e".into(),
            objects: vec![
                ObjectInfo {
                    path: lib.into(),
                    build_id: Some("8d0c41f1a2b3c4d5e6f708192a3b4c5d6e7f8091".into()),
                },
                ObjectInfo {
                    path: "/usr/bin/kvd".into(),
                    build_id: None,
                },
            ],
            end_reason: "duration".into(),
            aggregation: Default::default(),
            sources: Vec::new(),
        },
        phases,
        counters,
        probe_cost: ProbeCost {
            model: "estimated (test figures)".into(),
            hits,
            added_ns: added,
            calibration: None,
            in_situ: None,
            progress: None,
            sample_ns: None,
            preemption_baseline: None,
        },
        tree,
        calls: sample_calls(),
        spans: crate::model::SpanLog {
            spans: vec![
                crate::model::SpanRecord {
                    start_ns: 1_000_100,
                    dur_ns: 5_000,
                    pid: 4242,
                    tid: 4243,
                    phase: 1,
                    depth: 1,
                    key: 0,
                },
                crate::model::SpanRecord {
                    start_ns: 1_000_000,
                    dur_ns: 300_000,
                    pid: 4242,
                    tid: 4243,
                    phase: 0,
                    depth: 0,
                    key: 0,
                },
            ],
            capped: false,
            keys: Vec::new(),
        },
        cpu: Some(crate::model::StackProfile {
            unit: "samples".into(),
            frequency_hz: Some(99),
            records: 12,
            lost: 1,
            stacks: vec![
                crate::model::FoldedStack {
                    stack: "write_record;persist_block;main;write_record;spin_ns".into(),
                    weight: 9,
                },
                crate::model::FoldedStack {
                    stack: "[outside phases];main".into(),
                    weight: 3,
                },
            ],
        }),
        off_cpu: None,
        processes: Vec::new(),
        split: None,
        in_situ: Vec::new(),
    }
}

/// Two root calls of write_record with per-phase times, for the call table.
fn sample_calls() -> crate::model::CallTable {
    let columns: Vec<String> = [
        "write_record",
        "encode_record",
        "persist_block",
        "compress_block",
        "flush_block",
        "wal_append",
        "wal_sync",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let row = |start: u64, total: u64| crate::model::CallRow {
        start_ns: start,
        pid: 4242,
        tid: 4243,
        root: 0,
        total_ns: total,
        phase_ns: vec![total, 5_000, 120_000, 20_000, 98_000, 150_000, 147_000],
        phase_calls: vec![1, 1, 1, 1, 1, 1, 1],
    };
    crate::model::CallTable {
        columns,
        rows: vec![row(1_000_000, 300_000), row(2_000_000, 310_000)],
        total_calls: 3,
        capped: true,
    }
}

/// Probe costs of [`calibrated_run`]: every phase's call costs `PAIR_NS` in all, `OWN_NS` of
/// it inside its own window.
pub const PAIR_NS: u64 = 1_000;
/// See [`PAIR_NS`].
pub const OWN_NS: u64 = 400;

/// The sample run as if calibrated: every node gets corrected figures (its calls lose
/// `OWN_NS` each and `PAIR_NS` per descendant call), and the run a calibration record.
pub fn calibrated_run() -> Run {
    fn descendant_calls(n: &TreeNode) -> u64 {
        n.children
            .iter()
            .map(|c| c.count + descendant_calls(c))
            .sum()
    }
    fn correct(n: &mut TreeNode) {
        n.children.iter_mut().for_each(correct);
        let removed = n.count * OWN_NS + descendant_calls(n) * PAIR_NS;
        let per_call = removed.checked_div(n.count).unwrap_or(0);
        let mut hist = crate::model::new_histogram();
        for v in n.hist.iter_recorded() {
            let value = v.value_iterated_to().saturating_sub(per_call).max(1);
            hist.saturating_record_n(value, v.count_at_value());
        }
        let kids: u64 = n
            .children
            .iter()
            .filter_map(|c| c.corrected.as_ref().map(|c| c.total_ns))
            .sum();
        let total = n.total_ns - removed.min(n.total_ns);
        n.corrected = Some(crate::model::Corrected {
            total_ns: total,
            self_ns: total.saturating_sub(kids),
            probe_ns: removed.min(n.total_ns),
            probe_hits: 2 * (n.count + descendant_calls(n)),
            error_ns: (n.count + descendant_calls(n)) * 30,
            preempted_ns: 0,
            wprof_ns: 0,
            hist,
        });
    }
    let mut run = sample_run();
    run.tree.roots.iter_mut().for_each(correct);
    for p in &mut run.phases {
        if p.status == "attached" {
            p.probe_pair_ns = PAIR_NS as f64;
            p.probe_own_ns = OWN_NS as f64;
        }
    }
    run.probe_cost.model = crate::model::MEASURED.into();
    run.probe_cost.calibration = Some(crate::model::Calibration {
        classes: vec![
            crate::model::ClassCost {
                entry: crate::model::CostClass::Nop,
                uretprobe: true,
                pair_ns: PAIR_NS as f64,
                own_ns: OWN_NS as f64,
                error_ns: 60.0,
            },
            crate::model::ClassCost {
                entry: crate::model::CostClass::Nop,
                uretprobe: false,
                pair_ns: PAIR_NS as f64,
                own_ns: OWN_NS as f64,
                error_ns: 60.0,
            },
        ],
        calls: 1000,
        rounds: 5,
        elapsed_ms: 42.0,
        load_end: 0.4,
        contended: false,
        at_end: vec![crate::model::ClassCost {
            entry: crate::model::CostClass::Nop,
            uretprobe: true,
            pair_ns: PAIR_NS as f64 + 90.0,
            own_ns: OWN_NS as f64,
            error_ns: 40.0,
        }],
        return_addresses: false,
        during: Vec::new(),
    });
    run
}

/// The sample run recorded with `--split-by persist_block`: the merged tree as in
/// [`sample_run`], and the same calls in two halves — the 250 `write_record` calls that called
/// `persist_block` (every 4th) and the other 750 with `vacuum_page`'s 3. BPF's lost, abandoned
/// and open counts stay in the merged tree; 4 spans were not attributed.
pub fn split_run() -> Run {
    let SampleCalls {
        wal_sync,
        wal_append,
        compress,
        flush,
        persist,
        encode,
        own,
    } = SampleCalls::new();
    let pick = |v: &[u64], with: bool| -> Vec<u64> {
        (0..v.len())
            .filter(|i| (i % 4 == 0) == with)
            .map(|i| v[i])
            .collect()
    };
    let half = |with: bool| {
        let write: Vec<u64> = (0..1000)
            .filter(|i| (i % 4 == 0) == with)
            .map(|i| {
                let p = if with { persist[i / 4] } else { 0 };
                wal_append[i] + encode[i] + own[i] + p
            })
            .collect();
        let wal = node(
            3,
            NAMES[3],
            &pick(&wal_append, with),
            vec![node(4, NAMES[4], &pick(&wal_sync, with), vec![])],
        );
        let mut children = vec![wal, node(6, NAMES[6], &pick(&encode, with), vec![])];
        if with {
            children.push(node(
                1,
                NAMES[1],
                &persist,
                vec![
                    node(5, NAMES[5], &compress, vec![]),
                    node(2, NAMES[2], &flush, vec![]),
                ],
            ));
        }
        children.sort_by_key(|c| std::cmp::Reverse(c.total_ns));
        let mut root = node(0, NAMES[0], &write, children);
        root.role = Some("insert".into());
        let mut roots = vec![root];
        if !with {
            roots.push(node(
                7,
                NAMES[7],
                &[2_000_000, 2_500_000, 40_000_000],
                vec![],
            ));
        }
        let events = if with { 250 * 7 } else { 750 * 4 + 3 };
        PhaseTree {
            roots,
            orphan_spans: 0,
            events,
        }
    };
    let mut run = sample_run();
    run.split = Some(crate::model::SplitTrees {
        phase: NAMES[1].into(),
        with: half(true),
        without: half(false),
        unattributed_spans: 4,
        oversized_roots: 0,
    });
    run
}

/// A run in which no phase call completed: phases attached, a few entries, no roots.
pub fn empty_run() -> Run {
    let mut run = sample_run();
    run.tree = PhaseTree {
        roots: Vec::new(),
        orphan_spans: 0,
        events: 0,
    };
    for p in &mut run.phases {
        p.entries = if p.id == 0 { 2 } else { 0 };
        p.returns = 0;
        p.unmatched_returns = 0;
    }
    run.counters = Counters {
        open_at_end: 2,
        ..Counters::default()
    };
    run.probe_cost.hits = 2;
    run.probe_cost.added_ns = 1_300.0;
    run
}

/// The sample run with what `--follow-forks --per-pid` and `unit`/`under` phases add.
pub fn per_pid_run() -> Run {
    let mut run = sample_run();
    run.provenance.follow_forks = true;
    run.provenance.forked = vec![4711];
    run.phases[1].outside_under = 3;
    run.tree.roots[0].children[0].units = Some(crate::model::Units {
        name: "rows".into(),
        total: 1000,
    });
    run.processes = vec![
        crate::model::ProcessRun {
            pid: 4242,
            label: "kvd --bench".into(),
            parent: None,
            parent_label: None,
            host: None,
            tree: crate::model::PhaseTree::default(),
        },
        crate::model::ProcessRun {
            pid: 4711,
            label: "postgres: app shop [local] idle".into(),
            parent: Some(4242),
            parent_label: Some("/usr/lib/postgresql/15/bin/postgres -D /srv/seg0".into()),
            host: None,
            tree: run.tree.clone(),
        },
    ];
    run
}

/// The sample run with two grouped siblings (`group_by`): the second root's children get
/// keys, one of them longer than the text tree shows.
pub fn grouped_run() -> Run {
    let mut run = sample_run();
    let kids = &mut run.tree.roots[0].children;
    kids[0].key = Some("DELETE FROM \"changes_src\" WHERE lsn <= ?".into());
    kids[1].key = Some(format!(
        "MERGE INTO st USING (WITH {} ) AS d…",
        "x, ".repeat(40)
    ));
    // The child span of the span log is a call of the first grouped node.
    run.spans.keys = vec![kids[0].key.clone().unwrap()];
    run.spans.spans[0].key = 1;
    run
}
