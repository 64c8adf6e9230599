//! Attach: resolved phases -> live uprobes owned by a [`Tracer`].
//!
//! In: [`ResolvedPhase`]s and the pids to trace. Out: a loaded BPF object with one entry probe
//! per function and, per phase, either a uprobe on every exit site (RET-site mode) or a
//! uretprobe. Every link is a file descriptor owned by the tracer: dropping it — or wprof
//! dying, even by SIGKILL — detaches everything, so no probe outlives wprof.

mod capabilities;
pub mod copied_stacks;
mod guard_writer;
mod kernel;
mod links;
mod maps;
mod sampler;
mod unwind_guard;
mod usdt;

use std::num::NonZeroU32;

use anyhow::{Context, Result};
use aya::{
    include_bytes_aligned,
    programs::{
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLinkId, UProbeScope},
        UProbe,
    },
    Ebpf, EbpfLoader,
};
use wprof_common::names::{map, program};
use wprof_common::{
    cookie, cookie_with, go_cookie, SiteKind, ARG_NONE, ARG_RETVAL, COOKIE_STW_START_BIT,
    COOKIE_STW_STOP_BIT,
};

/// The Go runtime function after whose return every goroutine of the process is stopped.
const GO_STOP_THE_WORLD: &str = "runtime.stopTheWorldWithSema";

/// The Go runtime function whose entry ends a stop-the-world pause.
const GO_START_THE_WORLD: &str = "runtime.startTheWorldWithSema";

pub use capabilities::{check_capabilities, missing_capabilities};
pub use links::Detaching;
pub use maps::ThreadEntries;
pub use unwind_guard::GuardWrites;

use crate::error::WprofError;
use crate::model::profile::Capture;
use crate::model::Language;
use crate::resolve::{ResolvedPhase, ResolvedSymbol};
use links::LinkPlan;

/// The eBPF object built from probes/ebpf by build.rs.
static BPF_OBJECT: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/wprof-ebpf"));

/// The three programs of one attach mechanism: entry, RET site, uretprobe.
#[derive(Debug, Clone, Copy)]
struct ProgramSet {
    entry: &'static str,
    ret_site: &'static str,
    uretprobe: &'static str,
}

impl ProgramSet {
    fn all(&self) -> [&'static str; 3] {
        [self.entry, self.ret_site, self.uretprobe]
    }
}

/// One perf link per probe point: works on every kernel with uprobes.
const PER_POINT: ProgramSet = ProgramSet {
    entry: program::ENTRY,
    ret_site: program::RET_SITE,
    uretprobe: program::URETPROBE,
};

/// One uprobe_multi link per (program, object, pid): 6.6+; detaching costs one RCU grace period
/// instead of ~100 ms per point.
const MULTI: ProgramSet = ProgramSet {
    entry: program::MULTI_ENTRY,
    ret_site: program::MULTI_RET_SITE,
    uretprobe: program::MULTI_URETPROBE,
};

/// Options for loading the BPF side.
#[derive(Debug, Clone, Copy)]
pub struct TracerOptions {
    /// Ring buffer size in bytes (rounded up to a power-of-two number of pages).
    pub ring_bytes: u32,
    /// Whether off-CPU stacks will be taken: sizes the stack-trace map (CPU samples carry
    /// their stacks in their records).
    pub stacks: bool,
    /// Whether calls are aggregated in the kernel from the start (`--aggregate kernel`).
    pub kernel_aggregate: bool,
    /// Whether they may be (`kernel` or `auto`): sizes the preallocated histogram map.
    pub kernel_maps: bool,
}

impl TracerOptions {
    /// The smallest maps: enough to load the programs and see whether the kernel takes them.
    pub const MINIMAL: TracerOptions = TracerOptions {
        ring_bytes: 4096,
        stacks: false,
        kernel_aggregate: false,
        kernel_maps: false,
    };
}

