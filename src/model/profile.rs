//! Attach profiles: which functions (and later kernel events) are a program's write-path phases.
//!
//! In: a built-in profile name (attach-profiles/*.toml, embedded at build time) or a path to a
//! user's TOML. Out: a validated [`Profile`]. Format: docs/profiles.md.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::WprofError;

/// The built-in profiles, embedded from attach-profiles/ so the binary is self-contained.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "fixture",
        include_str!("../../attach-profiles/fixture.toml"),
    ),
    (
        "fixture-cxx",
        include_str!("../../attach-profiles/fixture-cxx.toml"),
    ),
    (
        "postgres",
        include_str!("../../attach-profiles/postgres.toml"),
    ),
    (
        "postgres-usdt",
        include_str!("../../attach-profiles/postgres-usdt.toml"),
    ),
    ("ao", include_str!("../../attach-profiles/ao.toml")),
    ("aoco", include_str!("../../attach-profiles/aoco.toml")),
    ("pax", include_str!("../../attach-profiles/pax.toml")),
    (
        "pgrx-merge",
        include_str!("../../attach-profiles/pgrx-merge.toml"),
    ),
    (
        "pg-trickle",
        include_str!("../../attach-profiles/pg-trickle.toml"),
    ),
    ("tsdb", include_str!("../../attach-profiles/tsdb.toml")),
    (
        "rocksdb",
        include_str!("../../attach-profiles/rocksdb.toml"),
    ),
    (
        "parquet-go",
        include_str!("../../attach-profiles/parquet-go.toml"),
    ),
];

/// How a phase's return is detected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ReturnMode {
    /// Guarded uretprobes for C++ and Rust code (and for C functions in objects that hold
    /// any) where the unwind guard can be attached, RET-site probes otherwise and always for
    /// Go; plain uretprobes for C in C-only objects.
    #[default]
    Auto,
    /// A uprobe on every RET (and tail-call JMP) instruction: safe when exceptions, panics or
    /// moving stacks pass through the frame; the RET is single-stepped, so it costs more.
    RetSites,
    /// A kernel uretprobe: cheaper, but an exception unwinding through the frame kills the
    /// target, and more than 64 pending returns per thread are dropped by the kernel.
    Uretprobe,
    /// A kernel uretprobe plus the unwind guard: probes on the unwinder's entries put the
    /// original return addresses back while an exception or panic unwinds through the frame,
    /// and the catch re-arms the frames still live. As cheap as a uretprobe, safe where the
    /// guard attaches (it writes the traced thread's stack: CAP_SYS_ADMIN, no lockdown).
    Guarded,
}

impl ReturnMode {
    /// The spelling used in profiles and outputs.
    pub fn as_str(self) -> &'static str {
        match self {
            ReturnMode::Auto => "auto",
            ReturnMode::RetSites => "ret-sites",
            ReturnMode::Uretprobe => "uretprobe",
            ReturnMode::Guarded => "guarded",
        }
    }

    /// The mode outputs spell `name` ([`ReturnMode::as_str`]); None for `-` (not attached).
    pub fn from_name(name: &str) -> Option<ReturnMode> {
        use ReturnMode::*;
        [Auto, RetSites, Uretprobe, Guarded]
            .into_iter()
            .find(|m| m.as_str() == name)
    }

    /// Whether the return is a kernel uretprobe (plain or guarded): one probe per function,
    /// at its entry, instead of one per exit site.
    pub fn uses_uretprobe(self) -> bool {
        matches!(self, ReturnMode::Uretprobe | ReturnMode::Guarded)
    }
}

/// How a phase's time is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Measure {
    /// Probed, unless `--max-overhead` moves it to sampling to keep within the budget (never
    /// a phase that is a root of the tree).
    #[default]
    Auto,
    /// Always probed: exact counts and per-call latencies.
    Probe,
    /// Never probed: its share of its probed parent's on-CPU time from CPU samples whose
    /// user stack holds the function (no count, no per-call latency).
    Sample,
}

impl Measure {
    /// The spelling used in profiles and outputs.
    pub fn as_str(self) -> &'static str {
        match self {
            Measure::Auto => "auto",
            Measure::Probe => "probe",
            Measure::Sample => "sample",
        }
    }
}

