//! The recorder's reading cost against the pairs the host has dirtied
//! (`cargo xtask bench recorder --pairs N`): with the per-folio
//! attribution, `DIRTIERS` keeps an entry per (inode, process) the host
//! dirtied, up to 65,536, long after the writes; a reading that read
//! every entry cost the recorder 0.55% of a core per 10,000 of them at a
//! reading a second. The recorder now looks up only the pairs announced
//! as changed, and the whole map once a minute.
//!
//! The measure: `wbscope record --store --interval 1` on a loop ext4 of
//! the run's own, its CPU time (/proc, 10 ms ticks) over a minute idle
//! (so that one whole reading falls in it), then again over a minute idle
//! after this process wrote a page to each of `pairs` new files and
//! synced them: `pairs` pairs in the map, none changing. The default
//! attribution (no per-folio map) is the baseline, run the same way in
//! the same run.
use std::{fs, path::Path, thread, time::Duration};

use anyhow::Context as _;

use super::{Tracer, bench_fs, store::store_dir};

/// Seconds of each idle window: a whole reading comes once a minute.
const IDLE_SECS: u64 = 60;

/// The recorder's CPU, % of a core, idle with an empty map and idle with
/// `pairs` pairs, for one attribution.
struct Idle {
    per_folio: bool,
    empty_pct: f64,
    full_pct: f64,
    write_s: f64,
}

pub(super) fn bench(binary: &Path, pairs: u64) -> anyhow::Result<String> {
    let runs = [false, true]
        .into_iter()
        .map(|per_folio| idle(binary, pairs, per_folio))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut out = format!(
        "\nReading cost with {pairs} (inode, process) pairs dirtied and then idle: \
         `record --store --interval 1`, the recorder's CPU (/proc) over {IDLE_SECS} s \
         idle before and after one process wrote a page to each of {pairs} files\n\n\
         | attribution | map empty | {pairs} pairs | writing them (s) |\n|---|---|---|---|\n"
    );
    for r in &runs {
        out.push_str(&format!(
            "| {} | {:.2}% | {:.2}% | {:.1} |\n",
            if r.per_folio {
                "per folio (`--enable dirty_folio`)"
            } else {
                "per inode (default), the baseline"
            },
            r.empty_pct,
            r.full_pct,
            r.write_s
        ));
    }
    Ok(out)
}

fn idle(binary: &Path, pairs: u64, per_folio: bool) -> anyhow::Result<Idle> {
    // 2 GiB: ext4's default of an inode per 16 KiB gives 131,072.
    let fs = bench_fs(2048, false)?;
    let (_dir, store) = store_dir()?;
    let store = store.to_string_lossy().into_owned();
    let mount = fs.mountpoint().to_string_lossy().into_owned();
    let mut args = vec![
        "record",
        "--store",
        &store,
        "--interval",
        "1",
        "--device",
        &mount,
    ];
    if per_folio {
        args.extend(["--enable", "dirty_folio"]);
    }
    let recorder = Tracer::spawn(binary, &args, None, "tracing;")?;
    let window = |recorder: &Tracer| -> anyhow::Result<f64> {
        thread::sleep(Duration::from_secs(2));
        let before = recorder.cpu_secs()?;
        for _ in 0..IDLE_SECS {
            scratchfs::signal::check_interrupted()?;
            thread::sleep(Duration::from_secs(1));
        }
        Ok((recorder.cpu_secs()? - before) * 100.0 / IDLE_SECS as f64)
    };
    let empty_pct = window(&recorder)?;
    eprintln!(
        "xtask: map reading ({}): {empty_pct:.2}% idle with an empty map; writing {pairs} files",
        if per_folio { "per folio" } else { "per inode" }
    );
    let started = std::time::Instant::now();
    let files = fs.path("files");
    fs::create_dir(&files).with_context(|| format!("making {}", files.display()))?;
    let page = [7u8; 4096];
    for i in 0..pairs {
        if i % 4096 == 0 {
            scratchfs::signal::check_interrupted()?;
        }
        let path = files.join(format!("f{i}"));
        fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
    }
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::sync() };
    let write_s = started.elapsed().as_secs_f64();
    let full_pct = window(&recorder)?;
    let out = recorder.interrupt()?;
    anyhow::ensure!(
        out.status.success(),
        "wbscope record failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(Idle {
        per_folio,
        empty_pct,
        full_pct,
        write_s,
    })
}
