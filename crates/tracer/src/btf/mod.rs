//! A minimal reader of BTF (BPF Type Format): enough to find where a kernel
//! struct member lives and which parameters a kernel function takes.
//!
//! The eBPF programs read kernel structs through pointers and are built
//! without CO-RE, so member offsets are resolved here at run time from the
//! running kernel's `/sys/kernel/btf/vmlinux` and, for module types, from
//! the module's split BTF (`/sys/kernel/btf/<module>`), then handed to the
//! programs.
//!
//! Format references: the binary layouts are those of the kernel's
//! `include/uapi/linux/btf.h` (cited on each item below) and their meaning
//! is described in `Documentation/bpf/btf.rst`. Split BTF follows libbpf's
//! `btf__parse_split()`: a split blob's type ids continue after the base's
//! last id and its string offsets continue after the base's string section.
//!
//! Everything read from a blob is bounds-checked: a truncated or garbage
//! blob gives a [`BtfError`], never a panic, an unbounded loop or an
//! allocation larger than the blob itself.
//!
//! aya-obj's parser keeps its type accessors private and btf-rs is LGPL,
//! hence this small reader of our own.
use std::{
    fs, io,
    path::{Path, PathBuf},
};

/// Where the running kernel exposes its BTF: `vmlinux` plus one split file
/// per loaded module that has BTF.
pub(crate) const SYSFS_BTF_DIR: &str = "/sys/kernel/btf";

/// `BTF_MAGIC` (`0xeB9F`, include/uapi/linux/btf.h); stored in the blob's byte order.
const BTF_MAGIC: u16 = 0xeb9f;
/// `BTF_VERSION` (include/uapi/linux/btf.h).
const BTF_VERSION: u8 = 1;
/// `sizeof(struct btf_header)` with the fields read here (include/uapi/linux/btf.h):
///
/// ```text
/// struct btf_header {
///     __u16 magic; __u8 version; __u8 flags; __u32 hdr_len;
///     /* All offsets are in bytes relative to the end of this header */
///     __u32 type_off; __u32 type_len; __u32 str_off; __u32 str_len;
/// };
/// ```
///
/// `hdr_len` may be larger (the header is extensible); the sections are then
/// located relative to `hdr_len` and the extra fields are ignored.
const BTF_HEADER_LEN: usize = 24;

// `BTF_KIND_*` (include/uapi/linux/btf.h).
const KIND_INT: u32 = 1;
const KIND_PTR: u32 = 2;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_FWD: u32 = 7;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_FLOAT: u32 = 16;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

/// Words (`__u32`) in `struct btf_type` (include/uapi/linux/btf.h):
/// `name_off`, `info`, and the `size`/`type` union.
const BTF_TYPE_WORDS: usize = 3;

/// Size of a kernel pointer: the kernels wbscope traces are 64-bit.
const POINTER_SIZE: u64 = 8;

/// How many typedef/const/volatile/array/anonymous-member levels are
/// followed before the data is taken to be cyclic (libbpf stops at 32 too).
const MAX_RESOLVE_DEPTH: usize = 32;

/// How many struct/union members one [`Btf::member`] lookup may examine in
/// total; bounds the work on crafted blobs whose anonymous members fan out.
/// (Real lookups in vmlinux examine a few hundred.)
const MAX_MEMBER_VISITS: usize = 1 << 20;

/// What went wrong reading BTF or looking something up in it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum BtfError {
    #[error("reading {}: {error}", .path.display())]
    Io { path: PathBuf, error: io::Error },
    #[error("malformed BTF: {0}")]
    Malformed(String),
    #[error("unsupported BTF: {0}")]
    Unsupported(String),
    #[error("invalid kernel module name {0:?}")]
    InvalidModuleName(String),
    #[error("invalid member path {0:?}")]
    InvalidMemberPath(String),
    #[error("no struct or union named {0} in BTF")]
    NoSuchStruct(String),
    #[error("{kind} {struct_name} has no member {member}")]
    NoSuchMember {
        /// `struct` or `union`.
        kind: &'static str,
        struct_name: String,
        member: String,
    },
    #[error("{struct_name}.{prefix} is {kind}, not a struct or union, so it has no member {rest}")]
    NotComposite {
        struct_name: String,
        prefix: String,
        kind: &'static str,
        rest: String,
    },
    #[error("{count} definitions of {struct_name} in BTF disagree on member {member}")]
    Ambiguous {
        struct_name: String,
        member: String,
        count: usize,
    },
    #[cfg(test)]
    #[error("no function named {0} in BTF")]
    NoSuchFunc(String),
    #[error("no enumerator named {0} in BTF")]
    NoSuchEnumerator(String),
}

