//! After the drop, a run that goes on writing in a directory (a store)
//! may make, write, cut and remove files beneath it and nowhere else: a
//! Landlock ruleset (Documentation/userspace-api/landlock.rst, Linux
//! 5.13+), which checks the path that seccomp cannot see. Without it, an
//! absolute name given to the openat or unlinkat the filter lets through
//! on the store's descriptor would reach any directory the drop user may
//! write in (`/tmp`, `/var/tmp`, `/dev/shm`).
//!
//! Everything else the run uses was opened before (maps, ring buffers,
//! `/proc/vmstat`, the lock), and Landlock checks a file when it is
//! opened, not when an open descriptor is read or written.
use std::os::fd::BorrowedFd;

use landlock::{
    ABI, Access, AccessFs, PathBeneath, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus,
};

/// The rights the ruleset handles: those of ABI 3 (Linux 6.2, the first
/// with LANDLOCK_ACCESS_FS_TRUNCATE). A kernel with an older ABI gets
/// what it knows (the crate's best-effort mode), one without Landlock
/// none of it: the drop line says which.
const ABI_HANDLED: ABI = ABI::V3;

/// How far the restriction took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Beneath {
    /// Every right of [`ABI_HANDLED`] is checked.
    Enforced,
    /// An older kernel: some rights are not checked (truncation, or
    /// renames across directories before 5.19).
    Partly,
    /// No Landlock in this kernel (or not enabled at boot: `lsm=`).
    Unavailable,
}

/// Restricts the calling thread (the run has one) and what it executes
/// to making, writing, cutting and removing regular files beneath `dir`;
/// every other file-system right of [`ABI_HANDLED`] (reading, listing,
/// executing, making directories or links, …) is refused everywhere
/// from then on, for files not yet open. Sets no_new_privs (the kernel
/// requires it of an unprivileged caller).
pub(crate) fn confine(dir: BorrowedFd<'_>) -> anyhow::Result<Beneath> {
    let allowed =
        AccessFs::MakeReg | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::RemoveFile;
    let status = Ruleset::default()
        .handle_access(AccessFs::from_all(ABI_HANDLED))?
        .create()?
        .add_rule(PathBeneath::new(dir, allowed))?
        .restrict_self()?;
    Ok(match status.ruleset {
        RulesetStatus::FullyEnforced => Beneath::Enforced,
        RulesetStatus::PartiallyEnforced => Beneath::Partly,
        RulesetStatus::NotEnforced => Beneath::Unavailable,
    })
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd as _;

    use super::*;

    /// In a child confined to one directory: a file is made, written, cut
    /// and removed there (through the descriptor and by absolute path),
    /// and refused with EACCES in another directory, as is reading a
    /// file that was not open before. Skipped where Landlock is off.
    #[test]
    fn files_are_made_and_removed_beneath_the_directory_only() {
        let inside = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        let dir = std::fs::File::open(inside.path()).expect("open");
        let c = |p: std::path::PathBuf| {
            std::ffi::CString::new(p.into_os_string().into_encoded_bytes()).expect("path")
        };
        let (in_abs, out_abs) = (c(inside.path().join("abs")), c(outside.path().join("x")));
        std::fs::write(outside.path().join("old"), b"x").expect("old");
        let out_old = c(outside.path().join("old"));
        // SAFETY: the child makes raw system calls and _exits; confine()
        // allocates, which glibc's malloc allows after fork.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let code = (|| {
                use std::os::fd::AsRawFd as _;
                let fd = dir.as_raw_fd();
                match confine(dir.as_fd()) {
                    Ok(Beneath::Enforced) => {}
                    Ok(_) => return 10,
                    Err(_) => return 11,
                }
                let create = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
                let errno = || std::io::Error::last_os_error().raw_os_error();
                // SAFETY: raw calls on valid C strings and buffers.
                unsafe {
                    let f = libc::openat(fd, c"seg".as_ptr(), create, 0o600);
                    if f < 0
                        || libc::write(f, b"abc".as_ptr().cast(), 3) != 3
                        || libc::ftruncate(f, 1) != 0
                        || libc::unlinkat(fd, c"seg".as_ptr(), 0) != 0
                    {
                        return 1;
                    }
                    if libc::open(in_abs.as_ptr(), create, 0o600) < 0
                        || libc::unlink(in_abs.as_ptr()) != 0
                    {
                        return 2;
                    }
                    if libc::openat(fd, out_abs.as_ptr(), create, 0o600) >= 0
                        || errno() != Some(libc::EACCES)
                    {
                        return 3;
                    }
                    if libc::unlink(out_old.as_ptr()) == 0 || errno() != Some(libc::EACCES) {
                        return 4;
                    }
                    if libc::open(out_old.as_ptr(), libc::O_RDONLY) >= 0
                        || errno() != Some(libc::EACCES)
                    {
                        return 5;
                    }
                }
                0
            })();
            // SAFETY: ends the child without running the parent's atexit.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "{status:#x}");
        // This project's machines run Landlock (ABI 7 on 6.18).
        let code = libc::WEXITSTATUS(status);
        assert_ne!(code, 10, "Landlock only partly enforced");
        assert_ne!(code, 11, "Landlock unavailable");
        assert_eq!(code, 0, "step {code} failed");
        assert!(!outside.path().join("x").exists());
        assert!(outside.path().join("old").exists());
        assert!(!inside.path().join("seg").exists());
    }
}
