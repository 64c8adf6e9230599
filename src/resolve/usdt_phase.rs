//! One `usdt` phase resolved in its object: its start and done sites, read from the object's
//! SystemTap SDT notes.
//!
//! In: a phase, its `provider:name` list and its object (located and parsed, or why not). Out: a
//! [`ResolvedPhase`] with one target per start site, or unresolved with the reason and the
//! nearest probe names.

use super::{usdt, Loaded, ResolvedPhase, ResolvedSymbol, Status};
use crate::model::profile::{Capture, Phase, ReturnMode};
use crate::model::Language;

/// Resolves one USDT phase in its (already located) object: one target per start site, named
/// `provider:name`; the done sites are the first target's exits (RET-site programs close the
/// phase there).
pub(super) fn resolve(id: u32, phase: &Phase, names: &[String], loaded: &Loaded) -> ResolvedPhase {
    let unresolved = |reason: String, nearest: Vec<String>| {
        let status = Status::Unresolved { reason, nearest };
        ResolvedPhase::new(id, phase, ReturnMode::RetSites, status)
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
        targets,
        usdt: Some(sites),
        ..ResolvedPhase::new(id, phase, ReturnMode::RetSites, Status::Resolved)
    }
}
