//! A table of inodes whose bound holds: past it, the inodes touched the
//! longest ago are forgotten, before the table would grow. Both ways of
//! naming dirtiers keep one (the dirtyings per inode, `by_inode`; the
//! pages outstanding per inode, the per-folio mode).
use std::{hash::Hash, ops::Deref};

use super::FastMap;

/// Inodes kept at most: 7/8 of 2^17, what a table of 2^17 buckets holds
/// before hashbrown grows it (its maximum load), so that a table stops
/// at 2^17 buckets (64 bytes each for `by_inode`'s entries: 8 MiB). A
/// bound of 2^17 itself made the table grow to twice that just before
/// it was cut.
pub(super) const MAX_INODES: usize = (1 << 17) / 8 * 7;

/// An entry that remembers when it was last touched.
pub(super) trait Aged {
    fn touched(&self) -> u64;
    fn set_touched(&mut self, at: u64);
}

/// The table: read as a map; written only through [`AgedTable::touch`],
/// [`AgedTable::get_mut`] and [`AgedTable::remove`], so that nothing
/// makes it grow past the bound.
#[derive(Clone, Debug)]
pub(super) struct AgedTable<K, V> {
    map: FastMap<K, V>,
    /// One step per touch: the ages are all different, so a cut at an
    /// age forgets as many as it should however many came at once.
    clock: u64,
    /// The table has the room for [`MAX_INODES`]: it is not to grow
    /// again.
    at_bound: bool,
}

impl<K, V> Default for AgedTable<K, V> {
    fn default() -> Self {
        AgedTable {
            map: FastMap::default(),
            clock: 0,
            at_bound: false,
        }
    }
}

impl<K, V> Deref for AgedTable<K, V> {
    type Target = FastMap<K, V>;

    fn deref(&self) -> &FastMap<K, V> {
        &self.map
    }
}

impl<K: Eq + Hash, V: Aged + Default> AgedTable<K, V> {
    /// The entry under `key`, made empty if new, its age now; a new one
    /// first forgets the oldest if it would pass the bound or make the
    /// table grow.
    pub(super) fn touch(&mut self, key: K) -> &mut V {
        self.clock += 1;
        if self.full() && !self.map.contains_key(&key) {
            self.forget_oldest();
        }
        let v = self.map.entry(key).or_default();
        v.set_touched(self.clock);
        v
    }

    pub(super) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.map.get_mut(key)
    }

    pub(super) fn remove(&mut self, key: &K) -> Option<V> {
        self.map.remove(key)
    }

    /// Whether one more entry would pass the bound or, once the table
    /// has the room for it, make it grow. Its room left is used up both
    /// by entries and by the places of forgotten ones that hashbrown
    /// marked deleted; then hashbrown rehashes the table in place only
    /// while at most half its room holds entries, and grows it otherwise
    /// (`reserve_rehash`, hashbrown src/raw/mod.rs).
    fn full(&mut self) -> bool {
        self.at_bound |= self.map.capacity() >= MAX_INODES;
        self.map.len() >= MAX_INODES || (self.at_bound && self.map.len() >= self.map.capacity())
    }

    /// Forgets the entries touched the longest ago, down to 7/16 of the
    /// bound: under half of it, for hashbrown's rehash in place (above).
    /// With fewer than that (the room used up by forgotten places
    /// alone), nothing is forgotten: the rehash takes the places back.
    fn forget_oldest(&mut self) {
        let cut = self.map.len().saturating_sub(MAX_INODES / 16 * 7);
        if cut == 0 {
            return;
        }
        let mut ages: Vec<u64> = self.map.values().map(Aged::touched).collect();
        let (_, &mut oldest_kept, _) = ages.select_nth_unstable(cut);
        self.map.retain(|_, v| v.touched() >= oldest_kept);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Entry(u64);

    impl Aged for Entry {
        fn touched(&self) -> u64 {
            self.0
        }
        fn set_touched(&mut self, at: u64) {
            self.0 = at;
        }
    }

    /// The table grows to the room for the bound and no further (what it
    /// holds falls below that room while the forgotten entries' places
    /// are marked deleted, until hashbrown rehashes it in place): past
    /// the bound, the older entries are forgotten, whether they came at
    /// once or one at a time, the newest kept.
    #[test]
    fn the_table_grows_to_the_bound_and_no_further() {
        let mut t = AgedTable::<u64, Entry>::default();
        for k in 0..MAX_INODES as u64 + 10 {
            t.touch(k);
        }
        // 2^17 buckets, 7/8 of them usable.
        assert!(t.at_bound);
        assert!(t.capacity() <= MAX_INODES, "grew: {}", t.capacity());
        assert_eq!(t.len(), MAX_INODES / 16 * 7 + 10);
        assert!(t.contains_key(&(MAX_INODES as u64 + 9)) && !t.contains_key(&0));
        for k in 0..3 * MAX_INODES as u64 {
            t.touch(1_000_000 + k);
            // Touching a known entry again makes it the newest.
            t.touch(MAX_INODES as u64 + 9);
        }
        assert!(t.capacity() <= MAX_INODES, "grew: {}", t.capacity());
        assert!(t.len() <= MAX_INODES);
        assert!(t.contains_key(&(1_000_000 + 3 * MAX_INODES as u64 - 1)));
        assert!(t.contains_key(&(MAX_INODES as u64 + 9)));
    }

    /// Entries removed as their pages are charged (the per-folio mode)
    /// leave deleted places, which can use up the room down to an empty
    /// table: a new entry then forgets nothing (an empty table has no
    /// oldest), and the table neither grows nor loses what it holds.
    #[test]
    fn room_used_up_by_removed_entries_forgets_nothing() {
        let mut empty = AgedTable::<u64, Entry>::default();
        empty.forget_oldest();
        assert!(empty.is_empty());
        let mut t = AgedTable::<u64, Entry>::default();
        for round in 0..4u64 {
            for k in 0..MAX_INODES as u64 {
                t.touch(round << 32 | k);
            }
            for k in 0..MAX_INODES as u64 {
                t.remove(&(round << 32 | k));
            }
            assert!(t.is_empty());
            t.touch(u64::MAX);
            assert_eq!(t.len(), 1);
            t.remove(&u64::MAX);
            assert!(t.capacity() <= MAX_INODES, "grew: {}", t.capacity());
        }
    }
}
