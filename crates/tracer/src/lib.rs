//! Everything that touches the kernel, and the only place aya is used:
//! the probe plan ([`plan`]), loading and attaching ([`attach`]), reading
//! the programs' maps ([`maps`]) and ring buffer ([`ring`]), tracefs
//! formats, kernel BTF, privileges, the embedded object and the BPF cost
//! calibration. What it hands upwards is plain data from [`wbscope_model`].
pub mod attach;
mod batch;
pub mod btf;
pub mod cost;
pub mod counter;
mod cpu_batch;
pub mod dirtiers;
mod diskstats;
mod journal;
pub mod landlock_dir;
mod ledger;
pub mod maps;
mod members;
pub mod memory;
pub mod mounts;
pub mod object;
pub mod plan;
mod preempt;
pub mod privileges;
mod retprobe;
pub mod ring;
pub mod seccomp;
mod taskio;
pub mod tracefs;
mod trials;

use std::os::fd::OwnedFd;

use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{Array, MapData, PerCpuArray, RingBuf},
};

pub use attach::TracerOptions;
pub use maps::{VmStatFile, read_vmstat};
use wbscope_model::plan::ProbePlan;

/// Loaded and attached programs. Dropping it detaches everything.
pub struct Tracer {
    ebpf: Ebpf,
    stats: PerCpuArray<MapData, u64>,
    /// `GLOBAL_THRESH`, written at every snapshot (`&self`, hence the
    /// lock).
    global_thresh: std::sync::Mutex<Array<MapData, u64>>,
    pub plan: ProbePlan,
    /// The maps' kernel memory as stated before load, with what the
    /// kernel said of each once made (memory.rs).
    pub memory: wbscope_model::map_memory::MemoryPlan,
    /// The field offsets and struct members the programs were loaded with,
    /// for recordings: `{"ext4:ext4_writepages": {"dev": [8, 4, 0], ...},
    /// "btf": {"inode.i_ino": [64, 8, 0, 0], ...}}`.
    pub field_offsets: serde_json::Value,
    /// Where each dirty level lies in the words `DIRTY` holds (EMPTY when
    /// `global_dirty_state` is not attached).
    global_dirty_layout: writeback_common::TracepointLayout,
    /// Attached program names, for run-time statistics.
    attached_programs: Vec<&'static str>,
    /// `/proc/vmstat`, opened at attach and read again at each snapshot:
    /// the reads go on after the privileges are dropped, with no open(2).
    vmstat: VmStatFile,
    /// `/proc/diskstats`, likewise: every disk's counters, for the device
    /// lines' means and the ledger's sectors written.
    disks: diskstats::DiskStatsFile,
    /// The mount table, for the ledger's filesystem → disk map (a lock:
    /// read through `&self`).
    fs_names: std::sync::Mutex<mounts::FsNames>,
    /// `DEVICE_LEDGER` where the block programs count it, else why not.
    ledger: Result<ledger::LedgerMaps, String>,
    /// Keeps BPF run-time statistics on while the tracer lives.
    _stats_fd: Option<OwnedFd>,
    /// What asks the CPUs for the ext4 calls they keep, for the ring's
    /// reader (taken once).
    call_flush: Option<cpu_batch::BatchFlush>,
    /// kretprobe events of our own (`retprobe.rs`), removed when dropped,
    /// each with its program's name: their misses are read with the
    /// programs' run times (a read through `&self`, hence the lock).
    retprobes: std::sync::Mutex<Vec<(&'static str, retprobe::RetProbe)>>,
    /// The default attribution's inode dirtyings and process counts
    /// (`dirtiers.rs`; read through `&self`, hence the lock).
    dirtyings: std::sync::Mutex<dirtiers::Dirtyings>,
    /// `DIRTYINGS`' descriptor, owned by `dirtyings`' ring: readable once
    /// a quarter of it waits ([`Tracer::dirtyings_wake`]).
    dirtyings_fd: std::os::fd::RawFd,
    /// The journal handles per transaction, with `--enable durability`.
    journal: std::sync::Mutex<Option<journal::JournalHandles>>,
    /// `SAMPLING`, the per-folio and per-call sampling the CPU budget
    /// sets (`writeback_common::sampling`).
    sampling: std::sync::Mutex<Array<MapData, u32>>,
    /// Kept alive: dropping it closes the log map (docs/toolchain.md: aya-log 0.3).
    logger: Option<aya_log::EbpfLogger<&'static dyn log::Log>>,
}

impl Tracer {
    /// True when at least one concept has a hook attached (the tracer
    /// then has something to report, even without the writepages call).
    pub fn any_attached(&self) -> bool {
        self.plan.concepts.iter().any(|c| c.is_attached())
    }

