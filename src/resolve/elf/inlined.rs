//! Inlined copies of probed functions, read from DWARF with gimli.
//!
//! In: an [`ObjectSymbols`] (its DWARF is in the object itself or in its separate debug file;
//! sections may be zlib-compressed, SHF_COMPRESSED or `.zdebug`) and the addresses of the
//! functions phases resolved to. Out: for each of those functions that also has inlined
//! instances, an [`InlinedCopies`]: how many DW_TAG_inlined_subroutine entries with code have
//! the function's DW_TAG_subprogram (its abstract origin) as their abstract origin, and the
//! functions they sit in. A probe on the function's address never sees those calls.
//! Cost: nothing unless a .debug_info exists; then the DWARF sections are decompressed once, the
//! units holding the addresses are walked to find each function's DIE, and only when one has an
//! abstract origin (a function inlined somewhere always has one) is all of .debug_info walked,
//! reading the attributes of subprogram and inlined-subroutine entries only.

use std::collections::HashMap;

use anyhow::Context;
use gimli::{AttributeValue, DebugInfoOffset, DwTag, Dwarf, Unit};

use super::dwarf::{with_dwarf, Reader};
use super::symbols::ObjectSymbols;
use crate::model::symbol::demangle;

/// The inlined instances of one function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InlinedCopies {
    /// How many inlined instances (with code) the function has.
    pub count: usize,
    /// The functions holding them, distinct, in DWARF order.
    pub callers: Vec<String>,
}

/// The subprogram holding an inlined instance: its entry, and where its code starts.
type Holder = (DebugInfoOffset, Option<u64>);

/// How many abstract-origin links are followed from a function's DIE (LTO adds a level).
const ORIGIN_DEPTH: usize = 4;

/// The inlined copies of the functions at `addresses` (only those that have some). Empty when
/// neither the object nor its debug file has a .debug_info. Errors: malformed or
/// unsupported DWARF (e.g. zstd-compressed sections).
pub fn inlined_copies(
    syms: &ObjectSymbols,
    addresses: &[u64],
) -> anyhow::Result<HashMap<u64, InlinedCopies>> {
    if addresses.is_empty() {
        return Ok(HashMap::new());
    }
    let found = with_dwarf(syms, |dwarf| copies_in(syms, dwarf, addresses))?;
    Ok(found.unwrap_or_default())
}

/// [`inlined_copies`] in the object's DWARF.
fn copies_in<'a>(
    syms: &ObjectSymbols,
    dwarf: &Dwarf<Reader<'a>>,
    addresses: &[u64],
) -> anyhow::Result<HashMap<u64, InlinedCopies>> {
    let units = Units::read(dwarf)?;

    // Pass 1: the DIE of each function, in the units whose code holds its address.
    let mut origins: HashMap<DebugInfoOffset, Vec<u64>> = HashMap::new();
    for u in &units.list {
        let unit = &u.unit;
        if !covers_any(dwarf, unit, addresses) {
            continue;
        }
        walk(unit, &mut |die, _| {
            if die.tag != gimli::DW_TAG_subprogram {
                return;
            }
            for start in die.starts(dwarf, unit) {
                if addresses.contains(&start) {
                    if let Some(origin) = die.origin {
                        origins.entry(origin).or_default().push(start);
                    }
                }
            }
        })?;
    }
    if origins.is_empty() {
        // No abstract origin: these functions are inlined nowhere.
        return Ok(HashMap::new());
    }
    // LTO: an abstract DIE may itself point at an earlier one; inlined instances may use either.
    let mut frontier: Vec<(DebugInfoOffset, Vec<u64>)> =
        origins.iter().map(|(o, a)| (*o, a.clone())).collect();
    for _ in 1..ORIGIN_DEPTH {
        let mut next = Vec::new();
        for (offset, addrs) in frontier {
            if let Some(up) = units.origin_of(offset) {
                if let std::collections::hash_map::Entry::Vacant(e) = origins.entry(up) {
                    e.insert(addrs.clone());
                    next.push((up, addrs));
                }
            }
        }
        if next.is_empty() {
            break;
        }
        frontier = next;
    }

    // Pass 2: every inlined instance with code whose abstract origin is one of those.
    let mut found: Vec<(u64, Option<Holder>)> = Vec::new();
    for u in &units.list {
        let unit = &u.unit;
        walk(unit, &mut |die, outer| {
            if die.tag != gimli::DW_TAG_inlined_subroutine || !die.has_code() {
                return;
            }
            let Some(addrs) = die.origin.and_then(|o| origins.get(&o)) else {
                return;
            };
            let holder = outer.map(|o| (o.offset, o.starts(dwarf, unit)));
            for a in addrs {
                // A copy inlined into the function itself (recursion) runs inside a probed call.
                if holder
                    .as_ref()
                    .is_some_and(|(_, starts)| starts.contains(a))
                {
                    continue;
                }
                found.push((*a, holder.as_ref().map(|(o, s)| (*o, s.first().copied()))));
            }
        })?;
    }
    let mut out: HashMap<u64, InlinedCopies> = HashMap::new();
    for (addr, holder) in found {
        let name = match holder {
            Some((offset, start)) => start
                .and_then(|s| name_at(syms, s))
                .or_else(|| units.name_of(dwarf, offset))
                .unwrap_or_else(|| "?".into()),
            None => "?".into(),
        };
        let e = out.entry(addr).or_insert(InlinedCopies {
            count: 0,
            callers: Vec::new(),
        });
        e.count += 1;
        if !e.callers.contains(&name) {
            e.callers.push(name);
        }
    }
    Ok(out)
}

