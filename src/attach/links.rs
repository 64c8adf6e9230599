//! Phases whose probes come off and go back while the run goes on.
//!
//! In: the ids of phases given links of their own before the attach
//! ([`Tracer::keep_phase_links`]): a phase moved to sampling, or the probes paused by a duty
//! cycle. Out: their links released (closing first, then returns before entries; or all at
//! once with BPF stopped) and made again from the kept [`LinkPlan`]s, entries before returns.

use anyhow::{Context, Result};
use aya::programs::uprobe::{UProbeAttachPoint, UProbeLink, UProbeLinkId, UProbeScope};

use super::Tracer;
use crate::resolve::ResolvedSymbol;

/// One attach call of a phase with links of its own, kept to make it again.
#[derive(Debug, Clone)]
pub(super) struct LinkPlan {
    pub(super) prog: &'static str,
    pub(super) target: ResolvedSymbol,
    pub(super) points: Vec<UProbeAttachPoint<'static>>,
    pub(super) scope: UProbeScope,
    pub(super) pid: u32,
}

impl Tracer {
    /// Gives the probes of these phases links of their own (before [`Tracer::attach`]), so
    /// [`Tracer::detach_phase`] can take them off while the others stay.
    pub fn keep_phase_links(&mut self, ids: impl IntoIterator<Item = u32>) {
        self.movable.extend(ids);
    }

    /// Takes these phases' probes off while the run goes on (a phase moved to sampling, or
    /// the probes paused by a duty cycle). The phases close first (`CLOSING_PHASES`): a call
    /// entering from then on keeps its frame, so the unwind guard knows every call the
    /// kernel arms with its trampoline, but is not counted. After `settle` the calls in
    /// flight have returned; then the returns come off, and the entries last, so no call is
    /// ever armed without a frame. (Entries first, as before, left the calls entering before
    /// the returns went armed and unknown: one thrown through ended in `std::terminate`.)
    /// Returns how many of them had links of their own live.
    pub fn detach_phases(&mut self, ids: &[u32], settle: std::time::Duration) -> Result<usize> {
        let (detached, entries, returns) = self.take_phase_links(ids)?;
        release_in_order(entries, returns, settle);
        Ok(detached)
    }

    /// [`Tracer::detach_phases`] on a thread of its own, so the caller goes on reading the
    /// ring buffer while the kernel's grace periods pass (0.2-0.6 s here, during which a hot
    /// target fills the ring): the probes are off once [`Detaching::done`].
    pub fn detach_phases_in_background(
        &mut self,
        ids: &[u32],
        settle: std::time::Duration,
    ) -> Result<Detaching> {
        let (_, entries, returns) = self.take_phase_links(ids)?;
        let thread = std::thread::Builder::new()
            .name("wprof-detach".into())
            .spawn(move || release_in_order(entries, returns, settle))
            .context("start a thread to detach probes")?;
        Ok(Detaching { thread })
    }

    /// Takes these phases' links out of the tracer: how many phases had some, their entry
    /// links and their return links.
    fn take_phase_links(
        &mut self,
        ids: &[u32],
    ) -> Result<(usize, Vec<UProbeLink>, Vec<UProbeLink>)> {
        let mut entries = Vec::new();
        let mut returns = Vec::new();
        let mut detached = 0;
        for id in ids {
            let Some(links) = self.phase_links.remove(id) else {
                continue;
            };
            detached += 1;
            self.set_closing(&[*id], true)?;
            for (prog, link) in links {
                if prog == self.progs.entry {
                    entries.push((*id, prog, link));
                } else {
                    returns.push((*id, prog, link));
                }
            }
        }
        Ok((
            detached,
            self.take_links(entries)?,
            self.take_links(returns)?,
        ))
    }

