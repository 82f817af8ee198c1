//! wbscope's benchmarks: `cargo xtask bench` and its `writer`,
//! `small-writer` and `recorder`, which xtask hands to this binary
//! (`cargo run -p wbscope-bench -- …`). Each needs root, builds a release
//! wbscope, and writes its report to target/bench/ as well as printing it.
//!
//! `bench.rs`: the tracer's overhead (with `bench/figures.rs`), and the
//! helpers every bench shares (the loop filesystem, a running tracer,
//! medians); `bench/small_writer.rs`, `bench/fsync_storm.rs`,
//! `bench/big_host.rs`, `bench/recorder.rs` (with
//! `bench/map_reading.rs`); `bench_writer.rs`: `wbscope write` against dd
//! and fio.
mod bench;
mod bench_writer;

use std::process::ExitCode;

use anyhow::bail;
use clap::{Parser, Subcommand};
use xtask::{setup, write_report};

/// Measure the tracer's overhead (root; writes SIZE MiB per run), or
/// with `writer`, `wbscope write` against dd and fio.
///
/// Example: cargo xtask bench --size-mib 2048 --pairs 5
///
/// Example: cargo xtask bench writer --size-mib 1024 --rounds 3
#[derive(Parser)]
#[command(
    name = "xtask bench",
    bin_name = "xtask bench",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// Another benchmark than the tracer's overhead (the default).
    #[command(subcommand)]
    what: Option<BenchTarget>,
    /// MiB written (then fsynced) per run.
    #[arg(long, default_value_t = 2048)]
    size_mib: u64,
    /// Traced/untraced pairs, alternating order.
    #[arg(long, default_value_t = 5)]
    pairs: usize,
    /// Seconds of idle tracing for the idle CPU figure.
    #[arg(long, default_value_t = 10)]
    idle_secs: u64,
    /// Seconds to wait after dropping the caches before each run (as
    /// for `bench writer`).
    #[arg(long, default_value_t = 10)]
    settle_secs: u64,
    /// Seconds of `wbscope probes --cost` for the per-program floor.
    #[arg(long, default_value_t = 5)]
    floor_secs: u64,
}

