//! `wprof check`: test hypotheses about a run (and optionally its difference from a base run).
//!
//! In: a hypothesis file (TOML, [`super::hypothesis`]), a RUN.json and optionally a BASE.json. Out: a
//! table of verdicts on stdout, optionally a JSON document, and the exit code: 3 when any
//! hypothesis is REFUTED, else 0. Statistics ([`super::stats`]): percentile bootstrap over root calls,
//! documented in docs/hypotheses.md.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use anyhow::Result;

use crate::args::CheckArgs;
use crate::error::{exit, WprofError};
use crate::model::Run;
use crate::model::{new_histogram, CallRow, LatencyHistogram, TreeNode};

use super::hypothesis;
use super::stats::{self, SplitMix64};
use crate::model::{Hypothesis, Kind, Outcome, Standing, Verdict};

fn usage(msg: String) -> anyhow::Error {
    WprofError::Usage(msg).into()
}

/// Where a hypothesis's phase lives in one run.
struct Target {
    /// Column of the phase in the call table.
    col: Option<usize>,
    /// Column of the `of` phase (None = the root call's total).
    of_col: Option<usize>,
    /// Root phase ids whose calls are considered.
    roots: BTreeSet<u32>,
    /// Tree nodes of the phase (all paths, or the one path given), for the tree fallback.
    hist: Option<(LatencyHistogram, u64, u64)>,
}

fn tree_names(run: &Run) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for r in &run.tree.roots {
        r.walk(&mut Vec::new(), &mut |_, n| {
            names.insert(n.name.clone());
        });
    }
    names
}

fn known_phases(run: &Run) -> BTreeSet<String> {
    let mut k = tree_names(run);
    k.extend(run.calls.columns.iter().cloned());
    k
}

fn find_path<'a>(run: &'a Run, path: &[String]) -> Option<&'a TreeNode> {
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    run.tree.find(&p)
}

/// Checks that every name of `path` is a phase of `run` and, when the run has a tree and the
/// path has several names, that the path exists in it.
fn check_path(h: &Hypothesis, path: &[String], run: &Run, what: &str) -> Result<()> {
    let known = known_phases(run);
    if let Some(bad) = path.iter().find(|n| !known.contains(*n)) {
        let list = if known.is_empty() {
            "none (the run has no phases)".to_string()
        } else {
            known.iter().cloned().collect::<Vec<_>>().join(", ")
        };
        return Err(usage(format!(
            "hypothesis {}: unknown phase {bad:?} in {what}; known phases: {list}",
            h.id
        )));
    }
    if path.len() > 1 && !run.tree.roots.is_empty() && find_path(run, path).is_none() {
        return Err(usage(format!(
            "hypothesis {}: no phase path {} in {what}'s tree",
            h.id,
            path.join("/")
        )));
    }
    Ok(())
}

fn resolve(h: &Hypothesis, run: &Run, what: &str) -> Result<Target> {
    check_path(h, &h.phase, run, what)?;
    if let Some(of) = &h.of {
        check_path(h, of, run, what)?;
    }
    let col_of = |name: &String| run.calls.columns.iter().position(|c| c == name);
    let name = h.phase.last().expect("a path has a name");
    let col = col_of(name);
    let of_col =
        h.of.as_ref()
            .and_then(|p| col_of(p.last().expect("a path has a name")));
    // The root calls considered: those of the path's root when a path is given, else those of
    // every root phase under which the phase ever ran.
    let first = if h.phase.len() > 1 {
        col_of(&h.phase[0])
    } else {
        None
    };
    let roots: BTreeSet<u32> = match (first, col) {
        (Some(f), _) => [f as u32].into(),
        (None, Some(c)) => run
            .calls
            .rows
            .iter()
            .filter(|r| r.phase_calls.get(c).copied().unwrap_or(0) > 0)
            .map(|r| r.root)
            .collect(),
        (None, None) => BTreeSet::new(),
    };
    // Tree fallback: the node of the path, or every node of the phase.
    let mut nodes: Vec<&TreeNode> = Vec::new();
    if h.phase.len() > 1 {
        nodes.extend(find_path(run, &h.phase));
    } else {
        for r in &run.tree.roots {
            r.walk(&mut Vec::new(), &mut |_, n| {
                if &n.name == name {
                    nodes.push(n);
                }
            });
        }
    }
    let hist = if nodes.is_empty() {
        None
    } else {
        let mut hh = new_histogram();
        let (mut count, mut total) = (0u64, 0u64);
        for n in nodes {
            // Both histograms have the same bounds: adding cannot fail.
            hh.add(&n.hist).ok();
            count += n.count;
            total += n.total_ns;
        }
        Some((hh, count, total))
    };
    Ok(Target {
        col,
        of_col,
        roots,
        hist,
    })
}

