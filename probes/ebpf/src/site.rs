//! What a probe hit says: its attach cookie and its argument registers.
//!
//! In: the cookie of the link that fired (`kind << 32 | phase` and the flag bits of
//! `wprof_common`) and the hit's `pt_regs`. Out: a [`Site`], and the integer arguments in
//! calling-convention order ([`arg_registers`], [`pick`]) for `arg` captures and `group_by`.

use aya_ebpf::{helpers::generated::bpf_get_attach_cookie, EbpfContext};
use wprof_common::{
    key::COOKIE_PHASE_MASK,
    usdt::{COOKIE_USDT_SITE_MASK, COOKIE_USDT_SITE_SHIFT},
    COOKIE_ARG_MASK, COOKIE_ARG_SHIFT, COOKIE_GO_BIT, COOKIE_KEY_BIT, COOKIE_STW_START_BIT,
    COOKIE_STW_STOP_BIT, COOKIE_UNDER_SHIFT, COOKIE_URETPROBE_BIT, MAX_PHASES,
};

/// What the attach cookie of the site that fired says.
#[derive(Clone, Copy)]
pub(crate) struct Site {
    /// The phase id.
    pub(crate) phase: u32,
    /// The phase's return is detected by a uretprobe (not RET sites).
    pub(crate) uretprobe: bool,
    /// `ARG_NONE`, argument index + 1, or `ARG_RETVAL`.
    pub(crate) arg: u64,
    /// Id + 1 of the phase this one must be called inside, 0 for none.
    pub(crate) under: u32,
    /// A Go function: goroutine stack, Go's register ABI.
    pub(crate) go: bool,
    /// An exit of `runtime.stopTheWorldWithSema`: the world is stopped from here.
    pub(crate) stw_stop: bool,
    /// The phase groups its calls by a string argument (`PHASE_KEYS`).
    pub(crate) keyed: bool,
    /// The entry of `runtime.startTheWorldWithSema`: the world restarts.
    pub(crate) stw_start: bool,
    /// A USDT start site's index in `USDT_SITES`.
    pub(crate) usdt_site: u32,
}

/// Reads the cookie of the link that fired; an out-of-range phase id is an error.
#[inline(always)]
pub(crate) fn site_of<C: EbpfContext>(ctx: &C) -> Result<Site, ()> {
    // SAFETY: the helper only reads the cookie of the link that fired.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    let phase = (cookie & COOKIE_PHASE_MASK) as u32;
    if phase >= MAX_PHASES {
        return Err(());
    }
    Ok(Site {
        phase,
        uretprobe: cookie & COOKIE_URETPROBE_BIT != 0,
        arg: (cookie >> COOKIE_ARG_SHIFT) & COOKIE_ARG_MASK,
        under: (cookie >> COOKIE_UNDER_SHIFT) as u32 & 0xffff,
        go: cookie & COOKIE_GO_BIT != 0,
        stw_stop: cookie & COOKIE_STW_STOP_BIT != 0,
        stw_start: cookie & COOKIE_STW_START_BIT != 0,
        keyed: cookie & COOKIE_KEY_BIT != 0,
        usdt_site: ((cookie >> COOKIE_USDT_SITE_SHIFT) & COOKIE_USDT_SITE_MASK) as u32,
    })
}

/// The integer argument registers in order: System V x86-64 (6), or Go's register ABI on
/// amd64 (9: a method's receiver first, a string takes two, a slice three). Each is read at a
/// constant offset of the context: loads of `pt_regs` at a computed offset are refused by the
/// verifier ("modified ctx ptr"), which is what a `match` on a runtime index can compile to.
/// Volatile, so LLVM cannot merge them back into one such load. `arg` and `group_by` both
/// read their registers here, through [`pick`].
#[inline(always)]
pub(crate) fn arg_registers(regs: &aya_ebpf::bindings::pt_regs, go: bool) -> [u64; 9] {
    let r = |v: &u64| {
        // SAFETY: a field of the context, read in place.
        unsafe { core::ptr::read_volatile(v) }
    };
    if go {
        [
            r(&regs.rax),
            r(&regs.rbx),
            r(&regs.rcx),
            r(&regs.rdi),
            r(&regs.rsi),
            r(&regs.r8),
            r(&regs.r9),
            r(&regs.r10),
            r(&regs.r11),
        ]
    } else {
        [
            r(&regs.rdi),
            r(&regs.rsi),
            r(&regs.rdx),
            r(&regs.rcx),
            r(&regs.r8),
            r(&regs.r9),
            0,
            0,
            0,
        ]
    }
}

/// `values[n]` without an indexed load (0 past the end): every value masked in or out.
#[inline(always)]
pub(crate) fn pick<const N: usize>(values: &[u64; N], n: u64) -> u64 {
    let mut v = 0;
    for (i, x) in values.iter().enumerate() {
        v |= x & 0u64.wrapping_sub((i as u64 == n) as u64);
    }
    v
}
