//! USDT (SystemTap SDT) probe sites: what BPF needs to read a probe's arguments.
//!
//! A USDT phase opens at a start probe's `nop` and closes at a done probe's: no return probe,
//! nothing to unwind through. Its frame is not tied to a stack pointer of its own (the two
//! probes may sit in different functions), so it lives as long as the frame it was opened in
//! (see `Frame::sp` handling in the BPF side).

/// Bit 17 of a cookie: a USDT site (start or done). The site's index in `USDT_SITES` is in
/// bits [`COOKIE_USDT_SITE_SHIFT`].. of the cookie.
pub const COOKIE_USDT_BIT: u64 = 1 << 17;

/// Shift of a USDT start site's index into `USDT_SITES` in its cookie (14 bits, 18..31).
pub const COOKIE_USDT_SITE_SHIFT: u64 = 18;

/// Mask of the site index (after the shift).
pub const COOKIE_USDT_SITE_MASK: u64 = 0x3fff;

/// Entries of the `USDT_SITES` array.
pub const MAX_USDT_SITES: u32 = 4096;

/// The argument is not read (0).
pub const USDT_ARG_NONE: u8 = 0;
/// The argument is a constant: `value`.
pub const USDT_ARG_CONST: u8 = 1;
/// The argument is in register `reg`.
pub const USDT_ARG_REG: u8 = 2;
/// The argument is in memory at register `reg` + `value`.
pub const USDT_ARG_DEREF: u8 = 3;

/// Registers in the order [`UsdtArg::reg`] numbers them (x86-64).
pub const USDT_REGISTERS: [&str; 17] = [
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13",
    "r14", "r15", "rip",
];

/// How to read one USDT argument, from the probe's note (`-4@%eax`, `8@-24(%rbp)`, `4@$5`).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct UsdtArg {
    /// `USDT_ARG_*`.
    pub kind: u8,
    /// Register index in [`USDT_REGISTERS`].
    pub reg: u8,
    /// Size in bytes: 1, 2, 4 or 8.
    pub size: u8,
    /// 1 when the value is signed (sign-extended to 64 bits).
    pub signed: u8,
    /// Explicit padding.
    pub _pad: u32,
    /// The constant, or the displacement of a memory operand.
    pub value: i64,
}

/// What a USDT start site's phase reads: its counted argument (`arg`) and the string it
/// groups by (`group_by`). Values of the `USDT_SITES` array, indexed by the site's index.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct UsdtSite {
    /// The argument `arg` names.
    pub count: UsdtArg,
    /// The `const char *` argument `group_by` names.
    pub key: UsdtArg,
}
