//! Stack symbolization: raw addresses from `bpf_get_stackid` (user stacks with
//! `BPF_F_USER_STACK`, and kernel stacks) -> frame names for folded stacks and flame graphs.
//!
//! User addresses go through a [`ProcessMaps`] snapshot taken while the process was alive
//! (address -> file + file offset) and are symbolized with blazesym from the file on disk
//! (`Source::Elf` + `Input::FileOffset`, DWARF included), so a process that has exited by
//! the time its stacks are symbolized still resolves. Kernel addresses go through
//! `/proc/kallsyms`. [`restore_uretprobe_returns`] first puts back the return addresses that
//! pending uretprobes replaced with their trampoline.
//!
//! Frame names: Rust names demangled without the legacy hash (`::h0123...`); C++ names
//! demangled **without parameter list, return type or cv-qualifiers**
//! (`wpfx::Store::write_batch`), so that folded lines stay readable; C names as they are.
//! Inlined functions become frames of their own. An address in no mapping is `[unknown]`, a
//! known mapping without a symbol is `libname.so+0x1a2b` (file offset), a trampoline left
//! unresolved is `[uprobes]`, the vdso `[vdso]`; kernel frames carry a `_[k]` suffix.

pub mod maps;
pub mod trampoline;

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use blazesym::MaybeDefault;

pub use maps::{Mapping, MappingKind, MapsCache, ProcessMaps};
pub use trampoline::restore_uretprobe_returns;

use crate::model::symbol::demangle;

/// Frame name for an address in no known mapping.
pub const UNKNOWN: &str = "[unknown]";
/// Frame name for a uretprobe trampoline whose return address could not be restored.
pub const UPROBES: &str = "[uprobes]";
/// Frame name for an address in the vdso.
pub const VDSO: &str = "[vdso]";
/// Frame name for a kernel address when kernel symbols are unavailable.
pub const KERNEL: &str = "[kernel]";
/// Suffix of kernel frame names (the flame graph convention for kernel frames).
pub const KERNEL_SUFFIX: &str = "_[k]";

/// Default location of the kernel symbol table.
const KALLSYMS: &str = "/proc/kallsyms";

/// How a file is symbolized, learnt on first use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FileMode {
    /// ELF symbols plus DWARF (inlined functions).
    Dwarf,
    /// ELF symbol tables only: blazesym failed on the file's debug information.
    ElfOnly,
    /// Missing or unparsable: every offset renders as `lib+0x..`.
    Unusable,
}

/// Symbolizes user and kernel stacks, caching results since the same stacks repeat.
///
/// Never panics and never fails: whatever cannot be resolved gets a placeholder name.
pub struct StackSymbolizer {
    symbolizer: Symbolizer,
    /// Per file (the path it is opened from): file offset -> frames (outermost first), or
    /// `None` when the offset has no symbol.
    user_cache: HashMap<PathBuf, HashMap<u64, Option<Vec<String>>>>,
    /// How each file is read (DWARF, ELF symbols only, or not at all).
    files: HashMap<PathBuf, FileMode>,
    kallsyms: PathBuf,
    /// `Some(false)` once kallsyms turned out unreadable or zeroed (no privilege).
    kernel_ok: Option<bool>,
    kernel_cache: HashMap<u64, String>,
}

impl Default for StackSymbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for StackSymbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StackSymbolizer")
            .field("files", &self.user_cache.len())
            .field("kallsyms", &self.kallsyms)
            .field("kernel_ok", &self.kernel_ok)
            .finish_non_exhaustive()
    }
}

impl StackSymbolizer {
    /// A symbolizer using DWARF (with inlined functions) where present and `/proc/kallsyms`.
    pub fn new() -> StackSymbolizer {
        Self::with_kallsyms(KALLSYMS)
    }

    /// Like [`StackSymbolizer::new`], with kernel symbols from another kallsyms file.
    pub fn with_kallsyms(kallsyms: impl Into<PathBuf>) -> StackSymbolizer {
        let symbolizer = Symbolizer::builder()
            .enable_code_info(true)
            .enable_inlined_fns(true)
            // Our own demangling: blazesym keeps C++ parameter lists.
            .enable_demangling(false)
            .build();
        StackSymbolizer {
            symbolizer,
            user_cache: HashMap::new(),
            files: HashMap::new(),
            kallsyms: kallsyms.into(),
            kernel_ok: None,
            kernel_cache: HashMap::new(),
        }
    }

    /// Frame names of a user stack. `stack` is innermost first (as BPF gives it, after
    /// [`restore_uretprobe_returns`]); the result is **outermost first** (folded-stack order),
    /// with inlined functions expanded (the containing function first, then its inlined
    /// callees). Every address but the innermost is a return address and is looked up at
    /// `addr - 1` so that it falls inside the call instruction, as perf does.
    pub fn user_frames(&mut self, maps: &ProcessMaps, stack: &[u64]) -> Vec<String> {
        let mut per_addr: Vec<Vec<String>> = Vec::with_capacity(stack.len());
        for (i, &addr) in stack.iter().enumerate() {
            let lookup = if i == 0 { addr } else { addr.saturating_sub(1) };
            per_addr.push(self.user_frame(maps, addr, lookup));
        }
        per_addr.into_iter().rev().flatten().collect()
    }

