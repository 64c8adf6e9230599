//! One scrape's figures -> the exposition: protobuf (delimited `MetricFamily` messages, which
//! native histograms need) or, for a client that does not ask for protobuf (curl, an old
//! Prometheus), the text format with each histogram reduced to its count and sum.
//!
//! In: a [`Scrape`]. Out: bytes. Metric names are [`names`]; every series carries the
//! `profile` label, the phase series `phase` (the path, `write_record/persist_block`), `role`
//! when the phase has one and `process` under `--per-pid`.

use std::fmt::Write as _;
use std::time::SystemTime;

use super::proto::{self, Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType, Timestamp};
use super::store::Figures;

/// The metric names.
pub mod names {
    /// Native histogram of call durations per phase path, seconds.
    pub const DURATION: &str = "wprof_phase_duration_seconds";
    /// Completed calls per phase path.
    pub const CALLS: &str = "wprof_phase_calls_total";
    /// Calls left without a return (longjmp, exception) per phase path.
    pub const ABANDONED: &str = "wprof_phase_abandoned_calls_total";
    /// Calls whose span was lost (ring buffer full) per phase path: counted, not timed.
    pub const LOST_CALLS: &str = "wprof_phase_lost_calls_total";
    /// Ring-buffer records lost (spans and node definitions).
    pub const LOST_EVENTS: &str = "wprof_lost_events_total";
    /// Returns that matched no open call.
    pub const UNMATCHED: &str = "wprof_unmatched_returns_total";
    /// The probes' share of the probed threads' CPU time over the last second.
    pub const OVERHEAD: &str = "wprof_probe_overhead_ratio";
    /// Processes folded into `process="other"` by `--serve-max-series`.
    pub const FOLDED: &str = "wprof_serve_folded_processes_total";
    /// `process` label values kept.
    pub const PROCESSES: &str = "wprof_serve_processes";
}

/// One phase path's series.
#[derive(Debug, Clone)]
pub struct PhaseSeries {
    /// The phase path, `/`-joined.
    pub phase: String,
    /// The phase's role, if the profile gives one.
    pub role: Option<String>,
    /// The `process` value (`--per-pid`), None for every process together.
    pub process: Option<String>,
    /// Its calls so far.
    pub figures: Figures,
    /// When it began.
    pub created: SystemTime,
}

/// Per phase path, what BPF could not time.
#[derive(Debug, Clone, Default)]
pub struct PathLosses {
    /// The phase path.
    pub phase: String,
    /// Its role.
    pub role: Option<String>,
    /// Calls left without a return.
    pub abandoned: u64,
    /// Calls lost to a full ring buffer.
    pub lost: u64,
}

/// What one scrape shows.
#[derive(Debug, Clone)]
pub struct Scrape {
    /// The profile's name.
    pub profile: String,
    /// When tracing began (the counters' created time).
    pub started: SystemTime,
    /// The phase series.
    pub series: Vec<PhaseSeries>,
    /// Abandoned and lost calls by path.
    pub losses: Vec<PathLosses>,
    /// Ring-buffer records lost.
    pub lost_events: u64,
    /// Unmatched returns.
    pub unmatched_returns: u64,
    /// The probes' share of the probed threads' CPU time, 0..1.
    pub overhead_ratio: f64,
    /// Processes folded into `other`.
    pub folded_processes: u64,
    /// `process` values kept.
    pub processes: usize,
}