/// The parsed units, by offset.
struct Units<'a> {
    list: Vec<ParsedUnit<'a>>,
}

struct ParsedUnit<'a> {
    start: DebugInfoOffset,
    unit: Unit<Reader<'a>>,
}

impl<'a> Units<'a> {
    fn read(dwarf: &Dwarf<Reader<'a>>) -> anyhow::Result<Units<'a>> {
        let mut list = Vec::new();
        let mut headers = dwarf.units();
        while let Some(header) = headers.next().context("malformed .debug_info")? {
            let Some(start) = header.debug_info_offset() else {
                continue;
            };
            // A unit gimli cannot parse (e.g. an unknown form) is skipped, not fatal.
            if let Ok(unit) = dwarf.unit(header) {
                list.push(ParsedUnit { start, unit });
            }
        }
        Ok(Units { list })
    }

    /// The unit holding `offset`, and the entry's offset in it.
    fn find(&self, offset: DebugInfoOffset) -> Option<(&Unit<Reader<'a>>, gimli::UnitOffset)> {
        let i = self.list.partition_point(|u| u.start <= offset);
        let u = &self.list[i.checked_sub(1)?];
        let local = offset.to_unit_offset(&u.unit.header)?;
        Some((&u.unit, local))
    }

    /// The abstract origin of the entry at `offset`, if it has one.
    fn origin_of(&self, offset: DebugInfoOffset) -> Option<DebugInfoOffset> {
        let (unit, local) = self.find(offset)?;
        let entry = unit.entry(local).ok()?;
        reference(unit, entry.attr_value(gimli::DW_AT_abstract_origin)?)
    }

    /// A name for the entry at `offset`: its linkage name (demangled) or name, or its abstract
    /// origin's or specification's.
    fn name_of(&self, dwarf: &Dwarf<Reader<'a>>, mut offset: DebugInfoOffset) -> Option<String> {
        for _ in 0..ORIGIN_DEPTH {
            let (unit, local) = self.find(offset)?;
            let entry = unit.entry(local).ok()?;
            for (attr, mangled) in [
                (gimli::DW_AT_linkage_name, true),
                (gimli::DW_AT_MIPS_linkage_name, true),
                (gimli::DW_AT_name, false),
            ] {
                if let Some(v) = entry.attr_value(attr) {
                    if let Ok(s) = dwarf.attr_string(unit, v) {
                        let s = s.to_string_lossy().into_owned();
                        return Some(if mangled { demangle(&s) } else { s });
                    }
                }
            }
            offset = entry
                .attr_value(gimli::DW_AT_abstract_origin)
                .or_else(|| entry.attr_value(gimli::DW_AT_specification))
                .and_then(|v| reference(unit, v))?;
        }
        None
    }
}

/// The name of the function (or compiler fragment) starting at `addr` in the symbol tables.
fn name_at(syms: &ObjectSymbols, addr: u64) -> Option<String> {
    if let Ok(i) = syms.functions.binary_search_by_key(&addr, |f| f.address) {
        return Some(syms.functions[i].names[0].demangled.clone());
    }
    syms.fragments
        .iter()
        .find(|f| f.address == addr)
        .map(|f| f.name.clone())
}

/// A reference attribute as a .debug_info offset (references into a supplementary file, as
/// dwz's `DW_FORM_GNU_ref_alt`, give None).
fn reference(unit: &Unit<Reader<'_>>, v: AttributeValue<Reader<'_>>) -> Option<DebugInfoOffset> {
    match v {
        AttributeValue::UnitRef(o) => o.to_debug_info_offset(&unit.header),
        AttributeValue::DebugInfoRef(o) => Some(o),
        _ => None,
    }
}

/// Whether the unit's code holds any of `addresses` (units without code information do not).
fn covers_any(dwarf: &Dwarf<Reader<'_>>, unit: &Unit<Reader<'_>>, addresses: &[u64]) -> bool {
    let Ok(mut ranges) = dwarf.unit_ranges(unit) else {
        return true;
    };
    while let Ok(Some(r)) = ranges.next() {
        if addresses.iter().any(|a| (r.begin..r.end).contains(a)) {
            return true;
        }
    }
    false
}

/// The attributes of a subprogram or inlined-subroutine entry that matter here.
struct Die<'a> {
    offset: DebugInfoOffset,
    tag: DwTag,
    depth: isize,
    low_pc: Option<AttributeValue<Reader<'a>>>,
    entry_pc: Option<AttributeValue<Reader<'a>>>,
    ranges: Option<AttributeValue<Reader<'a>>>,
    origin: Option<DebugInfoOffset>,
}

