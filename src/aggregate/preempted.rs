//! Preempted time: the part of a call's off-CPU time its thread spent runnable, waiting for
//! a CPU, rather than waiting for something (a lock, I/O, a sleep); and the probes' share of
//! it, taken out of the corrected times.
//!
//! In: each span's `off_ns` and `preempted_ns` (BPF adds a thread's time away to the call open
//! on it, and to `preempted_ns` too when sched_switch's `prev_state` said it left runnable).
//! Out: per tree node `preempted_ns` beside `off_cpu_ns`, and per call the part of its
//! preempted time that is the probes' doing ([`Carry::taken`]).
//!
//! Why it matters: on a host with no spare CPU a traced thread is preempted for as long as its
//! rivals' time slices, whatever its call was doing. With every phase of the `rocksdb` profile
//! probed, db_bench's writer spent 2.4-4.0 µs of each write preempted, a third to two thirds
//! of it while wprof's own reader ran, against ~0.2-0.3 µs untraced (benchmarks §38): a call
//! the probes made 4× longer on the CPU is 4× as likely to be the one a preemption lands in.

use std::collections::HashMap;

use wprof_common::Event;

use super::ThreadMap;

/// Decides how much of each call's preempted time is the probes' doing, once per preemption,
/// in the part of the call it landed in.
///
/// A preemption lands in a stretch of a thread's time with a chance that grows with that
/// stretch's time on the CPU (a time slice runs out, or a woken rival is due, while it runs).
/// One that landed in a call's own (self) time, of which the probes took `removed` of `on_cpu`
/// ns, is the program's own with chance `1 − removed / on_cpu`, the probes' otherwise: with
/// no probes there, that time would not have run. The preempted time is kept or taken out
/// whole, by a draw fixed by the call (thread, start, node), so the corrected distribution
/// keeps about as many preempted calls as an untraced run has, each preempted for as long as
/// a real preemption lasts: mean and tail move together, as they would not if a share were
/// taken out of every call.
///
/// A preemption that gave the CPU to one of wprof's own threads (its reader, mostly: on
/// db_bench's two vCPUs it took ~12% of the CPU, and a third of the writer's wait for a CPU
/// went to it) is wprof's whatever the call was doing: it goes out whole, without a draw.
///
/// A call's children count their preemptions in the call too (BPF adds their off-CPU time to
/// it); their decisions are carried up, and the call draws only for the time it was preempted
/// outside them, at the share of its self time the probes took: its own probes' part inside
/// its window and its children's parts outside theirs. Drawn again at every level, a parent
/// could keep a preemption its child gave up, and its children would add up to more than it.
///
/// Spans of a stack of calls (a thread's, or a goroutine's) arrive children first, so a call's
/// children have all been seen when it comes.
///
/// Where the threads' wait for a CPU was measured before the probes went live (a
/// [`WaitBaseline`], `wprof attach`), a preemption in the program's own time is kept only at
/// the odds the untraced thread had: the draw's chance of keeping it is scaled by the
/// thread's untraced wait per ns on the CPU over its traced one (its calls so far, wprof's
/// threads aside). A traced host is busier than an untraced one (wprof's reader, the probed
/// threads' longer calls crowding each other): on db_bench the writer waited 12-24% of its
/// time on the CPU while traced, 2-4% untraced, and the draw alone kept 0.28-0.69 µs of
/// preemption a write where the untraced rate gives 0.08-0.16 (benchmarks §40).
#[derive(Debug, Default)]
pub struct Carry {
    /// Per stack of calls, per depth: the completed calls at that depth under their open
    /// parent.
    by_stack: ThreadMap<u64, Vec<Level>>,
    /// The threads' wait for a CPU before the probes went live, when measured.
    baseline: Option<WaitBaseline>,
    /// Per thread (process id, thread id): its root calls' time on the CPU and preempted
    /// time (not given to wprof's threads) so far.
    traced: ThreadMap<(u32, u32), ThreadWait>,
}

/// What threads waited for a CPU per ns on it, untraced: by thread, and by process for the
/// threads that started later or ran too little to say.
#[derive(Debug, Clone, Default)]
pub struct WaitBaseline {
    /// Per thread id.
    pub by_tid: HashMap<u32, f64>,
    /// Per process id.
    pub by_pid: HashMap<u32, f64>,
}

/// A thread's time on the CPU and time preempted, ns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadWait {
    /// Time on the CPU (the probes' included).
    pub on_cpu: u64,
    /// Time runnable, waiting for a CPU (wprof's threads' share left out).
    pub preempted: u64,
}

/// How much of a thread's first calls stands in for its traced rate before they say it: its
/// untraced rate over this much time on the CPU, so a thread's first preemptions are kept at
/// the draw's own odds rather than at a rate read off one call.
const PRIOR_ON_CPU_NS: f64 = 20e6;

