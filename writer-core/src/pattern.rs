//! The verifiable data pattern.
//!
//! Every file is cut into 4 KiB blocks at file offsets that are multiples of
//! [`BLOCK`]. A full block is
//!
//! | bytes      | content                                                |
//! |------------|--------------------------------------------------------|
//! | 0..8       | magic `WBSCOPE1`                                        |
//! | 8..16      | file id (little endian): `job << 32 \| file index`     |
//! | 16..24     | the block's file offset (little endian)                 |
//! | 24..4088   | payload: pseudo-random bytes from (seed, file id)       |
//! | 4088..4096 | checksum of header and payload                          |
//!
//! The payload is the same in every block of one file, so writing a chunk
//! only stamps 32 bytes per block into a buffer that already holds the
//! payload: generating the data costs almost nothing next to the write. A
//! block moved to another offset or file is caught by its header, a changed
//! payload byte by the checksum. A short last block holds the prefix of the
//! full block (its checksum may be cut off; verification then compares bytes).

/// Pattern block size.
pub const BLOCK: usize = 4096;
const MAGIC: [u8; 8] = *b"WBSCOPE1";
const HEADER: usize = 24;
const CSUM_AT: usize = BLOCK - 8;

/// splitmix64's output function: a cheap, well-mixed 64-bit permutation.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Hash of payload bytes (8 at a time, position-dependent).
pub(crate) fn payload_hash(bytes: &[u8]) -> u64 {
    let mut h = 0x243f_6a88_85a3_08d3u64;
    for (i, w) in bytes.chunks(8).enumerate() {
        let mut word = [0u8; 8];
        word[..w.len()].copy_from_slice(w);
        h = mix64(h ^ u64::from_le_bytes(word) ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    }
    h
}

pub(crate) fn checksum(file_id: u64, offset: u64, payload_hash: u64) -> u64 {
    mix64(mix64(u64::from_le_bytes(MAGIC) ^ file_id) ^ offset.rotate_left(29) ^ payload_hash)
}

/// The pattern of one file.
#[derive(Clone)]
pub struct Pattern {
    file_id: u64,
    /// A full block with the payload in place and header/checksum zeroed.
    template: Box<[u8]>,
    payload_hash: u64,
}

impl std::fmt::Debug for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pattern")
            .field("file_id", &self.file_id)
            .finish()
    }
}

impl Pattern {
    pub fn new(seed: u64, file_id: u64) -> Self {
        let mut template = vec![0u8; BLOCK].into_boxed_slice();
        let mut state = mix64(seed ^ mix64(file_id));
        for w in template[HEADER..CSUM_AT].chunks_mut(8) {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let v = mix64(state).to_le_bytes();
            w.copy_from_slice(&v[..w.len()]);
        }
        let payload_hash = payload_hash(&template[HEADER..CSUM_AT]);
        Pattern {
            file_id,
            template,
            payload_hash,
        }
    }

    pub fn file_id(&self) -> u64 {
        self.file_id
    }

    /// Position of `offset` inside its block.
    pub fn phase(&self, offset: u64) -> usize {
        (offset % BLOCK as u64) as usize
    }

    /// The 32 bytes that differ between blocks: header at 0..24, checksum at
    /// 4088..4096.
    fn stamp(&self, block_off: u64) -> ([u8; HEADER], [u8; 8]) {
        let mut h = [0u8; HEADER];
        h[..8].copy_from_slice(&MAGIC);
        h[8..16].copy_from_slice(&self.file_id.to_le_bytes());
        h[16..24].copy_from_slice(&block_off.to_le_bytes());
        let c = checksum(self.file_id, block_off, self.payload_hash).to_le_bytes();
        (h, c)
    }

    /// The full expected block at block-aligned `block_off`.
    pub fn block(&self, block_off: u64) -> Vec<u8> {
        let mut b = self.template.to_vec();
        let (h, c) = self.stamp(block_off);
        b[..HEADER].copy_from_slice(&h);
        b[CSUM_AT..].copy_from_slice(&c);
        b
    }

    /// Writes the pattern bytes of file range `[offset, offset+buf.len())`
    /// into `buf`. With `template_ready`, `buf` already holds the payload at
    /// this same block phase and only headers and checksums are stamped.
    pub fn fill(&self, buf: &mut [u8], offset: u64, template_ready: bool) {
        let mut pos = 0usize;
        while pos < buf.len() {
            let file_pos = offset + pos as u64;
            let in_block = self.phase(file_pos);
            let block_off = file_pos - in_block as u64;
            let n = (BLOCK - in_block).min(buf.len() - pos);
            let dst = &mut buf[pos..pos + n];
            if !template_ready {
                dst.copy_from_slice(&self.template[in_block..in_block + n]);
            }
            let (h, c) = self.stamp(block_off);
            // Overlay the parts of [0, HEADER) and [CSUM_AT, BLOCK) that fall
            // inside [in_block, in_block + n).
            for (src, at) in [(&h[..], 0usize), (&c[..], CSUM_AT)] {
                let lo = at.max(in_block);
                let hi = (at + src.len()).min(in_block + n);
                if lo < hi {
                    dst[lo - in_block..hi - in_block].copy_from_slice(&src[lo - at..hi - at]);
                }
            }
            pos += n;
        }
    }
}

