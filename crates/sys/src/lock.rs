//! One process at a time: an exclusive flock(2) on a file that names its
//! holder. The kernel drops the lock when the process ends, however it
//! ends, so a crash leaves nothing to clean up.
use std::{
    fs::{File, OpenOptions},
    io::{self, Read as _, Seek as _, Write as _},
    os::fd::AsRawFd as _,
    path::Path,
};

use anyhow::Context as _;

/// The lock on `path` (made if missing), with this process's pid written
/// in it; or `Err` of the pid the holder wrote when another process holds
/// it. Never waits.
pub fn lock_exclusive(path: &Path) -> anyhow::Result<Result<File, String>> {
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            return Ok(Err(pid.trim().to_string()));
        }
        return Err(e).with_context(|| format!("locking {}", path.display()));
    }
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| writeln!(file, "{}", std::process::id()))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(Ok(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second taker hears the holder's pid; once it lets go, the next
    /// takes the lock.
    #[test]
    fn a_held_lock_names_its_holder() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("lock");
        let first = lock_exclusive(&path).expect("lock").expect("free");
        let holder = lock_exclusive(&path).expect("lock").expect_err("held");
        assert_eq!(holder, std::process::id().to_string());
        drop(first);
        lock_exclusive(&path).expect("lock").expect("free again");
    }
}
