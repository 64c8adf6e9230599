//! Tests of the text tree: golden files plus the properties the columns promise.

use super::*;
use crate::model::testutil::{calibrated_run, empty_run, sample_run, split_run};
use crate::model::TreeNode;
use crate::render::testutil::assert_golden;

fn plain(run: &Run) -> String {
    render_tree(run, &TextOptions::default())
}

/// One tree row as printed.
#[derive(Debug)]
struct Line {
    depth: usize,
    label: String,
    /// First time column, ns, with the half-width of its last printed digit.
    per_root: Option<(f64, f64)>,
    text: String,
}

impl Line {
    fn is_note(&self) -> bool {
        self.label.starts_with('(') && self.label != "(self)"
    }
}

/// The tree rows of a rendered run (everything before the footer's legend).
fn parse(text: &str) -> Vec<Line> {
    let mut out = Vec::new();
    for l in text.lines().take_while(|l| !l.starts_with("columns:")) {
        // Blank lines, and the headings of per-process and split trees.
        if l.trim().is_empty() || l.starts_with("── ") {
            continue;
        }
        let start = l.chars().take_while(|c| "│├└─ ".contains(*c)).count();
        let body: String = l.chars().skip(start).collect();
        let (label, rest) = match body.split_once("  ") {
            Some((a, b)) => (a.to_string(), b.to_string()),
            None => (body.clone(), String::new()),
        };
        let mut tokens = rest.split_whitespace();
        let per_root = match (tokens.next(), tokens.next()) {
            (Some(v), Some(unit)) => v.parse::<f64>().ok().and_then(|v| {
                let (scale, step) = match unit {
                    "ns" if v < 10.0 => (1.0, 0.1),
                    "ns" => (1.0, 1.0),
                    "µs" => (1e3, 0.1),
                    "ms" => (1e6, 0.1),
                    "s" => (1e9, 0.01),
                    _ => return None,
                };
                Some((v * scale, step * scale / 2.0))
            }),
            _ => None,
        };
        out.push(Line {
            depth: start / 3,
            label,
            per_root,
            text: l.to_string(),
        });
    }
    out
}

/// The rows directly under row `i`.
fn under(lines: &[Line], i: usize) -> Vec<&Line> {
    let d = lines[i].depth;
    lines[i + 1..]
        .iter()
        .take_while(|l| l.depth > d)
        .filter(|l| l.depth == d + 1)
        .collect()
}

#[test]
fn sample_tree_matches_golden() {
    assert_golden("tree.txt", &plain(&sample_run()));
}

#[test]
fn split_tree_matches_golden() {
    assert_golden("tree_split.txt", &plain(&split_run()));
}

#[test]
fn split_run_shows_each_half_under_its_heading_with_its_own_figures() {
    let run = split_run();
    let text = plain(&run);
    let (with, without) = text
        .split_once("── 753 of 1003 root calls (75.1%) did not contain persist_block\n")
        .unwrap_or_else(|| panic!("no heading of the half without:\n{text}"));
    assert!(
        with.starts_with("── 250 of 1003 root calls (24.9%) contained persist_block\n"),
        "{text}"
    );
    let (without, footer) = without.split_once("\ncolumns:").expect("footer");
    // Each half's tree adds up on its own, per root call of that half.
    assert_eq!(rows_add_up_in(with), 3, "{with}");
    assert_eq!(rows_add_up_in(without), 2, "{without}");
    let split = run.split.as_ref().unwrap();
    let row = |half: &str, name: &str| -> String {
        half.lines()
            .find(|l| {
                l.trim_start_matches(|c| "│├└─ ".contains(c))
                    .starts_with(name)
            })
            .unwrap_or_else(|| panic!("no {name} row in:\n{half}"))
            .to_string()
    };
    let w = split.with.find(&["write_record"]).unwrap();
    let wo = split.without.find(&["write_record"]).unwrap();
    for (half, node) in [(with, w), (without, wo)] {
        let r = row(half, "write_record");
        assert!(r.contains(&format!("n={:<3}", node.count)), "{r}");
        let mean = format!("mean {:>8}", format_ns(node.mean_ns()));
        assert!(r.contains(&mean), "{r} lacks {mean}");
        let p99 = format!(
            "p99 {:>8}",
            format_ns_u64(node.hist.value_at_quantile(0.99))
        );
        assert!(r.contains(&p99), "{r} lacks {p99}");
    }
    assert!(!without.contains("persist_block  "), "{without}");
    assert!(row(without, "vacuum_page").contains("n=3"));
    // What is in neither half is said, once, after both.
    assert!(
        without.contains("(not split: 12 lost, 3 abandoned, 1 open at end"),
        "{without}"
    );
    assert!(
        without.contains("(in neither half: 4 calls whose root call did not complete"),
        "{without}"
    );
    assert!(footer.contains("phases:"), "{footer}");
}

