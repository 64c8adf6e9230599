//! Resolve: profile + target (pid or binary) -> the file offsets to probe.
//!
//! In: a [`Profile`] and a [`Scope`]. Out: one [`ResolvedPhase`] per phase, holding for each
//! matched function its object (a path wprof can open and attach to, through /proc/PID/root),
//! mangled and demangled names, entry file offset, the cost class of the first instruction, and
//! its exit sites (RET and tail-call JMP file offsets) for RET-site return detection.

pub mod demangle;
pub mod disasm;
pub mod kernel;
pub mod libpath;
pub mod matcher;
pub mod objects;
pub mod suggest;
pub mod symbols;

use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;

use crate::error::WprofError;
use crate::profile::{Phase, Profile, ReturnMode};

/// What wprof traces: live processes, or a binary about to be started (`record`, `probes --binary`).
#[derive(Debug, Clone)]
pub enum Scope {
    /// Running processes; objects are looked up in their maps and through /proc/PID/root.
    Pids(Vec<u32>),
    /// A binary on disk (the main executable); libraries are searched in its RUNPATH and the
    /// usual library directories.
    Binary(PathBuf),
}

/// Source language of a function, deciding the safe return detection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// Plain C name.
    C,
    /// Itanium C++ mangling.
    Cxx,
    /// Rust, legacy or v0 mangling.
    Rust,
    /// Go (object has a Go build id).
    Go,
}

/// How expensive a uprobe hit on an instruction is (facts.md): the kernel emulates some
/// instructions and single-steps the rest out of line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CostClass {
    /// A NOP (e.g. the 5-byte nop of -fpatchable-function-entry): emulated, cheapest.
    Nop,
    /// `push reg` or a relative call/jmp/jcc: emulated.
    Emulated,
    /// Anything else (`endbr64`, `mov`, `lea`, `ret`...): single-stepped, a debug trap.
    SingleStep,
}

/// A probe site inside a function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    /// Offset in the object file, as the kernel's uprobe wants it.
    pub file_offset: u64,
    /// Cost class of the instruction at that site.
    pub cost: CostClass,
}

/// One function a phase resolved to.
#[derive(Debug, Clone)]
pub struct ResolvedSymbol {
    /// Path wprof opens and attaches to (through /proc/PID/root for live processes).
    pub object: PathBuf,
    /// The object's path as the target sees it (for display and provenance).
    pub display_object: String,
    /// GNU build id of the object, hex, if present.
    pub build_id: Option<String>,
    /// The symbol as found in the symbol table (mangled).
    pub symbol: String,
    /// Demangled name without parameter list or Rust hash.
    pub demangled: String,
    /// Virtual address in the object.
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
    /// Language of the function.
    pub language: Language,
    /// The entry site.
    pub entry: Site,
    /// RET and tail-call JMP sites.
    pub exits: Vec<Site>,
}

/// Outcome of resolving one phase.
#[derive(Debug, Clone)]
pub enum Status {
    /// Resolved to one or more functions (several only with `all_matches`).
    Resolved,
    /// Nothing matched; `nearest` lists similar names to suggest.
    Unresolved {
        /// Why (object missing, not ELF, no symbol...).
        reason: String,
        /// Similar symbol names, best first.
        nearest: Vec<String>,
    },
    /// A phase kind this build cannot attach yet (syscall, tracepoint).
    Unsupported(String),
}

/// A phase after resolution.
#[derive(Debug, Clone)]
pub struct ResolvedPhase {
    /// Phase id (index in the profile).
    pub id: u32,
    /// The profile's phase.
    pub phase: Phase,
    /// The functions to probe.
    pub targets: Vec<ResolvedSymbol>,
    /// The tracepoints of a kernel phase (`syscall` or `tracepoint`).
    pub kernel: Option<kernel::KernelPhase>,
    /// Effective return mode (never Auto).
    pub return_mode: ReturnMode,
    /// Resolution outcome.
    pub status: Status,
}

/// An object located and parsed, or why not.
type Loaded = Result<(objects::Located, Rc<symbols::ObjectSymbols>), String>;

/// Resolves every phase of `profile` against `scope`. A phase that does not resolve becomes
/// [`Status::Unresolved`] (with the reason and the nearest names); only problems with the scope
/// itself are errors: a pid that does not exist ([`WprofError::NoProcess`]), a process wprof may
/// not read ([`WprofError::Permission`]), a binary that cannot be opened. Each object is parsed
/// once, however many phases it holds. For several pids, objects are looked up in the first
/// one's mappings and root.
pub fn resolve_profile(profile: &Profile, scope: &Scope) -> anyhow::Result<Vec<ResolvedPhase>> {
    let target = objects::Target::new(scope)?;
    let mut located: HashMap<String, Loaded> = HashMap::new();
    let mut parsed: HashMap<PathBuf, Result<Rc<symbols::ObjectSymbols>, String>> = HashMap::new();
    let mut out = Vec::with_capacity(profile.phases.len());
    for (i, phase) in profile.phases.iter().enumerate() {
        let id = u32::try_from(i)?;
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
                id,
                phase: phase.clone(),
                targets: Vec::new(),
                kernel,
                return_mode: ReturnMode::RetSites,
                status,
            });
            continue;
        };
        let spec = profile.object_of(phase);
        let loaded = located.entry(spec.to_string()).or_insert_with(|| {
            let loc = target.locate(spec).map_err(|e| format!("{e:#}"))?;
            let syms = parsed
                .entry(loc.host_path.clone())
                .or_insert_with(|| {
                    symbols::ObjectSymbols::load(&loc.host_path)
                        .map(Rc::new)
                        .map_err(|e| {
                            // Name the object as the target sees it, not through /proc/PID/root.
                            format!("{e:#}")
                                .replace(&*loc.host_path.to_string_lossy(), &loc.target_path)
                        })
                })
                .clone()?;
            Ok((loc, syms))
        });
        out.push(resolve_symbol_phase(id, phase, pattern, loaded));
    }
    Ok(out)
}

