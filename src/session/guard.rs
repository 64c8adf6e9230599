//! The unwind guard of a run: guarded phases (`return = "guarded"`, the default for C++ and
//! Rust code) get it, or fall back to RET-site probes, saying why.
//!
//! The guard hooks the unwinder's entries and the catches (attach/unwind_guard.rs) in the
//! objects that hold them: the shared unwinder (`libgcc_s.so.1`), the C++ runtime
//! (`libstdc++.so.6`) and every object of a guarded phase (a statically linked unwinder, the
//! Rust standard library compiled into a binary or a pgrx extension). Found by symbol, through
//! the resolver, like any phase.
//!
//! In: the tracer, the resolved phases and the scope they resolved in. Out: a [`Guard`] to
//! attach with the phases' probes, or the guarded phases switched to RET sites with a warning.

use anyhow::Result;

use crate::attach::{GuardWrites, Tracer};
use crate::model::profile::{Profile, ReturnMode};
use crate::resolve::{self, ResolvedPhase, ResolvedSymbol, Scope, Status};

/// Where the unwinder starts walking a thread's stack: a throw, a cleanup's resume, a forced
/// unwind (`pthread_exit`, `pthread_cancel`), a rethrow.
const UNWINDER_ENTRIES: [&str; 4] = [
    "_Unwind_RaiseException",
    "_Unwind_Resume",
    "_Unwind_ForcedUnwind",
    "_Unwind_Resume_or_Rethrow",
];

/// Where an exception or a panic is caught: C++'s `catch` calls `__cxa_begin_catch` from the
/// catching frame; Rust's `catch_unwind` calls its cold `cleanup` (`std::panicking::try` before
/// Rust 1.87, `std::panicking::catch_unwind` since).
const CATCHES: [&str; 2] = ["__cxa_begin_catch", "std::panicking::*::cleanup"];

/// The shared objects that hold the unwinder and the C++ runtime's catch.
const RUNTIME_OBJECTS: [&str; 2] = ["libgcc_s.so.1", "libstdc++.so.6"];

/// The guard's probe points, resolved.
#[derive(Debug, Default)]
pub struct GuardPoints {
    /// Unwinder entries.
    pub unwind: Vec<ResolvedSymbol>,
    /// Catches.
    pub catch: Vec<ResolvedSymbol>,
}

impl GuardPoints {
    /// Resolves the guard's functions in `objects` (object specs as profiles write them),
    /// each optional; points already in `self` are not added twice.
    fn add(&mut self, objects: &[String], scope: &Scope) -> Result<()> {
        for object in objects {
            let mut text = format!(
                "name = \"unwind guard\"\nobject = {}\n",
                toml::Value::String(object.clone())
            );
            let names = UNWINDER_ENTRIES.iter().chain(CATCHES.iter());
            for (i, name) in names.enumerate() {
                text.push_str(&format!(
                    "[[phase]]\nname = \"g{i}\"\nsymbol = \"{name}\"\noptional = true\n\
                     all_matches = true\nreturn = \"uretprobe\"\n"
                ));
            }
            let profile = Profile::parse(&text, "builtin:unwind-guard")?;
            for p in resolve::resolve_profile(&profile, scope)? {
                if !matches!(p.status, Status::Resolved) {
                    continue;
                }
                let list = if (p.id as usize) < UNWINDER_ENTRIES.len() {
                    &mut self.unwind
                } else {
                    &mut self.catch
                };
                for t in p.targets {
                    let seen = list.iter().any(|s| {
                        s.object == t.object && s.entry.file_offset == t.entry.file_offset
                    });
                    if !seen {
                        list.push(t);
                    }
                }
            }
        }
        Ok(())
    }

    /// Why these points cannot guard anything, if they cannot.
    fn missing(&self) -> Option<String> {
        if self.unwind.is_empty() {
            return Some(format!(
                "no unwinder found ({} in {} or the phases' objects)",
                UNWINDER_ENTRIES[0], RUNTIME_OBJECTS[0]
            ));
        }
        if self.catch.is_empty() {
            return Some(format!(
                "no catch found ({} in {}, Rust's catch_unwind cleanup in the phases' objects)",
                CATCHES[0], RUNTIME_OBJECTS[1]
            ));
        }
        None
    }
}

/// The guard of a run, ready to attach once the traced pids are known.
pub struct Guard {
    points: GuardPoints,
}

/// Whether a phase wants the guard (resolved or still waiting for its library).
fn wants_guard(p: &ResolvedPhase) -> bool {
    p.return_mode == ReturnMode::Guarded && p.kernel.is_none()
}

