//! `--max-overhead`: which phases to move from probes to sampling so the probes' cost fits
//! the budget, keeping the tree's roots exact.
//!
//! Each second the overhead watch measures every phase's probe hits; above the budget the
//! plan moves the phases whose probes cost most each second (hot calls, and short ones when
//! two cost alike), one after another, until what stays fits. Only leaves of the tree move,
//! never a root: a moved leaf is then measured by CPU samples inside its probed parent
//! (`aggregate::sampled`), and the parent's calls stay exact. When nothing may move and the
//! rest is still over, the rest is probed part of each second ([`super::duty`]).
//!
//! In: each phase's probe hits and cost a second ([`PhaseLoad`]), the traced processes'
//! CPU time and the budget. Out: a [`Plan`] (the phases to move, the share left), and during
//! a run the [`Keeper`] that applies it to the tracer and says what moved ([`Moved`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::duty::{self, DutyCycle, Switch};
use super::insitu::{Epochs, Step};
use super::overhead::{unmatched_by_phase, OverheadWatch};
use super::trace_loop::EndReason;
use crate::aggregate::insitu_cuts::{self, Cut};
use crate::aggregate::Aggregator;
use crate::attach::{Detaching, Tracer};
use crate::model::profile::Measure;
use crate::resolve::ResolvedPhase;

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

/// What a phase's probes cost: (calls a second, probe ns a call), by phase id.
pub type Rates<'a> = &'a dyn Fn(u32) -> (f64, f64);

/// What each phase still probed costs, and whether it may move: `measure = "auto"`, not a
/// kernel phase, at most [`ROOT_SHARE_MAX`] of its calls roots (`edges`, from
/// `Aggregator::phase_edges`), and no child still probed (`gone` are the phases moved, or
/// about to).
pub fn loads(
    phases: &[ResolvedPhase],
    edges: &HashMap<(Option<u32>, u32), u64>,
    gone: &[u32],
    rates: Rates<'_>,
) -> Vec<PhaseLoad> {
    let root_share = |id: u32| root_share(edges, id);
    let has_child = |id: u32| {
        edges
            .keys()
            .any(|(p, c)| *p == Some(id) && !gone.contains(c))
    };
    phases
        .iter()
        .filter(|p| p.is_probed() && !gone.contains(&p.id))
        .map(|p| {
            let (calls_per_s, pair_ns) = rates(p.id);
            PhaseLoad {
                id: p.id,
                name: p.phase.name.clone(),
                calls_per_s,
                pair_ns,
                // A kernel phase's tracepoints are not links of its own: sampling could not
                // take them off (and user stacks never show a syscall's function).
                movable: p.phase.measure == Measure::Auto
                    && p.kernel.is_none()
                    && root_share(p.id) <= ROOT_SHARE_MAX
                    && !has_child(p.id),
            }
        })
        .collect()
}

/// The share of phase `id`'s completed calls that were roots of the tree (`edges`, from
/// `Aggregator::phase_edges`); 1 for a root with no completed call yet.
pub fn root_share(edges: &HashMap<(Option<u32>, u32), u64>, id: u32) -> f64 {
    let (mut root, mut all) = (0u64, 0u64);
    for ((parent, phase), calls) in edges {
        if *phase == id {
            all += calls;
            if parent.is_none() {
                root += calls;
            }
        }
    }
    if all == 0 {
        return if edges.contains_key(&(None, id)) {
            1.0
        } else {
            0.0
        };
    }
    root as f64 / all as f64
}

