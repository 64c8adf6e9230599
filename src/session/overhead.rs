//! The probes' overhead while a run goes on: after its first second wprof says what the
//! probes cost the traced processes (hits per second × the calibrated cost of a hit, scaled
//! by what CPU samples saw in situ, as a share of the CPU time of the threads that ran probed
//! code), and with `--max-overhead` says when that share goes over the budget: the session
//! then moves phases to sampling (`budget`), or detaches when none may move, so a probe on a
//! hot function never stalls a production server for long.
//!
//! In: each phase's pair cost, the budget and the traced pids; BPF's hit counters, the
//! probed threads' (else the processes') CPU time and the CPU samples at each tick. Out: the
//! share over the budget, when it is, and notes on stderr.

use std::time::{Duration, Instant};

use wprof_common::PhaseCounters;

use crate::attach::Tracer;

/// Share of the traced processes' CPU time above which the first-second note is a warning.
pub(super) const WARN_PCT: f64 = 5.0;

/// How often the overhead is measured.
const EVERY: Duration = Duration::from_secs(1);

/// How soon it is measured under `--max-overhead`, first and while over the budget: a hot
/// probe is moved off within a tenth of a second (/proc's CPU times tick at 10 ms, so this is
/// still ~10 ticks of one busy CPU). At a quarter second, db_bench's first second under the
/// budget ran at half its pace: three steps (the kernel and the moves, a phase of a thread
/// seen later, the duty cycle) each waited a window.
const EVERY_OVER: Duration = Duration::from_millis(100);

/// CPU time below which a share says nothing: /proc's CPU times tick at 10 ms.
pub(super) const MIN_CPU_NS: u64 = 10_000_000;

/// How soon the first measurement comes under `--max-overhead`: until then every phase is
/// probed, which on RocksDB with RET-site returns ran its writes ~12× slower (half a second of
/// that cost a 9 s db_bench run ~5% of its writes). Ten /proc ticks of one busy CPU.
const FIRST_OVER: Duration = Duration::from_millis(100);

/// Watches the probes' share of the CPU time of the threads that run probed code (of the
/// traced processes' until such a thread is known).
pub(super) struct OverheadWatch {
    /// Per phase id: ns one probe hit costs (half the calibrated or estimated pair).
    hit_ns: Vec<f64>,
    /// `--max-overhead`, %.
    max_overhead: Option<f64>,
    /// The share of time the sampler runs (a duty cycle pauses it with the probes).
    sampler_fraction: f64,
    /// The CPU sampler's share of the traced processes' CPU time, % (measured before
    /// attaching; see `sampler_budget`).
    pub sampler_pct: f64,
    /// CPU time of every traced process when last read, ns (forked ones join as they come).
    last_cpu: std::collections::HashMap<u32, u64>,
    last: Instant,
    last_hits: Vec<u64>,
    /// Time to the next measurement.
    every: Duration,
    /// The shortest time between measurements.
    floor: Duration,
    /// Measurements made.
    ticks: u32,
    quiet: bool,
    /// The largest share measured over one second, %.
    pub peak_pct: f64,
    /// The share measured last, %.
    pub last_pct: f64,
    /// The probes' part of it, without wprof's reading of the calls, %: what stays once the
    /// calls are aggregated in the kernel.
    pub last_probes_pct: f64,
    /// Completed calls a second over the last measured second (returns of every phase).
    pub calls_per_s: f64,
    /// The same per phase id.
    pub phase_calls_per_s: Vec<f64>,
    /// The traced processes' CPU time over the last measured second, ns a second.
    pub cpu_ns_per_s: f64,
    /// How long the last measurement covered, s.
    pub window_s: f64,
    /// wprof's own user CPU time when last read, ns.
    last_own_ns: u64,
    /// What reading one call costs wprof itself (its user CPU time over the last measured
    /// window ÷ the calls completed in it), ns: part of each call's price, so `--max-overhead`
    /// counts it. Per event this is the collector's work on the call's span; in the kernel
    /// mode there is nearly none.
    pub reading_ns_per_call: f64,
    /// How far the calibration's price falls short of the probes' time in the traced
    /// processes' CPU samples (when the run samples).
    pub in_situ: super::probe_time::InSituFactor,
    /// The threads that entered a probed phase, and their CPU time.
    threads: super::probed_threads::ProbedThreads,
    /// Whether the last share was of the probed threads' CPU time (else of the processes':
    /// no probed thread known yet, or a Go program's goroutines).
    per_thread: bool,
    /// How many probed threads the last samples were tallied over.
    tallied_over: usize,
    /// The probed threads' work per CPU second, probes live against paused (duty cycle).
    pub progress: super::progress::Progress,
    /// Whether wprof reads each call (per event): after a switch to the kernel its own CPU
    /// time is no price of a call (the first window after it drained the ring's last spans,
    /// ~7 per root call, and priced the root at 2.5× its probes on the fixture).
    reads_calls: bool,
    /// The share of each second the probes are live (a duty cycle's fraction, else 1).
    live_fraction: f64,
    /// Entry + return hits per phase id at the duty cycle's last switch.
    switch_hits: Vec<u64>,
}

