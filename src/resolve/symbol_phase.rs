//! One `symbol` phase resolved in its object: the functions its pattern matches, their entry
//! and exit sites, and the return detection that is safe for their language.
//!
//! In: a phase, its pattern and its object (located and parsed, or why not). Out: a
//! [`ResolvedPhase`], resolved or unresolved with the reason (a missing name, an ambiguous
//! pattern, an argument register the convention does not pass, an unprobeable instruction) and
//! the nearest names.

use super::elf::{debuginfo, disasm, symbols};
use super::go::prologue;
use super::{matcher, suggest, Loaded, ResolvedPhase, ResolvedSymbol, Status};
use crate::model::profile::{Capture, Phase, ReturnMode, StringArg};
use crate::model::Language;

/// The phase's own return mode, or `auto_mode` when it says `auto`.
fn explicit_or(phase: &Phase, auto_mode: ReturnMode) -> ReturnMode {
    match phase.return_mode {
        ReturnMode::Auto => auto_mode,
        m => m,
    }
}

/// Resolves one symbol phase in its (already located) object.
pub(super) fn resolve(
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
    let unresolved = |reason: String, nearest: Vec<String>, is_go: bool| {
        let status = Status::Unresolved { reason, nearest };
        ResolvedPhase::new(id, phase, guessed(is_go), status)
    };
    let (loc, syms) = match loaded {
        Ok(l) => l,
        Err(reason) => return unresolved(reason.clone(), Vec::new(), false),
    };
    let shown = &loc.target_path;
    let matches = match matcher::find(syms, pattern, phase.all_matches) {
        Ok(m) => m,
        Err(matcher::MatchError::NoMatch) => {
            // An optional phase that is absent is no mistake to correct, and the search for
            // similar names costs ~0.1 s on a C++ library of 11,000 functions (the unwind
            // guard looks for six optional functions in each object of its phases).
            let nearest = if phase.optional {
                Vec::new()
            } else {
                suggest::nearest(syms, pattern, 5)
            };
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
        // A Go function's entry probe goes after its stack check (go::prologue::entry_site).
        let go_entry = (f.language == Language::Go)
            .then(|| prologue::entry_site(syms, f))
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
        targets,
        warnings,
        ..ResolvedPhase::new(id, phase, return_mode, Status::Resolved)
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
