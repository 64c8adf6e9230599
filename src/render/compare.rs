//! The views of a comparison (`wprof compare`): the text table, the `--json` document and the
//! folded files of the differential flamegraph.
//!
//! In: a [`Comparison`] (computed by analyze::compare). Out: text, a JSON value, folded stacks.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{json, Value};

use super::units::{format_change, format_ns, format_share};
use crate::model::{AlignBy, Comparison, NodeStats, Row, ALPHA};

/// The text table of a comparison.
pub fn render_text(c: &Comparison, by: AlignBy, min_effect: f64) -> String {
    let label = |r: &Row| {
        let depth = r.key.len().saturating_sub(1);
        let last = r.key.last().cloned().unwrap_or_default();
        // With --by role, show which phases lined up.
        let shown = match by {
            AlignBy::Phase => last,
            AlignBy::Role => {
                let nb = r.base.as_ref().and_then(|s| s.names.last().cloned());
                let nn = r.new.as_ref().and_then(|s| s.names.last().cloned());
                match (nb, nn) {
                    (Some(a), Some(b)) if a == b && a == last => last,
                    (Some(a), Some(b)) if a == b => format!("{last} ({a})"),
                    (Some(a), Some(b)) => format!("{last} ({a} | {b})"),
                    (Some(a), None) | (None, Some(a)) if a != last => format!("{last} ({a})"),
                    _ => last,
                }
            }
        };
        format!("{}{}", "  ".repeat(depth), shown)
    };
    let labels: Vec<String> = c.rows.iter().map(label).collect();
    let w = labels
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    let per = |s: &Option<NodeStats>, f: &dyn Fn(&NodeStats) -> String| {
        s.as_ref().map(f).unwrap_or_else(|| "-".to_string())
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<w$}  {:>8} {:>8}  {:>8} {:>8} {:>8}  {:>8} {:>8}  {:>8} {:>8}  {:>8} {:>8}  {:>8} {:>8}  {:>8}",
        "node",
        "count",
        "",
        "mean",
        "",
        "Δmean",
        "p50",
        "",
        "p99",
        "",
        "total/rc",
        "",
        "self/rc",
        "",
        "p-value"
    );
    let _ = writeln!(
        out,
        "{:<w$}  {:>8} {:>8}  {:>8} {:>8} {:>8}  {:>8} {:>8}  {:>8} {:>8}  {:>8} {:>8}  {:>8} {:>8}  {:>8}",
        "", "base", "new", "base", "new", "", "base", "new", "base", "new", "base", "new", "base", "new", ""
    );
    for (r, l) in c.rows.iter().zip(&labels) {
        let cnt = |s: &NodeStats| s.count.to_string();
        let mean = |s: &NodeStats| format_ns(s.mean_ns());
        let p50 = |s: &NodeStats| format_ns(s.quantile_ns(0.5) as f64);
        let p99 = |s: &NodeStats| format_ns(s.quantile_ns(0.99) as f64);
        let tot_b = |s: &NodeStats| per_root(s.total_ns, c.base_root_calls);
        let tot_n = |s: &NodeStats| per_root(s.total_ns, c.new_root_calls);
        let self_b = |s: &NodeStats| per_root(s.self_ns, c.base_root_calls);
        let self_n = |s: &NodeStats| per_root(s.self_ns, c.new_root_calls);
        let delta = match (&r.base, &r.new, r.delta_mean) {
            (_, _, Some(d)) => format_change(d),
            (Some(_), None, _) => "gone".to_string(),
            (None, Some(_), _) => "new".to_string(),
            _ => "-".to_string(),
        };
        let p = r
            .p_value
            .map(|p| {
                if p < 1e-4 {
                    "<1e-4".to_string()
                } else {
                    format!("{p:.4}")
                }
            })
            .unwrap_or_else(|| "-".to_string());
        let mark = if r.significant {
            "  *"
        } else if r.base.is_none() {
            "  only in new"
        } else if r.new.is_none() {
            "  only in base"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{l:<w$}  {:>8} {:>8}  {:>8} {:>8} {:>8}  {:>8} {:>8}  {:>8} {:>8}  {:>8} {:>8}  {:>8} {:>8}  {:>8}{mark}",
            per(&r.base, &cnt),
            per(&r.new, &cnt),
            per(&r.base, &mean),
            per(&r.new, &mean),
            delta,
            per(&r.base, &p50),
            per(&r.new, &p50),
            per(&r.base, &p99),
            per(&r.new, &p99),
            per(&r.base, &tot_b),
            per(&r.new, &tot_n),
            per(&r.base, &self_b),
            per(&r.new, &self_n),
            p,
        );
    }
    let sig = c.rows.iter().filter(|r| r.significant).count();
    let _ = writeln!(
        out,
        "\n* significant: Welch p < {ALPHA} and |Δmean| ≥ {}. {sig} of {} nodes. \
         total/rc and self/rc are per root call ({} base, {} new root calls).",
        format_share(min_effect),
        c.rows.len(),
        c.base_root_calls,
        c.new_root_calls
    );
    out
}

