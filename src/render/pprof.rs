//! The phase tree as a pprof profile, for Pyroscope, Parca and `go tool pprof`.
//!
//! In: a [`Run`]. Out: a gzipped `profile.proto` message with two sample types, `wall`
//! (nanoseconds) and `calls` (count). Every node is a frame (a location with one function,
//! named by the node's label); its self time is a sample whose leaf is a `NAME (self)` frame
//! under the node, so self times of different parents do not merge; its calls are a sample
//! ending at the node itself. `go tool pprof -top` then shows each phase's cumulative wall time
//! as the tree's total and its flat calls as the tree's count (a phase reached through two
//! paths is one function: pprof adds them up, as the tree's rows under both parents would).
//! Corrected times are written when the run has them, raw ones otherwise. The CPU samples
//! (`--cpu-sample`) are a profile of their own: a sample per folded stack, phases outermost,
//! then the user and kernel frames. The messages are
//! declared here with prost's derive (no .proto compiler needed): only the fields wprof fills.

use std::collections::HashMap;
use std::io::Write;

use anyhow::Result;
use prost::Message;

use crate::model::{Run, StackProfile, TreeNode};

/// `perftools.profiles.Profile`, the fields wprof writes.
#[derive(Clone, PartialEq, Message)]
struct Profile {
    #[prost(message, repeated, tag = "1")]
    sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    sample: Vec<Sample>,
    #[prost(message, repeated, tag = "4")]
    location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    time_nanos: i64,
    #[prost(int64, tag = "10")]
    duration_nanos: i64,
    #[prost(int64, repeated, tag = "13")]
    comment: Vec<i64>,
}

#[derive(Clone, PartialEq, Message)]
struct ValueType {
    #[prost(int64, tag = "1")]
    r#type: i64,
    #[prost(int64, tag = "2")]
    unit: i64,
}

#[derive(Clone, PartialEq, Message)]
struct Sample {
    /// Leaf first.
    #[prost(uint64, repeated, tag = "1")]
    location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    value: Vec<i64>,
}

#[derive(Clone, PartialEq, Message)]
struct Location {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(message, repeated, tag = "4")]
    line: Vec<Line>,
}

#[derive(Clone, PartialEq, Message)]
struct Line {
    #[prost(uint64, tag = "1")]
    function_id: u64,
}

#[derive(Clone, PartialEq, Message)]
struct Function {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(int64, tag = "2")]
    name: i64,
    #[prost(int64, tag = "3")]
    system_name: i64,
}

/// Builds the profile: strings interned, one function and one location per frame name.
#[derive(Default)]
struct Builder {
    profile: Profile,
    strings: HashMap<String, i64>,
    frames: HashMap<String, u64>,
}

impl Builder {
    fn string(&mut self, s: &str) -> i64 {
        if self.profile.string_table.is_empty() {
            // Index 0 is the empty string, by the format's rule.
            self.profile.string_table.push(String::new());
            self.strings.insert(String::new(), 0);
        }
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.profile.string_table.len() as i64;
        self.profile.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    /// The location id of a frame named `name` (function and location ids are equal).
    fn frame(&mut self, name: &str) -> u64 {
        if let Some(&id) = self.frames.get(name) {
            return id;
        }
        let id = self.frames.len() as u64 + 1;
        let n = self.string(name);
        self.profile.function.push(Function {
            id,
            name: n,
            system_name: n,
        });
        self.profile.location.push(Location {
            id,
            line: vec![Line { function_id: id }],
        });
        self.frames.insert(name.to_string(), id);
        id
    }

    /// Adds `node` and its subtree; `stack` holds the ancestors' location ids, root first.
    fn node(&mut self, node: &TreeNode, stack: &mut Vec<u64>) {
        let label = node.label();
        stack.push(self.frame(&label));
        let self_ns = node.corrected.as_ref().map_or(node.self_ns, |c| c.self_ns);
        if self_ns > 0 {
            let own = self.frame(&format!("{label} (self)"));
            self.sample(leaf_first(stack, Some(own)), self_ns, 0);
        }
        if node.count > 0 {
            self.sample(leaf_first(stack, None), 0, node.count);
        }
        for c in &node.children {
            self.node(c, stack);
        }
        stack.pop();
    }

    /// A sample of the two values, in the order of the sample types.
    fn sample(&mut self, location_id: Vec<u64>, first: u64, second: u64) {
        let clamp = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.profile.sample.push(Sample {
            location_id,
            value: vec![clamp(first), clamp(second)],
        });
    }

    fn sample_types(&mut self, types: &[(&str, &str)]) {
        for (kind, unit) in types {
            let vt = ValueType {
                r#type: self.string(kind),
                unit: self.string(unit),
            };
            self.profile.sample_type.push(vt);
        }
    }

    /// Stamps the run's time and a comment saying what the profile holds, and writes it
    /// gzipped, as pprof files are.
    fn finish(mut self, run: &Run, what: &str, w: &mut dyn Write) -> Result<()> {
        let comment = format!(
            "wprof {}: profile {}, {what}",
            run.provenance.wprof_version, run.provenance.profile_name
        );
        let c = self.string(&comment);
        self.profile.comment.push(c);
        self.profile.time_nanos = i64::try_from(run.provenance.started_unix)
            .unwrap_or(0)
            .saturating_mul(1_000_000_000);
        self.profile.duration_nanos = (run.provenance.duration_s * 1e9) as i64;
        let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::default());
        gz.write_all(&self.profile.encode_to_vec())?;
        gz.finish()?;
        Ok(())
    }
}

