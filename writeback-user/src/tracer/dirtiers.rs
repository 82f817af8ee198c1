//! The dirty-time maps (writeback-ebpf/src/dirtier.rs): the members the
//! BTF program reads, resolved from the kernel's BTF, and reading
//! `DIRTIERS` and `THROTTLED` into a [`DirtierSnapshot`].
use anyhow::Context as _;
use aya::maps::{Array, HashMap as BpfHashMap, PerCpuHashMap};
use writeback_common::{DirtierEntry, DirtierKey, DirtierMembers, DirtierSlot, dirtier_members};

use super::{Tracer, attach::member_spec, btf::Btf as KernelBtf};
use crate::model::dirtier::{DirtierReading, DirtierSnapshot};

/// `DirtierMembers` from the kernel's BTF: each slot's first member path
/// that exists; a required one missing refuses the hook (the reason is
/// returned), an optional one reads as absent (no large-folio count: one
/// page per folio; no cgroup writeback: owner 0).
pub(super) fn resolve_members(btf: &KernelBtf) -> Result<DirtierMembers, String> {
    let mut table = DirtierMembers::EMPTY;
    for (slot, (strukt, names, required)) in dirtier_members::PATHS.iter().enumerate() {
        let found = names
            .iter()
            .find_map(|name| member_spec(btf, strukt, name, false).ok());
        match found {
            Some(spec) => table.members[slot] = spec,
            None if *required => {
                return Err(format!(
                    "struct {strukt} has none of {} in the kernel's BTF",
                    names.join(", ")
                ));
            }
            None => {}
        }
    }
    // Without PG_head the large-folio count cannot be told valid: one
    // page per folio.
    match btf
        .enum_value("PG_head")
        .ok()
        .and_then(|b| u32::try_from(b).ok())
    {
        Some(bit) if bit < 64 => table.pg_head_bit = bit,
        _ => table.members[dirtier_members::FOLIO_NR_PAGES] = Default::default(),
    }
    Ok(table)
}

impl Tracer {
    /// Every entry of `DIRTIERS` and `THROTTLED`, read now.
    pub(crate) fn dirtiers(&self) -> anyhow::Result<DirtierSnapshot> {
        let map: BpfHashMap<_, DirtierKey, DirtierEntry> =
            BpfHashMap::try_from(self.ebpf.map("DIRTIERS").context("DIRTIERS map missing")?)?;
        let mut snap = DirtierSnapshot::default();
        for entry in map.iter() {
            // An entry evicted between listing and lookup is skipped.
            let Ok((k, v)) = entry else { continue };
            snap.entries.push(reading(&k, &v));
        }
        // The CPUs' slots after the hash: a slot flushed between the two
        // reads is then missed once (and counted at the next read), never
        // counted twice.
        let slots: Array<_, DirtierSlot> = Array::try_from(
            self.ebpf
                .map("DIRTY_SLOT")
                .context("DIRTY_SLOT map missing")?,
        )?;
        let per_cpu = slots
            .iter()
            .collect::<Result<Vec<_>, _>>()
            .context("reading DIRTY_SLOT")?;
        for slot in per_cpu.iter().filter(|s| s.entry.pages != 0) {
            let k = slot.key;
            match snap
                .entries
                .iter_mut()
                .find(|e| (e.dev, e.ino, e.tgid) == (k.dev, k.ino, k.tgid))
            {
                Some(e) => e.pages += slot.entry.pages,
                None => snap.entries.push(reading(&k, &slot.entry)),
            }
        }
        // The per-process pauses the findings read too (maps.rs), one
        // map for both.
        let throttled: PerCpuHashMap<_, u32, writeback_common::PausedBy> = PerCpuHashMap::try_from(
            self.ebpf
                .map("THROTTLED")
                .context("THROTTLED map missing")?,
        )?;
        for entry in throttled.iter() {
            let (tgid, per_cpu) = entry.context("reading THROTTLED")?;
            let pauses = per_cpu.iter().fold(0u64, |a, v| a.wrapping_add(v.pauses));
            let ms = per_cpu.iter().fold(0u64, |a, v| a.wrapping_add(v.pause_ms));
            snap.throttled.insert(tgid, (pauses, ms));
        }
        // After the slots: every page counted was dirtied before this.
        snap.taken_ns = crate::sys::monotonic_ns();
        Ok(snap)
    }
}

fn reading(k: &DirtierKey, v: &DirtierEntry) -> DirtierReading {
    let comm_len = v.comm.iter().position(|&b| b == 0).unwrap_or(v.comm.len());
    DirtierReading {
        dev: k.dev,
        ino: k.ino,
        tgid: k.tgid,
        pages: v.pages,
        pid: v.pid,
        comm: String::from_utf8_lossy(&v.comm[..comm_len]).into_owned(),
        cgroup_id: v.cgroup_id,
        owner_cgroup_id: v.owner_cgroup_id,
    }
}
