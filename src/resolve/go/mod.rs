//! What resolve reads that only Go binaries have: the runtime's function table and the layout
//! of its goroutine structures.
//!
//! In: a Go executable. Out: its functions when it has no symbol table ([`pclntab`]), and the
//! offsets BPF follows from a thread's `g0` to the goroutine it works for ([`layout`]).

pub mod layout;
pub mod pclntab;

#[cfg(test)]
mod tests;
