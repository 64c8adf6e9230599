//! The tail split of `report --tail` / `--first` (and `compare --tail`): root calls split
//! into two groups, and per phase the mean time per root call in each group, the difference
//! and the share of the extra time it explains. This answers "what makes the tail slow".

use std::fmt::Write as _;

use crate::error::WprofError;
use crate::model::CallRow;
use crate::model::Run;
use crate::render::units::{format_ns, format_share};

/// Parses a percentile such as `p95`, `95` or `p99.9` into a fraction (0.95); anything
/// outside (0, 100) is a usage error.
pub fn parse_percentile(s: &str) -> anyhow::Result<f64> {
    let t = s.trim();
    let n = t
        .strip_prefix('p')
        .or_else(|| t.strip_prefix('P'))
        .unwrap_or(t);
    match n.parse::<f64>() {
        Ok(v) if v > 0.0 && v < 100.0 => Ok(v / 100.0),
        _ => Err(WprofError::Usage(format!(
            "--tail '{s}': expected a percentile between 0 and 100 such as p95 or p99.9"
        ))
        .into()),
    }
}

/// The tail split of a run at percentile `pct` (a fraction, 0.95 for p95) of the root call
/// duration: calls above it against the rest.
pub fn tail_report(run: &Run, pct: f64) -> String {
    let rows = &run.calls.rows;
    if rows.is_empty() {
        return no_table();
    }
    let mut totals: Vec<u64> = rows.iter().map(|r| r.total_ns).collect();
    totals.sort_unstable();
    // Nearest-rank percentile.
    let rank = ((pct * totals.len() as f64).ceil() as usize).clamp(1, totals.len());
    let cut = totals[rank - 1];
    let (tail, rest): (Vec<&CallRow>, Vec<&CallRow>) = rows.iter().partition(|r| r.total_ns > cut);
    let label = format!("p{}", trim_float(pct * 100.0));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Tail split at {label} of the root call duration ({}): {} calls above, {} at or below{}",
        format_ns(cut as f64),
        tail.len(),
        rest.len(),
        capped_note(run)
    );
    if tail.is_empty() {
        let _ = writeln!(
            out,
            "No root call is slower than the {label} ({}): there is no tail to explain.",
            format_ns(cut as f64)
        );
        return out;
    }
    split_table(run, &rest, &tail, "rest", "tail", &mut out);
    out
}

/// The first `n` root calls (by start time) against the rest: cold caches, plan building.
pub fn first_report(run: &Run, n: usize) -> String {
    let rows = &run.calls.rows;
    if rows.is_empty() {
        return no_table();
    }
    let mut sorted: Vec<&CallRow> = rows.iter().collect();
    sorted.sort_by_key(|r| r.start_ns);
    let mut out = String::new();
    if n == 0 || n >= sorted.len() {
        let _ = writeln!(
            out,
            "--first {n}: the run has {} root calls in its per-call table; choose N between 1 and {}.",
            sorted.len(),
            sorted.len().saturating_sub(1)
        );
        return out;
    }
    let (first, rest) = sorted.split_at(n);
    let _ = writeln!(
        out,
        "First {n} root calls against the other {}{}",
        rest.len(),
        capped_note(run)
    );
    split_table(run, rest, first, "rest", "first", &mut out);
    out
}

fn no_table() -> String {
    "This run has no per-call table (no root call rows were recorded), so its root calls \
     cannot be split.\n"
        .to_string()
}

fn capped_note(run: &Run) -> String {
    if run.calls.capped {
        format!(
            " (only the first {} of {} root calls were kept)",
            run.calls.rows.len(),
            run.calls.total_calls
        )
    } else {
        String::new()
    }
}