    /// Frames (outermost first) for one user address; `lookup` is the address to resolve.
    fn user_frame(&mut self, maps: &ProcessMaps, addr: u64, lookup: u64) -> Vec<String> {
        let Some(mapping) = maps.lookup(lookup).or_else(|| maps.lookup(addr)) else {
            return vec![UNKNOWN.to_string()];
        };
        let open_path = match &mapping.kind {
            MappingKind::Uprobes => return vec![UPROBES.to_string()],
            MappingKind::Vdso => return vec![VDSO.to_string()],
            MappingKind::File { open_path, .. } => open_path,
        };
        let lookup = if mapping.contains(lookup) {
            lookup
        } else {
            addr
        };
        let offset = mapping.file_offset(lookup);
        match self.file_frames(open_path, offset) {
            Some(frames) => frames.clone(),
            None => vec![format!(
                "{}+{:#x}",
                mapping.name(),
                mapping.file_offset(addr)
            )],
        }
    }

    /// Cached symbolization of one file offset; `None` when it has no symbol.
    fn file_frames(&mut self, path: &Path, offset: u64) -> Option<&Vec<String>> {
        let cached = self
            .user_cache
            .get(path)
            .is_some_and(|m| m.contains_key(&offset));
        if !cached {
            let frames = self.symbolize_file_offset(path, offset)?;
            self.user_cache
                .entry(path.to_path_buf())
                .or_default()
                .insert(offset, frames);
        }
        self.user_cache.get(path)?.get(&offset)?.as_ref()
    }

    /// Symbolizes one file offset, with DWARF first and, for a file whose DWARF blazesym
    /// cannot read (e.g. zlib-compressed debug sections, a feature not enabled here), with
    /// its ELF symbol tables only. `None` when the file cannot be used at all.
    fn symbolize_file_offset(&mut self, path: &Path, offset: u64) -> Option<Option<Vec<String>>> {
        loop {
            let debug_syms = match self.files.get(path) {
                Some(FileMode::Unusable) => return None,
                Some(FileMode::ElfOnly) => false,
                Some(FileMode::Dwarf) | None => true,
            };
            let mut elf = Elf::new(path);
            elf.debug_syms = debug_syms;
            let src = Source::Elf(elf);
            match self
                .symbolizer
                .symbolize(&src, Input::FileOffset(&[offset]))
            {
                Ok(mut syms) => {
                    let mode = if debug_syms {
                        FileMode::Dwarf
                    } else {
                        FileMode::ElfOnly
                    };
                    self.files.insert(path.to_path_buf(), mode);
                    return Some(syms.pop().and_then(|s| sym_frames(&s)));
                }
                Err(_) => {
                    let next = if debug_syms {
                        FileMode::ElfOnly
                    } else {
                        FileMode::Unusable
                    };
                    self.files.insert(path.to_path_buf(), next);
                }
            }
        }
    }

    /// Frame names of a kernel stack (innermost first in, **outermost first** out), each with
    /// the `_[k]` suffix. When kernel symbols are unavailable (kallsyms unreadable, or all its
    /// addresses zero for lack of privilege) every frame is `[kernel]`; an address no symbol
    /// covers is `[unknown]_[k]`.
    pub fn kernel_frames(&mut self, stack: &[u64]) -> Vec<String> {
        if !self.kernel_available() {
            return vec![KERNEL.to_string(); stack.len()];
        }
        let mut out = Vec::with_capacity(stack.len());
        for (i, &addr) in stack.iter().enumerate().rev() {
            let lookup = if i == 0 { addr } else { addr.saturating_sub(1) };
            out.push(self.kernel_frame(lookup));
        }
        out
    }

    fn kernel_frame(&mut self, addr: u64) -> String {
        if let Some(name) = self.kernel_cache.get(&addr) {
            return name.clone();
        }
        let src = Source::Kernel(Kernel {
            kallsyms: MaybeDefault::Some(self.kallsyms.clone()),
            vmlinux: MaybeDefault::None,
            debug_syms: false,
            ..Kernel::default()
        });
        let name = match self.symbolizer.symbolize(&src, Input::AbsAddr(&[addr])) {
            Ok(mut syms) => syms.pop().and_then(|s| match s {
                Symbolized::Sym(sym) if !sym.name.is_empty() => Some(demangle(&sym.name)),
                _ => None,
            }),
            Err(_) => {
                self.kernel_ok = Some(false);
                None
            }
        };
        let name = format!("{}{KERNEL_SUFFIX}", name.as_deref().unwrap_or(UNKNOWN));
        self.kernel_cache.insert(addr, name.clone());
        name
    }

    /// Whether kallsyms is readable and shows real addresses (checked once).
    fn kernel_available(&mut self) -> bool {
        *self
            .kernel_ok
            .get_or_insert_with(|| kallsyms_has_addresses(&self.kallsyms))
    }
}

/// Frames (outermost first) for one symbolization result, or `None` if it has no symbol.
fn sym_frames(sym: &Symbolized<'_>) -> Option<Vec<String>> {
    let Symbolized::Sym(sym) = sym else {
        return None;
    };
    if sym.name.is_empty() {
        return None;
    }
    let mut frames = vec![demangle(&sym.name)];
    frames.extend(
        sym.inlined
            .iter()
            .filter(|f| !f.name.is_empty())
            .map(|f| demangle(&f.name)),
    );
    Some(frames)
}

/// True when the kallsyms file can be read and has a non-zero address (a reader without
/// privilege sees only zeros).
fn kallsyms_has_addresses(path: &Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    BufReader::new(file)
        .lines()
        .take(1000)
        .map_while(Result::ok)
        .filter_map(|l| {
            let addr = l.split_whitespace().next()?.to_string();
            u64::from_str_radix(&addr, 16).ok()
        })
        .any(|a| a != 0)
}

#[cfg(test)]
mod tests;