fn malformed(msg: impl Into<String>) -> BtfError {
    BtfError::Malformed(msg.into())
}

/// Where a struct member lives and how to read it.
///
/// To read it from a struct at address `p`: load `size` bytes at
/// `p + byte_offset` (little-endian). If `bit_size` is 0 that is the value.
/// Otherwise the member is a bitfield held in that naturally aligned
/// 1/2/4/8-byte unit: its value is
/// `(unit >> bit_offset) & ((1 << bit_size) - 1)` (all ones for 64 bits);
/// see `MemberLayout::read_from` (test code). The unit is the smallest 1/2/4/8-byte
/// one aligned (relative to the struct's start) that holds every bit; in a
/// packed struct it may extend past the struct's last byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MemberLayout {
    /// Offset of the member (or of the unit holding the bitfield) from the
    /// start of the outermost struct, in bytes.
    pub(crate) byte_offset: u32,
    /// Bytes to load: the member type's size, or the bitfield's unit size.
    pub(crate) size: u32,
    /// First bit of the bitfield within the loaded unit (0 if not a bitfield).
    pub(crate) bit_offset: u8,
    /// Width of the bitfield in bits; 0 means not a bitfield.
    pub(crate) bit_size: u8,
}

impl MemberLayout {
    /// Used by the tests (the layouts and parameters they check).
    #[cfg(test)]
    /// Whether the member is a bitfield.
    pub(crate) fn is_bitfield(&self) -> bool {
        self.bit_size != 0
    }

    /// Used by the tests (the layouts and parameters they check).
    #[cfg(test)]
    /// Reads the member from `bytes`, an image of the outermost struct in
    /// little-endian byte order, following exactly the recipe on
    /// [`MemberLayout`]. `None` if the member is not a 1/2/4/8-byte scalar
    /// or bitfield, or lies outside `bytes`.
    pub(crate) fn read_from(&self, bytes: &[u8]) -> Option<u64> {
        if !matches!(self.size, 1 | 2 | 4 | 8) {
            return None;
        }
        let start = usize::try_from(self.byte_offset).ok()?;
        let end = start.checked_add(usize::try_from(self.size).ok()?)?;
        let mut buf = [0u8; 8];
        buf.get_mut(..end - start)?
            .copy_from_slice(bytes.get(start..end)?);
        let unit = u64::from_le_bytes(buf);
        if self.bit_size == 0 {
            return Some(unit);
        }
        let shifted = unit.checked_shr(u32::from(self.bit_offset))?;
        let mask = u64::MAX.checked_shr(64u32.checked_sub(u32::from(self.bit_size))?)?;
        Some(shifted & mask)
    }
}

/// Parsed BTF: a standalone blob (vmlinux), possibly with split blobs
/// (modules) stacked on top of it.
///
/// Types are kept as the raw `__u32` words of the type section(s), indexed
/// by type id; strings are the string section(s) concatenated, so a split
/// blob's string offsets index them directly.
#[derive(Clone, Debug)]
pub(crate) struct Btf {
    /// Type section words of the base, then of each split blob.
    words: Vec<u32>,
    /// `starts[id]`: index in `words` of type `id`'s `struct btf_type`.
    /// `starts[0]` stands for `void` and is never read.
    starts: Vec<usize>,
    /// String sections of the base, then of each split blob.
    strings: Vec<u8>,
}

/// One type record: `struct btf_type` plus its kind-specific trailing data
/// (include/uapi/linux/btf.h), already bounds-checked.
#[derive(Clone, Copy, Debug)]
struct Ty<'a> {
    id: u32,
    name_off: u32,
    info: u32,
    /// The `size`/`type` union of `struct btf_type`.
    size_or_type: u32,
    extra: &'a [u32],
}