/// One phase of a profile.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    /// Unique name within the profile; what the tree shows.
    pub name: String,
    /// Exact mangled name (starts with `_Z` or `_R`) or a name/glob on the demangled name.
    pub symbol: Option<String>,
    /// Object holding the symbol, overriding the profile's default.
    pub object: Option<String>,
    /// Optional tag aligning phases of different engines (insert, index, wal, commit, io...).
    pub role: Option<String>,
    /// An optional phase that does not resolve is a warning; a required one is exit 4.
    #[serde(default)]
    pub optional: bool,
    /// Return detection for this phase.
    #[serde(default, rename = "return")]
    pub return_mode: ReturnMode,
    /// Attach every distinct match instead of failing on ambiguity.
    #[serde(default)]
    pub all_matches: bool,
    /// Kernel phase: a syscall's enter/exit tracepoints, on the traced threads.
    pub syscall: Option<String>,
    /// Kernel phase: an enter and an exit tracepoint (`["cat:enter", "cat:exit"]`) hit by the
    /// same thread.
    pub tracepoint: Option<TracepointPair>,
    /// USDT phase: `["provider:start", "provider:done", ...]`: opens at the first probe,
    /// closes at any of the others (no return probe at all).
    pub usdt: Option<Vec<String>>,
    /// Integer argument to capture (0-based, System V x86-64 order; Go's register ABI order
    /// for Go functions) or "retval".
    pub arg: Option<toml::Value>,
    /// Unit of the captured argument (rows, bytes...); without `arg`, each call is one unit.
    pub unit: Option<String>,
    /// Count only calls made inside this other phase (calls elsewhere are left out in BPF).
    pub under: Option<String>,
    /// Group the calls by a string argument (`{ arg = 0 }`, `{ arg = 0, type = "str" }`):
    /// one node, with its own subtree, per distinct text, literals folded.
    pub group_by: Option<GroupBy>,
    /// Probed, sampled, or probed unless a budget moves it (`measure = "auto"`).
    #[serde(default)]
    pub measure: Measure,
}

/// A string argument a phase groups its calls by (`group_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GroupBy {
    /// Argument index (0-based), as for `arg`.
    pub arg: u8,
    /// How the string is passed.
    #[serde(default, rename = "type")]
    pub kind: StringArg,
}

/// How a string argument is passed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StringArg {
    /// A NUL-terminated `const char *` (C, C++).
    #[default]
    Cstr,
    /// A pointer at `arg` and a length at `arg + 1`: a Rust `&str`, a Go `string`.
    Str,
}

impl StringArg {
    /// The spelling used in profiles.
    pub fn as_str(self) -> &'static str {
        match self {
            StringArg::Cstr => "cstr",
            StringArg::Str => "str",
        }
    }

    /// Argument registers the string takes.
    pub fn registers(self) -> u8 {
        match self {
            StringArg::Cstr => 1,
            StringArg::Str => 2,
        }
    }
}

/// What a phase captures per call (its `arg`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capture {
    /// Integer argument `n` (0-based) at entry.
    Arg(u8),
    /// The return value at the exit.
    RetVal,
}

impl Phase {
    /// The validated `arg` of the phase.
    pub fn capture(&self) -> Option<Capture> {
        match &self.arg {
            // 0-5: System V x86-64; 6-8 only for Go functions (checked at resolve time).
            Some(toml::Value::Integer(n)) if (0..9).contains(n) => Some(Capture::Arg(*n as u8)),
            Some(toml::Value::String(s)) if s == "retval" => Some(Capture::RetVal),
            _ => None,
        }
    }
}

