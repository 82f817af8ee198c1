//! Reading a file back and checking its pattern.
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::pattern::{BLOCK, BlockFault, Pattern};

#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("verify {path}: {what}: {error}")]
    Io {
        path: PathBuf,
        what: &'static str,
        error: io::Error,
    },
    #[error("verify {path}: file is {found} bytes, expected {expected}")]
    Length {
        path: PathBuf,
        found: u64,
        expected: u64,
    },
    #[error("verify {path}: block at offset {offset}: {fault}")]
    Block {
        path: PathBuf,
        offset: u64,
        fault: BlockFault,
    },
}

fn open_for_verify(path: &Path, noatime: bool) -> io::Result<File> {
    let mut flags = libc::O_CLOEXEC;
    if noatime {
        flags |= libc::O_NOATIME;
    }
    OpenOptions::new().read(true).custom_flags(flags).open(path)
}

/// Reads `path` back from the device and checks it holds exactly `size`
/// bytes of `pattern`. Returns the bytes checked.
///
/// The page cache would answer from memory what we just wrote, so first
/// fdatasync(2) (posix_fadvise(2) does not drop dirty pages), then
/// posix_fadvise(POSIX_FADV_DONTNEED) to drop the clean pages, then read.
pub fn verify_file(
    path: &Path,
    pattern: &Pattern,
    size: u64,
    noatime: bool,
) -> Result<u64, VerifyError> {
    let io_err = |what, error| VerifyError::Io {
        path: path.to_path_buf(),
        what,
        error,
    };
    let file = open_for_verify(path, noatime).map_err(|e| io_err("open", e))?;
    let found = file.metadata().map_err(|e| io_err("stat", e))?.len();
    if found != size {
        return Err(VerifyError::Length {
            path: path.to_path_buf(),
            found,
            expected: size,
        });
    }
    file.sync_data().map_err(|e| io_err("fdatasync", e))?;
    // SAFETY: plain syscall on an open descriptor.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(io_err(
            "posix_fadvise(DONTNEED)",
            io::Error::from_raw_os_error(rc),
        ));
    }
    const READ: usize = 256 * BLOCK;
    let mut buf = vec![0u8; READ];
    let mut off = 0u64;
    while off < size {
        let n = (size - off).min(READ as u64) as usize;
        file.read_exact_at(&mut buf[..n], off)
            .map_err(|e| io_err("read", e))?;
        for (i, block) in buf[..n].chunks(BLOCK).enumerate() {
            let block_off = off + (i * BLOCK) as u64;
            pattern
                .check_block(block_off, block)
                .map_err(|fault| VerifyError::Block {
                    path: path.to_path_buf(),
                    offset: block_off,
                    fault,
                })?;
        }
        off += n as u64;
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pattern(path: &Path, p: &Pattern, size: usize) {
        let mut data = vec![0u8; size];
        p.fill(&mut data, 0, false);
        std::fs::write(path, data).unwrap();
    }

    /// Inverts one byte of the file in place.
    fn flip(path: &Path, off: u64) {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let mut b = [0u8];
        f.read_exact_at(&mut b, off).unwrap();
        f.write_all_at(&[!b[0]], off).unwrap();
    }

    #[test]
    fn clean_file_passes_and_every_kind_of_damage_fails() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let p = Pattern::new(3, 7);
        let size = 3 * BLOCK + 123;
        write_pattern(&path, &p, size);
        assert_eq!(
            verify_file(&path, &p, size as u64, false).unwrap(),
            size as u64
        );
        assert_eq!(
            verify_file(&path, &p, size as u64, true).unwrap(),
            size as u64
        );

        // One flipped byte, written behind the writer's back.
        flip(&path, (BLOCK + 1000) as u64);
        let e = verify_file(&path, &p, size as u64, false).unwrap_err();
        assert!(
            matches!(e, VerifyError::Block { offset, fault: BlockFault::BadChecksum, .. } if offset == BLOCK as u64),
            "{e}"
        );

        // Wrong pattern (another file id) and wrong length.
        write_pattern(&path, &p, size);
        let q = Pattern::new(3, 8);
        assert!(matches!(
            verify_file(&path, &q, size as u64, false),
            Err(VerifyError::Block {
                offset: 0,
                fault: BlockFault::WrongFile { found: 7 },
                ..
            })
        ));
        assert!(matches!(
            verify_file(&path, &p, size as u64 + 1, false),
            Err(VerifyError::Length { .. })
        ));
        // Damage in the short last block is found too.
        flip(&path, (3 * BLOCK + 100) as u64);
        let e = verify_file(&path, &p, size as u64, false).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("block at offset {}", 3 * BLOCK)),
            "{e}"
        );
    }
}
