//! `cargo xtask bench big-host`: what a trace's reading costs natively
//! against the number of cgroups and of dirty inodes, the part of the
//! big-host load (`cargo xtask vm-test --big-host`) that does not need a
//! host of many CPUs, measured on this one's own CPUs instead of under
//! TCG.
//!
//! For each cgroup count N: a fresh loop ext4, `wbscope trace --json
//! --events --interval 1` attached, its CPU (/proc/PID/schedstat) over an
//! idle stretch; then N writer processes, each in a cgroup of its own
//! under a parent this bench makes, writing `files / N` one-page files;
//! its CPU while all those inodes stay dirty and nothing is written
//! (they are under the dirty limits and younger than
//! `dirty_expire_centisecs`, and the device has written back before:
//! [`WARM_UP_MIB`]; no flusher takes them); then a `syncfs` of
//! the filesystem, and its CPU over it, per writeback call. The trace's
//! call lines must hold every page once: their pages written on the
//! bench's device add up to the files.
//!
//! Where cgroup v2 has the memory and io controllers, the cgroups have
//! them (a memory cgroup's writeback each, cgroup writeback: the guests'
//! load); where the memory controller is bound to cgroup v1 (this host),
//! they are plain cgroup v2 directories: each writer still has a cgroup
//! id of its own, the inodes' owner is the root's writeback. The report
//! says which.
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use scratchfs::{FsType, ScratchFs};

use super::Tracer;

pub(crate) struct BigHostOptions {
    /// The cgroup counts, one run each.
    pub(crate) cgroups: Vec<u32>,
    /// One-page files in all, split evenly among the cgroups.
    pub(crate) files: u64,
    /// Seconds of each idle and held-dirty reading.
    pub(crate) window_secs: u64,
}

/// The longest the writers may take: the held-dirty reading must end
/// before the first inode is `dirty_expire_centisecs` old (30 s by
/// default, and then the periodic writeback takes it).
const WRITE_LIMIT: Duration = Duration::from_secs(15);

/// Written and synced on each run's new filesystem before the trace,
/// so that the device has a share of the recent writeback. Background
/// writeback runs for a device whose dirty pages pass its share of the
/// background threshold (`wb_over_bg_thresh()`: `wb_calc_thresh()`, the
/// threshold by the device's fraction of recent writeback completions,
/// mm/page-writeback.c). A loop device that had written nothing lately
/// had none: with the files dirty, a background pass queued every inode
/// for writeback and the next periodic pass wrote what it left, a
/// periodic pass taking whatever a pass before queued
/// (`wb_writeback()` queues aged inodes only into an empty `b_io`,
/// fs/fs-writeback.c). Here the first run's 100,000 files went 12 s
/// after they were written (Dirty 431 → 121 MiB over the held reading);
/// a second run on the same device, after the first's sync, kept them
/// all (410 → 418 MiB).
const WARM_UP_MIB: usize = 256;

/// One run's figures.
struct Run {
    cgroups: u32,
    files_each: u64,
    idle_ms_s: f64,
    write_s: f64,
    write_ms_s: f64,
    held_ms_s: f64,
    /// Dirty memory (MiB) at the held reading's start and end.
    held_dirty_mib: (f64, f64),
    sync_s: f64,
    sync_ms_s: f64,
    calls: u64,
    us_per_call: f64,
    pages: i64,
    causes: String,
    lost: u64,
    rss_mib: f64,
}

pub(crate) fn bench(binary: &Path, opts: &BigHostOptions) -> anyhow::Result<String> {
    let root = cgroup2_root()?;
    let memory = controllers(&root)?;
    let out_dir = tempfile::Builder::new()
        .prefix("wbscope-big-host.")
        .tempdir_in("/var/tmp")
        .context("making the run's directory")?;
    let mut runs = Vec::new();
    for &n in &opts.cgroups {
        let files_each = opts.files / u64::from(n);
        eprintln!("xtask: big host: {n} cgroups x {files_each} one-page files");
        runs.push(run(
            binary,
            opts,
            &root,
            memory,
            n,
            files_each,
            out_dir.path(),
        )?);
        scratchfs::signal::check_interrupted()?;
    }
    Ok(report(opts, memory, &runs))
}

