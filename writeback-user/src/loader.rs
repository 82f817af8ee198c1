//! Loads the embedded eBPF object, configures it from tracefs and attaches
//! what this kernel offers. Whatever cannot be attached is recorded in
//! [`ProbeStatus`] with its reason; the tracer keeps running with the rest.
use std::fmt;

use anyhow::Context as _;
use aya::{
    Ebpf, EbpfLoader,
    maps::{MapData, PerCpuArray, RingBuf},
    programs::TracePoint,
};
use log::{info, warn};
use writeback_common::{
    TracepointLayout, stat, writepages_fields as wp, writepages_result_fields as wpr,
};

use crate::{ebpf_object::EBPF_OBJECT, privileges, tracefs};

/// A tracepoint hook: program name in the object, tracefs system and event,
/// the global holding its layout, and the logical fields it provides.
#[derive(Clone, Copy, Debug)]
pub struct TracepointHook {
    pub program: &'static str,
    pub system: &'static str,
    pub event: &'static str,
    pub layout_global: &'static str,
    pub fields: &'static [&'static str],
}

/// The hooks of the writepages-call concept: start and result of
/// `ext4_do_writepages()` (3.11+ names; fs/ext4/inode.c).
pub const WRITEPAGES_HOOKS: [TracepointHook; 2] = [
    TracepointHook {
        program: "ext4_writepages",
        system: "ext4",
        event: "ext4_writepages",
        layout_global: "WRITEPAGES_LAYOUT",
        fields: &wp::NAMES,
    },
    TracepointHook {
        program: "ext4_writepages_result",
        system: "ext4",
        event: "ext4_writepages_result",
        layout_global: "WRITEPAGES_RESULT_LAYOUT",
        fields: &wpr::NAMES,
    },
];

/// Whether one hook is in use, and why not.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ProbeStatus {
    /// e.g. `tracepoint ext4:ext4_writepages`.
    pub hook: String,
    #[serde(flatten)]
    pub state: ProbeState,
}

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", content = "reason", rename_all = "snake_case")]
pub enum ProbeState {
    Attached,
    Unavailable(String),
}

impl fmt::Display for ProbeStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.state {
            ProbeState::Attached => write!(f, "{}: attached", self.hook),
            ProbeState::Unavailable(why) => write!(f, "{}: unavailable: {why}", self.hook),
        }
    }
}

/// Probe status when nothing could be loaded at all (for example missing
/// privileges): every hook unavailable for the same reason.
pub fn all_unavailable(reason: &str) -> Vec<ProbeStatus> {
    WRITEPAGES_HOOKS
        .iter()
        .map(|h| ProbeStatus {
            hook: format!("tracepoint {}:{}", h.system, h.event),
            state: ProbeState::Unavailable(reason.to_string()),
        })
        .collect()
}

/// Counters kept by the programs (`STATS`), summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct KernelStats {
    pub lost_records: u64,
    pub unmatched_results: u64,
    pub inflight_full: u64,
}

/// Loaded and attached programs. Dropping it detaches everything.
pub struct Tracer {
    ebpf: Ebpf,
    stats: PerCpuArray<MapData, u64>,
    pub probes: Vec<ProbeStatus>,
    /// Kept alive: dropping it closes the log map (toolchain.md).
    logger: Option<aya_log::EbpfLogger<&'static dyn log::Log>>,
}

impl Tracer {
    /// Checks privileges, reads the tracepoint layouts, loads the object and
    /// attaches every hook it can.
    pub fn attach() -> anyhow::Result<Tracer> {
        Self::attach_hooks(&WRITEPAGES_HOOKS)
    }