/// What is wrong with a phase's `usdt` list, if anything: it names a start and at least one
/// done probe, each `provider:name`; a USDT phase has no return value, no `under` (its start
/// may sit anywhere) and reads C strings only.
fn usdt_mistake(p: &Phase, names: &[String]) -> Option<String> {
    if names.len() < 2 {
        return Some(
            "usdt needs a start probe and at least one done probe: \
             [\"provider:start\", \"provider:done\", ...]"
                .into(),
        );
    }
    if let Some(bad) = names.iter().find(|n| {
        n.split_once(':')
            .is_none_or(|(a, b)| a.is_empty() || b.is_empty() || b.contains(':'))
    }) {
        return Some(format!(
            "usdt probe {bad:?} must be written \"provider:name\" (e.g. \
             \"postgresql:transaction__start\")"
        ));
    }
    let not = [
        (
            matches!(p.capture(), Some(Capture::RetVal)),
            "arg = \"retval\" (no return probe)",
        ),
        (p.under.is_some(), "under"),
        (
            p.measure == Measure::Sample,
            "measure = \"sample\" (no function to sample)",
        ),
        (
            p.group_by.is_some_and(|g| g.kind != StringArg::Cstr),
            "group_by type = \"str\" (C strings only)",
        ),
        (
            p.return_mode != ReturnMode::Auto,
            "return (there is no return probe)",
        ),
        (
            p.all_matches,
            "all_matches (every site of a probe is taken)",
        ),
    ];
    not.iter()
        .find(|(bad, _)| *bad)
        .map(|(_, what)| format!("a usdt phase takes no {what}"))
}

/// The two tracepoints of a `tracepoint` phase, written `["category:enter", "category:exit"]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TracepointPair {
    /// Opens the phase.
    pub enter: String,
    /// Closes it.
    pub exit: String,
}

impl<'de> Deserialize<'de> for TracepointPair {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v: Vec<String> = Vec::deserialize(d)?;
        match v.as_slice() {
            [enter, exit] if enter.contains(':') && exit.contains(':') => Ok(TracepointPair {
                enter: enter.clone(),
                exit: exit.clone(),
            }),
            _ => Err(serde::de::Error::custom(
                "tracepoint must be [\"category:enter\", \"category:exit\"]",
            )),
        }
    }
}

/// A whole attach profile.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Profile name.
    pub name: String,
    /// One line for `wprof targets`.
    #[serde(default)]
    pub description: String,
    /// Default object of the phases: a path, a file name searched in the target's maps and the
    /// usual library dirs, or "exe".
    #[serde(default = "default_object")]
    pub object: String,
    /// The phases, in profile order (their index is the phase id).
    #[serde(rename = "phase", default)]
    pub phases: Vec<Phase>,
    /// Raw TOML text, kept for hashing into the run's provenance.
    #[serde(skip)]
    pub source: String,
    /// Where the profile came from ("builtin:NAME" or a path).
    #[serde(skip)]
    pub origin: String,
}

fn default_object() -> String {
    "exe".to_string()
}

