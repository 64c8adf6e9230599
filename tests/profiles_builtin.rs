//! The built-in attach profiles: every one parses, and the engine profiles (pax, ao, aoco)
//! say what they need and line up by role. No BPF needed: `wprof probes` only resolves.

mod common;

use std::collections::BTreeSet;

use common::*;
use wprof::model::profile::{Profile, BUILTIN};

#[test]
fn every_builtin_profile_parses_and_is_listed() {
    let out = common::run(wprof().arg("targets"));
    assert!(out.status.success(), "{}", text(&out));
    let listed = String::from_utf8_lossy(&out.stdout);
    for (name, text) in BUILTIN {
        let p = Profile::parse(text, &format!("builtin:{name}"))
            .unwrap_or_else(|e| panic!("built-in profile {name}: {e}"));
        assert_eq!(&p.name, name);
        assert!(!p.phases.is_empty(), "{name}: no phases");
        assert!(!p.description.is_empty(), "{name}: no description");
        assert!(
            listed
                .lines()
                .any(|l| l.split_whitespace().next() == Some(*name)),
            "`wprof targets` does not list {name}:\n{listed}"
        );
    }
}

fn load(name: &str) -> Profile {
    Profile::load(name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn roles(p: &Profile) -> BTreeSet<String> {
    p.phases.iter().filter_map(|ph| ph.role.clone()).collect()
}

#[test]
fn pax_profile_uses_pax_so_names() {
    let p = load("pax");
    assert_eq!(p.object, "pax.so");
    let sym = |name: &str| {
        p.phases
            .iter()
            .find(|ph| ph.name == name)
            .unwrap_or_else(|| panic!("no phase {name}"))
            .symbol
            .clone()
            .unwrap_or_default()
    };
    // The exact mangled names of Cloudberry's pax.so (facts.md).
    assert_eq!(
        sym("tuple_insert"),
        "_ZN3pax17CCPaxAccessMethod11TupleInsertEP12RelationDataP14TupleTableSlotjiP19BulkInsertStateData"
    );
    assert_eq!(
        sym("aux_insert"),
        "_ZN4cbdb31InsertMicroPartitionPlaceHolderEji"
    );
    assert_eq!(sym("xlog_pax_insert"), "XLogPaxInsert");
    assert!(
        p.phases.iter().all(|ph| ph.role.is_some()),
        "a pax phase without a role"
    );
    let fdatasync = p
        .phases
        .iter()
        .find(|ph| ph.name == "fdatasync")
        .expect("fdatasync");
    assert_eq!(fdatasync.syscall.as_deref(), Some("fdatasync"));
    assert_eq!(fdatasync.role.as_deref(), Some("io"));
}

#[test]
fn ao_and_aoco_share_pax_roles_and_say_they_need_cloudberry() {
    let pax = roles(&load("pax"));
    for name in ["ao", "aoco"] {
        let p = load(name);
        assert_eq!(p.object, "exe", "{name}");
        assert!(
            p.description.contains("Cloudberry") && p.description.contains("stock PostgreSQL"),
            "{name}: {}",
            p.description
        );
        let r = roles(&p);
        for role in [
            "insert", "file", "metadata", "encode", "compress", "wal", "io", "commit",
        ] {
            assert!(
                r.contains(role) && pax.contains(role),
                "{name}/pax: role {role}"
            );
        }
        let required: BTreeSet<&str> = p
            .phases
            .iter()
            .filter(|ph| !ph.optional)
            .filter_map(|ph| ph.symbol.as_deref())
            .collect();
        assert!(required.contains("xlog_ao_insert"), "{name}: {required:?}");
    }
}

/// Every pax.so phase of the profile has a ground-truth clock in the fixture (its names are
/// the profile's), so tests/pax_fixture.rs can compare them one to one.
#[test]
fn pax_fixture_times_every_pax_so_phase() {
    let src = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pax/pax.cc"),
    )
    .expect("read pax.cc");
    let start = src.find("kClockNames[kClocks] = {").expect("kClockNames");
    let end = start + src[start..].find("};").expect("end of kClockNames");
    let clocks: BTreeSet<&str> = src[start..end].split('"').skip(1).step_by(2).collect();
    let p = load("pax");
    for ph in &p.phases {
        let in_server = ph.object.as_deref() == Some("exe");
        assert!(
            in_server || clocks.contains(ph.name.as_str()),
            "phase {} has no clock in the fixture ({clocks:?})",
            ph.name
        );
    }
}

#[test]
fn pax_profile_resolves_in_the_fixture() {
    let out = common::run(
        wprof()
            .args(["probes", "--target", "pax", "--binary"])
            .arg(fixture("pax-driver")),
    );
    // The server-side phases are optional and absent from the fixture: exit 0.
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mode = common::cxx_default_return_mode();
    for phase in [
        "tuple_insert",
        "aux_insert",
        "aux_update_exec",
        "write_file_footer",
        "compress",
    ] {
        let line = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(phase))
            .unwrap_or_else(|| panic!("no row for {phase}:\n{stdout}"));
        assert!(
            line.contains("pax.so") && line.contains(mode) && line.ends_with("resolved"),
            "{line}"
        );
    }
    let pb = stdout
        .lines()
        .find(|l| l.starts_with("protobuf_serialize"))
        .expect("protobuf_serialize row");
    assert!(
        pb.contains("libprotobuf") && pb.ends_with("resolved"),
        "{pb}"
    );
}

