//! The views of `wprof check`: the verdicts as a text table and as the `--json` document.
//!
//! In: the [`Verdict`]s (judged by analyze::check). Out: text, a JSON value.

use std::fmt::Write as _;
use std::path::Path;

use crate::model::{Hypothesis, Kind, Verdict};

fn fmt_value(kind: Kind, v: f64) -> String {
    match kind {
        Kind::Share => format!("{v:.2}%"),
        Kind::MeanUs | Kind::P99Us => format!("{v:.2} µs"),
        Kind::CountPerCall => format!("{v:.3}"),
        Kind::ShareDelta => format!("{v:+.2} pp"),
        Kind::MeanDelta | Kind::P99Delta => format!("{v:+.2}%"),
    }
}

fn test_text(h: &Hypothesis) -> String {
    let phase = h.phase.join("/");
    match (&h.of, h.kind) {
        (Some(of), _) => format!(
            "{} {phase} of {} {}",
            h.kind.key(),
            of.join("/"),
            h.bound_text
        ),
        (None, Kind::Share | Kind::ShareDelta) => {
            format!("{} {phase} of root {}", h.kind.key(), h.bound_text)
        }
        _ => format!("{} {phase} {}", h.kind.key(), h.bound_text),
    }
}

/// The verdicts as a text table.
pub fn render_table(verdicts: &[Verdict], confidence: f64) -> String {
    let header = [
        "ID".to_string(),
        "TEST".to_string(),
        "MEASURED".to_string(),
        format!("{:.0}% CI", confidence * 100.0),
        "VERDICT".to_string(),
        "REASON".to_string(),
    ];
    let mut lines = vec![header];
    for v in verdicts {
        let k = v.hypothesis.kind;
        lines.push([
            v.hypothesis.id.clone(),
            test_text(&v.hypothesis),
            v.measured.map(|x| fmt_value(k, x)).unwrap_or("-".into()),
            v.ci.map(|(l, h)| format!("[{}, {}]", fmt_value(k, l), fmt_value(k, h)))
                .unwrap_or("-".into()),
            v.outcome.as_str().to_string(),
            v.reason.clone(),
        ]);
    }
    let mut widths = [0usize; 6];
    for l in &lines {
        for (w, c) in widths.iter_mut().zip(l) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for (i, l) in lines.iter().enumerate() {
        let mut line = String::new();
        for (j, (c, w)) in l.iter().zip(widths).enumerate() {
            if j == 5 {
                line.push_str(c);
            } else {
                let pad = w - c.chars().count();
                let _ = write!(line, "{c}{}  ", " ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
        if i > 0 && !verdicts[i - 1].hypothesis.claim.is_empty() {
            let _ = writeln!(out, "    claim: {}", verdicts[i - 1].hypothesis.claim);
        }
    }
    out
}

/// The verdicts as the `--json` document.
pub fn verdicts_json(
    run: &Path,
    base: Option<&Path>,
    verdicts: &[Verdict],
    confidence: f64,
    min_calls: usize,
) -> serde_json::Value {
    let num = |x: Option<f64>| x.filter(|v| v.is_finite());
    serde_json::json!({
        "run": run.display().to_string(),
        "base": base.map(|b| b.display().to_string()),
        "confidence": confidence,
        "min_calls": min_calls,
        "verdicts": verdicts.iter().map(|v| serde_json::json!({
            "id": v.hypothesis.id,
            "claim": v.hypothesis.claim,
            "kind": v.hypothesis.kind.key(),
            "phase": v.hypothesis.phase.join("/"),
            "of": v.hypothesis.of.as_ref().map(|o| o.join("/")),
            "measured": num(v.measured),
            "ci_low": num(v.ci.map(|c| c.0)),
            "ci_high": num(v.ci.map(|c| c.1)),
            "unit": v.hypothesis.kind.unit(),
            "bound": v.hypothesis.bound_text,
            "verdict": v.outcome.as_str(),
            "reason": v.reason,
            "calls": v.calls,
        })).collect::<Vec<_>>(),
    })
}