impl Profile {
    /// Parses and validates a profile's TOML text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Profile, WprofError> {
        let mut profile: Profile = toml::from_str(text).map_err(|e| {
            // toml's message already holds "line N, column M" and the offending line.
            WprofError::Profile(format!("{origin}: {e}"))
        })?;
        profile.source = text.to_string();
        profile.origin = origin.to_string();
        profile.validate()?;
        Ok(profile)
    }

    /// Loads `--target`: a built-in name, or a path to a TOML file (anything with a `/` or
    /// ending in `.toml`).
    pub fn load(target: &str) -> Result<Profile, WprofError> {
        if let Some((name, text)) = BUILTIN.iter().find(|(n, _)| *n == target) {
            return Profile::parse(text, &format!("builtin:{name}"));
        }
        let looks_like_path = target.contains('/') || target.ends_with(".toml");
        if looks_like_path || Path::new(target).exists() {
            let text = crate::privilege::read_to_string(Path::new(target))
                .map_err(|e| WprofError::Profile(format!("cannot read profile {target}: {e}")))?;
            return Profile::parse(&text, target);
        }
        let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
        Err(WprofError::Usage(format!(
            "no built-in profile '{target}' (built-in: {}; see `wprof targets`); pass a path to a .toml profile",
            names.join(", ")
        )))
    }

    fn validate(&self) -> Result<(), WprofError> {
        let err = |m: String| Err(WprofError::Profile(format!("{}: {m}", self.origin)));
        if self.phases.is_empty() {
            return err("no [[phase]] entries".into());
        }
        // The last phase ids are the probe-cost calibration's own.
        let most = wprof_common::CALIBRATION_FIRST_PHASE as usize;
        if self.phases.len() > most {
            return err(format!("{} phases; at most {most}", self.phases.len()));
        }
        let mut seen = std::collections::HashSet::new();
        for p in &self.phases {
            if !seen.insert(p.name.as_str()) {
                return err(format!("phase name '{}' is used twice", p.name));
            }
            // Names reach terminals, SVG (XML) and CSV as they are.
            let named = [Some(&p.name), p.role.as_ref()];
            if let Some(bad) = named
                .into_iter()
                .flatten()
                .find(|n| n.chars().any(char::is_control))
            {
                return err(format!(
                    "phase name or role {:?} holds a control character",
                    bad
                ));
            }
            let kinds = [
                p.symbol.is_some(),
                p.syscall.is_some(),
                p.tracepoint.is_some(),
                p.usdt.is_some(),
            ];
            if kinds.iter().filter(|k| **k).count() != 1 {
                return err(format!(
                    "phase '{}' needs exactly one of symbol, syscall, tracepoint or usdt",
                    p.name
                ));
            }
            if let Some(u) = &p.usdt {
                if let Some(m) = usdt_mistake(p, u) {
                    return err(format!("phase '{}': {m}", p.name));
                }
            }
            if p.measure == Measure::Sample {
                let per_call = [
                    (p.symbol.is_none(), "a symbol phase"),
                    (p.arg.is_some(), "no arg"),
                    (p.unit.is_some(), "no unit"),
                    (p.group_by.is_some(), "no group_by"),
                    (p.under.is_some(), "no under"),
                ];
                if let Some((_, what)) = per_call.iter().find(|(bad, _)| *bad) {
                    return err(format!(
                        "phase '{}': measure = \"sample\" needs {what} (a sampled phase has \
                         no calls of its own: only its share of its probed parent's CPU time)",
                        p.name
                    ));
                }
            }
            if let Some(u) = &p.under {
                if !self.phases.iter().any(|q| &q.name == u) {
                    return err(format!("phase '{}': under = '{u}' names no phase", p.name));
                }
                if u == &p.name {
                    return err(format!("phase '{}': under names the phase itself", p.name));
                }
                if p.symbol.is_none() {
                    return err(format!(
                        "phase '{}': under is supported on symbol phases only",
                        p.name
                    ));
                }
            }
            if let Some(a) = &p.arg {
                if p.capture().is_none() {
                    return err(format!(
                        "phase '{}': arg = {a} must be an argument index 0-5 (System V x86-64 \
                         integer registers; 0-8 for Go functions, Go's register ABI) or \
                         \"retval\"",
                        p.name
                    ));
                }
                if p.symbol.is_none() && p.usdt.is_none() {
                    return err(format!(
                        "phase '{}': arg is supported on symbol and usdt phases only",
                        p.name
                    ));
                }
            }
            if let Some(g) = &p.group_by {
                if p.symbol.is_none() && p.usdt.is_none() {
                    return err(format!(
                        "phase '{}': group_by is supported on symbol and usdt phases only",
                        p.name
                    ));
                }
                if u16::from(g.arg) + u16::from(g.kind.registers()) > 9 {
                    return err(format!(
                        "phase '{}': group_by arg = {} with type = \"{}\" needs argument \
                         registers up to {}; there are 0-5 (System V x86-64) and 0-8 for Go \
                         functions",
                        p.name,
                        g.arg,
                        g.kind.as_str(),
                        u16::from(g.arg) + u16::from(g.kind.registers()) - 1
                    ));
                }
            }
        }
        Ok(())
    }

    /// A short stable hash of the profile text (for provenance).
    pub fn hash(&self) -> String {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(self.source.as_bytes());
        digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
    }

    /// The object a phase lives in.
    pub fn object_of<'a>(&'a self, phase: &'a Phase) -> &'a str {
        phase.object.as_deref().unwrap_or(&self.object)
    }
}

#[cfg(test)]
#[path = "profile_tests.rs"]
mod tests;
