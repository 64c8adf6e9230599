//! Attaching the unwind guard (probes/ebpf/src/unwind_guard.rs): probes on the unwinder's
//! entries and on the catches, which make guarded uretprobes safe for C++ exceptions and Rust
//! panics. Its programs write the traced threads' stacks (`bpf_probe_write_user`), which the
//! kernel allows only with CAP_SYS_ADMIN and without lockdown; where it refuses, the guard's
//! `_ask` programs have wprof make the same writes ([`super::guard_writer`]). Only when both
//! are refused is it an error here, and the session then falls back to RET-site probes.

use anyhow::{Context, Result};
use aya::programs::UProbe;
use wprof_common::names::program;

use super::{point, scopes, verified, Tracer, TracerOptions};
use crate::resolve::ResolvedSymbol;

/// The kernel's lockdown mode when it is not `none` (/sys/kernel/security/lockdown marks the
/// active one in brackets; securityfs is not always mounted).
fn lockdown() -> Option<String> {
    let text = std::fs::read_to_string("/sys/kernel/security/lockdown").ok()?;
    let mode = text.split('[').nth(1)?.split(']').next()?.to_string();
    (mode != "none").then_some(mode)
}

/// The guard's two programs for one attach mechanism and one way of writing.
struct GuardPrograms {
    unwind: &'static str,
    catch: &'static str,
}

const PER_POINT: GuardPrograms = GuardPrograms {
    unwind: program::UNWIND,
    catch: program::CATCH,
};

const MULTI: GuardPrograms = GuardPrograms {
    unwind: program::MULTI_UNWIND,
    catch: program::MULTI_CATCH,
};

const PER_POINT_ASK: GuardPrograms = GuardPrograms {
    unwind: program::UNWIND_ASK,
    catch: program::CATCH_ASK,
};

const MULTI_ASK: GuardPrograms = GuardPrograms {
    unwind: program::MULTI_UNWIND_ASK,
    catch: program::MULTI_CATCH_ASK,
};

/// Who writes the return slots for the unwind guard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardWrites {
    /// Its BPF programs (`bpf_probe_write_user`).
    Kernel,
    /// wprof, on the programs' request: the kernel refused theirs, for this reason.
    Wprof(String),
}

impl Tracer {
    /// Whether this host loads the unwind guard (`doctor`, dry runs), and who writes for it:
    /// a minimal tracer tries.
    pub fn unwind_guard_loads() -> Result<GuardWrites> {
        Tracer::load(TracerOptions::MINIMAL)?.load_unwind_guard()
    }

    fn guard_programs(&self, ask: bool) -> GuardPrograms {
        match (self.uses_multi_links(), ask) {
            (true, false) => MULTI,
            (false, false) => PER_POINT,
            (true, true) => MULTI_ASK,
            (false, true) => PER_POINT_ASK,
        }
    }

    /// Loads the unwind guard's programs (idempotent): those that write themselves, else those
    /// that ask wprof to; an error when the kernel refuses both.
    pub fn load_unwind_guard(&mut self) -> Result<GuardWrites> {
        if let Some(w) = &self.guard_writes {
            return Ok(w.clone());
        }
        let writes = match self.load_guard_programs(false) {
            Ok(()) => GuardWrites::Kernel,
            Err(refused) => {
                let why = match lockdown() {
                    Some(mode) => format!("kernel lockdown ({mode}) forbids it"),
                    None => "it needs CAP_SYS_ADMIN and no kernel lockdown".to_string(),
                };
                let why = format!("bpf_probe_write_user: {why}: {refused}");
                self.load_guard_programs(true).map_err(|e| {
                    anyhow::anyhow!(
                        "the kernel refused the unwind guard's writes to the traced threads' \
                         stacks ({why}), and the guard that has wprof write them (bpf_loop, \
                         sleepable uprobes, bpf_copy_from_user_task: 5.18+): {e}"
                    )
                })?;
                GuardWrites::Wprof(why)
            }
        };
        self.guard_writes = Some(writes.clone());
        Ok(writes)
    }

    /// Loads the guard's two programs, writing themselves or asking wprof to (`ask`); the
    /// verifier's reason when the kernel refuses one.
    fn load_guard_programs(&mut self, ask: bool) -> std::result::Result<(), String> {
        let progs = self.guard_programs(ask);
        for name in [progs.unwind, progs.catch] {
            let (prog, first) = self
                .extra_program::<UProbe>(name)
                .map_err(|e| format!("{e:#}"))?;
            if first {
                verified(name, prog.load()).map_err(|e| {
                    // The verifier's reason is the log's last line before its statistics.
                    let text = format!("{e:#}");
                    let stats = ["processed ", "stack depth", "verification time"];
                    text.lines()
                        .rev()
                        .find(|l| !l.trim().is_empty() && !stats.iter().any(|s| l.starts_with(s)))
                        .unwrap_or_default()
                        .trim()
                        .to_string()
                })?;
            }
        }
        Ok(())
    }

