//! `record --cpu-budget` against the running kernel: a 4 KiB
//! buffered writer at full speed under the per-folio attribution, with a
//! budget the recorder cannot keep unshed, so that it sheds. The unit tests
//! of crates/model/src/budget.rs cover the ladder's arithmetic (steps, bounds, the
//! way back); this proves what the kernel side does with it.

use std::time::Duration;

use crate::support::{LoopFs, replay_json, start_record};
use serde_json::Value;

/// 256 MiB in 4 KiB pages.
const PAGES: u64 = 65536;

/// `record --store STORE --interval 0.5 --device MOUNT EXTRA` on `fs`,
/// `work` run after `settle` (intervals over the budget before it), then
/// stopped with SIGINT a second after: the store's interval lines.
fn recorded(
    fs: &LoopFs,
    store: &std::path::Path,
    extra: &[&str],
    settle: Duration,
    work: impl FnOnce(),
) -> Vec<Value> {
    let mount = fs.mountpoint.display().to_string();
    let store_arg = store.display().to_string();
    let mut args = vec![
        "--store",
        &store_arg,
        "--interval",
        "0.5",
        "--device",
        &mount,
    ];
    args.extend_from_slice(extra);
    let mut rec = start_record(&args);
    std::thread::sleep(settle);
    work();
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: plain syscall on our own child.
    assert_eq!(unsafe { libc::kill(rec.id() as i32, libc::SIGINT) }, 0);
    assert!(rec.wait().expect("record").success());
    replay_json(store)
        .into_iter()
        .filter(|l| l["type"] == "interval")
        .collect()
}

/// The shed figures are marked in every interval (`budget`: what was
/// sampled and at what rate; each owner's `pages_dirtied_error`), every
/// interval over the budget raised the sampling for the next one (by as
/// many halvings as it was over) until
/// the ladder's top, and dd's sampled `pages_dirtied` add up to the 65536
/// pages it dirtied within twice the 95% half-width the lines state (about
/// 4 standard deviations: a false failure once in ~15,000 runs).
#[test]
fn a_tight_budget_samples_the_per_folio_counts_and_says_so() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 512);
    let store = fs.path("store");
    let data = fs.path("data");
    let mut dd_pid = 0;
    // A few intervals over the budget before the write: sampling is on.
    let extra = ["--enable", "dirty_folio", "--cpu-budget", "0.2"];
    let intervals = recorded(&fs, &store, &extra, Duration::from_secs(2), || {
        let dd = wbscope_programs::DD
            .command()
            .arg("if=/dev/zero")
            .arg(format!("of={}", data.display()))
            .args(["bs=4k", &format!("count={PAGES}"), "status=none"])
            .spawn()
            .expect("dd");
        dd_pid = u64::from(dd.id());
        assert!(dd.wait_with_output().expect("dd").status.success());
    });
    assert!(intervals.len() >= 6, "{intervals:#?}");
    let mut estimate = 0u64;
    let mut variance = 0f64;
    for (i, line) in intervals.iter().enumerate() {
        let budget = &line["budget"];
        assert_eq!(budget["budget_pct"], 0.2, "{line}");
        let one_in = budget["dirty_folio_1_in"]
            .as_u64()
            .expect("dirty_folio_1_in");
        assert!(budget["cpu_pct"].as_f64().unwrap() >= budget["bpf_pct"].as_f64().unwrap());
        if let Some(next) = intervals.get(i + 1)
            && budget["cpu_pct"].as_f64().unwrap() > 0.2
            && one_in < 64
        {
            let next_in = next["budget"]["dirty_folio_1_in"].as_u64().unwrap();
            // As many steps as halvings would bring the interval under
            // the budget, at least one (model/budget.rs); a little slack
            // for the printed figure's rounding at a power of two.
            let halvings = (budget["cpu_pct"].as_f64().unwrap() / 0.2).log2();
            let step = |h: f64| (one_in << (h.ceil().max(1.0) as u32).min(6)).min(64);
            assert!(
                (step(halvings - 0.01)..=step(halvings + 0.01)).contains(&next_in),
                "{halvings:.2} halvings up after {line}: 1 in {next_in}"
            );
        }
        for o in line["owners"].as_array().into_iter().flatten() {
            if o["pid"] != dd_pid {
                continue;
            }
            let pages = o["pages_dirtied"].as_u64().unwrap();
            estimate += pages;
            if one_in > 1 {
                let err = o["pages_dirtied_error"]
                    .as_f64()
                    .expect("a sampled count states its error");
                variance += (err / 1.96).powi(2);
            } else {
                assert!(o.get("pages_dirtied_error").is_none(), "{o}");
            }
        }
    }
    let sampled = intervals
        .iter()
        .any(|l| l["budget"]["dirty_folio_1_in"].as_u64() > Some(1));
    assert!(sampled, "a 0.2% budget must shed: {intervals:#?}");
    let half_width = 1.96 * variance.sqrt();
    assert!(
        estimate.abs_diff(PAGES) as f64 <= 2.0 * half_width + 64.0,
        "dd dirtied {PAGES} pages, the sampled counts say {estimate} ± {half_width:.0}"
    );
    eprintln!("dd: {estimate} pages estimated ± {half_width:.0} (95%), {PAGES} dirtied");
}

/// Small files written and fsynced one after another on a journaled ext4.
const FILES: u64 = 400;