impl Ty<'_> {
    /// `BTF_INFO_KIND(info)`; see [`kind_of`].
    fn kind(&self) -> u32 {
        kind_of(self.info)
    }

    /// Used by the tests (the layouts and parameters they check).
    #[cfg(test)]
    /// `BTF_INFO_VLEN(info)`; see [`vlen_of`].
    fn vlen(&self) -> usize {
        vlen_of(self.info)
    }

    /// `BTF_INFO_KFLAG(info)`: bit 31 (include/uapi/linux/btf.h).
    fn kflag(&self) -> bool {
        self.info >> 31 == 1
    }

    fn is_composite(&self) -> bool {
        matches!(self.kind(), KIND_STRUCT | KIND_UNION)
    }

    /// `struct btf_member { __u32 name_off; __u32 type; __u32 offset; }`
    /// records following a STRUCT/UNION.
    fn members(&self) -> impl Iterator<Item = Member> + '_ {
        self.extra.chunks_exact(3).map(|m| Member {
            name_off: m[0],
            type_id: m[1],
            offset: m[2],
        })
    }
}

/// `struct btf_member` (include/uapi/linux/btf.h).
#[derive(Clone, Copy, Debug)]
struct Member {
    name_off: u32,
    type_id: u32,
    /// Bit offset, or with the struct's kind_flag set,
    /// `BTF_MEMBER_BITFIELD_SIZE(val) << 24 | BTF_MEMBER_BIT_OFFSET(val)`.
    offset: u32,
}

/// `BTF_INFO_KIND(info)`. The kernel's include/uapi/linux/btf.h (6.18)
/// has the kind in bits 24-28 with bits 29-30 unused, and the kernel rejects
/// BTF with unused bits set; libbpf's newer copy of the header widens the
/// kind to bits 24-30. Reading the wider field gives the same kind for every
/// valid blob, and an unknown (so refused) one for a blob using new kinds.
fn kind_of(info: u32) -> u32 {
    (info >> 24) & 0x7f
}

/// `BTF_INFO_VLEN(info)`: bits 0-15 in the kernel's header (16-23 unused,
/// must be 0), widened to bits 0-23 in libbpf's newer one; read as the
/// latter, as for [`kind_of`].
fn vlen_of(info: u32) -> usize {
    (info & 0xff_ffff) as usize
}

/// Name of a kind as bpftool prints it, for messages.
fn kind_name(kind: u32) -> &'static str {
    match kind {
        0 => "void",
        KIND_INT => "INT",
        KIND_PTR => "PTR",
        KIND_ARRAY => "ARRAY",
        KIND_STRUCT => "STRUCT",
        KIND_UNION => "UNION",
        KIND_ENUM => "ENUM",
        KIND_FWD => "FWD",
        KIND_TYPEDEF => "TYPEDEF",
        KIND_VOLATILE => "VOLATILE",
        KIND_CONST => "CONST",
        KIND_RESTRICT => "RESTRICT",
        KIND_FUNC => "FUNC",
        KIND_FUNC_PROTO => "FUNC_PROTO",
        KIND_VAR => "VAR",
        KIND_DATASEC => "DATASEC",
        KIND_FLOAT => "FLOAT",
        KIND_DECL_TAG => "DECL_TAG",
        KIND_TYPE_TAG => "TYPE_TAG",
        KIND_ENUM64 => "ENUM64",
        _ => "an unknown kind",
    }
}

