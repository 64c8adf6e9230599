//! `wprof compare`: two runs, node by node (docs/compare.md).
//!
//! Nodes are aligned by their path of phase names or roles ([`align`]); per node the base and
//! new figures, the relative change of the mean and Welch's t-test on the means. A change is
//! *significant* only when p < 0.01 **and** |change| ≥ `--min-effect`. `--fail-if`
//! thresholds ([`threshold`]) turn the comparison into a CI gate (exit 3).

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

use crate::analyze::align::{key_tree, relative, union_order, welch_p};
use crate::analyze::stack_diff::{self, StackDiffKind};
use crate::analyze::tail;
use crate::analyze::threshold::{self, Stat, Target, Threshold};
use crate::args::CompareArgs;
use crate::error::{exit, WprofError};
use crate::model::Run;
use crate::model::{AlignBy, Comparison, Keyed, NodeStats, Row, ALPHA};
use crate::render::compare::{folded_diff, folded_pair, render_text, to_json};
use crate::render::units::format_ns;

/// Mean, standard deviation and count of the calls at or below the histogram's 99th
/// percentile. The significance test and the effect size use this bulk of the distribution: a
/// phase that spins for 20 µs and is preempted once for 4 ms on a busy host moves the plain
/// mean and variance more than a real 20% slowdown does, and that is not what compare asks.
fn bulk(h: &crate::model::LatencyHistogram) -> (f64, f64, u64) {
    let cut = h.value_at_quantile(0.99);
    let (mut n, mut sum, mut sq) = (0u64, 0f64, 0f64);
    for v in h.iter_recorded() {
        let x = h.median_equivalent(v.value_iterated_to());
        if x > cut {
            break;
        }
        let c = v.count_at_value();
        n += c;
        sum += c as f64 * x as f64;
        sq += c as f64 * (x as f64) * (x as f64);
    }
    if n == 0 {
        return (0.0, 0.0, 0);
    }
    let mean = sum / n as f64;
    let var = if n > 1 {
        ((sq - n as f64 * mean * mean) / (n - 1) as f64).max(0.0)
    } else {
        0.0
    };
    (mean, var.sqrt(), n)
}

/// Aligns two runs and tests every node present in both.
pub fn compare(base: &Run, new: &Run, by: AlignBy, min_effect: f64) -> Comparison {
    let kb = key_tree(&base.tree, by);
    let kn = key_tree(&new.tree, by);
    let rows = union_order(&kb, &kn)
        .into_iter()
        .map(|key| {
            let b = kb.nodes.get(&key).cloned();
            let n = kn.nodes.get(&key).cloned();
            let (delta_mean, p_value) = match (&b, &n) {
                (Some(b), Some(n)) if b.count > 0 && n.count > 0 => {
                    let (bm, bs, bn) = bulk(&b.hist);
                    let (nm, ns, nn) = bulk(&n.hist);
                    (Some(relative(bm, nm)), welch_p(bm, bs, bn, nm, ns, nn))
                }
                _ => (None, None),
            };
            let significant = matches!((p_value, delta_mean), (Some(p), Some(d)) if p < ALPHA && d.abs() >= min_effect);
            Row {
                key,
                base: b,
                new: n,
                delta_mean,
                p_value,
                significant,
            }
        })
        .collect();
    Comparison {
        rows,
        base_root_calls: kb.root_calls,
        new_root_calls: kn.root_calls,
        base: kb,
        new: kn,
    }
}

/// The value of a statistic for a node of a run with `root_calls` root calls. `mean` is the
/// bulk mean ([`bulk`]), the figure the table's Δmean and the significance test use: a
/// threshold on the mean must not pass while the table shows the same change crossing it.
fn stat_value(s: &NodeStats, stat: Stat, root_calls: u64) -> f64 {
    let per_call = |v: u64| {
        if root_calls == 0 {
            0.0
        } else {
            v as f64 / root_calls as f64
        }
    };
    match stat {
        Stat::Mean => bulk(&s.hist).0,
        Stat::P50 => s.quantile_ns(0.5) as f64,
        Stat::P99 => s.quantile_ns(0.99) as f64,
        Stat::Count => s.count as f64,
        Stat::Total => per_call(s.total_ns),
        Stat::SelfTime => per_call(s.self_ns),
    }
}