/// The loaded BPF programs and maps, and every probe attached through them.
pub struct Tracer {
    ebpf: Ebpf,
    progs: ProgramSet,
    /// Kernel-side programs loaded on demand (tracepoints, perf events).
    extra: Vec<&'static str>,
    detached: bool,
    /// `--aggregate kernel`: switched on in BPF by [`Tracer::attach`].
    kernel_aggregate: bool,
    /// The unwind guard is live ([`Tracer::guard_unwinding`]).
    guarded: bool,
    /// Uretprobe frames keep their return address ([`Tracer::keep_return_addresses`]).
    return_addresses: bool,
    /// Who writes for the unwind guard, once its programs are loaded.
    guard_writes: Option<unwind_guard::GuardWrites>,
    /// The thread that writes for it where the kernel refuses BPF's writes.
    guard_writer: Option<guard_writer::GuardWriter>,
    /// Names of the attached guarded phases by id, for what detaching says of them.
    phase_names: std::collections::HashMap<u32, String>,
    /// Phases whose probes get links of their own, so they can come off alone
    /// ([`Tracer::keep_phase_links`]).
    movable: std::collections::HashSet<u32>,
    /// The CPU sampling events (`--cpu-sample`), with their jittered periods.
    sampler: Option<sampler::JitteredSampler>,
    /// Their live links by phase id: (program, link), entries and returns.
    phase_links: std::collections::HashMap<u32, Vec<(&'static str, UProbeLinkId)>>,
    /// Their attach calls by phase id, to put them back ([`Tracer::reattach_phases`]).
    phase_plans: std::collections::HashMap<u32, Vec<LinkPlan>>,
    /// The USDT phases' probes (see `usdt`): links of their own, with their semaphores.
    usdt_links: Vec<usdt::UsdtLink>,
    /// When [`Tracer::sweep_exited_threads`] last ran.
    last_sweep: std::time::Instant,
    /// The stacks CPU samples carried, stored by the collector.
    copied_stacks: copied_stacks::SharedStacks,
    /// sched:sched_switch following the traced threads, once [`Tracer::attach_off_cpu`] ran.
    off_cpu: Option<SchedSwitch>,
}

/// Whether sched:sched_switch is attached now ([`Tracer::pause_off_cpu`]).
enum SchedSwitch {
    /// Attached, through this link.
    Live(aya::programs::trace_point::TracePointLinkId),
    /// Off while a duty cycle has the probes off.
    Paused,
}

/// One calibration function to probe (`probe_cost::calibrate`).
#[derive(Debug, Clone, Copy)]
pub struct CalibrationPoint {
    /// The phase id its spans carry.
    pub phase: u32,
    /// File offset of its entry.
    pub entry: u64,
    /// File offset of its RET, or None for a uretprobe.
    pub exit: Option<u64>,
}

/// What an attach did.
#[derive(Debug, Clone, Default)]
pub struct AttachSummary {
    /// Probe points attached (entry and exit sites, per pid).
    pub points: usize,
    /// Kernel links created for them.
    pub links: usize,
}

/// Rounds a requested ring size to what the kernel accepts: a power of two, at least a page.
pub fn ring_size(requested: u32) -> u32 {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u32;
    requested
        .max(page)
        .checked_next_power_of_two()
        .unwrap_or(1 << 31)
}

impl Tracer {
    /// Loads the BPF programs. Checks capabilities first so a missing one gets a clear error.
    pub fn load(opts: TracerOptions) -> Result<Tracer> {
        check_capabilities()?;
        let ebpf = EbpfLoader::new()
            .map_max_entries(map::EVENTS, ring_size(opts.ring_bytes))
            // Each entry is a 127-frame stack (~1 KiB), preallocated: only size it when used.
            .map_max_entries(map::STACK_TRACES, if opts.stacks { 16_384 } else { 1 })
            // ~18 MiB, preallocated: only for in-kernel aggregation.
            .map_max_entries(
                map::HIST_BUCKETS,
                if opts.kernel_maps {
                    wprof_common::MAX_HIST_BUCKETS
                } else {
                    1
                },
            )
            .load(BPF_OBJECT)
            .context("load wprof's BPF programs (does this kernel have BPF and uprobes?)")?;
        // A multi link filtered on a pid must cover every thread of the process (6.6+ does).
        // WPROF_PER_POINT_LINKS=1 forces the older mechanism (tests, kernel comparisons).
        let forced = std::env::var("WPROF_PER_POINT_LINKS").is_ok_and(|v| v == "1");
        let multi = !forced
            && aya::sys::is_uprobe_multi_supported(
                aya::sys::UProbeMultiFeature::ProcessScopedPidFilter,
            )
            .unwrap_or(false);
        let progs = if multi { MULTI } else { PER_POINT };
        let mut tracer = Tracer {
            ebpf,
            progs,
            extra: Vec::new(),
            detached: false,
            kernel_aggregate: opts.kernel_aggregate,
            guarded: false,
            return_addresses: false,
            guard_writes: None,
            guard_writer: None,
            phase_names: std::collections::HashMap::new(),
            movable: Default::default(),
            sampler: None,
            phase_plans: Default::default(),
            phase_links: Default::default(),
            copied_stacks: Default::default(),
            off_cpu: None,
            usdt_links: Vec::new(),
            last_sweep: std::time::Instant::now(),
        };
        for name in progs.all() {
            verified(name, tracer.program(name)?.load())?;
        }
        // Threads keep their stacks between root calls; `sweep_exited_threads` frees them.
        tracer.set_config(wprof_common::config::KEEP_THREAD_STACKS, 1)?;
        if opts.stacks {
            // Stacks taken during calls are restored with their frames' return addresses.
            tracer.keep_return_addresses()?;
        }
        Ok(tracer)
    }

