//! Session: one `attach` or `record` run, stage by stage.
//!
//! The command line becomes a [`TraceConfig`] (config), its target is checked against the
//! host (target), a [`Session`] resolves the profile, loads the BPF side and calibrates
//! (trace), then traces: attach -> (collect -> aggregate, until an end condition) -> detach ->
//! final counts -> the [`Run`] (build_run) -> outputs. The end conditions are Ctrl-C/SIGTERM,
//! `--duration`, the exit of the last traced process and the overhead budget; each writes
//! every output.
//!
//! In: the parsed `attach`/`record` arguments. Out: the outputs asked for, and wprof's exit
//! code.

mod budget;
mod build_run;
mod child;
mod config;
mod costs;
mod duty;
mod estimate;
mod guard;
mod hooks;
mod insitu;
mod instances;
mod late;
mod outputs;
mod overhead;
mod probe_time;
mod probed_threads;
mod processes;
mod progress;
mod recalibrate;
mod sampler_budget;
mod serve;
mod snapshots;
mod stacks;
mod target;
mod trace;
mod trace_loop;
mod untraced_wait;

use anyhow::Result;

use crate::args::{AttachArgs, RecordArgs};
use crate::model::Run;
use crate::resolve::Status;

pub use child::GatedChild;
pub use config::{override_returns, SnapshotPlan, TargetSpec, TraceConfig};
pub use estimate::{estimate, Estimate};
pub use guard::check_loadable as check_unwind_guard;
pub use outputs::write_outputs;
pub use target::{Checked, Target};
pub use trace::{Outcome, Session};
pub use trace_loop::{EndReason, Watch};

/// `wprof attach`: trace running processes until an end condition; exit code 0.
pub fn attach(args: AttachArgs) -> Result<i32> {
    run(TraceConfig::attach(args)?)
}

/// `wprof record`: start a command with probes live before its main runs, trace it to its
/// exit; exit with its status.
pub fn record(args: RecordArgs) -> Result<i32> {
    run(TraceConfig::record(args)?)
}

/// Traces what `config` says and writes its outputs; returns the exit code.
fn run(config: TraceConfig) -> Result<i32> {
    // First: an address that cannot be listened on is an error before anything is attached.
    let server = match &config.serve {
        Some(s) => Some(crate::serve::Server::bind(s.addr)?),
        None => None,
    };
    let checked = Checked::of(&config.target)?;
    let mut session = Session::new(&config, &checked)?;
    if let Some(server) = server {
        eprintln!(
            "wprof: serving Prometheus metrics on http://{}/metrics",
            server.addr()
        );
        session.serve(server);
    }
    let Outcome { run, exit_code } = session.trace(checked.start()?)?;
    warn_losses(&run, config.ring_size);
    write_outputs(&run, &config.outputs, config.quiet)?;
    Ok(exit_code)
}

/// Says on stderr when the ring buffer overflowed: those calls are counted in the tree (its
/// `lost` rows), not timed.
fn warn_losses(run: &Run, ring_bytes: u32) {
    let c = &run.counters;
    if c.lost_spans + c.lost_node_defs == 0 {
        return;
    }
    eprintln!(
        "wprof: warning: {} calls were not timed and {} node definitions were lost: the {} ring \
         buffer was full; lost calls are counted in the tree's 'lost' rows. Raise --ring-size, \
         or use --aggregate kernel for paths this hot",
        c.lost_spans,
        c.lost_node_defs,
        bytes_text(crate::attach::ring_size(ring_bytes)),
    );
}

/// 8388608 -> "8 MiB", 4096 -> "4 KiB".
fn bytes_text(n: u32) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else {
        format!("{} KiB", n >> 10)
    }
}

pub(crate) use crate::attach::monotonic_ns;

/// One-line text of a resolution status.
pub fn status_text(s: &Status) -> String {
    match s {
        Status::Resolved => "resolved".to_string(),
        Status::Unresolved { reason, .. } => format!("unresolved: {reason}"),
        Status::Unsupported(why) => format!("unsupported: {why}"),
    }
}
