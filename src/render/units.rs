//! Human-readable figures for the text outputs.
//!
//! In: durations in ns (`f64`, since per-root-call figures are fractions), shares as fractions.
//! Out: short strings of at most 8 characters for durations ("812 ns", "5.2 µs", "110.2 µs",
//! "12.4 ms", "3.21 s") and 6 for shares ("100.0%"), so that right-aligned columns line up.

/// Formats a duration given in ns, choosing ns, µs, ms or s.
///
/// Below 10 ns one decimal is kept (per-root-call figures of rare phases are fractions of a
/// ns); ns are otherwise integers; µs and ms carry one decimal; seconds two below 100 s, one
/// below 10 000 s, none above. A value that rounds up to 1000 of a unit moves to the next unit
/// ("999.96 µs" is "1.0 ms"). Negative and non-finite inputs are shown as "-".
pub fn format_ns(ns: f64) -> String {
    if !ns.is_finite() || ns < 0.0 {
        return "-".to_string();
    }
    if ns < 9.95 {
        return format!("{ns:.1} ns");
    }
    if round_to(ns, 0) < 1000.0 {
        return format!("{ns:.0} ns");
    }
    let us = ns / 1e3;
    if round_to(us, 1) < 1000.0 {
        return format!("{us:.1} µs");
    }
    let ms = ns / 1e6;
    if round_to(ms, 1) < 1000.0 {
        return format!("{ms:.1} ms");
    }
    let s = ns / 1e9;
    if round_to(s, 2) < 100.0 {
        format!("{s:.2} s")
    } else if round_to(s, 1) < 10_000.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.0} s")
    }
}

/// Formats an integer duration in ns (see [`format_ns`]).
pub fn format_ns_u64(ns: u64) -> String {
    format_ns(ns as f64)
}

/// Formats a fraction (0.49) as a percentage with one decimal ("49.0%"); "-" when undefined.
pub fn format_share(fraction: f64) -> String {
    if fraction.is_finite() {
        format!("{:.1}%", fraction * 100.0)
    } else {
        "-".to_string()
    }
}

/// A relative change as a signed percentage (`+12.5%`, `-3.0%`), `new` for a change from
/// nothing.
pub fn format_change(d: f64) -> String {
    if d.is_infinite() {
        "new".to_string()
    } else if d >= 0.0 {
        format!("+{}", format_share(d))
    } else {
        format_share(d)
    }
}

/// Rounds as `format!("{:.N}")` would, to decide unit changes before printing.
fn round_to(v: f64, decimals: i32) -> f64 {
    let f = 10f64.powi(decimals);
    (v * f).round() / f
}

/// `rows` -> `row`, for "µs/row".
pub(super) fn singular(unit: &str) -> &str {
    unit.strip_suffix('s')
        .filter(|s| !s.is_empty())
        .unwrap_or(unit)
}

/// A node's time per root call, or "-" without root calls.
pub(super) fn per_root(ns: u64, root_calls: u64) -> String {
    if root_calls == 0 {
        "-".to_string()
    } else {
        format_ns(ns as f64 / root_calls as f64)
    }
}

/// `a / b`, NaN when `b` is 0.
pub(super) fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        f64::NAN
    } else {
        a as f64 / b as f64
    }
}

/// "1 call", "N calls".
pub(super) fn calls(n: u64) -> String {
    if n == 1 {
        "1 call".to_string()
    } else {
        format!("{n} calls")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_units_and_precision() {
        let cases: &[(f64, &str)] = &[
            (0.0, "0.0 ns"),
            (0.25, "0.2 ns"),
            (5.0, "5.0 ns"),
            (812.0, "812 ns"),
            (999.4, "999 ns"),
            (999.6, "1.0 µs"),
            (5_200.0, "5.2 µs"),
            (110_240.0, "110.2 µs"),
            (999_960.0, "1.0 ms"),
            (12_400_000.0, "12.4 ms"),
            (3_214_000_000.0, "3.21 s"),
            (312_400_000_000.0, "312.4 s"),
            (36_000_000_000_000.0, "36000 s"),
            (-1.0, "-"),
            (f64::NAN, "-"),
        ];
        for (ns, want) in cases {
            assert_eq!(format_ns(*ns), *want, "format_ns({ns})");
        }
    }

    #[test]
    fn durations_fit_eight_columns() {
        let mut v = 0.1;
        while v < 3.6e12 {
            let s = format_ns(v);
            assert!(s.chars().count() <= 8, "{v} -> {s}");
            v *= 1.37;
        }
    }

    #[test]
    fn shares() {
        assert_eq!(format_share(1.0), "100.0%");
        assert_eq!(format_share(0.019), "1.9%");
        assert_eq!(format_share(f64::NAN), "-");
    }
}
