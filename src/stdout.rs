//! Standard output for a reader that may go away: `wprof ... | head -1` closes the pipe after
//! one line, and Rust's `print!` panics on the broken pipe (Rust ignores SIGPIPE). A run's
//! files must still be written and its exit code must still be the run's, so writes to a closed
//! pipe are dropped quietly instead; every other write error is returned.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write met a closed pipe: nothing more is written.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Standard output that turns a broken pipe into a quiet end of output.
pub struct Stdout;

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if CLOSED.load(Ordering::Relaxed) {
            return Ok(buf.len());
        }
        match io::stdout().lock().write(buf) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                CLOSED.store(true, Ordering::Relaxed);
                Ok(buf.len())
            }
            r => r,
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        if CLOSED.load(Ordering::Relaxed) {
            return Ok(());
        }
        match io::stdout().lock().flush() {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                CLOSED.store(true, Ordering::Relaxed);
                Ok(())
            }
            r => r,
        }
    }
}

/// Writes `text` to standard output and flushes it (a closed pipe is not an error).
pub fn print(text: &str) -> io::Result<()> {
    let mut out = Stdout;
    out.write_all(text.as_bytes())?;
    out.flush()
}
