//! The per-root-call CSV: one row per root call, with each phase's time and call count inside it.
//!
//! Columns: `start_us,pid,tid,root,total_us`, then `<phase>_us,<phase>_calls` for every phase
//! of the table (by phase id, none skipped). Times are µs with 3 decimals (exact ns), `start_us`
//! relative to the earliest root call of the table. Fields are quoted per RFC 4180 when they
//! need it; lines end with `\n`. A capped table gets no marker line (the CSV stays parseable):
//! the run JSON's `calls.capped`/`calls.total_calls` say so (docs/outputs.md).

use std::fmt::Write as _;

use crate::model::Run;

/// One CSV row per root call.
pub fn calls_csv(run: &Run) -> String {
    let table = &run.calls;
    let mut out = String::with_capacity(64 + table.rows.len() * (32 + table.columns.len() * 16));
    out.push_str("start_us,pid,tid,root,total_us");
    for name in &table.columns {
        out.push(',');
        out.push_str(&field(&format!("{name}_us")));
        out.push(',');
        out.push_str(&field(&format!("{name}_calls")));
    }
    out.push('\n');

    let base = table.rows.iter().map(|r| r.start_ns).min().unwrap_or(0);
    for r in &table.rows {
        let root = table
            .columns
            .get(r.root as usize)
            .or_else(|| run.phases.iter().find(|p| p.id == r.root).map(|p| &p.name))
            .cloned()
            .unwrap_or_else(|| r.root.to_string());
        let _ = write!(
            out,
            "{},{},{},{},{}",
            us(r.start_ns - base),
            r.pid,
            r.tid,
            field(&root),
            us(r.total_ns)
        );
        for i in 0..table.columns.len() {
            let ns = r.phase_ns.get(i).copied().unwrap_or(0);
            let n = r.phase_calls.get(i).copied().unwrap_or(0);
            let _ = write!(out, ",{},{n}", us(ns));
        }
        out.push('\n');
    }
    out
}

/// Nanoseconds as microseconds with exactly 3 decimals.
fn us(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

/// A field quoted per RFC 4180 when it holds a comma, a quote, CR or LF.
fn field(s: &str) -> String {
    if s.contains([',', '"', '\r', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CallRow, CallTable};

    fn run(columns: &[&str], rows: Vec<CallRow>, capped: bool) -> Run {
        Run {
            phases: crate::model::testutil::phases_named(columns),
            calls: CallTable {
                columns: columns.iter().map(|s| s.to_string()).collect(),
                total_calls: rows.len() as u64 + u64::from(capped),
                rows,
                capped,
            },
            ..Default::default()
        }
    }

    fn row(start_ns: u64, tid: u32, root: u32, phase_ns: &[u64], calls: &[u32]) -> CallRow {
        CallRow {
            start_ns,
            pid: 100,
            tid,
            root,
            total_ns: phase_ns[root as usize],
            phase_ns: phase_ns.to_vec(),
            phase_calls: calls.to_vec(),
        }
    }

    #[test]
    fn header_and_rows() {
        let r = run(
            &["write_record", "wal_sync"],
            vec![
                row(5_000_123_456, 101, 0, &[12_345, 999], &[1, 3]),
                row(5_000_200_000, 102, 0, &[7, 0], &[1, 0]),
                row(5_001_000_000, 101, 1, &[0, 1_000_000], &[0, 1]),
            ],
            false,
        );
        assert_eq!(
            calls_csv(&r),
            "start_us,pid,tid,root,total_us,write_record_us,write_record_calls,wal_sync_us,wal_sync_calls\n\
             0.000,100,101,write_record,12.345,12.345,1,0.999,3\n\
             76.544,100,102,write_record,0.007,0.007,1,0.000,0\n\
             876.544,100,101,wal_sync,1000.000,0.000,0,1000.000,1\n"
        );
    }

    #[test]
    fn start_is_relative_to_the_earliest_row() {
        // Rows are in completion order: a later row may have started first.
        let r = run(
            &["a"],
            vec![
                row(2_000, 1, 0, &[10], &[1]),
                row(1_000, 2, 0, &[5_000], &[1]),
            ],
            false,
        );
        let csv = calls_csv(&r);
        let starts: Vec<&str> = csv
            .lines()
            .skip(1)
            .map(|l| l.split(',').next().unwrap())
            .collect();
        assert_eq!(starts, ["1.000", "0.000"]);
    }

    #[test]
    fn names_are_quoted_when_needed() {
        let r = run(
            &["plain", "a,b", "say \"hi\"", "two\nlines"],
            vec![row(0, 1, 1, &[1, 2, 3, 4], &[1, 1, 1, 1])],
            false,
        );
        let csv = calls_csv(&r);
        let header = "start_us,pid,tid,root,total_us,plain_us,plain_calls,\"a,b_us\",\"a,b_calls\",\
                      \"say \"\"hi\"\"_us\",\"say \"\"hi\"\"_calls\",\"two\nlines_us\",\"two\nlines_calls\"\n";
        assert!(csv.starts_with(header), "{csv}");
        assert!(csv.ends_with("0.000,100,1,\"a,b\",0.002,0.001,1,0.002,1,0.003,1,0.004,1\n"));
        assert_eq!(field("x"), "x");
        assert_eq!(field("\""), "\"\"\"\"");
    }

    #[test]
    fn capped_table_stays_plain_csv() {
        let r = run(&["a"], vec![row(0, 1, 0, &[1], &[1])], true);
        let csv = calls_csv(&r);
        assert_eq!(csv.lines().count(), 2);
        assert!(csv.lines().all(|l| !l.starts_with('#')));
    }

    #[test]
    fn empty_table_is_a_header() {
        assert_eq!(
            calls_csv(&Run::default()),
            "start_us,pid,tid,root,total_us\n"
        );
    }

    #[test]
    fn exact_microseconds() {
        assert_eq!(us(0), "0.000");
        assert_eq!(us(1), "0.001");
        assert_eq!(us(1_000), "1.000");
        assert_eq!(us(u64::MAX), "18446744073709551.615");
    }
}
