//! Warnings that need every phase resolved first: a function two phases probe, and the inlined
//! copies of a probed function that its probe cannot see.
//!
//! In: the resolved phases (and, for inlined copies, the objects they resolved in). Out: the
//! same phases, with those warnings added.

use std::rc::Rc;

use super::elf::{inlined, symbols};
use super::{ResolvedPhase, ResolvedSymbol};

/// Warns on a phase that probes a function an earlier phase probes too: both entries fire on
/// one call, the second opens a frame at the first's stack pointer, and the tree shows the
/// second phase's calls as abandoned. One function should be one phase.
pub(super) fn warn_shared_functions(phases: &mut [ResolvedPhase]) {
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
pub(super) fn warn_inlined(phases: &mut [ResolvedPhase], objects: &[Rc<symbols::ObjectSymbols>]) {
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
