//! wprof: attribute the latency of a program's write path to its phases, from the outside.
//!
//! The layers (docs/design-notes.md, "The layers"; tests/layers.rs keeps them): [`model`] is
//! the ground floor, the data every stage shares (the profile, the run and its JSON). The
//! stages, each a module: [`resolve`] (profile + binary -> probe sites) -> [`attach`] (sites ->
//! live uprobes) -> [`collect`] (ring buffer -> events) -> [`aggregate`] (events -> phase tree)
//! -> [`render`] (run -> text, JSON, folded, SVG, ...). [`session`] runs them for `attach` and
//! `record`; [`commands`] implements `probes`, `targets` and `report`; [`analyze`] holds
//! `compare`, `check` and the tail split, all working on saved runs; [`serve`] is the
//! Prometheus endpoint of `--serve`.

pub mod aggregate;
pub mod analyze;
pub mod args;
pub mod attach;
pub mod cli_docs;
pub mod collect;
pub mod commands;
pub mod doctor;
pub mod error;
pub mod export;
pub mod model;
pub mod output_file;
pub mod privilege;
pub mod probe_cost;
pub mod render;
pub mod resolve;
pub mod serve;
pub mod session;
pub mod stdout;
/// Stack symbolization: BPF stack addresses (user via `/proc/PID/maps` snapshots, kernel via
/// kallsyms) -> frame names for folded stacks, with blazesym.
pub mod symbolize;
#[doc(hidden)]
pub mod testing;
