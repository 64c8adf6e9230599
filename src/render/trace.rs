//! The Chrome/Perfetto trace: the run's span log in the Trace Event Format (JSON object form).
//!
//! One complete event (`"ph":"X"`) per span, `ts`/`dur` in µs (floats, exact to the ns within
//! f64's precision) with `ts` relative to the earliest span, plus `process_name`/`thread_name`
//! metadata events (`"ph":"M"`) for every pid and tid. Complete events are sorted by
//! (pid, tid, ts, -dur, depth), so a parent comes before its children, and since spans come from
//! a per-thread call stack a child lies within its parent's [ts, ts+dur]. The subset is
//! described by docs/chrome-trace.schema.json (docs/outputs.md).

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::model::Run;

/// The run's spans as a Chrome trace-event JSON document.
pub fn chrome_trace(run: &Run) -> Value {
    let mut spans: Vec<_> = run.spans.spans.iter().collect();
    spans.sort_by_key(|s| {
        (
            s.pid,
            s.tid,
            s.start_ns,
            std::cmp::Reverse(s.dur_ns),
            s.depth,
        )
    });
    let base = spans.iter().map(|s| s.start_ns).min().unwrap_or(0);

    // pid -> its tids, in order.
    let mut threads: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for s in &spans {
        let tids = threads.entry(s.pid).or_default();
        if tids.last() != Some(&s.tid) {
            tids.push(s.tid);
        }
    }

    let program = run
        .provenance
        .command
        .as_ref()
        .and_then(|c| c.first())
        .map(|p| p.rsplit('/').next().unwrap_or(p).to_string())
        .filter(|p| !p.is_empty());

    let mut events = Vec::with_capacity(spans.len() + threads.len() * 3);
    for (&pid, tids) in &threads {
        let pname = match &program {
            Some(p) => p.clone(),
            None => format!("pid {pid}"),
        };
        events.push(meta("process_name", pid, pid, &pname));
        for &tid in tids {
            let tname = if tid == pid {
                format!("main {tid}")
            } else {
                format!("thread {tid}")
            };
            events.push(meta("thread_name", pid, tid, &tname));
        }
    }

    for s in &spans {
        let name = run
            .phases
            .iter()
            .find(|p| p.id == s.phase)
            .map(|p| p.name.clone())
            .or_else(|| run.calls.columns.get(s.phase as usize).cloned())
            .unwrap_or_else(|| format!("phase {}", s.phase));
        let mut args = json!({ "depth": s.depth });
        // A grouped call is named as in flame graphs, `name [key]`, its string in args too.
        let name = match run.spans.key_of(s) {
            Some(key) => {
                args["key"] = json!(key);
                crate::model::keyed_name(&name, key)
            }
            None => name,
        };
        events.push(json!({
            "name": name,
            "cat": "phase",
            "ph": "X",
            "ts": us(s.start_ns - base),
            "dur": us(s.dur_ns),
            "pid": s.pid,
            "tid": s.tid,
            "args": args,
        }));
    }

    json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "wprof_version": run.provenance.wprof_version,
            "profile": run.provenance.profile_name,
            "spans_capped": run.spans.capped,
        },
    })
}

fn meta(what: &str, pid: u32, tid: u32, name: &str) -> Value {
    json!({ "name": what, "ph": "M", "pid": pid, "tid": tid, "args": { "name": name } })
}

