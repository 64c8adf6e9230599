//! Resolve: profile + target (pid or binary) -> the file offsets to probe.
//!
//! In: a [`Profile`] and a [`Scope`]. Out: one [`ResolvedPhase`] per phase, holding for each
//! matched function its object (a path wprof can open and attach to, through /proc/PID/root),
//! mangled and demangled names, entry site (file offset and the cost class of the instruction
//! probed there: the first one, or the one after a leading `endbr64`, see
//! [`disasm::entry_site`] and [`ENTRY_AT_ENDBR_ENV`]), and its exit sites (RET and tail-call
//! JMP file offsets) for RET-site return detection. A
//! stripped object's separate debug file (build id / .gnu_debuglink, [`debuginfo`]) adds its
//! static functions; DWARF ([`inlined`]) tells when a probed function also has inlined copies
//! the probe cannot see, which becomes a warning on the phase.

pub mod debuginfo;
pub mod demangle;
pub mod disasm;
pub mod dwarf;
pub mod go_layout;
pub mod gopclntab;
pub mod inlined;
pub mod kernel;
pub mod libpath;
pub mod matcher;
pub mod objects;
pub mod suggest;
pub mod symbols;
pub mod usdt;

use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;

use crate::error::WprofError;
use crate::model::CostClass;
use crate::profile::{Capture, Phase, Profile, ReturnMode, StringArg};

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
    /// Whether its functions get probes: resolved, and not a sampled phase.
    pub fn is_probed(&self) -> bool {
        matches!(self.status, Status::Resolved)
            && self.phase.measure != crate::profile::Measure::Sample
    }

    /// Whether the phase is unresolved because its object was nowhere to be found (not
    /// mapped, not in any search directory): a library that may still be dlopen'ed.
    pub fn object_missing(&self) -> bool {
        matches!(&self.status, Status::Unresolved { reason, .. }
            if reason.starts_with(objects::OBJECT_NOT_FOUND))
    }
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
            out.push(resolve_usdt_phase(id, phase, names, &object()));
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
                id,
                phase: phase.clone(),
                targets: Vec::new(),
                kernel,
                return_mode: ReturnMode::RetSites,
                status,
                warnings: Vec::new(),
                usdt: None,
            });
            continue;
        };
        out.push(resolve_symbol_phase(
            id,
            phase,
            pattern,
            &object(),
            past_endbr,
        ));
    }
    let objects: Vec<Rc<symbols::ObjectSymbols>> = parsed.into_values().flatten().collect();
    warn_inlined(&mut out, &objects);
    warn_shared_functions(&mut out);
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

/// Warns on a phase that probes a function an earlier phase probes too: both entries fire on
/// one call, the second opens a frame at the first's stack pointer, and the tree shows the
/// second phase's calls as abandoned. One function should be one phase.
fn warn_shared_functions(phases: &mut [ResolvedPhase]) {
    for i in 1..phases.len() {
        let (earlier, rest) = phases.split_at_mut(i);
        let p = &mut rest[0];
        let shared = p.targets.iter().find_map(|t| {
            earlier.iter().find_map(|q| {
                q.targets
                    .iter()
                    .any(|u| u.object == t.object && u.address == t.address)
                    .then(|| (q.phase.name.clone(), t.demangled.clone()))
            })
        });
        if let Some((other, function)) = shared {
            p.warnings.push(format!(
                "phase '{}' probes {function}, which phase '{other}' probes too: both fire on \
                 each call and the second's calls show as abandoned; keep one phase per function",
                p.phase.name
            ));
        }
    }
}

/// How many holders of inlined copies a warning names.
const HOLDERS_MAX: usize = 5;

/// Adds to each resolved phase one warning naming the inlined copies of its functions (read
/// from DWARF, one pass per object over the functions phases resolved to).
fn warn_inlined(phases: &mut [ResolvedPhase], objects: &[Rc<symbols::ObjectSymbols>]) {
    for syms in objects {
        let mine = |t: &ResolvedSymbol| t.object == syms.path;
        let mut addresses: Vec<u64> = phases
            .iter()
            .flat_map(|p| p.targets.iter())
            .filter(|t| mine(t))
            .map(|t| t.address)
            .collect();
        if addresses.is_empty() {
            continue;
        }
        addresses.sort_unstable();
        addresses.dedup();
        let copies = inlined::inlined_copies(syms, &addresses);
        for p in phases.iter_mut() {
            let mut clauses = Vec::new();
            for t in p.targets.iter().filter(|t| mine(t)) {
                match &copies {
                    Ok(c) => {
                        if let Some(c) = c.get(&t.address) {
                            clauses.push(inlined_clause(&t.demangled, c));
                        }
                    }
                    Err(e) => clauses.push(format!(
                        "cannot check {} for inlined copies the probe would miss: {e:#}",
                        t.demangled
                    )),
                }
            }
            if !clauses.is_empty() {
                p.warnings
                    .push(format!("phase '{}': {}", p.phase.name, clauses.join("; ")));
            }
        }
    }
}

