//! What a traced window reads of its writer while it runs: bytes written
//! per job (sampled every tick into the window's timeline) and the sizes
//! of its write and sync calls. A writer-core [`Observer`]: events arrive
//! on the writing threads, so each costs a few relaxed atomic adds.
use std::sync::atomic::{AtomicU64, Ordering};

use writer_core::{Event, Observer};

use wbscope_model::{Log2Histogram, interval::Bucket, timeline::WriterChunks};

/// Jobs counted apart; more are added to the last one (the report draws
/// a band over the jobs, not a line each).
const MAX_JOBS: usize = 64;
const BUCKETS: usize = 65;

pub struct WriterMeter {
    jobs: usize,
    bytes: Vec<AtomicU64>,
    write_hist: Vec<AtomicU64>,
    sync_hist: Vec<AtomicU64>,
    whole_file_syncs: AtomicU64,
}

fn zeros(n: usize) -> Vec<AtomicU64> {
    (0..n).map(|_| AtomicU64::new(0)).collect()
}

fn buckets(hist: &[AtomicU64]) -> Vec<Bucket> {
    hist.iter()
        .enumerate()
        .map(|(k, c)| (k, c.load(Ordering::Relaxed)))
        .filter(|&(_, c)| c > 0)
        .map(|(k, count)| {
            let (lo, hi) = Log2Histogram::bucket_bounds(k);
            Bucket { lo, hi, count }
        })
        .collect()
}

impl WriterMeter {
    pub(crate) fn new(jobs: u32) -> WriterMeter {
        let jobs = (jobs as usize).clamp(1, MAX_JOBS);
        WriterMeter {
            jobs,
            bytes: zeros(jobs),
            write_hist: zeros(BUCKETS),
            sync_hist: zeros(BUCKETS),
            whole_file_syncs: AtomicU64::new(0),
        }
    }

    /// Bytes written so far, per job.
    pub(crate) fn bytes(&self) -> Vec<u64> {
        self.bytes
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect()
    }

    pub(crate) fn chunks(&self) -> WriterChunks {
        WriterChunks {
            write_bytes: buckets(&self.write_hist),
            sync_bytes: buckets(&self.sync_hist),
            whole_file_syncs: self.whole_file_syncs.load(Ordering::Relaxed),
        }
    }
}

impl Observer for WriterMeter {
    fn on_event(&self, event: &Event) {
        match event {
            Event::ChunkWritten { at, len, .. } => {
                let job = (at.job as usize).min(self.jobs - 1);
                self.bytes[job].fetch_add(*len, Ordering::Relaxed);
                self.write_hist[Log2Histogram::bucket_of(*len)].fetch_add(1, Ordering::Relaxed);
            }
            Event::SyncEnded { len: 0, .. } => {
                self.whole_file_syncs.fetch_add(1, Ordering::Relaxed);
            }
            Event::SyncEnded { len, .. } => {
                self.sync_hist[Log2Histogram::bucket_of(*len)].fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use writer_core::{FileRef, SyncKind};

    use super::*;

    #[test]
    fn counts_bytes_per_job_and_call_sizes() {
        let m = WriterMeter::new(2);
        let at = |job| FileRef { job, file: 0 };
        for (job, len) in [(0, 8 << 20), (1, 8 << 20), (1, 4096), (7, 1)] {
            m.on_event(&Event::ChunkWritten {
                at: at(job),
                offset: 0,
                len,
                latency: Duration::ZERO,
            });
        }
        for len in [0, 32 << 20] {
            m.on_event(&Event::SyncEnded {
                at: at(0),
                kind: SyncKind::SrfWrite,
                offset: 0,
                len,
                latency: Duration::ZERO,
            });
        }
        // Job 7 of a 2-job meter counts with the last job.
        assert_eq!(m.bytes(), vec![8 << 20, (8 << 20) + 4096 + 1]);
        let c = m.chunks();
        assert_eq!(c.whole_file_syncs, 1);
        let counts: Vec<_> = c.write_bytes.iter().map(|b| (b.lo, b.count)).collect();
        assert_eq!(counts, vec![(1, 1), (4096, 1), (8 << 20, 2)]);
        assert_eq!(c.sync_bytes[0].lo, 32 << 20);
    }
}
