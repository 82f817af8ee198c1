//! The journal handles each process put in each transaction (writeback-ebpf
//! durability.rs `HANDLES`), read for the transactions that have ended and
//! removed from the kernel's map as they are read.
use std::collections::HashMap as StdMap;

use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{HashMap, Map, MapData},
};
use writeback_common::{HandleCount, HandleKey};

use wbscope_model::{DevId, durability::HandleShare};

pub(crate) struct JournalHandles {
    /// `HANDLES`, an LRU hash map (checked when taken).
    map: Map,
    /// Entries this reader removed, ever.
    removed: u64,
    /// Entries the map evicted to make room, as of the last reading: those
    /// made (`stat::HANDLES_NEW`) less those removed and those left.
    pub(crate) evicted: u64,
}

impl JournalHandles {
    pub(crate) fn take(ebpf: &mut Ebpf) -> anyhow::Result<JournalHandles> {
        let mut map = ebpf.take_map("HANDLES").context("HANDLES map missing")?;
        HashMap::<&mut MapData, HandleKey, HandleCount>::try_from(&mut map)
            .context("HANDLES is not a hash map of its types")?;
        Ok(JournalHandles {
            map,
            removed: 0,
            evicted: 0,
        })
    }

    /// The counts of the `ended` transactions, removed from the map with
    /// those of any older transaction of the same journals (a commit whose
    /// end the reader never saw).
    /// `made` is `stat::HANDLES_NEW` read before the map.
    pub(crate) fn take_ended(
        &mut self,
        ended: &[(DevId, u32)],
        made: u64,
    ) -> anyhow::Result<Vec<HandleShare>> {
        let mut newest: StdMap<DevId, u32> = StdMap::new();
        for &(dev, t) in ended {
            let e = newest.entry(dev).or_insert(t);
            if tid_after(t, *e) {
                *e = t;
            }
        }
        // A batch at a time where the kernel can (batch.rs): each commit
        // leaves a few entries.
        let entries: Vec<(HandleKey, HandleCount)> = super::batch::read_hash(&self.map, "HANDLES")?;
        let mut map = HashMap::<&mut MapData, HandleKey, HandleCount>::try_from(&mut self.map)?;
        let mut out = Vec::new();
        let found = entries.len() as u64;
        let mut removed = 0u64;
        for (key, count) in entries {
            let dev = DevId::from_kernel(key.dev);
            let Some(&last) = newest.get(&dev) else {
                continue;
            };
            if tid_after(key.transaction, last) {
                continue;
            }
            if ended.contains(&(dev, key.transaction)) {
                out.push(HandleShare {
                    dev,
                    transaction: key.transaction,
                    pid: key.pid,
                    ino: key.ino,
                    handles: count.handles,
                    blocks: count.blocks,
                    comm: wbscope_model::record::comm(&count.comm),
                });
            }
            // Gone already (evicted since the read) is counted below.
            if map.remove(&key).is_ok() {
                removed += 1;
            }
        }
        self.removed += removed;
        let left = found - removed;
        self.evicted = self.evicted.max(made.saturating_sub(self.removed + left));
        Ok(out)
    }
}

/// jbd2's `tid_gt()` (include/linux/jbd2.h): transaction ids wrap.
fn tid_after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn transaction_ids_compare_across_the_wrap() {
        assert!(super::tid_after(5, 4));
        assert!(!super::tid_after(4, 4));
        assert!(super::tid_after(2, u32::MAX - 1));
        assert!(!super::tid_after(u32::MAX - 1, 2));
    }
}