#[test]
fn split_half_without_calls_says_none() {
    let mut run = split_run();
    let split = run.split.as_mut().unwrap();
    split.with.roots.clear();
    split.unattributed_spans = 0;
    let text = plain(&run);
    assert!(
        text.contains("── 0 of 753 root calls (0.0%) contained persist_block\n(none)\n"),
        "{text}"
    );
    assert!(!text.contains("in neither half"), "{text}");
}

#[test]
fn run_without_roots_matches_golden() {
    let text = plain(&empty_run());
    assert!(
        text.starts_with("no phase call completed during the run (2 probe hits)\n"),
        "{text}"
    );
    assert_golden("tree_empty.txt", &text);
}

#[test]
fn corrected_tree_matches_golden() {
    assert_golden("tree_corrected.txt", &plain(&calibrated_run()));
}

#[test]
fn a_flagged_corrected_tree_says_what_the_calibration_leaves_out() {
    let mut run = calibrated_run();
    let strict = TextOptions {
        flag_probe_share: 0.0,
        ..TextOptions::default()
    };
    let hint = "--in-situ measures it in the run";
    let text = render_tree(&run, &strict);
    assert!(
        text.contains("flagged (probe share > 0%, corrected"),
        "{text}"
    );
    assert!(text.contains(hint), "{text}");
    // Nothing flagged, or the run checked itself in place: no hint.
    assert!(!plain(&run).contains(hint));
    run.in_situ.push(crate::model::InSituCheck {
        phase: 0,
        name: "write_record".into(),
        path: Vec::new(),
        light_calls: 100,
        kept_out: 100,
        light_mean_ns: 1000.0,
        full_calls: 900,
        full_mean_ns: 2000.0,
        calibrated_ns: 1000.0,
        in_situ_ns: 1000.0,
        error_ns: 10.0,
        factor: 1.0,
        excess_per_hit_ns: 0.0,
        children_fitted: None,
    });
    assert!(!render_tree(&run, &strict).contains(hint));
}

#[test]
fn guarded_phases_are_priced_by_the_uretprobe_calibration() {
    let mut run = calibrated_run();
    let class = "nop+uretprobe 1.0 µs a call";
    assert!(plain(&run).contains(class));
    // C++ phases return through guarded uretprobes, priced as plain ones: the footer named
    // no class for them ("no probed call") when only those were attached.
    for p in run
        .phases
        .iter_mut()
        .filter(|p| p.return_mode == "uretprobe")
    {
        p.return_mode = "guarded".into();
    }
    let text = plain(&run);
    assert!(text.contains(class), "{text}");
}

#[test]
fn corrected_tree_shows_corrected_times_and_the_raw_mean() {
    let run = calibrated_run();
    let text = plain(&run);
    let enc = run.tree.find(&["write_record", "encode_record"]).unwrap();
    let c = enc.corrected.as_ref().unwrap();
    let row = text.lines().find(|l| l.contains("encode_record")).unwrap();
    let mean = format_ns(c.total_ns as f64 / enc.count as f64);
    let raw = format_ns(enc.mean_ns());
    assert!(row.contains(&format!("mean {mean:>8}")), "{row}");
    assert!(row.contains(&format!("raw {raw:>8}")), "{row}");
    assert!(
        text.contains("all corrected for the probes' time"),
        "{text}"
    );
    assert!(text.contains("probe cost (calibrated)"), "{text}");
    assert!(
        text.contains("calibrated on this host (5 rounds × 1000 calls, 42 ms)"),
        "{text}"
    );
    // --raw shows the measured times, as an uncorrected run does.
    let raw_text = render_tree(
        &run,
        &TextOptions {
            raw: true,
            ..TextOptions::default()
        },
    );
    // Up to the probe column, which uses each run's own pair costs.
    let tree = |t: &str| -> Vec<String> {
        let head = t.split("\n\n").next().unwrap();
        head.lines()
            .map(|l| l.split("  probe").next().unwrap().to_string())
            .collect()
    };
    assert_eq!(tree(&raw_text), tree(&plain(&sample_run())));
    assert!(!raw_text.contains(" raw "), "{raw_text}");
}

