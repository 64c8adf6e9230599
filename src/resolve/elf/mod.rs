//! What resolve reads from an ELF object's own bytes: its symbol tables, its code, its notes and
//! its DWARF (or a separate debug file's).
//!
//! In: an object file (and, for a stripped one, where its debug file may live). Out: its
//! functions and compiler fragments ([`symbols`]), where and how dearly each can be probed
//! ([`disasm`]), its USDT sites ([`usdt`]), the inlined copies a probe cannot see ([`inlined`],
//! over the DWARF [`dwarf`] opens), and the separate debug file that names a stripped object's
//! static functions ([`debuginfo`]).

pub mod debuginfo;
pub mod disasm;
pub mod dwarf;
pub mod inlined;
pub mod symbols;
mod symtab;
pub mod usdt;