/// Nanoseconds as fractional microseconds.
fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{SpanLog, SpanRecord};

    fn span(start_ns: u64, dur_ns: u64, tid: u32, phase: u32, depth: u32) -> SpanRecord {
        SpanRecord {
            start_ns,
            dur_ns,
            pid: 10,
            tid,
            phase,
            depth,
            key: 0,
        }
    }

    /// Two threads; thread 11: root [1000, 11000) with a child [2000, 5000) holding a grandchild
    /// that starts with it; thread 12: a root that starts before thread 11's. Completion order.
    fn sample() -> Run {
        let mut run = Run::default();
        run.provenance.wprof_version = "9.9.9".into();
        run.provenance.profile_name = "kv".into();
        run.provenance.command = Some(vec!["/usr/bin/kvd".into(), "--x".into()]);
        run.phases = crate::model::testutil::phases_named(&["root", "child", "leaf"]);
        run.spans = SpanLog {
            spans: vec![
                span(2_000, 1_500, 11, 2, 2),
                span(2_000, 3_000, 11, 1, 1),
                span(500, 700, 12, 0, 0),
                span(1_000, 10_000, 11, 0, 0),
            ],
            capped: true,
            keys: Vec::new(),
        };
        run
    }

    fn xs(t: &Value) -> Vec<&Value> {
        t["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .collect()
    }

    #[test]
    fn document_shape() {
        let t = chrome_trace(&sample());
        assert_eq!(t["displayTimeUnit"], "ns");
        assert_eq!(
            t["otherData"],
            json!({"wprof_version": "9.9.9", "profile": "kv", "spans_capped": true})
        );
        let metas: Vec<_> = t["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "M")
            .cloned()
            .collect();
        assert_eq!(
            metas,
            vec![
                json!({"name": "process_name", "ph": "M", "pid": 10, "tid": 10, "args": {"name": "kvd"}}),
                json!({"name": "thread_name", "ph": "M", "pid": 10, "tid": 11, "args": {"name": "thread 11"}}),
                json!({"name": "thread_name", "ph": "M", "pid": 10, "tid": 12, "args": {"name": "thread 12"}}),
            ]
        );
    }

    #[test]
    fn complete_events_sorted_parents_first() {
        let t = chrome_trace(&sample());
        let x = xs(&t);
        let got: Vec<(&str, u64, f64, f64, u64)> = x
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap(),
                    e["tid"].as_u64().unwrap(),
                    e["ts"].as_f64().unwrap(),
                    e["dur"].as_f64().unwrap(),
                    e["args"]["depth"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("root", 11, 0.5, 10.0, 0),
                ("child", 11, 1.5, 3.0, 1),
                ("leaf", 11, 1.5, 1.5, 2),
                ("root", 12, 0.0, 0.7, 0),
            ]
        );
        for e in &x {
            assert_eq!(e["cat"], "phase");
            assert_eq!(e["pid"], 10);
        }
    }

    #[test]
    fn children_nest_in_parents() {
        let t = chrome_trace(&sample());
        let x = xs(&t);
        for c in x.iter().filter(|e| e["args"]["depth"] != 0) {
            let d = c["args"]["depth"].as_u64().unwrap();
            let (ts, end) = (
                c["ts"].as_f64().unwrap(),
                c["ts"].as_f64().unwrap() + c["dur"].as_f64().unwrap(),
            );
            assert!(
                x.iter().any(|p| p["tid"] == c["tid"]
                    && p["args"]["depth"].as_u64() == Some(d - 1)
                    && p["ts"].as_f64().unwrap() <= ts
                    && end <= p["ts"].as_f64().unwrap() + p["dur"].as_f64().unwrap()),
                "{c} has no parent"
            );
        }
    }

    #[test]
    fn grouped_calls_are_named_with_their_string() {
        let mut run = sample();
        run.spans.keys = vec!["SELECT ?".into()];
        run.spans.spans[0].key = 1;
        let t = chrome_trace(&run);
        let leaf = xs(&t)
            .into_iter()
            .find(|e| e["args"]["depth"] == 2)
            .unwrap();
        assert_eq!(leaf["name"], "leaf [SELECT ?]");
        assert_eq!(leaf["args"]["key"], "SELECT ?");
        let root = xs(&t).into_iter().find(|e| e["name"] == "root").unwrap();
        assert!(root["args"].get("key").is_none(), "{root}");
        validate(&t).unwrap();
    }

    #[test]
    fn empty_run() {
        let t = chrome_trace(&Run::default());
        assert_eq!(t["traceEvents"], json!([]));
        assert_eq!(t["otherData"]["spans_capped"], false);
    }

    #[test]
    fn unknown_phase_and_no_command() {
        let mut run = Run::default();
        run.spans.spans.push(span(5, 1, 10, 7, 0));
        let t = chrome_trace(&run);
        let ev = t["traceEvents"].as_array().unwrap();
        assert_eq!(ev[0]["args"]["name"], "pid 10");
        assert_eq!(ev[1]["args"]["name"], "main 10");
        assert_eq!(ev[2]["name"], "phase 7");
        assert_eq!(ev[2]["ts"], 0.0);
    }

    /// Validates `doc` against docs/chrome-trace.schema.json.
    fn validate(doc: &Value) -> Result<(), String> {
        let schema = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/chrome-trace.schema.json");
        crate::testing::validate_json_schema(schema, &doc.to_string())
    }

    #[test]
    fn output_validates_against_the_published_schema() {
        for run in [sample(), Run::default()] {
            if let Err(e) = validate(&chrome_trace(&run)) {
                panic!("docs/chrome-trace.schema.json rejects chrome_trace's output:\n{e}");
            }
        }
    }

    #[test]
    fn published_schema_is_strict() {
        let good = chrome_trace(&sample());
        let mut v = good.clone();
        v["traceEvents"][3]["ph"] = "B".into();
        assert!(validate(&v).is_err(), "ph B accepted");
        let mut v = good.clone();
        v["traceEvents"][3].as_object_mut().unwrap().remove("dur");
        assert!(validate(&v).is_err(), "X without dur accepted");
        let mut v = good.clone();
        v["traceEvents"][3]["ts"] = "1".into();
        assert!(validate(&v).is_err(), "string ts accepted");
        let mut v = good.clone();
        v["traceEvents"][0]["extra"] = 1.into();
        assert!(validate(&v).is_err(), "unknown field accepted");
        let mut v = good;
        v["otherData"]
            .as_object_mut()
            .unwrap()
            .remove("spans_capped");
        assert!(
            validate(&v).is_err(),
            "otherData without spans_capped accepted"
        );
    }
}