impl OverheadWatch {
    /// `pair_ns[phase id]` is what one call's probes cost; the CPU sampler takes
    /// `sampler_pct` of the `budget_pct` (`--max-overhead`), the probes get the rest.
    pub fn new(
        pair_ns: Vec<f64>,
        budget_pct: Option<f64>,
        sampler_pct: f64,
        pids: &[u32],
        quiet: bool,
    ) -> Self {
        let n = pair_ns.len();
        OverheadWatch {
            hit_ns: pair_ns.into_iter().map(|p| p / 2.0).collect(),
            max_overhead: budget_pct,
            sampler_pct,
            sampler_fraction: 1.0,
            last_cpu: pids
                .iter()
                .filter_map(|&p| Some((p, process_cpu_ns(p)?)))
                .collect(),
            last: Instant::now(),
            last_hits: vec![0; n],
            floor: Duration::ZERO,
            every: if budget_pct.is_some() {
                FIRST_OVER
            } else {
                EVERY
            },
            ticks: 0,
            window_s: 0.0,
            quiet,
            peak_pct: 0.0,
            last_pct: 0.0,
            last_probes_pct: 0.0,
            calls_per_s: 0.0,
            phase_calls_per_s: vec![0.0; n],
            cpu_ns_per_s: 0.0,
            last_own_ns: own_user_ns(),
            reading_ns_per_call: 0.0,
            in_situ: Default::default(),
            threads: super::probed_threads::ProbedThreads::new(pids),
            per_thread: false,
            tallied_over: 0,
            progress: Default::default(),
            switch_hits: Vec::new(),
            reads_calls: true,
            live_fraction: 1.0,
        }
    }

    /// Measures over whole duty cycles from now on (`super::duty`): a shorter window would
    /// catch a live part or a paused one, not their mean.
    pub fn measure_every(&mut self, every: Duration) {
        self.floor = every;
        self.every = self.every.max(every);
    }

    /// "--max-overhead B%", or with a sampler "the probes' P% of --max-overhead B%; CPU
    /// sampling takes S%".
    pub fn budget_phrase(&self) -> String {
        let b = self.max_overhead.unwrap_or(0.0);
        match self.budget() {
            Some(p) if self.sampler_pct > 0.0 => format!(
                "the probes' {p:.2}% of --max-overhead {b}%; CPU sampling takes {:.2}%",
                self.sampler_share()
            ),
            _ => format!("--max-overhead {b}%"),
        }
    }

    /// The CPU sampler now runs `fraction` of the time (it pauses with a duty cycle's probes):
    /// its share of the budget shrinks with it, and the probes get the rest.
    pub fn sampler_runs(&mut self, fraction: f64) {
        self.sampler_fraction = fraction;
    }

    /// A duty cycle switched the probes (or began, live): live now (`live`) or paused. The
    /// probed threads' progress closes the window that ended, with the probes' hits in it.
    pub fn probes_switched(&mut self, live: bool, tracer: &mut Tracer) {
        let threads = self.threads.keys();
        let now = phase_hits(tracer, self.hit_ns.len());
        let mut hits = super::progress::Hits::default();
        // Phases moved to sampling (priced at 0 from then on) are no hits of what stays. The
        // calibrated price, not the samples' in-situ factor on it: the tree takes out the
        // calibrated price, and the excess per hit is what it must take out beyond that.
        for ((h, l), c) in now.iter().zip(&self.switch_hits).zip(&self.hit_ns) {
            if *c > 0.0 {
                let n = h.saturating_sub(*l);
                hits.hits += n;
                hits.priced_ns += n as f64 * c;
            }
        }
        self.switch_hits = now;
        let entries = tracer
            .thread_entries(threads.iter().copied())
            .into_iter()
            .collect();
        self.progress.switched(live, &threads, hits, &entries);
    }

