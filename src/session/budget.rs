//! `--max-overhead`: which phases to move from probes to sampling so the probes' cost fits
//! the budget, keeping the tree's roots exact.
//!
//! Each second the overhead watch measures every phase's probe hits; above the budget the
//! plan moves the phases whose probes cost most each second (hot calls, and short ones when
//! two cost alike), one after another, until what stays fits. Only leaves of the tree move,
//! never a root: a moved leaf is then measured by CPU samples inside its probed parent
//! (`aggregate::sampled`), and the parent's calls stay exact.

/// What one phase's probes cost over the last second.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseLoad {
    /// Phase id.
    pub id: u32,
    /// Phase name, for what the plan says.
    pub name: String,
    /// Completed calls a second.
    pub calls_per_s: f64,
    /// What one call's probes cost, ns.
    pub pair_ns: f64,
    /// Whether the budget may move it: `measure = "auto"`, probed, a leaf and not a root.
    pub movable: bool,
}

impl PhaseLoad {
    /// Probe time a second, ns.
    pub fn cost_ns_per_s(&self) -> f64 {
        self.calls_per_s * self.pair_ns
    }
}

/// A phase the budget moved to sampling during the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Moved {
    /// Phase id.
    pub id: u32,
    /// Seconds into the run.
    pub after_s: f64,
    /// Its calls a second when it moved.
    pub calls_per_s: f64,
    /// Returns its return probes saw between its entry probes coming off and theirs: calls
    /// that began after the entry probe was gone, not lost frames (left out of the counts).
    pub unmatched_while_moving: u64,
}

/// What the plan decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Phases to move to sampling, costliest first.
    pub moves: Vec<u32>,
    /// The overhead expected once they moved, % of the traced processes' CPU time.
    pub projected_pct: f64,
    /// Whether that fits the budget.
    pub fits: bool,
}

/// Moves the costliest movable phases until the probes' share of `cpu_ns_per_s` (the
/// traced processes' CPU time a second) is at most `budget_pct`.
pub fn plan(loads: &[PhaseLoad], cpu_ns_per_s: f64, budget_pct: f64) -> Plan {
    let pct = |ns: f64| {
        if cpu_ns_per_s > 0.0 {
            ns / cpu_ns_per_s * 100.0
        } else {
            0.0
        }
    };
    let mut left: f64 = loads.iter().map(PhaseLoad::cost_ns_per_s).sum();
    let mut movable: Vec<&PhaseLoad> = loads
        .iter()
        .filter(|l| l.movable && l.calls_per_s > 0.0)
        .collect();
    movable.sort_by(|a, b| {
        b.cost_ns_per_s()
            .total_cmp(&a.cost_ns_per_s())
            .then(a.id.cmp(&b.id))
    });
    let mut moves = Vec::new();
    for l in movable {
        if pct(left) <= budget_pct {
            break;
        }
        left -= l.cost_ns_per_s();
        moves.push(l.id);
    }
    Plan {
        moves,
        projected_pct: pct(left.max(0.0)),
        fits: pct(left) <= budget_pct,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(id: u32, calls: f64, pair: f64, movable: bool) -> PhaseLoad {
        PhaseLoad {
            id,
            name: format!("p{id}"),
            calls_per_s: calls,
            pair_ns: pair,
            movable,
        }
    }

    #[test]
    fn moves_the_costliest_leaves_until_the_rest_fits() {
        // One CPU second: root 1% (never moves), leaves 20%, 5%, 2%.
        let loads = [
            load(0, 10_000.0, 1_000.0, false),
            load(1, 100_000.0, 2_000.0, true),
            load(2, 50_000.0, 1_000.0, true),
            load(3, 20_000.0, 1_000.0, true),
        ];
        let p = plan(&loads, 1e9, 5.0);
        assert_eq!(p.moves, [1, 2]);
        assert!((p.projected_pct - 3.0).abs() < 1e-9, "{p:?}");
        assert!(p.fits);
        // Already within budget: nothing moves.
        assert_eq!(plan(&loads, 1e9, 50.0).moves, Vec::<u32>::new());
    }

    #[test]
    fn says_when_what_may_not_move_is_over_budget_alone() {
        let loads = [
            load(0, 100_000.0, 1_000.0, false),
            load(1, 1_000.0, 1_000.0, true),
        ];
        let p = plan(&loads, 1e9, 5.0);
        assert_eq!(p.moves, [1]);
        assert!(!p.fits);
        assert!((p.projected_pct - 10.0).abs() < 1e-9);
        // No CPU time measured: nothing to say, nothing moves.
        assert!(plan(&loads, 0.0, 5.0).fits);
    }
}