    /// The journal handles of the `ended` transactions (`--enable
    /// durability`), removed from the kernel's map as they are read; none
    /// without it.
    pub fn journal_handles(
        &self,
        ended: &[(wbscope_model::DevId, u32)],
    ) -> anyhow::Result<Vec<wbscope_model::durability::HandleShare>> {
        let mut journal = self
            .journal
            .lock()
            .map_err(|_| anyhow::anyhow!("the journal handles' lock is poisoned"))?;
        match journal.as_mut() {
            Some(j) if !ended.is_empty() => {
                let made = self.stat(writeback_common::stat::HANDLES_NEW)?;
                j.take_ended(ended, made)
            }
            _ => Ok(Vec::new()),
        }
    }

    /// The journal handles of the commits `join` saw end since it last
    /// asked, into it.
    pub fn journal_into(
        &self,
        join: &mut wbscope_model::durability::DurabilityJoin,
    ) -> anyhow::Result<()> {
        let shares = self.journal_handles(&join.take_ended())?;
        join.shares(shares);
        Ok(())
    }

    /// The per-call record ring buffer; can be taken once.
    pub fn take_events(&mut self) -> anyhow::Result<RingBuf<MapData>> {
        let map = self
            .ebpf
            .take_map("EVENTS")
            .context("EVENTS ring buffer already taken or missing")?;
        RingBuf::try_from(map).context("EVENTS is not a ring buffer")
    }

    /// What asks the CPUs for the ext4 calls they keep (cpu_batch.rs);
    /// can be taken once.
    pub(crate) fn take_call_flush(&mut self) -> anyhow::Result<cpu_batch::BatchFlush> {
        self.call_flush
            .take()
            .context("the CPUs' call batches already taken")
    }

    /// The generic calls still open, per thread (writeback-ebpf
    /// generic.rs); can be taken once.
    pub(crate) fn take_open_calls(
        &mut self,
    ) -> anyhow::Result<aya::maps::HashMap<MapData, u32, writeback_common::GenericCall>> {
        let map = self
            .ebpf
            .take_map("GENERIC")
            .context("GENERIC map already taken or missing")?;
        aya::maps::HashMap::try_from(map).context("GENERIC is not a hash map")
    }

    /// The eBPF log ring buffer, to be polled by the caller; can be taken
    /// once.
    pub(crate) fn take_logger(&mut self) -> Option<aya_log::EbpfLogger<&'static dyn log::Log>> {
        self.logger.take()
    }
}

/// Forwards aya-log records from the kernel programs to the `log` crate.
pub fn spawn_ebpf_log_pump(tracer: &mut Tracer) {
    let Some(logger) = tracer.take_logger() else {
        return;
    };
    // SAFETY: the logger owns its ring-buffer fd until it is dropped, which
    // only the AsyncFd does.
    let registered = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(logger, tokio::io::Interest::READABLE)
    };
    let Ok(mut fd) = registered else {
        log::warn!("cannot poll the eBPF log buffer");
        return;
    };
    tokio::spawn(async move {
        while let Ok(mut guard) = fd.readable_mut().await {
            guard.get_inner_mut().flush();
            guard.clear_ready();
        }
    });
}
