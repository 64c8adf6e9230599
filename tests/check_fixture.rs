//! `wprof check` on real fixture runs whose truth is commanded: persist_block = 1 µs self +
//! compress 20 µs + flush 100 µs, so flush_block is 100/121 = 82.6% of persist_block and
//! encode_record (5 µs) is ~2% of a 281 µs write. The true claim's bounds leave room for a busy
//! host, where preempted calls widen the interval (the checker then rightly says INCONCLUSIVE).

mod common;

use std::path::Path;

use common::*;

fn record_fixture(dir: &Path, iterations: &str) -> std::path::PathBuf {
    let json = dir.join(format!("run-{iterations}.json"));
    let out = run(wprof()
        .args(["record", "-q", "--target", "fixture", "--json"])
        .arg(&json)
        .arg("--")
        .arg(fixture("writepath"))
        .args(["--iterations", iterations]));
    assert!(out.status.success(), "{}", text(&out));
    json
}

const HYPOTHESES: &str = r#"
[[hypothesis]]
id = "flush"
claim = "flush is most of persist (truth: 82.6%)"
phase = "flush_block"
of = "persist_block"
share = "50%..100%"

[[hypothesis]]
id = "encode"
claim = "encoding costs 20-30% of a write"
phase = "encode_record"
share = "20%..30%"
"#;

#[test]
fn true_claims_are_supported_false_ones_refuted_and_five_calls_inconclusive() {
    if !bpf_available() {
        return;
    }
    let _g = bpf_lock();
    let dir = tempdir();
    let h = dir.path().join("h.toml");
    std::fs::write(&h, HYPOTHESES).expect("write hypotheses");

    let big = record_fixture(dir.path(), "300");
    let verdicts = dir.path().join("v.json");
    let o = run(wprof()
        .args(["check", "--hypotheses"])
        .arg(&h)
        .arg(&big)
        .arg("--json")
        .arg(&verdicts));
    assert_eq!(
        o.status.code(),
        Some(3),
        "a refuted claim means exit 3: {}",
        text(&o)
    );
    let v = read_json(&verdicts);
    let verdict = |id: &str| {
        v["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["id"] == id)
            .map(|x| x["verdict"].clone())
    };
    assert_eq!(verdict("flush"), Some("SUPPORTED".into()), "{v}");
    assert_eq!(verdict("encode"), Some("REFUTED".into()), "{v}");

    let small = record_fixture(dir.path(), "5");
    let o = run(wprof()
        .args(["check", "--hypotheses"])
        .arg(&h)
        .arg(&small)
        .arg("--json")
        .arg(&verdicts));
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v = read_json(&verdicts);
    assert!(
        v["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["verdict"] == "INCONCLUSIVE"),
        "{v}"
    );
}