#[derive(Subcommand)]
enum BenchTarget {
    /// What a program writing 4 KiB at a time feels: dd and fio
    /// randwrite, untraced against traced (default), traced with the
    /// per-folio attribution, bpftrace counting dirty folios and empty
    /// programs, in alternating pairs; medians of the per-pair ratios of
    /// the writer's wall and system time (root; needs fio, bpftrace).
    /// Report in target/bench/small-writer.md.
    ///
    /// Example: cargo xtask bench small-writer --pairs 10 --size-mib 1024
    ///          cargo xtask bench small-writer --pairs 40 --writers dd --observers trace,nothing
    SmallWriter {
        /// MiB each writer writes, 4 KiB at a time.
        #[arg(long, default_value_t = 1024)]
        size_mib: u64,
        /// Pairs per observer and writer (the order swapped every pair).
        #[arg(long, default_value_t = 10)]
        pairs: usize,
        /// Seconds between attaching (and dropping the caches) and writing.
        #[arg(long, default_value_t = 4)]
        settle_secs: u64,
        /// The writers to run, comma-separated.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "dd,fio,dd-1m"
        )]
        writers: Vec<bench::small_writer::Writer>,
        /// The observers, each paired with an untraced run, comma-separated;
        /// `nothing` pairs two untraced runs, the measure's own spread.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "trace,per-folio,bpftrace,floor,nothing"
        )]
        observers: Vec<bench::small_writer::Side>,
    },
    /// An fsync storm: writer threads each creating, writing 4 KiB to
    /// and fdatasync'ing files, untraced against `wbscope trace --json
    /// --events` in alternating pairs beside an A/A control; per
    /// writepages call, each program's BPF time against an empty program
    /// on its event, and the wbscope process's CPU (root). Report in
    /// target/bench/fsync-storm.md.
    ///
    /// Example: cargo xtask bench fsync-storm --pairs 10 --secs 5
    ///          cargo xtask bench fsync-storm --fs xfs --writers 16 --barrier
    ///          cargo xtask bench fsync-storm --profile --secs 10
    FsyncStorm {
        /// Writer threads.
        #[arg(long, default_value_t = 8)]
        writers: usize,
        /// Seconds of storm per run.
        #[arg(long, default_value_t = 5.0)]
        secs: f64,
        /// Traced/untraced pairs (and as many untraced/untraced).
        #[arg(long, default_value_t = 10)]
        pairs: usize,
        /// KiB written to each file before its fdatasync.
        #[arg(long, default_value_t = 4)]
        file_kib: usize,
        /// Mount with the filesystem's cache flushes (its default)
        /// instead of without (ext4 barrier=0, btrfs nobarrier; xfs has
        /// no such option): each fsync then waits for the host disk too.
        #[arg(long)]
        barrier: bool,
        /// The filesystem the storm writes on: ext4, xfs or btrfs.
        #[arg(long, default_value = "ext4", value_parser = parse_fs)]
        fs: scratchfs::FsType,
        /// Instead of the pairs: one traced storm of --secs under `perf
        /// record -a`, and the source lines each call program's samples
        /// fall on (from the kernel's JIT line info). Report in
        /// target/bench/fsync-storm-profile.md.
        #[arg(long)]
        profile: bool,
    },
    /// What a trace's reading costs natively against the number of
    /// cgroups and of dirty inodes: for each cgroup count, `wbscope trace
    /// --json --events` idle, while that many processes (each in a cgroup
    /// of its own) write --files one-page files, with all of them dirty
    /// and nothing written, and over their syncfs; its CPU each time,
    /// per writeback call, and every page counted once (root; the part of
    /// `cargo xtask vm-test --big-host` that needs no big host). Report in
    /// target/bench/big-host.md.
    ///
    /// Example: cargo xtask bench big-host --cgroups 10,100,1000 --files 100000
    BigHost {
        /// The cgroup counts, one run each, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "10,100,1000")]
        cgroups: Vec<u32>,
        /// One-page files in all, split evenly among the cgroups (the
        /// loop filesystem has 131,072 inodes).
        #[arg(long, default_value_t = 100_000)]
        files: u64,
        /// Seconds of each reading: idle, and with the files dirty
        /// (at most 12: they must stay younger than
        /// dirty_expire_centisecs' 30 s).
        #[arg(long, default_value_t = 10)]
        window_secs: u64,
    },
    /// The flight recorder as a service runs it: `record --store
    /// --max-size --cpu-budget` under a small-files fsync load for minutes;
    /// its memory, CPU and store size sampled as it runs, and the budget
    /// lines it kept (root). Report in target/bench/recorder.md.
    ///
    /// Example: cargo xtask bench recorder --minutes 12 --cpu-budget 2
    Recorder {
        /// Minutes of load (at least 10: ten minutes make millions of calls).
        #[arg(long, default_value_t = 12)]
        minutes: u64,
        /// The store's --max-size, MiB.
        #[arg(long, default_value_t = 64)]
        max_size_mib: u64,
        /// The recorder's --cpu-budget, % of one core (the systemd unit's).
        #[arg(long, default_value_t = 2.0)]
        cpu_budget: f64,
        /// Seconds between samples.
        #[arg(long, default_value_t = 10)]
        every_secs: u64,
        /// MiB a `dd bs=4k` writes at full speed in the budget phase,
        /// recorded unshed and under the budget (0: no such phase).
        #[arg(long, default_value_t = 4096)]
        dd_mib: u64,
        /// Files one process dirties, a page each, before the recorder's
        /// idle reading cost is measured again (per folio against the
        /// default attribution; 0: no such phase).
        #[arg(long, default_value_t = 60000)]
        pairs: u64,
    },
    /// `wbscope write`'s strategies against dd and the equivalent fio jobs
    /// on one loop-mounted ext4 (root; needs fio). Report in
    /// target/bench/writer.md.
    Writer {
        /// MiB written per run.
        #[arg(long, default_value_t = 1024)]
        size_mib: u64,
        /// Rounds over every case, in rotating order.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Let the loop device write its image through /var/tmp's page
        /// cache (losetup's default) instead of O_DIRECT: the set-up of the
        /// earlier runs, which measured that cache's writeback too, to
        /// compare.
        #[arg(long)]
        buffered_loop: bool,
        /// Seconds to wait after dropping the caches before each run, so
        /// that every run starts with the memory just freed handed back to
        /// the hypervisor (free page reporting), not only those after a
        /// long run.
        #[arg(long, default_value_t = 10)]
        settle_secs: u64,
        /// Only the cases whose label contains one of these
        /// (comma-separated), e.g. `--only uncached,DONTCACHE`; pairs are
        /// judged where both sides ran. Every case by default.
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
    },
}

