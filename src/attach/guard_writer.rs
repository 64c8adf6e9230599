//! The unwind guard's writes made by wprof, where the kernel refuses BPF's own
//! (`bpf_probe_write_user` under lockdown): the guard's `_ask` programs send the return slots
//! to write (`GUARD_ASKS`) and wait; this thread writes them into the traced process with
//! `process_vm_writev`, each only over the value the program found there, and answers in
//! `GUARD_DONE`, which ends the wait.
//!
//! The thread runs from the guard's attach until the guard's programs are unloaded (a program
//! still waiting then is answered before it goes). Written by hand: no maintained crate writes
//! another process's memory on a BPF program's request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};
use aya::maps::{HashMap, MapData, RingBuf};
use wprof_common::{GuardAsk, GuardDone, GuardSlot, GUARD_SLOTS};

use super::monotonic_ns;

/// How long the thread sleeps in `poll` between looks at whether it should stop.
const POLL: Duration = Duration::from_millis(20);

/// A request older than this is not carried out: its thread stops waiting after
/// `ASK_DEADLINE_NS` (2 s, probes/ebpf/src/unwind_guard.rs) and goes on, and a slot written
/// after that could belong to a new call by then (the trampoline written into a frame the
/// kernel holds no return instance for would kill the program). Half the deadline, so a write
/// started before it ends well before the thread gives up.
const STALE: Duration = Duration::from_secs(1);

/// The running writer.
pub(super) struct GuardWriter {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl GuardWriter {
    /// Starts serving the requests of `asks`, answering in `done`.
    pub(super) fn start(
        asks: RingBuf<MapData>,
        done: HashMap<MapData, u64, GuardDone>,
    ) -> Result<GuardWriter> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("wprof-guard".into())
            .spawn(move || serve(asks, done, &flag))
            .context("start the unwind guard's writer thread")?;
        Ok(GuardWriter {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread once the requests pending are answered.
    pub(super) fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for GuardWriter {
    fn drop(&mut self) {
        self.stop();
    }
}

fn serve(
    mut asks: RingBuf<MapData>,
    mut done: HashMap<MapData, u64, GuardDone>,
    stop: &AtomicBool,
) {
    use std::os::fd::AsRawFd;
    let fd = asks.as_raw_fd();
    loop {
        while let Some(item) = asks.next() {
            if item.len() < std::mem::size_of::<GuardAsk>() {
                continue;
            }
            // SAFETY: the record is a GuardAsk written by the BPF side (size checked above).
            let ask: GuardAsk = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
            drop(item);
            let n = (ask.n as usize).min(GUARD_SLOTS);
            let written = write_slots((ask.key >> 32) as i32, &ask.slots[..n], ask.id);
            let answer = GuardDone {
                id: ask.id,
                written,
            };
            if let Err(e) = done.insert(&ask.key, &answer, 0) {
                eprintln!("wprof: warning: unwind guard: could not answer a request: {e}");
            }
        }
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, POLL.as_millis() as i32) };
    }
}

/// Writes each slot's value into process `pid` where the slot still holds what the program
/// found there, unless the request (made at `asked`, CLOCK_MONOTONIC ns, as BPF's clock) is
/// [`STALE`]; the number written.
fn write_slots(pid: i32, slots: &[GuardSlot], asked: u64) -> u64 {
    let mut written = 0;
    for s in slots.iter().filter(|s| s.addr != 0) {
        if monotonic_ns().saturating_sub(asked) > STALE.as_nanos() as u64 {
            break;
        }
        if read_u64(pid, s.addr) == Some(s.expect) && write_u64(pid, s.addr, s.value) {
            written += 1;
        }
    }
    written
}

fn read_u64(pid: i32, addr: u64) -> Option<u64> {
    let mut v = 0u64;
    let local = libc::iovec {
        iov_base: (&mut v as *mut u64).cast(),
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: 8,
    };
    // SAFETY: reads 8 bytes of process `pid` into `v`.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    (n == 8).then_some(v)
}

fn write_u64(pid: i32, addr: u64, value: u64) -> bool {
    let local = libc::iovec {
        iov_base: (&value as *const u64).cast_mut().cast(),
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: 8,
    };
    // SAFETY: writes 8 bytes into process `pid`, at a return slot of a frame wprof opened,
    // over the value just read there (see the module's doc).
    let n = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
    n == 8
}