/// Words of kind-specific data after `struct btf_type`
/// (include/uapi/linux/btf.h): INT one `__u32`, ARRAY one `struct btf_array`
/// (3 words), STRUCT/UNION `vlen` `struct btf_member` (3), ENUM `vlen`
/// `struct btf_enum` (2), FUNC_PROTO `vlen` `struct btf_param` (2), VAR one
/// `struct btf_var` (1), DATASEC `vlen` `struct btf_var_secinfo` (3),
/// DECL_TAG one `struct btf_decl_tag` (1), ENUM64 `vlen` `struct btf_enum64`
/// (3); the others none. `None` for a kind this reader does not know, whose
/// length therefore cannot be known either.
fn extra_words(kind: u32, vlen: usize) -> Option<usize> {
    Some(match kind {
        KIND_INT | KIND_VAR | KIND_DECL_TAG => 1,
        KIND_ARRAY => 3,
        KIND_STRUCT | KIND_UNION | KIND_DATASEC | KIND_ENUM64 => 3 * vlen,
        KIND_ENUM | KIND_FUNC_PROTO => 2 * vlen,
        KIND_PTR | KIND_FWD | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT
        | KIND_FUNC | KIND_FLOAT | KIND_TYPE_TAG => 0,
        _ => return None,
    })
}

/// For kinds whose trailing records each start with a `name_off` (struct
/// members, enumerators, function parameters), the records' length in words.
fn named_records(kind: u32) -> Option<usize> {
    match kind {
        KIND_STRUCT | KIND_UNION | KIND_ENUM64 => Some(3),
        KIND_ENUM | KIND_FUNC_PROTO => Some(2),
        _ => None,
    }
}

/// One blob's sections, parsed and checked, before it joins a [`Btf`].
struct Blob {
    words: Vec<u32>,
    /// Start of each type, as an index into this blob's `words`.
    starts: Vec<usize>,
    strings: Vec<u8>,
}

fn read_u32(bytes: &[u8], at: usize) -> Result<u32, BtfError> {
    bytes
        .get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| malformed("truncated header"))
}

/// A section `[off, off + len)` of `data`, checked to lie inside it.
fn section<'a>(data: &'a [u8], off: u32, len: u32, what: &str) -> Result<&'a [u8], BtfError> {
    let start = off as usize;
    start
        .checked_add(len as usize)
        .and_then(|end| data.get(start..end))
        .ok_or_else(|| {
            malformed(format!(
                "{what} section (offset {off}, length {len}) extends past the end of the {} bytes after the header",
                data.len()
            ))
        })
}

/// Parses one blob. Its first type gets id `first_id`; its string offsets
/// start at `str_base`. A standalone blob has `first_id` 1 and `str_base`
/// 0; a `split` one continues after its base's types and strings.
fn parse_blob(
    bytes: &[u8],
    split: bool,
    first_id: usize,
    str_base: usize,
) -> Result<Blob, BtfError> {
    if bytes.len() < BTF_HEADER_LEN {
        return Err(malformed(format!(
            "{} bytes is shorter than the {BTF_HEADER_LEN}-byte header",
            bytes.len()
        )));
    }
    let magic = u16::from_le_bytes([bytes[0], bytes[1]]);
    if magic == BTF_MAGIC.swap_bytes() {
        return Err(BtfError::Unsupported("big-endian BTF".into()));
    }
    if magic != BTF_MAGIC {
        return Err(malformed(format!("bad magic {magic:#06x}")));
    }
    if bytes[2] != BTF_VERSION {
        return Err(BtfError::Unsupported(format!("version {}", bytes[2])));
    }
    let hdr_len = read_u32(bytes, 4)? as usize;
    if hdr_len < BTF_HEADER_LEN || hdr_len > bytes.len() {
        return Err(malformed(format!(
            "header length {hdr_len} (blob is {} bytes)",
            bytes.len()
        )));
    }
    let data = &bytes[hdr_len..];
    let types = section(data, read_u32(bytes, 8)?, read_u32(bytes, 12)?, "type")?;
    let strings = section(data, read_u32(bytes, 16)?, read_u32(bytes, 20)?, "string")?;

    // Strings are NUL-terminated; a standalone blob's first one is "".
    // A split blob may add no strings at all.
    if !split && strings.first() != Some(&0) {
        return Err(malformed(
            "string section does not start with an empty string",
        ));
    }
    if !strings.is_empty() && strings.last() != Some(&0) {
        return Err(malformed("string section is not NUL-terminated"));
    }
    let str_total = str_base
        .checked_add(strings.len())
        .ok_or_else(|| malformed("string sections too large"))?;

    if types.len() % 4 != 0 {
        return Err(malformed(format!(
            "type section length {} is not a multiple of 4",
            types.len()
        )));
    }
    let words: Vec<u32> = types
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();

    let mut starts = Vec::new();
    let mut pos = 0;
    while pos < words.len() {
        let id = first_id + starts.len();
        let header = words
            .get(pos..pos + BTF_TYPE_WORDS)
            .ok_or_else(|| malformed(format!("type [{id}] truncated in its struct btf_type")))?;
        let (name_off, info) = (header[0], header[1]);
        let kind = kind_of(info);
        let extra = extra_words(kind, vlen_of(info))
            .ok_or_else(|| BtfError::Unsupported(format!("type [{id}] has unknown kind {kind}")))?;
        let end = pos + BTF_TYPE_WORDS + extra;
        let trailing = words.get(pos + BTF_TYPE_WORDS..end).ok_or_else(|| {
            malformed(format!(
                "type [{id}] ({}) truncated: needs {extra} more words",
                kind_name(kind)
            ))
        })?;
        let check_name = |off: u32| {
            if (off as usize) < str_total {
                Ok(())
            } else {
                Err(malformed(format!(
                    "type [{id}] names string offset {off}, past the strings' end {str_total}"
                )))
            }
        };
        check_name(name_off)?;
        if let Some(stride) = named_records(kind) {
            for record in trailing.chunks_exact(stride) {
                check_name(record[0])?;
            }
        }
        starts.push(pos);
        pos = end;
    }
    Ok(Blob {
        words,
        starts,
        strings: strings.to_vec(),
    })
}

