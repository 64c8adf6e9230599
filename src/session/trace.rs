//! A [`Session`]: one run's tracer, collector, probe costs and resolved phases, and the one
//! body that traces a [`Target`] for both `attach` and `record`.
//!
//! In: a [`TraceConfig`] and its [`Checked`] target. [`Session::new`] resolves the profile,
//! loads the BPF side and calibrates; [`Session::trace`] attaches, collects until an end
//! condition, detaches, reads the final counts and returns the [`Outcome`]: the [`Run`] and
//! the exit code.

use std::time::{Instant, SystemTime};

use anyhow::{Context, Result};

use super::build_run::{build_run, Traced};
use super::config::{phase_names, TraceConfig};
use super::costs::{self, RunCosts};
use super::guard::{self, Guard};
use super::hooks::{AutoSwitch, RunHooks};
use super::late::{self, LateAttach};
use super::target::{Checked, Target};
use super::trace_loop::{self, EndReason, Watch};
use super::{
    budget, instances, overhead, processes, sampler_budget, snapshots, stacks, untraced_wait,
};
use crate::aggregate::preempted::WaitBaseline;
use crate::aggregate::{Aggregator, DEFAULT_MAX_SPANS};
use crate::args::AggregateMode;
use crate::attach::{process_alive, AttachSummary, Tracer};
use crate::collect::{drain_queued, read_end_state, Collector};
use crate::error::{exit, WprofError};
use crate::model::profile::Profile;
use crate::model::{PreemptionBaseline, Run, UnitSpec};
use crate::probe_cost;
use crate::resolve::{self, ResolvedPhase, Scope, Status};

/// One run, ready to attach: the BPF side loaded, the phases resolved, the probes' cost
/// measured.
pub struct Session<'c> {
    config: &'c TraceConfig,
    phases: Vec<ResolvedPhase>,
    tracer: Tracer,
    guard: Option<Guard>,
    collector: Collector,
    costs: RunCosts,
    /// The CPU sampler's rate and cost (fitted to `--max-overhead`).
    sampler: sampler_budget::SamplerPlan,
    /// The `--serve` endpoint, until the run starts collecting.
    server: Option<crate::serve::Server>,
    /// Whether sched_switch follows the traced threads' preemptions (`--off-cpu`, or a
    /// corrected run's default when it could attach).
    preemption_followed: bool,
    /// The threads' wait for a CPU before the probes went live (`untraced_wait`), when
    /// measured.
    wait_baseline: Option<(WaitBaseline, PreemptionBaseline)>,
}

/// How a traced run ended.
pub struct Outcome {
    /// The run, its provenance complete.
    pub run: Run,
    /// What wprof exits with: `record`'s command's status, else 0, or
    /// [`exit::OVER_BUDGET`] when `--max-overhead` ended a run that did not fail otherwise.
    pub exit_code: i32,
}

