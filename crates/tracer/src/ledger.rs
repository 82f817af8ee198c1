//! The device ledger's kernel side (writeback-ebpf block.rs,
//! `DEVICE_LEDGER`): where each mounted filesystem keeps its journal,
//! read from its superblock before the programs load, and the bytes of
//! write bios by class, read at every snapshot.
//!
//! The journal's place comes from the on-disk superblock rather than from
//! an event: jbd2's commit writes carry no flag of their own on every
//! kernel (`JBD2_JOURNAL_REQ_FLAGS` added `REQ_META` only in 6.x), and
//! xfs's log writes carry the same `REQ_META` as its metadata buffers.
use std::{
    collections::HashMap,
    fs::File,
    io::{Read as _, Seek as _, SeekFrom},
};

use anyhow::Context as _;
use aya::maps::{HashMap as BpfHash, Map, MapData};
use writeback_common::{DeviceLedger, DirectKey, ledger_class};

use wbscope_model::DevId;

/// 512-byte sectors.
const SECTOR: u64 = 512;

/// The journal's extents in 512-byte sectors from the start of the
/// filesystem, from the first 4 KiB of its device (`head`), for the
/// filesystems whose journal lies inside them: ext3/ext4 (jbd2) and xfs.
/// `None` where there is none to find (an external journal or log, no
/// journal, another filesystem) or the superblock does not say (a journal
/// inode whose extent tree has more than its root's four extents).
pub(crate) fn journal_extents(head: &[u8]) -> Option<Vec<(u64, u64)>> {
    ext4_journal(head).or_else(|| xfs_log(head))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn be64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// ext3/ext4's internal journal: the superblock (at byte 1024) keeps a
/// copy of the journal inode's `i_block` in `s_jnl_blocks` when
/// `s_jnl_backup_type` is `EXT3_JNL_BACKUP_BLOCKS` (fs/ext4/ext4.h,
/// `struct ext4_super_block`); with extents that is the tree's root
/// (fs/ext4/ext4_extents.h: a 12-byte header, magic 0xF30A, then up to
/// four 12-byte extents at depth 0).
fn ext4_journal(head: &[u8]) -> Option<Vec<(u64, u64)>> {
    let sb = head.get(1024..2048)?;
    if le16(sb, 0x38)? != 0xEF53 {
        return None;
    }
    const HAS_JOURNAL: u32 = 0x4;
    if le32(sb, 0x5C)? & HAS_JOURNAL == 0 || le32(sb, 0xE0)? == 0 || le32(sb, 0xE4)? != 0 {
        return None;
    }
    const EXT3_JNL_BACKUP_BLOCKS: u8 = 1;
    if *sb.get(0xFD)? != EXT3_JNL_BACKUP_BLOCKS {
        return None;
    }
    let block_sectors = (1024u64 << le32(sb, 0x18)?.min(16)) / SECTOR;
    let root = sb.get(0x10C..0x10C + 60)?;
    if le16(root, 0)? != 0xF30A || le16(root, 6)? != 0 {
        return None;
    }
    let entries = usize::from(le16(root, 2)?);
    if entries == 0 || entries > DeviceLedger::RANGES {
        return None;
    }
    (0..entries)
        .map(|i| {
            let e = 12 + 12 * i;
            // An initialized extent's length is at most 32,768 blocks;
            // above that it is unwritten (ext4_ext_get_actual_len()).
            let len = u64::from(le16(root, e + 4)?);
            let len = if len > 32_768 { len - 32_768 } else { len };
            let start = (u64::from(le16(root, e + 6)?) << 32) | u64::from(le32(root, e + 8)?);
            Some((start * block_sectors, (start + len) * block_sectors))
        })
        .collect()
}

/// xfs's internal log: `sb_logstart` (0 for an external log) and
/// `sb_logblocks` in the big-endian superblock at byte 0 (fs/xfs/libxfs/
/// xfs_format.h, `struct xfs_dsb`), the start a filesystem block number
/// made of an AG number and a block in it (`XFS_FSB_TO_DADDR`).
fn xfs_log(head: &[u8]) -> Option<Vec<(u64, u64)>> {
    if head.get(0..4)? != b"XFSB" {
        return None;
    }
    let block = u64::from(be32(head, 4)?);
    let logstart = be64(head, 48)?;
    let agblocks = u64::from(be32(head, 84)?);
    let logblocks = u64::from(be32(head, 96)?);
    let agblklog = u32::from(*head.get(124)?);
    if logstart == 0 || block < SECTOR || agblklog >= 64 {
        return None;
    }
    let agno = logstart >> agblklog;
    let agbno = logstart & ((1u64 << agblklog) - 1);
    let block_sectors = block / SECTOR;
    let start = (agno * agblocks + agbno) * block_sectors;
    Some(vec![(start, start + logblocks * block_sectors)])
}

/// Where the partition (or whole disk) `dev` starts on its disk, in
/// sectors (`/sys/dev/block/M:m/start`; 0 for a whole disk): a
/// partition's bios reach `block_bio_queue` already remapped to the
/// disk's sectors (`blk_partition_remap()`, block/blk-core.c).
fn partition_start(dev: DevId) -> u64 {
    std::fs::read_to_string(format!("/sys/dev/block/{dev}/start"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// The journal of each mounted filesystem whose source is a block device
/// that has one, in the device's sectors, by the device's kernel dev_t.
/// Read before the privileges are dropped; a device that cannot be read
/// keeps no journal (its journal writes count as metadata), and says so.
pub(crate) fn journals() -> Vec<(u32, Vec<(u64, u64)>)> {
    let mut out: Vec<(u32, Vec<(u64, u64)>)> = Vec::new();
    for m in super::mounts::mounts() {
        if !matches!(m.fstype.as_str(), "ext3" | "ext4" | "xfs") {
            continue;
        }
        let dev = m.dev;
        let key = (dev.major << 20) | (dev.minor & 0xF_FFFF);
        if out.iter().any(|(k, _)| *k == key) {
            continue;
        }
        let mut head = vec![0u8; 4096];
        let read = File::open(&m.source).and_then(|mut f| {
            f.seek(SeekFrom::Start(0))?;
            f.read_exact(&mut head)
        });
        if let Err(e) = read {
            log::info!(
                "ledger: cannot read the superblock of {} ({e}): its journal's writes count as metadata",
                m.source
            );
            continue;
        }
        if let Some(extents) = journal_extents(&head) {
            let at = partition_start(dev);
            out.push((
                key,
                extents.into_iter().map(|(s, e)| (s + at, e + at)).collect(),
            ));
        }
    }
    out
}

/// The ledger's maps, where the block programs count them.
pub(crate) struct LedgerMaps {
    /// `DEVICE_LEDGER`: each device's bytes by class.
    pub(crate) classes: Map,
    /// `DIRECT_BYTES`: each process's direct bytes per device.
    pub(crate) direct: Map,
    /// The BTF bio program counts them, which sees each bio's pages (the
    /// classic one counts no `direct`).
    pub(crate) pages: bool,
}

/// Puts the journals into `DEVICE_LEDGER`, right after the programs are
/// attached: the bytes a device's entry counted in between are kept (a
/// bio counted between the read and the write here is lost, a few
/// milliseconds' worth at most, once).
pub(crate) fn put_journals(map: &mut Map) -> anyhow::Result<usize> {
    let mut ledger = BpfHash::<&mut MapData, u32, DeviceLedger>::try_from(map)
        .context("DEVICE_LEDGER is not a hash map of its types")?;
    let journals = journals();
    for (dev, extents) in &journals {
        let mut entry = ledger.get(dev, 0).unwrap_or_default();
        for (slot, (s, e)) in entry.journal.iter_mut().zip(extents) {
            *slot = [*s, *e];
        }
        ledger
            .insert(dev, entry, 0)
            .with_context(|| format!("writing DEVICE_LEDGER for {}", DevId::from_kernel(*dev)))?;
    }
    Ok(journals.len())
}

/// Every device's bytes by class, summed onto its whole disk
/// (`whole_disk`: a partition's bios are counted under the partition).
pub(crate) fn read(
    map: &Map,
    whole_disk: impl Fn(DevId) -> DevId,
) -> anyhow::Result<HashMap<DevId, [u64; ledger_class::COUNT]>> {
    let entries: Vec<(u32, DeviceLedger)> = super::batch::read_hash(map, "DEVICE_LEDGER")?;
    let mut out: HashMap<DevId, [u64; ledger_class::COUNT]> = HashMap::new();
    for (dev, entry) in entries {
        let sums = out.entry(whole_disk(DevId::from_kernel(dev))).or_default();
        for (s, b) in sums.iter_mut().zip(entry.bytes) {
            *s = s.wrapping_add(b);
        }
    }
    Ok(out)
}

/// Each process's direct-I/O bytes per whole disk, since attach
/// (`DIRECT_BYTES`).
pub(crate) fn read_direct(
    map: &Map,
    whole_disk: impl Fn(DevId) -> DevId,
) -> anyhow::Result<HashMap<(u32, DevId), u64>> {
    let entries: Vec<(DirectKey, u64)> = super::batch::read_hash(map, "DIRECT_BYTES")?;
    let mut out: HashMap<(u32, DevId), u64> = HashMap::new();
    for (key, bytes) in entries {
        let disk = whole_disk(DevId::from_kernel(key.dev));
        *out.entry((key.tgid, disk)).or_default() += bytes;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ext4 superblock with a journal inode of `extents` (start, len)
    /// in blocks of 4 KiB.
    fn ext4(extents: &[(u64, u16)]) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        let sb = &mut b[1024..2048];
        sb[0x38..0x3A].copy_from_slice(&0xEF53u16.to_le_bytes());
        sb[0x18..0x1C].copy_from_slice(&2u32.to_le_bytes()); // 1024 << 2
        sb[0x5C..0x60].copy_from_slice(&0x4u32.to_le_bytes());
        sb[0xE0..0xE4].copy_from_slice(&8u32.to_le_bytes());
        sb[0xFD] = 1;
        let root = &mut sb[0x10C..0x10C + 60];
        root[0..2].copy_from_slice(&0xF30Au16.to_le_bytes());
        root[2..4].copy_from_slice(&(extents.len() as u16).to_le_bytes());
        root[4..6].copy_from_slice(&4u16.to_le_bytes());
        for (i, &(start, len)) in extents.iter().enumerate() {
            let e = 12 + 12 * i;
            root[e + 4..e + 6].copy_from_slice(&len.to_le_bytes());
            root[e + 6..e + 8].copy_from_slice(&((start >> 32) as u16).to_le_bytes());
            root[e + 8..e + 12].copy_from_slice(&(start as u32).to_le_bytes());
        }
        b
    }

    #[test]
    fn an_ext4_journal_is_its_inodes_root_extents_in_sectors() {
        // 4 KiB blocks: 8 sectors each.
        let b = ext4(&[(1_000, 4_096), (1 << 33, 8)]);
        assert_eq!(
            journal_extents(&b),
            Some(vec![
                (8_000, 8 * 5_096),
                ((1 << 33) * 8, ((1 << 33) + 8) * 8)
            ])
        );
        // No journal, an external one, no backup copy, a deeper tree.
        let mut none = ext4(&[(1_000, 4_096)]);
        none[1024 + 0x5C] = 0;
        assert_eq!(journal_extents(&none), None);
        let mut external = ext4(&[(1_000, 4_096)]);
        external[1024 + 0xE4] = 1;
        assert_eq!(journal_extents(&external), None);
        let mut unbacked = ext4(&[(1_000, 4_096)]);
        unbacked[1024 + 0xFD] = 0;
        assert_eq!(journal_extents(&unbacked), None);
        let mut deep = ext4(&[(1_000, 4_096)]);
        deep[1024 + 0x10C + 6] = 1;
        assert_eq!(journal_extents(&deep), None);
        // Neither filesystem, and a head cut short.
        assert_eq!(journal_extents(&[0u8; 4096]), None);
        assert_eq!(journal_extents(&b[..1500]), None);
    }

    #[test]
    fn an_xfs_log_is_placed_by_its_ag_and_block() {
        let mut b = vec![0u8; 4096];
        b[0..4].copy_from_slice(b"XFSB");
        b[4..8].copy_from_slice(&4096u32.to_be_bytes());
        // AG 2 (agblklog 16), block 100; 65,536 blocks an AG.
        b[48..56].copy_from_slice(&((2u64 << 16) | 100).to_be_bytes());
        b[84..88].copy_from_slice(&65_536u32.to_be_bytes());
        b[96..100].copy_from_slice(&2_560u32.to_be_bytes());
        b[124] = 16;
        let start = (2 * 65_536 + 100) * 8;
        assert_eq!(journal_extents(&b), Some(vec![(start, start + 2_560 * 8)]));
        // An external log.
        b[48..56].copy_from_slice(&0u64.to_be_bytes());
        assert_eq!(journal_extents(&b), None);
    }
}