    /// The CPU sampler's share of a live window's CPU time when it pauses with the probes
    /// (else it runs in both states and is no part of their difference), as a fraction.
    pub fn live_sampler_share(&self) -> f64 {
        if self.sampler_fraction < 1.0 {
            self.sampler_pct / 100.0
        } else {
            0.0
        }
    }

    /// The probes are live `fraction` of each duty cycle from now on.
    pub fn probes_live(&mut self, fraction: f64) {
        self.live_fraction = fraction;
    }

    /// What the probed threads' progress says the live probes take, as a share of their CPU
    /// time over a whole cycle, %: [`OverheadWatch::live_cost_pct`] times the live fraction.
    fn progress_pct(&self) -> Option<f64> {
        Some(self.live_cost_pct()? * self.live_fraction)
    }

    /// What the probed threads' progress says a live window costs them, %: the work per CPU
    /// second lost while live, less what the sampler takes when it pauses with the probes.
    pub fn live_cost_pct(&self) -> Option<f64> {
        let lost = self.progress.slowdown()?;
        Some((lost - self.live_sampler_share()).max(0.0) * 100.0)
    }

    /// Measurements made so far.
    pub fn ticks(&self) -> u32 {
        self.ticks
    }

    /// The CPU sampler's share of the traced processes' CPU time now, %.
    fn sampler_share(&self) -> f64 {
        self.sampler_pct * self.sampler_fraction
    }

    /// What the probes may take under `--max-overhead`, %: the budget less the sampler's share.
    pub fn budget(&self) -> Option<f64> {
        self.max_overhead
            .map(|b| super::sampler_budget::probes_budget(b, self.sampler_share()))
    }

    /// What the figure is held to now, %: [`OverheadWatch::budget`] once the probed
    /// threads' progress has been read or a duty cycle runs, half of it before
    /// ([`OverheadWatch::halved_budget`]).
    pub fn decision_budget(&self) -> Option<f64> {
        self.halved_budget().or_else(|| self.budget())
    }

    /// Whether decisions still hold the figure to half the budget: no reading of the
    /// program's pace yet, and no duty cycle (whose fraction already prices the figure
    /// twice until the reading: halving the budget too would count the prior twice, and
    /// moved a flush-thread phase of db_bench in a cycle's first check).
    fn prior_applies(&self) -> bool {
        self.live_cost_pct().is_none() && self.live_fraction >= 1.0
    }

    /// "above --max-overhead B%" (or the probes' share of it); while the program's own pace
    /// is unread, "above D% (until the program's own pace is read, 1/2 of …)", D being
    /// [`OverheadWatch::decision_budget`].
    pub fn above_phrase(&self) -> String {
        match self.halved_budget() {
            Some(d) => format!(
                "above {d:.2}% (until the program's own pace is read, 1/{} of {})",
                super::duty::UNMEASURED,
                self.budget_phrase()
            ),
            None => format!("above {}", self.budget_phrase()),
        }
    }

    /// The budget halved by the prior ([`super::duty::decision_budget`]) while
    /// [`OverheadWatch::prior_applies`], else None.
    fn halved_budget(&self) -> Option<f64> {
        self.budget()
            .filter(|_| self.prior_applies())
            .map(|b| super::duty::decision_budget(b, false))
    }

    /// What one call of phase `id` costs: its probes' time and wprof's reading of it, ns.
    pub fn pair_ns(&self, id: u32) -> f64 {
        self.hit_ns.get(id as usize).map_or(0.0, |h| {
            h * 2.0 * self.in_situ.factor + self.reading_ns_per_call
        })
    }

    /// Starts the next measurement window now: after probes were switched (phases moved to
    /// sampling), a window that straddled the switch, the detach's grace period included,
    /// would still hold the old probes' hits and make the budget act again on them.
    pub fn rebase(&mut self, tracer: &mut Tracer, pids: &[u32]) {
        self.last_hits = phase_hits(tracer, self.hit_ns.len());
        let mut all: Vec<u32> = self
            .last_cpu
            .keys()
            .copied()
            .chain(pids.iter().copied())
            .collect();
        all.sort_unstable();
        all.dedup();
        for pid in all {
            if let Some(now) = process_cpu_ns(pid) {
                self.last_cpu.insert(pid, now);
            }
        }
        self.last_own_ns = own_user_ns();
        self.last = Instant::now();
        self.threads.used_ns();
        self.in_situ.restart();
    }