fn trim_float(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Mean of a per-row quantity over a group.
fn mean(rows: &[&CallRow], f: impl Fn(&CallRow) -> f64) -> f64 {
    if rows.is_empty() {
        0.0
    } else {
        rows.iter().map(|r| f(r)).sum::<f64>() / rows.len() as f64
    }
}

/// The per-phase table: `base` is the reference group, `group` the one being explained.
fn split_table(
    run: &Run,
    base: &[&CallRow],
    group: &[&CallRow],
    bl: &str,
    gl: &str,
    out: &mut String,
) {
    let base_total = mean(base, |r| r.total_ns as f64);
    let group_total = mean(group, |r| r.total_ns as f64);
    let extra = group_total - base_total;
    let name_w = run
        .calls
        .columns
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0)
        .max("root call".len());
    let _ = writeln!(
        out,
        "{:<name_w$}  {:>10}  {:>10}  {:>11}  {:>8}  {:>9}  {:>9}",
        "phase",
        format!("{bl}/call"),
        format!("{gl}/call"),
        "difference",
        "of extra",
        format!("{bl} n"),
        format!("{gl} n"),
    );
    let _ = writeln!(
        out,
        "{:<name_w$}  {:>10}  {:>10}  {:>11}  {:>8}  {:>9}  {:>9}",
        "root call",
        format_ns(base_total),
        format_ns(group_total),
        signed_ns(extra),
        format_share(1.0),
        "1.0",
        "1.0"
    );
    let mut lines: Vec<(f64, String)> = Vec::new();
    for (i, col) in run.calls.columns.iter().enumerate() {
        let b = mean(base, |r| r.phase_ns.get(i).copied().unwrap_or(0) as f64);
        let g = mean(group, |r| r.phase_ns.get(i).copied().unwrap_or(0) as f64);
        let bc = mean(base, |r| r.phase_calls.get(i).copied().unwrap_or(0) as f64);
        let gc = mean(group, |r| r.phase_calls.get(i).copied().unwrap_or(0) as f64);
        if b == 0.0 && g == 0.0 && bc == 0.0 && gc == 0.0 {
            continue;
        }
        // The root's own column repeats the root call line.
        if bc == 1.0 && gc == 1.0 && (b - base_total).abs() < 0.5 && (g - group_total).abs() < 0.5 {
            continue;
        }
        let share = if extra > 0.0 {
            (g - b) / extra
        } else {
            f64::NAN
        };
        lines.push((
            g - b,
            format!(
                "{:<name_w$}  {:>10}  {:>10}  {:>11}  {:>8}  {:>9.1}  {:>9.1}",
                col,
                format_ns(b),
                format_ns(g),
                signed_ns(g - b),
                format_share(share),
                bc,
                gc
            ),
        ));
    }
    lines.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (_, l) in lines {
        out.push_str(&l);
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "Times are per root call and include nested phases, so shares of nested phases overlap; \
         'n' is calls of the phase per root call."
    );
}

/// A signed duration ("+12.0 µs", "-812 ns").
pub fn signed_ns(ns: f64) -> String {
    if !ns.is_finite() {
        return "-".to_string();
    }
    let sign = if ns < 0.0 { '-' } else { '+' };
    format!("{sign}{}", format_ns(ns.abs()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::CallTable;

    fn row(start: u64, total: u64, a: u64, b: u64) -> CallRow {
        CallRow {
            start_ns: start,
            pid: 1,
            tid: 1,
            root: 0,
            total_ns: total,
            phase_ns: vec![total, a, b],
            phase_calls: vec![1, 1, 1],
        }
    }

    fn run(rows: Vec<CallRow>) -> Run {
        Run {
            calls: CallTable {
                columns: vec!["root".into(), "fast".into(), "slowpart".into()],
                total_calls: rows.len() as u64,
                rows,
                capped: false,
            },
            ..Default::default()
        }
    }

    #[test]
    fn percentiles_parse() {
        assert_eq!(parse_percentile("p95").unwrap(), 0.95);
        assert_eq!(parse_percentile("95").unwrap(), 0.95);
        assert!((parse_percentile("p99.9").unwrap() - 0.999).abs() < 1e-12);
        for bad in ["p", "p100", "0", "x95", "-5", ""] {
            assert!(parse_percentile(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tail_blames_the_phase_that_grows() {
        // 95 calls of 100 ns (50/40), 5 calls of 1000 ns where slowpart takes the extra.
        let mut rows: Vec<CallRow> = (0..95).map(|i| row(i, 100, 50, 40)).collect();
        rows.extend((95..100).map(|i| row(i, 1000, 50, 940)));
        let r = tail_report(&run(rows), 0.95);
        assert!(r.contains("5 calls above, 95 at or below"), "{r}");
        let slow = r.lines().find(|l| l.starts_with("slowpart")).unwrap();
        assert!(slow.contains("100.0%"), "{r}");
        let fast = r.lines().find(|l| l.starts_with("fast")).unwrap();
        assert!(fast.contains("0.0%"), "{r}");
        // Largest difference first.
        let pos_slow = r.find("slowpart").unwrap();
        let pos_fast = r.find("\nfast").unwrap();
        assert!(pos_slow < pos_fast, "{r}");
    }

    #[test]
    fn first_calls_apart() {
        let mut rows: Vec<CallRow> = (0..3).map(|i| row(i, 500, 400, 50)).collect();
        rows.extend((3..50).map(|i| row(i, 100, 50, 40)));
        let r = first_report(&run(rows), 3);
        assert!(r.contains("First 3 root calls against the other 47"), "{r}");
        assert!(r.lines().any(|l| l.starts_with("fast")), "{r}");
    }

    #[test]
    fn no_rows_says_so() {
        let r = tail_report(&Run::default(), 0.95);
        assert!(r.contains("no per-call table"), "{r}");
        assert!(first_report(&Run::default(), 3).contains("no per-call table"));
    }

    #[test]
    fn flat_runs_have_no_tail() {
        let rows: Vec<CallRow> = (0..10).map(|i| row(i, 100, 50, 40)).collect();
        let r = tail_report(&run(rows), 0.9);
        assert!(r.contains("no tail to explain"), "{r}");
    }
}
