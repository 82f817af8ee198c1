//! `wbscope write`: run the writer-core engine from the command line.
//!
//! Raw arguments are validated into a `WriterConfig` before anything runs
//! (ripgrep's pattern). Bad input prints one line `wbscope: error: ...` and
//! exits 2; a failure while writing (ENOSPC, EIO, a verify mismatch) prints
//! the partial report, then one error line, and exits 1; SIGINT, SIGTERM
//! and SIGHUP stop the run cleanly (files removed), print the partial
//! report and exit 128 + the signal's number, as the shell reports a
//! process the signal killed (130, 143, 129).
use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::sync::{Arc, mpsc};
use std::time::Duration;

use anyhow::Context as _;
use writer_core::{
    ByteSize, Event, FileSync, Observer, Report, RunStatus, SmallFiles, Strategy, Writer,
    WriterConfig, WriterSpec, parse_size, stats::LatencySummary,
};

use crate::cli::WriteArgs;
use wbscope_model::units;
use wbscope_sys as sys;

fn size_arg(flag: &str, value: &str) -> Result<u64, String> {
    parse_size(value).map_err(|e| format!("--{flag}: {e}"))
}

/// Turns the arguments into a validated configuration (no I/O).
pub(crate) fn config_from_args(args: &WriteArgs) -> Result<WriterConfig, String> {
    let mut spec = WriterSpec {
        dirs: args.dirs.clone(),
        chunk: size_arg("chunk", &args.chunk)?,
        files: args.files,
        jobs: args.jobs,
        window: args.window,
        qd: args.qd,
        uncached: args.uncached,
        fallocate: args.fallocate,
        noatime: args.noatime,
        datasync: args.datasync,
        direct_io: args.direct_io,
        drop_behind: args.drop_behind,
        verify: args.verify,
        keep: args.keep,
        skip_space_check: args.no_space_check,
        ..WriterSpec::default()
    };
    if let Some(seed) = args.seed {
        spec.seed = seed;
    }
    if let Some(rate) = &args.rate {
        let r = rate.trim();
        let r = r
            .strip_suffix("/s")
            .or_else(|| r.strip_suffix("/S"))
            .unwrap_or(r);
        spec.rate = Some(size_arg("rate", r)?);
    }
    match args.small_files {
        Some(count) => {
            if let Some(s) = &args.strategy {
                return Err(format!(
                    "--strategy {s} does not apply to --small-files (use --file-sync)"
                ));
            }
            let policy: FileSync = args
                .file_sync
                .parse()
                .map_err(|e| format!("--file-sync: {e}"))?;
            spec.small_files = Some(SmallFiles::new(count, policy));
        }
        None => {
            let size = args
                .size
                .as_deref()
                .ok_or("missing --size (or use --small-files N)")?;
            spec.size = size_arg("size", size)?;
            let strategy = args
                .strategy
                .as_deref()
                .ok_or("missing --strategy (buffered, fsync-end, fdatasync-chunk, srf-pipelined, direct, uring, uncached, uring-buffered)")?;
            spec.strategy = strategy.parse::<Strategy>().map_err(|e| e.to_string())?;
        }
    }
    WriterConfig::new(spec).map_err(|e| e.to_string())
}

/// Forwards only the once-a-second ticks, the one event this command shows.
/// Passing every chunk and sync event through the channel woke the waiting
/// main thread up to six times per chunk (a futex wake and a context switch
/// each: 4973 voluntary switches for 2048 chunks of srf-pipelined), CPU taken
/// from the writer on a small machine.
struct TicksOnly(mpsc::Sender<Event>);

impl Observer for TicksOnly {
    fn on_event(&self, event: &Event) {
        if matches!(event, Event::Tick { .. }) {
            let _ = self.0.send(event.clone());
        }
    }
}

fn usage_error(msg: &str) -> ExitCode {
    eprintln!("wbscope: error: {msg}");
    ExitCode::from(2)
}

