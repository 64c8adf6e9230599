//! Session: one `attach` or `record` run, stage by stage.
//!
//! resolve -> attach -> (collect -> aggregate, until an end condition) -> detach -> final
//! counts -> the [`Run`] -> outputs. The end conditions are Ctrl-C/SIGTERM, `--duration`, and
//! the exit of the last traced process; each writes every output.

mod budget;
mod child;
mod costs;
mod duty;
mod estimate;
mod guard;
mod insitu;
mod instances;
mod late;
mod outputs;
mod overhead;
mod processes;
mod snapshots;
mod stacks;
mod trace_loop;

use anyhow::{Context, Result};

use crate::aggregate::{Aggregator, DEFAULT_MAX_SPANS};
use crate::args::{AttachArgs, RecordArgs, TraceArgs};
use crate::attach::{check_capabilities, process_alive, Tracer, TracerOptions};
use crate::collect::{read_end_state, Collector, EndState};
use crate::error::{exit, WprofError};
use crate::model::UnitSpec;
use crate::model::{
    Counters, ObjectInfo, PhaseInfo, ProbeCost, ProcessRun, Provenance, Run, StackProfile,
};
use crate::probe_cost;
use crate::profile::Profile;
use crate::resolve::{self, ResolvedPhase, Scope, Status};
use costs::{calibrated, RunCosts};

pub use child::GatedChild;
pub use estimate::{estimate, Estimate};
pub use guard::check_loadable as check_unwind_guard;
pub use outputs::write_outputs;
pub use trace_loop::{EndReason, Watch};

/// `wprof attach`: trace running processes until an end condition; exit code 0.
pub fn attach(mut a: AttachArgs) -> Result<i32> {
    let profile = a.target.load()?;
    sample_for_phases(&profile, &mut a.trace);
    split_phase(&profile, &a.trace)?;
    outputs::check_output_paths(&a.outputs)?;
    // First, so a missing capability is reported as such and not as a /proc permission error.
    check_capabilities()?;
    for &pid in &a.pid {
        // Its own probes would fire inside its own BPF-reading loop: each hit makes work that
        // hits again (a livelock that ignores --duration and signals).
        if pid == std::process::id()
            || std::path::Path::new(&format!("/proc/self/task/{pid}")).exists()
        {
            return Err(WprofError::Usage(format!(
                "pid {pid} is wprof itself (or one of its threads): wprof cannot trace itself"
            ))
            .into());
        }
        if !process_alive(pid) {
            let why = if std::path::Path::new(&format!("/proc/{pid}")).exists() {
                format!(
                    "process {pid} has exited (a zombie its parent has not reaped yet): there is \
                     nothing left to trace"
                )
            } else {
                format!(
                    "no process with pid {pid} (check `ps -p {pid}`; wprof attaches to running \
                     processes)"
                )
            };
            return Err(WprofError::NoProcess(why).into());
        }
    }
    crate::privilege::check_may_trace(&a.pid)?;
    let scope = Scope::Pids(a.pid.clone());
    let mut phases = resolve_checked(&profile, scope.clone(), &a.trace)?;
    instances::warn_other_tracers(&a.pid, &phases);
    let mut tracer = Tracer::load(tracer_options(&a.trace))?;
    let guard = guard::prepare(&mut tracer, &mut phases, &scope);
    let mut collector = Collector::new(&mut tracer)?;
    let costs = calibrated(&mut tracer, &mut collector, &phases, &a.trace)?;
    test_pause_before_attach();
    if a.follow_forks {
        // Before any uprobe goes live: from then on BPF keeps only the traced processes.
        tracer.trace_pids(&a.pid)?;
        tracer.follow_forks()?;
    }
    let attach_started = std::time::Instant::now();
    if let Some(g) = &guard {
        g.attach(&mut tracer, &a.pid, a.follow_forks)?;
    }
    movable_links(&mut tracer, &phases, &a.trace);
    let summary = tracer.attach(&phases, &a.pid, a.follow_forks)?;
    if a.follow_forks {
        processes::note_untraced_mappers(&phases, &a.pid);
    }
    let kernel = attach_kernel_side(&mut tracer, &phases, &a.pid, &a.trace)?;
    let attach_ms = attach_started.elapsed().as_secs_f64() * 1e3;
    let mut late = late::watch_dlopen(
        &mut tracer,
        &profile,
        &phases,
        &a.pid,
        a.follow_forks,
        &a.trace,
    );
    // A process that died during attach may have accepted no probe or a useless one.
    if let Some(gone) = a.pid.iter().find(|&&p| !process_alive(p)) {
        return Err(WprofError::NoProcess(format!(
            "process {gone} exited while wprof was attaching; nothing was traced (start it again and re-run)"
        ))
        .into());
    }
    // Before the "attached" line, so a Ctrl-C right after it already ends the run cleanly.
    let mut watch = Watch::pids(a.pid.clone(), a.trace.duration);
    let forks = if a.follow_forks {
        " and the processes they fork"
    } else {
        ""
    };
    eprintln!(
        "wprof: attached {} probe points ({} links{kernel}, {} phases) in {attach_ms:.1} ms to pid {}{forks}; Ctrl-C to stop",
        summary.points,
        summary.links,
        phases
            .iter()
            .filter(|p| matches!(p.status, Status::Resolved))
            .count(),
        join(&a.pid)
    );
    let started = std::time::SystemTime::now();
    let traced = run(
        &mut tracer,
        collector,
        &costs,
        &phases,
        &profile,
        &a.trace,
        &mut watch,
        &a.pid,
        late.as_mut(),
        auto_switch(&a.trace, &a.outputs),
    )?;
    if let Some(l) = late {
        l.merge(&mut phases);
    }
    let over_budget = traced.reason == EndReason::OverheadBudget;
    let mut run = build_run(&profile, &phases, traced, started, &costs);
    run.provenance.pids = a.pid.clone();
    run.provenance.follow_forks = a.follow_forks;
    warn_losses(&run, a.trace.ring_size);
    write_outputs(&run, &a.outputs, a.trace.quiet)?;
    Ok(if over_budget { exit::OVER_BUDGET } else { 0 })
}