/// The completed calls at one depth under one open parent.
#[derive(Debug, Clone, Copy, Default)]
struct Level {
    calls: u64,
    /// Their parent's node.
    parent: u64,
    /// The earliest of their starts: calls under an earlier call of the parent (whose span was
    /// lost) began before this one.
    first_start: u64,
    /// Their preempted time not given to wprof's threads, and the part of it taken out.
    preempted: u64,
    taken: u64,
    /// Probe time inside their windows.
    removed: u64,
    /// Their time on the CPU (a preempted call's at most its node's usual).
    on_cpu: u64,
}

impl Carry {
    /// Keeps preemptions only at the odds `baseline` gives the untraced threads.
    pub fn set_baseline(&mut self, baseline: WaitBaseline) {
        self.baseline = Some(baseline);
    }

    /// The root calls' time on the CPU and preempted time, summed over the threads the
    /// baseline knows (their own figure or their process's); None without a baseline.
    pub fn traced_wait(&self) -> Option<ThreadWait> {
        let b = self.baseline.as_ref()?;
        Some(
            (self.traced.iter())
                .filter(|((pid, tid), _)| b.by_tid.contains_key(tid) || b.by_pid.contains_key(pid))
                .fold(ThreadWait::default(), |a, (_, t)| ThreadWait {
                    on_cpu: a.on_cpu + t.on_cpu,
                    preempted: a.preempted + t.preempted,
                }),
        )
    }

    /// The part of span `ev`'s preempted time to take out of its corrected time: what it
    /// waited for wprof's threads, what its children took of the rest, and the rest of the
    /// rest if the draw for its self time says so. `removed` is the probe time inside its window; `usual_ns` the node's mean call
    /// among those that never left the CPU, asked for only when the call was preempted: a
    /// preempted call comes back to cold caches (db_bench's preempted writes ran a median
    /// 52 µs on the CPU against the usual 17 µs), and that aftermath is the preemption's, not
    /// time the probes could have been preempted in.
    pub fn taken(
        &mut self,
        ev: &Event,
        removed: u64,
        usual_ns: impl FnOnce() -> Option<u64>,
    ) -> u64 {
        let levels = self.by_stack.entry(ev.stack_key()).or_default();
        let d = ev.depth as usize;
        if levels.len() < d + 2 {
            levels.resize(d + 2, Level::default());
        }
        let kids = std::mem::take(&mut levels[d + 1]);
        let kids = if kids.parent == ev.node && kids.first_start >= ev.start_ns {
            kids
        } else {
            Level::default()
        };
        let mut on_cpu = ev.dur_ns.saturating_sub(ev.off_ns);
        let wprof = ev.wprof_ns.min(ev.preempted_ns);
        let rest = ev.preempted_ns - wprof;
        let mut taken = kids.taken;
        let own = rest.saturating_sub(kids.preempted);
        if own > 0 {
            on_cpu = usual_ns().map_or(on_cpu, |u| on_cpu.min(u));
            let self_removed = removed.saturating_sub(kids.removed);
            let self_on_cpu = on_cpu.saturating_sub(kids.on_cpu).max(self_removed);
            let probes = if self_removed > 0 {
                self_removed as f64 / self_on_cpu as f64
            } else {
                0.0
            };
            let now = ThreadWait {
                on_cpu: ev.dur_ns.saturating_sub(ev.off_ns),
                preempted: rest,
            };
            let kept =
                (1.0 - probes) * untraced_odds(self.baseline.as_ref(), &self.traced, ev, now);
            if draw(ev) < 1.0 - kept {
                taken += own;
            }
        }
        let taken = taken.min(rest);
        if d == 0 {
            // Nothing of this stack is open any more.
            levels.clear();
            let t = self.traced.entry((ev.pid, ev.tid)).or_default();
            t.on_cpu += ev.dur_ns.saturating_sub(ev.off_ns);
            t.preempted += rest;
            return wprof + taken;
        }
        let level = &mut levels[d];
        if level.calls == 0 || level.parent != ev.parent {
            *level = Level {
                parent: ev.parent,
                first_start: ev.start_ns,
                ..Level::default()
            };
        }
        level.calls += 1;
        level.first_start = level.first_start.min(ev.start_ns);
        level.preempted += rest;
        level.taken += taken;
        level.removed += removed;
        level.on_cpu += on_cpu;
        wprof + taken
    }
}