/// `F also has N inlined copies (in A, B) that the probe cannot see: ...`.
fn inlined_clause(function: &str, c: &inlined::InlinedCopies) -> String {
    let mut holders = c
        .callers
        .iter()
        .take(HOLDERS_MAX)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if c.callers.len() > HOLDERS_MAX {
        holders.push_str(&format!(" and {} more", c.callers.len() - HOLDERS_MAX));
    }
    let (copies, them) = if c.count == 1 {
        ("inlined copy", "it")
    } else {
        ("inlined copies", "them")
    };
    format!(
        "{function} also has {} {copies} (in {holders}) that the probe cannot see: calls \
         through {them} are not counted",
        c.count
    )
}

/// The phase's own return mode, or `auto_mode` when it says `auto`.
fn explicit_or(phase: &Phase, auto_mode: ReturnMode) -> ReturnMode {
    match phase.return_mode {
        ReturnMode::Auto => auto_mode,
        m => m,
    }
}

/// Resolves one symbol phase in its (already located) object.
fn resolve_symbol_phase(
    id: u32,
    phase: &Phase,
    pattern: &str,
    loaded: &Loaded,
    past_endbr: bool,
) -> ResolvedPhase {
    // Before anything matched, guess the language from the pattern for the `auto` mode.
    let guessed = |is_go: bool| {
        let cxx_or_rust =
            pattern.starts_with("_Z") || pattern.starts_with("_R") || pattern.contains("::");
        explicit_or(
            phase,
            if is_go {
                ReturnMode::RetSites
            } else if cxx_or_rust {
                ReturnMode::Guarded
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
        warnings: Vec::new(),
        usdt: None,
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
                .or_else(|| missing_hint(syms))
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
                 pattern or the mangled name, or take them all (all_matches = true on the phase, or \
                 --all-matches)",
                listed.join(", ")
            );
            return unresolved(reason, Vec::new(), syms.is_go);
        }
        Err(matcher::MatchError::BadPattern(reason)) => {
            return unresolved(reason, Vec::new(), syms.is_go)
        }
    };
    // A C-named function in an object that also holds C++, Rust or Go code (an extern "C"
    // entry of a C++ library, like PAX's XLogPaxInsert) can have an exception or panic
    // unwinding through it: only a purely C object gets plain uretprobes by default; the
    // others get guarded ones (the session falls back to RET sites where the unwind guard
    // cannot attach), Go code RET sites.
    let any_unsafe = matches.iter().any(|m| m.function.language != Language::C)
        || syms.functions.iter().any(|f| f.language != Language::C);
    let go = matches.iter().find(|m| m.function.language == Language::Go);
    let mut return_mode = explicit_or(
        phase,
        match (go, any_unsafe) {
            (Some(_), _) => ReturnMode::RetSites,
            (None, true) => ReturnMode::Guarded,
            (None, false) => ReturnMode::Uretprobe,
        },
    );
    let mut warnings = Vec::new();
    if let (Some(g), true) = (go, return_mode.uses_uretprobe()) {
        // Never a uretprobe on Go code, whatever was asked: it crashes the program (the
        // guard cannot help: Go moves stacks and scans them without the C unwinder).
        warnings.push(format!(
            "phase '{}': return = \"{}\" overridden for the Go function {}: uretprobes \
             crash Go programs (the runtime finds the kernel's trampoline where a return \
             address should be when it unwinds or moves a goroutine's stack); RET-site probes \
             are used instead",
            phase.name,
            return_mode.as_str(),
            g.name.demangled
        ));
        return_mode = ReturnMode::RetSites;
    }
    let unwinds = matches
        .iter()
        .find(|m| matches!(m.function.language, Language::Cxx | Language::Rust));
    if let (Some(u), ReturnMode::Uretprobe) = (unwinds, return_mode) {
        // Asked for (the default is RET sites here): allowed, where nothing unwinds.
        warnings.push(format!(
            "phase '{}': a uretprobe on {} kills the process if a C++ exception or a Rust \
             panic (a PostgreSQL ERROR inside a pgrx extension) ever unwinds through it: the \
             unwinder finds the kernel's trampoline instead of a return address; RET-site \
             probes (the default) are safe",
            phase.name, u.name.demangled
        ));
    }
    // The argument registers the phase reads: its `arg`'s, its `group_by` string's.
    let mut reads = Vec::new();
    if let Some(Capture::Arg(n)) = phase.capture() {
        reads.push((n, format!("arg = {n}")));
    }
    if let Some(g) = phase.group_by {
        let last = g.arg + g.kind.registers() - 1;
        reads.push((
            last,
            format!("group_by arg = {} (type = \"{}\")", g.arg, g.kind.as_str()),
        ));
    }
    for (n, what) in reads {
        let c = matches.iter().find(|m| m.function.language != Language::Go);
        if let (Some(c), true) = (c, usize::from(n) >= SYSV_INT_ARGS) {
            let reason = format!(
                "{what} reads argument register {n}: {} is not a Go function, and the System V \
                 x86-64 convention passes only {SYSV_INT_ARGS} integer arguments in registers \
                 (0-{}); indices up to {} are for Go functions (Go's register ABI)",
                c.name.demangled,
                SYSV_INT_ARGS - 1,
                GO_INT_ARGS - 1
            );
            return unresolved(reason, Vec::new(), syms.is_go);
        }
    }
    if let (Some(g), Some(StringArg::Cstr)) = (go, phase.group_by.map(|g| g.kind)) {
        // Go has no C strings: bytes past a string's end are other data, never a NUL.
        let reason = format!(
            "group_by reads a C string (the default type), but {} is a Go function: a Go \
             string is a pointer and a length, write group_by = {{ arg = N, type = \"str\" }}",
            g.name.demangled
        );
        return unresolved(reason, Vec::new(), syms.is_go);
    }
    let mut targets = Vec::with_capacity(matches.len());
    for m in &matches {
        let f = m.function;
        // A Go function's entry probe goes after its stack check (disasm::go_entry_site).
        let go_entry = (f.language == Language::Go)
            .then(|| disasm::go_entry_site(syms, f))
            .flatten();
        let entry = match go_entry.map_or_else(|| disasm::entry_site(syms, f, past_endbr), Ok) {
            Ok(s) => s,
            Err(e) => return unresolved(format!("{e:#}"), Vec::new(), syms.is_go),
        };
        let at = entry.file_offset - f.file_offset;
        let first = (1..=15)
            .rev()
            .find_map(|n| syms.bytes(entry.file_offset, n));
        if let Some(why) = first.and_then(|b| disasm::unprobeable(b, f.address + at)) {
            let what = format!("{} ({} + {at:#x}): {why}", m.name.demangled, shown);
            if matches.len() > 1 {
                // One of a glob's matches: the others are still worth probing.
                warnings.push(format!("phase '{}': {what}; left out", phase.name));
                continue;
            }
            return unresolved(
                format!("{what}; probe a function it calls or that calls it"),
                Vec::new(),
                syms.is_go,
            );
        }
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
            entry_offset: entry.file_offset - f.file_offset,
            exits,
            debuginfo: if f.from_debuginfo {
                syms.debug_file.clone()
            } else {
                None
            },
        });
    }
    if targets.is_empty() {
        let reason = format!("no function '{pattern}' matched in {shown} can be probed");
        return ResolvedPhase {
            warnings,
            ..unresolved(reason, Vec::new(), syms.is_go)
        };
    }
    ResolvedPhase {
        id,
        phase: phase.clone(),
        targets,
        kernel: None,
        return_mode,
        status: Status::Resolved,
        warnings,
        usdt: None,
    }
}