pub(crate) fn run(args: &WriteArgs) -> anyhow::Result<ExitCode> {
    let cfg = match config_from_args(args) {
        Ok(c) => c,
        Err(msg) => return Ok(usage_error(&msg)),
    };
    let (tx, rx) = mpsc::channel::<Event>();
    let writer = Writer::new(cfg).with_observer(Arc::new(TicksOnly(tx)));
    // Before the plan below, which allocates per file.
    if let Err(e) = writer.check_memory() {
        return Ok(usage_error(&e.to_string()));
    }
    let total: u64 = writer.plan().iter().flatten().map(|f| f.size).sum();
    let live = writer.tunables();
    let progress = std::io::stderr().is_terminal();
    let _signals = sys::SignalGuard::install();
    let result = std::thread::scope(|s| {
        let run = s.spawn(|| writer.run());
        let mut shown = false;
        loop {
            if sys::interrupted() {
                live.request_stop();
            }
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(Event::Tick {
                    elapsed,
                    bytes,
                    bytes_last_second,
                }) if progress => {
                    print_progress(elapsed, bytes, bytes_last_second, total);
                    shown = true;
                }
                Ok(_) => {}
                Err(_) if run.is_finished() => break,
                Err(_) => {}
            }
        }
        if shown {
            eprint!("\r\x1b[2K");
        }
        run.join()
    });
    let result = result.map_err(|_| anyhow::anyhow!("the writer thread panicked"))?;
    match result {
        Ok(report) => {
            print_report(&report, args.json)?;
            Ok(match report.status {
                RunStatus::Interrupted => {
                    let signal = sys::caught_signal().unwrap_or(libc::SIGINT);
                    ExitCode::from(128 + u8::try_from(signal).unwrap_or(0))
                }
                _ => ExitCode::SUCCESS,
            })
        }
        Err(failure) => {
            if let Some(partial) = &failure.partial {
                print_report(partial, args.json)?;
            }
            eprintln!("wbscope: error: {}", failure.error);
            Ok(if failure.error.is_usage() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

fn print_progress(elapsed: Duration, bytes: u64, last: u64, total: u64) {
    const WIDTH: usize = 30;
    let frac = if total == 0 {
        0.0
    } else {
        (bytes as f64 / total as f64).min(1.0)
    };
    let filled = (frac * WIDTH as f64) as usize;
    let bar = format!("{}{}", "#".repeat(filled), ".".repeat(WIDTH - filled));
    let mut err = std::io::stderr().lock();
    let _ = write!(
        err,
        "\r\x1b[2K[{bar}] {:5.1}%  {:.2}/{:.2} GB  {:.1} MB/s  {:.0} s",
        frac * 100.0,
        bytes as f64 / 1e9,
        total as f64 / 1e9,
        last as f64 / 1e6,
        elapsed.as_secs_f64()
    );
    let _ = err.flush();
}

fn print_report(r: &Report, json: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        // Serialised whole before the first byte goes out: a report that
        // cannot be serialised is an error line, never a cut object.
        let text = serde_json::to_string(r).context("serialising the report")?;
        writeln!(out, "{text}")?;
    } else {
        out.write_all(human_report(r).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

fn latency_line(name: &str, l: &LatencySummary) -> String {
    format!(
        "  {name:<18}p50 {:>10}  p99 {:>10}  max {:>10}  ({} calls)\n",
        units::us(l.p50),
        units::us(l.p99),
        units::us(l.max),
        l.count
    )
}

/// The report as an aligned table.
pub(crate) fn human_report(r: &Report) -> String {
    let mut s = String::new();
    let status = match r.status {
        RunStatus::Completed => "completed",
        RunStatus::Interrupted => "INTERRUPTED",
        RunStatus::Failed => "FAILED",
    };
    match (r.file_bytes, r.file_sync) {
        (Some(size), _) => s.push_str(&format!(
            "wbscope write: {} ({status}), {} job(s) x {} file(s) x {}, chunk {}{}{}\n",
            r.strategy,
            r.jobs,
            r.files_planned / u64::from(r.jobs.max(1)),
            ByteSize(size),
            ByteSize(r.chunk_bytes),
            match r.strategy.as_str() {
                "srf-pipelined" => format!(", window {}", r.window),
                "uring" | "uring-buffered" => format!(", qd {}", r.qd),
                _ => String::new(),
            },
            match (r.drop_behind, r.rwf_dontcache) {
                (true, _) => ", drop-behind",
                (_, true) => ", RWF_DONTCACHE",
                _ => "",
            }
        )),
        (None, policy) => s.push_str(&format!(
            "wbscope write: small files ({status}), {} files, file-sync {}, {} job(s), chunk {}\n",
            r.files_planned,
            policy.map(|p| p.name()).unwrap_or("none"),
            r.jobs,
            ByteSize(r.chunk_bytes)
        )),
    }
    if let Some(e) = &r.error {
        s.push_str(&format!("  {:<18}{e}\n", "error"));
    }
    s.push_str(&format!(
        "  {:<18}{} bytes ({:.3} GB), {} file(s), in {:.2} s\n",
        "written",
        r.bytes,
        r.bytes as f64 / 1e9,
        r.files_written,
        r.elapsed_s
    ));
    s.push_str(&format!(
        "  {:<18}{:.1} MB/s written, {}\n",
        "throughput",
        r.write_mb_s,
        match r.durable_mb_s {
            Some(d) => format!("{d:.1} MB/s durable (flush included)"),
            None => "nothing made durable".into(),
        }
    ));
    if let Some(fps) = r.files_per_s {
        s.push_str(&format!("  {:<18}{fps:.0} files/s\n", "files"));
    }
    match &r.per_second {
        Some(p) => s.push_str(&format!(
            "  {:<18}min {:.1}  mean {:.1}  max {:.1} MB/s  CV {}  ({} s)\n",
            "per second",
            p.min,
            p.mean,
            p.max,
            p.cv.map_or("n/a".into(), |c| format!("{c:.3}")),
            r.per_second_mb_s.len()
        )),
        None => s.push_str(&format!("  {:<18}run shorter than 1 s\n", "per second")),
    }
    if let Some(l) = &r.write_latency_us {
        s.push_str(&latency_line("write latency", l));
    }
    for (kind, l) in &r.sync_latency_us {
        s.push_str(&latency_line(kind, l));
    }
    s.push_str(&format!(
        "  {:<18}user {:.2} s  sys {:.2} s{}\n",
        "CPU",
        r.user_cpu_s,
        r.sys_cpu_s,
        r.sys_cpu_s_per_gib
            .map_or(String::new(), |g| format!("  ({g:.2} s sys/GiB)"))
    ));
    if let (Some(d), Some(w)) = (r.peak_dirty_kib, r.peak_writeback_kib) {
        s.push_str(&format!(
            "  {:<18}peak Dirty {d} KiB, peak Writeback {w} KiB\n",
            "page cache"
        ));
    }
    if let (Some(peak), Some(end)) = (r.cache_peak_kib, r.cache_end_kib) {
        s.push_str(&format!(
            "  {:<18}peak {peak} KiB, end {end} KiB (cachestat of the run's files)\n",
            "files cached"
        ));
    }
    if let Some(c) = &r.reclaim {
        s.push_str(&format!(
            "  {:<18}kswapd scanned {} stole {}, direct scanned {} stole {}, {} stalls (pages, system-wide)\n",
            "reclaim",
            c.pgscan_kswapd,
            c.pgsteal_kswapd,
            c.pgscan_direct,
            c.pgsteal_direct,
            c.allocstall
        ));
    }
    if let Some(v) = &r.verify {
        s.push_str(&format!(
            "  {:<18}{}, {} file(s), {} bytes read back\n",
            "verify",
            if v.ok { "ok" } else { "MISMATCH" },
            v.files,
            v.bytes
        ));
    }
    for f in &r.kept_files {
        s.push_str(&format!("  {:<18}{}\n", "kept", f.display()));
    }
    for e in &r.cleanup_errors {
        s.push_str(&format!("  {:<18}{e}\n", "cleanup"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        w: WriteArgs,
    }

    fn cfg(args: &[&str]) -> Result<WriterConfig, String> {
        let mut v = vec!["t", "--dir", "/x"];
        v.extend_from_slice(args);
        config_from_args(&T::try_parse_from(v).map_err(|e| e.to_string())?.w)
    }

    #[test]
    fn good_arguments_make_a_config() {
        let c = cfg(&[
            "--size",
            "1G",
            "--chunk",
            "8M",
            "--strategy",
            "srf-pipelined",
            "--rate",
            "100MB/s",
        ])
        .unwrap();
        let s = c.spec();
        assert_eq!(
            (s.size, s.chunk, s.strategy),
            (1 << 30, 8 << 20, Strategy::SrfPipelined)
        );
        assert_eq!(s.rate, Some(100_000_000));
        assert!(!s.drop_behind);
        for st in ["srf-pipelined", "fdatasync-chunk"] {
            let c = cfg(&["--size", "1G", "--strategy", st, "--drop-behind"]).unwrap();
            assert!(c.spec().drop_behind);
        }
        let c = cfg(&["--small-files", "10", "--file-sync", "two-pass"]).unwrap();
        assert_eq!(
            c.spec().small_files.as_ref().unwrap().file_sync,
            FileSync::TwoPass
        );
    }

    #[test]
    fn bad_arguments_give_one_line_naming_the_flag() {
        let e = |a: &[&str]| cfg(a).unwrap_err();
        assert!(e(&["--size", "8Q", "--strategy", "buffered"]).starts_with("--size: "));
        assert_eq!(
            e(&["--size", "0", "--strategy", "buffered"]),
            "--size must be greater than 0"
        );
        assert!(
            e(&["--size", "1M", "--chunk", "2M", "--strategy", "buffered"])
                .contains("larger than --size")
        );
        assert!(e(&["--size", "1M", "--strategy", "dd"]).starts_with("unknown strategy \"dd\""));
        assert!(
            e(&["--size", "1M", "--strategy", "buffered", "--window", "0"]).starts_with("--window")
        );
        assert!(e(&["--strategy", "buffered"]).starts_with("missing --size"));
        assert!(e(&["--size", "1M"]).starts_with("missing --strategy"));
        assert!(e(&["--small-files", "3", "--strategy", "uring"]).contains("does not apply"));
        assert!(e(&["--small-files", "3", "--file-sync", "never"]).starts_with("--file-sync"));
        assert!(
            e(&["--size", "1M", "--strategy", "buffered", "--drop-behind"])
                .starts_with("--drop-behind needs --strategy srf-pipelined or fdatasync-chunk")
        );
        assert!(e(&["--small-files", "3", "--drop-behind"]).starts_with("--drop-behind"));
        // One line: main prints it after `wbscope: error: `.
        assert!(!e(&["--size", "8Q", "--strategy", "buffered"]).contains('\n'));
    }
}