    fn program(&mut self, name: &str) -> Result<&mut UProbe> {
        let prog = self
            .ebpf
            .program_mut(name)
            .with_context(|| format!("BPF object has no program {name}"))?;
        prog.try_into()
            .with_context(|| format!("BPF program {name} is not a uprobe"))
    }

    /// Attaches every resolved phase in every pid: the points of one program in one object and
    /// pid go in one attach call. A pid that is gone gets a [`WprofError::NoProcess`] error.
    /// With `every_process` (`--follow-forks`, after [`Tracer::follow_forks`]) the probes go on
    /// the objects for every process that maps them, once, and BPF keeps the traced ones.
    pub fn attach(
        &mut self,
        phases: &[ResolvedPhase],
        pids: &[u32],
        every_process: bool,
    ) -> Result<AttachSummary> {
        if self.kernel_aggregate {
            // Before the first phase probe goes live, after the calibration (whose calls
            // must come as spans).
            self.aggregate_in_kernel()?;
        }
        self.set_phase_keys(phases)?;
        let mut summary = AttachSummary::default();
        // (program, object, phase when it gets links of its own) -> points, in phase order.
        let mut plan: Vec<(
            &'static str,
            &ResolvedSymbol,
            Option<u32>,
            Vec<UProbeAttachPoint<'static>>,
        )> = Vec::new();
        let mut stw_phase = None;
        for rp in phases.iter().filter(|p| p.is_probed() && p.usdt.is_none()) {
            let own = self.movable.contains(&rp.id).then_some(rp.id);
            let uret = rp.return_mode.uses_uretprobe();
            if rp.return_mode == crate::model::profile::ReturnMode::Guarded {
                self.phase_names.insert(rp.id, rp.phase.name.clone());
            }
            let (entry_arg, exit_arg) = match rp.phase.capture() {
                None => (ARG_NONE, ARG_NONE),
                Some(Capture::Arg(n)) => (n as u64 + 1, ARG_NONE),
                Some(Capture::RetVal) => (ARG_NONE, ARG_RETVAL),
            };
            let under = rp
                .phase
                .under
                .as_ref()
                .and_then(|u| phases.iter().find(|q| &q.phase.name == u).map(|q| q.id + 1));
            let under = under.unwrap_or(0);
            let keyed = if rp.phase.group_by.is_some() {
                wprof_common::COOKIE_KEY_BIT
            } else {
                0
            };
            let entry_cookie =
                |kind| cookie_with(cookie(rp.id, kind, uret), entry_arg, under) | keyed;
            let exit_cookie = |kind| cookie_with(cookie(rp.id, kind, uret), exit_arg, under);
            for t in &rp.targets {
                // A Go function's phase stack is its goroutine's (see wprof_common::COOKIE_GO_BIT).
                let go = |c: u64| {
                    if t.language == Language::Go {
                        go_cookie(c)
                    } else {
                        c
                    }
                };
                // The Go runtime's stop-the-world pair: the world is stopped from the
                // return of the one to the entry of the other.
                let (stw_stop, stw_start) = match (t.language, t.symbol.as_str()) {
                    (Language::Go, GO_STOP_THE_WORLD) => (COOKIE_STW_STOP_BIT, 0),
                    (Language::Go, GO_START_THE_WORLD) => (0, COOKIE_STW_START_BIT),
                    _ => (0, 0),
                };
                if stw_stop != 0 {
                    stw_phase = Some(rp.id);
                }
                let mut push = |prog: &'static str, p: UProbeAttachPoint<'static>| match plan
                    .iter_mut()
                    .find(|(g, o, ph, _)| *g == prog && o.object == t.object && *ph == own)
                {
                    Some((_, _, _, pts)) => pts.push(p),
                    None => plan.push((prog, t, own, vec![p])),
                };
                push(
                    self.progs.entry,
                    point(
                        t.entry.file_offset,
                        go(entry_cookie(SiteKind::Entry)) | stw_start,
                    ),
                );
                if uret {
                    push(
                        self.progs.uretprobe,
                        point(t.entry.file_offset, go(exit_cookie(SiteKind::Uretprobe))),
                    );
                } else {
                    for s in &t.exits {
                        push(
                            self.progs.ret_site,
                            point(s.file_offset, go(exit_cookie(SiteKind::RetSite)) | stw_stop),
                        );
                    }
                }
            }
        }
        if let Some(id) = stw_phase {
            // Go calls show the stop-the-world pauses they sat through under this phase.
            self.set_config(wprof_common::config::GO_STW_PHASE, u64::from(id) + 1)?;
        }
        // Entries go live before returns, the phases closing meanwhile (`CLOSING_PHASES`): a
        // call entering then keeps a frame but is not counted, so every call the kernel arms
        // with a uretprobe's trampoline has a frame the unwind guard knows (returns first left
        // the calls entering between armed and unknown, and a guarded phase moved back by
        // `--in-situ` ended a C++ program in `std::terminate`). A call in flight before is
        // not seen at all.
        let entry = self.progs.entry;
        plan.sort_by_key(|(prog, _, _, _)| *prog != entry);
        let opening: Vec<u32> = phases
            .iter()
            .filter(|p| p.is_probed() && p.usdt.is_none())
            .map(|p| p.id)
            .collect();
        self.set_closing(&opening, true)?;
        let usdt: Vec<&ResolvedPhase> = phases
            .iter()
            .filter(|p| p.is_probed() && p.usdt.is_some())
            .collect();
        let points = self.attach_usdt(&usdt, pids, every_process)?;
        summary.points += points;
        summary.links += points;
        let scopes = scopes(pids, every_process)?;
        for (scope, pid) in scopes {
            for (prog, target, own, points) in &plan {
                let what = format!("{} probe points in {}", points.len(), target.display_object);
                let link = self.attach_points(prog, points.clone(), target, scope, pid, &what)?;
                if let Some(id) = own {
                    self.phase_links.entry(*id).or_default().push((prog, link));
                    self.phase_plans.entry(*id).or_default().push(LinkPlan {
                        prog,
                        target: (*target).clone(),
                        points: points.clone(),
                        scope,
                        pid,
                    });
                }
                summary.points += points.len();
                summary.links += if self.uses_multi_links() {
                    1
                } else {
                    points.len()
                };
            }
        }
        self.set_closing(&opening, false)?;
        Ok(summary)
    }