#[test]
fn rows_add_up_to_their_parent() {
    for run in [sample_run(), calibrated_run()] {
        rows_add_up(&run);
    }
}

fn rows_add_up(run: &Run) {
    let text = plain(run);
    assert_eq!(
        rows_add_up_in(&text),
        3,
        "write_record, wal_append and persist_block have children:\n{text}"
    );
}

/// Checks that every node's children (with `(self)`) add up to it; returns how many nodes
/// with children it checked.
fn rows_add_up_in(text: &str) -> usize {
    let lines = parse(text);
    let mut checked = 0;
    for (i, l) in lines.iter().enumerate() {
        let kids: Vec<&Line> = under(&lines, i)
            .into_iter()
            .filter(|k| !k.is_note())
            .collect();
        if l.is_note() || l.label == "(self)" || kids.is_empty() {
            continue;
        }
        let Some((value, tol)) = l.per_root else {
            panic!("no time in {:?}", l.text)
        };
        let mut sum = 0.0;
        let mut tol_sum = tol;
        for k in &kids {
            let Some((v, t)) = k.per_root else {
                panic!("no time in {:?}", k.text)
            };
            sum += v;
            tol_sum += t;
        }
        assert!(
            (sum - value).abs() <= tol_sum,
            "{}: children sum to {sum} ns",
            l.text
        );
        checked += 1;
    }
    checked
}

#[test]
fn self_row_closes_every_node_with_children() {
    let run = sample_run();
    let lines = parse(&plain(&run));
    for (i, l) in lines.iter().enumerate() {
        if l.is_note() || l.label == "(self)" {
            continue;
        }
        let kids: Vec<&Line> = under(&lines, i)
            .into_iter()
            .filter(|k| !k.is_note())
            .collect();
        let node = run.tree.roots.iter().find_map(|r| {
            let mut found = None;
            r.walk(&mut Vec::new(), &mut |_, n| {
                if n.name == l.label {
                    found = Some(n.children.len());
                }
            });
            found
        });
        let Some(n_children) = node else {
            panic!("no node {}", l.label)
        };
        if n_children == 0 {
            assert!(kids.is_empty(), "leaf {} has rows under it", l.label);
        } else {
            assert_eq!(kids.len(), n_children + 1, "{}", l.text);
            assert_eq!(
                kids.last().map(|k| k.label.as_str()),
                Some("(self)"),
                "{}",
                l.text
            );
        }
    }
    let text = plain(&run);
    let root = &run.tree.roots[0];
    // write_record's own time per call and its share of the node.
    let want = format_share(root.self_ns as f64 / root.total_ns as f64);
    let line = text
        .lines()
        .find(|l| l.starts_with("├─ (self)"))
        .unwrap_or_default();
    assert!(line.ends_with(&want), "{line:?} should end with {want}");
    assert!(
        line.contains(&format_ns(root.self_ns as f64 / root.count as f64)),
        "{line}"
    );
}

#[test]
fn untimed_calls_get_rows_under_their_node() {
    let text = plain(&sample_run());
    let lines = parse(&text);
    let at = |name: &str| {
        lines
            .iter()
            .position(|l| l.label == name)
            .unwrap_or(usize::MAX)
    };
    let flush: Vec<&str> = under(&lines, at("flush_block"))
        .iter()
        .map(|l| l.label.as_str())
        .collect();
    assert_eq!(
        flush,
        [
            "(lost 12 calls: ring buffer full)",
            "(abandoned 3 calls: left without return)"
        ]
    );
    let root: Vec<&str> = under(&lines, at("write_record"))
        .iter()
        .map(|l| l.label.as_str())
        .collect();
    assert_eq!(root.last(), Some(&"(open at end: 1)"));
    assert!(!text.contains("(lost 0"), "zero counts get no row");
    assert!(!text.contains("(abandoned 0"));
}

