//! A Go function's prologue, disassembled (iced-x86, 64-bit): its stack check, and where the
//! entry probe goes past it.
//!
//! In: an [`ObjectSymbols`] of a Go binary and one of its [`Function`]s. Out: the entry [`Site`]
//! right after the stack check, or None when the function has none (or it cannot be shown to be
//! one) and the entry probe stays at +0 ([`entry_site`]).
//!
//! [`entry_site`]: crate::resolve::elf::disasm::entry_site

use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind, Register};

use crate::resolve::elf::disasm::{cost_of, is_direct_jmp, is_jcc};
use crate::resolve::elf::symbols::{Function, ObjectSymbols};
use crate::resolve::Site;

/// How many instructions a Go prologue's stack check spans at most (`lea`/`mov`+`sub`, `cmp`,
/// `jbe`, and a second check for frames too big for the first: 6 is plenty).
const GO_PROLOGUE_MAX: usize = 6;

/// How far the stack check's out-of-line block is read for its `call runtime.morestack*`
/// (spills of the argument registers come first: up to 9 of them, and a `mov` for a closure).
const GO_MORESTACK_BLOCK_MAX: usize = 24;

/// The entry site of a Go function: the instruction after its prologue's stack check
/// (usually `push %rbp`, which the kernel emulates), or None when the function has no such
/// check (a leaf or `//go:nosplit` function starts its body at +0) or it cannot be shown to be
/// one.
///
/// Why not +0: a Go function starts with `cmp 0x10(%r14),%rsp; jbe more` (or `lea -N(%rsp),%r12;
/// cmp 0x10(%r14),%r12; jbe more`), and `more:` spills the argument registers, calls
/// `runtime.morestack_noctxt`, which gives the goroutine a bigger stack, reloads them and jumps
/// back to +0. A probe at +0 fires again after every such growth: one call, two entries. The
/// instruction after the `jbe` runs once per call. Up to there, nothing the entry program reads
/// has changed: the stack check writes only `r12` and the flags, so the stack pointer, the
/// return address at `[rsp]`, the argument registers (`rax`, `rbx`, `rcx`, `rdi`, `rsi`,
/// `r8`-`r11`) and the goroutine in `r14` are the caller's.
///
/// What is checked: every instruction before the site is part of such a check (`cmp`, a
/// conditional jump, or `lea`/`mov`/`sub` into `r12`); at least one of the conditional jumps
/// goes to a block that calls a `runtime.morestack*` function; no branch of the function
/// targets the site; the site is no exit.
pub fn entry_site(obj: &ObjectSymbols, f: &Function) -> Option<Site> {
    if f.size == 0 {
        return None;
    }
    let body = obj.bytes(f.file_offset, f.size)?;
    let mut decoder = Decoder::with_ip(64, body, f.address, DecoderOptions::NONE);
    let mut site = None;
    for _ in 0..GO_PROLOGUE_MAX {
        if !decoder.can_decode() {
            break;
        }
        let insn = decoder.decode();
        let to_r12 = insn.op0_kind() == OpKind::Register
            && insn.op0_register() == Register::R12
            && matches!(
                insn.mnemonic(),
                Mnemonic::Lea | Mnemonic::Mov | Mnemonic::Sub
            );
        if is_jcc(insn.mnemonic()) && insn.op0_kind() == OpKind::NearBranch64 {
            let target = insn.near_branch_target();
            if target < f.address || target - f.address >= f.size {
                break;
            }
            if calls_morestack(obj, body, f.address, target) {
                site = Some(insn.next_ip());
            }
        } else if !(insn.mnemonic() == Mnemonic::Cmp || to_r12) {
            break;
        }
    }
    let site = site?;
    // Nothing of the function may branch to the site, nor may it be an exit.
    let mut all = Decoder::with_ip(64, body, f.address, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    while all.can_decode() {
        all.decode_out(&mut insn);
        if insn.op0_kind() == OpKind::NearBranch64 && insn.near_branch_target() == site {
            return None;
        }
        if insn.ip() == site {
            let exit = insn.mnemonic() == Mnemonic::Ret || is_direct_jmp(&insn);
            if exit || insn.is_invalid() {
                return None;
            }
            let off = site - f.address;
            return Some(Site {
                file_offset: f.file_offset + off,
                cost: cost_of(&insn),
            });
        }
    }
    None
}

/// Whether the code at `target` (inside `body`, which starts at `address`) calls one of the
/// Go runtime's `morestack` functions before it jumps or returns.
fn calls_morestack(obj: &ObjectSymbols, body: &[u8], address: u64, target: u64) -> bool {
    let Some(code) = body.get((target - address) as usize..) else {
        return false;
    };
    let mut decoder = Decoder::with_ip(64, code, target, DecoderOptions::NONE);
    for _ in 0..GO_MORESTACK_BLOCK_MAX {
        if !decoder.can_decode() {
            return false;
        }
        let insn = decoder.decode();
        match insn.mnemonic() {
            Mnemonic::Call if insn.op0_kind() == OpKind::NearBranch64 => {
                return obj.function_at(insn.near_branch_target()).is_some_and(|g| {
                    g.names
                        .iter()
                        .any(|n| n.mangled.starts_with("runtime.morestack"))
                });
            }
            Mnemonic::Jmp | Mnemonic::Ret | Mnemonic::Call => return false,
            _ => {}
        }
    }
    false
}