    fn attach_points(
        &mut self,
        prog: &str,
        points: Vec<UProbeAttachPoint<'static>>,
        target: &ResolvedSymbol,
        scope: UProbeScope,
        pid: u32,
        what: &str,
    ) -> Result<UProbeLinkId> {
        let object = target.object.clone();
        match self.program(prog)?.attach(points, &object, scope) {
            Ok(link) => Ok(link),
            Err(e) if !process_alive(pid) => Err(WprofError::NoProcess(format!(
                "process {pid} exited while wprof was attaching {what}: {e}"
            ))
            .into()),
            Err(e) => Err(anyhow::Error::new(e).context(format!("attach {what} in pid {pid}"))),
        }
    }

    /// Attaches the calibration probes (see `probe_cost::calibrate`) to `object` in `pid`: an
    /// entry probe per point and either a probe on its RET (`exit`) or a uretprobe.
    pub fn attach_calibration(
        &mut self,
        object: &std::path::Path,
        pid: u32,
        points: &[CalibrationPoint],
    ) -> Result<()> {
        let scope = UProbeScope::OneProcess(
            NonZeroU32::new(pid).ok_or_else(|| WprofError::Usage("pid 0".into()))?,
        );
        let mut entries = Vec::new();
        let mut rets = Vec::new();
        let mut urets = Vec::new();
        for p in points {
            let uret = p.exit.is_none();
            entries.push(point(p.entry, cookie(p.phase, SiteKind::Entry, uret)));
            match p.exit {
                Some(off) => rets.push(point(off, cookie(p.phase, SiteKind::RetSite, false))),
                None => urets.push(point(p.entry, cookie(p.phase, SiteKind::Uretprobe, true))),
            }
        }
        let progs = self.progs;
        for (prog, pts) in [
            (progs.entry, entries),
            (progs.ret_site, rets),
            (progs.uretprobe, urets),
        ] {
            if !pts.is_empty() {
                self.program(prog)?
                    .attach(pts, object, scope)
                    .context("attach the calibration probes")?;
            }
        }
        Ok(())
    }