/// The share of a preemption in the program's own time to keep on `ev`'s thread beyond the
/// draw's: its untraced wait per ns on the CPU over its traced one (its root calls so far and
/// this call, `now`), at most 1; 1 with no baseline for it.
fn untraced_odds(
    baseline: Option<&WaitBaseline>,
    traced: &ThreadMap<(u32, u32), ThreadWait>,
    ev: &Event,
    now: ThreadWait,
) -> f64 {
    let Some(b) = baseline else {
        return 1.0;
    };
    let Some(&untraced) = b.by_tid.get(&ev.tid).or_else(|| b.by_pid.get(&ev.pid)) else {
        return 1.0;
    };
    let t = traced.get(&(ev.pid, ev.tid)).copied().unwrap_or_default();
    let preempted = (t.preempted + now.preempted) as f64 + untraced * PRIOR_ON_CPU_NS;
    let on_cpu = (t.on_cpu + now.on_cpu) as f64 + PRIOR_ON_CPU_NS;
    let traced = preempted / on_cpu;
    if traced > 0.0 {
        (untraced / traced).min(1.0)
    } else {
        1.0
    }
}

/// A number in [0, 1) fixed by the call (splitmix64 of its thread, start and node).
fn draw(ev: &Event) -> f64 {
    let mut x = (u64::from(ev.tid) << 32) ^ ev.start_ns ^ ev.node.rotate_left(17);
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Call `i` of a node, with no probed children.
    fn call(i: u64, dur: u64, off: u64, preempted: u64) -> Event {
        Event {
            tid: 7,
            node: 42,
            start_ns: 1_000_000 + i * 20_000_000,
            dur_ns: dur,
            off_ns: off,
            preempted_ns: preempted,
            ..Event::default()
        }
    }

    /// The share of `n` such calls whose preempted time the probes took, `removed` ns of
    /// probe time in each.
    fn share_taken(dur: u64, off: u64, preempted: u64, removed: u64, usual: Option<u64>) -> f64 {
        let n = 100_000;
        let mut carry = Carry::default();
        let taken = (0..n)
            .filter(|&i| carry.taken(&call(i, dur, off, preempted), removed, || usual) > 0)
            .count();
        taken as f64 / n as f64
    }

    #[test]
    fn the_probes_take_their_share_of_the_calls_they_made_longer() {
        // 20 µs on the CPU of which 15 µs probes: three preemptions in four are theirs.
        let share = share_taken(1_020_000, 1_000_000, 1_000_000, 15_000, None);
        assert!((share - 0.75).abs() < 0.01, "{share}");
        // The same call draws the same way every time (a tree and its merge agree).
        let c = call(3, 1_020_000, 1_000_000, 1_000_000);
        let once = |c: &Event| Carry::default().taken(c, 15_000, || None);
        assert_eq!(once(&c), once(&c));
        // A preemption is taken out whole or not at all.
        assert!([0, 1_000_000].contains(&once(&c)));
    }

    #[test]
    fn a_preempted_calls_slow_return_is_not_time_the_probes_ran() {
        // 60 µs on the CPU, 20 µs usually, 15 µs of probes: three in four again.
        let share = share_taken(1_060_000, 1_000_000, 1_000_000, 15_000, Some(20_000));
        assert!((share - 0.75).abs() < 0.01, "{share}");
        let share = share_taken(1_060_000, 1_000_000, 1_000_000, 15_000, None);
        assert!((share - 0.25).abs() < 0.01, "{share}");
        // A call shorter than usual keeps its own time on the CPU.
        let share = share_taken(1_060_000, 1_000_000, 1_000_000, 15_000, Some(200_000));
        assert!((share - 0.25).abs() < 0.01, "{share}");
    }

    #[test]
    fn waits_and_unprobed_calls_keep_their_time() {
        // Off the CPU waiting (none of it preempted), or no probe time inside.
        assert_eq!(share_taken(900_000, 880_000, 0, 15_000, None), 0.0);
        assert_eq!(share_taken(900_000, 880_000, 880_000, 0, None), 0.0);
        // Probes all of its time on the CPU: every preemption is theirs.
        assert_eq!(share_taken(900_000, 880_000, 880_000, 20_000, None), 1.0);
    }

    /// A child span and then its parent's, on one thread: the child runs 20 µs on the CPU,
    /// the parent 20 µs more around it.
    fn nested(i: u64, child_pre: u64, parent_pre: u64) -> (Event, Event) {
        let start = 1_000_000 + i * 10_000_000;
        let child = Event {
            tid: 7,
            node: 2,
            parent: 1,
            depth: 1,
            start_ns: start + 1_000,
            dur_ns: 20_000 + child_pre,
            off_ns: child_pre,
            preempted_ns: child_pre,
            ..Event::default()
        };
        let parent = Event {
            tid: 7,
            node: 1,
            depth: 0,
            start_ns: start,
            dur_ns: 40_000 + parent_pre,
            off_ns: parent_pre,
            preempted_ns: parent_pre,
            ..Event::default()
        };
        (child, parent)
    }

    #[test]
    fn a_preemption_is_decided_once_in_the_part_of_the_call_it_landed_in() {
        let mut carry = Carry::default();
        let (mut child_taken, mut parent_taken, mut parent_own_taken) = (0u64, 0u64, 0u64);
        let n = 20_000;
        for i in 0..n {
            // Probes: 5 of the child's 20 µs (a quarter), 15 of the parent's own 20 µs.
            let (child, parent) = nested(i, 1_000_000, 1_500_000);
            let c = carry.taken(&child, 5_000, || None);
            let p = carry.taken(&parent, 20_000, || None);
            assert!(c == 0 || c == 1_000_000, "{c}");
            // Whatever the child took, the parent took too.
            assert!(p >= c, "{p} < {c}");
            child_taken += c;
            parent_taken += p;
            parent_own_taken += p - c;
        }
        let n = n as f64;
        assert!((child_taken as f64 / n / 1e6 - 0.25).abs() < 0.02);
        // Its own half million (preempted outside the child) at its self time's share.
        assert!((parent_own_taken as f64 / n / 5e5 - 0.75).abs() < 0.02);
        assert_eq!(parent_taken, child_taken + parent_own_taken);
    }

    #[test]
    fn a_wait_for_wprofs_own_threads_goes_out_whole() {
        let mut carry = Carry::default();
        let (mut child, mut parent) = nested(0, 1_000_000, 1_600_000);
        child.wprof_ns = 1_000_000;
        parent.wprof_ns = 1_200_000;
        // No probe time at all: only wprof's threads' share goes.
        assert_eq!(carry.taken(&child, 0, || None), 1_000_000);
        assert_eq!(carry.taken(&parent, 0, || None), 1_200_000);
        // All probe time: the rest goes too, once.
        let (mut child, mut parent) = nested(1, 1_000_000, 1_600_000);
        child.wprof_ns = 400_000;
        parent.wprof_ns = 400_000;
        assert_eq!(carry.taken(&child, 20_000, || None), 1_000_000);
        assert_eq!(carry.taken(&parent, 40_000, || None), 1_600_000);
    }

    #[test]
    fn a_lost_parent_leaves_nothing_to_the_next_one() {
        let mut carry = Carry::default();
        // Child of a parent call whose span never came (lost to a full ring): all probes.
        let (child, _) = nested(0, 1_000_000, 1_000_000);
        assert_eq!(carry.taken(&child, 20_000, || None), 1_000_000);
        // The next call of that parent, later, with no probe time of its own: nothing of its
        // preempted time is the probes' doing, the earlier child's decision included.
        let (_, parent) = nested(1, 0, 1_000_000);
        assert_eq!(carry.taken(&parent, 0, || None), 0);
    }

    #[test]
    fn a_baseline_keeps_preemptions_at_the_untraced_threads_odds() {
        // Calls of 20 µs on the CPU, 15 of them probes, preempted for 1 ms once in 100 calls:
        // traced, the thread waits 1e6 / (100 × 20e3) = 0.5 ns a ns on the CPU.
        let run = |baseline: Option<f64>| {
            let mut carry = Carry::default();
            if let Some(rate) = baseline {
                let mut b = WaitBaseline::default();
                b.by_tid.insert(7, rate);
                carry.set_baseline(b);
            }
            let n = 400_000u64;
            let kept: u64 = (0..n)
                .map(|i| {
                    let pre = if i % 100 == 0 { 1_000_000 } else { 0 };
                    let c = call(i, 20_000 + pre, pre, pre);
                    pre - carry.taken(&c, 15_000, || None)
                })
                .sum();
            (kept as f64 / n as f64, carry.traced_wait())
        };
        // No baseline: the draw keeps the program's quarter, 2.5 µs a call.
        let (kept, traced) = run(None);
        assert!((kept - 2_500.0).abs() < 150.0, "{kept}");
        assert_eq!(traced, None);
        // Untraced the thread waited 0.05 ns a ns on the CPU: its 5 µs of own time a call
        // keep 0.25 µs, a tenth of what the draw alone kept.
        let (kept, traced) = run(Some(0.05));
        assert!((kept - 250.0).abs() < 40.0, "{kept}");
        let t = traced.unwrap();
        assert_eq!(t.on_cpu, 400_000 * 20_000);
        assert_eq!(t.preempted, 4_000 * 1_000_000);
        // A thread that waited more untraced than traced keeps the draw's odds, no more.
        let (kept, _) = run(Some(0.9));
        assert!((kept - 2_500.0).abs() < 150.0, "{kept}");
        // A baseline for another thread changes nothing here.
        let mut carry = Carry::default();
        let mut b = WaitBaseline::default();
        b.by_tid.insert(8, 0.0);
        carry.set_baseline(b);
        let c = call(0, 1_020_000, 1_000_000, 1_000_000);
        assert_eq!(
            carry.taken(&c, 15_000, || None),
            Carry::default().taken(&c, 15_000, || None)
        );
    }
}
