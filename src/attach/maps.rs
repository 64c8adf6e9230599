//! The BPF object's maps, typed: the one place where wprof opens a map by its name.
//!
//! In: the loaded object of a [`Tracer`] and the map names of `wprof_common::names::map`.
//! Out: aya's typed views of each map — read-only ones for `collect` (and, through it, the
//! rest of wprof), writable ones for `attach` itself — and the writes attach makes through
//! them (counters reset, group_by keys, probe costs, exited threads' stacks freed). Nothing
//! outside these two modules takes a map by name.

use anyhow::{Context, Result};
use aya::maps::{Array, HashMap, Map, MapData, PerCpuArray, PerCpuHashMap, RingBuf, StackTraceMap};
use wprof_common::names::map as name;
use wprof_common::{
    HistKey, NodeCounters, NodeSummary, PhaseCost, PhaseCounters, PhaseKey, ThreadStack,
    TracepointRole, UsdtSite,
};

use super::Tracer;
use crate::model::profile::StringArg;
use crate::resolve::ResolvedPhase;

/// `map` as the typed view `T`, or an error naming it.
fn typed<M, T: TryFrom<M, Error = aya::maps::MapError>>(map: M, what: &str) -> Result<T> {
    T::try_from(map).with_context(|| format!("BPF map {what} has an unexpected type"))
}

/// A thread's calls entered so far, and its last root call's phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadEntries {
    /// Calls entered, wrapping.
    pub entries: u32,
    /// The phase id of its outermost frame.
    pub root: u32,
}

impl Tracer {
    /// The map called `what`, or an error naming it.
    fn map(&self, what: &'static str) -> Result<&Map> {
        self.ebpf
            .map(what)
            .with_context(|| format!("BPF object has no {what} map"))
    }

    /// [`Tracer::map`], writable.
    fn map_mut(&mut self, what: &'static str) -> Result<&mut Map> {
        self.ebpf
            .map_mut(what)
            .with_context(|| format!("BPF object has no {what} map"))
    }

    /// Takes the ring buffer of spans, node definitions and other records out of the tracer
    /// (`collect::Collector` owns it for the rest of the run).
    pub(crate) fn take_events(&mut self) -> Result<RingBuf<MapData>> {
        let map = self
            .ebpf
            .take_map(name::EVENTS)
            .with_context(|| format!("BPF object has no {} map", name::EVENTS))?;
        typed(map, name::EVENTS)
    }

    /// The stacks CPU samples carried in their records, as the collector stores them.
    pub(crate) fn copied_stacks(&self) -> super::copied_stacks::SharedStacks {
        self.copied_stacks.clone()
    }

    /// The user and kernel stacks that off-CPU records refer to.
    pub(crate) fn stack_traces(&self) -> Result<StackTraceMap<&MapData>> {
        typed(self.map(name::STACK_TRACES)?, name::STACK_TRACES)
    }

    /// The global counters (per CPU), indexed by `wprof_common::counter`.
    pub(crate) fn counters(&self) -> Result<PerCpuArray<&MapData, u64>> {
        typed(self.map(name::COUNTERS)?, name::COUNTERS)
    }

    /// The counters of each phase id (per CPU).
    pub(crate) fn phase_counters(&self) -> Result<PerCpuArray<&MapData, PhaseCounters>> {
        typed(self.map(name::PHASE_COUNTERS)?, name::PHASE_COUNTERS)
    }

    /// The lost and abandoned calls of each tree node (per CPU).
    pub(crate) fn node_counters(&self) -> Result<PerCpuHashMap<&MapData, u64, NodeCounters>> {
        typed(self.map(name::NODE_COUNTERS)?, name::NODE_COUNTERS)
    }

    /// The stacks of open phases, by thread (pid_tgid) or goroutine key.
    pub(crate) fn stacks(&self) -> Result<HashMap<&MapData, u64, ThreadStack>> {
        typed(self.map(name::STACKS)?, name::STACKS)
    }

    /// In-kernel aggregation: each node's summary (per CPU).
    pub(crate) fn node_summaries(&self) -> Result<PerCpuHashMap<&MapData, u64, NodeSummary>> {
        typed(self.map(name::NODE_SUMMARIES)?, name::NODE_SUMMARIES)
    }

    /// In-kernel aggregation: the histogram buckets' calls.
    pub(crate) fn hist_buckets(&self) -> Result<HashMap<&MapData, HistKey, u64>> {
        typed(self.map(name::HIST_BUCKETS)?, name::HIST_BUCKETS)
    }