    /// Watches the dynamic loader of the traced processes (`ld`: its `_dl_debug_state`) so
    /// a dlopen is reported at once (`EventKind::MapsChanged`).
    pub fn watch_dlopen(
        &mut self,
        ld: &ResolvedSymbol,
        pids: &[u32],
        every_process: bool,
    ) -> Result<()> {
        let (prog, first) = self.extra_program::<UProbe>(program::DL_STATE)?;
        if first {
            verified(program::DL_STATE, prog.load())?;
        }
        for (scope, _) in scopes(pids, every_process)? {
            prog.attach(
                [UProbeAttachLocation::AbsoluteOffset(ld.entry.file_offset)],
                &ld.object,
                scope,
            )
            .with_context(|| format!("watch dlopen through {}", ld.display_object))?;
        }
        Ok(())
    }

    /// From now on uretprobe frames keep their return address (`config::NEED_RET_ADDR`): for
    /// the unwind guard and for restoring sampled stacks. Before the first phase probe goes
    /// live, or the frames already open lack it.
    pub fn keep_return_addresses(&mut self) -> Result<()> {
        self.set_config(wprof_common::config::NEED_RET_ADDR, 1)?;
        self.return_addresses = true;
        Ok(())
    }

    /// Whether entries read their return address now (see [`Tracer::keep_return_addresses`]).
    pub fn keeps_return_addresses(&self) -> bool {
        self.return_addresses
    }

    /// Detaches every probe (idempotent). Maps stay readable for the final counts.
    pub fn detach(&mut self) {
        if self.detached {
            return;
        }
        // Stop counting first: entries that fire while the uretprobes come off would open
        // calls whose returns are never seen (abandoned, thousands a second on a hot phase).
        // Without the unwind guard, stopped, a call in flight is left open at the end. With
        // it, closing: a call entering now is not counted but keeps its frame, since the
        // kernel arms it until its uretprobe is gone and the guard must know every armed
        // frame; the calls in flight still return and count.
        let closing = if self.guarded {
            wprof_common::config::CLOSING
        } else {
            1
        };
        let _ = self.set_config(wprof_common::config::STOPPED, closing);
        // Each release waits for the kernel's uprobe grace period: all at once.
        std::thread::scope(|s| {
            for link in std::mem::take(&mut self.usdt_links) {
                s.spawn(move || drop(link));
            }
        });
        // With it, the uretprobes first: from then on the kernel arms no new frame with its
        // trampoline, while the guard (unloaded last) still protects the frames it armed.
        let uretprobe = self.progs.uretprobe;
        if let Ok(p) = self.program(uretprobe) {
            let _ = p.unload();
        }
        if self.guarded {
            self.drain_guarded();
        }
        // Then, so hits during the unloading below change nothing (see config::STOPPED).
        let _ = self.set_config(wprof_common::config::STOPPED, 1);
        for name in self.progs.all() {
            if let Ok(p) = self.program(name) {
                let _ = p.unload();
            }
        }
        self.unload_extra();
        // Last: a guard program still running while the programs went was answered.
        if let Some(mut w) = self.guard_writer.take() {
            w.stop();
        }
        self.detached = true;
    }

