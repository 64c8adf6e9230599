//! `--interval`: a JSON line of cumulative per-node figures every interval, so a run of hours
//! can be watched (`tail -f`) and cut without waiting for its end.
//!
//! In: the aggregator at each tick of the collect loop. Out: JSON lines appended to the
//! `--snapshots` file.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::aggregate::Aggregator;

/// Writes snapshots of an aggregator at a fixed interval.
pub struct Snapshots {
    out: BufWriter<File>,
    every: Duration,
    start: Instant,
    next: Instant,
    names: Vec<String>,
}

impl Snapshots {
    /// Creates (truncates) `path`; the first snapshot is due one interval from now.
    pub fn create(path: &Path, every: Duration, names: Vec<String>) -> Result<Snapshots> {
        let f = crate::output_file::create_streaming(path)?;
        let start = Instant::now();
        Ok(Snapshots {
            out: BufWriter::new(f),
            every,
            start,
            next: start + every,
            names,
        })
    }

    /// Writes a snapshot if one is due.
    pub fn tick(&mut self, agg: &Aggregator) -> Result<()> {
        if Instant::now() < self.next {
            return Ok(());
        }
        self.next += self.every;
        self.write(agg)
    }

    /// Writes a snapshot now (also called once at the end of the run).
    pub fn write(&mut self, agg: &Aggregator) -> Result<()> {
        let nodes: Vec<serde_json::Value> = agg
            .snapshot(&self.names)
            .into_iter()
            .map(|n| {
                serde_json::json!({
                    "path": n.path, "count": n.count, "total_ns": n.total_ns,
                    "p50_ns": n.p50_ns, "p99_ns": n.p99_ns,
                })
            })
            .collect();
        let line = serde_json::json!({
            "t_s": self.start.elapsed().as_secs_f64(),
            "events": agg.events(),
            "skipped_spans": agg.skipped(),
            "nodes": nodes,
        });
        serde_json::to_writer(&mut self.out, &line)?;
        writeln!(self.out)?;
        self.out.flush().context("write a snapshot")
    }
}