/// An estimate with its interval and, when it came from a bootstrap, the replicates.
struct Estimate {
    value: f64,
    ci: (f64, f64),
    reps: Option<Vec<f64>>,
    n: u64,
    note: &'static str,
}

/// Why no estimate could be made.
struct NoEstimate(String);

fn rows<'a>(run: &'a Run, t: &'a Target) -> impl Iterator<Item = &'a CallRow> + 'a {
    run.calls
        .rows
        .iter()
        .filter(move |r| t.roots.contains(&r.root))
}

fn at<T: Copy + Default>(v: &[T], i: usize) -> T {
    v.get(i).copied().unwrap_or_default()
}

fn estimate(
    kind: Kind,
    h: &Hypothesis,
    run: &Run,
    t: &Target,
    confidence: f64,
    rng: &mut SplitMix64,
) -> Result<Estimate, NoEstimate> {
    let name = h.phase.join("/");
    let boot = |value: f64, reps: Vec<f64>, n: usize| Estimate {
        value,
        ci: stats::percentile_interval(reps.clone(), confidence),
        reps: Some(reps),
        n: n as u64,
        note: "",
    };
    match kind {
        Kind::Share | Kind::ShareDelta => {
            let Some(c) = t.col else {
                return Err(NoEstimate(format!(
                    "no per-call rows for {name}: a share needs the run's call table"
                )));
            };
            let (mut num, mut den) = (Vec::new(), Vec::new());
            for r in rows(run, t) {
                let d = match t.of_col {
                    Some(o) => at(&r.phase_ns, o),
                    None => r.total_ns,
                };
                if d > 0 {
                    num.push(at(&r.phase_ns, c) as f64);
                    den.push(d as f64);
                }
            }
            if num.is_empty() {
                return Err(NoEstimate(format!(
                    "no root call contains both {name} and {}",
                    h.of.as_ref()
                        .map(|o| o.join("/"))
                        .unwrap_or_else(|| "a root".into())
                )));
            }
            let value = 100.0 * num.iter().sum::<f64>() / den.iter().sum::<f64>();
            let reps = stats::bootstrap_ratio(&num, &den, rng)
                .into_iter()
                .map(|x| 100.0 * x)
                .collect();
            Ok(boot(value, reps, num.len()))
        }
        Kind::MeanUs | Kind::MeanDelta | Kind::P99Us | Kind::P99Delta => {
            let is_mean = matches!(kind, Kind::MeanUs | Kind::MeanDelta);
            let (mut ns, mut calls) = (Vec::new(), Vec::new());
            if let Some(c) = t.col {
                for r in rows(run, t) {
                    let k = at(&r.phase_calls, c);
                    if k > 0 {
                        ns.push(at(&r.phase_ns, c) as f64 / 1000.0);
                        calls.push(f64::from(k));
                    }
                }
            }
            if !ns.is_empty() {
                return Ok(if is_mean {
                    let value = ns.iter().sum::<f64>() / calls.iter().sum::<f64>();
                    boot(value, stats::bootstrap_ratio(&ns, &calls, rng), ns.len())
                } else {
                    let value = stats::quantile(&ns, 0.99);
                    boot(value, stats::bootstrap_quantile(&ns, 0.99, rng), ns.len())
                });
            }
            tree_estimate(is_mean, &name, t, confidence)
        }
        Kind::CountPerCall => {
            let Some(c) = t.col else {
                return Err(NoEstimate(format!(
                    "no per-call rows for {name}: count_per_call needs the run's call table"
                )));
            };
            let v: Vec<f64> = rows(run, t)
                .map(|r| f64::from(at(&r.phase_calls, c)))
                .collect();
            if v.is_empty() {
                return Err(NoEstimate(format!("{name} never ran in a root call")));
            }
            let value = v.iter().sum::<f64>() / v.len() as f64;
            Ok(boot(value, stats::bootstrap_mean(&v, rng), v.len()))
        }
    }
}