fn guarded(phases: &[ResolvedPhase]) -> impl Iterator<Item = &ResolvedPhase> {
    phases.iter().filter(|p| wants_guard(p))
}

/// The objects of the guarded phases, each once, after `first`: where a statically linked
/// unwinder or Rust's catch may sit.
fn guard_objects(first: &[&str], phases: &[ResolvedPhase]) -> Vec<String> {
    let mut objects: Vec<String> = first.iter().map(|s| s.to_string()).collect();
    for t in guarded(phases).flat_map(|p| &p.targets) {
        let o = t.object.display().to_string();
        if !objects.contains(&o) {
            objects.push(o);
        }
    }
    objects
}

/// Resolves and loads the guard when a phase is guarded; otherwise, or when that fails, the
/// guarded phases fall back to RET-site probes (said on stderr). Before the calibration, which
/// measures the return modes the phases end up with.
pub fn prepare(tracer: &mut Tracer, phases: &mut [ResolvedPhase], scope: &Scope) -> Option<Guard> {
    guarded(phases).next()?;
    let objects = guard_objects(&RUNTIME_OBJECTS, phases);
    let mut points = GuardPoints::default();
    let ready = points
        .add(&objects, scope)
        .map_err(|e| format!("{e:#}"))
        .and_then(|()| points.missing().map_or(Ok(()), Err))
        .and_then(|()| tracer.load_unwind_guard().map_err(|e| format!("{e:#}")));
    match ready {
        Ok(GuardWrites::Kernel) => Some(Guard { points }),
        Ok(GuardWrites::Wprof(why)) => {
            eprintln!(
                "wprof: the kernel refuses the unwind guard's writes to the traced threads' \
                 stacks ({why}): wprof makes them, and a thread that starts an exception or \
                 panic through a guarded call waits for it (~0.1 ms)"
            );
            Some(Guard { points })
        }
        Err(why) => {
            fall_back(phases, &why);
            None
        }
    }
}

/// For a dry run: the guarded phases fall back to RET sites, as a run would, when this host
/// does not load the unwind guard (or wprof lacks the privileges to find out).
pub fn check_loadable(phases: &mut [ResolvedPhase]) {
    if guarded(phases).next().is_none() {
        return;
    }
    if let Err(e) = Tracer::unwind_guard_loads() {
        fall_back(phases, &format!("{e:#}"));
    }
}

impl Guard {
    /// Attaches the guard to `pids` (every process mapping its objects with `every_process`):
    /// before the phases' probes go live.
    pub fn attach(&self, tracer: &mut Tracer, pids: &[u32], every_process: bool) -> Result<()> {
        tracer.guard_unwinding(&self.points.unwind, &self.points.catch, pids, every_process)
    }
}

/// Guards late-attached phases (their library was loaded after the start): the guard's
/// functions in their objects are hooked too; without a live guard they fall back to RET sites.
pub fn guard_late(
    tracer: &mut Tracer,
    phases: &mut [ResolvedPhase],
    scope: &Scope,
    pids: &[u32],
    every_process: bool,
) {
    if guarded(phases).next().is_none() {
        return;
    }
    if !tracer.unwinding_guarded() {
        fall_back(
            phases,
            "it was not attached at the start (no guarded phase had its library yet)",
        );
        return;
    }
    let objects = guard_objects(&[], phases);
    let mut points = GuardPoints::default();
    let attached = points
        .add(&objects, scope)
        .and_then(|()| tracer.guard_unwinding(&points.unwind, &points.catch, pids, every_process));
    if let Err(e) = attached {
        fall_back(phases, &format!("{e:#}"));
    }
}

/// Turns the guarded phases into RET-site phases and says so. A function without a RET (or
/// tail-call JMP) cannot be closed that way and is left unattached, with the reason.
fn fall_back(phases: &mut [ResolvedPhase], why: &str) {
    let mut names = Vec::new();
    for p in phases.iter_mut().filter(|p| wants_guard(p)) {
        p.return_mode = ReturnMode::RetSites;
        names.push(p.phase.name.clone());
        if let Some(t) = p.targets.iter().find(|t| t.exits.is_empty()) {
            p.status = Status::Unresolved {
                reason: format!(
                    "{} has no RET or tail-call JMP to close the phase with, and the unwind guard \
                     its uretprobe needs is not available",
                    t.demangled
                ),
                nearest: Vec::new(),
            };
        }
    }
    eprintln!(
        "wprof: the unwind guard is not available ({why}); phases {} use RET-site probes \
         instead (safe, but each return is single-stepped: several µs a call)",
        names.join(", ")
    );
}
