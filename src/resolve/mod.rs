//! Resolve: profile + target (pid or binary) -> the file offsets to probe.
//!
//! In: a [`Profile`] and a [`Scope`]. Out: one [`ResolvedPhase`] per phase, holding for each
//! matched function its object (a path wprof can open and attach to, through /proc/PID/root),
//! mangled and demangled names, entry file offset, the cost class of the first instruction, and
//! its exit sites (RET and tail-call JMP file offsets) for RET-site return detection.

pub mod demangle;
pub mod symbols;
pub mod disasm;
pub mod matcher;

use std::path::PathBuf;

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
    /// Effective return mode (never Auto).
    pub return_mode: ReturnMode,
    /// Resolution outcome.
    pub status: Status,
}