/// Mean or p99 from the merged tree histogram, when the run has no per-call rows for the
/// phase: the mean by the normal approximation (n is then the phase's call count), the p99
/// by the distribution-free order-statistic interval.
fn tree_estimate(
    is_mean: bool,
    name: &str,
    t: &Target,
    confidence: f64,
) -> Result<Estimate, NoEstimate> {
    let Some((hist, count, total)) = &t.hist else {
        return Err(NoEstimate(format!("{name} never ran in this run")));
    };
    if *count == 0 || hist.is_empty() {
        return Err(NoEstimate(format!("{name} never completed a call")));
    }
    let n = *count;
    if is_mean {
        let mean = *total as f64 / n as f64 / 1000.0;
        let z = stats::normal_quantile(1.0 - (1.0 - confidence) / 2.0);
        let se = hist.stdev() / 1000.0 / (n as f64).sqrt();
        Ok(Estimate {
            value: mean,
            ci: (mean - z * se, mean + z * se),
            reps: None,
            n,
            note: "from the tree's histogram (normal approximation)",
        })
    } else {
        let hn = hist.len();
        let (lo, hi) = stats::quantile_rank_interval(hn, 0.99, confidence);
        let q = |rank: u64| hist.value_at_quantile((rank as f64 + 1.0) / hn as f64) as f64 / 1000.0;
        Ok(Estimate {
            value: hist.value_at_quantile(0.99) as f64 / 1000.0,
            ci: (q(lo), q(hi)),
            reps: None,
            n,
            note: "from the tree's histogram (order-statistic interval, 1% value resolution)",
        })
    }
}

fn judge(
    h: &Hypothesis,
    value: f64,
    ci: (f64, f64),
    n: u64,
    min_calls: usize,
    confidence: f64,
    short: Option<String>,
) -> (Outcome, String) {
    let pct = format!("{:.0}% CI", confidence * 100.0);
    if let Some(s) = short {
        return (Outcome::Inconclusive, s);
    }
    if (n as usize) < min_calls {
        return (
            Outcome::Inconclusive,
            format!("only {n} root calls; need ≥ {min_calls}"),
        );
    }
    if !value.is_finite() || !ci.0.is_finite() || !ci.1.is_finite() {
        return (
            Outcome::Inconclusive,
            "the estimate is undefined".to_string(),
        );
    }
    match h.bound.standing(ci.0, ci.1) {
        Standing::Inside => (Outcome::Supported, format!("{pct} inside {}", h.bound_text)),
        Standing::Outside => (
            Outcome::Refuted,
            format!("{pct} entirely outside {}", h.bound_text),
        ),
        Standing::Straddles => (
            Outcome::Inconclusive,
            format!("{pct} straddles {}", h.bound_text),
        ),
    }
}