/// Resolves one USDT phase in its (already located) object: one target per start site, named
/// `provider:name`; the done sites are the first target's exits (RET-site programs close the
/// phase there).
fn resolve_usdt_phase(id: u32, phase: &Phase, names: &[String], loaded: &Loaded) -> ResolvedPhase {
    let unresolved = |reason: String, nearest: Vec<String>| ResolvedPhase {
        id,
        phase: phase.clone(),
        targets: Vec::new(),
        kernel: None,
        return_mode: ReturnMode::RetSites,
        status: Status::Unresolved { reason, nearest },
        warnings: Vec::new(),
        usdt: None,
    };
    let (loc, syms) = match loaded {
        Ok(l) => l,
        Err(reason) => return unresolved(reason.clone(), Vec::new()),
    };
    let shown = &loc.target_path;
    let notes = match usdt::notes(syms.data()) {
        Ok(n) => n,
        Err(e) => {
            return unresolved(
                format!("cannot read the USDT notes of {shown}: {e:#}"),
                Vec::new(),
            )
        }
    };
    let sites = match usdt::resolve(names, &notes, shown) {
        Ok(s) => s,
        Err(reason) => {
            let missing = names
                .iter()
                .find(|n| !notes.iter().any(|m| &m.full_name() == *n))
                .map_or("", String::as_str);
            return unresolved(reason, usdt::nearest(missing, &notes));
        }
    };
    // The arguments BPF reads must decode at every start site.
    let mut reads = Vec::new();
    if let Some(Capture::Arg(n)) = phase.capture() {
        reads.push((n, "arg"));
    }
    if let Some(g) = phase.group_by {
        reads.push((g.arg, "group_by"));
    }
    for (n, what) in reads {
        for s in &sites.starts {
            if let Err(e) = usdt::argument(&s.args, n as usize) {
                return unresolved(
                    format!("{what} = {n}: {} at {:#x}: {e:#}", s.full_name(), s.address),
                    Vec::new(),
                );
            }
        }
    }
    let targets = sites
        .starts
        .iter()
        .enumerate()
        .map(|(i, s)| ResolvedSymbol {
            object: loc.host_path.clone(),
            display_object: loc.target_path.clone(),
            build_id: syms.build_id.clone(),
            symbol: s.full_name(),
            demangled: s.full_name(),
            address: s.address,
            size: 0,
            language: Language::C,
            entry: usdt::site(s),
            entry_offset: 0,
            exits: if i == 0 {
                sites.dones.iter().map(usdt::site).collect()
            } else {
                Vec::new()
            },
            debuginfo: None,
        })
        .collect();
    ResolvedPhase {
        id,
        phase: phase.clone(),
        targets,
        kernel: None,
        return_mode: ReturnMode::RetSites,
        status: Status::Resolved,
        warnings: Vec::new(),
        usdt: Some(sites),
    }
}