/// `wprof record`: start a command with probes live before its main runs, trace it to its
/// exit; exit with its status.
pub fn record(mut r: RecordArgs) -> Result<i32> {
    let profile = r.target.load()?;
    sample_for_phases(&profile, &mut r.trace);
    split_phase(&profile, &r.trace)?;
    outputs::check_output_paths(&r.outputs)?;
    check_capabilities()?;
    let exe = child::find_executable(&r.command[0])?;
    let launch = crate::privilege::command::launch_for(&exe, r.as_root)?;
    let scope = Scope::Binary(exe.clone());
    let mut phases = resolve_checked(&profile, scope.clone(), &r.trace)?;
    let mut tracer = Tracer::load(tracer_options(&r.trace))?;
    let guard = guard::prepare(&mut tracer, &mut phases, &scope);
    let mut collector = Collector::new(&mut tracer)?;
    let costs = calibrated(&mut tracer, &mut collector, &phases, &r.trace)?;
    let mut child = GatedChild::spawn(&exe, &r.command, &launch)?;
    instances::warn_other_tracers(&[child.pid()], &phases);
    let attach_started = std::time::Instant::now();
    movable_links(&mut tracer, &phases, &r.trace);
    let guarded = match &guard {
        Some(g) => g.attach(&mut tracer, &[child.pid()], false),
        None => Ok(()),
    };
    let attached = guarded
        .and_then(|()| tracer.attach(&phases, &[child.pid()], false))
        .and_then(|s| {
            attach_kernel_side(&mut tracer, &phases, &[child.pid()], &r.trace).map(|k| (s, k))
        });
    let (summary, kernel) = match attached {
        Ok(s) => s,
        Err(e) => {
            child.abort();
            return Err(e);
        }
    };
    let attach_ms = attach_started.elapsed().as_secs_f64() * 1e3;
    let mut late = late::watch_dlopen(
        &mut tracer,
        &profile,
        &phases,
        &[child.pid()],
        false,
        &r.trace,
    );
    if !r.trace.quiet {
        eprintln!(
            "wprof: {} probe points live ({} links{kernel}) in {attach_ms:.1} ms; starting {}",
            summary.points,
            summary.links,
            r.command.join(" ")
        );
    }
    let started = std::time::SystemTime::now();
    child.release()?;
    let pid = child.pid();
    let mut watch = Watch::child(child, r.trace.duration);
    let traced = run(
        &mut tracer,
        collector,
        &costs,
        &phases,
        &profile,
        &r.trace,
        &mut watch,
        &[pid],
        late.as_mut(),
        auto_switch(&r.trace, &r.outputs),
    )?;
    if let Some(l) = late {
        l.merge(&mut phases);
    }
    let status = watch.finish()?;
    let over_budget = traced.reason == EndReason::OverheadBudget;
    let mut run = build_run(&profile, &phases, traced, started, &costs);
    run.provenance.pids = vec![pid];
    run.provenance.command = Some(r.command.clone());
    warn_losses(&run, r.trace.ring_size);
    write_outputs(&run, &r.outputs, r.trace.quiet)?;
    // The command ran on untraced after the probes were detached: its own failure first.
    Ok(if over_budget && status == 0 {
        exit::OVER_BUDGET
    } else {
        status
    })
}