    /// [`Tracer::stacks`], to remove stacks.
    pub(super) fn stacks_mut(&mut self) -> Result<HashMap<&mut MapData, u64, ThreadStack>> {
        typed(self.map_mut(name::STACKS)?, name::STACKS)
    }

    /// [`Tracer::counters`], to reset them.
    pub(super) fn counters_mut(&mut self) -> Result<PerCpuArray<&mut MapData, u64>> {
        typed(self.map_mut(name::COUNTERS)?, name::COUNTERS)
    }

    /// The settings, indexed by `wprof_common::config`.
    pub(super) fn config_mut(&mut self) -> Result<Array<&mut MapData, u64>> {
        typed(self.map_mut(name::CONFIG)?, name::CONFIG)
    }

    /// The string argument each `group_by` phase keys its calls by, by phase id.
    pub(super) fn phase_keys_mut(&mut self) -> Result<Array<&mut MapData, PhaseKey>> {
        typed(self.map_mut(name::PHASE_KEYS)?, name::PHASE_KEYS)
    }

    /// The phases whose probes are coming off (1), by phase id.
    pub(super) fn closing_phases_mut(&mut self) -> Result<Array<&mut MapData, u32>> {
        typed(self.map_mut(name::CLOSING_PHASES)?, name::CLOSING_PHASES)
    }

    /// The probe cost of one call, by phase id.
    pub(super) fn phase_costs_mut(&mut self) -> Result<Array<&mut MapData, PhaseCost>> {
        typed(self.map_mut(name::PHASE_COSTS)?, name::PHASE_COSTS)
    }

    /// The traced processes (tgid -> 1).
    pub(super) fn traced_mut(&mut self) -> Result<HashMap<&mut MapData, u32, u8>> {
        typed(self.map_mut(name::TRACED)?, name::TRACED)
    }

    /// wprof's own threads (tid -> 1).
    pub(super) fn own_threads_mut(&mut self) -> Result<HashMap<&mut MapData, u32, u8>> {
        typed(self.map_mut(name::OWN_THREADS)?, name::OWN_THREADS)
    }

    /// The syscall phases: phase id + 1 by syscall number (`| SYS_EXIT_BIT` for exits).
    pub(super) fn sys_phases_mut(&mut self) -> Result<Array<&mut MapData, u32>> {
        typed(self.map_mut(name::SYS_PHASES)?, name::SYS_PHASES)
    }

    /// The tracepoints that open or close a kernel phase, by event type id.
    pub(super) fn tp_phases_mut(&mut self) -> Result<HashMap<&mut MapData, u32, TracepointRole>> {
        typed(self.map_mut(name::TP_PHASES)?, name::TP_PHASES)
    }

    /// How each USDT start site reads its arguments, by site index.
    pub(super) fn usdt_sites_mut(&mut self) -> Result<Array<&mut MapData, UsdtSite>> {
        typed(self.map_mut(name::USDT_SITES)?, name::USDT_SITES)
    }
}

impl Tracer {
    /// Zeroes the global counters (after calibration, whose own losses are not the run's).
    pub fn reset_counters(&mut self) -> Result<()> {
        let mut map = self.counters_mut()?;
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
        for i in 0..wprof_common::counter::COUNT {
            let zeros = aya::maps::PerCpuValues::try_from(vec![0u64; cpus.get() as usize])?;
            map.set(i, zeros, 0)
                .with_context(|| format!("reset BPF counter {i}"))?;
        }
        Ok(())
    }

    /// Tells BPF which string argument each `group_by` phase keys its calls by.
    pub(super) fn set_phase_keys(&mut self, phases: &[ResolvedPhase]) -> Result<()> {
        let mut map = self.phase_keys_mut()?;
        for rp in phases {
            if let Some(g) = rp.phase.group_by {
                let key = wprof_common::PhaseKey {
                    arg: g.arg.into(),
                    kind: match g.kind {
                        StringArg::Cstr => wprof_common::key::KEY_CSTR,
                        StringArg::Str => wprof_common::key::KEY_PTR_LEN,
                    },
                };
                map.set(rp.id, &key, 0)
                    .with_context(|| format!("set the group_by of phase {}", rp.phase.name))?;
            }
        }
        Ok(())
    }

