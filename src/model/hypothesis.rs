//! The hypotheses of `wprof check` and the verdicts on them: what a claim measures, its bound,
//! and what the run showed. analyze parses the file and judges (analyze::hypothesis,
//! analyze::check); render shows the verdicts (render::check).

use std::fmt;

/// What a hypothesis measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The phase's share of `of` (or of the root call), percent.
    Share,
    /// Mean time of one call of the phase, µs.
    MeanUs,
    /// 99th percentile of the phase's time per root call, µs.
    P99Us,
    /// Mean number of calls of the phase per root call.
    CountPerCall,
    /// Share minus the base run's share, percentage points.
    ShareDelta,
    /// Relative change of the mean per call against the base run, percent.
    MeanDelta,
    /// Relative change of the p99 against the base run, percent.
    P99Delta,
}

impl Kind {
    /// Every kind, in the order of the TOML keys.
    pub const ALL: [Kind; 7] = [
        Kind::Share,
        Kind::MeanUs,
        Kind::P99Us,
        Kind::CountPerCall,
        Kind::ShareDelta,
        Kind::MeanDelta,
        Kind::P99Delta,
    ];

    /// The TOML key (and the `kind` of the JSON verdict).
    pub fn key(self) -> &'static str {
        match self {
            Kind::Share => "share",
            Kind::MeanUs => "mean_us",
            Kind::P99Us => "p99_us",
            Kind::CountPerCall => "count_per_call",
            Kind::ShareDelta => "share_delta",
            Kind::MeanDelta => "mean_delta",
            Kind::P99Delta => "p99_delta",
        }
    }

    /// Whether the claim compares against a base run.
    pub fn needs_base(self) -> bool {
        matches!(self, Kind::ShareDelta | Kind::MeanDelta | Kind::P99Delta)
    }

    /// The unit the value and the bound are in, for display.
    pub fn unit(self) -> &'static str {
        match self {
            Kind::Share | Kind::MeanDelta | Kind::P99Delta => "%",
            Kind::MeanUs | Kind::P99Us => "µs",
            Kind::CountPerCall => "",
            Kind::ShareDelta => "pp",
        }
    }

    /// Whether a `%` suffix is allowed on the bound's numbers (they are percents anyway).
    pub fn percent_ok(self) -> bool {
        matches!(
            self,
            Kind::Share | Kind::MeanDelta | Kind::P99Delta | Kind::ShareDelta
        )
    }
}

/// A bound on the measured value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    /// `a..b`, both ends included.
    Range(f64, f64),
    /// `< x`.
    Lt(f64),
    /// `<= x`.
    Le(f64),
    /// `> x`.
    Gt(f64),
    /// `>= x`.
    Ge(f64),
    /// `== x` (to a relative 1e-9).
    Eq(f64),
}

/// How an interval stands against a bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Every value of the interval satisfies the bound.
    Inside,
    /// No value of the interval satisfies the bound.
    Outside,
    /// Some do, some do not.
    Straddles,
}

impl Bound {
    /// Whether `x` satisfies the bound.
    pub fn holds(&self, x: f64) -> bool {
        match *self {
            Bound::Range(a, b) => a <= x && x <= b,
            Bound::Lt(v) => x < v,
            Bound::Le(v) => x <= v,
            Bound::Gt(v) => x > v,
            Bound::Ge(v) => x >= v,
            Bound::Eq(v) => (x - v).abs() <= 1e-9 * v.abs().max(1.0),
        }
    }

    /// How the closed interval `[lo, hi]` stands against the bound. The satisfying set is an
    /// interval, so checking the ends (and, for a range or `==`, overlap) decides it.
    pub fn standing(&self, lo: f64, hi: f64) -> Standing {
        let (l, h) = (self.holds(lo), self.holds(hi));
        if l && h {
            return Standing::Inside;
        }
        if l || h {
            return Standing::Straddles;
        }
        // Neither end satisfies: the interval may still contain the whole satisfying set.
        let contains = |x: f64| lo <= x && x <= hi;
        let overlaps = match *self {
            Bound::Range(a, b) => contains(a) || contains(b),
            Bound::Eq(v) => contains(v),
            // For a half-line, both ends outside means the whole interval is outside.
            _ => false,
        };
        if overlaps {
            Standing::Straddles
        } else {
            Standing::Outside
        }
    }
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bound::Range(a, b) => write!(f, "{a}..{b}"),
            Bound::Lt(v) => write!(f, "< {v}"),
            Bound::Le(v) => write!(f, "<= {v}"),
            Bound::Gt(v) => write!(f, "> {v}"),
            Bound::Ge(v) => write!(f, ">= {v}"),
            Bound::Eq(v) => write!(f, "== {v}"),
        }
    }
}

/// One validated hypothesis.
#[derive(Debug, Clone, PartialEq)]
pub struct Hypothesis {
    /// Its id (unique in the file).
    pub id: String,
    /// The claim in words (empty when not given).
    pub claim: String,
    /// The phase, as a path of names (one name, or `a/b/c` split).
    pub phase: Vec<String>,
    /// The denominator of a share, as a path of names; `None` = the root call.
    pub of: Option<Vec<String>>,
    /// What is measured.
    pub kind: Kind,
    /// The bound, as parsed.
    pub bound: Bound,
    /// The bound as written.
    pub bound_text: String,
}

/// The outcome of one hypothesis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The whole confidence interval satisfies the bound.
    Supported,
    /// The whole confidence interval violates the bound.
    Refuted,
    /// The interval straddles the bound, or there are too few calls to tell.
    Inconclusive,
}

impl Outcome {
    /// The word printed and written to JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Supported => "SUPPORTED",
            Outcome::Refuted => "REFUTED",
            Outcome::Inconclusive => "INCONCLUSIVE",
        }
    }
}

/// The verdict on one hypothesis.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The hypothesis.
    pub hypothesis: Hypothesis,
    /// The point estimate, in the claim's unit.
    pub measured: Option<f64>,
    /// The confidence interval of the estimate.
    pub ci: Option<(f64, f64)>,
    /// The outcome.
    pub outcome: Outcome,
    /// Why, in words.
    pub reason: String,
    /// Root calls (or phase calls, for the tree fallback) the estimate rests on; for a
    /// difference, the smaller of the two runs' counts.
    pub calls: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standing_of_intervals() {
        let r = Bound::Range(5.0, 10.0);
        assert_eq!(r.standing(6.0, 8.0), Standing::Inside);
        assert_eq!(r.standing(4.0, 8.0), Standing::Straddles);
        assert_eq!(r.standing(1.0, 20.0), Standing::Straddles);
        assert_eq!(r.standing(11.0, 12.0), Standing::Outside);
        let lt = Bound::Lt(20.0);
        assert_eq!(lt.standing(10.0, 19.9), Standing::Inside);
        assert_eq!(lt.standing(10.0, 20.0), Standing::Straddles);
        assert_eq!(lt.standing(20.0, 30.0), Standing::Outside);
        let eq = Bound::Eq(1.0);
        assert_eq!(eq.standing(1.0, 1.0), Standing::Inside);
        assert_eq!(eq.standing(0.9, 1.1), Standing::Straddles);
        assert_eq!(eq.standing(1.1, 1.2), Standing::Outside);
    }
}