/// The call sample in the kernel (the budget's second step): under a
/// budget no recorder keeps, the ext4 calls of 400 fsynced 4 KiB files
/// are drawn into the sample one in up to 1024; the others leave no
/// record but are counted with their pages, so the interval lines' pages
/// add up to exactly the 400 pages written (each file's one page written
/// once, by its fsync or by the flusher before it), the store holds only
/// the drawn calls, and the lines say how many were left out. The store
/// is on a filesystem of its own, so that its own writeback is not
/// counted.
#[test]
fn the_kernel_samples_the_calls_and_the_totals_stay_exact() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 256);
    let store_fs = LoopFs::new("ext4", 64);
    let store = store_fs.path("store");
    let store_arg = store.display().to_string();
    let mount = fs.mountpoint.display().to_string();
    let mut rec = start_record(&[
        "--store",
        &store_arg,
        "--cpu-budget",
        "0.001",
        "--interval",
        "0.25",
        "--device",
        &mount,
    ]);
    // Over the budget at every interval (the recorder's own CPU alone is
    // more): one step a quarter second, the top (1 in 1024) after 2.5 s.
    std::thread::sleep(Duration::from_secs(4));
    for i in 0..FILES {
        let mut f = std::fs::File::create_new(fs.path(&format!("f{i}"))).expect("create");
        std::io::Write::write_all(&mut f, &[7u8; 4096]).expect("write");
        f.sync_all().expect("fsync");
    }
    std::thread::sleep(Duration::from_secs(1));
    // SAFETY: plain syscall on our own child.
    assert_eq!(unsafe { libc::kill(rec.id() as i32, libc::SIGINT) }, 0);
    assert!(rec.wait().expect("record").success());

    let lines = replay_json(&store);
    let of = |kind: &'static str| lines.iter().filter(move |l| l["type"] == kind);
    let sum = |key: &str| -> u64 {
        of("interval")
            .map(|l| l.get(key).and_then(Value::as_u64).unwrap_or(0))
            .sum()
    };
    let (calls, pages, left_out) = (sum("calls"), sum("pages_written"), sum("calls_sampled_out"));
    let records = of("call").count() as u64;
    assert_eq!(pages, FILES, "every page written counted: {calls} calls");
    assert!(calls >= FILES, "{calls} calls for {FILES} fsyncs");
    assert!(
        left_out >= calls / 2,
        "at 1 in 1024, most calls are left out: {left_out} of {calls}"
    );
    // Every call drawn has its record (no rate gate at these rates).
    assert_eq!(records, calls - left_out, "{records} records");
    let one_in = of("interval")
        .filter_map(|l| l["budget"]["calls_1_in"].as_u64())
        .max();
    assert_eq!(one_in, Some(1024), "the ladder's top was reached");
    // Over the budget at every interval: at the top, and only there, a
    // line says nothing is left to shed.
    for l in of("interval") {
        let top = l["budget"]["calls_1_in"].as_u64() == Some(1024);
        assert_eq!(
            l["budget"]["at_floor"].as_bool().unwrap_or(false),
            top,
            "{l}"
        );
    }
    // The sampled-out pages are part of the lines' pages, and no line
    // without sampling says it left calls out.
    for l in of("interval") {
        let out = l
            .get("calls_sampled_out")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        assert!(out <= l["calls"].as_u64().unwrap(), "{l}");
        if l["budget"]["calls_1_in"].as_u64() == Some(1) {
            assert_eq!(out, 0, "{l}");
        }
    }
    eprintln!("{calls} calls, {left_out} left out of the sample, {records} records, {pages} pages");
}

/// The block programs are the ladder's first step: under a budget no
/// recorder keeps, a recorder with `--enable device_io` sheds them at the
/// end of its first interval. Each interval they were shed in says so;
/// its device lines are /proc/diskstats's alone — no histogram, though
/// the writer's disk had requests in it: the programs counted nothing —
/// and its ledger has no device classes, with the reason.
#[test]
fn a_tight_budget_sheds_the_block_programs_first_and_says_so() {
    let _file = crate::support::file_group(module_path!());
    let fs = LoopFs::new("ext4", 512);
    let store = fs.path("store");
    let data = fs.path("data");
    let extra = ["--enable", "device_io", "--cpu-budget", "0.01"];
    let intervals = recorded(&fs, &store, &extra, Duration::from_millis(1500), || {
        let dd = wbscope_programs::DD
            .command()
            .arg("if=/dev/zero")
            .arg(format!("of={}", data.display()))
            .args(["bs=1M", "count=64", "conv=fsync", "status=none"])
            .output()
            .expect("dd");
        assert!(dd.status.success());
    });
    // The first interval ran with the programs: its line says what was
    // in force, not the step taken at its end.
    assert!(
        intervals[0]["budget"].get("device_io_shed").is_none(),
        "{}",
        intervals[0]
    );
    let shed: Vec<&Value> = intervals
        .iter()
        .filter(|l| l["budget"]["device_io_shed"] == true)
        .collect();
    assert!(shed.len() >= 4, "{intervals:#?}");
    let disk = crate::support::disk_majmin(&fs.device);
    let mut disk_written = 0;
    for (i, l) in shed.iter().enumerate() {
        let why = l["ledger"]["classes_unmeasured"].as_str().unwrap_or("");
        assert!(why.contains("CPU budget"), "{l}");
        for d in l["devices"].as_array().expect("devices") {
            // The shed is written after the interval before was read
            // (capture session.rs): requests completed in between are
            // counted, and read with the first shed interval.
            if i > 0 {
                assert_eq!(d["request_bytes"], serde_json::json!([]), "{l}");
            }
            assert!(d["diskstats"].is_object(), "{l}");
            if d["dev"] == disk.as_str() {
                disk_written += d["diskstats"]["bytes"].as_u64().unwrap_or(0);
            }
        }
        let row = l["ledger"]["devices"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["dev"] == disk.as_str());
        if let Some(row) = row {
            assert!(row.get("journal").is_none(), "{row}");
        }
    }
    // The 64 MiB reached the disk while the programs were shed.
    assert!(disk_written >= 64 << 20, "{disk_written} bytes: {shed:#?}");
}