    /// These phases moved to sampling: their probes' last hits (returns live a little longer
    /// than entries while they come off) are no price of what stays probed.
    pub fn forget_phases(&mut self, ids: impl IntoIterator<Item = u32>) {
        for id in ids {
            if let Some(h) = self.hit_ns.get_mut(id as usize) {
                *h = 0.0;
            }
        }
    }

    /// The calls are aggregated in the kernel from now on: wprof no longer reads each one, so
    /// the price of a call is its probes' alone (until the next measurement says otherwise).
    pub fn reading_stopped(&mut self) {
        self.reading_ns_per_call = 0.0;
        self.reads_calls = false;
    }

    /// Runs `work` without counting its CPU time as wprof's reading of calls.
    pub fn excluding_own<T>(&mut self, work: impl FnOnce() -> T) -> T {
        let before = own_user_ns();
        let out = work();
        self.last_own_ns += own_user_ns().saturating_sub(before);
        out
    }

    /// Whose CPU time the last share was of: "the probed threads'" or "the traced
    /// processes'".
    pub fn whose_cpu(&self) -> &'static str {
        if self.per_thread {
            "the probed threads'"
        } else {
            "the traced processes'"
        }
    }

    /// The threads known to run probed code (empty: none yet, or goroutines).
    pub fn probed_threads(&self) -> std::collections::HashSet<u64> {
        self.threads.keys()
    }

    /// Whether [`OverheadWatch::tick`] will measure now (so a caller reads what it needs).
    pub fn due(&self) -> bool {
        self.last.elapsed() >= self.every
    }

    /// Measures the last second's overhead when a second has passed; Some(share, %) when it
    /// went over the budget.
    /// `pids` are the processes traced now (forked ones included); `samples`, the traced
    /// threads' CPU samples so far when the run samples (the probes' time in situ).
    pub fn tick(
        &mut self,
        tracer: &mut Tracer,
        pids: impl Iterator<Item = u32>,
        samples: Option<super::probe_time::SampleTally>,
    ) -> Option<f64> {
        let secs = self.last.elapsed().as_secs_f64();
        if secs < self.every.as_secs_f64() {
            return None;
        }
        self.last = Instant::now();
        let hits = phase_hits(tracer, self.hit_ns.len());
        // Each process's CPU time since it was last read (all of it for one new to the run,
        // e.g. a backend forked during the last second); one that exited is forgotten.
        let mut all: Vec<u32> = self.last_cpu.keys().copied().chain(pids).collect();
        all.sort_unstable();
        all.dedup();
        let mut used = 0u64;
        for pid in all {
            match process_cpu_ns(pid) {
                Some(now) => {
                    let before = self.last_cpu.insert(pid, now).unwrap_or(0);
                    used += now.saturating_sub(before);
                }
                None => {
                    self.last_cpu.remove(&pid);
                }
            }
        }
        let added: f64 = hits
            .iter()
            .zip(&self.last_hits)
            .zip(&self.hit_ns)
            .map(|((h, l), c)| h.saturating_sub(*l) as f64 * c)
            .sum();
        let new_hits: u64 = hits
            .iter()
            .zip(&self.last_hits)
            .map(|(h, l)| h.saturating_sub(*l))
            .sum();
        // wprof's own work on the calls it reads: on a busy host it is CPU the traced
        // processes do not get (pgbench, 2 clients on 2 CPUs: ~200 ns a call per event).
        let own = own_user_ns();
        let reading = if self.reads_calls {
            own.saturating_sub(self.last_own_ns) as f64
        } else {
            0.0
        };
        self.last_own_ns = own;
        let calls = new_hits as f64 / 2.0;
        self.reading_ns_per_call = if calls >= 1.0 { reading / calls } else { 0.0 };
        // The samples were tallied over the probed threads known until now: when that set
        // grew, a thread's earlier samples came in with it and this window is a new start.
        let mut samples = samples;
        if let Some(t) = samples {
            if self.threads.len() != self.tallied_over {
                self.in_situ.rebase(t);
                samples = None;
            }
            self.tallied_over = self.threads.len();
        }
        // Against the threads that run probed code, when known: the others' CPU time (a
        // compaction, a background writer) is no measure of what the probes slow.
        self.threads.learn(tracer.threads_in_phases());
        let (used, per_thread) = self.threads.cpu_against(used);
        self.per_thread = per_thread;
        let used = used as f64;
        if let Some(t) = samples {
            self.in_situ.add(t, added, used, self.sampler_fraction);
        }
        let probes = added * self.in_situ.factor;
        let added = probes + reading;
        self.cpu_ns_per_s = used / secs;
        // Hits are entries + returns: two per call.
        self.calls_per_s = new_hits as f64 / 2.0 / secs;
        self.phase_calls_per_s = hits
            .iter()
            .zip(&self.last_hits)
            .map(|(h, l)| h.saturating_sub(*l) as f64 / 2.0 / secs)
            .collect();
        self.last_hits = hits;
        self.ticks += 1;
        self.window_s = secs;
        let share = |ns: f64| {
            if used >= MIN_CPU_NS as f64 {
                ns / used * 100.0
            } else {
                0.0
            }
        };
        // Under a duty cycle the program's own slowdown prices the probes too, when it says
        // more than the calibration and the samples (it also sees what a trap costs the code
        // after it).
        let progress = self.progress_pct().unwrap_or(0.0);
        let pct = share(added).max(progress);
        self.last_probes_pct = share(probes).max(progress);
        self.peak_pct = self.peak_pct.max(pct);
        self.last_pct = pct;
        if self.ticks == 1 && !self.quiet {
            let over = pct > self.decision_budget().unwrap_or(WARN_PCT);
            eprintln!(
                "wprof: {}first {}: {} probe hits and their reading ≈ {:.1} ms = {pct:.1}% of \
                 {} CPU time{}{}",
                if over { "warning: " } else { "" },
                if secs >= 0.95 {
                    "second".to_string()
                } else {
                    format!("{secs:.2} s")
                },
                new_hits,
                added / 1e6,
                self.whose_cpu(),
                self.in_situ.phrase(),
                match (self.max_overhead, self.halved_budget()) {
                    (Some(_), Some(d)) => format!(
                        " (held to {d:.2}% until the program's own pace is read: 1/{} of {})",
                        super::duty::UNMEASURED,
                        self.budget_phrase()
                    ),
                    (Some(_), None) => format!(" ({})", self.budget_phrase()),
                    (None, _) if over => {
                        " (--max-overhead PCT detaches above a budget)".to_string()
                    }
                    (None, _) => String::new(),
                }
            );
        }
        let over = self.decision_budget().filter(|b| pct > *b).map(|_| pct);
        self.every = if over.is_some() { EVERY_OVER } else { EVERY }.max(self.floor);
        over
    }
}