#[test]
fn aoco_against_stock_postgres_is_exit_4_naming_the_missing_functions() {
    let postgres = std::path::Path::new("/usr/lib/postgresql/15/bin/postgres");
    if !wprof::testing::require(postgres.exists(), "PostgreSQL 15 (apt postgresql-15)") {
        return;
    }
    for (target, missing) in [
        ("aoco", ["aocs_insert_values", "xlog_ao_insert"]),
        ("ao", ["appendonly_insert", "xlog_ao_insert"]),
    ] {
        let out = common::run(
            wprof()
                .args(["probes", "--target", target, "--binary"])
                .arg(postgres),
        );
        assert_eq!(out.status.code(), Some(4), "{target}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        for m in missing {
            assert!(stderr.contains(m), "{target}: {m} not named:\n{stderr}");
        }
        // The shared server phases do resolve in stock PostgreSQL.
        let stdout = String::from_utf8_lossy(&out.stdout);
        let heap = stdout
            .lines()
            .find(|l| l.starts_with("heap_insert"))
            .expect("heap_insert row");
        assert!(heap.ends_with("resolved"), "{heap}");
    }
}

/// Each symbol phase of profile `name` in object `object` (the profile's default) against a
/// real program's function names (demangled, no parameters, no Rust hash): a required phase
/// names exactly one of them (or, with all_matches, at least one); an optional one at most
/// one unless all_matches. Returns the phases that matched nothing.
fn unmatched_in(name: &str, real: &[&str]) -> Vec<String> {
    let p = load(name);
    let mut missing = Vec::new();
    for ph in p.phases.iter().filter(|ph| ph.object.is_none()) {
        let Some(pattern) = ph.symbol.as_deref() else {
            continue;
        };
        let hits: Vec<&&str> = real
            .iter()
            .filter(|n| wprof::resolve::matcher::names(pattern, n).unwrap())
            .collect();
        assert!(
            hits.len() <= 1 || ph.all_matches,
            "{name}: phase {} ({pattern}) matches {hits:?}",
            ph.name
        );
        if hits.is_empty() {
            assert!(
                ph.optional,
                "{name}: required phase {} ({pattern}) matches nothing",
                ph.name
            );
            missing.push(ph.name.clone());
        }
    }
    missing
}

