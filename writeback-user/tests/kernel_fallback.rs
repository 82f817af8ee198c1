//! A hook whose tracepoint this kernel lacks is reported as unavailable,
//! and the tracer keeps running with the rest (root, real kernel).
mod support;

use std::{fs::File, io::Write, os::unix::fs::MetadataExt, time::Duration};

use support::LoopFs;
use wbscope::{
    collector::{Event, RingCollector},
    loader::{ProbeState, Tracer, WRITEPAGES_HOOKS},
    model::DevId,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_start_tracepoint_is_reported_and_results_still_flow() {
    let mut hooks = WRITEPAGES_HOOKS;
    hooks[0].event = "ext4_writepages_not_on_this_kernel";
    let mut tracer = Tracer::attach_hooks(&hooks).expect("attach");
    match &tracer.probes[0].state {
        ProbeState::Unavailable(why) => assert!(why.contains("not present"), "{why}"),
        other => panic!("expected unavailable, got {other:?}"),
    }
    assert_eq!(tracer.probes[1].state, ProbeState::Attached);
    assert!(tracer.any_attached());
    let mut collector = RingCollector::new(tracer.take_events().unwrap()).unwrap();

    let fs = LoopFs::new("ext4", 128);
    let (dev, ino) = tokio::task::spawn_blocking({
        let path = fs.path("data");
        move || {
            let mut f = File::create_new(&path).unwrap();
            f.write_all(&vec![7u8; 4 << 20]).unwrap();
            f.sync_all().unwrap();
            let meta = f.metadata().unwrap();
            (DevId::from_user(meta.dev()), meta.ino())
        }
    })
    .await
    .unwrap();

    let mut mine = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while mine
        .iter()
        .map(|c: &wbscope::model::CallRecord| c.pages_written)
        .sum::<i64>()
        < 1024
    {
        let drained = tokio::time::timeout_at(
            deadline,
            collector.wait_and_drain(|Event::Call(c)| {
                if c.dev == dev && c.ino == ino {
                    mine.push(c);
                }
            }),
        )
        .await;
        assert!(drained.is_ok(), "timed out; calls so far: {mine:?}");
    }
    assert_eq!(mine.iter().map(|c| c.pages_written).sum::<i64>(), 1024);
    for c in &mine {
        // Without the start tracepoint the start side is unknown.
        assert!(!c.start_seen, "{c:?}");
        assert_eq!((c.duration_ns, c.nr_to_write), (0, 0), "{c:?}");
    }
    assert!(tracer.stats().unwrap().unmatched_results >= mine.len() as u64);
}
