//! Tests of the JSON schema v1: exact round trip, refusals, and docs/json-schema-v1.json.

use serde_json::Value;

use super::*;
use crate::model::testutil::{
    calibrated_run, empty_run, grouped_run, per_pid_run, sample_run, split_run,
};
use crate::model::{PhaseTree, TreeNode};

fn nodes(tree: &PhaseTree) -> Vec<&TreeNode> {
    let mut out = Vec::new();
    for r in &tree.roots {
        r.walk(&mut Vec::new(), &mut |_, n| out.push(n));
    }
    out
}

fn err_text(r: Result<Run>) -> String {
    match r {
        Ok(_) => panic!("accepted"),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn round_trip_is_exact() -> Result<()> {
    for run in [sample_run(), empty_run(), calibrated_run()] {
        let v = to_json(&run);
        for text in [
            serde_json::to_string_pretty(&v)?,
            serde_json::to_string(&v)?,
        ] {
            let back = from_json(&text)?;
            assert_eq!(to_json(&back), v);
            let (a, b) = (nodes(&run.tree), nodes(&back.tree));
            assert_eq!(a.len(), b.len());
            for (x, y) in a.iter().zip(&b) {
                assert!(x.hist == y.hist, "histogram of {} differs", x.name);
                assert_eq!(x.hist.max(), y.hist.max());
                assert_eq!(x.hist.min_nz(), y.hist.min_nz());
            }
        }
    }
    Ok(())
}

#[test]
fn document_shape() {
    let run = sample_run();
    let v = to_json(&run);
    // The call table: one row per root call, 5 fixed values then (ns, calls) per column.
    let calls = &v["calls"];
    assert_eq!(calls["rows"][0].as_array().map(Vec::len), Some(5 + 2 * 7));
    assert_eq!(calls["rows"][1][4], 310_000);
    assert_eq!(
        (calls["total_calls"].as_u64(), calls["capped"].as_bool()),
        (Some(3), Some(true))
    );
    assert_eq!(
        v["spans"]["rows"][0],
        serde_json::json!([1_000_100, 5_000, 4242, 4243, 1, 1])
    );
    let keys = |v: &Value| -> Vec<String> {
        v.as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    let mut top = keys(&v);
    top.sort();
    assert_eq!(
        top,
        [
            "calls",
            "counters",
            "cpu_profile",
            "phases",
            "probe_cost",
            "provenance",
            "schema_version",
            "spans",
            "tree"
        ]
    );
    assert_eq!(v["schema_version"], 1);
    let root = &v["tree"]["roots"][0];
    let mut node_keys = keys(root);
    node_keys.sort();
    assert_eq!(
        node_keys,
        [
            "abandoned",
            "children",
            "count",
            "histogram",
            "lost",
            "max_ns",
            "mean_ns",
            "name",
            "open",
            "p50_ns",
            "p90_ns",
            "p99_ns",
            "phase",
            "role",
            "self_ns",
            "total_ns"
        ]
    );
    let n = &run.tree.roots[0];
    assert_eq!(root["name"], "write_record");
    assert_eq!(root["role"], "insert");
    assert_eq!(root["mean_ns"], n.mean_ns());
    assert_eq!(root["p50_ns"], n.hist.value_at_quantile(0.5));
    assert_eq!(root["p99_ns"], n.hist.value_at_quantile(0.99));
    assert_eq!(root["max_ns"], n.hist.max());
    let h = &root["histogram"];
    assert_eq!(h["unit"], "ns");
    assert_eq!(h["significant_digits"], 2);
    let buckets = h["buckets"].as_array().cloned().unwrap_or_default();
    let total: u64 = buckets.iter().filter_map(|b| b[1].as_u64()).sum();
    assert_eq!(total, n.count);
    assert!(
        buckets
            .windows(2)
            .all(|w| w[0][0].as_u64() < w[1][0].as_u64()),
        "ascending values"
    );
    assert_eq!(v["tree"]["roots"][1]["role"], Value::Null);
    assert_eq!(v["provenance"]["objects"][1]["build_id"], Value::Null);
    assert_eq!(v["provenance"]["command"][0], "kvd");
}

/// docs/json.md tells readers without an HDR library how to get percentiles from the buckets:
/// check that the recipe gives the figures wprof writes.
#[test]
fn documented_percentile_recipe_matches() {
    fn check(node: &Value) {
        let count = node["count"].as_u64().unwrap_or(0);
        let buckets = node["histogram"]["buckets"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for (q, key) in [(0.5, "p50_ns"), (0.9, "p90_ns"), (0.99, "p99_ns")] {
            let target = ((q * count as f64).ceil() as u64).max(1);
            let mut sum = 0;
            let found = buckets.iter().find_map(|b| {
                sum += b[1].as_u64().unwrap_or(0);
                (sum >= target).then(|| b[0].as_u64().unwrap_or(0))
            });
            assert_eq!(
                found.unwrap_or(0),
                node[key].as_u64().unwrap_or(u64::MAX),
                "{} {key}",
                node["name"]
            );
        }
        for c in node["children"].as_array().into_iter().flatten() {
            check(c);
        }
    }
    for r in to_json(&sample_run())["tree"]["roots"]
        .as_array()
        .into_iter()
        .flatten()
    {
        check(r);
    }
}

#[test]
fn other_versions_are_refused_by_version() {
    let mut v = to_json(&sample_run());
    v["schema_version"] = 2.into();
    // Drop a field too: the version must be what the message is about.
    v["counters"] = Value::Null;
    assert_eq!(
        err_text(from_json(&v.to_string())),
        "RUN.json has schema_version 2; this wprof reads version 1 — upgrade wprof"
    );
    v["schema_version"] = 0.into();
    assert!(err_text(from_json(&v.to_string())).contains("schema_version 0"));
    v["schema_version"] = "1".into();
    assert!(err_text(from_json(&v.to_string())).contains("not an integer"));
    assert!(err_text(from_json("{}")).contains("no schema_version"));
}

#[test]
fn malformed_json_says_where() {
    let e = err_text(from_json("{\n  \"schema_version\": 1,\n  oops\n}"));
    assert!(
        e.starts_with("malformed JSON") && e.contains("line 3 column 3"),
        "{e}"
    );
    let mut v = to_json(&sample_run());
    if let Some(o) = v.as_object_mut() {
        o.remove("counters");
    }
    let e = err_text(from_json(
        &serde_json::to_string_pretty(&v).unwrap_or_default(),
    ));
    assert!(
        e.contains("missing field `counters`") && e.contains("line"),
        "{e}"
    );
}

#[test]
fn bad_histograms_name_their_node() {
    let mut v = to_json(&sample_run());
    v["tree"]["roots"][0]["children"][0]["histogram"]["unit"] = "us".into();
    let e = err_text(from_json(&v.to_string()));
    assert!(
        e.contains("node write_record > wal_append") && e.contains("\"us\""),
        "{e}"
    );
    let mut v = to_json(&sample_run());
    v["tree"]["roots"][1]["histogram"]["buckets"][0][0] = u64::MAX.into();
    let e = err_text(from_json(&v.to_string()));
    assert!(
        e.contains("node vacuum_page") && e.contains("outside"),
        "{e}"
    );
}

#[test]
fn derived_node_fields_are_optional_on_reading() -> Result<()> {
    let mut v = to_json(&sample_run());
    if let Some(o) = v["tree"]["roots"][0].as_object_mut() {
        for k in ["mean_ns", "p50_ns", "p90_ns", "p99_ns", "max_ns"] {
            o.remove(k);
        }
    }
    let back = from_json(&v.to_string())?;
    assert_eq!(to_json(&back), to_json(&sample_run()));
    Ok(())
}

/// Validates `doc` against docs/json-schema-v1.json; the error list on failure.
fn validate(doc: &Value) -> std::result::Result<(), String> {
    let schema = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/json-schema-v1.json");
    crate::testing::validate_json_schema(schema, &doc.to_string())
}

#[test]
fn output_validates_against_the_published_schema() {
    for run in [sample_run(), empty_run(), calibrated_run()] {
        if let Err(e) = validate(&to_json(&run)) {
            panic!("docs/json-schema-v1.json rejects to_json's output:\n{e}");
        }
    }
}

#[test]
fn in_situ_checks_round_trip_and_validate() -> Result<()> {
    let mut run = sample_run();
    let check = crate::model::InSituCheck {
        phase: 0,
        name: "write_record".into(),
        path: vec!["write_record".into()],
        light_calls: 400,
        kept_out: 450,
        light_mean_ns: 4_200.0,
        full_calls: 1000,
        full_mean_ns: 16_200.0,
        calibrated_ns: 7_300.0,
        in_situ_ns: 12_000.0,
        error_ns: 40.0,
        factor: 1.65,
        excess_per_hit_ns: 240.0,
        children_fitted: Some(0.69),
    };
    run.in_situ = vec![
        check.clone(),
        crate::model::InSituCheck {
            children_fitted: None,
            ..check
        },
    ];
    let v = to_json(&run);
    assert_eq!(v["in_situ"][0]["children_fitted"], 0.69);
    assert_eq!(v["in_situ"][0]["excess_per_hit_ns"], 240.0);
    assert!(v["in_situ"][1].get("children_fitted").is_none());
    if let Err(e) = validate(&v) {
        panic!("docs/json-schema-v1.json rejects in_situ checks:\n{e}");
    }
    assert_eq!(from_json(&v.to_string())?.in_situ, run.in_situ);
    Ok(())
}

#[test]
fn a_progress_reading_round_trips_and_validates() -> Result<()> {
    let mut run = sample_run();
    let reading = crate::model::ProgressCheck {
        live_per_cpu_s: 477_376.7,
        paused_per_cpu_s: 1_147_248.4,
        slowdown_pct: 58.4,
        live_windows: 2,
        paused_windows: 1,
        live_hits: 1_200_000,
        excess_ns_per_hit: Some(512.5),
        excess_by_root: vec![crate::model::RootExcess {
            root: "write_record".to_string(),
            ns_per_hit: 512.5,
            hits: 1_200_000,
        }],
    };
    run.probe_cost.progress = Some(reading.clone());
    let v = to_json(&run);
    assert_eq!(v["probe_cost"]["progress"]["slowdown_pct"], 58.4);
    assert_eq!(v["probe_cost"]["progress"]["excess_ns_per_hit"], 512.5);
    assert_eq!(
        v["probe_cost"]["progress"]["excess_by_root"][0]["root"],
        "write_record"
    );
    if let Err(e) = validate(&v) {
        panic!("docs/json-schema-v1.json rejects a progress reading:\n{e}");
    }
    assert_eq!(
        from_json(&v.to_string())?.probe_cost.progress,
        Some(reading)
    );
    // A slowdown over 100% is no share.
    let mut bad = v.clone();
    bad["probe_cost"]["progress"]["slowdown_pct"] = serde_json::json!(140.0);
    assert!(validate(&bad).is_err());
    Ok(())
}

#[test]
fn published_schema_rejects_what_wprof_refuses() {
    let good = to_json(&sample_run());
    let mut v = good.clone();
    v["schema_version"] = 2.into();
    assert!(validate(&v).is_err(), "schema_version 2 accepted");
    let mut v = good.clone();
    if let Some(o) = v["tree"]["roots"][0]["children"][0].as_object_mut() {
        o.remove("histogram");
    }
    let e = validate(&v).err().unwrap_or_default();
    assert!(
        e.contains("/tree/roots/0/children/0") && e.contains("histogram"),
        "{e}"
    );
    let mut v = good;
    v["tree"]["roots"][0]["histogram"]["buckets"][0] = serde_json::json!([1, 2, 3]);
    assert!(validate(&v).is_err(), "a 3-element bucket accepted");
}

#[test]
fn split_trees_round_trip_and_validate() -> Result<()> {
    let run = split_run();
    let v = to_json(&run);
    let split = &v["split"];
    assert_eq!(split["phase"], "persist_block");
    assert_eq!(split["with"]["roots"][0]["name"], "write_record");
    assert_eq!(split["with"]["roots"][0]["count"], 250);
    assert_eq!(split["without"]["roots"][0]["count"], 750);
    assert_eq!(split["without"]["roots"][1]["name"], "vacuum_page");
    assert_eq!(
        (&split["unattributed_spans"], &split["oversized_roots"]),
        (&4.into(), &0.into())
    );
    // The merged tree stays where it was.
    assert_eq!(v["tree"]["roots"][0]["count"], 1000);
    let back = from_json(&v.to_string())?;
    assert_eq!(to_json(&back), v);
    let (a, b) = (run.split.as_ref().unwrap(), back.split.as_ref().unwrap());
    for (x, y) in nodes(&a.with).iter().zip(nodes(&b.with)) {
        assert!(x.hist == y.hist, "histogram of {} differs", x.name);
    }
    if let Err(e) = validate(&v) {
        panic!("docs/json-schema-v1.json rejects a --split-by run:\n{e}");
    }
    // A run without --split-by has no `split`; one with an unknown field in it is refused.
    assert!(to_json(&sample_run()).get("split").is_none());
    let mut bad = v.clone();
    bad["split"]["with"] = serde_json::json!({"roots": 3});
    assert!(validate(&bad).is_err());
    assert!(from_json(&bad.to_string()).is_err());
    Ok(())
}

#[test]
fn per_pid_trees_units_and_forks_round_trip_and_validate() -> Result<()> {
    let run = per_pid_run();
    let v = to_json(&run);
    assert_eq!(v["processes"][1]["parent"], 4242);
    assert_eq!(
        v["processes"][1]["tree"]["roots"][0]["children"][0]["units"]["total"],
        1000
    );
    assert_eq!(v["phases"][1]["outside_under"], 3);
    assert!(
        v["phases"][0].get("outside_under").is_none(),
        "0 is left out"
    );
    let back = from_json(&v.to_string())?;
    assert_eq!(to_json(&back), v);
    if let Err(e) = validate(&v) {
        panic!("docs/json-schema-v1.json rejects a --per-pid run:\n{e}");
    }
    Ok(())
}

#[test]
fn grouped_nodes_round_trip_validate_and_show_their_string() -> Result<()> {
    let run = grouped_run();
    let v = to_json(&run);
    if let Err(e) = validate(&v) {
        panic!("docs/json-schema-v1.json rejects a keyed node:\n{e}");
    }
    let back = from_json(&serde_json::to_string(&v)?)?;
    assert_eq!(to_json(&back), v);
    let kids = &back.tree.roots[0].children;
    assert_eq!(kids[0].key, run.tree.roots[0].children[0].key);
    assert!(v.to_string().contains(&"x, ".repeat(40)));
    // Ungrouped nodes have no key field at all.
    assert!(v["tree"]["roots"][0].get("key").is_none());
    // The span log keeps a grouped call's string: a 7th column into `spans.keys`.
    assert_eq!(back.spans, run.spans);
    assert_eq!(v["spans"]["rows"][0].as_array().unwrap().len(), 7);
    assert_eq!(v["spans"]["rows"][1].as_array().unwrap().len(), 6);
    for (row, want) in [
        ("[1,2,3,4,0,0,2]", "key 2 names none of the 1 spans.keys"),
        ("[1,2,3,4,0,0,0]", "key 0 names none"),
        ("[1,2,3,4,0]", "5 columns, not 6 or 7"),
    ] {
        let mut bad = v.clone();
        bad["spans"]["rows"][0] = serde_json::from_str(row)?;
        let e = err_text(from_json(&bad.to_string()));
        assert!(e.contains(want), "{row}: {e}");
    }
    Ok(())
}

#[test]
fn live_windows_round_trip_and_validate() -> Result<()> {
    let mut run = sample_run();
    run.provenance.probes_live_fraction = Some(0.25);
    run.provenance.live_windows = vec![[1_795_854_394_000_000_000, 1_795_854_395_000_000_000]];
    let v = to_json(&run);
    assert_eq!(
        v["provenance"]["live_windows"][0][1],
        1_795_854_395_000_000_000u64
    );
    if let Err(e) = validate(&v) {
        panic!("docs/json-schema-v1.json rejects live_windows:\n{e}");
    }
    assert_eq!(
        from_json(&v.to_string())?.provenance.live_windows,
        run.provenance.live_windows
    );
    // Always live: no field.
    run.provenance.live_windows.clear();
    assert!(to_json(&run)["provenance"].get("live_windows").is_none());
    Ok(())
}