/// Evaluates a threshold: `Ok(Some(message))` when crossed, `Ok(None)` when not, `Err` when
/// its node is in neither run.
pub fn evaluate(c: &Comparison, t: &Threshold) -> Result<Option<String>, String> {
    let (b, n) = match &t.target {
        Target::Total => (c.base.total.as_ref(), c.new.total.as_ref()),
        Target::Path(p) => (c.base.nodes.get(p), c.new.nodes.get(p)),
    };
    match (b, n) {
        (None, None) => {
            let known: Vec<String> = c.rows.iter().map(|r| r.key.join("/")).collect();
            Err(format!(
                "--fail-if '{}': no node {} in either run; nodes are: total, {}",
                t.expr,
                match &t.target {
                    Target::Total => "total".to_string(),
                    Target::Path(p) => p.join("/"),
                },
                known.join(", ")
            ))
        }
        (Some(_), None) | (None, Some(_)) => Ok(Some(format!(
            "{}: the node is only in the {} run",
            t.expr,
            if b.is_some() { "base" } else { "new" }
        ))),
        (Some(b), Some(n)) => {
            let vb = stat_value(b, t.stat, c.base_root_calls);
            let vn = stat_value(n, t.stat, c.new_root_calls);
            let d = relative(vb, vn);
            let fmt = |v: f64| {
                if t.stat == Stat::Count {
                    format!("{v:.0}")
                } else {
                    format_ns(v)
                }
            };
            Ok(t.crossed(d).then(|| {
                format!(
                    "{}: {}{} {} -> {} ({})",
                    t.expr,
                    t.stat,
                    if t.stat == Stat::Mean {
                        " (calls ≤ p99)"
                    } else {
                        ""
                    },
                    fmt(vb),
                    fmt(vn),
                    crate::render::units::format_change(d)
                )
            }))
        }
    }
}

fn usage(msg: String) -> anyhow::Error {
    WprofError::Usage(msg).into()
}

/// Warns on stderr when an object probed in both runs has different build ids.
fn warn_build_ids(base: &Run, new: &Run) {
    for ob in &base.provenance.objects {
        for on in &new.provenance.objects {
            if ob.path == on.path && ob.build_id != on.build_id {
                eprintln!(
                    "wprof: warning: {} has build id {} in the base run and {} in the new run: \
                     the binaries differ",
                    ob.path,
                    ob.build_id.as_deref().unwrap_or("(none)"),
                    on.build_id.as_deref().unwrap_or("(none)")
                );
            }
        }
    }
}

/// Writes the differential phase flamegraph of `--flamegraph` (see [`folded_pair`] and
/// [`crate::render::differential_svg`]).
fn write_flamegraph(c: &Comparison, a: &CompareArgs, path: &Path) -> Result<()> {
    let (b, n) = folded_pair(c);
    let name = file_name;
    let title = format!(
        "wprof compare: {} time per root call, {} \u{2192} {}",
        match a.by {
            AlignBy::Phase => "phase",
            AlignBy::Role => "role",
        },
        name(&a.base),
        name(&a.new)
    );
    let mut svg = Vec::new();
    crate::render::differential_svg(&b, &n, &title, "ns", &mut svg)?;
    crate::output_file::write(path, &svg)
}

/// A path's file name for titles (the whole path if it has none).
fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |f| f.to_string_lossy().into_owned(),
    )
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    crate::output_file::write(path, text.as_bytes())
}