    /// Releases links, all at once (see [`drop_together`]).
    fn release(&mut self, links: Vec<(u32, &'static str, UProbeLinkId)>) -> Result<()> {
        drop_together(self.take_links(links)?);
        Ok(())
    }

    /// The owned links behind these ids (dropping one detaches it).
    fn take_links(
        &mut self,
        links: Vec<(u32, &'static str, UProbeLinkId)>,
    ) -> Result<Vec<UProbeLink>> {
        let mut owned = Vec::with_capacity(links.len());
        for (id, prog, link) in links {
            owned.push(
                self.program(prog)?
                    .take_link(link)
                    .with_context(|| format!("detach the probes of phase {id}"))?,
            );
        }
        Ok(owned)
    }

    /// Pauses these phases' probes (a duty cycle): BPF stops first, then every link comes off
    /// at once and the open calls are forgotten, so nothing is counted while the links go (a
    /// release waits for the kernel's grace period: ~0.1-0.3 s here, during which an entry
    /// taken off first would leave the returns firing on every call). With the unwind guard
    /// live its frames must stay known: the entries then go first, as for a move. Returns the
    /// completed calls that were still queued on the stacks it cleared (hand them to the
    /// aggregator: they are measured, only not sent yet).
    pub fn pause_phases(
        &mut self,
        ids: &[u32],
        settle: std::time::Duration,
    ) -> Result<Vec<wprof_common::Event>> {
        if self.guarded {
            return self.detach_phases(ids, settle).map(|_| Vec::new());
        }
        self.set_config(wprof_common::config::STOPPED, 1)?;
        let links = ids
            .iter()
            .flat_map(|id| {
                let links = self.phase_links.remove(id).unwrap_or_default();
                links.into_iter().map(move |(prog, link)| (*id, prog, link))
            })
            .collect();
        self.release(links)?;
        // Calls open now can no longer return through a probe.
        let mut stacks = self.stacks_mut()?;
        let keys: Vec<u64> = stacks.keys().filter_map(|k| k.ok()).collect();
        let mut queued = Vec::new();
        for k in keys {
            if let Ok(st) = stacks.get(&k, 0) {
                queued.extend_from_slice(st.queued());
            }
            let _ = stacks.remove(&k);
        }
        Ok(queued)
    }

    /// Lets BPF run again after a pause of [`Tracer::pause_phases`] without putting the
    /// paused links back: a run that ends in a pause still recalibrates at the end (its
    /// calibration child's probes need BPF running).
    pub fn end_pause(&mut self) -> Result<()> {
        if self.guarded {
            return Ok(());
        }
        self.set_config(wprof_common::config::STOPPED, 0)
    }

    /// Ends a pause of [`Tracer::pause_phases`].
    pub fn resume_phases(&mut self, ids: &[u32]) -> Result<()> {
        self.reattach_phases(ids)?;
        if !self.guarded {
            self.set_config(wprof_common::config::STOPPED, 0)?;
        }
        Ok(())
    }

    /// Puts back the probes [`Tracer::detach_phases`] took off, the phases still closing:
    /// entries before returns, so every call the kernel arms has a frame the unwind guard
    /// knows (returns first left the calls entering between armed and unknown); then their
    /// calls count again.
    pub fn reattach_phases(&mut self, ids: &[u32]) -> Result<()> {
        let entry = self.progs.entry;
        let mut plans: Vec<(u32, LinkPlan)> = ids
            .iter()
            .filter(|id| !self.phase_links.contains_key(id))
            .flat_map(|id| {
                let plans = self.phase_plans.get(id).cloned().unwrap_or_default();
                plans.into_iter().map(move |p| (*id, p))
            })
            .collect();
        plans.sort_by_key(|(_, p)| p.prog != entry);
        for (id, p) in plans {
            let what = format!("the probes of phase {id} again");
            let link = self.attach_points(p.prog, p.points, &p.target, p.scope, p.pid, &what)?;
            self.phase_links.entry(id).or_default().push((p.prog, link));
        }
        self.set_closing(ids, false)
    }

    /// Marks phases as closing (their calls entering from now on keep frames but are not
    /// counted: `CLOSING_PHASES`) or open again.
    pub(super) fn set_closing(&mut self, ids: &[u32], closing: bool) -> Result<()> {
        let mut map = self.closing_phases_mut()?;
        for id in ids {
            map.set(*id, &u32::from(closing), 0)
                .with_context(|| format!("mark phase {id} closing: {closing}"))?;
        }
        Ok(())
    }
}

/// Probes coming off on a thread of their own ([`Tracer::detach_phases_in_background`]).
pub struct Detaching {
    thread: std::thread::JoinHandle<()>,
}

impl Detaching {
    /// Whether the probes are off (every link released).
    pub fn done(&self) -> bool {
        self.thread.is_finished()
    }

    /// Waits until they are.
    pub fn wait(self) {
        let _ = self.thread.join();
    }
}

/// Releases closing phases' links: after `settle` (the calls in flight return meanwhile) the
/// return links, then the entry links.
fn release_in_order(
    entries: Vec<UProbeLink>,
    returns: Vec<UProbeLink>,
    settle: std::time::Duration,
) {
    if !returns.is_empty() {
        std::thread::sleep(settle);
    }
    drop_together(returns);
    drop_together(entries);
}

/// Drops links all at once: each release waits for the kernel's uprobe grace period (~0.1-0.3
/// s on these VMs); one by one, a paused profile's returns kept firing for seconds after its
/// entries. Released together, they wait about one period.
fn drop_together(links: Vec<UProbeLink>) {
    std::thread::scope(|s| {
        for link in links {
            s.spawn(move || drop(link));
        }
    });
}