fn timestamp(t: SystemTime) -> Timestamp {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    Timestamp {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

fn pair(name: &str, value: &str) -> LabelPair {
    LabelPair {
        name: name.to_string(),
        value: value.to_string(),
    }
}

impl Scrape {
    fn labels(&self, phase: &str, role: Option<&str>, process: Option<&str>) -> Vec<LabelPair> {
        let mut l = vec![pair("profile", &self.profile), pair("phase", phase)];
        if let Some(r) = role {
            l.push(pair("role", r));
        }
        if let Some(p) = process {
            l.push(pair("process", p));
        }
        l
    }

    fn counter(&self, labels: Vec<LabelPair>, value: u64, created: SystemTime) -> Metric {
        Metric {
            label: labels,
            counter: Some(Counter {
                value: value as f64,
                created_timestamp: Some(timestamp(created)),
            }),
            ..Metric::default()
        }
    }

    /// The metric families, in [`names`] order.
    pub fn families(&self) -> Vec<MetricFamily> {
        let family = |name: &str, help: &str, t: MetricType, metric: Vec<Metric>| MetricFamily {
            name: name.to_string(),
            help: help.to_string(),
            r#type: t as i32,
            metric,
        };
        let series_labels =
            |s: &PhaseSeries| self.labels(&s.phase, s.role.as_deref(), s.process.as_deref());
        let durations = self
            .series
            .iter()
            .map(|s| Metric {
                label: series_labels(s),
                histogram: Some(
                    s.figures
                        .hist
                        .to_proto(s.figures.sum_ns as f64 / 1e9, Some(timestamp(s.created))),
                ),
                ..Metric::default()
            })
            .collect();
        let calls = self
            .series
            .iter()
            .map(|s| self.counter(series_labels(s), s.figures.calls, s.created))
            .collect();
        let loss = |f: fn(&PathLosses) -> u64| {
            self.losses
                .iter()
                .map(|l| {
                    let labels = self.labels(&l.phase, l.role.as_deref(), None);
                    self.counter(labels, f(l), self.started)
                })
                .collect()
        };
        let global = |value: u64| {
            vec![self.counter(vec![pair("profile", &self.profile)], value, self.started)]
        };
        let gauge = |value: f64| {
            vec![Metric {
                label: vec![pair("profile", &self.profile)],
                gauge: Some(Gauge { value }),
                ..Metric::default()
            }]
        };
        vec![
            family(names::DURATION, "Call durations per phase path (native histogram), seconds; corrected for the probes' cost when wprof calibrated.", MetricType::Histogram, durations),
            family(names::CALLS, "Completed calls per phase path.", MetricType::Counter, calls),
            family(names::ABANDONED, "Calls left without a return (longjmp, exception) per phase path.", MetricType::Counter, loss(|l| l.abandoned)),
            family(names::LOST_CALLS, "Calls whose span was lost (ring buffer full) per phase path: counted, not timed.", MetricType::Counter, loss(|l| l.lost)),
            family(names::LOST_EVENTS, "Ring-buffer records lost (spans and node definitions).", MetricType::Counter, global(self.lost_events)),
            family(names::UNMATCHED, "Returns that matched no open call.", MetricType::Counter, global(self.unmatched_returns)),
            family(names::OVERHEAD, "The probes' share of the probed threads' CPU time over the last second (0..1).", MetricType::Gauge, gauge(self.overhead_ratio)),
            family(names::FOLDED, "Processes given process=\"other\" because --serve-max-series was reached.", MetricType::Counter, global(self.folded_processes)),
            family(names::PROCESSES, "process label values kept (--per-pid).", MetricType::Gauge, gauge(self.processes as f64)),
        ]
    }

    /// The delimited protobuf exposition. Families without a series are left out: Prometheus
    /// refuses a `MetricFamily` with no metric.
    pub fn protobuf(&self) -> Vec<u8> {
        let mut families = self.families();
        families.retain(|f| !f.metric.is_empty());
        proto::encode_delimited(&families)
    }

    /// The text exposition (format 0.0.4): histograms as their count and sum only, with the
    /// one `+Inf` bucket the format requires.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for f in self.families() {
            let kind = match f.r#type {
                x if x == MetricType::Counter as i32 => "counter",
                x if x == MetricType::Gauge as i32 => "gauge",
                _ => "histogram",
            };
            let _ = writeln!(out, "# HELP {} {}", f.name, escape(&f.help, false));
            let _ = writeln!(out, "# TYPE {} {kind}", f.name);
            for m in &f.metric {
                let labels = text_labels(&m.label, None);
                if let Some(c) = &m.counter {
                    let _ = writeln!(out, "{}{labels} {}", f.name, c.value);
                } else if let Some(g) = &m.gauge {
                    let _ = writeln!(out, "{}{labels} {}", f.name, g.value);
                } else if let Some(h) = &m.histogram {
                    let inf = text_labels(&m.label, Some("+Inf"));
                    let _ = writeln!(out, "{}_bucket{inf} {}", f.name, h.sample_count);
                    let _ = writeln!(out, "{}_sum{labels} {}", f.name, h.sample_sum);
                    let _ = writeln!(out, "{}_count{labels} {}", f.name, h.sample_count);
                }
            }
        }
        out
    }
}