/// Where cgroup v2 is mounted (/proc/self/mounts).
fn cgroup2_root() -> anyhow::Result<PathBuf> {
    let mounts = fs::read_to_string("/proc/self/mounts").context("reading /proc/self/mounts")?;
    mounts
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(2) == Some(&"cgroup2")).then(|| PathBuf::from(f[1]))
        })
        .context("no cgroup v2 mounted: the writers' cgroups are made there")
}

/// Whether cgroup v2's root hands the memory and io controllers to its
/// children (cgroup writeback needs both).
fn controllers(root: &Path) -> anyhow::Result<bool> {
    let on = fs::read_to_string(root.join("cgroup.subtree_control"))
        .with_context(|| format!("reading {}/cgroup.subtree_control", root.display()))?;
    let words: Vec<&str> = on.split_whitespace().collect();
    Ok(words.contains(&"memory") && words.contains(&"io"))
}

/// A parent cgroup of this run's own with `n` children; all removed when
/// dropped (after their processes ended: a cgroup with a live process
/// cannot be removed).
struct Cgroups {
    parent: PathBuf,
    children: Vec<PathBuf>,
}

impl Cgroups {
    fn make(root: &Path, n: u32, memory: bool) -> anyhow::Result<Cgroups> {
        let parent = root.join(format!("wbscope-big-host.{}", std::process::id()));
        fs::create_dir(&parent).with_context(|| format!("making {}", parent.display()))?;
        let mut made = Cgroups {
            parent,
            children: Vec::new(),
        };
        if memory {
            fs::write(made.parent.join("cgroup.subtree_control"), "+memory +io")
                .context("handing memory and io to the run's cgroups")?;
        }
        for i in 0..n {
            let child = made.parent.join(format!("w{i}"));
            fs::create_dir(&child).with_context(|| format!("making {}", child.display()))?;
            made.children.push(child);
        }
        Ok(made)
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        for c in self.children.iter().chain([&self.parent]) {
            if let Err(e) = fs::remove_dir(c) {
                eprintln!("xtask: big host: removing {}: {e}", c.display());
            }
        }
    }
}

/// One writer: joins cgroup `$0`, then writes `$1` one-page files into
/// `$2`, each by the shell's own printf (a process per file would
/// measure process starts).
const WRITER: &str = r#"echo $$ > "$0/cgroup.procs" || exit 1
i=0
while [ "$i" -lt "$1" ]; do
    printf %s "$PAGE" > "$2/f$i" || exit 1
    i=$((i + 1))
done"#;

/// The tracer's CPU, ms a second, over `secs` from now.
fn cpu_over(tracer: &Tracer, secs: u64) -> anyhow::Result<f64> {
    let (t0, c0) = (Instant::now(), tracer.cpu_ns()?);
    std::thread::sleep(Duration::from_secs(secs));
    let ns = tracer.cpu_ns()?.saturating_sub(c0);
    Ok(ns as f64 / 1e6 / t0.elapsed().as_secs_f64())
}

