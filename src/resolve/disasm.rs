//! Disassembly (iced-x86, 64-bit) of a function's bytes: where and how dearly it can be probed.
//!
//! In: an [`ObjectSymbols`] and one of its [`Function`]s. Out: the entry [`Site`] with the
//! [`CostClass`] of the first instruction (NOP -> `Nop`; `push r64` and relative call/jmp/jcc ->
//! `Emulated`; anything else, `endbr64` included -> `SingleStep`), and the exit sites: every RET
//! (`c3`, `c2 iw`, `rep ret`) and every direct JMP whose target lies outside the function (a tail
//! call). The function's own `.cold` fragments (GCC hot/cold splitting, same stack frame) count
//! as inside: a jump into one is not an exit, and its RETs are exits of the function.

use anyhow::{bail, Context};
use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind, Register};

use super::symbols::{Function, ObjectSymbols};
use super::{CostClass, Site};

/// Longest x86 instruction.
const MAX_INSN: u64 = 15;

/// A run of code: its bytes, virtual address and file offset.
#[derive(Debug, Clone, Copy)]
pub struct Code<'a> {
    /// The instructions' bytes.
    pub bytes: &'a [u8],
    /// Virtual address of `bytes[0]`.
    pub address: u64,
    /// File offset of `bytes[0]`.
    pub file_offset: u64,
}

impl Code<'_> {
    fn contains(&self, addr: u64) -> bool {
        addr >= self.address && addr - self.address < self.bytes.len() as u64
    }
}

/// Cost class of a uprobe on `insn` (facts.md, "What a probe costs here").
pub fn cost_of(insn: &Instruction) -> CostClass {
    if insn.mnemonic() == Mnemonic::Nop {
        return CostClass::Nop;
    }
    let reg = insn.op0_register() as u32;
    let push_r64 = insn.mnemonic() == Mnemonic::Push
        && insn.op0_kind() == OpKind::Register
        && (Register::RAX as u32..=Register::R15 as u32).contains(&reg);
    let relative_branch = insn.op0_kind() == OpKind::NearBranch64
        && (matches!(insn.mnemonic(), Mnemonic::Call | Mnemonic::Jmp) || is_jcc(insn.mnemonic()));
    if push_r64 || relative_branch {
        CostClass::Emulated
    } else {
        CostClass::SingleStep
    }
}

/// A conditional jump (`jcc`; not `loop`/`jrcxz`, which the kernel single-steps).
fn is_jcc(m: Mnemonic) -> bool {
    use Mnemonic::*;
    matches!(
        m,
        Ja | Jae | Jb | Jbe | Je | Jg | Jge | Jl | Jle | Jne | Jno | Jnp | Jns | Jo | Jp | Js
    )
}

/// A direct (relative) JMP.
fn is_direct_jmp(insn: &Instruction) -> bool {
    insn.mnemonic() == Mnemonic::Jmp && insn.op0_kind() == OpKind::NearBranch64
}

/// Cost class of the first instruction in `bytes` (SingleStep if it does not decode).
pub fn entry_cost(bytes: &[u8], address: u64) -> CostClass {
    let mut decoder = Decoder::with_ip(64, bytes, address, DecoderOptions::NONE);
    let insn = decoder.decode();
    if insn.is_invalid() {
        CostClass::SingleStep
    } else {
        cost_of(&insn)
    }
}

