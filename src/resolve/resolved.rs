//! What resolution hands to the later stages: the phases, the functions they resolved to, and
//! the error for the required ones that did not resolve.
//!
//! In: the outcome of each phase's resolution. Out: [`ResolvedPhase`]s (with their
//! [`ResolvedSymbol`]s and [`Status`]), and [`unresolved_required`]'s exit-4 error.

use std::path::PathBuf;

use super::{kernel, objects, usdt, Site};
use crate::error::WprofError;
use crate::model::profile::{Phase, Profile, ReturnMode};
use crate::model::Language;

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
    /// The entry site: the function's first instruction, or the one after its leading
    /// `endbr64` (see `entry_offset`). A uretprobe goes on the same site.
    pub entry: Site,
    /// Bytes from the function's start to the entry site: 4 when the probe was moved past a
    /// leading `endbr64`, else 0.
    pub entry_offset: u64,
    /// RET and tail-call JMP sites.
    pub exits: Vec<Site>,
    /// The separate debug file that named this function (a static function of a stripped
    /// object), as the target sees it; None when the object's own tables name it.
    pub debuginfo: Option<String>,
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
    /// Warnings to show the user once (e.g. inlined copies the probe cannot see), each a full
    /// sentence starting with `phase 'NAME':`.
    pub warnings: Vec<String>,
    /// A USDT phase's start and done sites (its `targets` hold one entry per start site, the
    /// first carrying the done sites as its exits).
    pub usdt: Option<usdt::UsdtPhase>,
}

impl ResolvedSymbol {
    /// File offset of the function's first byte (the entry site may lie past it).
    pub fn start_file_offset(&self) -> u64 {
        self.entry.file_offset - self.entry_offset
    }
}

impl ResolvedPhase {
    /// The phase with `status` and `return_mode` and nothing else yet: no targets, kernel
    /// tracepoints, warnings or USDT sites (the resolver of its kind adds those it has).
    pub(super) fn new(id: u32, phase: &Phase, return_mode: ReturnMode, status: Status) -> Self {
        ResolvedPhase {
            id,
            phase: phase.clone(),
            targets: Vec::new(),
            kernel: None,
            return_mode,
            status,
            warnings: Vec::new(),
            usdt: None,
        }
    }

    /// Whether its functions get probes: resolved, and not a sampled phase.
    pub fn is_probed(&self) -> bool {
        matches!(self.status, Status::Resolved)
            && self.phase.measure != crate::model::profile::Measure::Sample
    }

    /// Whether the phase is unresolved because its object was nowhere to be found (not
    /// mapped, not in any search directory): a library that may still be dlopen'ed.
    pub fn object_missing(&self) -> bool {
        matches!(&self.status, Status::Unresolved { reason, .. }
            if reason.starts_with(objects::OBJECT_NOT_FOUND))
    }
}

/// The exit-4 error for the required phases that did not resolve, one line each:
/// `phase 'P': no symbol 'X' in /path/obj; nearest: a, b, c`. None if every required phase
/// resolved (unsupported kernel phases are not counted here).
pub fn unresolved_required(phases: &[ResolvedPhase], profile: &Profile) -> Option<WprofError> {
    let mut lines: Vec<String> = phases
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
    if !lines.is_empty() && !profile.description.is_empty() {
        // The profile may say where its functions exist (ao/aoco: Cloudberry and Greenplum
        // only), which no symbol table can.
        lines.push(format!(
            "profile '{}': {}",
            profile.name, profile.description
        ));
    }
    (!lines.is_empty()).then(|| WprofError::Unresolved(lines.join("\n")))
}
