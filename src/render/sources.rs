//! The header of a merged run's text tree (`wprof merge`): one row per run it was made from.
//!
//! In: a [`Run`]. Out: nothing for a run of one host; for a merged run a title and a table of
//! its source runs (file, host, kernel, start, duration, pids, lost spans), so that a
//! fleet's tree always says whose calls it adds up.

use crate::model::Run;

/// The header, ending in a blank line; empty when the run is not a merge.
pub(super) fn header(run: &Run) -> String {
    let sources = &run.provenance.sources;
    if sources.is_empty() {
        return String::new();
    }
    let mut table = vec![[
        "file",
        "host",
        "kernel",
        "started (UTC)",
        "duration",
        "pids",
        "lost spans",
    ]
    .map(str::to_string)];
    for s in sources {
        let p = &s.provenance;
        let pids: Vec<String> = p.pids.iter().map(u32::to_string).collect();
        table.push([
            s.file.clone(),
            p.host.clone(),
            p.kernel.clone(),
            utc(p.started_unix),
            format!("{:.1} s", p.duration_s),
            pids.join(" "),
            s.counters.lost_spans.to_string(),
        ]);
    }
    let mut widths = [0usize; 7];
    for row in &table {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = format!(
        "merged run of {} ({} runs; counts, times and histograms added):\n",
        run.provenance.host,
        sources.len()
    );
    for row in &table {
        let mut line = String::new();
        for (cell, w) in row.iter().zip(widths) {
            line.push_str(&format!("  {cell:<w$}"));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.push('\n');
    out
}

/// Seconds since the epoch as `YYYY-MM-DD HH:MM:SS` (UTC).
fn utc(unix: u64) -> String {
    let (days, secs) = (unix / 86_400, unix % 86_400);
    // Howard Hinnant's civil_from_days, for days since 1970-01-01 (no negative dates here).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SourceRun;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(951_827_696), "2000-02-29 12:34:56");
        assert_eq!(utc(1_790_000_000), "2026-09-21 14:13:20");
    }

    #[test]
    fn a_merged_run_lists_its_hosts_and_a_single_run_has_no_header() {
        let mut run = crate::model::testutil::sample_run();
        assert_eq!(header(&run), "");
        let source = |file: &str, host: &str| {
            let mut s = SourceRun {
                file: file.into(),
                provenance: run.provenance.clone(),
                ..Default::default()
            };
            s.provenance.host = host.into();
            s
        };
        let sources = vec![source("a.json", "seg-a"), source("b.json", "seg-bb")];
        run.provenance.sources = sources;
        run.provenance.host = "2 hosts: seg-a, seg-bb".into();
        run.provenance.sources[1].counters.lost_spans = 7;
        assert_eq!(
            header(&run),
            "merged run of 2 hosts: seg-a, seg-bb (2 runs; counts, times and histograms added):\n  \
             file    host    kernel            started (UTC)        duration  pids  lost spans\n  \
             a.json  seg-a   6.8.0-45-generic  2026-09-21 14:13:20  30.0 s    4242  0\n  \
             b.json  seg-bb  6.8.0-45-generic  2026-09-21 14:13:20  30.0 s    4242  7\n\n"
        );
    }
}