/// Every phase to move so the rest fits `budget_pct` of `cpu_ns_per_s`: leaves first; a
/// parent whose children all moved is a leaf in the next round, so a whole subtree can move
/// at once. `moved` are the phases already moved.
pub fn plan_moves(
    phases: &[ResolvedPhase],
    edges: &HashMap<(Option<u32>, u32), u64>,
    moved: &[u32],
    rates: Rates<'_>,
    cpu_ns_per_s: f64,
    budget_pct: f64,
) -> Plan {
    let mut moves: Vec<u32> = Vec::new();
    loop {
        let gone: Vec<u32> = moved.iter().chain(&moves).copied().collect();
        let p = plan(
            &loads(phases, edges, &gone, rates),
            cpu_ns_per_s,
            budget_pct,
        );
        let done = p.moves.is_empty() || p.fits;
        moves.extend(p.moves);
        if done {
            return Plan {
                moves,
                projected_pct: p.projected_pct,
                fits: p.fits,
            };
        }
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

/// A phase may move when at most this share of its calls were roots of the tree (a phase
/// that is also reached outside its usual parent, e.g. PostgreSQL's XLogInsert).
const ROOT_SHARE_MAX: f64 = 0.1;

/// How long probes taken off keep their return probes after their entry probes, so the calls
/// in flight return meanwhile: twice the slowest p99 of the phases, within these bounds.
/// Every call that begins meanwhile still traps on its return: kept short for hot phases.
const SETTLE_MIN: Duration = Duration::from_millis(1);
const SETTLE_MAX: Duration = Duration::from_millis(50);

/// How long to keep the return probes of `phases` after their entries came off.
fn settle(agg: &Aggregator, phases: &[u32]) -> Duration {
    Duration::from_nanos(agg.p99_of(phases).saturating_mul(2)).clamp(SETTLE_MIN, SETTLE_MAX)
}

/// After a switch of probes, the returns counted as unmatched within this time came from
/// calls that began while the entry probes were off (not lost frames): they are excused.
const EXCUSE_WINDOW: Duration = Duration::from_millis(50);

/// Keeps a run within `--max-overhead`: moves phases to sampling, then duty-cycles what
/// stays probed, and only then gives up.
pub struct Keeper<'a> {
    phases: &'a [ResolvedPhase],
    started: Instant,
    /// Phases moved to sampling, in order.
    pub moved: Vec<Moved>,
    duty: Option<DutyCycle>,
    /// When the duty cycle began, seconds into the run (the probes were live before).
    duty_after: Duration,
    /// Under a duty cycle, when the probes were live.
    windows: duty::LiveWindows,
    /// Per phase: unmatched returns that came from switching probes.
    excused: Vec<u64>,
    /// Unmatched returns per phase when the last switch began, and when it ended.
    mark: Option<(Vec<u64>, Instant)>,
    /// The in-situ check's epochs (`--in-situ`), the phases a light epoch takes off, and how
    /// many light epochs were cut so far (they take the tree's levels in turn).
    epochs: Option<Epochs>,
    light_phases: Vec<u32>,
    cut_turn: usize,
    /// A light epoch's probes on their way off, and its cut: the epoch begins once they are.
    detaching: Option<(Detaching, Cut)>,
    /// Moved phases' probes on their way off: the kernel's grace period passes on a thread of
    /// its own while the run goes on (their breakpoints are gone at its start).
    moving: Vec<Detaching>,
    /// Whether the CPU sampler pauses with the probes (it samples only for the budget's
    /// moved phases, not for a CPU profile the command line asked for).
    sampler_follows: bool,
}

impl<'a> Keeper<'a> {
    /// A keeper for the run's phases.
    pub fn new(phases: &'a [ResolvedPhase]) -> Keeper<'a> {
        Keeper {
            phases,
            started: Instant::now(),
            moved: Vec::new(),
            duty: None,
            duty_after: Duration::ZERO,
            windows: duty::LiveWindows::default(),
            excused: vec![0; phases.iter().map(|p| p.id as usize + 1).max().unwrap_or(0)],
            mark: None,
            epochs: None,
            light_phases: Vec::new(),
            cut_turn: 0,
            detaching: None,
            moving: Vec::new(),
            sampler_follows: false,
        }
    }

    /// Also pauses the CPU sampler while a duty cycle has the probes off (see
    /// `Tracer::pause_sampling`).
    pub fn with_sampler_following_the_probes(mut self) -> Keeper<'a> {
        self.sampler_follows = true;
        self
    }

    /// The share of time the CPU sampler runs: the duty cycle's live fraction when it
    /// follows the probes, else all of it.
    pub fn sampler_fraction(&self) -> f64 {
        match &self.duty {
            Some(d) if self.sampler_follows => d.fraction,
            _ => 1.0,
        }
    }

    /// Also runs the in-situ check's epochs (`--in-situ`).
    pub fn with_in_situ(mut self) -> Keeper<'a> {
        self.epochs = Some(Epochs::start());
        self
    }

    /// Whether what stays probed is live only part of each second.
    pub fn duty_cycling(&self) -> bool {
        self.duty.is_some()
    }

    /// Phases probed now (not moved to sampling).
    fn probed(&self) -> Vec<u32> {
        self.probed_phases().map(|p| p.id).collect()
    }

    /// [`Keeper::probed`], the phases themselves.
    fn probed_phases(&self) -> impl Iterator<Item = &ResolvedPhase> {
        self.phases
            .iter()
            .filter(|p| p.is_probed() && !self.moved.iter().any(|m| m.id == p.id))
    }

    /// The share of each cycle the probes that stay are live (1 without a duty cycle).
    pub fn live_fraction(&self) -> f64 {
        self.duty.as_ref().map_or(1.0, |d| d.fraction)
    }

    /// Call after every drain: runs the duty cycle and settles the excused returns.
    /// `switched(live, tracer)` hears when the probes change: just before a pause starts
    /// taking them off (their breakpoints go first, the kernel's grace period after), just
    /// after a resume put them back.
    pub fn poll(
        &mut self,
        tracer: &mut Tracer,
        agg: &mut Aggregator,
        mut switched: impl FnMut(bool, &mut Tracer),
    ) {
        if self
            .mark
            .as_ref()
            .is_some_and(|(_, at)| at.elapsed() >= EXCUSE_WINDOW)
        {
            self.excuse(tracer);
        }
        self.step_moves();
        self.step_epochs(tracer, agg);
        let Some(switch) = self.duty.as_mut().and_then(DutyCycle::poll) else {
            return;
        };
        if switch == Switch::Pause {
            switched(false, tracer);
            self.windows.close(duty::unix_ns());
        }
        let ids = self.probed();
        let wait = settle(agg, &ids);
        let follows = self.sampler_follows;
        let warn = |done: anyhow::Result<()>| {
            if let Err(e) = done {
                eprintln!("wprof: warning: duty cycle: {e:#}");
            }
        };
        let done = self.switching(tracer, |t| {
            if follows {
                warn(t.pause_sampling(switch == Switch::Pause));
            }
            // sched_switch follows the probes: on before they are back, off once they are.
            match switch {
                Switch::Pause => {
                    let queued = t.pause_phases(&ids, wait);
                    warn(t.pause_off_cpu(true));
                    queued
                }
                Switch::Resume => {
                    warn(t.pause_off_cpu(false));
                    t.resume_phases(&ids).map(|_| Vec::new())
                }
            }
        });
        match done {
            Ok(queued) => {
                queued.iter().for_each(|e| agg.add(e));
                if switch == Switch::Resume {
                    switched(true, tracer);
                    self.windows.open(duty::unix_ns());
                }
            }
            Err(e) => eprintln!("wprof: warning: duty cycle: {e:#}"),
        }
    }

    /// Forgets the moves whose probes are off; while some are still going, the returns that
    /// find no frame are still the switch's (excused).
    fn step_moves(&mut self) {
        let (done, going): (Vec<Detaching>, Vec<Detaching>) =
            self.moving.drain(..).partition(Detaching::done);
        done.into_iter().for_each(Detaching::wait);
        if !going.is_empty() {
            self.extend_excuse();
        }
        self.moving = going;
    }

    /// The in-situ epochs: a light one takes off every probed phase below its cut, the cuts
    /// taking the tree's levels in turn (`aggregate::insitu_cuts`). The probes come off in the
    /// background; the epoch begins when they are off.
    fn step_epochs(&mut self, tracer: &mut Tracer, agg: &mut Aggregator) {
        if let Some((d, cut)) = self.detaching.take() {
            // Returns that find no frame meanwhile are the switch's: still excused.
            self.extend_excuse();
            if !d.done() {
                self.detaching = Some((d, cut));
                return;
            }
            d.wait();
            if let Some(l) = agg.light_epochs() {
                l.begin(super::monotonic_ns(), &cut);
            }
            if let Some(e) = self.epochs.as_mut() {
                e.switched();
            }
            return;
        }
        let Some(step) = self.epochs.as_mut().and_then(Epochs::poll) else {
            return;
        };
        let done = match step {
            Step::GoLight => {
                let detachable: Vec<u32> = self
                    .probed_phases()
                    .filter(|p| p.kernel.is_none())
                    .map(|p| p.id)
                    .collect();
                let cuts = insitu_cuts::plan(&agg.node_shape(), &detachable);
                let turn = insitu_cuts::cut_for_turn(self.cut_turn, &cuts);
                let Some(cut) = turn.and_then(|i| cuts.get(i)).cloned() else {
                    // No parent seen yet: this epoch stays full.
                    self.light_phases.clear();
                    return;
                };
                self.cut_turn += 1;
                self.light_phases = cut.detach.clone();
                let wait = settle(agg, &cut.detach);
                // No span is aggregated until this returns: the transition may be stamped
                // once the release has started.
                let at = super::monotonic_ns();
                let done =
                    self.switching(tracer, |t| t.detach_phases_in_background(&cut.detach, wait));
                done.map(|d| {
                    if let Some(l) = agg.light_epochs() {
                        l.begin_transition(at);
                    }
                    self.detaching = Some((d, cut));
                })
            }
            Step::GoFull => {
                if let Some(l) = agg.light_epochs() {
                    l.begin_transition(super::monotonic_ns());
                }
                let light = self.light_phases.clone();
                let done = self.switching(tracer, |t| t.reattach_phases(&light));
                if let Some(l) = agg.light_epochs() {
                    l.end(super::monotonic_ns());
                }
                if let Some(e) = self.epochs.as_mut() {
                    e.switched();
                }
                done
            }
        };
        if let Err(e) = done {
            eprintln!("wprof: warning: in-situ epochs: {e:#}");
        }
    }

    /// The excuse window of the switch going on runs from now (probes still coming off).
    fn extend_excuse(&mut self) {
        if let Some((_, at)) = &mut self.mark {
            *at = Instant::now();
        }
    }

    /// Excuses the unmatched returns counted since the last switch began (see `switching`).
    fn excuse(&mut self, tracer: &mut Tracer) {
        let Some((before, _)) = self.mark.take() else {
            return;
        };
        let now = unmatched_by_phase(tracer, self.excused.len());
        for (e, (n, b)) in self.excused.iter_mut().zip(now.iter().zip(&before)) {
            *e += n.saturating_sub(*b);
        }
    }

    /// Runs `op`, a switch of probes, marking the unmatched returns before it so the ones it
    /// causes (until [`EXCUSE_WINDOW`] after it) are excused.
    fn switching<T>(&mut self, tracer: &mut Tracer, op: impl FnOnce(&mut Tracer) -> T) -> T {
        if self.mark.is_none() {
            let n = self.excused.len();
            self.mark = Some((unmatched_by_phase(tracer, n), Instant::now()));
        }
        let done = op(tracer);
        self.extend_excuse();
        done
    }

    /// The probes went over the budget (`pct` of the traced processes' CPU time over the last
    /// second): moves the costliest leaves to sampling; when none may move, has what stays
    /// probed live only part of each second; Some(reason) when even that cannot fit.
    pub fn over(
        &mut self,
        tracer: &mut Tracer,
        watch: &OverheadWatch,
        pct: f64,
        agg: &Aggregator,
    ) -> Option<EndReason> {
        let budget = watch.budget()?;
        // Moves fit the figure to half the budget until the program's pace is read.
        let decision = watch.decision_budget()?;
        // In the kernel mode the calls reach the aggregator only at the end: without the
        // kernel's counts every phase ever seen as a root (once, in any process) would count
        // as a root, and every child ever seen as still probed, and stay probed.
        let edges = agg.phase_edges_with(&crate::collect::kernel::node_counts(tracer));
        let cpu = watch.cpu_ns_per_s;
        let head = format!(
            "probes took {pct:.1}% of {} CPU time over the last {:.2} s{}{}, {}",
            watch.whose_cpu(),
            watch.window_s,
            watch.in_situ.phrase(),
            watch.progress.phrase(),
            watch.above_phrase()
        );
        let moved: Vec<u32> = self.moved.iter().map(|m| m.id).collect();
        let rates = |id: u32| {
            let calls = watch.phase_calls_per_s.get(id as usize).copied();
            (calls.unwrap_or(0.0), watch.pair_ns(id))
        };
        let loads = loads(self.phases, &edges, &moved, &rates);
        let Plan {
            moves,
            projected_pct: projected,
            fits: _,
        } = plan_moves(self.phases, &edges, &moved, &rates, cpu, decision);
        let mut said = Vec::new();
        if !moves.is_empty() {
            let wait = settle(agg, &moves);
            let done = self.switching(tracer, |t| t.detach_phases_in_background(&moves, wait));
            match done {
                Ok(d) => {
                    self.moving.push(d);
                    for id in &moves {
                        let Some(load) = loads.iter().find(|l| l.id == *id) else {
                            continue;
                        };
                        said.push(format!(
                            "{} ({:.0} calls/s, {:.1}%)",
                            load.name,
                            load.calls_per_s,
                            load.cost_ns_per_s() / cpu.max(1.0) * 100.0
                        ));
                        self.moved.push(Moved {
                            id: *id,
                            after_s: self.started.elapsed().as_secs_f64(),
                            calls_per_s: load.calls_per_s,
                        });
                    }
                }
                Err(e) => eprintln!("wprof: warning: {e:#}"),
            }
        }
        if !said.is_empty() {
            // What stays is measured before any duty cycle: the projection prices its calls at
            // the rate they ran with every probe in, and they run faster once the moved
            // probes are off (db_bench's root: 9% projected, 36% measured), so a cycle set
            // from it would start several times too live.
            eprintln!(
                "wprof: {head}: moved to CPU sampling: {}; {projected:.1}% at the calls' last \
                 rate, measured again now",
                said.join(", "),
            );
            return None;
        }
        // What stays probed is still over: live part of each second, from now on. Until the
        // program's own progress has been read, at twice the figure.
        let current = self.duty.as_ref().map_or(1.0, |d| d.fraction);
        let lost = watch.live_cost_pct();
        let measured = lost.is_some();
        // Once a live window's cost is read, no more live than pays back the run so far.
        let payback = match (&self.duty, lost) {
            (Some(d), Some(lost)) => Some(d.payback(
                self.duty_after,
                lost.max(pct / current.max(duty::MIN_FRACTION)),
                budget,
            )),
            _ => None,
        };
        let paying = payback.map_or(1.0, |p| p.fraction);
        let Some(fraction) =
            duty::fraction_priced(pct, current, budget, measured).map(|f| f.min(paying))
        else {
            eprintln!(
                "wprof: {head}, and no more phases may move to sampling (roots, parents and \
                 measure = \"probe\" phases stay probed) nor be probed less than {:.0}% of the time: \
                 detached",
                duty::MIN_FRACTION * 100.0
            );
            return Some(EndReason::OverheadBudget);
        };
        match &mut self.duty {
            Some(d) => d.fraction = fraction,
            None => {
                self.duty = Some(DutyCycle::start(fraction));
                self.duty_after = self.started.elapsed();
                // Live since the attach.
                let since = self.duty_after.as_nanos() as u64;
                self.windows.open(duty::unix_ns().saturating_sub(since));
            }
        }
        eprintln!(
            "wprof: {head}, and no more phases may move to sampling (roots, parents and measure \
             = \"probe\" phases stay probed): their probes are live {:.0}% of each second from \
             now on (calls are counted in those windows only){}",
            fraction * 100.0,
            paying_phrase(fraction, payback)
        );
        None
    }

    /// Under a duty cycle, within the budget at the last measurement: when the probed
    /// threads' progress says a live window costs them less than the fraction allows for (it
    /// began at twice the probes' price, [`duty::UNMEASURED`]), goes live longer. Whether it
    /// did.
    pub fn room(&mut self, watch: &OverheadWatch) -> bool {
        let (Some(d), Some(lost), Some(budget)) =
            (self.duty.as_mut(), watch.live_cost_pct(), watch.budget())
        else {
            return false;
        };
        // The figures price it too: the dearer of the two stands.
        let figure = watch.last_pct / d.fraction.max(duty::MIN_FRACTION);
        let cost = lost.max(figure);
        let payback = d.payback(self.duty_after, cost, budget);
        let Some(fraction) = duty::raised_fraction(cost, d.fraction, budget, payback.fraction)
        else {
            return false;
        };
        d.fraction = fraction;
        eprintln!(
            "wprof: with the probes live the probed threads did {lost:.0}% less work per CPU \
             second (the probes' figure: {figure:.1}% of a live window), within {}: their \
             probes are live {:.0}% of each second from now on{}",
            watch.budget_phrase(),
            fraction * 100.0,
            paying_phrase(fraction, Some(payback))
        );
        true
    }

    /// At the end of the run: the share of it the probes were live (None: always), the
    /// phases moved, and the unmatched returns per phase that switching probes caused.
    pub fn finish(&mut self, tracer: &mut Tracer) -> Finished {
        if let Some((d, _)) = self.detaching.take() {
            d.wait();
        }
        self.moving.drain(..).for_each(Detaching::wait);
        self.excuse(tracer);
        // Ended in a pause: BPF was stopped, and the end's recalibration needs it.
        if self.duty.as_ref().is_some_and(|d| !d.is_live()) {
            if let Err(e) = tracer.end_pause() {
                eprintln!("wprof: warning: duty cycle: {e:#}");
            }
        }
        let live = self.duty.as_ref().map(|d| d.live_share(self.duty_after));
        Finished {
            probes_live: live,
            moved: std::mem::take(&mut self.moved),
            excused: std::mem::take(&mut self.excused),
            live_windows: std::mem::take(&mut self.windows).finish(duty::unix_ns()),
        }
    }
}

/// What [`Keeper::finish`] says of the run.
pub struct Finished {
    /// The share of the run the probes were live; None: always.
    pub probes_live: Option<f64>,
    /// Phases moved to sampling, in order.
    pub moved: Vec<Moved>,
    /// Per phase: unmatched returns that came from switching probes.
    pub excused: Vec<u64>,
    /// Under a duty cycle, when the probes were live (Unix ns); empty: always.
    pub live_windows: Vec<[u64; 2]>,
}

/// " (live S% of the run so far: what fits the whole run over the next 10 s)" when paying
/// back the run so far set the fraction (`fraction` at the payback's), else nothing.
fn paying_phrase(fraction: f64, payback: Option<duty::Payback>) -> String {
    match payback {
        Some(p) if fraction >= p.fraction => format!(
            " (live {:.0}% of the run so far: what fits the whole run over the next {} s)",
            p.share * 100.0,
            duty::PAYBACK.as_secs()
        ),
        _ => String::new(),
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
