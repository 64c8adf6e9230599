//! `--serve ADDR`: the run's figures as Prometheus metrics while it goes on.
//!
//! In: a [`Scrape`] (phase series with their native histograms, counters) that the session
//! builds from its aggregator when a scrape asks. Out: the protobuf exposition (native
//! histograms need it) or the text one, over HTTP ([`Server`]). The per-process series of
//! `--per-pid` are kept bounded by the [`Store`] (expiry, cardinality cap). Everything but the
//! listener thread is plain values, tested without BPF.

pub mod exposition;
pub mod http;
pub mod native;
pub mod proto;
pub mod store;

pub use exposition::{names, PathLosses, PhaseSeries, Scrape};
pub use http::Server;
pub use native::NativeHistogram;
pub use store::{Figures, Store};
