//! The journal handles each process put in each transaction (writeback-ebpf
//! durability.rs `HANDLES`), read for the transactions that have ended and
//! removed from the kernel's map as they are read.
use std::collections::HashMap as StdMap;

use anyhow::Context as _;
use aya::{
    Ebpf,
    maps::{HashMap, MapData},
};
use writeback_common::{HandleCount, HandleKey};

use crate::model::{DevId, durability::HandleShare};

pub(crate) struct JournalHandles {
    map: HashMap<MapData, HandleKey, HandleCount>,
}

impl JournalHandles {
    pub(crate) fn take(ebpf: &mut Ebpf) -> anyhow::Result<JournalHandles> {
        let map = ebpf.take_map("HANDLES").context("HANDLES map missing")?;
        Ok(JournalHandles {
            map: HashMap::try_from(map).context("HANDLES is not a hash map")?,
        })
    }

    /// The counts of the `ended` transactions, removed from the map with
    /// those of any older transaction of the same journals (a commit whose
    /// end the reader never saw).
    pub(crate) fn take_ended(
        &mut self,
        ended: &[(DevId, u32)],
    ) -> anyhow::Result<Vec<HandleShare>> {
        let mut newest: StdMap<DevId, u32> = StdMap::new();
        for &(dev, t) in ended {
            let e = newest.entry(dev).or_insert(t);
            if tid_after(t, *e) {
                *e = t;
            }
        }
        let keys: Vec<HandleKey> = self.map.keys().filter_map(Result::ok).collect();
        let mut out = Vec::new();
        for key in keys {
            let dev = DevId::from_kernel(key.dev);
            let Some(&last) = newest.get(&dev) else {
                continue;
            };
            if tid_after(key.transaction, last) {
                continue;
            }
            if ended.contains(&(dev, key.transaction))
                && let Ok(count) = self.map.get(&key, 0)
            {
                out.push(HandleShare {
                    dev,
                    transaction: key.transaction,
                    pid: key.pid,
                    ino: key.ino,
                    handles: count.handles,
                    blocks: count.blocks,
                    comm: crate::model::record::comm(&count.comm),
                });
            }
            // Gone already (LRU eviction) is fine.
            let _ = self.map.remove(&key);
        }
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