/// A sample's locations, leaf first as pprof wants them: `leaf`, then `stack` (root first) from
/// its end.
fn leaf_first(stack: &[u64], leaf: Option<u64>) -> Vec<u64> {
    leaf.into_iter()
        .chain(stack.iter().rev().copied())
        .collect()
}

/// The run's phase tree as a gzipped pprof profile.
pub fn pprof(run: &Run, w: &mut dyn Write) -> Result<()> {
    let mut b = Builder::default();
    b.sample_types(&[("wall", "nanoseconds"), ("calls", "count")]);
    for root in &run.tree.roots {
        b.node(root, &mut Vec::new());
    }
    let what = if run.is_corrected() {
        "corrected for the probes' time"
    } else {
        "as measured"
    };
    b.finish(run, &format!("phases, wall time {what}"), w)
}

/// The CPU samples of a run as a gzipped pprof profile: each folded stack (phase path, then
/// user and kernel frames) is a sample, with its count and the CPU time it stands for (a
/// sample per 1/frequency seconds per CPU).
pub fn cpu_pprof(run: &Run, cpu: &StackProfile, w: &mut dyn Write) -> Result<()> {
    let mut b = Builder::default();
    b.sample_types(&[("samples", "count"), ("cpu", "nanoseconds")]);
    let period_ns = cpu
        .frequency_hz
        .filter(|&hz| hz > 0)
        .map_or(0, |hz| 1_000_000_000 / hz);
    for s in &cpu.stacks {
        let stack: Vec<u64> = s.stack.split(';').map(|f| b.frame(f)).collect();
        b.sample(
            leaf_first(&stack, None),
            s.weight,
            s.weight.saturating_mul(period_ns),
        );
    }
    // pprof's own order of values for a CPU profile is [samples, cpu].
    b.finish(run, "CPU samples by phase", w)
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::model::testutil::sample_run;

    fn decode(run: &Run) -> Profile {
        let mut gz = Vec::new();
        pprof(run, &mut gz).unwrap();
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut raw)
            .unwrap();
        Profile::decode(&raw[..]).unwrap()
    }

    /// Per function name: (cumulative wall, flat calls), as `go tool pprof -top` computes them
    /// (a function counts once per sample however often it appears in the stack).
    fn top(p: &Profile) -> HashMap<String, (i64, i64)> {
        let name = |loc: u64| {
            let f = &p.function[(loc - 1) as usize];
            p.string_table[f.name as usize].clone()
        };
        let mut out: HashMap<String, (i64, i64)> = HashMap::new();
        for s in &p.sample {
            let mut seen = std::collections::HashSet::new();
            for (i, &loc) in s.location_id.iter().enumerate() {
                let n = name(loc);
                let e = out.entry(n.clone()).or_default();
                if seen.insert(n) {
                    e.0 += s.value[0];
                }
                if i == 0 {
                    e.1 += s.value[1];
                }
            }
        }
        out
    }

    #[test]
    fn cumulative_wall_and_flat_calls_are_the_trees_totals_and_counts() {
        let mut run = sample_run();
        run.drop_corrections();
        let p = decode(&run);
        let kinds: Vec<&str> = (p.sample_type.iter())
            .map(|v| p.string_table[v.r#type as usize].as_str())
            .collect();
        assert_eq!(kinds, ["wall", "calls"]);
        let top = top(&p);
        for root in &run.tree.roots {
            root.walk(&mut Vec::new(), &mut |_, n| {
                let (cum, calls) = top[n.name.as_str()];
                assert_eq!(cum, n.total_ns as i64, "{}", n.name);
                assert_eq!(calls, n.count as i64, "{}", n.name);
            });
        }
        // Self frames are per parent: write_record's own time is its own frame.
        let own = top["write_record (self)"];
        assert_eq!(own.0, run.tree.roots[0].self_ns as i64);
        assert_eq!(p.string_table[0], "");
    }

    #[test]
    fn cpu_samples_keep_their_stacks_under_their_phases() {
        let mut run = sample_run();
        let cpu = StackProfile {
            unit: "samples".into(),
            frequency_hz: Some(100),
            records: 5,
            lost: 0,
            stacks: vec![
                crate::model::FoldedStack {
                    stack: "write_record;wal_append;main;fsync_[k]".into(),
                    weight: 3,
                },
                crate::model::FoldedStack {
                    stack: "[outside phases];main".into(),
                    weight: 2,
                },
            ],
        };
        run.cpu = Some(cpu.clone());
        let mut gz = Vec::new();
        cpu_pprof(&run, &cpu, &mut gz).unwrap();
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut raw)
            .unwrap();
        let p = Profile::decode(&raw[..]).unwrap();
        let name = |loc: u64| p.string_table[p.function[(loc - 1) as usize].name as usize].clone();
        let first = &p.sample[0];
        let names: Vec<String> = first.location_id.iter().map(|&l| name(l)).collect();
        assert_eq!(names, ["fsync_[k]", "main", "wal_append", "write_record"]);
        assert_eq!(first.value, [3, 30_000_000]);
        assert_eq!(p.sample[1].value, [2, 20_000_000]);
        // `main` is one function in both stacks.
        assert_eq!(p.function.len(), 5);
    }

    #[test]
    fn a_corrected_run_writes_its_corrected_times() {
        let run = crate::model::testutil::calibrated_run();
        assert!(run.is_corrected());
        let top = top(&decode(&run));
        let root = &run.tree.roots[0];
        let c = root.corrected.as_ref().unwrap();
        assert_eq!(top[root.name.as_str()].0, c.total_ns as i64);
    }
}