    /// Tells BPF what one call of each phase costs in probe time (`costs[phase id]`), so every
    /// call carries its descendants' probe time.
    pub fn set_phase_costs(&mut self, costs: &[wprof_common::PhaseCost]) -> Result<()> {
        let mut map = self.phase_costs_mut()?;
        for (i, c) in costs.iter().enumerate() {
            map.set(i as u32, c, 0)
                .with_context(|| format!("set the probe cost of phase {i}"))?;
        }
        Ok(())
    }

    /// The threads BPF holds a stack of phases for now (keys `pid << 32 | tid`; a Go
    /// program's are its goroutines'): those that entered a probed phase and live on.
    pub fn threads_in_phases(&self) -> Vec<u64> {
        self.stacks()
            .map(|s| s.keys().filter_map(Result::ok).collect())
            .unwrap_or_default()
    }

    /// How many calls each of `threads` (keys as [`Tracer::threads_in_phases`]) has entered
    /// so far (wrapping at 2^32), and the phase of its outermost frame (its last root call's);
    /// a thread with no stack is left out.
    pub fn thread_entries(
        &self,
        threads: impl IntoIterator<Item = u64>,
    ) -> Vec<(u64, ThreadEntries)> {
        let Ok(stacks) = self.stacks() else {
            return Vec::new();
        };
        threads
            .into_iter()
            .filter_map(|k| {
                let st = stacks.get(&k, 0).ok()?;
                Some((
                    k,
                    ThreadEntries {
                        entries: st.entries,
                        root: st.frames[0].phase,
                    },
                ))
            })
            .collect()
    }

    /// Frees the phase stacks of threads that have exited, at most once a second. A thread
    /// keeps its stack, empty, between root calls (making one copies ~13 KB in BPF, which a
    /// root call paid every time when stacks were freed at depth 0: ~90 ns a call on the
    /// fixture); freeing them at the thread's exit from BPF would need a tracepoint on
    /// sched_process_exit in every run, whose enabling patches the kernel's text and crashed
    /// kernels under QEMU's emulation. A stack with calls still open stays, for the end of the
    /// run to count them abandoned. (A tid reused within the second by the same process would
    /// find its empty stack gone: it makes a new one.)
    pub fn sweep_exited_threads(&mut self) {
        const EVERY: std::time::Duration = std::time::Duration::from_secs(1);
        if self.last_sweep.elapsed() < EVERY {
            return;
        }
        self.last_sweep = std::time::Instant::now();
        let Ok(mut stacks) = self.stacks_mut() else {
            return;
        };
        let gone: Vec<u64> = stacks
            .keys()
            .filter_map(Result::ok)
            .filter(|k| k & wprof_common::GOROUTINE_KEY_BIT == 0)
            .filter(|k| {
                !std::path::Path::new(&format!("/proc/{}/task/{}", k >> 32, *k as u32)).exists()
            })
            .collect();
        for k in gone {
            if stacks
                .get(&k, 0)
                .is_ok_and(|st| st.len == 0 && st.queued().is_empty())
            {
                let _ = stacks.remove(&k);
            }
        }
        self.sweep_exited_processes();
    }

    /// `--follow-forks`: forgets the traced processes that exited. BPF forgets a thread at its
    /// exit but not a process's leader (its other threads may still run, and the set is keyed
    /// by tgid), so without this a pid the kernel hands out again (every ~32,768 forks with
    /// the default pid_max: pgbench -C gets there in minutes) made an unrelated process
    /// traced. A pid reused within the second, by a fork of a traced process, is in the set
    /// again at once (the fork tracepoint) and alive, so it stays.
    fn sweep_exited_processes(&mut self) {
        let Ok(mut traced) = self.traced_mut() else {
            return;
        };
        let gone: Vec<u32> = traced
            .keys()
            .filter_map(Result::ok)
            .filter(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
            .collect();
        for pid in gone {
            let _ = traced.remove(&pid);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use wprof_common::names;

    /// The names in `wprof_common::names` are the object's: BPF cannot use the constants (a
    /// map is named by its static, a program by its function), so this is their tie.
    #[test]
    fn the_shared_names_are_the_objects_maps_and_programs() {
        let obj = aya_obj::Object::parse(super::super::BPF_OBJECT).expect("parse the BPF object");
        for m in names::map::ALL {
            assert!(obj.maps.contains_key(m), "no map {m} in the BPF object");
        }
        let programs: BTreeSet<&str> = obj.programs.keys().map(String::as_str).collect();
        assert_eq!(programs, BTreeSet::from(names::program::ALL));
    }
}
