//! `wbscope compare`: the same workload written by several writer-core
//! strategies, one after the other, while the kernel side is traced; a
//! side-by-side table of the writer's figures and the kernel figures that
//! explain them. One tracer is attached for the whole command (attaching
//! costs about a second; doing it once keeps the runs comparable); see
//! `capture::window` for how records are attributed to runs.
use std::{path::Path, process::ExitCode};

use writer_core::{Strategy, WriterConfig, WriterSpec, parse_size};

use crate::cli::CompareArgs;
use wbscope_capture::window::{Traced, devs_of, traced_write};
use wbscope_export::{report, table::print_runs};
use wbscope_model::plan::HookChoice;
use wbscope_model::window::Run;
use wbscope_sys::UsageError;

/// Validated settings of a compare.
pub(crate) struct CompareSetup {
    pub(crate) strategies: Vec<Strategy>,
    pub(crate) configs: Vec<WriterConfig>,
}

pub(crate) fn setup(args: &CompareArgs) -> Result<CompareSetup, UsageError> {
    let size = parse_size(&args.size).map_err(|e| UsageError(format!("--size: {e}")))?;
    let chunk = parse_size(&args.chunk).map_err(|e| UsageError(format!("--chunk: {e}")))?;
    let meta = std::fs::metadata(&args.dir)
        .map_err(|e| UsageError(format!("--dir {}: {e}", args.dir.display())))?;
    if !meta.is_dir() {
        return Err(UsageError(format!(
            "--dir {}: not a directory",
            args.dir.display()
        )));
    }
    let mut strategies = Vec::new();
    for name in args
        .strategies
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let s: Strategy = name
            .parse()
            .map_err(|e: writer_core::ConfigError| UsageError(format!("--strategies: {e}")))?;
        if strategies.contains(&s) {
            return Err(UsageError(format!("--strategies: {name} given twice")));
        }
        strategies.push(s);
    }
    if strategies.is_empty() {
        return Err(UsageError("--strategies: empty list".into()));
    }
    let configs = strategies
        .iter()
        .map(|&strategy| {
            WriterConfig::new(WriterSpec {
                dirs: vec![args.dir.clone()],
                size,
                chunk,
                strategy,
                window: args.window,
                keep: true,
                ..WriterSpec::default()
            })
            .map_err(|e| UsageError(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(CompareSetup {
        strategies,
        configs,
    })
}

/// Refuses a directory no run can write to — read-only, not on a block
/// device (/proc, a tmpfs), without room for one run's file — before the
/// first sync and page-cache drop, which hit the whole machine.
fn check_dir(dir: &Path, size: u64) -> Result<(), UsageError> {
    let refuse = |why: String| UsageError(format!("--dir {}: {why}", dir.display()));
    let m = scratchfs::mount_of(dir).map_err(|e| refuse(format!("{e:#}")))?;
    if !m.on_block_device() {
        return Err(refuse(format!(
            "is on {} ({}), not on a block device; compare measures writeback to a disk",
            m.source, m.fstype
        )));
    }
    let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str()))
        .map_err(|_| refuse("has a NUL byte".into()))?;
    let st = wbscope_sys::statvfs(dir).map_err(|e| refuse(format!("statvfs: {e}")))?;
    if st.f_flag & libc::ST_RDONLY != 0 {
        return Err(refuse("is on a read-only filesystem".into()));
    }
    // SAFETY: c is a valid C string.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(refuse(format!(
            "not writable: {}",
            std::io::Error::last_os_error()
        )));
    }
    // The runs are one at a time and each removes its file.
    let avail = st.f_bavail.saturating_mul(st.f_frsize);
    if size > avail {
        return Err(refuse(format!(
            "a run needs {} but only {} is free",
            writer_core::ByteSize(size),
            writer_core::ByteSize(avail)
        )));
    }
    Ok(())
}

pub(crate) async fn run(args: &CompareArgs, hooks: &HookChoice) -> anyhow::Result<ExitCode> {
    let setup = setup(args)?;
    check_dir(
        &args.dir,
        setup.configs.first().map_or(0, |c| c.spec().size),
    )?;
    // Checked before any run rather than after minutes of writing.
    if let Some(p) = &args.plot {
        report::check_output("--plot", p)?;
    }
    if let Some(p) = &args.report {
        report::check_output("--report", p)?;
    }
    let devs = devs_of(&args.dir)?;
    let _signals = wbscope_sys::SignalGuard::install();
    super::scenario::remove_stale_scratch();
    let mut traced = Traced::attach(&hooks.with_anatomy())?;
    let mut runs = Vec::new();
    let total = setup.configs.len() as u32 * args.repeat;
    let mut n = 0;
    for rep in 0..args.repeat {
        for (strategy, cfg) in setup.strategies.iter().zip(&setup.configs) {
            n += 1;
            wbscope_sys::check_interrupted()?;
            eprintln!(
                "wbscope: run {n}/{total}: {strategy}: sync + drop caches, then {} in {} chunks to {}",
                args.size,
                args.chunk,
                args.dir.display()
            );
            wbscope_sys::sync_and_drop_caches()?;
            let (writer, kernel) = traced_write(&mut traced, &devs, cfg.clone(), true).await?;
            wbscope_sys::check_interrupted()?;
            eprintln!(
                "wbscope: run {n}/{total}: {strategy}: {:.1} MB/s durable, {} writepages calls",
                writer.durable_mb_s.unwrap_or(0.0),
                kernel.calls
            );
            runs.push(Run {
                fs: None,
                strategy: strategy.name().to_string(),
                repeat: rep,
                writer,
                kernel,
            });
        }
    }
    let names: Vec<String> = setup.strategies.iter().map(|s| s.name().into()).collect();
    let context = traced.context();
    print_runs(&runs, &names, args.json, args.markdown, &context)?;
    if args.plot.is_some() || args.report.is_some() {
        let data = report::of_runs(&runs, &context, None)?;
        if let Some(p) = &args.plot {
            wbscope_export::plot::write_svg(p, &runs, &context)?;
            eprintln!("wbscope: plot written to {}", p.display());
        }
        if let Some(p) = &args.report {
            report::write_new(p, &report::html(&data))?;
            eprintln!("wbscope: report written to {}", p.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