/// The phase's own return mode, or `auto_mode` when it says `auto`.
fn explicit_or(phase: &Phase, auto_mode: ReturnMode) -> ReturnMode {
    match phase.return_mode {
        ReturnMode::Auto => auto_mode,
        m => m,
    }
}

/// Resolves one symbol phase in its (already located) object.
fn resolve_symbol_phase(id: u32, phase: &Phase, pattern: &str, loaded: &Loaded) -> ResolvedPhase {
    // Before anything matched, guess the language from the pattern for the `auto` mode.
    let guessed = |is_go: bool| {
        let cxx_or_rust =
            pattern.starts_with("_Z") || pattern.starts_with("_R") || pattern.contains("::");
        explicit_or(
            phase,
            if is_go || cxx_or_rust {
                ReturnMode::RetSites
            } else {
                ReturnMode::Uretprobe
            },
        )
    };
    let unresolved = |reason: String, nearest: Vec<String>, is_go: bool| ResolvedPhase {
        id,
        phase: phase.clone(),
        targets: Vec::new(),
        kernel: None,
        return_mode: guessed(is_go),
        status: Status::Unresolved { reason, nearest },
    };
    let (loc, syms) = match loaded {
        Ok(l) => l,
        Err(reason) => return unresolved(reason.clone(), Vec::new(), false),
    };
    let shown = &loc.target_path;
    let matches = match matcher::find(syms, pattern, phase.all_matches) {
        Ok(m) => m,
        Err(matcher::MatchError::NoMatch { nearest }) => {
            let why = suggest::explain_missing(syms, pattern)
                .or_else(|| {
                    (!syms.has_symtab)
                        .then(|| "it has no .symtab: only exported functions are visible".into())
                })
                .map(|w| format!(" ({w})"))
                .unwrap_or_default();
            return unresolved(
                format!("no symbol '{pattern}' in {shown}{why}"),
                nearest,
                syms.is_go,
            );
        }
        Err(matcher::MatchError::Ambiguous { count, listed }) => {
            let more = count.saturating_sub(listed.len());
            let more = if more > 0 {
                format!(", and {more} more")
            } else {
                String::new()
            };
            let reason = format!(
                "'{pattern}' matches {count} functions in {shown}: {}{more}; use a more precise \
                 pattern or the mangled name, or set all_matches = true",
                listed.join(", ")
            );
            return unresolved(reason, Vec::new(), syms.is_go);
        }
        Err(matcher::MatchError::BadPattern(reason)) => {
            return unresolved(reason, Vec::new(), syms.is_go)
        }
    };
    let any_unsafe = matches.iter().any(|m| m.function.language != Language::C);
    let return_mode = explicit_or(
        phase,
        if any_unsafe {
            ReturnMode::RetSites
        } else {
            ReturnMode::Uretprobe
        },
    );
    let mut targets = Vec::with_capacity(matches.len());
    for m in &matches {
        let f = m.function;
        let entry = match disasm::entry_site(syms, f) {
            Ok(s) => s,
            Err(e) => return unresolved(format!("{e:#}"), Vec::new(), syms.is_go),
        };
        let exits = match (disasm::exit_sites(syms, f), return_mode) {
            (Ok(x), ReturnMode::RetSites) if x.is_empty() => {
                let reason = format!(
                    "{} in {shown} has no RET or tail-call JMP (it never returns, or leaves by an \
                     indirect jump): nothing to close the phase with; use return = \"uretprobe\" \
                     if nothing unwinds through it",
                    m.name.demangled
                );
                return unresolved(reason, Vec::new(), syms.is_go);
            }
            (Ok(x), _) => x,
            (Err(e), ReturnMode::RetSites) => {
                return unresolved(format!("{e:#}"), Vec::new(), syms.is_go)
            }
            (Err(_), _) => Vec::new(),
        };
        targets.push(ResolvedSymbol {
            object: loc.host_path.clone(),
            display_object: loc.target_path.clone(),
            build_id: syms.build_id.clone(),
            symbol: m.name.mangled.clone(),
            demangled: m.name.demangled.clone(),
            address: f.address,
            size: f.size,
            language: f.language,
            entry,
            exits,
        });
    }
    ResolvedPhase {
        id,
        phase: phase.clone(),
        targets,
        kernel: None,
        return_mode,
        status: Status::Resolved,
    }
}

/// The exit-4 error for the required phases that did not resolve, one line each:
/// `phase 'P': no symbol 'X' in /path/obj; nearest: a, b, c`. None if every required phase
/// resolved (unsupported kernel phases are not counted here).
pub fn unresolved_required(phases: &[ResolvedPhase]) -> Option<WprofError> {
    let lines: Vec<String> = phases
        .iter()
        .filter(|p| !p.phase.optional)
        .filter_map(|p| match &p.status {
            Status::Unresolved { reason, nearest } if nearest.is_empty() => {
                Some(format!("phase '{}': {reason}", p.phase.name))
            }
            Status::Unresolved { reason, nearest } => Some(format!(
                "phase '{}': {reason}; nearest: {}",
                p.phase.name,
                nearest.join(", ")
            )),
            _ => None,
        })
        .collect();
    (!lines.is_empty()).then(|| WprofError::Unresolved(lines.join("\n")))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;