/// What is wrong with a block read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockFault {
    /// No magic: never written by wbscope (a hole, zeros, other data).
    NoMagic,
    WrongFile {
        found: u64,
    },
    WrongOffset {
        found: u64,
    },
    BadChecksum,
    /// Header and checksum agree but bytes differ (short last block).
    Mismatch {
        at: usize,
    },
}

impl std::fmt::Display for BlockFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BlockFault::NoMagic => f.write_str("no wbscope header (zeros or foreign data)"),
            BlockFault::WrongFile { found } => write!(f, "block belongs to file id {found:#x}"),
            BlockFault::WrongOffset { found } => write!(f, "block was written for offset {found}"),
            BlockFault::BadChecksum => f.write_str("checksum mismatch (payload changed)"),
            BlockFault::Mismatch { at } => write!(f, "byte {at} of the block differs"),
        }
    }
}

impl Pattern {
    /// Checks the block read back at block-aligned `block_off` (possibly a
    /// short last block).
    pub fn check_block(&self, block_off: u64, got: &[u8]) -> Result<(), BlockFault> {
        let want = self.block(block_off);
        let want = &want[..got.len()];
        if got == want {
            return Ok(());
        }
        if got.len() >= 8 && got[..8] != MAGIC {
            return Err(BlockFault::NoMagic);
        }
        if got.len() >= 16 {
            let id = u64::from_le_bytes(got[8..16].try_into().unwrap_or_default());
            if id != self.file_id {
                return Err(BlockFault::WrongFile { found: id });
            }
        }
        if got.len() >= HEADER {
            let off = u64::from_le_bytes(got[16..24].try_into().unwrap_or_default());
            if off != block_off {
                return Err(BlockFault::WrongOffset { found: off });
            }
        }
        if got.len() == BLOCK {
            let stored = u64::from_le_bytes(got[CSUM_AT..].try_into().unwrap_or_default());
            if stored != checksum(self.file_id, block_off, payload_hash(&got[HEADER..CSUM_AT])) {
                return Err(BlockFault::BadChecksum);
            }
        }
        let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
        Err(BlockFault::Mismatch { at })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_at_any_offset_matches_the_blocks() {
        let p = Pattern::new(1, 42);
        let mut whole = Vec::new();
        for b in 0..4u64 {
            whole.extend(p.block(b * BLOCK as u64));
        }
        for (off, len) in [
            (0usize, 4 * BLOCK),
            (1, 100),
            (4090, 20),
            (4000, 9000),
            (8192, 4096),
        ] {
            let mut buf = vec![0xAA; len];
            p.fill(&mut buf, off as u64, false);
            assert_eq!(buf, whole[off..off + len], "offset {off} len {len}");
        }
    }

    #[test]
    fn blocks_differ_by_offset_and_file_and_check_themselves() {
        let p = Pattern::new(1, 42);
        let q = Pattern::new(1, 43);
        assert_ne!(p.block(0), p.block(4096));
        assert_ne!(p.block(0)[HEADER..], q.block(0)[HEADER..]);
        assert_eq!(p.check_block(4096, &p.block(4096)), Ok(()));
        assert_eq!(p.check_block(4096, &p.block(4096)[..100]), Ok(()));
    }

    #[test]
    fn check_block_names_the_fault() {
        let p = Pattern::new(9, 5);
        let good = p.block(8192);
        let mut b = good.clone();
        b[2000] ^= 1;
        assert_eq!(p.check_block(8192, &b), Err(BlockFault::BadChecksum));
        assert_eq!(
            p.check_block(4096, &good),
            Err(BlockFault::WrongOffset { found: 8192 })
        );
        let other = Pattern::new(9, 6).block(8192);
        assert_eq!(
            p.check_block(8192, &other),
            Err(BlockFault::WrongFile { found: 6 })
        );
        assert_eq!(
            p.check_block(0, &vec![0u8; BLOCK]),
            Err(BlockFault::NoMagic)
        );
        let mut short = good[..100].to_vec();
        short[50] ^= 0xff;
        assert_eq!(
            p.check_block(8192, &short),
            Err(BlockFault::Mismatch { at: 50 })
        );
    }
}
