//! Resolve: profile + target (pid or binary) -> the file offsets to probe.
//!
//! In: a [`Profile`] and a [`Scope`]. Out: one [`ResolvedPhase`] per phase, holding for each
//! matched function its object (a path wprof can open and attach to, through /proc/PID/root),
//! mangled and demangled names, entry site (file offset and the cost class of the instruction
//! probed there: the first one, or the one after a leading `endbr64`, see
//! [`elf::disasm::entry_site`] and [`ENTRY_AT_ENDBR_ENV`]), and its exit sites (RET and
//! tail-call JMP file offsets) for RET-site return detection. A stripped object's separate
//! debug file (build id / .gnu_debuglink, [`elf::debuginfo`]) adds its static functions; DWARF
//! ([`elf::inlined`]) tells when a probed function also has inlined copies the probe cannot
//! see, which becomes a warning on the phase.
//!
//! The code is grouped by what it reads: [`objects`] finds a phase's object in a process or on
//! disk; [`elf`] reads an object's symbols, code, notes and DWARF; [`go`] what only Go binaries
//! have; [`kernel`] tracefs. [`matcher`], [`suggest`] and [`demangle`] work on the names read.
//! This file drives one resolution; each kind of phase is resolved in its own file.

pub mod elf;
pub mod go;
pub mod kernel;
pub mod matcher;
pub mod objects;
mod resolved;
pub mod suggest;
mod symbol_phase;
mod usdt_phase;
mod warnings;

// Paths the rest of wprof uses, kept where they were before resolve was grouped by what it
// reads.
pub use elf::usdt;
pub use go::layout as go_layout;
pub use resolved::{unresolved_required, ResolvedPhase, ResolvedSymbol, Status};

use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;

use crate::model::profile::{Profile, ReturnMode};
use crate::model::CostClass;
use elf::{debuginfo, symbols};

/// What wprof traces: live processes, or a binary about to be started (`record`, `probes --binary`).
#[derive(Debug, Clone)]
pub enum Scope {
    /// Running processes; objects are looked up in their maps and through /proc/PID/root.
    Pids(Vec<u32>),
    /// A binary on disk (the main executable); libraries are searched in its RUNPATH and the
    /// usual library directories.
    Binary(PathBuf),
}

/// `WPROF_ENTRY_AT_ENDBR=1` keeps the entry probe of a function that starts with `endbr64` on
/// that instruction (+0, single-stepped) instead of the next one (+4): to measure the
/// difference, or in case something does branch to +4.
pub const ENTRY_AT_ENDBR_ENV: &str = "WPROF_ENTRY_AT_ENDBR";

/// Whether the environment asks for entry probes on `endbr64` itself ([`ENTRY_AT_ENDBR_ENV`]).
pub fn entry_at_endbr() -> bool {
    std::env::var(ENTRY_AT_ENDBR_ENV).is_ok_and(|v| v == "1")
}

/// A probe site inside a function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    /// Offset in the object file, as the kernel's uprobe wants it.
    pub file_offset: u64,
    /// Cost class of the instruction at that site.
    pub cost: CostClass,
}

/// An object located and parsed, or why not.
type Loaded = Result<(objects::Located, Rc<symbols::ObjectSymbols>), String>;

/// Resolves every phase of `profile` against `scope`. A phase that does not resolve becomes
/// [`Status::Unresolved`] (with the reason and the nearest names); only problems with the scope
/// itself are errors: a pid that does not exist ([`NoProcess`]), a process wprof may not read
/// ([`Permission`]), a binary that cannot be opened. Each object is parsed
/// once, however many phases it holds. For several pids, objects are looked up in the first
/// one's mappings and root.
///
/// [`NoProcess`]: crate::error::WprofError::NoProcess
/// [`Permission`]: crate::error::WprofError::Permission
pub fn resolve_profile(profile: &Profile, scope: &Scope) -> anyhow::Result<Vec<ResolvedPhase>> {
    resolve_profile_with(profile, scope, !entry_at_endbr())
}

/// [`resolve_profile`], with entry probes moved past a leading `endbr64` when `past_endbr`.
fn resolve_profile_with(
    profile: &Profile,
    scope: &Scope,
    past_endbr: bool,
) -> anyhow::Result<Vec<ResolvedPhase>> {
    let target = objects::Target::new(scope)?;
    let search = debuginfo::Search::from_env(target.root());
    let mut located: HashMap<String, Loaded> = HashMap::new();
    let mut parsed: Parsed = HashMap::new();
    let mut out = Vec::with_capacity(profile.phases.len());
    for (i, phase) in profile.phases.iter().enumerate() {
        let id = u32::try_from(i)?;
        let mut object = || {
            load(
                &mut located,
                &mut parsed,
                &target,
                &search,
                profile.object_of(phase),
            )
            .clone()
        };
        if let Some(names) = &phase.usdt {
            out.push(usdt_phase::resolve(id, phase, names, &object()));
            continue;
        }
        let Some(pattern) = phase.symbol.as_deref() else {
            let (kernel, status) = match kernel::resolve_kernel_phase(phase) {
                Ok(k) => (Some(k), Status::Resolved),
                Err(e) => (
                    None,
                    Status::Unresolved {
                        reason: e.reason,
                        nearest: e.nearest,
                    },
                ),
            };
            out.push(ResolvedPhase {
                kernel,
                ..ResolvedPhase::new(id, phase, ReturnMode::RetSites, status)
            });
            continue;
        };
        out.push(symbol_phase::resolve(
            id,
            phase,
            pattern,
            &object(),
            past_endbr,
        ));
    }
    let objects: Vec<Rc<symbols::ObjectSymbols>> = parsed.into_values().flatten().collect();
    warnings::warn_inlined(&mut out, &objects);
    warnings::warn_shared_functions(&mut out);
    Ok(out)
}

/// Objects parsed so far, by path.
type Parsed = HashMap<PathBuf, Result<Rc<symbols::ObjectSymbols>, String>>;

/// The object `spec` names, located and parsed once however many phases hold it.
fn load<'a>(
    located: &'a mut HashMap<String, Loaded>,
    parsed: &mut Parsed,
    target: &objects::Target,
    search: &debuginfo::Search,
    spec: &str,
) -> &'a Loaded {
    located.entry(spec.to_string()).or_insert_with(|| {
        let loc = target.locate(spec).map_err(|e| format!("{e:#}"))?;
        let syms = parsed
            .entry(loc.host_path.clone())
            .or_insert_with(|| {
                symbols::ObjectSymbols::load_with_debug(&loc.host_path, &loc.target_path, search)
                    .map(Rc::new)
                    .map_err(|e| {
                        // Name the object as the target sees it, not through /proc/PID/root.
                        format!("{e:#}")
                            .replace(&*loc.host_path.to_string_lossy(), &loc.target_path)
                    })
            })
            .clone()?;
        Ok((loc, syms))
    })
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;