/// Returns so far that matched no open call, per phase id below `n`.
pub(super) fn unmatched_by_phase(tracer: &mut Tracer, n: usize) -> Vec<u64> {
    per_phase(tracer, n, |c| c.unmatched_returns)
}

/// Entry + return hits per phase id so far.
pub(super) fn phase_hits(tracer: &mut Tracer, n: usize) -> Vec<u64> {
    per_phase(tracer, n, |c| c.entries + c.returns)
}

/// One figure of BPF's per-phase counters, summed over the CPUs, per phase id below `n`.
fn per_phase(tracer: &mut Tracer, n: usize, figure: impl Fn(&PhaseCounters) -> u64) -> Vec<u64> {
    match crate::collect::read_phase_counters(tracer, n) {
        Ok(counters) => counters.iter().map(figure).collect(),
        Err(_) => vec![0; n],
    }
}

/// wprof's own user CPU time so far (every thread), ns.
fn own_user_ns() -> u64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid rusage to fill.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0;
    }
    u.ru_utime.tv_sec as u64 * 1_000_000_000 + u.ru_utime.tv_usec as u64 * 1_000
}

/// User + system CPU time of a process (all its threads), ns; None once it is gone.
pub(super) fn process_cpu_ns(pid: u32) -> Option<u64> {
    stat_cpu_ns(&format!("/proc/{pid}/stat"))
}

/// User + system CPU time from a `/proc` stat file (a process's or one thread's), ns.
pub(super) fn stat_cpu_ns(path: &str) -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the parenthesised command name: state is field 3; utime and stime are
    // fields 14 and 15.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks * 1_000_000_000 / tick)
}