/// `--fs`: a filesystem the scratch filesystems can make.
fn parse_fs(name: &str) -> Result<scratchfs::FsType, String> {
    [
        scratchfs::FsType::Ext4,
        scratchfs::FsType::Xfs,
        scratchfs::FsType::Btrfs,
    ]
    .into_iter()
    .find(|f| f.name() == name)
    .ok_or_else(|| format!("`{name}`: not ext4, xfs or btrfs"))
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    // A Ctrl-C during a bench stops it between runs and unwinds through
    // the scratch filesystems' and directories' `Drop`: nothing is left
    // mounted. (The children see the same Ctrl-C and end on their own.)
    let _signals = scratchfs::signal::SignalGuard::install();
    match cli.what {
        Some(BenchTarget::Writer {
            size_mib,
            rounds,
            buffered_loop,
            settle_secs,
            only,
        }) => {
            if !setup::is_root() {
                bail!(
                    "bench writer mounts a loop filesystem and drops the page cache: run it as root"
                );
            }
            setup::ensure_tools(setup::Scope::Bench)?;
            let binary = xtask::build(true)?;
            let report = bench_writer::bench(
                &binary,
                &bench_writer::WriterBenchOptions {
                    size_mib,
                    rounds,
                    buffered_loop,
                    settle_secs,
                    only,
                },
            )?;
            write_report("writer.md", &report)
        }
        Some(BenchTarget::SmallWriter {
            size_mib,
            pairs,
            settle_secs,
            writers,
            observers,
        }) => {
            if !setup::is_root() {
                bail!("bench small-writer drops the page cache and attaches BPF: run it as root");
            }
            setup::ensure_tools(setup::Scope::Bench)?;
            let binary = xtask::build(true)?;
            let report = bench::small_writer::bench(
                &binary,
                &bench::small_writer::SmallWriterOptions {
                    size_mib,
                    pairs,
                    settle_secs,
                    writers,
                    sides: observers,
                },
            )?;
            write_report("small-writer.md", &report)
        }
        Some(BenchTarget::FsyncStorm {
            writers,
            secs,
            pairs,
            file_kib,
            barrier,
            fs,
            profile,
        }) => {
            if !setup::is_root() {
                bail!(
                    "bench fsync-storm mounts a loop filesystem and attaches BPF: run it as root"
                );
            }
            if writers == 0 || pairs == 0 || file_kib == 0 || !secs.is_finite() || secs <= 0.0 {
                bail!(
                    "bench fsync-storm: --writers, --pairs, --file-kib and --secs must be positive"
                );
            }
            setup::ensure_tools(setup::Scope::Bench)?;
            let binary = xtask::build(true)?;
            let report = bench::fsync_storm::bench(
                &binary,
                &bench::fsync_storm::FsyncStormOptions {
                    writers,
                    secs,
                    pairs,
                    file_kib,
                    barrier,
                    fs,
                    profile,
                },
            )?;
            let name = if profile {
                "fsync-storm-profile.md"
            } else {
                "fsync-storm.md"
            };
            write_report(name, &report)
        }
        Some(BenchTarget::BigHost {
            cgroups,
            files,
            window_secs,
        }) => {
            if !setup::is_root() {
                bail!(
                    "bench big-host makes cgroups and a loop filesystem and attaches BPF: run it \
                     as root"
                );
            }
            if cgroups.is_empty() || cgroups.contains(&0) || files == 0 {
                bail!("bench big-host: --cgroups and --files must be positive");
            }
            if let Some(n) = cgroups.iter().find(|&&n| u64::from(n) > files) {
                bail!("bench big-host: --cgroups {n} is more than --files {files}");
            }
            if files > 120_000 {
                bail!(
                    "bench big-host: --files {files}: the loop filesystem has 131,072 inodes, \
                     at most 120,000 files"
                );
            }
            if !(1..=12).contains(&window_secs) {
                bail!(
                    "bench big-host: --window-secs {window_secs}: 1 to 12 (the files must stay \
                     younger than dirty_expire_centisecs)"
                );
            }
            setup::ensure_tools(setup::Scope::Bench)?;
            let binary = xtask::build(true)?;
            let report = bench::big_host::bench(
                &binary,
                &bench::big_host::BigHostOptions {
                    cgroups,
                    files,
                    window_secs,
                },
            )?;
            write_report("big-host.md", &report)
        }
        Some(BenchTarget::Recorder {
            minutes,
            max_size_mib,
            cpu_budget,
            every_secs,
            dd_mib,
            pairs,
        }) => {
            if !setup::is_root() {
                bail!("bench recorder mounts a loop filesystem and attaches BPF: run it as root");
            }
            setup::ensure_tools(setup::Scope::Bench)?;
            let binary = xtask::build(true)?;
            let report = bench::recorder::bench(
                &binary,
                &bench::recorder::RecorderOptions {
                    minutes,
                    max_size_mib,
                    cpu_budget,
                    every_secs: every_secs.max(1),
                    dd_mib,
                    pairs,
                },
            )?;
            write_report("recorder.md", &report)
        }
        None => {
            if !setup::is_root() {
                bail!("the benchmark mounts a loop filesystem and attaches BPF: run it as root");
            }
            setup::ensure_tools(setup::Scope::Bench)?;
            let binary = xtask::build(true)?;
            let report = bench::bench(
                &binary,
                &bench::BenchOptions {
                    size_mib: cli.size_mib,
                    pairs: cli.pairs,
                    idle_secs: cli.idle_secs,
                    settle_secs: cli.settle_secs,
                    floor_secs: cli.floor_secs,
                },
            )?;
            write_report("results.md", &report)
        }
    }
}
