//! The `--fail-if` expressions of `wprof compare`, and the percentages of `--min-effect`.
//!
//! Grammar (docs/compare.md): `<node-path|total>.<stat> <op> <+/-N%>` where `stat` is one of
//! `mean`, `p50`, `p99`, `count`, `total`, `self`, `op` one of `>`, `>=`, `<`, `<=`, and the
//! right side a relative change of the statistic from the base run to the new run.

use std::fmt;

/// A statistic of an aligned node that a threshold tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    /// Mean duration of a call.
    Mean,
    /// Median duration of a call.
    P50,
    /// 99th percentile of the call duration.
    P99,
    /// Number of completed calls.
    Count,
    /// Total time in the node per root call.
    Total,
    /// Self time of the node per root call.
    SelfTime,
}

impl Stat {
    fn parse(s: &str) -> Option<Stat> {
        Some(match s {
            "mean" => Stat::Mean,
            "p50" => Stat::P50,
            "p99" => Stat::P99,
            "count" => Stat::Count,
            "total" => Stat::Total,
            "self" => Stat::SelfTime,
            _ => return None,
        })
    }
}

impl fmt::Display for Stat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stat::Mean => "mean",
            Stat::P50 => "p50",
            Stat::P99 => "p99",
            Stat::Count => "count",
            Stat::Total => "total",
            Stat::SelfTime => "self",
        })
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<`
    Lt,
    /// `<=`
    Le,
}

impl Op {
    /// Whether `lhs op rhs` holds.
    pub fn holds(self, lhs: f64, rhs: f64) -> bool {
        match self {
            Op::Gt => lhs > rhs,
            Op::Ge => lhs >= rhs,
            Op::Lt => lhs < rhs,
            Op::Le => lhs <= rhs,
        }
    }
}

/// Which node a threshold is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The root node(s) of the run, taken together.
    Total,
    /// A node by its path of names (or roles with `--by role`) from a root.
    Path(Vec<String>),
}

/// A parsed `--fail-if` expression.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    /// The expression as given.
    pub expr: String,
    /// The node.
    pub target: Target,
    /// The statistic.
    pub stat: Stat,
    /// The operator.
    pub op: Op,
    /// The relative change, as a fraction (+10% is 0.10).
    pub limit: f64,
}

impl Threshold {
    /// Whether a relative change `delta` (new / base - 1) crosses this threshold.
    pub fn crossed(&self, delta: f64) -> bool {
        self.op.holds(delta, self.limit)
    }
}

/// Parses a `--fail-if` expression; the error message quotes it and says what is expected.
pub fn parse(expr: &str) -> Result<Threshold, String> {
    let bad = |why: &str| {
        format!(
            "--fail-if '{expr}': {why}; expected '<node-path|total>.<mean|p50|p99|count|total|self> <op> <+/-N%>', e.g. 'total.p99 > +10%'"
        )
    };
    let (pos, op, len) = ["<=", ">=", "<", ">"]
        .iter()
        .filter_map(|o| expr.find(o).map(|p| (p, *o, o.len())))
        .min_by_key(|(p, o, _)| (*p, std::cmp::Reverse(o.len())))
        .map(|(p, o, l)| {
            let op = match o {
                "<=" => Op::Le,
                ">=" => Op::Ge,
                "<" => Op::Lt,
                _ => Op::Gt,
            };
            (p, op, l)
        })
        .ok_or_else(|| bad("no operator (>, >=, <, <=)"))?;
    let lhs = expr[..pos].trim();
    let rhs = expr[pos + len..].trim();
    let (path, stat) = lhs
        .rsplit_once('.')
        .ok_or_else(|| bad("no '.<stat>' after the node"))?;
    let stat = Stat::parse(stat.trim())
        .ok_or_else(|| bad(&format!("unknown statistic '{}'", stat.trim())))?;
    let path = path.trim();
    if path.is_empty() {
        return Err(bad("no node before the statistic"));
    }
    let target = if path == "total" {
        Target::Total
    } else {
        let parts: Vec<String> = path.split('/').map(|p| p.trim().to_string()).collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(bad("empty name in the node path"));
        }
        Target::Path(parts)
    };
    let limit = rhs
        .strip_suffix('%')
        .map(str::trim)
        .and_then(|n| n.parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .ok_or_else(|| bad(&format!("'{rhs}' is not a percentage like +10% or -5%")))?
        / 100.0;
    Ok(Threshold {
        expr: expr.to_string(),
        target,
        stat,
        op,
        limit,
    })
}

/// Parses a percentage such as `5%` (or a bare `5`, read as percent) into a fraction.
pub fn parse_percent(s: &str) -> Option<f64> {
    let t = s.trim();
    let n = t.strip_suffix('%').unwrap_or(t).trim();
    n.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| v / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_total_and_paths() {
        let t = parse("total.p99 > +10%").unwrap();
        assert_eq!(t.target, Target::Total);
        assert_eq!(t.stat, Stat::P99);
        assert_eq!(t.op, Op::Gt);
        assert!((t.limit - 0.10).abs() < 1e-12);

        let t = parse("write_record/persist_block/compress_block.mean>=+5.5%").unwrap();
        assert_eq!(
            t.target,
            Target::Path(vec![
                "write_record".into(),
                "persist_block".into(),
                "compress_block".into()
            ])
        );
        assert_eq!(t.stat, Stat::Mean);
        assert_eq!(t.op, Op::Ge);
        assert!((t.limit - 0.055).abs() < 1e-12);

        let t = parse("a.self < -5%").unwrap();
        assert_eq!(t.stat, Stat::SelfTime);
        assert_eq!(t.op, Op::Lt);
        assert!((t.limit + 0.05).abs() < 1e-12);
        assert!(t.crossed(-0.06));
        assert!(!t.crossed(-0.04));

        let t = parse("a.count <= 0%").unwrap();
        assert_eq!(t.op, Op::Le);
        assert!(t.crossed(0.0));
    }

    #[test]
    fn names_with_dots_keep_them() {
        let t = parse("lib.so_fn.total > 10%").unwrap();
        assert_eq!(t.target, Target::Path(vec!["lib.so_fn".into()]));
        assert_eq!(t.stat, Stat::Total);
    }

    #[test]
    fn rejects_bad_expressions_quoting_them() {
        for bad in [
            "",
            "total.p99",
            "total.p98 > 10%",
            "total > 10%",
            ".mean > 10%",
            "total.mean > 10",
            "total.mean > ten%",
            "a//b.mean > 1%",
            "total.mean > %",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(&format!("'{bad}'")), "{e}");
        }
    }

    #[test]
    fn percentages() {
        assert_eq!(parse_percent("5%"), Some(0.05));
        assert_eq!(parse_percent("5"), Some(0.05));
        assert_eq!(parse_percent(" 12.5 % "), Some(0.125));
        assert_eq!(parse_percent("-1%"), None);
        assert_eq!(parse_percent("x"), None);
    }
}
