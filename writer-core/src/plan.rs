//! The plan of a run: every file it will create, per job, with its path,
//! size and pattern id, fixed before any file is created.
//!
//! The plan reads only the plain settings ([`crate::spec`]), so that the
//! `limits` module can count what each planned file costs without
//! depending on the engine that runs it.
use std::path::PathBuf;

use crate::spec::WriterSpec;

/// One file of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFile {
    pub job: u32,
    pub index: u64,
    pub path: PathBuf,
    pub size: u64,
    pub file_id: u64,
}

/// The file name: `wbscope-<pid>-<job>-<index>.dat`, inside the target.
pub fn file_name(pid: u32, job: u32, index: u64) -> String {
    format!("wbscope-{pid}-{job}-{index}.dat")
}

/// Pattern file id: job in the high bits, file index in the low 40.
pub fn file_id(job: u32, index: u64) -> u64 {
    (u64::from(job) << 40) ^ index
}

/// splitmix64: tiny, seedable, good enough for a size mix.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `count` file sizes in `[min, max]`, log-uniformly distributed: as many
/// files between 4 and 8 KiB as between 1 and 2 MiB, so most files are small
/// and most bytes are in the big ones, as in a Debian package. The same seed
/// gives the same sizes.
pub fn size_mix(seed: u64, count: u64, min: u64, max: u64) -> Vec<u64> {
    let mut rng = SplitMix64::new(seed);
    let (lo, hi) = ((min.max(1) as f64).ln(), (max.max(min).max(1) as f64).ln());
    (0..count)
        .map(|_| {
            let v = (lo + rng.next_f64() * (hi - lo)).exp().round() as u64;
            v.clamp(min, max)
        })
        .collect()
}

/// The files a run of `spec` creates, per job: large files `files` per
/// job, or the small-files size mix dealt to the jobs in turn. `spec` must
/// be one [`crate::WriterConfig::new`] accepted (at least one directory and
/// one job).
pub(crate) fn plan_files(spec: &WriterSpec) -> Vec<Vec<PlannedFile>> {
    let pid = std::process::id();
    let mut plan: Vec<Vec<PlannedFile>> = (0..spec.jobs).map(|_| Vec::new()).collect();
    let mut add = |job: u32, index: u64, size: u64| {
        plan[job as usize].push(PlannedFile {
            job,
            index,
            path: spec.dir_for_job(job).join(file_name(pid, job, index)),
            size,
            file_id: file_id(job, index),
        });
    };
    match &spec.small_files {
        Some(sf) => {
            let sizes = size_mix(spec.seed, sf.count, sf.min_size, sf.max_size);
            for (i, size) in sizes.into_iter().enumerate() {
                add((i as u64 % u64::from(spec.jobs)) as u32, i as u64, size);
            }
        }
        None => {
            for job in 0..spec.jobs {
                for index in 0..u64::from(spec.files) {
                    add(job, index, spec.size);
                }
            }
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::WriterConfig;
    use crate::spec::{FileSync, SmallFiles};

    fn plan(f: impl FnOnce(&mut WriterSpec)) -> Vec<Vec<PlannedFile>> {
        let mut s = WriterSpec {
            dirs: vec!["/a".into(), "/b".into()],
            size: 1 << 20,
            chunk: 1 << 16,
            ..WriterSpec::default()
        };
        f(&mut s);
        plan_files(WriterConfig::new(s).unwrap().spec())
    }

    #[test]
    fn plan_spreads_jobs_over_dirs_with_unique_names() {
        let plan = plan(|s| {
            s.jobs = 3;
            s.files = 2;
        });
        assert_eq!(plan.len(), 3);
        let pid = std::process::id();
        assert_eq!(
            plan[1][1].path,
            PathBuf::from(format!("/b/wbscope-{pid}-1-1.dat"))
        );
        assert_eq!(plan[2][0].path.parent(), Some(Path::new("/a")));
        let mut ids: Vec<u64> = plan.iter().flatten().map(|f| f.file_id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 6);
    }

    #[test]
    fn small_files_plan_deals_files_to_jobs() {
        let plan = plan(|s| {
            s.jobs = 2;
            s.small_files = Some(SmallFiles::new(5, FileSync::TwoPass));
        });
        let idx: Vec<Vec<u64>> = plan
            .iter()
            .map(|j| j.iter().map(|f| f.index).collect())
            .collect();
        assert_eq!(idx, vec![vec![0, 2, 4], vec![1, 3]]);
        assert!(
            plan.iter()
                .flatten()
                .all(|f| (4096..=2 << 20).contains(&f.size))
        );
    }

    #[test]
    fn size_mix_is_reproducible_in_range_and_mostly_small() {
        let a = size_mix(42, 1000, 4096, 2 << 20);
        assert_eq!(a, size_mix(42, 1000, 4096, 2 << 20));
        assert_ne!(a, size_mix(43, 1000, 4096, 2 << 20));
        assert!(a.iter().all(|&s| (4096..=2 << 20).contains(&s)));
        // Log-uniform over 9 octaves: about 1/9 of files per octave, so the
        // median is near sqrt(4 KiB * 2 MiB) = 90.5 KiB.
        let mut sorted = a.clone();
        sorted.sort_unstable();
        let median = sorted[500];
        assert!((40_000..200_000).contains(&median), "median {median}");
        let below_8k = a.iter().filter(|&&s| s < 8192).count();
        assert!((60..170).contains(&below_8k), "{below_8k}");
        assert_eq!(size_mix(1, 3, 5000, 5000), vec![5000; 3]);
    }
}