/// Runs `wprof compare`.
pub fn run(a: CompareArgs) -> Result<i32> {
    let min_effect = threshold::parse_percent(&a.min_effect).ok_or_else(|| {
        usage(format!(
            "--min-effect '{}': expected a percentage such as 5%",
            a.min_effect
        ))
    })?;
    let thresholds = a
        .fail_if
        .iter()
        .map(|e| threshold::parse(e).map_err(usage))
        .collect::<Result<Vec<_>>>()?;
    let tail_pct = a.tail.as_deref().map(tail::parse_percentile).transpose()?;
    let base = crate::model::json::read_run_file(&a.base)?;
    let new = crate::model::json::read_run_file(&a.new)?;
    warn_build_ids(&base, &new);
    let stack_diffs = [
        (&a.cpu_flamegraph, StackDiffKind::Cpu, "CPU time"),
        (&a.off_cpu_flamegraph, StackDiffKind::OffCpu, "off-CPU time"),
    ];
    for (path, kind, _) in &stack_diffs {
        if path.is_some() {
            stack_diff::check(*kind, (&a.base, &base), (&a.new, &new))?;
        }
    }

    let c = compare(&base, &new, a.by, min_effect);
    if !c.rows.iter().any(|r| r.base.is_some() && r.new.is_some()) {
        let names = |k: &Keyed| {
            let roots: Vec<String> = k
                .order
                .iter()
                .filter(|p| p.len() == 1)
                .map(|p| p[0].clone())
                .collect();
            if roots.is_empty() {
                "(no calls)".to_string()
            } else {
                roots.join(", ")
            }
        };
        let hint = match a.by {
            AlignBy::Phase => " (runs of different profiles line up with --by role)",
            AlignBy::Role => "",
        };
        return Err(usage(format!(
            "{} and {} have no {} in common: base roots are {}, new roots are {}{hint}",
            a.base.display(),
            a.new.display(),
            match a.by {
                AlignBy::Phase => "phase path",
                AlignBy::Role => "role path",
            },
            names(&c.base),
            names(&c.new),
        )));
    }

    let mut failed = Vec::new();
    let mut messages = Vec::new();
    for t in &thresholds {
        if let Some(m) = evaluate(&c, t).map_err(usage)? {
            failed.push(t.expr.clone());
            messages.push(m);
        }
    }

    let mut text = render_text(&c, a.by, min_effect);
    if let Some(p) = tail_pct {
        let _ = write!(
            text,
            "\n== base: {}\n{}\n== new: {}\n{}",
            a.base.display(),
            tail::tail_report(&base, p),
            a.new.display(),
            tail::tail_report(&new, p)
        );
    }
    for m in &messages {
        let _ = writeln!(text, "FAILED {m}");
    }
    if !thresholds.is_empty() && messages.is_empty() {
        let _ = writeln!(text, "All {} thresholds passed.", thresholds.len());
    }
    crate::stdout::print(&text)?;

    if let Some(p) = &a.json {
        let v = to_json(&c, &a.base, &a.new, a.by, min_effect, &failed);
        write_file(p, &format!("{}\n", serde_json::to_string_pretty(&v)?))?;
    }
    if let Some(p) = &a.folded_diff {
        write_file(p, &folded_diff(&c))?;
    }
    if let Some(p) = &a.flamegraph {
        write_flamegraph(&c, &a, p)?;
    }
    for (path, kind, what) in &stack_diffs {
        if let Some(p) = path {
            let title = format!(
                "wprof compare: {what} per root call by phase and stack, {} \u{2192} {}",
                file_name(&a.base),
                file_name(&a.new)
            );
            stack_diff::write(*kind, &base, &new, &title, p)?;
        }
    }
    Ok(if failed.is_empty() {
        exit::OK
    } else {
        exit::CHECK_FAILED
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::threshold;
    use crate::model::testutil::empty_run;
    use crate::model::{PhaseTree, TreeNode};

    /// A one-phase run whose `persist` calls took `calls` = (duration ns, how many).
    fn run_of(calls: &[(u64, u64)]) -> Run {
        let mut node = TreeNode::empty(0, "persist".into(), None);
        for &(ns, n) in calls {
            node.count += n;
            node.total_ns += ns * n;
            node.hist.saturating_record_n(ns, n);
        }
        node.self_ns = node.total_ns;
        let mut run = empty_run();
        run.tree = PhaseTree {
            roots: vec![node],
            ..Default::default()
        };
        run
    }

    #[test]
    fn a_mean_threshold_tests_the_figure_the_table_shows() {
        // Base: 20 µs, five calls in a thousand preempted for 4 ms (plain mean 39.9 µs).
        // New: 24 µs every call. The bulk mean, the table's Δmean, rose 20%; the plain
        // mean fell 40%.
        let base = run_of(&[(20_000, 995), (4_000_000, 5)]);
        let new = run_of(&[(24_000, 1000)]);
        let c = compare(&base, &new, AlignBy::Phase, 0.05);
        let d = c.rows[0].delta_mean.unwrap();
        assert!((d - 0.2).abs() < 0.01, "{d}");
        assert!(c.rows[0].significant);
        let up = threshold::parse("persist.mean > +10%").unwrap();
        let msg = evaluate(&c, &up).unwrap().expect("a 20% rise crosses +10%");
        assert!(
            msg.contains("mean (calls ≤ p99) 20.0 µs -> 24.0 µs"),
            "{msg}"
        );
        let down = threshold::parse("persist.mean < -10%").unwrap();
        assert_eq!(evaluate(&c, &down).unwrap(), None);
        // The tail is still what `total` sees: time per root call fell 40%.
        let total = threshold::parse("persist.total < -10%").unwrap();
        assert!(evaluate(&c, &total).unwrap().is_some());
    }
}