#[test]
fn probe_share_is_estimated_and_flagged() {
    let run = sample_run();
    let text = plain(&run);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.contains(&format!(" {name} ")) || l.starts_with(&format!("{name} ")))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        line("encode_record").ends_with("probe  21% !"),
        "{}",
        line("encode_record")
    );
    assert!(
        line("write_record").ends_with("probe   5%"),
        "{}",
        line("write_record")
    );
    assert!(text.contains(
        "flagged (probe share > 10%, times inflated by the probes): encode_record 21%\n"
    ));

    // The estimate: half the node's own pair plus every descendant call's pair, per call, as
    // a share of the median call.
    let pair: HashMap<u32, f64> = run.phases.iter().map(|p| (p.id, p.probe_pair_ns)).collect();
    let opts = TextOptions::default();
    let ctx = Ctx {
        pair,
        show_probe: true,
        opts: &opts,
    };
    let root = &run.tree.roots[0];
    let per_call = 650.0
        + (1000.0 * 1300.0 * 2.0 + 250.0 * 1300.0 * 2.0 + 250.0 * 6400.0 + 1000.0 * 2500.0)
            / 1000.0;
    let got = ctx.probe_share(root).unwrap_or(f64::NAN);
    let median = root.hist.value_at_quantile(0.5) as f64;
    assert!((got - per_call / median).abs() < 1e-12, "{got}");

    let relaxed = render_tree(
        &run,
        &TextOptions {
            flag_probe_share: 0.25,
            ..TextOptions::default()
        },
    );
    assert!(!relaxed.lines().any(|l| l.ends_with(" !")), "{relaxed}");
    assert!(relaxed.contains("flagged (probe share > 25%): none\n"));
}

#[test]
fn no_probe_column_without_cost_estimates() {
    let mut run = sample_run();
    for p in &mut run.phases {
        p.probe_pair_ns = 0.0;
    }
    let text = plain(&run);
    assert!(
        !parse(&text).iter().any(|l| l.text.contains("probe")),
        "{text}"
    );
}

#[test]
fn name_column_adapts_to_the_longest_name() {
    let share_column = |text: &str| -> Vec<usize> {
        parse(text)
            .iter()
            .filter(|l| !l.is_note())
            .filter_map(|l| l.text.chars().position(|c| c == '%'))
            .collect()
    };
    let mut run = sample_run();
    let before = share_column(&plain(&run));
    assert!(before.windows(2).all(|w| w[0] == w[1]), "{before:?}");
    run.tree.roots[0].children[1].children[1].name = "flush_block_with_a_long_name".into();
    let after = share_column(&plain(&run));
    assert!(after.windows(2).all(|w| w[0] == w[1]), "{after:?}");
    // The longest label now; '%' ends the share column: label, 2 + 8 (time), 2 + 6 (share).
    assert_eq!(
        after[0],
        "│  ├─ flush_block_with_a_long_name".chars().count() + 2 + 8 + 2 + 5
    );
    assert!(after[0] > before[0]);
}

#[test]
fn color_only_adds_escapes() {
    let run = sample_run();
    let colored = render_tree(
        &run,
        &TextOptions {
            color: true,
            ..TextOptions::default()
        },
    );
    assert!(colored.contains("\x1b[1;31mprobe  21% !\x1b[0m"));
    let mut stripped = String::new();
    let mut chars = colored.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            stripped.push(c);
        }
    }
    assert_eq!(stripped, plain(&run));
}

#[test]
fn node_without_completed_calls() {
    let mut run = sample_run();
    let mut root = TreeNode::empty(0, "write_record".into(), None);
    root.open = 2;
    root.lost = 1;
    run.tree.roots = vec![root];
    let text = plain(&run);
    let first = text.lines().next().unwrap_or_default();
    assert_eq!(first, "write_record         -  100.0%  n=0");
    assert!(
        text.contains("├─ (lost 1 call: ring buffer full)\n└─ (open at end: 2)\n"),
        "{text}"
    );
}

