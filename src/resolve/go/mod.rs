//! What resolve reads that only Go binaries have: the runtime's function table, the layout of
//! its goroutine structures, and the stack check that opens a Go function.
//!
//! In: a Go executable. Out: its functions when it has no symbol table ([`pclntab`]), the
//! offsets BPF follows from a thread's `g0` to the goroutine it works for ([`layout`]), and a
//! function's entry site past its stack check ([`prologue`]).

pub mod layout;
pub mod pclntab;
pub mod prologue;

#[cfg(test)]
mod tests;