fn per_root(v: u64, root_calls: u64) -> String {
    if root_calls == 0 {
        "-".to_string()
    } else {
        format_ns(v as f64 / root_calls as f64)
    }
}

fn stats_json(s: &Option<NodeStats>, root_calls: u64) -> Value {
    match s {
        None => Value::Null,
        Some(s) => json!({
            "count": s.count,
            "mean_ns": s.mean_ns(),
            "p50_ns": s.quantile_ns(0.5),
            "p99_ns": s.quantile_ns(0.99),
            "total_per_root_call_ns": if root_calls == 0 { 0.0 } else { s.total_ns as f64 / root_calls as f64 },
            "self_per_root_call_ns": if root_calls == 0 { 0.0 } else { s.self_ns as f64 / root_calls as f64 },
            "phases": s.names,
        }),
    }
}

/// The JSON document of `--json`.
pub fn to_json(
    c: &Comparison,
    base: &Path,
    new: &Path,
    by: AlignBy,
    min_effect: f64,
    failed: &[String],
) -> Value {
    let nodes: Vec<Value> = c
        .rows
        .iter()
        .map(|r| {
            json!({
                "path": r.key.join("/"),
                "base": stats_json(&r.base, c.base_root_calls),
                "new": stats_json(&r.new, c.new_root_calls),
                "delta_mean": r.delta_mean.filter(|d| d.is_finite()),
                "p_value": r.p_value,
                "significant": r.significant,
            })
        })
        .collect();
    json!({
        "base": base.display().to_string(),
        "new": new.display().to_string(),
        "by": match by { AlignBy::Phase => "phase", AlignBy::Role => "role" },
        "min_effect": min_effect,
        "base_root_calls": c.base_root_calls,
        "new_root_calls": c.new_root_calls,
        "nodes": nodes,
        "failed": failed,
    })
}

/// The differential folded file: `stack base_self_ns new_self_ns` per line, the format of
/// inferno's (and flamegraph.pl's) differential flame graphs.
pub fn folded_diff(c: &Comparison) -> String {
    let mut out = String::new();
    for r in &c.rows {
        let b = r.base.as_ref().map_or(0, |s| s.self_ns);
        let n = r.new.as_ref().map_or(0, |s| s.self_ns);
        if b == 0 && n == 0 {
            continue;
        }
        let stack: Vec<String> = r.key.iter().map(|k| k.replace([';', ' '], "_")).collect();
        let _ = writeln!(out, "{} {b} {n}", stack.join(";"));
    }
    out
}

/// The two folded inputs of the differential flamegraph: per aligned node, its self time **per
/// root call** in the base run and in the new run (integer ns, rounded), as
/// `(base_folded, new_folded)`. Stack frames are the aligned path (phase names, or roles with
/// `--by role`). Per root call, so that two runs of different lengths compare: a run that
/// simply lasted twice as long is not drawn twice as red.
pub fn folded_pair(c: &Comparison) -> (String, String) {
    let per_rc = |v: u64, rc: u64| {
        if rc == 0 {
            0
        } else {
            (v as f64 / rc as f64).round() as u64
        }
    };
    let (mut base, mut new) = (String::new(), String::new());
    for r in &c.rows {
        let stack: Vec<String> = r
            .key
            .iter()
            .map(|k| k.replace([';', '\n', '\r'], "_"))
            .collect();
        let stack = stack.join(";");
        let b = r
            .base
            .as_ref()
            .map_or(0, |s| per_rc(s.self_ns, c.base_root_calls));
        let n = r
            .new
            .as_ref()
            .map_or(0, |s| per_rc(s.self_ns, c.new_root_calls));
        if b > 0 {
            let _ = writeln!(base, "{stack} {b}");
        }
        if n > 0 {
            let _ = writeln!(new, "{stack} {n}");
        }
    }
    (base, new)
}
