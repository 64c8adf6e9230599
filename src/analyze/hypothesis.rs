//! The hypothesis file of `wprof check`: TOML in, validated [`Hypothesis`] values out.
//!
//! Format and meaning: docs/hypotheses.md. Every malformed input becomes a
//! [`WprofError::Usage`] naming the hypothesis and quoting what did not parse.

use std::collections::HashSet;

use serde::Deserialize;

use crate::error::WprofError;
use crate::model::{Bound, Hypothesis, Kind};

/// Parses one number of a bound: optional sign, a float, an optional `%` (or `pp` for
/// percentage points) when `percent_ok`.
fn parse_number(s: &str, percent_ok: bool) -> Result<f64, String> {
    let s = s.trim();
    let (num, had_unit) = if let Some(n) = s.strip_suffix('%') {
        (n, true)
    } else if let Some(n) = s.strip_suffix("pp") {
        (n, true)
    } else {
        (s, false)
    };
    if had_unit && !percent_ok {
        return Err("a percentage is not allowed here".into());
    }
    let num = num.trim();
    let (plus, body) = match num.strip_prefix('+') {
        Some(b) => (true, b),
        None => (false, num),
    };
    if plus && body.starts_with(['+', '-']) {
        return Err(format!("{s:?} is not a number"));
    }
    // f64::from_str accepts "inf" and "NaN": a bound must be a finite number.
    match body.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        Ok(_) => Err(format!("{s:?} is not a finite number")),
        Err(_) => Err(format!("{s:?} is not a number")),
    }
}

