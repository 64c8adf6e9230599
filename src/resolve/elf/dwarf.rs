//! An object's DWARF, opened with gimli for the readers that need it (inlined copies of probed
//! functions, the Go runtime's structure layout): from the object itself or its separate debug
//! file, whichever has a .debug_info; sections decompressed when they are zlib-compressed
//! (SHF_COMPRESSED or `.zdebug`).
//!
//! In: an [`ObjectSymbols`] (or the bytes of candidate files) and a reader. Out: what the reader
//! returns from a gimli [`Dwarf`] over those sections, or `None` when there is no .debug_info.

use std::borrow::Cow;
use std::io::Read;

use anyhow::{bail, Context};
use gimli::{Dwarf, EndianSlice, RunTimeEndian, SectionId};
use object::{CompressionFormat, Object, ObjectSection};

use super::symbols::ObjectSymbols;

/// How the readers see DWARF sections.
pub type Reader<'a> = EndianSlice<'a, RunTimeEndian>;

/// The sections read; the others (line tables excepted, which units parse) load empty.
const WANTED: &[SectionId] = &[
    SectionId::DebugAbbrev,
    SectionId::DebugAddr,
    SectionId::DebugInfo,
    SectionId::DebugLine,
    SectionId::DebugLineStr,
    SectionId::DebugRanges,
    SectionId::DebugRngLists,
    SectionId::DebugStr,
    SectionId::DebugStrOffsets,
];

/// Runs `read` over the DWARF of `syms`' object; `None` when neither the object nor its debug
/// file has a .debug_info. Errors: malformed or unsupported DWARF (e.g. zstd-compressed
/// sections), and `read`'s.
pub fn with_dwarf<T>(
    syms: &ObjectSymbols,
    read: impl FnOnce(&Dwarf<Reader<'_>>) -> anyhow::Result<T>,
) -> anyhow::Result<Option<T>> {
    with_dwarf_in(&[syms.debug_data(), Some(syms.data())], read)
}

/// [`with_dwarf`] over the first of the objects `files` (their bytes) with a .debug_info.
pub fn with_dwarf_in<T>(
    files: &[Option<&[u8]>],
    read: impl FnOnce(&Dwarf<Reader<'_>>) -> anyhow::Result<T>,
) -> anyhow::Result<Option<T>> {
    let Some(file) = files
        .iter()
        .flatten()
        .filter_map(|d| object::File::parse(*d).ok())
        .find(|f| {
            f.section_by_name(".debug_info")
                .is_some_and(|s| s.size() > 0)
        })
    else {
        return Ok(None);
    };
    let sections = gimli::DwarfSections::load(|id| load_section(&file, id))?;
    let endian = if file.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    let dwarf = sections.borrow(|s| EndianSlice::new(s, endian));
    read(&dwarf).map(Some)
}

/// One section's bytes, decompressed if needed; empty if absent or not wanted.
fn load_section<'d>(file: &object::File<'d>, id: SectionId) -> anyhow::Result<Cow<'d, [u8]>> {
    if !WANTED.contains(&id) {
        return Ok(Cow::Borrowed(&[]));
    }
    let Some(section) = file.section_by_name(id.name()) else {
        return Ok(Cow::Borrowed(&[]));
    };
    let c = section
        .compressed_data()
        .with_context(|| format!("malformed {} section", id.name()))?;
    match c.format {
        CompressionFormat::None => Ok(Cow::Borrowed(c.data)),
        CompressionFormat::Zlib => {
            // The header's size is a hint only: never trust it for a huge allocation.
            let hint = usize::try_from(c.uncompressed_size.min(1 << 28)).unwrap_or(0);
            let mut out = Vec::with_capacity(hint);
            flate2::read::ZlibDecoder::new(c.data)
                .read_to_end(&mut out)
                .with_context(|| format!("cannot decompress {}", id.name()))?;
            Ok(Cow::Owned(out))
        }
        other => bail!(
            "{} is compressed as {other:?}, which wprof cannot read (only zlib)",
            id.name()
        ),
    }
}
