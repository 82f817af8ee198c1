//! The lanes the guests run in: jobs taken from one queue, in order, by
//! up to N threads, each job whole on one of them. What a job reports is
//! handed back to the calling thread as the job finishes, so that one
//! job's lines are printed together, never mixed with another's, and a
//! job that fails (or panics) leaves the others running. One lane runs
//! the jobs one after the other on the calling thread itself.
use std::{
    collections::VecDeque,
    panic::{AssertUnwindSafe, catch_unwind},
    sync::{Mutex, PoisonError, mpsc},
};

/// One guest's work, run on a lane.
pub(crate) type Job<'a, T> = Box<dyn FnOnce() -> anyhow::Result<T> + Send + 'a>;

/// Runs `jobs` on `lanes` threads (at least one, at most one per job),
/// starting them in the order given, and calls `done(index, result)` on
/// the calling thread for each as it finishes (in the order they
/// finish); returns when every job has.
pub(crate) fn run<'a, T: Send>(
    lanes: usize,
    jobs: Vec<Job<'a, T>>,
    mut done: impl FnMut(usize, anyhow::Result<T>),
) {
    let lanes = lanes.clamp(1, jobs.len().max(1));
    if lanes == 1 {
        for (i, job) in jobs.into_iter().enumerate() {
            done(i, guarded(job));
        }
        return;
    }
    let queue = Mutex::new(jobs.into_iter().enumerate().collect::<VecDeque<_>>());
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..lanes {
            let tx = tx.clone();
            let queue = &queue;
            scope.spawn(move || {
                loop {
                    let next = queue
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .pop_front();
                    let Some((i, job)) = next else { break };
                    // A receiver gone (`done` panicked): no more jobs.
                    if tx.send((i, guarded(job))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        for (i, result) in rx {
            done(i, result);
        }
    });
}

/// The job's result, a panic turned into an error.
fn guarded<T>(job: Job<'_, T>) -> anyhow::Result<T> {
    catch_unwind(AssertUnwindSafe(job)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        Err(anyhow::anyhow!("the job panicked: {what}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::{
        sync::{
            Arc, Barrier,
            atomic::{AtomicUsize, Ordering},
        },
        thread::{self, ThreadId},
        time::Duration,
    };

    /// Jobs that count how many run at once, each returning its index
    /// and its lines.
    fn counted(
        n: usize,
        running: &Arc<AtomicUsize>,
        most: &Arc<AtomicUsize>,
    ) -> Vec<Job<'static, (usize, Vec<String>)>> {
        (0..n)
            .map(|i| {
                let (running, most) = (Arc::clone(running), Arc::clone(most));
                Box::new(move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    // Later jobs shorter: they finish out of order.
                    thread::sleep(Duration::from_millis(5 * (n - i) as u64));
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok((i, (0..3).map(|l| format!("job {i} line {l}")).collect()))
                }) as Job<'static, _>
            })
            .collect()
    }

    #[test]
    fn every_result_comes_back_once_with_its_lines_together() {
        let (running, most) = Default::default();
        let mut printed = Vec::new();
        let mut seen = Vec::new();
        run(2, counted(7, &running, &most), |i, r| {
            let (j, lines) = r.unwrap();
            assert_eq!(i, j);
            seen.push(i);
            printed.extend(lines);
        });
        seen.sort_unstable();
        assert_eq!(seen, (0..7).collect::<Vec<_>>());
        assert_eq!(most.load(Ordering::SeqCst), 2);
        // Each job's three lines one after the other, in its order.
        for chunk in printed.chunks(3) {
            let job = &chunk[0][..chunk[0].find(" line").unwrap()];
            for (l, line) in chunk.iter().enumerate() {
                assert_eq!(*line, format!("{job} line {l}"));
            }
        }
    }

    #[test]
    fn one_lane_is_serial_on_the_calling_thread() {
        let (running, most) = Default::default();
        let mut order = Vec::new();
        run(1, counted(5, &running, &most), |i, r| {
            assert_eq!(r.unwrap().0, i);
            order.push(i);
        });
        assert_eq!(order, [0, 1, 2, 3, 4]);
        assert_eq!(most.load(Ordering::SeqCst), 1);
        let here = thread::current().id();
        let jobs: Vec<Job<'_, ThreadId>> = (0..3)
            .map(|_| Box::new(|| Ok(thread::current().id())) as Job<'_, _>)
            .collect();
        run(1, jobs, |_, r| assert_eq!(r.unwrap(), here));
    }

    #[test]
    fn lanes_run_at_once_and_never_more_than_asked() {
        // Two jobs that each wait for the other: done only if both run
        // at the same time.
        let meet = Barrier::new(2);
        let jobs: Vec<Job<'_, ()>> = (0..2)
            .map(|_| {
                let meet = &meet;
                Box::new(move || {
                    meet.wait();
                    Ok(())
                }) as Job<'_, _>
            })
            .collect();
        let mut n = 0;
        run(2, jobs, |_, r| {
            r.unwrap();
            n += 1;
        });
        assert_eq!(n, 2);
        let (running, most) = Default::default();
        run(3, counted(9, &running, &most), |_, r| drop(r.unwrap()));
        assert_eq!(most.load(Ordering::SeqCst), 3);
        // More lanes than jobs, and no job at all.
        run(8, counted(2, &running, &most), |_, r| drop(r.unwrap()));
        run(2, Vec::<Job<'_, ()>>::new(), |_, _| unreachable!());
    }

    #[test]
    fn a_failing_job_does_not_stop_the_others() {
        for lanes in [1, 2] {
            let jobs: Vec<Job<'_, usize>> = (0..6_usize)
                .map(|i| {
                    Box::new(move || match i {
                        1 => anyhow::bail!("guest {i} failed"),
                        3 => panic!("guest {i} panicked"),
                        _ => Ok(i),
                    }) as Job<'_, _>
                })
                .collect();
            let mut results: Vec<(usize, Result<usize, String>)> = Vec::new();
            run(lanes, jobs, |i, r| {
                results.push((i, r.map_err(|e| format!("{e:#}"))));
            });
            results.sort_by_key(|(i, _)| *i);
            assert_eq!(
                results,
                [
                    (0, Ok(0)),
                    (1, Err("guest 1 failed".into())),
                    (2, Ok(2)),
                    (3, Err("the job panicked: guest 3 panicked".into())),
                    (4, Ok(4)),
                    (5, Ok(5)),
                ],
                "{lanes} lane(s)"
            );
        }
    }
}
