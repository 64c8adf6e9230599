//! Aggregate: span events -> the phase tree.
//!
//! In: [`wprof_common::Event`]s (node definitions and completed spans) as collect decodes them,
//! then the end-of-run counters read from BPF maps. Out: a [`PhaseTree`] — per tree node the
//! call count, total and self time, an HDR histogram of durations, and what could not be
//! measured (lost, abandoned, still open); in per-event mode also a [`CallTable`] (one row per
//! root call) and a capped [`SpanLog`]; with `--split-by` the tree twice more, over the root
//! calls that contained a phase and over the others ([`SplitTrees`]). CPU samples and off-CPU
//! records fold into stacks under their phase paths ([`stacks`]). Runs of many hosts merge into
//! one ([`merge`], `wprof merge`): the same addition, over finished runs. Plain values only: nothing
//! here touches BPF, so it is tested without root.

pub mod aftermath;
mod build;
mod calls;

pub mod insitu;
pub mod insitu_cuts;
pub mod merge;
pub mod preempted;
pub mod sampled;
pub mod split;
pub mod stacks;
mod tree;

pub use calls::{DEFAULT_MAX_CALLS, DEFAULT_MAX_SPANS};

/// A map looked up for every span, keyed by thread (stack keys, process and thread ids):
/// foldhash instead of the standard SipHash, which was ~16% of the reader's CPU on db_bench
/// (benchmarks §43). Thread ids need no defence against chosen keys; tree nodes, already
/// hashes, use `tree::NodeMap`.
pub(crate) type ThreadMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
pub use tree::{Aggregator, EndCounters, LiveNode};
