//! Heap buffers aligned for O_DIRECT.
//!
//! open(2), "O_DIRECT": the user buffer, the file offset and the length must
//! be aligned to the logical block size of the device (with 4096 always
//! sufficient on current hardware). We align memory to at least a page.
use std::alloc::{self, Layout};
use std::io;
use std::ptr::NonNull;

use crate::pattern::Pattern;

/// Memory alignment of every buffer: a page, which satisfies any logical
/// block size up to 4096.
pub const MEM_ALIGN: usize = 4096;

pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    layout: Layout,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes (at least 1 byte is allocated), or
    /// an `OutOfMemory` error: a chunk is up to 256 MiB per job (and per
    /// write in flight with io_uring), which a memory limit (`ulimit -v`, a
    /// cgroup) may well refuse, and that must end the run with an error,
    /// not abort the process.
    pub fn try_new(len: usize, align: usize) -> io::Result<Self> {
        let align = align.max(MEM_ALIGN).next_power_of_two();
        let oom = || {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("cannot allocate a buffer of {len} bytes"),
            )
        };
        let layout = Layout::from_size_align(len.max(1), align).map_err(|_| oom())?;
        // SAFETY: layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or_else(oom)?;
        Ok(AlignedBuf { ptr, len, layout })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes, initialised (alloc_zeroed).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

/// A chunk buffer that remembers which pattern template it holds, so that
/// consecutive chunks at the same block phase only re-stamp the per-block
/// header and checksum (a few bytes per 4 KiB) instead of refilling.
#[derive(Debug)]
pub struct ChunkBuf {
    buf: AlignedBuf,
    align: usize,
    /// (file_id, offset % BLOCK, bytes valid) of the template now in `buf`.
    holds: Option<(u64, usize, usize)>,
}

impl ChunkBuf {
    /// A buffer for chunks of `len` bytes; fails rather than aborts when
    /// the memory is not there ([`AlignedBuf::try_new`]).
    pub fn new(len: usize, align: usize) -> io::Result<Self> {
        Ok(ChunkBuf {
            buf: AlignedBuf::try_new(len, align)?,
            align,
            holds: None,
        })
    }

    /// Fills the buffer with the pattern bytes of `[offset, offset+len)` of
    /// the file and returns them. A chunk larger than the buffer (the chunk
    /// size is live) reallocates it, which may fail.
    pub fn prepare(&mut self, pattern: &Pattern, offset: u64, len: usize) -> io::Result<&[u8]> {
        if self.buf.len() < len {
            self.buf = AlignedBuf::try_new(len, self.align)?;
            self.holds = None;
        }
        let phase = pattern.phase(offset);
        let ready = matches!(self.holds, Some((id, p, n)) if id == pattern.file_id() && p == phase && n >= len);
        let out = &mut self.buf.as_mut_slice()[..len];
        pattern.fill(out, offset, ready);
        if !ready {
            self.holds = Some((pattern.file_id(), phase, len));
        }
        Ok(&self.buf.as_slice()[..len])
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.buf.as_slice().as_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_zeroed() {
        let b = AlignedBuf::try_new(10_000, 512).unwrap();
        assert_eq!(b.as_slice().as_ptr() as usize % MEM_ALIGN, 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        let b = AlignedBuf::try_new(8192, 8192).unwrap();
        assert_eq!(b.as_slice().as_ptr() as usize % 8192, 0);
    }

    #[test]
    fn reused_buffer_gives_the_same_bytes_as_a_fresh_fill() {
        let p = Pattern::new(7, 3);
        let mut cb = ChunkBuf::new(3 * 4096, 4096).unwrap();
        for (off, len) in [
            (0u64, 8192usize),
            (8192, 8192),
            (16384, 4096),
            (100, 5000),
            (4196, 5000),
        ] {
            let got = cb.prepare(&p, off, len).unwrap().to_vec();
            let mut want = vec![0u8; len];
            p.fill(&mut want, off, false);
            assert_eq!(got, want, "offset {off} len {len}");
        }
    }

    #[test]
    fn an_allocation_that_cannot_be_met_is_an_error_not_an_abort() {
        // Half the address space: a valid Layout no allocator can satisfy
        // (nothing is reserved, so the test costs no memory).
        let huge = usize::MAX / 4;
        let e = AlignedBuf::try_new(huge, 4096).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::OutOfMemory);
        assert!(e.to_string().contains(&huge.to_string()), "{e}");
        // An impossible layout too.
        assert!(AlignedBuf::try_new(usize::MAX, 4096).is_err());
        // A live chunk change to such a size fails the same way and keeps
        // the old buffer usable.
        let p = Pattern::new(1, 1);
        let mut cb = ChunkBuf::new(4096, 4096).unwrap();
        assert!(cb.prepare(&p, 0, huge).is_err());
        assert_eq!(cb.prepare(&p, 0, 4096).unwrap().len(), 4096);
    }
}
