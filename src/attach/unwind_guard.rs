//! Attaching the unwind guard (probes/ebpf/src/unwind_guard.rs): probes on the unwinder's
//! entries and on the catches, which make guarded uretprobes safe for C++ exceptions and Rust
//! panics. Its programs write the traced threads' stacks (`bpf_probe_write_user`), which the
//! kernel allows only with CAP_SYS_ADMIN and without lockdown: a refusal is an error here, and
//! the session then falls back to RET-site probes.

use anyhow::{Context, Result};

/// The kernel's lockdown mode when it is not `none` (/sys/kernel/security/lockdown marks the
/// active one in brackets; securityfs is not always mounted).
pub fn lockdown() -> Option<String> {
    let text = std::fs::read_to_string("/sys/kernel/security/lockdown").ok()?;
    let mode = text.split('[').nth(1)?.split(']').next()?.to_string();
    (mode != "none").then_some(mode)
}
use aya::programs::UProbe;

use super::{point, scopes, verified, Tracer};
use crate::resolve::ResolvedSymbol;

/// The guard's two programs for one attach mechanism.
struct GuardPrograms {
    unwind: &'static str,
    catch: &'static str,
}

const PER_POINT: GuardPrograms = GuardPrograms {
    unwind: "wprof_unwind",
    catch: "wprof_catch",
};

const MULTI: GuardPrograms = GuardPrograms {
    unwind: "wprof_m_unwind",
    catch: "wprof_m_catch",
};

/// What the guard attached to.
#[derive(Debug, Clone, Default)]
pub struct GuardSummary {
    /// Unwinder entry points (per object, not per pid).
    pub unwind_points: usize,
    /// Catch points.
    pub catch_points: usize,
}

impl Tracer {
    fn guard_programs(&self) -> GuardPrograms {
        if self.uses_multi_links() {
            MULTI
        } else {
            PER_POINT
        }
    }

    /// Loads the unwind guard's programs (idempotent): an error when the kernel refuses them.
    pub fn load_unwind_guard(&mut self) -> Result<()> {
        let progs = self.guard_programs();
        for name in [progs.unwind, progs.catch] {
            let (prog, first) = self.extra_program::<UProbe>(name)?;
            if first {
                verified(name, prog.load()).map_err(|e| {
                    // The verifier's reason is the log's last line before its statistics.
                    let text = format!("{e:#}");
                    let stats = ["processed ", "stack depth", "verification time"];
                    let last = text.lines().rev().find(|l| {
                        !l.trim().is_empty() && !stats.iter().any(|s| l.starts_with(s))
                    });
                    let why = match lockdown() {
                        Some(mode) => format!("kernel lockdown ({mode}) forbids it"),
                        None => "it needs CAP_SYS_ADMIN and no kernel lockdown".to_string(),
                    };
                    anyhow::anyhow!(
                        "the kernel refused the unwind guard's writes to the traced threads' \
                         stacks (bpf_probe_write_user: {why}): {}",
                        last.unwrap_or_default().trim()
                    )
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
    ) -> Result<GuardSummary> {
        self.load_unwind_guard()?;
        let progs = self.guard_programs();
        let mut summary = GuardSummary::default();
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
            if name == progs.unwind {
                summary.unwind_points += targets.len();
            } else {
                summary.catch_points += targets.len();
            }
        }
        self.guarded = true;
        Ok(summary)
    }

    /// Whether the unwind guard is live (guarded uretprobes may be attached).
    pub fn unwinding_guarded(&self) -> bool {
        self.guarded
    }
}