fn evaluate(
    h: &Hypothesis,
    run: &Run,
    base: Option<&Run>,
    targets: &(Target, Option<Target>),
    a: &CheckArgs,
) -> Verdict {
    let no = |reason: String| Verdict {
        hypothesis: h.clone(),
        measured: None,
        ci: None,
        outcome: Outcome::Inconclusive,
        reason,
        calls: 0,
    };
    let mut rng = SplitMix64::from_key(&format!("{}/run", h.id));
    let est = match estimate(h.kind, h, run, &targets.0, a.confidence, &mut rng) {
        Ok(e) => e,
        Err(NoEstimate(r)) => return no(r),
    };
    let (value, ci, n, short, note) = match (base, &targets.1) {
        (Some(base), Some(bt)) if h.kind.needs_base() => {
            let mut rng = SplitMix64::from_key(&format!("{}/base", h.id));
            let b = match estimate(h.kind, h, base, bt, a.confidence, &mut rng) {
                Ok(e) => e,
                Err(NoEstimate(r)) => return no(format!("base: {r}")),
            };
            let diff = |x: f64, y: f64| match h.kind {
                Kind::ShareDelta => x - y,
                _ => 100.0 * (x / y - 1.0),
            };
            let (Some(ra), Some(rb)) = (&est.reps, &b.reps) else {
                return no(
                    "a difference needs per-call rows in both runs (tree-only estimate)".into(),
                );
            };
            let reps: Vec<f64> = ra.iter().zip(rb).map(|(x, y)| diff(*x, *y)).collect();
            let ci = stats::percentile_interval(reps, a.confidence);
            let short = if (b.n as usize) < a.min_calls {
                Some(format!(
                    "only {} root calls in the base run; need ≥ {}",
                    b.n, a.min_calls
                ))
            } else {
                None
            };
            (diff(est.value, b.value), ci, est.n.min(b.n), short, "")
        }
        _ => (est.value, est.ci, est.n, None, est.note),
    };
    let (outcome, mut reason) = judge(h, value, ci, n, a.min_calls, a.confidence, short);
    if !note.is_empty() {
        let _ = write!(reason, " ({note})");
    }
    Verdict {
        hypothesis: h.clone(),
        measured: value.is_finite().then_some(value),
        ci: (ci.0.is_finite() && ci.1.is_finite()).then_some(ci),
        outcome,
        reason,
        calls: n,
    }
}