/// CPU samples a second per CPU that measure the sampled phases when the command line asks
/// for no rate (`--cpu-sample`): ~0.5 ms between samples, so a phase taking 1% of a parent
/// open one second gets ~20 samples.
const SAMPLED_PHASES_HZ: u64 = 1999;

/// Turns CPU sampling on when phases are measured by it: `measure = "sample"` phases, or
/// `--max-overhead` with phases it may move there.
fn sample_for_phases(profile: &Profile, t: &mut TraceArgs) {
    use crate::profile::Measure;
    if t.cpu_sample.is_some() {
        return;
    }
    let sampled = profile.phases.iter().any(|p| p.measure == Measure::Sample);
    let movable = t.max_overhead.is_some()
        && profile
            .phases
            .iter()
            .any(|p| p.measure == Measure::Auto && p.symbol.is_some());
    if sampled || movable {
        t.cpu_sample = Some(SAMPLED_PHASES_HZ);
        if !t.quiet {
            eprintln!(
                "wprof: CPU sampling at {SAMPLED_PHASES_HZ} Hz for the phases measured by \
                 sampling{} (--cpu-sample HZ sets the rate)",
                if sampled {
                    ""
                } else {
                    " (--max-overhead may move some there)"
                }
            );
        }
    }
}

/// With `--max-overhead`, gives every probed phase links of its own: the budget may move it
/// to sampling, or have it live only part of each second.
fn movable_links(tracer: &mut Tracer, phases: &[ResolvedPhase], t: &TraceArgs) {
    if t.max_overhead.is_some() || t.in_situ {
        tracer.keep_phase_links(phases.iter().filter(|p| p.is_probed()).map(|p| p.id));
    }
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

/// Attaches the kernel-side programs a run needs (kernel phases, off-CPU, CPU sampling) for
/// `pids`; returns a note for the "attached" line.
fn attach_kernel_side(
    tracer: &mut Tracer,
    phases: &[ResolvedPhase],
    pids: &[u32],
    t: &TraceArgs,
) -> Result<String> {
    tracer.trace_pids(pids)?;
    let mut note = String::new();
    let tracepoints = tracer.attach_kernel_phases(phases)?;
    if tracepoints > 0 {
        note.push_str(&format!(", {tracepoints} tracepoints"));
    }
    if t.off_cpu {
        tracer.attach_off_cpu()?;
        note.push_str(", off-CPU tracking");
    }
    if let Some(hz) = t.cpu_sample {
        let go = resolve::go_layout::layout_for_phases(phases).unwrap_or_else(|e| {
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

fn tracer_options(t: &TraceArgs) -> TracerOptions {
    TracerOptions {
        ring_bytes: t.ring_size,
        stacks: t.cpu_sample.is_some() || t.off_cpu,
        kernel_aggregate: t.aggregate == crate::args::AggregateMode::Kernel,
        kernel_maps: t.aggregate != crate::args::AggregateMode::Event,
    }
}

/// Resolves the profile and fails with exit 4 when a required phase does not resolve;
/// optional ones are warnings.
pub fn resolve_checked(
    profile: &Profile,
    scope: Scope,
    t: &TraceArgs,
) -> Result<Vec<ResolvedPhase>> {
    let mut phases = resolve::resolve_profile(
        &override_returns(profile, t.return_mode.map(Into::into)),
        &scope,
    )?;
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

/// Applies a global `--return` override to every symbol phase.
pub fn override_returns(profile: &Profile, mode: Option<crate::profile::ReturnMode>) -> Profile {
    let mut p = profile.clone();
    if let Some(m) = mode {
        for ph in &mut p.phases {
            ph.return_mode = m;
        }
    }
    p
}

/// What a traced run leaves for [`build_run`].
struct Traced {
    /// The probe costs measured again at the end of the run.
    at_end: Option<probe_cost::Measured>,
    agg: Aggregator,
    end: EndState,
    reason: EndReason,
    duration: std::time::Duration,
    cpu: Option<StackProfile>,
    off_cpu: Option<StackProfile>,
    labels: processes::ProcessLabels,
    /// CPU samples counted for the sampled phases.
    sampled: crate::aggregate::sampled::SampledCounts,
    /// Phases `--max-overhead` moved to sampling.
    moved: Vec<budget::Moved>,
    /// Per phase: unmatched returns caused by taking probes off and putting them back.
    excused: Vec<u64>,
    /// Share of the run the probes were live, when `--max-overhead` duty-cycled them.
    probes_live: Option<f64>,
}

#[allow(clippy::too_many_arguments)]
fn run(
    tracer: &mut Tracer,
    mut collector: Collector,
    costs: &RunCosts,
    phases: &[ResolvedPhase],
    profile: &Profile,
    t: &TraceArgs,
    watch: &mut Watch,
    pids: &[u32],
    late: Option<&mut late::LateAttach>,
    auto: AutoSwitch,
) -> Result<Traced> {
    let names = &phase_names(profile);
    // BPF aggregates since `tracer.attach` (TracerOptions::kernel_aggregate).
    let in_kernel = t.aggregate == crate::args::AggregateMode::Kernel;
    let mut agg = if in_kernel {
        Aggregator::new()
    } else {
        Aggregator::with_calls(names, t.max_calls, DEFAULT_MAX_SPANS)
    };
    if let Some(own) = costs.own_ns() {
        agg.correct_probe_time(own);
    }
    if t.off_cpu {
        agg.track_off_cpu();
    }
    if t.per_pid {
        agg.track_per_pid();
    }
    if t.in_situ {
        agg.track_light_epochs();
    }
    agg.count_units(unit_specs(profile));
    if let Some(phase) = split_phase(profile, t)? {
        agg.split_by(phase);
    }
    let mut labels = processes::ProcessLabels::new(pids);
    if let Some(skip) = t.skip {
        agg.skip_before(monotonic_ns() + skip.as_nanos() as u64);
    }
    let mut snapshots = match (&t.snapshots, t.interval) {
        (Some(path), Some(every)) => {
            Some(snapshots::Snapshots::create(path, every, names.to_vec())?)
        }
        _ => None,
    };
    let mut stack_sink = stacks::StackSink::new(t.cpu_sample.is_some() || t.off_cpu);
    let t0 = std::time::Instant::now();
    let mut hooks = RunHooks {
        tracer,
        late,
        auto,
        switched: false,
        keeper: if t.in_situ {
            budget::Keeper::new(phases).with_in_situ()
        } else {
            budget::Keeper::new(phases)
        },
        overhead: overhead::OverheadWatch::new(
            phases
                .iter()
                .map(|p| match &costs.measured {
                    Some(_) => costs
                        .per_phase
                        .get(p.id as usize)
                        .map_or(0.0, |c| c.pair_ns),
                    None => probe_cost::pair_ns(p),
                })
                .collect(),
            t.max_overhead,
            pids,
            t.quiet,
        ),
    };
    let sides = trace_loop::Sides {
        stacks: &mut stack_sink,
        snapshots: snapshots.as_mut(),
        labels: &mut labels,
        hooks: &mut hooks,
    };
    let reason = trace_loop::run(&mut collector, &mut agg, sides, watch, !t.quiet)?;
    let in_kernel = in_kernel || hooks.switched;
    let (probes_live, moved, excused) = hooks.keeper.finish(hooks.tracer);
    if hooks.switched {
        // Its rows stop at the switch: a partial table would read as the whole run.
        agg.drop_calls();
    }
    let duration = t0.elapsed();
    // In-kernel aggregation would swallow the calibration's calls; over budget, leave at once.
    let at_end = if in_kernel || reason == EndReason::OverheadBudget {
        None
    } else {
        let forward = probe_cost::Forward {
            events: &mut |e| agg.add(e),
            stacks: &mut |s| stack_sink.agg.add(s),
        };
        costs.recalibrate(tracer, &mut collector, t.ring_size, forward)
    };
    tracer.detach();
    collector.drain(|e| agg.add(e), |s| stack_sink.agg.add(s));
    agg.add_keys(collector.take_keys());
    labels.forks(&agg.take_forks());
    labels.refresh(agg.pids());
    if let Some(s) = snapshots.as_mut() {
        s.write(&agg)?;
    }
    let mut end =
        read_end_state(tracer, phases.len()).context("read the final counters from BPF")?;
    if in_kernel {
        crate::collect::kernel::finish_run(tracer, &mut agg, &mut end)?;
    }
    let sampled_names: Vec<String> = phases
        .iter()
        .filter(|p| matches!(p.status, Status::Resolved) && !p.is_probed())
        .map(|p| p.phase.name.clone())
        .chain(moved.iter().map(|m| names[m.id as usize].clone()))
        .collect();
    stack_sink.sample_phases(stacks::SampledFns::of(phases), sampled_names);
    let (cpu, off_cpu, sampled) = stack_sink
        .finish(tracer, &agg, names, &end, t.cpu_sample, t.off_cpu)
        .context("name the sampled stacks")?;
    Ok(Traced {
        at_end,
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
    })
}

/// What the collect loop calls back into.
struct RunHooks<'a> {
    tracer: &'a mut Tracer,
    late: Option<&'a mut late::LateAttach>,
    overhead: overhead::OverheadWatch,
    auto: AutoSwitch,
    /// Whether `--aggregate auto` switched to the kernel.
    switched: bool,
    /// What keeps the run within `--max-overhead`.
    keeper: budget::Keeper<'a>,
}

/// Calls a second above which `--aggregate auto` aggregates in the kernel: per event, wprof
/// loses spans from ~650,000 a second on these machines and spends most of a CPU before that.
const AUTO_KERNEL_CALLS_PER_S: f64 = 200_000.0;

/// What `--aggregate auto` may do in this run.
enum AutoSwitch {
    /// Not asked for.
    Off,
    /// It may switch to in-kernel aggregation.
    Allowed,
    /// It may not: these options need every call.
    Blocked(String),
}

/// `--aggregate auto` for a run with these options.
fn auto_switch(t: &TraceArgs, out: &crate::args::OutputArgs) -> AutoSwitch {
    if t.aggregate != crate::args::AggregateMode::Auto {
        return AutoSwitch::Off;
    }
    let blocking = t.per_call_options(out);
    if blocking.is_empty() {
        AutoSwitch::Allowed
    } else {
        AutoSwitch::Blocked(blocking.join(", "))
    }
}

impl RunHooks<'_> {
    /// `--aggregate auto`: switches once the last second's call rate passes the threshold.
    fn maybe_switch(&mut self) {
        let rate = self.overhead.calls_per_s;
        if self.switched || rate < AUTO_KERNEL_CALLS_PER_S {
            return;
        }
        match std::mem::replace(&mut self.auto, AutoSwitch::Off) {
            AutoSwitch::Allowed => match self.tracer.aggregate_in_kernel() {
                Ok(()) => {
                    self.switched = true;
                    eprintln!(
                        "wprof: {rate:.0} calls/s: aggregating in the kernel from now on \
                         (--aggregate auto; the calls so far are kept)"
                    );
                }
                Err(e) => eprintln!("wprof: warning: could not aggregate in the kernel: {e:#}"),
            },
            AutoSwitch::Blocked(why) => eprintln!(
                "wprof: {rate:.0} calls/s: staying per event (--aggregate auto) because {why} \
                 needs every call"
            ),
            AutoSwitch::Off => {}
        }
    }
}

impl trace_loop::Hooks for RunHooks<'_> {
    fn maps_changed(&mut self, pid: u32, at_ns: u64) {
        if let Some(l) = self.late.as_deref_mut() {
            l.maps_changed(pid, at_ns, self.tracer)
        }
    }

    fn tick(&mut self, agg: &mut Aggregator, traced: Vec<u32>) -> Option<EndReason> {
        self.tracer.jitter_sampling();
        self.tracer.sweep_exited_threads();
        self.keeper.poll(self.tracer, agg);
        let over = self.overhead.tick(self.tracer, traced.iter().copied());
        self.maybe_switch();
        let pct = over?;
        let moved = self.keeper.moved.len();
        let end = self.keeper.over(self.tracer, &self.overhead, pct, &*agg);
        if self.keeper.moved.len() != moved {
            self.overhead.rebase(self.tracer, &traced);
        }
        if self.keeper.duty_cycling() {
            self.overhead.measure_every(duty::CYCLE);
        }
        end
    }
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

/// Puts the sampled phases into the tree under their probed parents, and says which found no
/// probed parent.
fn graft_sampled(
    tree: &mut crate::model::PhaseTree,
    counts: &crate::aggregate::sampled::SampledCounts,
    phases: &[ResolvedPhase],
) {
    if counts.is_empty() {
        return;
    }
    let phase_of = |name: &str| {
        phases
            .iter()
            .find(|p| p.phase.name == name)
            .map(|p| (p.id, p.phase.role.clone()))
    };
    for path in crate::aggregate::sampled::graft(tree, counts, &phase_of) {
        eprintln!(
            "wprof: warning: CPU samples of sampled phases under '{path}', which has no node in \
             the tree, were left out"
        );
    }
}

fn build_run(
    profile: &Profile,
    phases: &[ResolvedPhase],
    traced: Traced,
    started: std::time::SystemTime,
    costs: &RunCosts,
) -> Run {
    let Traced {
        at_end,
        mut agg,
        end,
        reason,
        duration: traced,
        cpu,
        off_cpu,
        labels,
        sampled,
        moved,
        excused,
        probes_live,
    } = traced;
    let end = &end;
    use wprof_common::counter;
    let names = phase_names(profile);
    let roles: Vec<Option<String>> = profile.phases.iter().map(|p| p.role.clone()).collect();
    let events = agg.events();
    let skipped_spans = agg.skipped();
    let light = agg.take_light_epochs();
    let mut split = agg.finish_split(&names, &roles);
    let (mut tree, calls, spans, per_pid) = agg.finish_all(&names, &roles, &end.nodes);
    let calibration = costs
        .measured
        .as_ref()
        .map(|m| costs::calibration(m, at_end.as_ref()));
    let hits_by_phase: Vec<u64> = end.phases.iter().map(|p| p.entries + p.returns).collect();
    let errors = costs.errors_ns(at_end.as_ref());
    let error_per_hit = calibration.as_ref().map_or(0.0, |c| {
        // Without a second measurement, a host busier than its CPUs gets doubled errors.
        let factor = if c.contended && c.at_end.is_empty() {
            2.0
        } else {
            1.0
        };
        RunCosts::error_per_hit_ns(&errors, &hits_by_phase) * factor
    });
    costs::state_errors(&mut tree, error_per_hit);
    let in_situ = match (&light, costs.own_ns()) {
        (Some(l), Some(own)) => {
            let checks = crate::aggregate::insitu::check(&tree, l, &own, &names);
            crate::aggregate::insitu::apply(&mut tree, &checks, &own, l);
            checks
        }
        _ => Vec::new(),
    };
    graft_sampled(&mut tree, &sampled, phases);
    if let Some(s) = &mut split {
        costs::state_errors(&mut s.with, error_per_hit);
        costs::state_errors(&mut s.without, error_per_hit);
    }
    let processes = per_pid
        .into_iter()
        .map(|mut p| {
            costs::state_errors(&mut p.tree, error_per_hit);
            ProcessRun {
                pid: p.pid,
                label: labels.label(p.pid),
                parent: labels.parent(p.pid),
                parent_label: labels.parent(p.pid).map(|q| labels.label(q)),
                tree: p.tree,
            }
        })
        .collect();

    let mut infos = Vec::new();
    let mut objects: Vec<ObjectInfo> = Vec::new();
    let mut added_ns = 0.0;
    let mut hits = 0;
    for rp in phases {
        let pc = end.phases.get(rp.id as usize).copied().unwrap_or_default();
        let first = rp.targets.first();
        let attached = matches!(rp.status, Status::Resolved);
        let calibrated = costs
            .per_phase
            .get(rp.id as usize)
            .copied()
            .unwrap_or_default();
        let pair = match (attached, &costs.measured) {
            (false, _) => 0.0,
            (true, Some(_)) => calibrated.pair_ns,
            (true, None) => probe_cost::pair_ns(rp),
        };
        hits += pc.entries + pc.returns;
        if let Some(t) = first {
            let entry_hit = match costs.measured {
                // The calibration measures pairs: split evenly between entry and return.
                Some(_) => pair / 2.0,
                None => probe_cost::hit_ns(t.entry.cost),
            };
            added_ns += pc.entries as f64 * entry_hit + pc.returns as f64 * (pair - entry_hit);
            let o = ObjectInfo {
                path: t.display_object.clone(),
                build_id: t.build_id.clone(),
            };
            if !objects.contains(&o) {
                objects.push(o);
            }
        }
        let (object, symbols, return_mode) = match &rp.kernel {
            // A kernel phase: its two tracepoints instead of an object's symbols.
            Some(k) => (
                "[kernel]".to_string(),
                vec![k.enter.to_string(), k.exit.to_string()],
                "tracepoint".to_string(),
            ),
            None => (
                first.map(|t| t.display_object.clone()).unwrap_or_default(),
                rp.targets.iter().map(|t| t.symbol.clone()).collect(),
                match (attached, &rp.usdt) {
                    (false, _) => "-".into(),
                    // Closed by a done probe: no return probe at all.
                    (true, Some(_)) => "usdt".into(),
                    (true, None) => rp.return_mode.as_str().to_string(),
                },
            ),
        };
        infos.push(PhaseInfo {
            id: rp.id,
            name: rp.phase.name.clone(),
            role: rp.phase.role.clone(),
            object,
            symbols,
            return_mode,
            entry_cost: first
                .map(|t| crate::model::class_name(t.entry.cost).to_string())
                .unwrap_or_default(),
            entry_offset: first.map_or(0, |t| t.entry_offset),
            exit_sites: rp.targets.iter().map(|t| t.exits.len() as u32).sum(),
            status: match moved.iter().find(|m| m.id == rp.id) {
                Some(m) => format!(
                    "moved to sampling after {:.1} s ({:.0} calls/s, --max-overhead)",
                    m.after_s, m.calls_per_s
                ),
                None if attached && !rp.is_probed() => "sampled".into(),
                None if attached => "attached".into(),
                None => status_text(&rp.status),
            },
            entries: pc.entries,
            returns: pc.returns,
            unmatched_returns: pc
                .unmatched_returns
                .saturating_sub(excused.get(rp.id as usize).copied().unwrap_or(0)),
            overflow: pc.overflow,
            outside_under: pc.outside_under,
            probe_pair_ns: pair,
            probe_own_ns: if attached { calibrated.own_ns } else { 0.0 },
        });
    }
    let counters = Counters {
        events,
        lost_spans: end.counter(counter::LOST_SPANS),
        lost_node_defs: end.counter(counter::LOST_NODE_DEFS),
        orphan_spans: tree.orphan_spans,
        unmatched_returns: end
            .counter(counter::UNMATCHED_RETURNS)
            .saturating_sub(excused.iter().sum()),
        abandoned: end.nodes.abandoned.values().sum(),
        open_at_end: end.nodes.open.values().sum(),
        overflow: end.counter(counter::OVERFLOW),
        no_stack: end.counter(counter::NO_STACK),
        skipped_spans,
        unwind: crate::model::UnwindCounters {
            unwinds: end.counter(counter::UNWINDS),
            restored: end.counter(counter::UNWIND_DISARMED),
            rearmed: end.counter(counter::UNWIND_REARMED),
            foreign: end.counter(counter::UNWIND_FOREIGN),
        },
    };
    let started_unix = started
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let provenance = Provenance {
        wprof_version: env!("CARGO_PKG_VERSION").to_string(),
        host: read_trim("/proc/sys/kernel/hostname"),
        kernel: read_trim("/proc/sys/kernel/osrelease"),
        started_unix,
        duration_s: traced.as_secs_f64(),
        pids: Vec::new(),
        follow_forks: false,
        forked: labels.forked(),
        command: None,
        profile_name: profile.name.clone(),
        profile_origin: profile.origin.clone(),
        profile_hash: profile.hash(),
        objects,
        end_reason: reason.to_string(),
        aggregation: end.aggregation,
        probes_live_fraction: probes_live,
    };
    Run {
        provenance,
        phases: infos,
        counters,
        probe_cost: ProbeCost {
            model: if costs.measured.is_some() {
                crate::model::MEASURED
            } else {
                crate::model::MODEL
            }
            .to_string(),
            hits,
            added_ns,
            calibration,
        },
        calls,
        spans,
        tree,
        cpu,
        off_cpu,
        processes,
        split,
        in_situ,
    }
}

/// The phase id of `--split-by PHASE` (None without it); a usage error naming the profile's
/// phases when it has no such phase. Checked before anything is attached.
fn split_phase(profile: &Profile, t: &TraceArgs) -> Result<Option<u32>> {
    match &t.split_by {
        None => Ok(None),
        Some(p) => Ok(Some(crate::aggregate::split::phase_id(
            &phase_names(profile),
            p,
        )?)),
    }
}

/// Says on stderr when the ring buffer overflowed: those calls are counted in the tree (its
/// `lost` rows), not timed.
fn warn_losses(run: &Run, ring_bytes: u32) {
    let c = &run.counters;
    if c.lost_spans + c.lost_node_defs == 0 {
        return;
    }
    eprintln!(
        "wprof: warning: {} calls were not timed and {} node definitions were lost: the {} ring \
         buffer was full; lost calls are counted in the tree's 'lost' rows. Raise --ring-size, \
         or use --aggregate kernel for paths this hot",
        c.lost_spans,
        c.lost_node_defs,
        bytes_text(crate::attach::ring_size(ring_bytes)),
    );
}

/// 8388608 -> "8 MiB", 4096 -> "4 KiB".
fn bytes_text(n: u32) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else {
        format!("{} KiB", n >> 10)
    }
}

/// CLOCK_MONOTONIC now, ns: the clock of bpf_ktime_get_ns and so of every span.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn phase_names(profile: &Profile) -> Vec<String> {
    profile.phases.iter().map(|p| p.name.clone()).collect()
}

/// One-line text of a resolution status.
pub fn status_text(s: &Status) -> String {
    match s {
        Status::Resolved => "resolved".to_string(),
        Status::Unresolved { reason, .. } => format!("unresolved: {reason}"),
        Status::Unsupported(why) => format!("unsupported: {why}"),
    }
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn join(pids: &[u32]) -> String {
    pids.iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