#[test]
fn units_show_per_unit_time_on_the_row_and_throughput_in_the_footer() {
    let mut run = sample_run();
    let root = &mut run.tree.roots[0];
    let (root_total, root_name) = (root.total_ns, root.name.clone());
    let wal = &mut root.children[0];
    wal.units = Some(crate::model::Units {
        name: "bytes".into(),
        total: 4_000_000,
    });
    let wal_total = wal.total_ns;
    let wal_name = wal.name.clone();
    let text = plain(&run);
    let row = text
        .lines()
        .find(|l| l.contains(&wal_name) && l.contains("n="))
        .unwrap();
    let per_byte = format_ns(wal_total as f64 / 4e6);
    assert!(
        row.ends_with(&format!("4000000 bytes  {per_byte}/byte")),
        "{row}"
    );
    let footer = text
        .lines()
        .find(|l| l.starts_with("bytes: "))
        .unwrap_or_else(|| panic!("{text}"));
    let expect = format!(
        "bytes: {root_name}/{wal_name} 4000000 bytes · {root_name} {}/byte",
        format_ns(root_total as f64 / 4e6)
    );
    assert!(footer.starts_with(&expect), "{footer}\nwant {expect}");
    assert!(footer.contains("k bytes/s inside") || footer.contains("M bytes/s inside"));
    assert!(footer.ends_with("bytes/s over the run"), "{footer}");
}

#[test]
fn a_reloaded_per_pid_run_shows_one_tree_per_process() {
    let run = crate::model::testutil::per_pid_run();
    let back = crate::model::json::from_json(&crate::model::json::to_json(&run).to_string())
        .expect("per-pid run reloads");
    assert_eq!(plain(&back), plain(&run));
    let text = plain(&back);
    assert!(
        text.contains("── pid 4711: postgres: app shop [local] idle  (forked by 4242: /usr/lib/postgresql/15/bin/postgres -D /srv/seg0)"),
        "{text}"
    );
    assert!(text.contains("── pid 4242: kvd --bench\n"), "{text}");
}

#[test]
fn grouped_nodes_show_their_string_cut_to_the_tree_width() {
    let run = crate::model::testutil::grouped_run();
    let back = crate::model::json::from_json(&crate::model::json::to_json(&run).to_string())
        .expect("grouped run reloads");
    let text = plain(&back);
    let kids = &back.tree.roots[0].children;
    let short = format!(
        "{} [DELETE FROM \"changes_src\" WHERE lsn <= ?]",
        kids[0].name
    );
    assert!(text.contains(&short), "{text}");
    // A long string is cut to the tree's width (JSON keeps all of it: model's tests).
    let cut = format!("{} [MERGE INTO st USING (WITH x, x, ", kids[1].name);
    let line = text.lines().find(|l| l.contains(&cut)).expect(&text);
    assert!(line.contains("…]"), "{line}");
}

#[test]
fn the_preempted_line_says_at_what_odds_the_programs_own_were_kept() {
    let mut run = calibrated_run();
    let root = &mut run.tree.roots[0];
    root.preempted_ns = Some(4_000 * root.count);
    if let Some(c) = root.corrected.as_mut() {
        c.preempted_ns = 3_000 * root.count;
    }
    let line = |run: &Run| -> String {
        let text = plain(run);
        (text.lines())
            .find(|l| l.starts_with("preempted (runnable, waiting for a CPU): write_record 4.0 µs"))
            .unwrap_or_else(|| panic!("no preempted line:\n{text}"))
            .to_string()
    };
    assert!(!line(&run).contains("untraced odds"));
    run.probe_cost.preemption_baseline = Some(crate::model::PreemptionBaseline {
        window_ms: 250.0,
        threads: 3,
        cpu_ns: 400_000_000,
        wait_ns: 12_000_000,
        traced_cpu_ns: 2_000_000_000,
        traced_wait_ns: 250_000_000,
    });
    let l = line(&run);
    assert!(
        l.contains(
            "kept at the untraced odds: its threads waited 3.0% of their time on the CPU before \
             wprof attached, 12.5% traced"
        ),
        "{l}"
    );
}