impl<'a> Die<'a> {
    /// Has code (an abstract instance tree's entries have none).
    fn has_code(&self) -> bool {
        self.low_pc.is_some() || self.ranges.is_some()
    }

    /// The addresses the entry's code may start at: low_pc, entry_pc, each range's start.
    fn starts(&self, dwarf: &Dwarf<Reader<'a>>, unit: &Unit<Reader<'a>>) -> Vec<u64> {
        let mut out = Vec::new();
        for v in [&self.low_pc, &self.entry_pc].into_iter().flatten() {
            if let Ok(Some(a)) = dwarf.attr_address(unit, *v) {
                out.push(a);
            }
        }
        if let Some(v) = &self.ranges {
            if let Ok(Some(mut it)) = dwarf.attr_ranges(unit, *v) {
                while let Ok(Some(r)) = it.next() {
                    if r.begin < r.end {
                        out.push(r.begin);
                    }
                }
            }
        }
        out
    }
}

/// Walks a unit's subprogram and inlined-subroutine entries (the others are skipped without
/// reading their attributes), calling `visit` with each and the innermost enclosing subprogram
/// that has code.
fn walk<'a>(
    unit: &Unit<Reader<'a>>,
    visit: &mut dyn FnMut(&Die<'a>, Option<&Die<'a>>),
) -> anyhow::Result<()> {
    let mut raw = unit.entries_raw(None)?;
    let mut stack: Vec<Die<'a>> = Vec::new();
    while !raw.is_empty() {
        let depth = raw.next_depth();
        let local = raw.next_offset();
        let Some(abbrev) = raw.read_abbreviation()? else {
            continue;
        };
        let tag = abbrev.tag();
        if tag != gimli::DW_TAG_subprogram && tag != gimli::DW_TAG_inlined_subroutine {
            raw.skip_attributes(abbrev.attributes())?;
            continue;
        }
        let Some(offset) = local.to_debug_info_offset(&unit.header) else {
            raw.skip_attributes(abbrev.attributes())?;
            continue;
        };
        let mut die = Die {
            offset,
            tag,
            depth,
            low_pc: None,
            entry_pc: None,
            ranges: None,
            origin: None,
        };
        for spec in abbrev.attributes() {
            let attr = raw.read_attribute(*spec)?;
            match attr.name() {
                gimli::DW_AT_low_pc => die.low_pc = Some(attr.value()),
                gimli::DW_AT_entry_pc => die.entry_pc = Some(attr.value()),
                gimli::DW_AT_ranges => die.ranges = Some(attr.value()),
                gimli::DW_AT_abstract_origin => die.origin = reference(unit, attr.value()),
                _ => {}
            }
        }
        while stack.last().is_some_and(|d| d.depth >= depth) {
            stack.pop();
        }
        let outer = stack.iter().rev().find(|d| d.has_code());
        visit(&die, outer);
        if tag == gimli::DW_TAG_subprogram && abbrev.has_children() {
            stack.push(die);
        }
    }
    Ok(())
}