impl<'c> Session<'c> {
    /// Resolves the profile where `target` says (exit 4 when a required phase does not
    /// resolve), loads the BPF side and calibrates the probes (unless `--no-calibrate`).
    pub fn new(config: &'c TraceConfig, target: &Checked) -> Result<Session<'c>> {
        let scope = target.scope();
        let mut phases = resolve_checked(&config.profile, &scope)?;
        if let Checked::Pids { pids, .. } = target {
            // Running processes are known before anything loads; a command's child only once
            // it is forked (in `trace`).
            instances::warn_other_tracers(pids, &phases);
        }
        let mut tracer = Tracer::load(config.tracer_options())?;
        let guard = guard::prepare(&mut tracer, &mut phases, &scope);
        if guard.is_some() || config.takes_stacks() {
            // Entries that keep their return address cost more (a read of the user stack):
            // the calibration must price the entries the run will have. Without this a
            // guarded run calibrated ~180 ns a pair short, 10% of db_bench's probe time.
            tracer.keep_return_addresses()?;
        }
        let mut collector = Collector::new(&mut tracer)?;
        let costs = costs::calibrated(&mut tracer, &mut collector, &phases, config)?;
        let sampler = sampler_budget::plan(&mut tracer, config);
        // The samples of wprof itself its calibration sent are not the run's.
        collector.drain(|_| {}, |_| {});
        Ok(Session {
            config,
            phases,
            tracer,
            guard,
            collector,
            costs,
            sampler,
            server: None,
            preemption_followed: false,
            wait_baseline: None,
        })
    }

    /// Serves the run's figures on `server` while it collects (`--serve`).
    pub fn serve(&mut self, server: crate::serve::Server) {
        self.server = Some(server);
    }

    /// Attaches to `target`, traces it until an end condition (Ctrl-C, SIGTERM,
    /// `--duration`, its exit, the overhead budget), detaches and builds the run. A child that
    /// was never released is killed when attaching fails.
    pub fn trace(mut self, mut target: Target) -> Result<Outcome> {
        let pids = target.pids();
        let follow_forks = target.follows_forks();
        match &target {
            Target::Pids { .. } => {
                test_pause_before_attach();
                self.wait_baseline = self.watch_untraced_waits(&pids);
            }
            Target::Child { .. } => instances::warn_other_tracers(&pids, &self.phases),
        }
        if follow_forks {
            // Before any uprobe goes live: from then on BPF keeps only the traced processes.
            self.tracer.trace_pids(&pids)?;
            self.tracer.follow_forks()?;
        }
        let attached = match self.attach(&pids, follow_forks) {
            Ok(attached) => attached,
            Err(e) => {
                target.abort();
                return Err(e);
            }
        };
        let mut late = late::watch_dlopen(
            &mut self.tracer,
            &self.config.profile,
            &self.phases,
            &pids,
            follow_forks,
        );
        let Live {
            mut watch,
            started,
            command,
        } = self.go_live(target, &attached)?;
        let traced = self.collect(&mut watch, &pids, late.as_mut())?;
        // The run's figures are stated in the mean of the prices it corrected with.
        self.costs.settle(&self.phases);
        if let Some(l) = late {
            l.merge(&mut self.phases);
        }
        // The command's status (0 for running processes).
        let status = watch.finish()?;
        let over_budget = traced.reason == EndReason::OverheadBudget;
        let mut run = build_run(
            &self.config.profile,
            &self.phases,
            &self.costs,
            traced,
            started,
        );
        run.provenance.pids = pids;
        run.provenance.follow_forks = follow_forks;
        run.provenance.command = command;
        // The command ran on untraced after the probes were detached: its own failure first.
        let exit_code = if over_budget && status == 0 {
            exit::OVER_BUDGET
        } else {
            status
        };
        Ok(Outcome { run, exit_code })
    }

    /// The threads of running processes, watched for [`untraced_wait::WINDOW`] before
    /// anything attaches, when the run takes the probes' share of their preemptions out.
    fn watch_untraced_waits(&self, pids: &[u32]) -> Option<(WaitBaseline, PreemptionBaseline)> {
        let corrects = self.costs.own_ns().is_some();
        (self.config.preemption && corrects)
            .then(|| untraced_wait::measure(pids))
            .flatten()
    }

    /// Attaches the unwind guard, the phases' probes and the kernel side to `pids`.
    fn attach(&mut self, pids: &[u32], follow_forks: bool) -> Result<Attached> {
        let started = Instant::now();
        if let Some(g) = &self.guard {
            g.attach(&mut self.tracer, pids, follow_forks)?;
        }
        if self.config.moves_probes() {
            let probed = self.phases.iter().filter(|p| p.is_probed()).map(|p| p.id);
            self.tracer.keep_phase_links(probed);
        }
        let summary = self.tracer.attach(&self.phases, pids, follow_forks)?;
        if follow_forks {
            processes::note_untraced_mappers(&self.phases, pids);
        }
        let kernel = self.attach_kernel_side(pids)?;
        Ok(Attached {
            summary,
            kernel,
            ms: started.elapsed().as_secs_f64() * 1e3,
        })
    }

    /// Attaches the kernel-side programs a run needs (kernel phases, off-CPU, CPU sampling) for
    /// `pids`; returns a note for the "attached" line.
    fn attach_kernel_side(&mut self, pids: &[u32]) -> Result<String> {
        let tracer = &mut self.tracer;
        tracer.trace_pids(pids)?;
        let mut note = String::new();
        let tracepoints = tracer.attach_kernel_phases(&self.phases)?;
        if tracepoints > 0 {
            note.push_str(&format!(", {tracepoints} tracepoints"));
        }
        if self.config.off_cpu {
            tracer.attach_off_cpu(true)?;
            self.preemption_followed = true;
            note.push_str(", off-CPU tracking");
        } else if self.config.preemption {
            // Not asked for: a host where it cannot attach (tracefs unreadable without root)
            // still gets its run, with every preemption kept.
            match tracer.attach_off_cpu(false) {
                Ok(()) => {
                    self.preemption_followed = true;
                    note.push_str(", preemptions followed");
                }
                Err(e) => eprintln!(
                    "wprof: note: the corrected times keep every preemption ({e:#}; \
                     --keep-preemptions does not try)"
                ),
            }
        }
        if let Some(hz) = self.sampler.hz {
            let go = resolve::go_layout::layout_for_phases(&self.phases).unwrap_or_else(|e| {
                eprintln!(
                    "wprof: CPU samples on the Go system stack (GC assist marking, stack growth) \
                     stay with their thread, outside phases: {e:#}"
                );
                None
            });
            let cpus = tracer.attach_cpu_sampling(hz, go)?;
            note.push_str(&format!(", CPU sampling at {hz} Hz on {cpus} CPUs"));
        }
        Ok(note)
    }

    /// Starts watching `target`, its probes live, and says so: running processes (an error
    /// when one died during attach), or the child released from its gate.
    fn go_live(&self, target: Target, attached: &Attached) -> Result<Live> {
        let Attached {
            summary,
            kernel,
            ms,
        } = attached;
        match target {
            Target::Pids { pids, follow_forks } => {
                // A process that died during attach may have accepted no probe or a useless one.
                if let Some(gone) = pids.iter().find(|&&p| !process_alive(p)) {
                    return Err(WprofError::NoProcess(format!(
                        "process {gone} exited while wprof was attaching; nothing was traced (start it again and re-run)"
                    ))
                    .into());
                }
                // Before the "attached" line, so a Ctrl-C right after it already ends the run
                // cleanly.
                let watch = Watch::pids(pids.clone(), self.config.duration);
                let forks = if follow_forks {
                    " and the processes they fork"
                } else {
                    ""
                };
                eprintln!(
                    "wprof: attached {} probe points ({} links{kernel}, {} phases) in {ms:.1} ms to pid {}{forks}; Ctrl-C to stop",
                    summary.points,
                    summary.links,
                    self.phases
                        .iter()
                        .filter(|p| matches!(p.status, Status::Resolved))
                        .count(),
                    join(&pids)
                );
                Ok(Live {
                    watch,
                    started: SystemTime::now(),
                    command: None,
                })
            }
            Target::Child { mut child, argv } => {
                if !self.config.quiet {
                    eprintln!(
                        "wprof: {} probe points live ({} links{kernel}) in {ms:.1} ms; starting {}",
                        summary.points,
                        summary.links,
                        argv.join(" ")
                    );
                }
                let started = SystemTime::now();
                child.release()?;
                Ok(Live {
                    watch: Watch::child(child, self.config.duration),
                    started,
                    command: Some(argv),
                })
            }
        }
    }

    /// The aggregator this run's options ask for.
    fn aggregator(&self, names: &[String]) -> Aggregator {
        let c = self.config;
        // BPF aggregates since `tracer.attach` (TracerOptions::kernel_aggregate).
        let mut agg = if c.aggregate == AggregateMode::Kernel {
            Aggregator::new()
        } else {
            Aggregator::with_calls(names, c.max_calls, DEFAULT_MAX_SPANS)
        };
        if let Some(own) = self.costs.own_ns() {
            agg.correct_probe_time(own);
        }
        if c.off_cpu {
            agg.track_off_cpu();
        } else if self.preemption_followed {
            agg.track_preemption();
        }
        if let Some((b, _)) = self
            .wait_baseline
            .as_ref()
            .filter(|_| self.preemption_followed)
        {
            agg.set_wait_baseline(b.clone());
        }
        if c.per_pid {
            agg.track_per_pid();
        }
        if c.in_situ {
            agg.track_light_epochs();
        }
        agg.count_units(unit_specs(&c.profile));
        if let Some(phase) = c.split_phase {
            agg.split_by(phase);
        }
        agg
    }

    /// Collects until `watch` or the budget ends the run, then detaches and reads what is
    /// left: the final counters, the stacks, the recalibration.
    fn collect(
        &mut self,
        watch: &mut Watch,
        pids: &[u32],
        late: Option<&mut LateAttach>,
    ) -> Result<Traced> {
        let c = self.config;
        let names = &phase_names(&c.profile);
        let mut agg = self.aggregator(names);
        let mut labels = processes::ProcessLabels::new(pids);
        if let Some(skip) = c.skip {
            agg.skip_before(super::monotonic_ns() + skip.as_nanos() as u64);
        }
        let mut snapshots = match &c.snapshots {
            Some(s) => Some(snapshots::Snapshots::create(
                &s.path,
                s.every,
                names.to_vec(),
            )?),
            None => None,
        };
        let mut stack_sink = stacks::StackSink::new(c.takes_stacks());
        let t0 = Instant::now();
        let mut keeper = budget::Keeper::new(&self.phases);
        if !c.cpu_sample_fixed {
            // Sampling only for the phases the budget measures that way: off with the probes.
            keeper = keeper.with_sampler_following_the_probes();
        }
        // Before the overhead watch starts: naming kernel frames first reads kallsyms.
        let probe_time = super::probe_time::ProbeTime::new(self.sampler.hz.is_some());
        let pairs = pair_costs(&self.phases, &self.costs);
        // In-kernel aggregation would swallow the calibration's calls, and a duty cycle's
        // pause stops every BPF program, the calibration's too (the budget reads the
        // program's own pace instead).
        let recalibrate =
            c.recalibrate && c.aggregate != AggregateMode::Kernel && c.max_overhead.is_none();
        let recalibration = recalibrate
            .then(|| super::recalibrate::InRun::new(&mut self.costs, &self.phases))
            .flatten();
        let mut hooks = RunHooks {
            tracer: &mut self.tracer,
            late,
            auto: AutoSwitch::new(c.aggregate, &c.per_call_options),
            switched: false,
            keeper: if c.in_situ {
                keeper.with_in_situ()
            } else {
                keeper
            },
            overhead: overhead::OverheadWatch::new(
                pairs,
                c.max_overhead,
                self.sampler.pct,
                pids,
                c.quiet,
            ),
            serve: self
                .server
                .take()
                .map(|s| super::serve::Publisher::new(s, c)),
            probe_time,
            recalibration,
        };
        let sides = trace_loop::Sides {
            stacks: &mut stack_sink,
            snapshots: snapshots.as_mut(),
            labels: &mut labels,
            hooks: &mut hooks,
        };
        let reason = trace_loop::run(&mut self.collector, &mut agg, sides, watch, !c.quiet)?;
        let in_kernel = c.aggregate == AggregateMode::Kernel || hooks.switched;
        let super::budget::Finished {
            probes_live,
            moved,
            excused,
            live_windows,
        } = hooks.keeper.finish(hooks.tracer);
        let probe_time = hooks.overhead.in_situ.reading();
        let progress = hooks
            .overhead
            .progress
            .reading(hooks.overhead.live_sampler_share(), names);
        if hooks.switched {
            // Its rows stop at the switch: a partial table would read as the whole run.
            agg.drop_calls();
        }
        let duration = t0.elapsed();
        let tracer = &mut self.tracer;
        let collector = &mut self.collector;
        // In-kernel aggregation would swallow the calibration's calls; over budget, leave at once.
        let at_end = if in_kernel || reason == EndReason::OverheadBudget {
            None
        } else {
            let forward = probe_cost::Forward {
                events: &mut |e| agg.add(e),
                stacks: &mut |s| stack_sink.agg.add(s),
            };
            self.costs
                .recalibrate(tracer, collector, c.ring_size, forward)
        };
        tracer.detach();
        // Nothing writes any more: read the ring to its end.
        while collector.drain(|e| agg.add(e), |s| stack_sink.agg.add(s)) > 0 {}
        drain_queued(tracer, |e| agg.add(e)).context("read the calls still queued in BPF")?;
        agg.add_keys(collector.take_keys());
        labels.forks(&agg.take_forks());
        labels.refresh(agg.pids());
        if let Some(s) = snapshots.as_mut() {
            s.write(&agg)?;
        }
        let mut end = read_end_state(tracer, self.phases.len())
            .context("read the final counters from BPF")?;
        if in_kernel {
            crate::collect::kernel::finish_run(tracer, &mut agg, &mut end)?;
        }
        let sampled_names: Vec<String> = self
            .phases
            .iter()
            .filter(|p| matches!(p.status, Status::Resolved) && !p.is_probed())
            .map(|p| p.phase.name.clone())
            .chain(moved.iter().map(|m| names[m.id as usize].clone()))
            .collect();
        stack_sink.sample_phases(stacks::SampledFns::of(&self.phases), sampled_names);
        let (cpu, off_cpu, sampled) = stack_sink
            .finish(tracer, &agg, names, &end, self.sampler.hz, c.off_cpu)
            .context("name the sampled stacks")?;
        let preemption_baseline = (self.wait_baseline.as_ref())
            .filter(|_| self.preemption_followed)
            .map(|(_, b)| {
                let traced = agg.traced_wait().unwrap_or_default();
                PreemptionBaseline {
                    traced_cpu_ns: traced.on_cpu,
                    traced_wait_ns: traced.preempted,
                    ..*b
                }
            });
        Ok(Traced {
            at_end,
            preemption_baseline,
            agg,
            end,
            reason,
            duration,
            cpu,
            off_cpu,
            labels,
            sampled,
            moved,
            excused,
            probes_live,
            live_windows,
            probe_time,
            progress,
            sample_ns: self.sampler.sample_ns,
        })
    }
}

/// What attaching did, for the line that says so.
struct Attached {
    /// Probe points and links.
    summary: AttachSummary,
    /// A note on the kernel side (tracepoints, off-CPU, CPU sampling).
    kernel: String,
    /// How long it took, ms.
    ms: f64,
}

/// A target being traced.
struct Live {
    /// What ends the run.
    watch: Watch,
    /// When the run started.
    started: SystemTime,
    /// `record`'s command line.
    command: Option<Vec<String>>,
}

/// Per phase id, the cost of one call's two probe hits: calibrated, or the fixed estimate.
fn pair_costs(phases: &[ResolvedPhase], costs: &RunCosts) -> Vec<f64> {
    phases
        .iter()
        .map(|p| match &costs.measured {
            Some(_) => costs
                .per_phase
                .get(p.id as usize)
                .map_or(0.0, |c| c.pair_ns),
            None => probe_cost::pair_ns(p),
        })
        .collect()
}

/// Test hook: `WPROF_TEST_PAUSE_BEFORE_ATTACH_MS` holds attach back so the tests can make a
/// target exit in the middle of it (the only way to hit that window deterministically).
fn test_pause_before_attach() {
    if let Some(ms) = std::env::var("WPROF_TEST_PAUSE_BEFORE_ATTACH_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// Resolves the profile (return modes already overridden) and fails with exit 4 when a
/// required phase does not resolve; optional ones are warnings.
pub(super) fn resolve_checked(profile: &Profile, scope: &Scope) -> Result<Vec<ResolvedPhase>> {
    let mut phases = resolve::resolve_profile(profile, scope)?;
    if let Some(err) = resolve::unresolved_required(&phases, profile) {
        return Err(err.into());
    }
    for p in &phases {
        match &p.status {
            Status::Unresolved { reason, .. } => {
                eprintln!(
                    "wprof: warning: optional phase '{}' not attached: {reason}",
                    p.phase.name
                )
            }
            Status::Unsupported(why) => {
                eprintln!(
                    "wprof: warning: phase '{}' not attached: {why}",
                    p.phase.name
                )
            }
            Status::Resolved => {}
        }
        for w in &p.warnings {
            eprintln!("wprof: warning: {w}");
        }
    }
    // Optional phases whose library is not there yet may still come (late attach).
    let waiting = phases
        .iter()
        .any(|p| p.phase.optional && p.object_missing());
    if !waiting && !phases.iter().any(|p| matches!(p.status, Status::Resolved)) {
        return Err(WprofError::Unresolved(format!(
            "no phase of profile '{}' resolved",
            profile.name
        ))
        .into());
    }
    phases.sort_by_key(|p| p.id);
    Ok(phases)
}

/// How each phase counts units: its `unit`, from its `arg` or one per call.
fn unit_specs(profile: &Profile) -> Vec<Option<UnitSpec>> {
    profile
        .phases
        .iter()
        .map(|p| {
            p.unit.as_ref().map(|u| UnitSpec {
                name: u.clone(),
                from_arg: p.capture().is_some(),
            })
        })
        .collect()
}

fn join(pids: &[u32]) -> String {
    pids.iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
