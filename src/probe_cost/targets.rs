//! The calibration target: tiny functions whose first instruction is known, one per probe
//! cost class and return mode, and the loop that times them in a child process.
//!
//! wprof re-executes itself as `wprof __calibrate`; the parent attaches its probes to these
//! functions in that child and compares the child's own per-call times with and without
//! them. The functions are written in assembly so their first instruction — which decides
//! how the kernel handles the probe — cannot change with the compiler.

use std::io::{BufRead, Write};

/// The hidden first argument that makes wprof run as the calibration target.
pub const CHILD_ARG: &str = "__calibrate";

/// How a calibration function starts: the cost classes of `model::CostClass`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A 5-byte nop.
    Nop5,
    /// `push %rbp` (the kernel emulates it).
    Push,
    /// `mov %rdi,%rax` (the kernel single-steps it).
    Mov,
}

/// One calibration function: how it starts, where its `ret` is, and its address.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    /// First instruction.
    pub start: Start,
    /// Whether the parent probes its return with a uretprobe (else a probe on its `ret`).
    pub uretprobe: bool,
    /// Offset of its single `ret` from the entry.
    pub ret_offset: u64,
    f: extern "C" fn(u64) -> u64,
}

// Two copies of each start, one per return mode, so every combination can be probed at once.
macro_rules! calibration_fn {
    ($name:ident, $($insn:literal),+) => {
        /// A calibration function (see the module doc); returns its argument.
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name(_x: u64) -> u64 {
            core::arch::naked_asm!($($insn),+, "mov rax, rdi", "ret")
        }
    };
}

calibration_fn!(wprof_calib_nop5_u, ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00");
calibration_fn!(wprof_calib_nop5_r, ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00");
calibration_fn!(wprof_calib_push_u, "push rbp", "pop rbp");
calibration_fn!(wprof_calib_push_r, "push rbp", "pop rbp");
calibration_fn!(wprof_calib_mov_u, "mov rax, rdi");
calibration_fn!(wprof_calib_mov_r, "mov rax, rdi");

/// The six calibration functions: each start, probed with a uretprobe and with RET sites.
pub fn targets() -> [Target; 6] {
    // Byte lengths: nop5 5 + mov 3; push 1 + pop 1 + mov 3; mov 3 + mov 3.
    let t = |start, uretprobe, ret_offset, f| Target {
        start,
        uretprobe,
        ret_offset,
        f,
    };
    [
        t(
            Start::Nop5,
            true,
            8,
            wprof_calib_nop5_u as extern "C" fn(u64) -> u64,
        ),
        t(Start::Nop5, false, 8, wprof_calib_nop5_r),
        t(Start::Push, true, 5, wprof_calib_push_u),
        t(Start::Push, false, 5, wprof_calib_push_r),
        t(Start::Mov, true, 6, wprof_calib_mov_u),
        t(Start::Mov, false, 6, wprof_calib_mov_r),
    ]
}

impl Target {
    /// The function's address in this process.
    pub fn address(&self) -> u64 {
        self.f as usize as u64
    }

    /// Calls the function `n` times inside [`wprof_calib_outer`]; returns the mean ns per
    /// call on this thread's CPU clock. A trap is the thread's own time on the CPU; a
    /// preemption is not, and by the wall clock one landing in a round of ~600 calls priced
    /// each ~7 µs higher: beside db_bench filling both CPUs, calibrations read a pair at
    /// 1.7-4.5 µs (benchmarks §40).
    fn time(&self, n: u64) -> f64 {
        let outer = std::hint::black_box(wprof_calib_outer as extern "C" fn(_, _) -> u64);
        let t0 = thread_cpu_ns();
        std::hint::black_box(outer(self.f, n));
        thread_cpu_ns().saturating_sub(t0) as f64 / n.max(1) as f64
    }
}

/// This thread's CPU time so far, ns (`CLOCK_THREAD_CPUTIME_ID`: its time on the CPU, in
/// user and kernel mode, without the time it was preempted).
pub fn thread_cpu_ns() -> u64 {
    crate::attach::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Calls `f` `n` times. The parent probes it too, so the calibration calls run nested inside
/// an open phase, as most probed calls do: BPF then keeps the thread's stack between them
/// instead of allocating it on every call (which only a root call pays, outside its window).
#[inline(never)]
#[unsafe(no_mangle)]
pub extern "C" fn wprof_calib_outer(f: extern "C" fn(u64) -> u64, n: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..n {
        acc = acc.wrapping_add(f(i));
    }
    acc
}

/// The address of [`wprof_calib_outer`] in this process.
pub fn outer_address() -> u64 {
    wprof_calib_outer as extern "C" fn(_, _) -> u64 as usize as u64
}

/// The child's side (`wprof __calibrate`). Protocol on stdin/stdout, one line each:
/// it prints `addr A1 .. A6 OUTER`; then for each `run N1 .. N6` it calls function i Ni times, in
/// order, and prints `ns T1 .. T6` (mean ns per call, 0 for Ni = 0); `quit` or EOF ends it.
pub fn child_main() -> i32 {
    // Named as wprof's helpers are: while it times its rounds during a run, a traced thread
    // that waits for its CPU waits for wprof (BPF's sched_switch knows `wprof-…` threads).
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"wprof-calibrate".as_ptr()) };
    let targets = targets();
    let mut out = std::io::stdout().lock();
    let mut addrs: Vec<String> = targets.iter().map(|t| t.address().to_string()).collect();
    addrs.push(outer_address().to_string());
    if writeln!(out, "addr {}", addrs.join(" ")).is_err() || out.flush().is_err() {
        return 1;
    }
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { return 1 };
        let mut words = line.split_whitespace();
        let counts: Vec<u64> = match words.next() {
            Some("run") => words.filter_map(|n| n.parse().ok()).collect(),
            _ => return 0,
        };
        match counts.len() == targets.len() {
            true => {
                let ns: Vec<String> = targets
                    .iter()
                    .zip(&counts)
                    .map(|(t, &n)| match n {
                        0 => "0".to_string(),
                        n => format!("{:.2}", t.time(n)),
                    })
                    .collect();
                if writeln!(out, "ns {}", ns.join(" ")).is_err() || out.flush().is_err() {
                    return 1;
                }
            }
            false => return 2,
        }
    }
    0
}