#[test]
fn pg_trickle_profile_matches_the_released_names_and_older_layouts() {
    // pg_trickle v0.20.0's .symtab (legacy Rust mangling), as ../shared/facts.md lists it.
    let released = [
        "refresh_stream_table_wrapper",
        "pg_trickle::refresh::execute_differential_refresh",
        "pg_trickle::refresh::execute_full_refresh",
        "pg_trickle::refresh::build_merge_sql",
        "pg_trickle::refresh::cleanup_change_buffers_by_frontier",
        "pg_trickle::refresh::drain_pending_cleanups::{{closure}}",
        "pg_trickle::dvm::generate_delta_query",
        "pg_trickle::dvm::generate_delta_query_cached",
        "pg_trickle::cdc::count_pending_changes",
    ];
    // determine_refresh_action is inlined in release builds: it has no symbol.
    assert_eq!(unmatched_in("pg-trickle", &released), ["determine_action"]);
    // The module layout of earlier releases (refresh::merge, refresh::codegen) still matches.
    let older = [
        "pg_trickle::refresh::merge::execute_differential_refresh",
        "pg_trickle::refresh::codegen::build_merge_sql",
        "pg_trickle::refresh::codegen::cleanup_change_buffers_by_frontier",
        "pg_trickle::refresh::orchestrator::determine_refresh_action",
    ];
    let missing = unmatched_in("pg-trickle", &older);
    for found in [
        "differential",
        "build_merge_sql",
        "cleanup_by_frontier",
        "determine_action",
    ] {
        assert!(!missing.iter().any(|m| m == found), "{found}: {missing:?}");
    }
}

#[test]
fn tsdb_profile_matches_the_real_storage_library() {
    let p = load("tsdb");
    // The real TSDB (vobbilis/mytsdb) exports its write path from this library; the fixture
    // (tests/fixtures/tsdb) is built under the same name.
    assert_eq!(p.object, "libtsdb_storage_impl.so");
    let real = [
        "tsdb::storage::StorageImpl::write",
        "tsdb::storage::ShardedWAL::log",
        "tsdb::storage::ShardedIndex::add_series",
        "tsdb::storage::CacheHierarchy::put",
        "tsdb::storage::Series::seal_block",
        "tsdb::storage::BlockManager::seal_and_persist_block",
        "tsdb::storage::Series::append",
        "tsdb::storage::Series::Series",
        "tsdb::storage::WriteAheadLog::log",
        "tsdb::storage::AsyncWALShard::log",
        "tsdb::storage::StorageImpl::write_to_block",
    ];
    assert!(unmatched_in("tsdb", &real).is_empty());
}

/// The `parquet-go` profile's required phases and the lakerunner methods they name
/// (facts.md: `github.com/cardinalhq/lakerunner/internal/parquetwriter`).
const LAKERUNNER_METHODS: [(&str, &str); 7] = [
    ("arrow_write_batch", "(*ArrowBackend).WriteBatch"),
    ("arrow_flush", "(*ArrowBackend).flushRecordBatch"),
    ("arrow_close", "(*ArrowBackend).Close"),
    ("pqgo_write_batch", "(*GoParquetBackend).WriteBatch"),
    ("pqgo_buffer_file", "(*GoParquetBackend).startNewBufferFile"),
    ("pqgo_close", "(*GoParquetBackend).Close"),
    ("pqgo_stream", "(*GoParquetBackend).streamBinaryToParquet"),
];

