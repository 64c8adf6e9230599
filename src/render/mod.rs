//! Render: a run -> text tree, JSON, folded stacks, SVG flamegraph.
//!
//! In: a [`crate::model::Run`] (or its [`crate::model::PhaseTree`]). Out: strings and
//! bytes for the terminal and the output files, one [`Format`] each, written by [`write`].
//! Plain values only: render reads the model and nothing else (the run's JSON codec, which
//! `report`, `compare` and `check` read runs with, is [`crate::model::json`]).

pub mod check;
pub mod compare;
mod diff_flamegraph;
mod flamegraph;
mod folded;
mod footer;
mod format;
mod pprof;
mod sources;
mod stack_flamegraph;
#[cfg(test)]
mod svg_frames;
mod text;
pub mod units;

#[cfg(test)]
pub(crate) mod testutil;

pub mod csv;
pub mod trace;

pub use csv::calls_csv;
pub use diff_flamegraph::differential_svg;
pub use flamegraph::{flamegraph_svg, PHASE_PALETTE};
pub use folded::folded;
pub use format::{write, Format};
pub use stack_flamegraph::{stack_flamegraph_svg, StackKind};
pub use text::{render_tree, TextOptions};
pub use trace::chrome_trace;