    /// [`Tracer::attach`] with an explicit hook table, one entry per
    /// program/global of the object (tests point one at an event this
    /// kernel lacks to exercise the fallback).
    pub fn attach_hooks(hooks: &[TracepointHook]) -> anyhow::Result<Tracer> {
        privileges::check()?;
        let tracefs_root = tracefs::ensure_mounted()?;

        let mut probes = Vec::new();
        let mut layouts = Vec::new();
        for hook in hooks {
            let name = format!("tracepoint {}:{}", hook.system, hook.event);
            match tracefs::read_format(&tracefs_root, hook.system, hook.event)
                .map_err(anyhow::Error::from)
                .and_then(|fmt| fmt.layout(hook.fields))
            {
                Ok((layout, missing)) => {
                    if !missing.is_empty() {
                        warn!("{name}: this kernel has no field(s) {missing:?}; they read as 0");
                    }
                    layouts.push(Some(layout));
                    probes.push(ProbeStatus {
                        hook: name,
                        state: ProbeState::Attached,
                    });
                }
                Err(e) => {
                    layouts.push(None);
                    probes.push(ProbeStatus {
                        hook: name,
                        state: ProbeState::Unavailable(format!("{e:#}")),
                    });
                }
            }
        }

        // A hook whose format could not be read keeps an empty layout; its
        // program is then never attached.
        let resolved: Vec<TracepointLayout> = layouts
            .iter()
            .map(|l| l.unwrap_or(TracepointLayout::EMPTY))
            .collect();
        let mut loader = EbpfLoader::new();
        for (hook, layout) in hooks.iter().zip(&resolved) {
            loader.override_global(hook.layout_global, layout, true);
        }
        let mut ebpf = loader
            .load(EBPF_OBJECT)
            .context("loading the embedded eBPF object")?;
        let logger = match aya_log::EbpfLogger::init(&mut ebpf) {
            Ok(logger) => Some(logger),
            Err(e) => {
                warn!("eBPF logging unavailable: {e}");
                None
            }
        };

        for ((hook, layout), status) in hooks.iter().zip(&layouts).zip(&mut probes) {
            if layout.is_none() {
                continue;
            }
            if let Err(e) = attach_tracepoint(&mut ebpf, hook) {
                status.state = ProbeState::Unavailable(format!("{e:#}"));
            }
        }
        for p in &probes {
            info!("{p}");
        }

        let stats = PerCpuArray::try_from(ebpf.take_map("STATS").context("STATS map missing")?)
            .context("STATS map")?;
        Ok(Tracer {
            ebpf,
            stats,
            probes,
            logger,
        })
    }

    /// True when at least one hook is attached.
    pub fn any_attached(&self) -> bool {
        self.probes
            .iter()
            .any(|p| matches!(p.state, ProbeState::Attached))
    }

    /// The per-call record ring buffer; can be taken once.
    pub fn take_events(&mut self) -> anyhow::Result<RingBuf<MapData>> {
        let map = self
            .ebpf
            .take_map("EVENTS")
            .context("EVENTS ring buffer already taken or missing")?;
        RingBuf::try_from(map).context("EVENTS is not a ring buffer")
    }

    /// The eBPF log ring buffer, to be polled by the caller; can be taken
    /// once and must outlive the programs.
    pub fn take_logger(&mut self) -> Option<aya_log::EbpfLogger<&'static dyn log::Log>> {
        self.logger.take()
    }

    pub fn stats(&self) -> anyhow::Result<KernelStats> {
        let sum = |index: u32| -> anyhow::Result<u64> {
            let values = self
                .stats
                .get(&index, 0)
                .with_context(|| format!("reading STATS[{index}]"))?;
            Ok(values.iter().sum())
        };
        Ok(KernelStats {
            lost_records: sum(stat::LOST_RECORDS)?,
            unmatched_results: sum(stat::UNMATCHED_RESULTS)?,
            inflight_full: sum(stat::INFLIGHT_FULL)?,
        })
    }
}

fn attach_tracepoint(ebpf: &mut Ebpf, hook: &TracepointHook) -> anyhow::Result<()> {
    let program: &mut TracePoint = ebpf
        .program_mut(hook.program)
        .with_context(|| format!("program {} not in the object", hook.program))?
        .try_into()
        .context("not a tracepoint program")?;
    program.load().context("BPF_PROG_LOAD")?;
    program.attach(hook.system, hook.event).context("attach")?;
    Ok(())
}
