//! Phases whose library was nowhere to be found at attach time (an optional phase in a
//! library a traced process may still `dlopen` from a path wprof could not know).
//!
//! wprof puts a probe on the dynamic loader's `_dl_debug_state`, which the loader calls around
//! every change to its list of objects (the r_debug protocol debuggers use). Each call wakes
//! the collect loop at once; the pending phases are then resolved again against that
//! process's mappings and, once their library is there, attached like any other phase. Calls
//! the process makes between the mapping and the attach are not seen: ~10 ms here, nearly all
//! of it the kernel registering the new uprobes (the loader's notice reaches wprof in ~50 µs
//! and resolving takes ~0.6 ms). A library found in a search directory at attach time has no
//! such window.
//!
//! In: the resolved profile and phases, the traced pids. Out: a [`LateAttach`] the collect
//! loop calls on each of the loader's notices; at the end, the late-attached phases merged
//! into the run's phases.

use anyhow::Result;

use crate::attach::Tracer;
use crate::model::profile::Profile;
use crate::resolve::{self, ResolvedPhase, Scope, Status};

/// The dynamic loader's soname on x86-64 glibc, and its hook.
const LOADER: &str = "ld-linux-x86-64.so.2";
const LOADER_HOOK: &str = "_dl_debug_state";

/// Phases waiting for their library.
pub struct LateAttach {
    profile: Profile,
    pending: Vec<u32>,
    pids: Vec<u32>,
    every_process: bool,
    /// Phases attached during the run, to replace their unresolved entries in the run.
    attached: Vec<ResolvedPhase>,
}

impl LateAttach {
    /// None when no phase waits for a library. `profile` is the one resolved (return modes
    /// already overridden), `pids` and `every_process` as given to [`Tracer::attach`].
    pub fn new(
        profile: &Profile,
        phases: &[ResolvedPhase],
        pids: &[u32],
        every_process: bool,
    ) -> Option<LateAttach> {
        let pending: Vec<u32> = phases
            .iter()
            .filter(|p| p.phase.optional && p.object_missing())
            .map(|p| p.id)
            .collect();
        (!pending.is_empty()).then(|| LateAttach {
            profile: profile.clone(),
            pending,
            pids: pids.to_vec(),
            every_process,
            attached: Vec::new(),
        })
    }

    /// Puts the probe on the dynamic loader of the traced processes.
    pub fn watch(&self, tracer: &mut Tracer) -> Result<()> {
        let hook = Profile::parse(
            &format!(
                "name = \"dynamic loader\"\nobject = \"{LOADER}\"\n\
                 [[phase]]\nname = \"dl_debug_state\"\nsymbol = \"{LOADER_HOOK}\"\n"
            ),
            "builtin:dynamic-loader",
        )?;
        let resolved = resolve::resolve_profile(&hook, &Scope::Pids(self.pids.clone()))?;
        match resolved.first().map(|p| (&p.status, p.targets.first())) {
            Some((Status::Resolved, Some(ld))) => {
                tracer.watch_dlopen(ld, &self.pids, self.every_process)
            }
            Some((Status::Unresolved { reason, .. }, _)) => {
                anyhow::bail!("cannot watch dlopen: {reason}")
            }
            _ => anyhow::bail!("cannot watch dlopen: {LOADER_HOOK} not found"),
        }
    }

    /// Names of the phases still waiting.
    pub fn pending_names(&self) -> Vec<&str> {
        self.pending
            .iter()
            .filter_map(|&id| self.profile.phases.get(id as usize))
            .map(|p| p.name.as_str())
            .collect()
    }

    /// Process `pid`'s loader changed its objects (first at `at_ns`, CLOCK_MONOTONIC):
    /// attaches every pending phase whose library it now maps. Errors are reported and leave
    /// the phase pending.
    pub fn maps_changed(&mut self, pid: u32, at_ns: u64, tracer: &mut Tracer) {
        if self.pending.is_empty() {
            return;
        }
        let phases = match resolve::resolve_profile(&self.profile, &Scope::Pids(vec![pid])) {
            Ok(p) => p,
            // The process may be gone already; another one may map it later.
            Err(_) => return,
        };
        let mut ready: Vec<ResolvedPhase> = phases
            .into_iter()
            .filter(|p| self.pending.contains(&p.id) && matches!(p.status, Status::Resolved))
            .collect();
        if ready.is_empty() {
            return;
        }
        super::guard::guard_late(
            tracer,
            &mut ready,
            &Scope::Pids(vec![pid]),
            &self.pids,
            self.every_process,
        );
        ready.retain(|p| matches!(p.status, Status::Resolved));
        match tracer.attach(&ready, &self.pids, self.every_process) {
            Ok(summary) => {
                let window = super::monotonic_ns().saturating_sub(at_ns);
                for p in &ready {
                    let object = p.targets.first().map_or("", |t| t.display_object.as_str());
                    eprintln!(
                        "wprof: phase '{}' attached late: pid {pid} loaded {object}; probes \
                         live {} after the loader's notice ({} probe points; calls in between \
                         are not counted)",
                        p.phase.name,
                        crate::render::units::format_ns(window as f64),
                        summary.points
                    );
                }
                self.pending.retain(|id| !ready.iter().any(|p| p.id == *id));
                self.attached.extend(ready);
            }
            Err(e) => eprintln!("wprof: warning: attaching late phases failed: {e:#}"),
        }
    }

    /// `phases` with the late-attached ones resolved.
    pub fn merge(self, phases: &mut [ResolvedPhase]) {
        for late in self.attached {
            if let Some(slot) = phases.iter_mut().find(|p| p.id == late.id) {
                *slot = late;
            }
        }
    }
}

/// Optional phases whose library was nowhere to be found: watches the traced processes'
/// dynamic loader so they are attached when it maps the library. A watch that cannot be set
/// up is a warning (those phases then stay unattached, as without it). `profile` is the one
/// resolved (return modes already overridden).
pub fn watch_dlopen(
    tracer: &mut Tracer,
    profile: &Profile,
    phases: &[ResolvedPhase],
    pids: &[u32],
    every_process: bool,
) -> Option<LateAttach> {
    let late = LateAttach::new(profile, phases, pids, every_process)?;
    let names = late.pending_names().join(", ");
    match late.watch(tracer) {
        Ok(()) => {
            eprintln!("wprof: watching dlopen for the library of phase(s) {names}");
            Some(late)
        }
        Err(e) => {
            eprintln!("wprof: warning: {e:#}; phase(s) {names} stay unattached");
            None
        }
    }
}