#[test]
fn parquet_go_profile_matches_the_real_lakerunner_writer() {
    // lakerunner's internal/parquetwriter and the libraries under it, as ../shared/facts.md
    // lists them (Go names as a panic prints them; what wprof matches on), with the runtime's
    // functions every Go 1.2x binary has.
    let real = [
        "github.com/cardinalhq/lakerunner/internal/parquetwriter.(*ArrowBackend).WriteBatch",
        "github.com/cardinalhq/lakerunner/internal/parquetwriter.(*ArrowBackend).flushRecordBatch",
        "github.com/cardinalhq/lakerunner/internal/parquetwriter.(*ArrowBackend).Close",
        "github.com/cardinalhq/lakerunner/internal/parquetwriter.(*GoParquetBackend).WriteBatch",
        "github.com/cardinalhq/lakerunner/internal/parquetwriter.(*GoParquetBackend).Close",
        "github.com/cardinalhq/lakerunner/internal/parquetwriter.(*GoParquetBackend).streamBinaryToParquet",
        "github.com/cardinalhq/lakerunner/internal/parquetwriter.(*GoParquetBackend).startNewBufferFile",
        "github.com/apache/arrow-go/v18/parquet/pqarrow.(*FileWriter).Write",
        "github.com/parquet-go/parquet-go.(*GenericWriter[go.shape.map[string]interface {}]).Write",
        // The per-type wrapper Go inlines into its callers: not the one to probe.
        "github.com/parquet-go/parquet-go.(*GenericWriter[map[string]interface {}]).Write",
        "runtime.gcAssistAlloc",
        "runtime.stopTheWorldWithSema",
        "runtime.startTheWorldWithSema",
    ];
    assert!(unmatched_in("parquet-go", &real).is_empty());
    let p = load("parquet-go");
    let phase = |name: &str| {
        p.phases
            .iter()
            .find(|ph| ph.name == name)
            .unwrap_or_else(|| panic!("no phase {name}"))
    };
    let hits = |name: &str| -> Vec<&str> {
        let pattern = phase(name).symbol.as_deref().expect("a symbol phase");
        real.iter()
            .copied()
            .filter(|n| wprof::resolve::matcher::names(pattern, n).unwrap())
            .collect()
    };
    for (name, method) in LAKERUNNER_METHODS {
        assert!(
            !phase(name).optional,
            "{name} is lakerunner's own: required"
        );
        assert_eq!(
            hits(name),
            [format!(
                "github.com/cardinalhq/lakerunner/internal/parquetwriter.{method}"
            )],
            "{name}"
        );
    }
    // The shaped body, not the inlined wrapper.
    assert_eq!(
        hits("pqgo_generic_write"),
        ["github.com/parquet-go/parquet-go.(*GenericWriter[go.shape.map[string]interface {}]).Write"]
    );
    // No row count from a pointer: WriteBatch(ctx, batch *pipeline.Batch) gets the receiver in
    // rax, ctx in rbx/rcx and the batch pointer in rdi; rows come only from parquet-go's
    // `written` result.
    for ph in &p.phases {
        if ph.name == "pqgo_generic_write" {
            assert_eq!(ph.capture(), Some(wprof::model::profile::Capture::RetVal));
            assert_eq!(ph.unit.as_deref(), Some("rows"));
        } else {
            assert_eq!(ph.capture(), None, "{} captures an argument", ph.name);
            assert_eq!(ph.unit, None, "{} has a unit", ph.name);
        }
    }
    // The names of the old, made-up layout are gone.
    for ph in &p.phases {
        let s = ph.symbol.as_deref().unwrap_or_default();
        assert!(
            !s.contains("ParquetGoBackend") && !s.ends_with(".flush"),
            "{}: {s}",
            ph.name
        );
    }
}

/// The profile against the fixture, which carries lakerunner's module path: every phase
/// resolves to the real writer's full Go name (what `wprof probes --binary` shows).
#[test]
fn parquet_go_profile_resolves_the_real_names_in_the_fixture() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("tests/fixtures/go-parquet/build.sh");
    let go = std::process::Command::new("bash")
        .arg(&script)
        .arg("--find-go")
        .output()
        .is_ok_and(|o| o.status.success());
    if !wprof::testing::require(go, "a Go 1.25+ toolchain (.ci/install.sh installs one)") {
        return;
    }
    let dir = root.join("target/go-fixtures");
    let out = common::run(std::process::Command::new("bash").arg(&script).arg(&dir));
    assert!(out.status.success(), "Go fixture build: {}", text(&out));
    let p = load("parquet-go");
    let phases =
        wprof::resolve::resolve_profile(&p, &wprof::resolve::Scope::Binary(dir.join("goparquet")))
            .expect("resolve");
    let resolved = |name: &str| -> Vec<String> {
        let ph = phases
            .iter()
            .find(|ph| ph.phase.name == name)
            .unwrap_or_else(|| panic!("no phase {name}"));
        assert!(
            matches!(ph.status, wprof::resolve::Status::Resolved),
            "{name}: {:?}",
            ph.status
        );
        ph.targets.iter().map(|t| t.demangled.clone()).collect()
    };
    for (name, method) in LAKERUNNER_METHODS {
        assert_eq!(
            resolved(name),
            [format!(
                "github.com/cardinalhq/lakerunner/internal/parquetwriter.{method}"
            )],
            "{name}"
        );
    }
    assert_eq!(
        resolved("pqgo_generic_write"),
        ["github.com/parquet-go/parquet-go.(*GenericWriter[go.shape.map[string]interface {}]).Write"]
    );
    assert_eq!(
        resolved("pqarrow_write"),
        ["github.com/apache/arrow-go/v18/parquet/pqarrow.(*FileWriter).Write"]
    );
}