impl Btf {
    /// Parses a standalone blob such as `/sys/kernel/btf/vmlinux`.
    pub(crate) fn parse(bytes: &[u8]) -> Result<Btf, BtfError> {
        let blob = parse_blob(bytes, false, 1, 0)?;
        let mut starts = Vec::with_capacity(blob.starts.len() + 1);
        starts.push(0);
        starts.extend(blob.starts);
        Ok(Btf {
            words: blob.words,
            starts,
            strings: blob.strings,
        })
    }

    /// Parses a split blob such as `/sys/kernel/btf/ext4` on top of `base`
    /// (which must be the BTF it was generated against, normally vmlinux).
    /// The result holds the base's types and the split ones; type ids and
    /// string offsets continue where the base's end, as in libbpf's
    /// `btf__parse_split()`.
    pub(crate) fn parse_split(base: Btf, bytes: &[u8]) -> Result<Btf, BtfError> {
        let Btf {
            mut words,
            mut starts,
            mut strings,
        } = base;
        let blob = parse_blob(bytes, true, starts.len(), strings.len())?;
        let word_base = words.len();
        words.extend(blob.words);
        starts.extend(blob.starts.into_iter().map(|s| s + word_base));
        strings.extend(blob.strings);
        Ok(Btf {
            words,
            starts,
            strings,
        })
    }

    /// Reads `base` and, if given, the split blob `split` on top of it.
    pub(crate) fn from_files(base: &Path, split: Option<&Path>) -> Result<Btf, BtfError> {
        let read = |path: &Path| {
            fs::read(path).map_err(|error| BtfError::Io {
                path: path.to_owned(),
                error,
            })
        };
        let btf = Btf::parse(&read(base)?)?;
        match split {
            None => Ok(btf),
            Some(split) => Btf::parse_split(btf, &read(split)?),
        }
    }

    /// The running kernel's BTF: `/sys/kernel/btf/vmlinux`, plus
    /// `/sys/kernel/btf/<module>` on top of it if `module` is given.
    ///
    /// A module built into the kernel has no file of its own (its types and
    /// functions are in vmlinux); see [`Btf::kernel_has_module_btf`].
    pub(crate) fn from_kernel(module: Option<&str>) -> Result<Btf, BtfError> {
        let dir = Path::new(SYSFS_BTF_DIR);
        let split = module.map(|m| walk::module_path(dir, m)).transpose()?;
        Btf::from_files(&dir.join("vmlinux"), split.as_deref())
    }

