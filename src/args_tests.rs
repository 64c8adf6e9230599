//! Tests of the command line's parsing.

use super::*;

#[test]
fn durations_and_sizes() {
    assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
    assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
    assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
    assert!(parse_duration("3x").is_err());
    assert!(parse_duration("0s").is_err());
    assert_eq!(parse_size("64K").unwrap(), 65536);
    assert!(parse_size("lots").is_err());
}

#[test]
fn record_takes_the_command_after_dashes() {
    let cli =
        Cli::try_parse_from(["wprof", "record", "-t", "fixture", "--", "prog", "--flag"]).unwrap();
    let Command::Record(r) = cli.command else {
        panic!("not record")
    };
    assert_eq!(r.command, ["prog", "--flag"]);
    assert_eq!(r.trace.ring_size, 8 << 20);
    assert!(!r.as_root);
    let cli =
        Cli::try_parse_from(["wprof", "record", "-t", "fixture", "--as-root", "--", "id"]).unwrap();
    let Command::Record(r) = cli.command else {
        panic!("not record")
    };
    assert!(r.as_root);
}

#[test]
fn split_by_takes_a_phase_and_refuses_per_pid() {
    let parse = |extra: &[&str]| {
        let mut args = vec!["wprof", "record", "-t", "tsdb"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "prog"]);
        Cli::try_parse_from(args)
    };
    let Command::Record(r) = parse(&["--split-by", "block_persist"]).unwrap().command else {
        panic!("not record")
    };
    assert_eq!(r.trace.split_by.as_deref(), Some("block_persist"));
    let e = parse(&["--split-by", "x", "--per-pid"]).unwrap_err();
    assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
}

#[test]
fn attach_needs_a_pid() {
    assert!(Cli::try_parse_from(["wprof", "attach", "-t", "fixture"]).is_err());
    assert!(Cli::try_parse_from(["wprof", "attach", "-t", "x", "-p", "0"]).is_err());
}

#[test]
fn merge_takes_two_runs_or_more_and_an_optional_output() {
    let e = Cli::try_parse_from(["wprof", "merge", "a.json"]).unwrap_err();
    assert_eq!(e.kind(), clap::error::ErrorKind::TooFewValues);
    let Command::Merge(m) = Cli::try_parse_from([
        "wprof", "merge", "a.json", "b.json", "c.json", "-o", "f.json",
    ])
    .unwrap()
    .command
    else {
        panic!("not merge")
    };
    assert_eq!(m.runs.len(), 3);
    assert_eq!(m.output, Some(PathBuf::from("f.json")));
}