fn run(
    binary: &Path,
    opts: &BigHostOptions,
    root: &Path,
    memory: bool,
    n: u32,
    files_each: u64,
    out_dir: &Path,
) -> anyhow::Result<Run> {
    // 2 GiB: ext4's inode per 16 KiB gives 131,072 inodes.
    let fs = ScratchFs::builder(FsType::Ext4, 2048)
        .direct_io(true)
        .create()
        .context("making the benchmark's loop filesystem")?;
    let groups = Cgroups::make(root, n, memory)?;
    let dirs: Vec<PathBuf> = (0..n)
        .map(|i| {
            let d = fs.path(format!("w{i}"));
            fs::create_dir(&d).with_context(|| format!("making {}", d.display()))?;
            Ok(d)
        })
        .collect::<anyhow::Result<_>>()?;
    let warm_up = fs.path("warm-up");
    let mib = vec![0xa5u8; 1 << 20];
    let mut f =
        fs::File::create(&warm_up).with_context(|| format!("creating {}", warm_up.display()))?;
    for _ in 0..WARM_UP_MIB {
        std::io::Write::write_all(&mut f, &mib)
            .with_context(|| format!("writing {}", warm_up.display()))?;
    }
    drop(f);
    // The directories' own blocks and the warm-up written before the
    // trace: what it sees of the device is then the files' pages.
    sync_fs(fs.mountpoint())?;
    let out = out_dir.join("trace.json");
    let file = fs::File::create(&out).with_context(|| format!("creating {}", out.display()))?;
    let tracer = Tracer::spawn_to(
        binary,
        &[
            "trace",
            "--json",
            "--events",
            "--interval",
            "1",
            "--max-event-rate",
            "1000000000",
        ],
        Stdio::from(file),
        None,
        "tracing;",
    )?;
    std::thread::sleep(Duration::from_secs(2));
    let idle_ms_s = cpu_over(&tracer, opts.window_secs)?;

    let (t0, c0) = (Instant::now(), tracer.cpu_ns()?);
    let page = "x".repeat(4096);
    let mut writers: Vec<Child> = Vec::new();
    for (cg, dir) in groups.children.iter().zip(&dirs) {
        let child = wbscope_programs::DASH
            .command()
            .args(["-c", WRITER])
            .arg(cg)
            .arg(files_each.to_string())
            .arg(dir)
            .env("PAGE", &page)
            .stdin(Stdio::null())
            .spawn()
            .context("starting a writer (dash)")?;
        writers.push(child);
    }
    let mut failed = 0;
    for mut w in writers {
        if !w.wait().context("waiting for a writer")?.success() {
            failed += 1;
        }
    }
    let write_s = t0.elapsed().as_secs_f64();
    let write_ms_s = tracer.cpu_ns()?.saturating_sub(c0) as f64 / 1e6 / write_s;
    if failed > 0 {
        bail!("{failed} of {n} writers failed");
    }
    if t0.elapsed() > WRITE_LIMIT {
        bail!(
            "the writers took {write_s:.1} s: past {} s the first inodes near \
             dirty_expire_centisecs, and the held-dirty reading would see them written",
            WRITE_LIMIT.as_secs()
        );
    }
    let dirty_before_kib = dirty_kib()?;
    let held_ms_s = cpu_over(&tracer, opts.window_secs)?;
    let dirty_after_kib = dirty_kib()?;

    let (t0, c0) = (Instant::now(), tracer.cpu_ns()?);
    sync_fs(fs.mountpoint())?;
    let sync_s = t0.elapsed().as_secs_f64();
    // The calls the sync made reach the process at its next drain.
    std::thread::sleep(Duration::from_secs(1));
    let sync_ns = tracer.cpu_ns()?.saturating_sub(c0);
    let rss_mib = tracer.peak_rss_kb().unwrap_or(0) as f64 / 1024.0;
    tracer.stop_trace()?;
    let (dev_major, dev_minor) = fs.dev();
    let Read {
        calls,
        pages,
        causes,
        summary,
    } = read_trace(&out, &format!("{dev_major}:{dev_minor}"))?;
    let _ = fs::remove_file(&out);
    drop(groups);
    Ok(Run {
        cgroups: n,
        files_each,
        idle_ms_s,
        write_s,
        write_ms_s,
        held_ms_s,
        held_dirty_mib: (
            dirty_before_kib as f64 / 1024.0,
            dirty_after_kib as f64 / 1024.0,
        ),
        sync_s,
        sync_ms_s: sync_ns as f64 / 1e6 / (sync_s + 1.0),
        calls,
        us_per_call: if calls == 0 {
            0.0
        } else {
            sync_ns as f64 / 1e3 / calls as f64
        },
        pages,
        causes,
        lost: summary["lost_records"].as_u64().unwrap_or(0)
            + summary["lost_dirtyings"].as_u64().unwrap_or(0),
        rss_mib,
    })
}

