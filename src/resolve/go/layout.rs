//! Where the Go runtime keeps the goroutine a thread is working for, read from the binary's
//! DWARF: the offsets of `runtime.g.m` and `runtime.m.curg`.
//!
//! Code on the system stack (`systemstack`: GC assist marking, stack growth) runs as the
//! thread's `g0`, not as the goroutine that switched to it; `g0.m.curg` is that goroutine. BPF
//! follows the two fields to attribute such CPU samples to the goroutine's phases. Their offsets
//! change between Go releases (`runtime.m` gains and loses fields), so they come from the
//! binary's own type information; a binary built without DWARF (`-ldflags=-w`) has none, and
//! its system-stack samples stay with the thread.
//!
//! In: a Go binary's path, or the resolved phases (their Go objects). Out: a
//! [`GoRuntimeLayout`], or none when nothing is Go; an error when a Go object has no layout or
//! two disagree.

use std::path::Path;

use anyhow::{bail, Context};
use gimli::{Dwarf, Unit};

use crate::model::Language;
use crate::resolve::elf::dwarf::{with_dwarf_in, Reader};
use crate::resolve::{ResolvedPhase, Status};

/// Offsets, in bytes, of the two fields from a `g` to its thread's current goroutine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoRuntimeLayout {
    /// `runtime.g.m`: the thread (M) a goroutine runs on.
    pub g_m: u64,
    /// `runtime.m.curg`: the user goroutine the thread is running (nil in the scheduler).
    pub m_curg: u64,
}

/// The layout in the Go binary at `path`, or `None` when it has no DWARF or its DWARF lacks
/// either field. Reads the file, not its symbols (~60 ms for a 40 MB binary).
pub fn go_runtime_layout_at(path: &Path) -> anyhow::Result<Option<GoRuntimeLayout>> {
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(with_dwarf_in(&[Some(&data)], find)?.flatten())
}

/// The layout of the Go binaries that `phases` attach to, for CPU sampling: `Ok(None)` when
/// none is Go; an error saying why when one has no layout (no DWARF) or two disagree.
pub fn layout_for_phases(phases: &[ResolvedPhase]) -> anyhow::Result<Option<GoRuntimeLayout>> {
    let mut objects: Vec<&Path> = phases
        .iter()
        .filter(|p| matches!(p.status, Status::Resolved))
        .flat_map(|p| &p.targets)
        .filter(|t| t.language == Language::Go)
        .map(|t| t.object.as_path())
        .collect();
    objects.sort();
    objects.dedup();
    let mut found = None;
    for object in objects {
        let layout = go_runtime_layout_at(object)?.with_context(|| {
            format!(
                "{} has no DWARF type information (built with -ldflags=-w?)",
                object.display()
            )
        })?;
        if found.is_some_and(|f| f != layout) {
            bail!("the traced Go binaries were built by different Go releases");
        }
        found = Some(layout);
    }
    Ok(found)
}

/// Scans the units for `runtime.g` and `runtime.m`, stopping when both fields are known.
fn find(dwarf: &Dwarf<Reader<'_>>) -> anyhow::Result<Option<GoRuntimeLayout>> {
    let (mut g_m, mut m_curg) = (None, None);
    let mut headers = dwarf.units();
    while let Some(header) = headers.next()? {
        let unit = dwarf.unit(header)?;
        scan_unit(dwarf, &unit, &mut g_m, &mut m_curg)?;
        if let (Some(g_m), Some(m_curg)) = (g_m, m_curg) {
            return Ok(Some(GoRuntimeLayout { g_m, m_curg }));
        }
    }
    Ok(None)
}

/// Sets `g_m` / `m_curg` from the structure types of `unit` that are `runtime.g` / `runtime.m`.
/// Reads the attributes of structure types and of the members of a wanted one only.
fn scan_unit(
    dwarf: &Dwarf<Reader<'_>>,
    unit: &Unit<Reader<'_>>,
    g_m: &mut Option<u64>,
    m_curg: &mut Option<u64>,
) -> anyhow::Result<()> {
    let mut raw = unit.entries_raw(None)?;
    // The member wanted inside the structure being walked, and that structure's depth.
    let mut inside: Option<(&str, isize)> = None;
    while !raw.is_empty() {
        let depth = raw.next_depth();
        let Some(abbrev) = raw.read_abbreviation()? else {
            continue;
        };
        if inside.is_some_and(|(_, d)| depth <= d) {
            inside = None;
        }
        let tag = abbrev.tag();
        let member =
            matches!(inside, Some((_, d)) if depth == d + 1) && tag == gimli::DW_TAG_member;
        if tag != gimli::DW_TAG_structure_type && !member {
            raw.skip_attributes(abbrev.attributes())?;
            continue;
        }
        let (mut name, mut offset) = (None, None);
        for spec in abbrev.attributes() {
            let attr = raw.read_attribute(*spec)?;
            match (attr.name(), attr.value()) {
                (gimli::DW_AT_name, v) => {
                    name = dwarf
                        .attr_string(unit, v)
                        .ok()
                        .map(|s| s.to_string_lossy().into_owned());
                }
                (gimli::DW_AT_data_member_location, v) => offset = v.udata_value(),
                _ => {}
            }
        }
        if !member {
            inside = match name.as_deref() {
                Some("runtime.g") if g_m.is_none() => Some(("m", depth)),
                Some("runtime.m") if m_curg.is_none() => Some(("curg", depth)),
                _ => None,
            };
            continue;
        }
        let Some((field, _)) = inside else { continue };
        if name.as_deref() != Some(field) {
            continue;
        }
        match field {
            "m" => *g_m = offset,
            _ => *m_curg = offset,
        }
        inside = None;
    }
    Ok(())
}