/// Runs `wprof check`.
pub fn run(a: CheckArgs) -> Result<i32> {
    if !(a.confidence > 0.0 && a.confidence < 1.0) {
        return Err(usage(format!(
            "--confidence must be between 0 and 1 (exclusive), not {}",
            a.confidence
        )));
    }
    let text = crate::privilege::read_to_string(&a.hypotheses)
        .map_err(|e| usage(format!("cannot read {}: {e}", a.hypotheses.display())))?;
    let hyps = hypothesis::parse_file(&text, &a.hypotheses.display().to_string())?;
    let run = crate::model::json::read_run_file(&a.run)?;
    let base = a
        .base
        .as_deref()
        .map(crate::model::json::read_run_file)
        .transpose()?;
    let run_name = a.run.display().to_string();
    let base_name = a.base.as_ref().map(|b| b.display().to_string());
    let mut targets = Vec::with_capacity(hyps.len());
    for h in &hyps {
        let t = resolve(h, &run, &run_name)?;
        let bt = match (&base, &base_name) {
            (Some(b), Some(name)) if h.kind.needs_base() => Some(resolve(h, b, name)?),
            _ => None,
        };
        if h.kind.needs_base() && bt.is_none() {
            return Err(usage(format!(
                "hypothesis {}: {} compares against a base run; give one: wprof check --hypotheses {} {} BASE.json",
                h.id,
                h.kind.key(),
                a.hypotheses.display(),
                a.run.display()
            )));
        }
        targets.push((t, bt));
    }
    let verdicts: Vec<Verdict> = hyps
        .iter()
        .zip(&targets)
        .map(|(h, t)| evaluate(h, &run, base.as_ref(), t, &a))
        .collect();
    crate::stdout::print(&crate::render::check::render_table(&verdicts, a.confidence))?;
    if let Some(path) = &a.json {
        let doc = crate::render::check::verdicts_json(
            &a.run,
            a.base.as_deref(),
            &verdicts,
            a.confidence,
            a.min_calls,
        );
        let mut s = serde_json::to_string_pretty(&doc)?;
        s.push('\n');
        crate::output_file::write(path, s.as_bytes())?;
    }
    let refuted = verdicts.iter().any(|v| v.outcome == Outcome::Refuted);
    Ok(if refuted {
        exit::CHECK_FAILED
    } else {
        exit::OK
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::CallTable;

    fn run_with(rows: usize, aux_permille: u64) -> Run {
        Run {
            calls: CallTable {
                columns: vec!["write".into(), "tuple_insert".into(), "aux".into()],
                rows: (0..rows as u64)
                    .map(|i| CallRow {
                        start_ns: i,
                        pid: 1,
                        tid: 1,
                        root: 0,
                        total_ns: 20_000,
                        phase_ns: vec![20_000, 10_000, 10 * (aux_permille + i % 5)],
                        phase_calls: vec![1, 1, 1],
                    })
                    .collect(),
                total_calls: rows as u64,
                capped: false,
            },
            ..Run::default()
        }
    }

    fn args() -> CheckArgs {
        CheckArgs {
            hypotheses: "h.toml".into(),
            run: "r.json".into(),
            base: None,
            json: None,
            min_calls: 30,
            confidence: 0.95,
        }
    }

    fn verdict(toml: &str, run: &Run, base: Option<&Run>) -> Verdict {
        let h = &hypothesis::parse_file(toml, "h.toml").unwrap()[0];
        let t = resolve(h, run, "run").unwrap();
        let bt = base.map(|b| resolve(h, b, "base").unwrap());
        evaluate(h, run, base, &(t, bt), &args())
    }

    #[test]
    fn share_mean_count_and_delta() {
        let run = run_with(200, 70);
        let v = verdict(
            "[[hypothesis]]\nid='A'\nphase='aux'\nof='tuple_insert'\nshare='5%..10%'\n",
            &run,
            None,
        );
        assert_eq!(v.outcome, Outcome::Supported, "{v:?}");
        assert!((v.measured.unwrap() - 7.2).abs() < 0.01);
        let v = verdict(
            "[[hypothesis]]\nid='A'\nphase='aux'\nmean_us='< 0.5'\n",
            &run,
            None,
        );
        assert_eq!(v.outcome, Outcome::Refuted, "{v:?}");
        let v = verdict(
            "[[hypothesis]]\nid='A'\nphase='aux'\ncount_per_call='== 1'\n",
            &run,
            None,
        );
        assert_eq!(v.outcome, Outcome::Supported, "{v:?}");
        let base = run_with(200, 30);
        let v = verdict(
            "[[hypothesis]]\nid='A'\nphase='aux'\nof='tuple_insert'\nshare_delta='>= +3'\n",
            &run,
            Some(&base),
        );
        assert_eq!(v.outcome, Outcome::Supported, "{v:?}");
        assert!((v.measured.unwrap() - 4.0).abs() < 0.01);
        let v = verdict(
            "[[hypothesis]]\nid='A'\nphase='aux'\nmean_delta='> +50%'\n",
            &run,
            Some(&base),
        );
        assert_eq!(v.outcome, Outcome::Supported, "{v:?}");
    }

    #[test]
    fn verdicts_are_deterministic() {
        let run = run_with(100, 70);
        let t = "[[hypothesis]]\nid='A'\nphase='aux'\np99_us='< 5'\n";
        let (a, b) = (verdict(t, &run, None), verdict(t, &run, None));
        assert_eq!((a.measured, a.ci), (b.measured, b.ci));
    }

    #[test]
    fn unknown_phase_lists_known_ones() {
        let run = run_with(10, 70);
        let h =
            &hypothesis::parse_file("[[hypothesis]]\nid='A'\nphase='nope'\nshare='1..2'\n", "h")
                .unwrap()[0];
        let e = resolve(h, &run, "r.json").err().unwrap().to_string();
        assert!(
            e.contains("hypothesis A") && e.contains("tuple_insert"),
            "{e}"
        );
    }
}