/// The host's dirty page cache now (/proc/meminfo `Dirty:`, KiB): whether
/// the files stayed dirty through the held reading, or the kernel's own
/// writeback took them meanwhile.
fn dirty_kib() -> anyhow::Result<u64> {
    writer_core::meminfo::sample()
        .map(|levels| levels.dirty_kib)
        .context("reading /proc/meminfo")
}

/// syncfs(2) of the filesystem at `dir`.
fn sync_fs(dir: &Path) -> anyhow::Result<()> {
    let f = fs::File::open(dir).with_context(|| format!("opening {}", dir.display()))?;
    // SAFETY: a descriptor this function holds open.
    if unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&f)) } != 0 {
        return Err(std::io::Error::last_os_error()).context("syncfs");
    }
    Ok(())
}

/// What the trace's lines say of the run.
struct Read {
    /// Call lines on the bench's device.
    calls: u64,
    /// Their pages written.
    pages: i64,
    /// Their causes, most first: `cause calls`.
    causes: String,
    summary: serde_json::Value,
}

/// The call lines on `dev`, their pages written and causes, and the
/// summary line.
fn read_trace(out: &Path, dev: &str) -> anyhow::Result<Read> {
    let text = fs::read_to_string(out).with_context(|| format!("reading {}", out.display()))?;
    let mut calls = 0;
    let mut pages = 0;
    let mut causes: std::collections::BTreeMap<String, u64> = Default::default();
    let mut summary = None;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).context("a trace line")?;
        if v["type"] == "call" && v["dev"] == dev {
            calls += 1;
            pages += v["pages_written"].as_i64().unwrap_or(0);
            *causes
                .entry(v["cause"].as_str().unwrap_or("?").to_string())
                .or_default() += 1;
        } else if v["type"] == "summary" {
            summary = Some(v);
        }
    }
    let mut causes: Vec<(String, u64)> = causes.into_iter().collect();
    causes.sort_by_key(|c| std::cmp::Reverse(c.1));
    Ok(Read {
        calls,
        pages,
        causes: causes
            .iter()
            .map(|(c, n)| format!("{c} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        summary: summary.context("no summary line from wbscope trace")?,
    })
}

fn report(opts: &BigHostOptions, memory: bool, runs: &[Run]) -> String {
    let mut out = format!(
        "big host, natively: `wbscope trace --json --events --interval 1`, its CPU \
         (/proc/PID/schedstat) idle over {w} s, while N processes each in a cgroup of its own \
         write {files} one-page files in all on a loop ext4, over {w} s with all of them dirty \
         and nothing written, and over the filesystem's syncfs; the cgroups {mem}.\n\n\
         | cgroups | files each | idle ms/s | writing: s, ms/s | {files} inodes dirty, held: ms/s \
         (host's Dirty MiB at its start → end) | syncfs: s, ms/s | calls on the device (by cause) | µs per call | pages written / files \
         | records lost | peak RSS MiB |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
        w = opts.window_secs,
        files = opts.files,
        mem = if memory {
            "with the memory and io controllers (cgroup writeback)"
        } else {
            "without controllers (the memory controller is bound to cgroup v1 here): \
             each writer has a cgroup id of its own, the inodes are the root writeback's"
        },
    );
    for r in runs {
        out.push_str(&format!(
            "| {} | {} | {:.2} | {:.1}, {:.2} | {:.2} ({:.0} → {:.0}) | {:.1}, {:.2} | {} ({}) | {:.2} | {} / {} | {} | {:.1} |\n",
            r.cgroups,
            r.files_each,
            r.idle_ms_s,
            r.write_s,
            r.write_ms_s,
            r.held_ms_s,
            r.held_dirty_mib.0,
            r.held_dirty_mib.1,
            r.sync_s,
            r.sync_ms_s,
            r.calls,
            r.causes,
            r.us_per_call,
            r.pages,
            r.files_each * u64::from(r.cgroups),
            r.lost,
            r.rss_mib,
        ));
    }
    out
}