    /// Attaches the unwind guard to `unwind` (the unwinder's entries) and `catch` (where
    /// exceptions and panics are caught) in `pids` (every process mapping them with
    /// `every_process`), loading it first if needed. Must go live before any guarded uretprobe
    /// does.
    pub fn guard_unwinding(
        &mut self,
        unwind: &[ResolvedSymbol],
        catch: &[ResolvedSymbol],
        pids: &[u32],
        every_process: bool,
    ) -> Result<()> {
        let writes = self.load_unwind_guard()?;
        let ask = writes != GuardWrites::Kernel;
        if ask && self.guard_writer.is_none() {
            let asks = self
                .ebpf
                .take_map(wprof_common::names::map::GUARD_ASKS)
                .context("BPF object has no map GUARD_ASKS")?;
            let done = self
                .ebpf
                .take_map(wprof_common::names::map::GUARD_DONE)
                .context("BPF object has no map GUARD_DONE")?;
            self.guard_writer = Some(super::guard_writer::GuardWriter::start(
                aya::maps::RingBuf::try_from(asks)?,
                aya::maps::HashMap::try_from(done)?,
            )?);
        }
        // The guard puts each frame's own return address back.
        self.keep_return_addresses()?;
        let progs = self.guard_programs(ask);
        for (name, targets) in [(progs.unwind, unwind), (progs.catch, catch)] {
            for (scope, pid) in scopes(pids, every_process)? {
                for t in targets {
                    let (prog, _) = self.extra_program::<UProbe>(name)?;
                    prog.attach([point(t.entry.file_offset, 0)], &t.object, scope)
                        .with_context(|| {
                            format!(
                                "attach the unwind guard to {} in {} (pid {pid})",
                                t.demangled, t.display_object
                            )
                        })?;
                }
            }
        }
        self.guarded = true;
        Ok(())
    }

    /// Whether the unwind guard is live (guarded uretprobes may be attached).
    pub fn unwinding_guarded(&self) -> bool {
        self.guarded
    }
}

/// How long detaching waits for guarded calls still running to return (see
/// [`Tracer::drain_guarded`]).
const DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

impl Tracer {
    /// Called by detach once the uretprobes are gone (the kernel arms no new frame): waits, up
    /// to [`DRAIN`], until no traced thread has a guarded call whose return slot still holds
    /// the kernel's trampoline, since the unwind guard, unloaded next, is what keeps an
    /// exception through such a call from terminating the program. Says which calls remain.
    pub(super) fn drain_guarded(&mut self) {
        let start = std::time::Instant::now();
        loop {
            let armed = self.armed_calls();
            if armed.is_empty() {
                return;
            }
            if start.elapsed() >= DRAIN {
                let mut names: Vec<String> = armed
                    .iter()
                    .map(|(pid, phase)| {
                        let name = self.phase_names.get(phase).map_or("?", String::as_str);
                        format!("{name} (pid {pid})")
                    })
                    .collect();
                names.dedup();
                eprintln!(
                    "wprof: warning: {} guarded call(s) still running after {} s: {}; each \
                     returns through the kernel's uretprobe trampoline, so a C++ exception or \
                     Rust panic thrown through one of them before it returns would terminate \
                     the process (detach while those phases are idle, or trace them with \
                     --return ret-sites)",
                    armed.len(),
                    DRAIN.as_secs(),
                    names.join(", ")
                );
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// (pid, phase id) of each open guarded call whose return slot holds the trampoline.
    fn armed_calls(&self) -> Vec<(u32, u32)> {
        use std::os::unix::fs::FileExt;
        let Ok(stacks) = self.stacks() else {
            return Vec::new();
        };
        let mut armed = Vec::new();
        for (key, st) in stacks.iter().flatten() {
            if key & wprof_common::GOROUTINE_KEY_BIT != 0 {
                continue;
            }
            let pid = (key >> 32) as u32;
            let Ok(mem) = std::fs::File::open(format!("/proc/{pid}/mem")) else {
                continue; // gone: nothing left to protect
            };
            let tramp = if st.tramp != 0 {
                st.tramp
            } else {
                match uprobes_page(pid) {
                    Some(t) => t,
                    None => continue, // no trampoline page: no frame was ever armed
                }
            };
            let len = (st.len as usize).min(wprof_common::MAX_DEPTH);
            for f in &st.frames[..len] {
                if f.uretprobe & wprof_common::FRAME_URETPROBE == 0 {
                    continue;
                }
                let mut slot = [0u8; 8];
                if mem.read_exact_at(&mut slot, f.sp).is_ok() && u64::from_ne_bytes(slot) == tramp {
                    armed.push((pid, f.phase));
                }
            }
        }
        armed
    }
}

/// The start of process `pid`'s `[uprobes]` mapping, where the kernel's uretprobe trampoline
/// lies.
fn uprobes_page(pid: u32) -> Option<u64> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    let line = maps.lines().find(|l| l.ends_with("[uprobes]"))?;
    u64::from_str_radix(line.split('-').next()?, 16).ok()
}