/// Exit sites of a function made of `parts` (its body first, then fragments of the same
/// frame): RETs, and direct JMPs to anything outside every part. In file-offset order.
pub fn exits_of(parts: &[Code<'_>]) -> Vec<Site> {
    let mut sites = Vec::new();
    let mut insn = Instruction::default();
    for part in parts {
        let mut decoder = Decoder::with_ip(64, part.bytes, part.address, DecoderOptions::NONE);
        while decoder.can_decode() {
            decoder.decode_out(&mut insn);
            let exit = match insn.mnemonic() {
                Mnemonic::Ret => true,
                _ if is_direct_jmp(&insn) => {
                    let target = insn.near_branch_target();
                    !parts.iter().any(|p| p.contains(target))
                }
                _ => false,
            };
            if exit {
                let file_offset = part.file_offset + (insn.ip() - part.address);
                sites.push(Site {
                    file_offset,
                    cost: cost_of(&insn),
                });
            }
        }
    }
    sites.sort_by_key(|s| s.file_offset);
    sites
}

/// The entry site of `f`.
pub fn entry_site(obj: &ObjectSymbols, f: &Function) -> anyhow::Result<Site> {
    // Size 0 (unknown): read one instruction's worth, or what the file has.
    let want = if f.size == 0 {
        MAX_INSN
    } else {
        f.size.min(MAX_INSN)
    };
    let bytes = (1..=want)
        .rev()
        .find_map(|n| obj.bytes(f.file_offset, n))
        .with_context(|| {
            format!(
                "{} has no bytes at file offset {:#x} ({})",
                obj.path.display(),
                f.file_offset,
                f.names[0].demangled
            )
        })?;
    Ok(Site {
        file_offset: f.file_offset,
        cost: entry_cost(bytes, f.address),
    })
}

/// The exit sites of `f` (see the module doc). Fails when the size is unknown, or when the
/// bytes are not in the file.
pub fn exit_sites(obj: &ObjectSymbols, f: &Function) -> anyhow::Result<Vec<Site>> {
    let name = &f.names[0].demangled;
    if f.size == 0 {
        bail!("{name} in {}: size unknown, cannot find its RET instructions; use return = \"uretprobe\"",
            obj.path.display());
    }
    let code = |file_offset: u64, address: u64, size: u64| -> anyhow::Result<Code<'_>> {
        let bytes = obj.bytes(file_offset, size).with_context(|| {
            format!(
                "{name} in {}: bytes [{file_offset:#x}, +{size:#x}) are not in the file",
                obj.path.display()
            )
        })?;
        Ok(Code {
            bytes,
            address,
            file_offset,
        })
    };
    let mut parts = vec![code(f.file_offset, f.address, f.size)?];
    for fr in obj.cold_fragments_of(f).filter(|fr| fr.size > 0) {
        parts.push(code(fr.file_offset, fr.address, fr.size)?);
    }
    Ok(exits_of(&parts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resolve::testutil::{build, objdump_rets};

    fn code(bytes: &[u8]) -> Code<'_> {
        Code {
            bytes,
            address: 0x1000,
            file_offset: 0x100,
        }
    }

    #[test]
    fn entry_classes() {
        assert_eq!(entry_cost(&[0x90], 0), CostClass::Nop);
        assert_eq!(
            entry_cost(&[0x0f, 0x1f, 0x44, 0x00, 0x00], 0),
            CostClass::Nop
        );
        assert_eq!(entry_cost(&[0x66, 0x90], 0), CostClass::Nop);
        assert_eq!(entry_cost(&[0x55], 0), CostClass::Emulated); // push %rbp
        assert_eq!(entry_cost(&[0x41, 0x57], 0), CostClass::Emulated); // push %r15
        assert_eq!(entry_cost(&[0xe8, 0, 0, 0, 0], 0), CostClass::Emulated); // call rel32
        assert_eq!(entry_cost(&[0xeb, 0x00], 0), CostClass::Emulated); // jmp rel8
        assert_eq!(entry_cost(&[0x74, 0x00], 0), CostClass::Emulated); // je rel8
        assert_eq!(
            entry_cost(&[0xf3, 0x0f, 0x1e, 0xfa], 0),
            CostClass::SingleStep
        ); // endbr64
        assert_eq!(entry_cost(&[0x48, 0x89, 0xe5], 0), CostClass::SingleStep); // mov %rsp,%rbp
        assert_eq!(
            entry_cost(&[0x48, 0x83, 0xec, 0x08], 0),
            CostClass::SingleStep
        ); // sub
        assert_eq!(
            entry_cost(&[0xff, 0x35, 0, 0, 0, 0], 0),
            CostClass::SingleStep
        ); // push mem
    }

    #[test]
    fn rets_and_tail_calls() {
        // test edi,edi; je +1; ret; rep ret; ret 8; jmp -> outside (tail call); jmp back (inside)
        let bytes = [
            0x85, 0xff, 0x74, 0x01, 0xc3, 0xf3, 0xc3, 0xc2, 0x08, 0x00, 0xe9, 0x00, 0x10, 0x00,
            0x00, 0xeb, 0xef,
        ];
        let sites = exits_of(&[code(&bytes)]);
        let offs: Vec<u64> = sites.iter().map(|s| s.file_offset).collect();
        assert_eq!(offs, vec![0x104, 0x105, 0x107, 0x10a]);
        assert_eq!(sites[0].cost, CostClass::SingleStep);
        assert_eq!(sites[3].cost, CostClass::Emulated);
        // the same jump, once its target is a fragment of the function, is no exit.
        let cold = [0xc3u8];
        let frag = Code {
            bytes: &cold,
            address: 0x1000 + 15 + 0x1000,
            file_offset: 0x5000,
        };
        let offs: Vec<u64> = exits_of(&[code(&bytes), frag])
            .iter()
            .map(|s| s.file_offset)
            .collect();
        assert_eq!(offs, vec![0x104, 0x105, 0x107, 0x5000]);
    }

    #[test]
    fn real_functions_match_objdump() {
        let dir = tempfile::tempdir().unwrap();
        let src = r#"
            int __attribute__((noinline)) many(int x) {
                if (x == 1) return 10;
                if (x == 2) return 20;
                if (x > 100) { volatile int y = x; return y * 7; }
                return x;
            }
            int framed(int x) { return many(x) + 1; }
        "#;
        let cet = build(
            dir.path(),
            "cet.so",
            src,
            false,
            &["-O2", "-shared", "-fPIC", "-fcf-protection=full"],
        );
        let fp = build(
            dir.path(),
            "fp.so",
            src,
            false,
            &[
                "-O0",
                "-shared",
                "-fPIC",
                "-fno-omit-frame-pointer",
                "-fcf-protection=none",
            ],
        );
        for (obj, first) in [(&cet, CostClass::SingleStep), (&fp, CostClass::Emulated)] {
            let syms = ObjectSymbols::load(obj).unwrap();
            for name in ["many", "framed"] {
                let f = syms
                    .functions
                    .iter()
                    .find(|f| f.names[0].mangled == name)
                    .unwrap();
                assert_eq!(
                    entry_site(&syms, f).unwrap().cost,
                    first,
                    "{name} in {}",
                    obj.display()
                );
                let exits = exit_sites(&syms, f).unwrap();
                let rets = exits
                    .iter()
                    .filter(|s| s.cost == CostClass::SingleStep)
                    .count();
                assert_eq!(rets, objdump_rets(obj, name), "{name} in {}", obj.display());
                assert!(!exits.is_empty());
            }
        }
    }

    #[test]
    fn size_zero_is_an_error_for_exits() {
        let dir = tempfile::tempdir().unwrap();
        let so = build(
            dir.path(),
            "z.so",
            "int f(void){return 1;}",
            false,
            &["-shared", "-fPIC"],
        );
        let syms = ObjectSymbols::load(&so).unwrap();
        let mut f = syms
            .functions
            .iter()
            .find(|f| f.names[0].mangled == "f")
            .unwrap()
            .clone();
        f.size = 0;
        let e = exit_sites(&syms, &f).unwrap_err().to_string();
        assert!(
            e.contains("size unknown") && e.contains("return = \"uretprobe\""),
            "{e}"
        );
        assert!(entry_site(&syms, &f).is_ok());
    }
}