/// Integer arguments passed in registers by the System V x86-64 convention (C, C++, Rust):
/// `rdi, rsi, rdx, rcx, r8, r9`.
pub const SYSV_INT_ARGS: usize = 6;

/// Integer arguments passed in registers by Go's register ABI (amd64, Go 1.17+):
/// `rax, rbx, rcx, rdi, rsi, r8, r9, r10, r11`.
pub const GO_INT_ARGS: usize = 9;

/// Why a name may be missing from `syms` beyond a typo: a stripped object without its debug
/// file (say how to get one, and which debug files were rejected), or the debug file that was
/// searched too.
fn missing_hint(syms: &symbols::ObjectSymbols) -> Option<String> {
    if syms.is_go && !syms.has_symtab {
        return Some(match (&syms.go_note, syms.from_pclntab) {
            (_, true) => "the Go binary has no symbol table (built with -ldflags='-s' or \
                          stripped); its functions were read from .gopclntab"
                .to_string(),
            (note, false) => format!(
                "a Go binary without a symbol table (built with -ldflags='-s' or stripped) and \
                 without a readable function table (.gopclntab: {}): wprof cannot find its \
                 functions; rebuild it without -s (`-ldflags=-w` drops only DWARF; -trimpath is \
                 fine) and do not strip it, or probe an unstripped build of the same source",
                note.as_deref().unwrap_or("missing")
            ),
        });
    }
    let notes = syms.debug_notes.iter().map(|n| format!("; {n}"));
    match (&syms.debug_file, syms.has_symtab) {
        (Some(dbg), _) => Some(format!("its debug file {dbg} was searched too")),
        (None, false) => Some(format!(
            "the object is stripped: only exported functions are visible; install its debug \
             symbols (Debian: its package's -dbgsym, e.g. postgresql-15-dbgsym) or set {}{}",
            debuginfo::ENV,
            notes.collect::<String>()
        )),
        (None, true) if !syms.debug_notes.is_empty() => Some(
            notes
                .collect::<String>()
                .trim_start_matches("; ")
                .to_string(),
        ),
        (None, true) => None,
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

#[cfg(test)]
mod go_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod testutil;
