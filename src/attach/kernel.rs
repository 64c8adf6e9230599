//! The kernel side of a run: kernel phases (tracepoint pairs), off-CPU tracking
//! (sched:sched_switch) and CPU sampling (software cpu-clock perf events, one per CPU).
//!
//! These programs fire for every process on the host; the BPF side drops whatever is not in
//! the `TRACED` set first thing, so untraced processes pay one hash lookup per hit.

use anyhow::{Context, Result};
use aya::programs::{PerfEvent, TracePoint, UProbe};
use wprof_common::names::program;
use wprof_common::{config, TracepointRole, SYS_EXIT_BIT};

use super::{verified, SchedSwitch, Tracer};
use crate::resolve::kernel::{tracefs, Tracepoint};
use crate::resolve::{ResolvedPhase, Status};

impl Tracer {
    /// Adds processes to the set the kernel-side programs report on.
    pub fn trace_pids(&mut self, pids: &[u32]) -> Result<()> {
        let mut traced = self.traced_mut()?;
        for &pid in pids {
            traced
                .insert(&pid, &1u8, 0)
                .with_context(|| format!("add pid {pid} to the traced set"))?;
        }
        Ok(())
    }

    /// Attaches the enter and exit tracepoints of every resolved kernel phase; returns how
    /// many tracepoints were attached.
    pub fn attach_kernel_phases(&mut self, phases: &[ResolvedPhase]) -> Result<usize> {
        let kernel: Vec<_> = phases
            .iter()
            .filter(|p| matches!(p.status, Status::Resolved))
            .filter_map(|p| p.kernel.as_ref().map(|k| (p.id, k)))
            .collect();
        if kernel.is_empty() {
            return Ok(0);
        }
        for (phase, k) in &kernel {
            for (tp, exit) in [(&k.enter, 0), (&k.exit, 1)] {
                self.register_tracepoint(tp, *phase, exit)?;
            }
        }
        let mut n = 0;
        for (_, k) in &kernel {
            for tp in [&k.enter, &k.exit] {
                let name = match (tp.syscall_nr, tp.syscall_exit) {
                    (None, _) => program::TRACEPOINT,
                    (Some(_), false) => program::SYS_ENTER,
                    (Some(_), true) => program::SYS_EXIT,
                };
                let (prog, first) = self.extra_program::<TracePoint>(name)?;
                if first {
                    verified(name, prog.load())?;
                }
                prog.attach(&tp.category, &tp.name)
                    .with_context(|| format!("attach tracepoint {tp}"))?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Tells the BPF side that `tp` opens (`exit` 0) or closes (1) `phase`.
    fn register_tracepoint(&mut self, tp: &Tracepoint, phase: u32, exit: u32) -> Result<()> {
        match tp.syscall_nr {
            Some(nr) => {
                let mut slots = self.sys_phases_mut()?;
                let index = nr | if tp.syscall_exit { SYS_EXIT_BIT } else { 0 };
                slots
                    .set(index, &(phase + 1), 0)
                    .with_context(|| format!("register tracepoint {tp}"))?;
            }
            None => {
                let mut roles = self.tp_phases_mut()?;
                roles
                    .insert(&tp.id, &TracepointRole { phase, exit }, 0)
                    .with_context(|| format!("register tracepoint {tp}"))?;
            }
        }
        Ok(())
    }

    /// Sets one entry of the BPF side's `CONFIG` array.
    pub(super) fn set_config(&mut self, index: u32, value: u64) -> Result<()> {
        let mut cfg = self.config_mut()?;
        cfg.set(index, &value, 0)
            .with_context(|| format!("set BPF config {index}"))
    }

    /// `--aggregate kernel`: from now on a completed call updates its node's summary and
    /// histogram buckets in BPF maps (read by `collect::kernel` after the detach) instead of
    /// sending a span. [`Tracer::attach`] calls it when the tracer was loaded with
    /// `TracerOptions::kernel_aggregate`, so the calibration before it still gets spans.
    /// Calling it again is harmless.
    pub fn aggregate_in_kernel(&mut self) -> Result<()> {
        self.set_config(config::KERNEL_AGGREGATE, 1)
    }

    /// `--follow-forks`: every process a traced one forks is traced from its first
    /// instruction (sched:sched_process_fork runs in the parent, before the child is ever
    /// scheduled), and the uprobe programs keep only traced processes.
    pub fn follow_forks(&mut self) -> Result<()> {
        let child = field_offset("sched/sched_process_fork", "child_pid").unwrap_or(20);
        self.set_config(config::FORK_CHILD_PID, child)?;
        self.set_config(config::FILTER_TRACED, 1)?;
        let (prog, first) = self.extra_program::<TracePoint>(program::FORK)?;
        if first {
            verified(program::FORK, prog.load())?;
        }
        prog.attach("sched", "sched_process_fork")
            .context("attach tracepoint sched:sched_process_fork (is tracefs mounted?)")?;
        self.watch_exits()
    }

    /// Watches threads exit (sched:sched_process_exit, once), for `--follow-forks` to forget
    /// them (and free their phase stacks at once).
    fn watch_exits(&mut self) -> Result<()> {
        let (prog, first) = self.extra_program::<TracePoint>(program::EXIT)?;
        if first {
            verified(program::EXIT, prog.load())?;
            prog.attach("sched", "sched_process_exit")
                .context("attach tracepoint sched:sched_process_exit (is tracefs mounted?)")?;
        }
        Ok(())
    }

    /// Starts tracking when traced threads leave and re-enter the CPU: with `stacks`
    /// (`--off-cpu`), where they block too (stack ids and an off-CPU record each time);
    /// without, only the off-CPU and preempted time of the phases open meanwhile (a few map
    /// operations a switch), which is what the correction needs for the probes' share of the
    /// preemptions.
    pub fn attach_off_cpu(&mut self, stacks: bool) -> Result<()> {
        let prev = field_offset("sched/sched_switch", "prev_pid").unwrap_or(24);
        let next = field_offset("sched/sched_switch", "next_pid").unwrap_or(56);
        self.set_config(config::SCHED_PREV_PID, prev)?;
        self.set_config(config::SCHED_NEXT_PID, next)?;
        let state = field_offset("sched/sched_switch", "prev_state").unwrap_or(32);
        self.set_config(config::SCHED_PREV_STATE, state)?;
        let comm = field_offset("sched/sched_switch", "next_comm").unwrap_or(40);
        self.set_config(config::SCHED_NEXT_COMM, comm)?;
        self.mark_own_threads()?;
        if stacks {
            self.keep_return_addresses()?;
        }
        self.set_config(config::OFF_CPU_STACKLESS, u64::from(!stacks))?;
        let (prog, first) = self.extra_program::<TracePoint>(program::SCHED_SWITCH)?;
        if first {
            verified(program::SCHED_SWITCH, prog.load())?;
            let link = attach_sched_switch(prog)?;
            self.off_cpu = Some(SchedSwitch::Live(link));
        }
        Ok(())
    }

    /// Takes sched:sched_switch off (`paused`) or puts it back, when it follows the traced
    /// threads: under a duty cycle no phase is open while the probes are off, yet the program
    /// still cost every switch on the host a few map lookups (pgbench: ~56,000 switches a
    /// second, 330 ns each, 0.9% of two CPUs), in the windows that measure the program's own
    /// pace.
    pub fn pause_off_cpu(&mut self, paused: bool) -> Result<()> {
        let Some(state) = self.off_cpu.take() else {
            return Ok(());
        };
        let prog = self
            .ebpf
            .program_mut(program::SCHED_SWITCH)
            .context("BPF object has no sched_switch program")
            .and_then(|p| <&mut TracePoint>::try_from(p).map_err(Into::into));
        let (state, done) = match (prog, paused, state) {
            (Err(e), _, state) => (state, Err(e)),
            (Ok(prog), true, SchedSwitch::Live(id)) => (
                SchedSwitch::Paused,
                prog.detach(id).context("detach sched:sched_switch"),
            ),
            (Ok(prog), false, SchedSwitch::Paused) => match attach_sched_switch(prog) {
                Ok(id) => (SchedSwitch::Live(id), Ok(())),
                Err(e) => (SchedSwitch::Paused, Err(e)),
            },
            (Ok(_), _, state) => (state, Ok(())),
        };
        self.off_cpu = Some(state);
        done
    }

    /// Puts wprof's threads running now in `OWN_THREADS` (the reader, the main one, whose
    /// name is the binary's), so that a traced thread preempted for one of them is known to
    /// have waited for wprof. Helper threads started later are known by their `wprof-…`
    /// names in BPF (`wprof_helper`).
    fn mark_own_threads(&mut self) -> Result<()> {
        let tids: Vec<u32> = std::fs::read_dir("/proc/self/task")
            .context("list /proc/self/task")?
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        let mut own = self.own_threads_mut()?;
        for tid in tids {
            // A full map (64 threads) only leaves the rest unmarked.
            let _ = own.insert(&tid, &1u8, 0);
        }
        Ok(())
    }

    /// Samples every CPU `hz` times a second with the software cpu-clock event (these VMs
    /// have no hardware PMU); samples of untraced processes are dropped in BPF. With `go`, the
    /// traced Go binary's layout, a sample on a thread's system stack counts for the goroutine
    /// that thread is working for.
    pub fn attach_cpu_sampling(
        &mut self,
        hz: u64,
        go: Option<crate::resolve::go_layout::GoRuntimeLayout>,
    ) -> Result<usize> {
        if let Some(l) = go {
            self.set_config(config::GO_G_M, l.g_m)?;
            self.set_config(config::GO_M_CURG, l.m_curg)?;
        }
        self.keep_return_addresses()?;
        let cpus =
            aya::util::online_cpus().map_err(|(what, e)| anyhow::anyhow!("read {what}: {e}"))?;
        let prog_fd = self.cpu_sample_program()?;
        self.sampler = Some(super::sampler::JitteredSampler::start(&cpus, hz, prog_fd)?);
        Ok(cpus.len())
    }

    /// What one CPU sample of a traced thread costs the code it interrupts, ns (see
    /// [`super::sampler::sample_cost_ns`]): measured before anything attaches, so
    /// `--max-overhead` can count the sampler. wprof's own process is in the traced set
    /// meanwhile, so the program walks and sends the calibrating thread's stacks as it will a
    /// target's (without that, 11.6 µs a sample here against 19 µs seen on a traced loop);
    /// the caller drops the samples it sent (a drain into nothing).
    pub fn sample_cost_ns(&mut self) -> Result<f64> {
        let prog_fd = self.cpu_sample_program()?;
        let me = std::process::id();
        self.trace_pids(&[me])?;
        // Two measurements, the larger kept: one in three came out at the interrupt's cost
        // alone here (12 µs against 17-19), and a budget had better count too much than too
        // little.
        let cost = super::sampler::sample_cost_ns(prog_fd)
            .and_then(|a| super::sampler::sample_cost_ns(prog_fd).map(|b| a.max(b)));
        self.traced_mut()?
            .remove(&me)
            .context("take wprof itself out of the traced set")?;
        cost
    }

    /// The CPU sampling program's descriptor, loaded on first use.
    fn cpu_sample_program(&mut self) -> Result<std::os::fd::RawFd> {
        use std::os::fd::{AsFd, AsRawFd};
        let (prog, first) = self.extra_program::<PerfEvent>(program::CPU_SAMPLE)?;
        if first {
            verified(program::CPU_SAMPLE, prog.load())?;
        }
        Ok(prog.fd()?.as_fd().as_raw_fd())
    }

    /// One of the on-demand programs, and whether it still has to be loaded (first use).
    pub(super) fn extra_program<P>(&mut self, name: &'static str) -> Result<(&mut P, bool)>
    where
        for<'a> &'a mut P:
            TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
    {
        let first = !self.extra.contains(&name);
        let prog: &mut P = self
            .ebpf
            .program_mut(name)
            .with_context(|| format!("BPF object has no program {name}"))?
            .try_into()
            .with_context(|| format!("BPF program {name} has an unexpected type"))?;
        if first {
            self.extra.push(name);
        }
        Ok((prog, first))
    }

    /// Stops the CPU sampler's events (`paused`) or starts them again: under a duty cycle the
    /// sampled phases have no open parent to be counted in while the probes are off, so their
    /// samples would cost the target for nothing.
    pub fn pause_sampling(&self, paused: bool) -> Result<()> {
        match &self.sampler {
            Some(s) => s.set_enabled(!paused),
            None => Ok(()),
        }
    }

    /// Unloads the on-demand programs, which detaches their links.
    pub(super) fn unload_extra(&mut self) {
        // Closing the perf events detaches the sampling program from them.
        self.sampler = None;
        for name in std::mem::take(&mut self.extra) {
            let Some(p) = self.ebpf.program_mut(name) else {
                continue;
            };
            if let Ok(tp) = <&mut TracePoint>::try_from(&mut *p) {
                let _ = tp.unload();
            } else if let Ok(up) = <&mut UProbe>::try_from(&mut *p) {
                let _ = up.unload();
            } else if let Ok(pe) = <&mut PerfEvent>::try_from(p) {
                let _ = pe.unload();
            }
        }
    }
}

/// Offset of `field` in the records of tracepoint `event` (`category/name`), from its tracefs
/// format (the kernel's own description); None when it cannot be read, and the caller falls
/// back to the long-stable layout.
fn field_offset(event: &str, field: &str) -> Option<u64> {
    let format = tracefs()
        .and_then(|t| std::fs::read_to_string(t.join(format!("events/{event}/format"))).ok())?;
    offset_in_format(&format, field)
}

/// Offset of `field` in a tracefs format text.
fn offset_in_format(format: &str, field: &str) -> Option<u64> {
    format.lines().find_map(|l| {
        let l = l.trim();
        // `char next_comm[16];` names an array.
        if !l.contains(&format!(" {field};")) && !l.contains(&format!(" {field}[")) {
            return None;
        }
        l.split(';')
            .find_map(|part| part.trim().strip_prefix("offset:"))
            .and_then(|v| v.parse().ok())
    })
}

/// Attaches the loaded sched_switch program to its tracepoint.
fn attach_sched_switch(
    prog: &mut TracePoint,
) -> Result<aya::programs::trace_point::TracePointLinkId> {
    prog.attach("sched", "sched_switch")
        .context("attach tracepoint sched:sched_switch (is tracefs mounted?)")
}

#[cfg(test)]
mod tests {
    use super::offset_in_format;

    /// sched:sched_switch's format on 6.1 and 6.18.
    const SCHED_SWITCH: &str = "name: sched_switch
ID: 316
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:char prev_comm[16];	offset:8;	size:16;	signed:0;
	field:pid_t prev_pid;	offset:24;	size:4;	signed:1;
	field:long prev_state;	offset:32;	size:8;	signed:1;
	field:char next_comm[16];	offset:40;	size:16;	signed:0;
	field:pid_t next_pid;	offset:56;	size:4;	signed:1;
";

    #[test]
    fn fields_and_arrays_are_found_by_name() {
        assert_eq!(offset_in_format(SCHED_SWITCH, "prev_state"), Some(32));
        assert_eq!(offset_in_format(SCHED_SWITCH, "next_pid"), Some(56));
        assert_eq!(offset_in_format(SCHED_SWITCH, "next_comm"), Some(40));
        assert_eq!(offset_in_format(SCHED_SWITCH, "next"), None);
    }
}