    /// Whether probes go through uprobe_multi links (one per program, object and pid).
    pub fn uses_multi_links(&self) -> bool {
        self.progs.entry == MULTI.entry
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        self.detach();
    }
}

/// Where probes go: once for every process mapping the object (`every_process`, reported
/// under the first pid), or once per pid.
fn scopes(pids: &[u32], every_process: bool) -> Result<Vec<(UProbeScope, u32)>> {
    if every_process {
        return Ok(vec![(
            UProbeScope::AllProcesses,
            pids.first().copied().unwrap_or(0),
        )]);
    }
    pids.iter()
        .map(|&pid| {
            NonZeroU32::new(pid)
                .map(|p| (UProbeScope::OneProcess(p), pid))
                .ok_or_else(|| WprofError::Usage("pid 0".into()).into())
        })
        .collect()
}

fn point(file_offset: u64, cookie: u64) -> UProbeAttachPoint<'static> {
    UProbeAttachPoint {
        location: UProbeAttachLocation::AbsoluteOffset(file_offset),
        cookie: Some(cookie),
    }
}

/// Verifier log lines kept in a load error (the cause is at the end of the log; a whole log
/// can be tens of thousands of lines on an older kernel).
const VERIFIER_TAIL: usize = 20;

/// The result of loading program `name`, with a load error's verifier log cut to its last
/// lines. Set `WPROF_VERIFIER_LOG=1` to keep all of it.
pub(crate) fn verified(name: &str, r: Result<(), aya::programs::ProgramError>) -> Result<()> {
    match r {
        Ok(()) => Ok(()),
        Err(aya::programs::ProgramError::LoadError {
            io_error,
            verifier_log,
        }) if std::env::var("WPROF_VERIFIER_LOG").map_or(true, |v| v != "1") => {
            let log = verifier_log.to_string();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(VERIFIER_TAIL)..].join("\n");
            Err(anyhow::anyhow!(
                "verify and load BPF program {name}: the kernel refused it ({io_error}); last \
                 {} of {} verifier log lines (WPROF_VERIFIER_LOG=1 for all):\n{tail}",
                lines.len().min(VERIFIER_TAIL),
                lines.len()
            ))
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("verify and load BPF program {name}"))),
    }
}

/// CLOCK_MONOTONIC now, ns: the clock of bpf_ktime_get_ns and so of every span.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `clock` now, ns.
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a timespec to fill.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Whether a process exists and has not exited (a zombie counts as exited).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the parenthesised command name, which may itself hold spaces.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X") | None)
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_program_keeps_the_end_of_its_verifier_log() {
        let log: String = (1..=500).map(|i| format!("insn {i}\n")).collect();
        let err = aya::programs::ProgramError::LoadError {
            io_error: std::io::Error::from_raw_os_error(libc::E2BIG),
            verifier_log: aya_obj::VerifierLog::new(log + "BPF program is too large"),
        };
        let text = format!("{:#}", verified("wprof_x", Err(err)).unwrap_err());
        assert!(text.starts_with("verify and load BPF program wprof_x: the kernel refused it"));
        assert!(text.contains("last 20 of 501 verifier log lines"), "{text}");
        assert!(
            text.ends_with("insn 500\nBPF program is too large"),
            "{text}"
        );
        assert!(!text.contains("insn 481\n"), "{text}");
        assert_eq!(text.lines().count(), 21);
        assert!(verified("wprof_x", Ok(())).is_ok());
    }
}
