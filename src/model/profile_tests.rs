//! Tests of the attach profile: parsing, validation and the built-in profiles.

use super::*;

#[test]
fn group_by_reads_a_string_argument_and_refuses_what_cannot_be() {
    let base = "name = \"x\"\n[[phase]]\nname = \"a\"\nsymbol = \"f\"\n";
    let p = Profile::parse(&format!("{base}group_by = {{ arg = 1 }}\n"), "t.toml").unwrap();
    let g = p.phases[0].group_by.unwrap();
    assert_eq!((g.arg, g.kind), (1, StringArg::Cstr));
    let p = Profile::parse(
        &format!("{base}group_by = {{ arg = 7, type = \"str\" }}\n"),
        "t.toml",
    )
    .unwrap();
    assert_eq!(p.phases[0].group_by.unwrap().kind, StringArg::Str);
    for (bad, says) in [
        (
            "group_by = { arg = 8, type = \"str\" }",
            "registers up to 9",
        ),
        (
            "group_by = { arg = 255, type = \"str\" }",
            "registers up to 256",
        ),
        (
            "group_by = { arg = 0, type = \"utf16\" }",
            "unknown variant `utf16`",
        ),
        ("group_by = { arg = 0, len = 64 }", "unknown field `len`"),
        ("group_by = 0", "invalid type"),
    ] {
        let e = Profile::parse(&format!("{base}{bad}\n"), "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
    let e = Profile::parse(
        "name = \"x\"\n[[phase]]\nname = \"a\"\nsyscall = \"fsync\"\ngroup_by = { arg = 0 }\n",
        "t.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("symbol and usdt phases only"), "{e}");
}

#[test]
fn every_builtin_parses() {
    for (name, text) in BUILTIN {
        let p = Profile::parse(text, name).unwrap();
        assert_eq!(&p.name, name);
        assert!(!p.phases.is_empty());
    }
}

#[test]
fn malformed_profile_names_line_and_column() {
    let e = Profile::parse(
        "name = \"x\"\n[[phase]]\nname = \"a\"\nsymbol = \n",
        "t.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("t.toml"), "{e}");
    assert!(e.contains("line 4"), "{e}");
    assert!(e.contains("column"), "{e}");
}

#[test]
fn unknown_key_and_duplicate_names_are_refused() {
    let e = Profile::parse("name='x'\n[[phase]]\nname='a'\nsymbl='f'\n", "t").unwrap_err();
    assert!(e.to_string().contains("symbl"), "{e}");
    let e = Profile::parse(
        "name='x'\n[[phase]]\nname='a'\nsymbol='f'\n[[phase]]\nname='a'\nsymbol='g'\n",
        "t",
    )
    .unwrap_err();
    assert!(e.to_string().contains("used twice"), "{e}");
}

#[test]
fn more_phases_than_ids_below_the_calibrations_are_refused() {
    let text = |n: usize| {
        let mut t = String::from("name='x'\n");
        for i in 0..n {
            t += &format!("[[phase]]\nname='p{i}'\nsymbol='f{i}'\n");
        }
        t
    };
    let most = wprof_common::CALIBRATION_FIRST_PHASE as usize;
    assert_eq!(Profile::parse(&text(most), "t").unwrap().phases.len(), most);
    let e = Profile::parse(&text(most + 1), "t")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("{} phases; at most {most}", most + 1)),
        "{e}"
    );
}

#[test]
fn arg_and_under_are_validated() {
    let ok = Profile::parse(
        "name='x'\n[[phase]]\nname='a'\nsymbol='f'\n[[phase]]\nname='b'\nsymbol='g'\narg=2\nunit='rows'\nunder='a'\n[[phase]]\nname='c'\nsymbol='h'\narg='retval'\n",
        "t",
    )
    .unwrap();
    assert_eq!(ok.phases[1].capture(), Some(Capture::Arg(2)));
    assert_eq!(ok.phases[2].capture(), Some(Capture::RetVal));
    assert_eq!(ok.phases[0].capture(), None);
    for (bad, want) in [
        ("arg=9", "argument index 0-5"),
        ("arg='rax'", "argument index 0-5"),
        ("under='nope'", "names no phase"),
        ("under='a'", "the phase itself"),
    ] {
        let text = format!("name='x'\n[[phase]]\nname='a'\nsymbol='f'\n{bad}\n");
        let e = Profile::parse(&text, "t").unwrap_err().to_string();
        assert!(e.contains(want), "{bad}: {e}");
    }
    let e = Profile::parse(
        "name='x'\n[[phase]]\nname='a'\nsyscall='write'\narg=2\n",
        "t",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("symbol and usdt phases only"), "{e}");
}

#[test]
fn usdt_phases_name_a_start_and_a_done_probe_and_take_no_return_options() {
    let parse = |phase: &str| {
        Profile::parse(&format!("name='x'\n[[phase]]\nname='a'\n{phase}\n"), "t")
            .map_err(|e| e.to_string())
    };
    let ok = "usdt = ['postgresql:transaction__start', 'postgresql:transaction__commit']";
    assert!(parse(ok).is_ok());
    assert!(parse(&format!("{ok}\narg = 0\ngroup_by = {{ arg = 1 }}")).is_ok());
    for (extra, says) in [
        ("", ""),
        (
            "\nsymbol = 'f'",
            "exactly one of symbol, syscall, tracepoint or usdt",
        ),
        ("\narg = 'retval'", "no arg = \"retval\""),
        ("\nreturn = 'uretprobe'", "no return"),
        ("\nmeasure = 'sample'", "no measure"),
        ("\ngroup_by = { arg = 0, type = 'str' }", "C strings only"),
    ] {
        if extra.is_empty() {
            continue;
        }
        let e = parse(&format!("{ok}{extra}")).unwrap_err();
        assert!(e.contains(says), "{extra}: {e}");
    }
    let e = parse("usdt = ['postgresql:transaction__start']").unwrap_err();
    assert!(e.contains("at least one done probe"), "{e}");
    let e = parse("usdt = ['transaction__start', 'postgresql:x']").unwrap_err();
    assert!(e.contains("\"provider:name\""), "{e}");
}

#[test]
fn unknown_builtin_is_a_usage_error() {
    assert!(matches!(Profile::load("nope"), Err(WprofError::Usage(_))));
}
