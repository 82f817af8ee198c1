//! The reference for the writer's uncached strategies: fio 3.33 has no
//! `uncached=1` and xfs_io 6.1's pwrite no RWF_DONTCACHE flag, so the
//! bench runs a bare loop itself: pwritev2(2) of 1 MiB with RWF_DONTCACHE
//! (include/uapi/linux/fs.h, 0x80) from one constant buffer, then fsync(2),
//! in a thread of its own, timed like the commands (open to close, fsync
//! included) and with that thread's system CPU. It has no process start-up
//! and generates no data, so it is a ceiling the writer (which fills a
//! verifiable pattern per chunk) has to come close to, not a twin.
use std::{fs::OpenOptions, io, os::fd::AsRawFd as _, path::Path, time::Instant};

/// What the loop measured: (wall seconds, system CPU seconds of its thread).
pub(super) fn dontcache_loop(path: &Path, size_mib: u64) -> io::Result<(f64, f64)> {
    std::thread::scope(|s| {
        s.spawn(|| {
            let sys0 = thread_sys();
            let started = Instant::now();
            let file = OpenOptions::new().write(true).create_new(true).open(path)?;
            let buf = vec![0x5au8; 1 << 20];
            for i in 0..size_mib {
                let mut done = 0usize;
                while done < buf.len() {
                    let iov = libc::iovec {
                        iov_base: buf[done..].as_ptr() as *mut libc::c_void,
                        iov_len: buf.len() - done,
                    };
                    let off = ((i << 20) + done as u64) as libc::off_t;
                    // SAFETY: one valid iovec over a buffer that outlives the call.
                    let n = unsafe {
                        libc::pwritev2(file.as_raw_fd(), &iov, 1, off, libc::RWF_DONTCACHE)
                    };
                    if n < 0 {
                        let e = io::Error::last_os_error();
                        if e.kind() == io::ErrorKind::Interrupted {
                            continue;
                        }
                        return Err(e);
                    }
                    done += n as usize;
                }
            }
            file.sync_all()?;
            drop(file);
            Ok((started.elapsed().as_secs_f64(), thread_sys() - sys0))
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the pwritev2 loop panicked")))
    })
}

/// System CPU seconds of the calling thread (getrusage(RUSAGE_THREAD)).
fn thread_sys() -> f64 {
    // SAFETY: rusage is plain data; getrusage fills the struct we own.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
        ru
    };
    ru.ru_stime.tv_sec as f64 + ru.ru_stime.tv_usec as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_writes_the_file_and_times_it() {
        // /var/tmp: on the root filesystem, which has RWF_DONTCACHE (a
        // tmpfs /tmp would not).
        let dir = Path::new("/var/tmp").join(format!("wbscope-xtask-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let f = dir.join("f");
        let r = dontcache_loop(&f, 4);
        let len = std::fs::metadata(&f).map(|m| m.len());
        std::fs::remove_dir_all(&dir).unwrap();
        let (wall, sys) = r.unwrap();
        assert!(wall > 0.0 && sys >= 0.0);
        assert_eq!(len.unwrap(), 4 << 20);
    }
}
