//! Collect + aggregate throughput on one core, fed by a synthetic replay of ring-buffer
//! records shaped like the fixture's write path (7 phases, 3 levels). Prints events/s.
//! Run: `cargo bench --bench pipeline`.

use std::time::Instant;

use wprof::aggregate::Aggregator;
use wprof::collect::decode;
use wprof_common::{Event, EventKind};

fn bytes_of(ev: &Event) -> Vec<u8> {
    // SAFETY: Event is #[repr(C)] plain integers; viewing it as bytes is what the ring buffer
    // carries.
    unsafe {
        std::slice::from_raw_parts(
            (ev as *const Event).cast::<u8>(),
            std::mem::size_of::<Event>(),
        )
    }
    .to_vec()
}

fn main() {
    // node ids and parents of the fixture tree.
    let nodes: [(u64, u64, u32); 7] = [
        (1, 0, 0),
        (2, 1, 1),
        (3, 1, 2),
        (4, 3, 3),
        (5, 3, 4),
        (6, 1, 5),
        (7, 6, 6),
    ];
    let mut records: Vec<Vec<u8>> = nodes
        .iter()
        .map(|&(node, parent, phase)| {
            bytes_of(&Event {
                kind: EventKind::NodeDef as u32,
                node,
                parent,
                phase,
                ..Event::default()
            })
        })
        .collect();
    let calls = 400_000u64;
    for i in 0..calls {
        for &(node, parent, phase) in nodes.iter().rev() {
            let dur = 1_000 + (i * 7919 + node * 104_729) % 200_000;
            records.push(bytes_of(&Event {
                kind: EventKind::Span as u32,
                node,
                parent,
                phase,
                dur_ns: dur,
                child_ns: dur / 3,
                start_ns: i * 1000,
                ..Event::default()
            }));
        }
    }
    let names: Vec<String> = (0..7).map(|i| format!("phase{i}")).collect();
    let roles = vec![None; 7];
    let mut best = f64::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        let mut agg = Aggregator::new();
        for r in &records {
            if let Some(ev) = decode(r) {
                agg.add(&ev);
            }
        }
        let tree = agg.finish(&names, &roles, &Default::default());
        assert_eq!(tree.roots[0].count, calls);
        best = best.min(t.elapsed().as_secs_f64());
    }
    let n = records.len() as f64;
    println!(
        "collect+aggregate: {:.0} events in {:.3} s (best of 5) = {:.2} M events/s on one core",
        n,
        best,
        n / best / 1e6
    );
}