/// Parses a bound: `a..b`, `< x`, `<= x`, `> x`, `>= x` or `== x`. Numbers may carry a sign
/// and, for percent-valued claims (`percent_ok`), a `%` or `pp` suffix.
pub fn parse_bound(text: &str, percent_ok: bool) -> Result<Bound, String> {
    let t = text.trim();
    for (op, make) in [
        ("<=", Bound::Le as fn(f64) -> Bound),
        (">=", Bound::Ge),
        ("==", Bound::Eq),
        ("<", Bound::Lt),
        (">", Bound::Gt),
    ] {
        if let Some(rest) = t.strip_prefix(op) {
            return parse_number(rest, percent_ok).map(make);
        }
    }
    if let Some((a, b)) = t.split_once("..") {
        let a = parse_number(a, percent_ok)?;
        let b = parse_number(b, percent_ok)?;
        if a > b {
            return Err(format!("the range is empty ({a} > {b})"));
        }
        return Ok(Bound::Range(a, b));
    }
    Err("expected a range `a..b` or a comparison `< x`, `<= x`, `> x`, `>= x`, `== x`".into())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRaw {
    #[serde(default)]
    hypothesis: Vec<HypRaw>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HypRaw {
    id: String,
    #[serde(default)]
    claim: Option<String>,
    phase: String,
    #[serde(default)]
    of: Option<String>,
    #[serde(default)]
    share: Option<String>,
    #[serde(default)]
    mean_us: Option<String>,
    #[serde(default)]
    p99_us: Option<String>,
    #[serde(default)]
    count_per_call: Option<String>,
    #[serde(default)]
    share_delta: Option<String>,
    #[serde(default)]
    mean_delta: Option<String>,
    #[serde(default)]
    p99_delta: Option<String>,
}

impl HypRaw {
    fn claims(&self) -> Vec<(Kind, &str)> {
        let vals = [
            &self.share,
            &self.mean_us,
            &self.p99_us,
            &self.count_per_call,
            &self.share_delta,
            &self.mean_delta,
            &self.p99_delta,
        ];
        Kind::ALL
            .iter()
            .zip(vals)
            .filter_map(|(k, v)| v.as_deref().map(|v| (*k, v)))
            .collect()
    }
}

fn split_path(p: &str) -> Vec<String> {
    p.split('/').map(|s| s.trim().to_string()).collect()
}

fn usage(msg: String) -> anyhow::Error {
    WprofError::Usage(msg).into()
}

/// Parses and validates a hypothesis file's text (`origin` names it in messages). Checks the
/// shape only; phase names are checked against a run by the caller.
pub fn parse_file(text: &str, origin: &str) -> anyhow::Result<Vec<Hypothesis>> {
    let raw: FileRaw = toml::from_str(text).map_err(|e| {
        // toml's messages span several lines (with a caret excerpt): keep the first.
        let msg = e.message().lines().next().unwrap_or("").to_string();
        let at = e
            .span()
            .map(|s| {
                let line = text[..s.start.min(text.len())].lines().count().max(1);
                format!(" (line {line})")
            })
            .unwrap_or_default();
        usage(format!("{origin}: invalid hypothesis file{at}: {msg}"))
    })?;
    if raw.hypothesis.is_empty() {
        return Err(usage(format!(
            "{origin}: no [[hypothesis]] entries (see docs/hypotheses.md)"
        )));
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(raw.hypothesis.len());
    for h in raw.hypothesis {
        let id = h.id.trim().to_string();
        if id.is_empty() {
            return Err(usage(format!("{origin}: a hypothesis has an empty id")));
        }
        if !seen.insert(id.clone()) {
            return Err(usage(format!(
                "{origin}: hypothesis id {id:?} is used twice"
            )));
        }
        let claims = h.claims();
        let (kind, text) = match claims.as_slice() {
            [(k, t)] => (*k, t.to_string()),
            [] => {
                return Err(usage(format!(
                    "hypothesis {id}: no claim; give exactly one of {}",
                    Kind::ALL.map(Kind::key).join(", ")
                )))
            }
            many => {
                return Err(usage(format!(
                    "hypothesis {id}: {} claims ({}); give exactly one",
                    many.len(),
                    many.iter()
                        .map(|(k, _)| k.key())
                        .collect::<Vec<_>>()
                        .join(", ")
                )))
            }
        };
        let bound = parse_bound(&text, kind.percent_ok()).map_err(|e| {
            usage(format!(
                "hypothesis {id}: bound {} = {text:?} does not parse: {e}",
                kind.key()
            ))
        })?;
        let phase = split_path(&h.phase);
        if phase.iter().any(String::is_empty) {
            return Err(usage(format!(
                "hypothesis {id}: phase {:?} has an empty name",
                h.phase
            )));
        }
        let of = match h.of {
            None => None,
            Some(o) => {
                if !matches!(kind, Kind::Share | Kind::ShareDelta) {
                    return Err(usage(format!(
                        "hypothesis {id}: `of` only applies to share and share_delta, not {}",
                        kind.key()
                    )));
                }
                let p = split_path(&o);
                if p.iter().any(String::is_empty) {
                    return Err(usage(format!(
                        "hypothesis {id}: of {o:?} has an empty name"
                    )));
                }
                Some(p)
            }
        };
        out.push(Hypothesis {
            id,
            claim: h.claim.unwrap_or_default(),
            phase,
            of,
            kind,
            bound,
            bound_text: text.trim().to_string(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_parse() {
        assert_eq!(parse_bound("5%..10%", true), Ok(Bound::Range(5.0, 10.0)));
        assert_eq!(parse_bound(" 5 .. 10 ", true), Ok(Bound::Range(5.0, 10.0)));
        assert_eq!(parse_bound("-2..+3.5", true), Ok(Bound::Range(-2.0, 3.5)));
        assert_eq!(parse_bound("< 20", false), Ok(Bound::Lt(20.0)));
        assert_eq!(parse_bound("<=20", false), Ok(Bound::Le(20.0)));
        assert_eq!(parse_bound("> 1e3", false), Ok(Bound::Gt(1000.0)));
        assert_eq!(parse_bound(">= +3", true), Ok(Bound::Ge(3.0)));
        assert_eq!(parse_bound(">= +3pp", true), Ok(Bound::Ge(3.0)));
        assert_eq!(parse_bound("> +10%", true), Ok(Bound::Gt(10.0)));
        assert_eq!(parse_bound("> -10%", true), Ok(Bound::Gt(-10.0)));
        assert_eq!(parse_bound("== 1", false), Ok(Bound::Eq(1.0)));
    }

    #[test]
    fn bad_bounds_are_refused() {
        for bad in [
            "", "5", "about 5", "< ", "<< 3", "10..5", "< 20%", "< inf", "< NaN", "1..x", "=< 3",
            "< ++3", "< +-3",
        ] {
            assert!(
                parse_bound(bad, false).is_err(),
                "{bad:?} parsed as {:?}",
                parse_bound(bad, false)
            );
        }
        assert!(parse_bound("5%..", true).is_err());
    }

    #[test]
    fn files_parse_and_validate() {
        let ok = r#"
[[hypothesis]]
id = "H1"
claim = "aux is 5-10%"
phase = "write/aux"
of = "tuple_insert"
share = "5%..10%"
"#;
        let h = parse_file(ok, "h.toml").unwrap();
        assert_eq!(h[0].phase, ["write", "aux"]);
        assert_eq!(h[0].of.as_deref(), Some(&["tuple_insert".to_string()][..]));
        assert_eq!(h[0].bound, Bound::Range(5.0, 10.0));

        let err = |t: &str| parse_file(t, "h.toml").unwrap_err().to_string();
        assert!(err("").contains("no [[hypothesis]]"));
        assert!(err("[[hypothesis]]\nid='A'\nphase='p'\n").contains("no claim"));
        assert!(
            err("[[hypothesis]]\nid='A'\nphase='p'\nshare='1..2'\nmean_us='<3'\n")
                .contains("2 claims")
        );
        let e = err("[[hypothesis]]\nid='A'\nphase='p'\nmean_us='about 3'\n");
        assert!(
            e.contains("hypothesis A") && e.contains("\"about 3\""),
            "{e}"
        );
        assert!(err("[[hypothesis]]\nid='A'\nphase='p'\nsahre='1..2'\n").contains("line"));
        let dup = "[[hypothesis]]\nid='A'\nphase='p'\nshare='1..2'\n";
        assert!(err(&format!("{dup}{dup}")).contains("used twice"));
        assert!(!err("[[hypothesis]]\nid='A'\nphase='p'\nsahre='1..2'\n").contains('\n'));
    }
}