    /// Whether the running kernel has a split BTF file for `module`, i.e.
    /// the module is loaded (not built in) and has BTF.
    pub(crate) fn kernel_has_module_btf(module: &str) -> bool {
        walk::module_path(Path::new(SYSFS_BTF_DIR), module).is_ok_and(|p| p.is_file())
    }

    /// Number of types, not counting `void` (so the highest type id).
    pub(crate) fn type_count(&self) -> usize {
        self.starts.len() - 1
    }

    /// Names of the functions (`BTF_KIND_FUNC`) with type ids above
    /// `after`: with `after` the base's [`Btf::type_count`], the functions
    /// a split blob (a module) adds.
    pub(crate) fn function_names_after(&self, after: usize) -> Result<Vec<String>, BtfError> {
        let mut names = Vec::new();
        for id in after + 1..self.starts.len() {
            let ty = self.ty(id as u32)?;
            if ty.kind() == KIND_FUNC {
                names.push(String::from_utf8_lossy(self.name(ty.name_off)?).into_owned());
            }
        }
        Ok(names)
    }

    /// Where member `path` lives in struct (or union) `struct_name`.
    ///
    /// Members of nested anonymous structs and unions are found as if they
    /// were members of the outer struct, as in C. `path` may name members of
    /// embedded (not pointed-to) structs with dots, e.g.
    /// `member("inode", "i_data.host")`. If several structs share the name
    /// (it happens in vmlinux), those that have the member must agree on its
    /// layout.
    pub(crate) fn member(&self, struct_name: &str, path: &str) -> Result<MemberLayout, BtfError> {
        let parts: Vec<&str> = path.split('.').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(BtfError::InvalidMemberPath(path.to_owned()));
        }
        let mut found: Vec<MemberLayout> = Vec::new();
        let mut error = None;
        // Shared by all same-named structs, so that many crafted ones cannot
        // multiply the work.
        let mut budget = MAX_MEMBER_VISITS;
        for id in 1..self.starts.len() {
            let ty = self.ty(id as u32)?;
            if !ty.is_composite() || !self.name_is(ty.name_off, struct_name) {
                continue;
            }
            match self.resolve_path(ty, struct_name, &parts, &mut budget) {
                Ok(layout) => {
                    if !found.contains(&layout) {
                        found.push(layout);
                    }
                }
                // Report why a struct that has the member failed, rather
                // than that another one lacks it.
                Err(e) => match error {
                    None | Some(BtfError::NoSuchMember { .. }) => error = Some(e),
                    Some(_) => {}
                },
            }
        }
        match (found.as_slice(), error) {
            ([layout], _) => Ok(*layout),
            ([], Some(e)) => Err(e),
            ([], None) => Err(BtfError::NoSuchStruct(struct_name.to_owned())),
            (several, _) => Err(BtfError::Ambiguous {
                struct_name: struct_name.to_owned(),
                member: path.to_owned(),
                count: several.len(),
            }),
        }
    }

    /// `sizeof(struct name)` (or union); several same-named ones must
    /// agree.
    pub(crate) fn struct_size(&self, name: &str) -> Result<u64, BtfError> {
        let mut size = None;
        for id in 1..self.starts.len() {
            let ty = self.ty(id as u32)?;
            if !ty.is_composite() || !self.name_is(ty.name_off, name) {
                continue;
            }
            let this = u64::from(ty.size_or_type);
            match size {
                Some(s) if s != this => {
                    return Err(malformed(format!(
                        "two definitions of {name} of {s} and {this} bytes"
                    )));
                }
                _ => size = Some(this),
            }
        }
        size.ok_or_else(|| BtfError::NoSuchStruct(name.to_owned()))
    }

    /// The word of this standalone blob's type section that holds a BTF
    /// map definition's number: variable `var` (in `.maps`) is a struct
    /// whose `member` points to an array of that many elements (the
    /// convention libbpf reads, `__uint(name, val)` in bpf_helpers.h), and
    /// the word is that array's `nelems` (`struct btf_array`). The
    /// index counts from the type section's first word.
    pub(crate) fn map_def_word(&self, var: &str, member: &str) -> Result<usize, BtfError> {
        let def = (1..self.starts.len())
            .map(|id| self.ty(id as u32))
            .find(|t| {
                t.as_ref()
                    .is_ok_and(|t| t.kind() == KIND_VAR && self.name_is(t.name_off, var))
            })
            .ok_or_else(|| malformed(format!("no variable {var}")))??;
        let def = self.skip_modifiers(def.size_or_type)?;
        if def.kind() != KIND_STRUCT {
            return Err(malformed(format!("{var} is not a struct")));
        }
        let field = def
            .extra
            .chunks_exact(3)
            .find(|m| self.name_is(m[0], member))
            .ok_or_else(|| BtfError::NoSuchMember {
                kind: "struct",
                struct_name: var.to_owned(),
                member: member.to_owned(),
            })?;
        let ptr = self.ty(field[1])?;
        let array = self.ty(ptr.size_or_type)?;
        if ptr.kind() != KIND_PTR || array.kind() != KIND_ARRAY {
            return Err(malformed(format!(
                "{var}.{member} is not a pointer to an array"
            )));
        }
        // `struct btf_array { __u32 type; __u32 index_type; __u32 nelems; }`
        Ok(self.starts[array.id as usize] + BTF_TYPE_WORDS + 2)
    }

    /// Used by the tests (the layouts and parameters they check).
    #[cfg(test)]
    /// Parameter names, in order, of function `name` (a `BTF_KIND_FUNC`).
    /// An unnamed parameter is `""`; a variadic tail is `"..."`. If several
    /// functions share the name, the one with the lowest type id is used.
    pub(crate) fn func_params(&self, name: &str) -> Result<Vec<String>, BtfError> {
        for id in 1..self.starts.len() {
            let func = self.ty(id as u32)?;
            if func.kind() != KIND_FUNC || !self.name_is(func.name_off, name) {
                continue;
            }
            let proto = self.ty(func.size_or_type)?;
            if proto.kind() != KIND_FUNC_PROTO {
                return Err(malformed(format!(
                    "function {name} [{id}] has type [{}] of kind {}, not FUNC_PROTO",
                    proto.id,
                    kind_name(proto.kind())
                )));
            }
            // `struct btf_param { __u32 name_off; __u32 type; }`; a
            // variadic function ends with `name_off = 0, type = 0`.
            let count = proto.vlen();
            return proto
                .extra
                .chunks_exact(2)
                .enumerate()
                .map(|(i, p)| {
                    if i + 1 == count && p == [0, 0] {
                        Ok("...".to_owned())
                    } else {
                        Ok(String::from_utf8_lossy(self.name(p[0])?).into_owned())
                    }
                })
                .collect();
        }
        Err(BtfError::NoSuchFunc(name.to_owned()))
    }

    /// Value of the enumerator `name` in any ENUM or ENUM64 type, named or
    /// anonymous (the kernel's flag numbers are often anonymous enums).
    /// The first one found wins; enumerators share one C namespace.
    pub(crate) fn enum_value(&self, name: &str) -> Result<i64, BtfError> {
        for id in 1..self.starts.len() {
            let ty = self.ty(id as u32)?;
            let found = match ty.kind() {
                // `struct btf_enum { __u32 name_off; __s32 val; }`; kind_flag
                // set means the values are signed, which the cast keeps.
                KIND_ENUM => ty
                    .extra
                    .chunks_exact(2)
                    .find(|e| self.name_is(e[0], name))
                    .map(|e| {
                        if ty.kflag() {
                            i64::from(e[1] as i32)
                        } else {
                            i64::from(e[1])
                        }
                    }),
                // `struct btf_enum64 { __u32 name_off; __u32 val_lo32;
                // __u32 val_hi32; }`.
                KIND_ENUM64 => ty
                    .extra
                    .chunks_exact(3)
                    .find(|e| self.name_is(e[0], name))
                    .map(|e| (u64::from(e[2]) << 32 | u64::from(e[1])) as i64),
                _ => None,
            };
            if let Some(value) = found {
                return Ok(value);
            }
        }
        Err(BtfError::NoSuchEnumerator(name.to_owned()))
    }
}

mod walk;

#[cfg(test)]
mod tests;