/// `{a="x",b="y"}` (with `le` last when given), or nothing without labels.
fn text_labels(labels: &[LabelPair], le: Option<&str>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|l| format!("{}=\"{}\"", l.name, escape(&l.value, true)))
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

/// Escapes `\` and newlines (and `"` in label values), as the text format wants.
fn escape(s: &str, quotes: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quotes => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::native::NativeHistogram;

    fn scrape() -> Scrape {
        let mut hist = NativeHistogram::new();
        hist.record_n(100_000, 3);
        Scrape {
            profile: "fixture".into(),
            started: SystemTime::UNIX_EPOCH,
            series: vec![PhaseSeries {
                phase: "write_record/persist_block".into(),
                role: Some("persist".into()),
                process: Some("/srv/a \"b\":5432".into()),
                figures: Figures {
                    calls: 3,
                    sum_ns: 300_000,
                    hist,
                },
                created: SystemTime::UNIX_EPOCH,
            }],
            losses: vec![PathLosses {
                phase: "write_record".into(),
                role: None,
                abandoned: 2,
                lost: 1,
            }],
            lost_events: 4,
            unmatched_returns: 5,
            overhead_ratio: 0.25,
            folded_processes: 0,
            processes: 1,
        }
    }

    #[test]
    fn protobuf_decodes_back_to_the_families() {
        let s = scrape();
        let back = proto::decode_delimited(&s.protobuf()).unwrap();
        assert_eq!(back, s.families());
        let empty = Scrape {
            series: Vec::new(),
            losses: Vec::new(),
            ..s.clone()
        };
        let kept = proto::decode_delimited(&empty.protobuf()).unwrap();
        assert!(kept.iter().all(|f| !f.metric.is_empty()));
        assert_eq!(kept.len(), s.families().len() - 4);
        let names: Vec<&str> = back.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names[..2], [names::DURATION, names::CALLS]);
        let h = back[0].metric[0].histogram.as_ref().unwrap();
        assert_eq!((h.sample_count, h.schema), (3, 3));
        assert!((h.sample_sum - 0.0003).abs() < 1e-12);
        let labels: Vec<(&str, &str)> = back[0].metric[0]
            .label
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str()))
            .collect();
        assert_eq!(
            labels,
            [
                ("profile", "fixture"),
                ("phase", "write_record/persist_block"),
                ("role", "persist"),
                ("process", "/srv/a \"b\":5432")
            ]
        );
        assert_eq!(back[1].metric[0].counter.as_ref().unwrap().value, 3.0);
        let abandoned = &back[2].metric[0];
        assert_eq!(abandoned.counter.as_ref().unwrap().value, 2.0);
        assert_eq!(abandoned.label.len(), 2, "no role, no process");
    }

    #[test]
    fn text_has_counts_sums_and_escaped_labels() {
        let t = scrape().text();
        assert!(
            t.contains("# TYPE wprof_phase_duration_seconds histogram"),
            "{t}"
        );
        assert!(
            t.contains(r#"wprof_phase_duration_seconds_count{profile="fixture",phase="write_record/persist_block",role="persist",process="/srv/a \"b\":5432"} 3"#),
            "{t}"
        );
        assert!(t.contains(r#"le="+Inf"} 3"#), "{t}");
        assert!(
            t.contains("wprof_lost_events_total{profile=\"fixture\"} 4"),
            "{t}"
        );
        assert!(
            t.contains("wprof_probe_overhead_ratio{profile=\"fixture\"} 0.25"),
            "{t}"
        );
    }
}
