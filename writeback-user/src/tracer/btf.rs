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
pub const SYSFS_BTF_DIR: &str = "/sys/kernel/btf";

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
pub enum BtfError {
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
/// see [`MemberLayout::read_from`]. The unit is the smallest 1/2/4/8-byte
/// one aligned (relative to the struct's start) that holds every bit; in a
/// packed struct it may extend past the struct's last byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberLayout {
    /// Offset of the member (or of the unit holding the bitfield) from the
    /// start of the outermost struct, in bytes.
    pub byte_offset: u32,
    /// Bytes to load: the member type's size, or the bitfield's unit size.
    pub size: u32,
    /// First bit of the bitfield within the loaded unit (0 if not a bitfield).
    pub bit_offset: u8,
    /// Width of the bitfield in bits; 0 means not a bitfield.
    pub bit_size: u8,
}

impl MemberLayout {
    /// Whether the member is a bitfield.
    pub fn is_bitfield(&self) -> bool {
        self.bit_size != 0
    }

    /// Reads the member from `bytes`, an image of the outermost struct in
    /// little-endian byte order, following exactly the recipe on
    /// [`MemberLayout`]. `None` if the member is not a 1/2/4/8-byte scalar
    /// or bitfield, or lies outside `bytes`.
    pub fn read_from(&self, bytes: &[u8]) -> Option<u64> {
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
pub struct Btf {
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
    pub fn parse(bytes: &[u8]) -> Result<Btf, BtfError> {
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
    pub fn parse_split(base: Btf, bytes: &[u8]) -> Result<Btf, BtfError> {
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
    pub fn from_files(base: &Path, split: Option<&Path>) -> Result<Btf, BtfError> {
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
    pub fn from_kernel(module: Option<&str>) -> Result<Btf, BtfError> {
        let dir = Path::new(SYSFS_BTF_DIR);
        let split = module.map(|m| module_path(dir, m)).transpose()?;
        Btf::from_files(&dir.join("vmlinux"), split.as_deref())
    }

    /// Whether the running kernel has a split BTF file for `module`, i.e.
    /// the module is loaded (not built in) and has BTF.
    pub fn kernel_has_module_btf(module: &str) -> bool {
        module_path(Path::new(SYSFS_BTF_DIR), module).is_ok_and(|p| p.is_file())
    }

    /// Number of types, not counting `void` (so the highest type id).
    pub fn type_count(&self) -> usize {
        self.starts.len() - 1
    }

    /// Names of the functions (`BTF_KIND_FUNC`) with type ids above
    /// `after`: with `after` the base's [`Btf::type_count`], the functions
    /// a split blob (a module) adds.
    pub fn function_names_after(&self, after: usize) -> Result<Vec<String>, BtfError> {
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
    pub fn member(&self, struct_name: &str, path: &str) -> Result<MemberLayout, BtfError> {
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

    /// Parameter names, in order, of function `name` (a `BTF_KIND_FUNC`).
    /// An unnamed parameter is `""`; a variadic tail is `"..."`. If several
    /// functions share the name, the one with the lowest type id is used.
    pub fn func_params(&self, name: &str) -> Result<Vec<String>, BtfError> {
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
    pub fn enum_value(&self, name: &str) -> Result<i64, BtfError> {
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

    /// Type `id`, bounds-checked. Id 0 (`void`) has kind 0 and no data.
    fn ty(&self, id: u32) -> Result<Ty<'_>, BtfError> {
        if id == 0 {
            return Ok(Ty {
                id,
                name_off: 0,
                info: 0,
                size_or_type: 0,
                extra: &[],
            });
        }
        let start = *self
            .starts
            .get(id as usize)
            .ok_or_else(|| malformed(format!("reference to type [{id}], past the last type")))?;
        let header = self
            .words
            .get(start..start + BTF_TYPE_WORDS)
            .ok_or_else(|| malformed(format!("type [{id}] out of bounds")))?;
        let info = header[1];
        let len = extra_words(kind_of(info), vlen_of(info))
            .ok_or_else(|| malformed(format!("type [{id}] has an unknown kind")))?;
        let extra_start = start + BTF_TYPE_WORDS;
        let extra = self
            .words
            .get(extra_start..extra_start + len)
            .ok_or_else(|| malformed(format!("type [{id}] out of bounds")))?;
        Ok(Ty {
            id,
            name_off: header[0],
            info,
            size_or_type: header[2],
            extra,
        })
    }

    /// The NUL-terminated string at `off`, without its NUL.
    fn name(&self, off: u32) -> Result<&[u8], BtfError> {
        let rest = self
            .strings
            .get(off as usize..)
            .ok_or_else(|| malformed(format!("string offset {off} out of bounds")))?;
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| malformed(format!("string at {off} is not NUL-terminated")))?;
        Ok(&rest[..len])
    }

    /// Whether the string at `off` is `name` (false if `off` is invalid).
    fn name_is(&self, off: u32, name: &str) -> bool {
        let start = off as usize;
        let end = start.saturating_add(name.len());
        self.strings.get(start..end) == Some(name.as_bytes()) && self.strings.get(end) == Some(&0)
    }

    /// Follows typedefs and const/volatile/restrict/type-tag qualifiers.
    fn skip_modifiers(&self, id: u32) -> Result<Ty<'_>, BtfError> {
        let mut ty = self.ty(id)?;
        for _ in 0..MAX_RESOLVE_DEPTH {
            match ty.kind() {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    ty = self.ty(ty.size_or_type)?;
                }
                _ => return Ok(ty),
            }
        }
        Err(malformed(format!(
            "type [{id}]: typedef/qualifier chain longer than {MAX_RESOLVE_DEPTH}"
        )))
    }

    /// Size in bytes of an object of type `id`.
    fn size_of(&self, id: u32, depth: usize) -> Result<u64, BtfError> {
        if depth > MAX_RESOLVE_DEPTH {
            return Err(malformed(format!(
                "type [{id}]: arrays nested deeper than {MAX_RESOLVE_DEPTH}"
            )));
        }
        let ty = self.skip_modifiers(id)?;
        match ty.kind() {
            KIND_INT | KIND_STRUCT | KIND_UNION | KIND_ENUM | KIND_ENUM64 | KIND_FLOAT => {
                Ok(u64::from(ty.size_or_type))
            }
            KIND_PTR => Ok(POINTER_SIZE),
            KIND_ARRAY => {
                // `struct btf_array { __u32 type; __u32 index_type; __u32 nelems; }`
                let (elem, nelems) = (ty.extra[0], ty.extra[2]);
                self.size_of(elem, depth + 1)?
                    .checked_mul(u64::from(nelems))
                    .ok_or_else(|| malformed(format!("array [{}] size overflows", ty.id)))
            }
            kind => Err(malformed(format!(
                "type [{}] ({}) has no size",
                ty.id,
                kind_name(kind)
            ))),
        }
    }

    /// Resolves `parts` (a dotted member path) inside composite `outer`.
    fn resolve_path(
        &self,
        outer: Ty<'_>,
        struct_name: &str,
        parts: &[&str],
        budget: &mut usize,
    ) -> Result<MemberLayout, BtfError> {
        let mut current = outer;
        let mut bits = 0u64;
        for (i, part) in parts.iter().enumerate() {
            let found = self.find_member(current, part, 0, budget)?.ok_or_else(|| {
                BtfError::NoSuchMember {
                    kind: if outer.kind() == KIND_UNION {
                        "union"
                    } else {
                        "struct"
                    },
                    struct_name: struct_name.to_owned(),
                    member: parts.join("."),
                }
            })?;
            bits += found.bit_offset;
            if i + 1 == parts.len() {
                return self.layout(bits, found);
            }
            let inner = self.skip_modifiers(found.type_id)?;
            if found.bitfield_size != 0 || !inner.is_composite() {
                return Err(BtfError::NotComposite {
                    struct_name: struct_name.to_owned(),
                    prefix: parts[..=i].join("."),
                    kind: if found.bitfield_size != 0 {
                        "a bitfield"
                    } else {
                        match inner.kind() {
                            KIND_PTR => "a pointer",
                            KIND_ARRAY => "an array",
                            _ => "a scalar",
                        }
                    },
                    rest: parts[i + 1..].join("."),
                });
            }
            current = inner;
        }
        Err(BtfError::InvalidMemberPath(parts.join(".")))
    }

    /// Finds member `name` of composite `ty`, descending into anonymous
    /// struct/union members. Offsets are relative to the start of `ty`.
    fn find_member(
        &self,
        ty: Ty<'_>,
        name: &str,
        depth: usize,
        budget: &mut usize,
    ) -> Result<Option<Found>, BtfError> {
        if depth > MAX_RESOLVE_DEPTH {
            return Err(malformed(format!(
                "type [{}]: anonymous members nested deeper than {MAX_RESOLVE_DEPTH}",
                ty.id
            )));
        }
        for m in ty.members() {
            *budget = budget
                .checked_sub(1)
                .ok_or_else(|| malformed("too many members visited looking up one member"))?;
            // With kind_flag set, `offset` is BTF_MEMBER_BITFIELD_SIZE(val)
            // << 24 | BTF_MEMBER_BIT_OFFSET(val); otherwise a bit offset.
            let (bit_offset, bitfield_size) = if ty.kflag() {
                (m.offset & 0xff_ffff, m.offset >> 24)
            } else {
                (m.offset, 0)
            };
            let bit_offset = u64::from(bit_offset);
            if self.name_is(m.name_off, name) {
                let found = Found {
                    bit_offset,
                    bitfield_size,
                    type_id: m.type_id,
                };
                return if ty.kflag() {
                    Ok(Some(found))
                } else {
                    self.int_bitfield(found).map(Some)
                };
            }
            if self.name(m.name_off)?.is_empty() {
                let inner = self.skip_modifiers(m.type_id)?;
                if inner.is_composite()
                    && let Some(f) = self.find_member(inner, name, depth + 1, budget)?
                {
                    return Ok(Some(Found {
                        bit_offset: bit_offset + f.bit_offset,
                        ..f
                    }));
                }
            }
        }
        Ok(None)
    }

    /// Without kind_flag, a bitfield is a member of an INT type whose
    /// `BTF_INT_BITS` is narrower than the int, or whose `BTF_INT_OFFSET`
    /// is not 0 (Documentation/bpf/btf.rst, BTF_KIND_INT and
    /// BTF_KIND_STRUCT).
    fn int_bitfield(&self, found: Found) -> Result<Found, BtfError> {
        let ty = self.skip_modifiers(found.type_id)?;
        if ty.kind() != KIND_INT {
            return Ok(found);
        }
        // BTF_INT_OFFSET(VAL) (((VAL) & 0x00ff0000) >> 16),
        // BTF_INT_BITS(VAL) ((VAL) & 0x000000ff).
        let data = ty.extra[0];
        let (offset, bits) = ((data >> 16) & 0xff, data & 0xff);
        if offset == 0 && u64::from(bits) == u64::from(ty.size_or_type) * 8 {
            return Ok(found);
        }
        Ok(Found {
            bit_offset: found.bit_offset + u64::from(offset),
            bitfield_size: bits,
            ..found
        })
    }

    /// Turns a member found at `bits` from the outermost struct's start
    /// into the layout handed to the eBPF programs.
    fn layout(&self, bits: u64, found: Found) -> Result<MemberLayout, BtfError> {
        let too_far = || malformed(format!("member at bit {bits} lies beyond 4 GiB"));
        let width = found.bitfield_size;
        if width == 0 {
            if !bits.is_multiple_of(8) {
                return Err(malformed(format!(
                    "member at bit {bits} is not a bitfield yet not byte-aligned"
                )));
            }
            let size = self.size_of(found.type_id, 0)?;
            return Ok(MemberLayout {
                byte_offset: u32::try_from(bits / 8).map_err(|_| too_far())?,
                size: u32::try_from(size)
                    .map_err(|_| malformed(format!("member of {size} bytes")))?,
                bit_offset: 0,
                bit_size: 0,
            });
        }
        if width > 64 {
            return Err(BtfError::Unsupported(format!(
                "bitfield of {width} bits at bit {bits}"
            )));
        }
        // The smallest naturally aligned unit holding all the bits.
        for unit in [8u64, 16, 32, 64] {
            let start = bits / unit * unit;
            if bits + u64::from(width) <= start + unit {
                return Ok(MemberLayout {
                    byte_offset: u32::try_from(start / 8).map_err(|_| too_far())?,
                    size: (unit / 8) as u32,
                    bit_offset: (bits - start) as u8,
                    bit_size: width as u8,
                });
            }
        }
        Err(BtfError::Unsupported(format!(
            "bitfield of {width} bits at bit {bits} straddles an 8-byte boundary"
        )))
    }
}

/// A member found by [`Btf::find_member`].
#[derive(Clone, Copy, Debug)]
struct Found {
    /// From the start of the composite searched.
    bit_offset: u64,
    /// 0 if not a bitfield.
    bitfield_size: u32,
    type_id: u32,
}

/// `dir/<module>`, refusing names that are not a single plain file name.
fn module_path(dir: &Path, module: &str) -> Result<PathBuf, BtfError> {
    let plain = !module.is_empty()
        && module != "vmlinux"
        && module
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        Ok(dir.join(module))
    } else {
        Err(BtfError::InvalidModuleName(module.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use std::{collections::HashMap, process::Command, sync::OnceLock};

    use super::*;

    // ---- A builder of synthetic blobs -------------------------------------

    /// One member of a synthetic struct: name, type id, `btf_member.offset`.
    type M<'a> = (&'a str, u32, u32);

    /// Writes BTF by hand, record by record, as include/uapi/linux/btf.h
    /// lays it out.
    struct Builder {
        words: Vec<u32>,
        /// Word count after each type record (the valid cut points).
        boundaries: Vec<usize>,
        strings: Vec<u8>,
        str_base: u32,
        next_id: u32,
    }

    impl Builder {
        fn new() -> Builder {
            Builder {
                words: Vec::new(),
                boundaries: Vec::new(),
                strings: vec![0],
                str_base: 0,
                next_id: 1,
            }
        }

        /// A split blob on top of `base`. Its string section deliberately
        /// does not start with "" (allowed for split BTF).
        fn split_on(base: &Btf) -> Builder {
            Builder {
                words: Vec::new(),
                boundaries: Vec::new(),
                strings: Vec::new(),
                str_base: base.strings.len() as u32,
                next_id: base.starts.len() as u32,
            }
        }

        fn str(&mut self, s: &str) -> u32 {
            if s.is_empty() {
                return 0; // the base's "" (offset 0 in a standalone blob)
            }
            let off = self.str_base + self.strings.len() as u32;
            self.strings.extend_from_slice(s.as_bytes());
            self.strings.push(0);
            off
        }

        fn raw_named(
            &mut self,
            name_off: u32,
            kind: u32,
            kflag: bool,
            vlen: u32,
            size_or_type: u32,
            extra: &[u32],
        ) -> u32 {
            let info = (u32::from(kflag) << 31) | (kind << 24) | vlen;
            self.words.extend([name_off, info, size_or_type]);
            self.words.extend_from_slice(extra);
            self.boundaries.push(self.words.len());
            self.next_id += 1;
            self.next_id - 1
        }

        fn raw(
            &mut self,
            name: &str,
            kind: u32,
            kflag: bool,
            vlen: u32,
            size_or_type: u32,
            extra: &[u32],
        ) -> u32 {
            let name_off = self.str(name);
            self.raw_named(name_off, kind, kflag, vlen, size_or_type, extra)
        }

        /// INT of `size` bytes; `bits_offset` is `BTF_INT_OFFSET << 16 | BTF_INT_BITS`.
        fn int(&mut self, name: &str, size: u32, bits_offset: u32) -> u32 {
            self.raw(name, KIND_INT, false, 0, size, &[bits_offset])
        }

        fn refer(&mut self, kind: u32, name: &str, to: u32) -> u32 {
            self.raw(name, kind, false, 0, to, &[])
        }

        fn array(&mut self, elem: u32, index: u32, nelems: u32) -> u32 {
            self.raw("", KIND_ARRAY, false, 0, 0, &[elem, index, nelems])
        }

        fn composite(&mut self, kind: u32, name: &str, size: u32, kflag: bool, ms: &[M]) -> u32 {
            let mut extra = Vec::new();
            for &(n, t, off) in ms {
                extra.extend([self.str(n), t, off]);
            }
            self.raw(name, kind, kflag, ms.len() as u32, size, &extra)
        }

        fn func_proto(&mut self, ret: u32, params: &[(&str, u32)]) -> u32 {
            let mut extra = Vec::new();
            for &(n, t) in params {
                extra.extend([self.str(n), t]);
            }
            self.raw("", KIND_FUNC_PROTO, false, params.len() as u32, ret, &extra)
        }

        fn func(&mut self, name: &str, proto: u32) -> u32 {
            self.raw(name, KIND_FUNC, false, 1, proto, &[])
        }

        fn build(&self) -> Vec<u8> {
            self.build_cut(self.words.len())
        }

        /// The blob with only the first `words` words of the type section,
        /// and a header that says so.
        fn build_cut(&self, words: usize) -> Vec<u8> {
            let type_len = words as u32 * 4;
            let mut out = header(0, type_len, type_len, self.strings.len() as u32);
            for w in &self.words[..words] {
                out.extend(w.to_le_bytes());
            }
            out.extend(&self.strings);
            out
        }
    }

    fn header(type_off: u32, type_len: u32, str_off: u32, str_len: u32) -> Vec<u8> {
        let mut h = Vec::new();
        h.extend(BTF_MAGIC.to_le_bytes());
        h.extend([BTF_VERSION, 0]);
        for field in [BTF_HEADER_LEN as u32, type_off, type_len, str_off, str_len] {
            h.extend(field.to_le_bytes());
        }
        h
    }

    /// kind_flag member offset: `bitfield_size << 24 | bit_offset`.
    fn bf(bit_offset: u32, size: u32) -> u32 {
        size << 24 | bit_offset
    }

    /// The synthetic type graph most tests use:
    ///
    /// ```c
    /// typedef const unsigned short cu16;
    /// enum e { SEVEN = 7 };                 /* size 4 */
    /// struct sample {                       /* size 48, kind_flag set */
    ///     long a;                           /* bit 0   */
    ///     unsigned int f1:1;                /* bit 64  */
    ///     unsigned int f2:3;                /* bit 65  */
    ///     unsigned int f3:12;               /* bit 68  */
    ///     unsigned int f4:4;                /* bit 94: crosses a u32 (packed) */
    ///     union {                           /* bit 128 */
    ///         struct sample *p;
    ///         struct { unsigned int x; unsigned int y; };
    ///     };
    ///     cu16 arr[4];                      /* bit 192 */
    ///     enum e e;                         /* bit 256 */
    ///     enum e ebf:3;                     /* bit 288 */
    ///     unsigned long wide:64;            /* bit 320 */
    /// };
    /// struct outer { int hdr; struct sample s; struct sample *ps; };
    /// struct oldstyle { /* kind_flag clear, bitfields in INT encodings */ };
    /// union named_u { int m; };
    /// int my_writepages(struct outer *mapping, struct sample *wbc);
    /// int my_printk(const char *fmt, ...);
    /// ```
    fn sample_builder() -> Builder {
        let mut b = Builder::new();
        let long = b.int("long int", 8, 64);
        let uint = b.int("unsigned int", 4, 32);
        let ushort = b.int("short unsigned int", 2, 16);
        let cu16_const = b.refer(KIND_CONST, "", ushort);
        let cu16 = b.refer(KIND_TYPEDEF, "cu16", cu16_const);
        let arr = b.array(cu16, uint, 4);
        let seven = b.str("SEVEN");
        let enm = b.raw("e", KIND_ENUM, false, 1, 4, &[seven, 7]);
        // The struct's id is the next-but-two: pointer and anonymous types first.
        let sample_id = b.next_id + 3;
        let psample = b.refer(KIND_PTR, "", sample_id);
        let xy = b.composite(
            KIND_STRUCT,
            "",
            8,
            false,
            &[("x", uint, 0), ("y", uint, 32)],
        );
        let anon_u = b.composite(KIND_UNION, "", 8, false, &[("p", psample, 0), ("", xy, 0)]);
        let sample = b.composite(
            KIND_STRUCT,
            "sample",
            48,
            true,
            &[
                ("a", long, 0),
                ("f1", uint, bf(64, 1)),
                ("f2", uint, bf(65, 3)),
                ("f3", uint, bf(68, 12)),
                ("f4", uint, bf(94, 4)),
                ("", anon_u, 128),
                ("arr", arr, 192),
                ("e", enm, 256),
                ("ebf", enm, bf(288, 3)),
                ("wide", long, bf(320, 64)),
            ],
        );
        assert_eq!(sample, sample_id);
        let int = b.int("int", 4, 1 << 24 | 32);
        b.composite(
            KIND_STRUCT,
            "outer",
            64,
            false,
            &[("hdr", int, 0), ("s", sample, 64), ("ps", psample, 448)],
        );
        let five = b.int("u5", 4, 5);
        let four_at_2 = b.int("u4at2", 4, 2 << 16 | 4);
        b.composite(
            KIND_STRUCT,
            "oldstyle",
            16,
            false,
            &[
                ("nb", five, 40),
                ("nb2", four_at_2, 40),
                ("whole", uint, 64),
            ],
        );
        b.composite(KIND_UNION, "named_u", 4, false, &[("m", int, 0)]);
        let pouter = b.refer(KIND_PTR, "", sample + 1);
        let proto = b.func_proto(int, &[("mapping", pouter), ("wbc", psample)]);
        b.func("my_writepages", proto);
        let char_ = b.int("char", 1, 8);
        let pchar = b.refer(KIND_PTR, "", char_);
        let vproto = b.func_proto(int, &[("fmt", pchar), ("", 0)]);
        b.func("my_printk", vproto);
        b
    }

    fn sample() -> Btf {
        Btf::parse(&sample_builder().build()).expect("the sample blob parses")
    }

    fn layout(byte_offset: u32, size: u32, bit_offset: u8, bit_size: u8) -> MemberLayout {
        MemberLayout {
            byte_offset,
            size,
            bit_offset,
            bit_size,
        }
    }

    // ---- Synthetic blobs ---------------------------------------------------

    #[test]
    fn members_of_a_synthetic_struct() {
        let btf = sample();
        let m = |s, n| btf.member(s, n).unwrap_or_else(|e| panic!("{s}.{n}: {e}"));
        assert_eq!(m("sample", "a"), layout(0, 8, 0, 0));
        assert_eq!(m("sample", "f1"), layout(8, 1, 0, 1));
        assert_eq!(m("sample", "f2"), layout(8, 1, 1, 3));
        // Bits 68..80 do not fit the byte at 8, but the u16 at 8.
        assert_eq!(m("sample", "f3"), layout(8, 2, 4, 12));
        // Bits 94..98 cross the u32 at 8; the u64 at 8 holds them.
        assert_eq!(m("sample", "f4"), layout(8, 8, 30, 4));
        // Through the anonymous union, and the anonymous struct inside it.
        assert_eq!(m("sample", "p"), layout(16, 8, 0, 0));
        assert_eq!(m("sample", "x"), layout(16, 4, 0, 0));
        assert_eq!(m("sample", "y"), layout(20, 4, 0, 0));
        // Array of a typedef of a const: 4 * 2 bytes.
        assert_eq!(m("sample", "arr"), layout(24, 8, 0, 0));
        assert_eq!(m("sample", "e"), layout(32, 4, 0, 0));
        assert_eq!(m("sample", "ebf"), layout(36, 1, 0, 3));
        assert_eq!(m("sample", "wide"), layout(40, 8, 0, 64));
        // Dotted paths through embedded structs.
        assert_eq!(m("outer", "hdr"), layout(0, 4, 0, 0));
        assert_eq!(m("outer", "s"), layout(8, 48, 0, 0));
        assert_eq!(m("outer", "s.y"), layout(28, 4, 0, 0));
        assert_eq!(m("outer", "s.f3"), layout(16, 2, 4, 12));
        assert_eq!(m("outer", "ps"), layout(56, 8, 0, 0));
        // Without kind_flag, bitfields are INTs narrower than their size.
        assert_eq!(m("oldstyle", "nb"), layout(5, 1, 0, 5));
        assert_eq!(m("oldstyle", "nb2"), layout(5, 1, 2, 4));
        assert_eq!(m("oldstyle", "whole"), layout(8, 4, 0, 0));
        assert_eq!(m("named_u", "m"), layout(0, 4, 0, 0));
    }

    /// Sets `width` bits at `bit` of a little-endian image to `value`.
    fn put_bits(buf: &mut [u8], bit: u64, width: u32, value: u64) {
        for i in 0..u64::from(width) {
            let (byte, mask) = (((bit + i) / 8) as usize, 1u8 << ((bit + i) % 8));
            if value >> i & 1 == 1 {
                buf[byte] |= mask;
            } else {
                buf[byte] &= !mask;
            }
        }
    }

    /// The recipe on [`MemberLayout`] reads back what was stored at the
    /// member's bits, with all neighbouring bits set to 1.
    #[test]
    fn layouts_read_back_values_written_at_their_bits() {
        let btf = sample();
        let cases: [(&str, u64, u32, u64); 8] = [
            ("f1", 64, 1, 0),
            ("f2", 65, 3, 0b010),
            ("f3", 68, 12, 0xa5c),
            ("f4", 94, 4, 0b0110),
            ("ebf", 288, 3, 0b101),
            ("wide", 320, 64, 0x0123_4567_89ab_cdef),
            ("a", 0, 64, 0xfedc_ba98_7654_3210),
            ("y", 160, 32, 0x1234_5678),
        ];
        for (name, bit, width, value) in cases {
            let mut image = vec![0xffu8; 48];
            put_bits(&mut image, bit, width, value);
            let l = btf.member("sample", name).expect(name);
            assert_eq!(l.read_from(&image), Some(value), "{name}: {l:?}");
            assert_eq!(l.is_bitfield(), !matches!(name, "a" | "y"), "{name}");
        }
        assert_eq!(layout(0, 16, 0, 0).read_from(&[0; 16]), None);
        assert_eq!(layout(44, 8, 0, 0).read_from(&[0; 48]), None);
        assert_eq!(layout(0, 1, 0, 65).read_from(&[0; 8]), None);
    }

    #[test]
    fn enumerator_values_from_enum_and_enum64() {
        let mut b = Builder::new();
        let (a, minus, big) = (b.str("QF_A"), b.str("MINUS_TWO"), b.str("BIG"));
        // An anonymous unsigned enum, a signed one (kind_flag), an ENUM64.
        b.raw("", KIND_ENUM, false, 1, 4, &[a, 7]);
        b.raw("s", KIND_ENUM, true, 1, 4, &[minus, (-2i32) as u32]);
        b.raw("", KIND_ENUM64, false, 1, 8, &[big, 5, 1]);
        let btf = Btf::parse(&b.build()).unwrap();
        assert_eq!(btf.enum_value("QF_A").unwrap(), 7);
        assert_eq!(btf.enum_value("MINUS_TWO").unwrap(), -2);
        assert_eq!(btf.enum_value("BIG").unwrap(), (1 << 32) | 5);
        let e = btf.enum_value("QF_B").unwrap_err();
        assert_eq!(e.to_string(), "no enumerator named QF_B in BTF");
        // The sample's named enum too.
        assert_eq!(sample().enum_value("SEVEN").unwrap(), 7);
    }

    #[test]
    fn function_parameters() {
        let btf = sample();
        assert_eq!(
            btf.func_params("my_writepages").unwrap(),
            ["mapping", "wbc"]
        );
        assert_eq!(btf.func_params("my_printk").unwrap(), ["fmt", "..."]);
        let e = btf.func_params("my_writepage").unwrap_err();
        assert_eq!(e.to_string(), "no function named my_writepage in BTF");
        // A struct is not a function, and a function is not a struct.
        assert!(matches!(
            btf.func_params("sample"),
            Err(BtfError::NoSuchFunc(_))
        ));
        assert!(matches!(
            btf.member("my_printk", "fmt"),
            Err(BtfError::NoSuchStruct(_))
        ));
    }

    #[test]
    fn lookup_errors_name_what_is_missing() {
        let btf = sample();
        let err = |s: &str, m: &str| btf.member(s, m).unwrap_err().to_string();
        assert_eq!(err("sample", "f5"), "struct sample has no member f5");
        assert_eq!(err("named_u", "q"), "union named_u has no member q");
        assert_eq!(err("outer", "s.nope"), "struct outer has no member s.nope");
        assert_eq!(err("nosuch", "a"), "no struct or union named nosuch in BTF");
        assert_eq!(
            err("outer", "ps.a"),
            "outer.ps is a pointer, not a struct or union, so it has no member a"
        );
        assert_eq!(
            err("outer", "s.f3.z"),
            "outer.s.f3 is a bitfield, not a struct or union, so it has no member z"
        );
        assert_eq!(
            err("outer", "hdr.z"),
            "outer.hdr is a scalar, not a struct or union, so it has no member z"
        );
        for bad in ["", ".", "s.", ".s", "s..y"] {
            assert!(
                matches!(
                    btf.member("outer", bad),
                    Err(BtfError::InvalidMemberPath(_))
                ),
                "{bad:?}"
            );
        }
        // Anonymous members are only reachable through their members.
        assert!(btf.member("sample", "").is_err());
    }

    #[test]
    fn bitfield_across_an_8_byte_boundary_is_unsupported() {
        let mut b = Builder::new();
        let long = b.int("long int", 8, 64);
        b.composite(
            KIND_STRUCT,
            "packed",
            16,
            true,
            &[("ok", long, bf(56, 8)), ("bad", long, bf(60, 8))],
        );
        let btf = Btf::parse(&b.build()).unwrap();
        assert_eq!(btf.member("packed", "ok").unwrap(), layout(7, 1, 0, 8));
        let e = btf.member("packed", "bad").unwrap_err();
        assert!(matches!(e, BtfError::Unsupported(_)), "{e}");
        assert!(e.to_string().contains("straddles"), "{e}");
    }

    /// `hdr_len` larger than the header known here (it is extensible):
    /// the sections are found after `hdr_len` bytes.
    #[test]
    fn longer_header_is_skipped() {
        let blob = sample_builder().build();
        let mut long = blob[..BTF_HEADER_LEN].to_vec();
        set_u32(&mut long, 4, BTF_HEADER_LEN as u32 + 8);
        long.extend([0; 8]);
        long.extend(&blob[BTF_HEADER_LEN..]);
        let btf = Btf::parse(&long).unwrap();
        assert_eq!(btf.member("outer", "s.f3").unwrap(), layout(16, 2, 4, 12));
    }

    #[test]
    fn structs_sharing_a_name_must_agree() {
        let mut b = Builder::new();
        let int = b.int("int", 4, 32);
        b.composite(
            KIND_STRUCT,
            "dup",
            8,
            false,
            &[("x", int, 0), ("y", int, 32)],
        );
        b.raw("dup", KIND_FWD, false, 0, 0, &[]);
        b.composite(
            KIND_STRUCT,
            "dup",
            12,
            false,
            &[("x", int, 0), ("y", int, 64), ("z", int, 32)],
        );
        let btf = Btf::parse(&b.build()).unwrap();
        assert_eq!(btf.member("dup", "x").unwrap(), layout(0, 4, 0, 0));
        assert_eq!(btf.member("dup", "z").unwrap(), layout(4, 4, 0, 0));
        assert_eq!(
            btf.member("dup", "y").unwrap_err().to_string(),
            "2 definitions of dup in BTF disagree on member y"
        );
        assert_eq!(
            btf.member("dup", "w").unwrap_err().to_string(),
            "struct dup has no member w"
        );
    }

    /// One type of every kind, each with trailing data where the kind has
    /// any; a wrong trailing length would shift every later record.
    fn every_kind_builder() -> (Builder, Vec<(u32, u32)>) {
        let mut b = Builder::new();
        let mut kinds = Vec::new();
        let int = b.int("int", 4, 32);
        kinds.push((int, KIND_INT));
        let p = b.refer(KIND_PTR, "", int);
        kinds.push((p, KIND_PTR));
        let a = b.array(int, int, 3);
        kinds.push((a, KIND_ARRAY));
        let s = b.composite(KIND_STRUCT, "s", 8, false, &[("i", int, 0), ("j", int, 32)]);
        kinds.push((s, KIND_STRUCT));
        let u = b.composite(KIND_UNION, "u", 4, false, &[("i", int, 0), ("j", int, 0)]);
        kinds.push((u, KIND_UNION));
        let (one, two) = (b.str("ONE"), b.str("TWO"));
        let e = b.raw("en", KIND_ENUM, false, 2, 4, &[one, 1, two, 2]);
        kinds.push((e, KIND_ENUM));
        let f = b.raw("fwd", KIND_FWD, true, 0, 0, &[]);
        kinds.push((f, KIND_FWD));
        let t = b.refer(KIND_TYPEDEF, "td", int);
        kinds.push((t, KIND_TYPEDEF));
        let v = b.refer(KIND_VOLATILE, "", int);
        kinds.push((v, KIND_VOLATILE));
        let c = b.refer(KIND_CONST, "", int);
        kinds.push((c, KIND_CONST));
        let r = b.refer(KIND_RESTRICT, "", p);
        kinds.push((r, KIND_RESTRICT));
        let fp = b.func_proto(int, &[("a", int), ("b", p)]);
        kinds.push((fp, KIND_FUNC_PROTO));
        let fu = b.func("fn_a", fp);
        kinds.push((fu, KIND_FUNC));
        let var = b.raw("var", KIND_VAR, false, 0, int, &[1]);
        kinds.push((var, KIND_VAR));
        let ds = b.raw(".data", KIND_DATASEC, false, 1, 4, &[var, 0, 4]);
        kinds.push((ds, KIND_DATASEC));
        let fl = b.raw("double", KIND_FLOAT, false, 0, 8, &[]);
        kinds.push((fl, KIND_FLOAT));
        let dt = b.raw("tag", KIND_DECL_TAG, false, 0, fu, &[u32::MAX]);
        kinds.push((dt, KIND_DECL_TAG));
        let tt = b.refer(KIND_TYPE_TAG, "user", int);
        kinds.push((tt, KIND_TYPE_TAG));
        let (big, small) = (b.str("BIG"), b.str("SMALL"));
        let e64 = b.raw("en64", KIND_ENUM64, true, 2, 8, &[big, 0, 1, small, 5, 0]);
        kinds.push((e64, KIND_ENUM64));
        let after = b.composite(KIND_STRUCT, "after_all", 16, false, &[("last", t, 96)]);
        kinds.push((after, KIND_STRUCT));
        (b, kinds)
    }

    #[test]
    fn every_kind_is_skipped_by_its_own_length() {
        let (b, kinds) = every_kind_builder();
        // The 19 kinds of include/uapi/linux/btf.h, then a struct.
        let distinct: std::collections::BTreeSet<u32> = kinds.iter().map(|k| k.1).collect();
        assert_eq!(distinct, (1..=19).collect());
        assert_eq!(kinds.len(), 20);
        let btf = Btf::parse(&b.build()).unwrap();
        assert_eq!(btf.type_count(), kinds.len());
        for (i, &(id, kind)) in kinds.iter().enumerate() {
            assert_eq!(id as usize, i + 1);
            assert_eq!(btf.ty(id).unwrap().kind(), kind, "type [{id}]");
        }
        assert_eq!(
            btf.member("after_all", "last").unwrap(),
            layout(12, 4, 0, 0)
        );
        assert_eq!(btf.member("u", "j").unwrap(), layout(0, 4, 0, 0));
        assert_eq!(btf.func_params("fn_a").unwrap(), ["a", "b"]);
    }

    #[test]
    fn every_truncation_is_an_error() {
        for blob in [sample_builder().build(), every_kind_builder().0.build()] {
            Btf::parse(&blob).unwrap();
            for len in 0..blob.len() {
                assert!(
                    Btf::parse(&blob[..len]).is_err(),
                    "cut at {len} of {}",
                    blob.len()
                );
            }
        }
    }

    /// The header agrees with a shortened type section: a cut between two
    /// records is a valid (smaller) blob, any other cut an error.
    #[test]
    fn cuts_inside_a_record_are_errors() {
        let (b, _) = every_kind_builder();
        for words in 0..b.words.len() {
            let result = Btf::parse(&b.build_cut(words));
            let whole = b.boundaries.iter().filter(|&&end| end <= words).count();
            if words == 0 || b.boundaries.contains(&words) {
                assert_eq!(result.expect("a cut between records").type_count(), whole);
            } else {
                let e = result.expect_err("a cut inside a record");
                assert!(e.to_string().contains("truncated"), "{words}: {e}");
            }
        }
    }

    fn set_u32(blob: &mut [u8], at: usize, value: u32) {
        blob[at..at + 4].copy_from_slice(&value.to_le_bytes());
    }

    /// Damage done to a valid blob.
    type Spoil = Box<dyn Fn(&mut Vec<u8>)>;

    #[test]
    fn absurd_headers_are_errors() {
        let good = sample_builder().build();
        let type_len = u32::from_le_bytes(good[12..16].try_into().unwrap());
        let cases: Vec<(&str, Spoil)> = vec![
            ("zero magic", Box::new(|b| b[0..2].copy_from_slice(&[0, 0]))),
            ("version 2", Box::new(|b| b[2] = 2)),
            ("hdr_len u32::MAX", Box::new(|b| set_u32(b, 4, u32::MAX))),
            ("hdr_len 8", Box::new(|b| set_u32(b, 4, 8))),
            (
                "hdr_len past the end",
                Box::new(|b| {
                    let len = b.len() as u32;
                    set_u32(b, 4, len + 1)
                }),
            ),
            ("type_off u32::MAX", Box::new(|b| set_u32(b, 8, u32::MAX))),
            ("type_len u32::MAX", Box::new(|b| set_u32(b, 12, u32::MAX))),
            (
                "type_len 0xffff_fff0",
                Box::new(|b| set_u32(b, 12, 0xffff_fff0)),
            ),
            (
                "type_len not words",
                Box::new(move |b| set_u32(b, 12, type_len - 2)),
            ),
            ("str_off u32::MAX", Box::new(|b| set_u32(b, 16, u32::MAX))),
            ("str_len u32::MAX", Box::new(|b| set_u32(b, 20, u32::MAX))),
            ("str_len 0", Box::new(|b| set_u32(b, 20, 0))),
            (
                "strings not NUL-terminated",
                Box::new(|b| *b.last_mut().unwrap() = b'x'),
            ),
            (
                "strings not starting with \"\"",
                Box::new(move |b| b[24 + type_len as usize] = b'x'),
            ),
        ];
        for (what, spoil) in cases {
            let mut blob = good.clone();
            spoil(&mut blob);
            assert!(Btf::parse(&blob).is_err(), "{what}");
        }
        let mut be = good.clone();
        be[0..2].copy_from_slice(&BTF_MAGIC.to_be_bytes());
        assert!(matches!(Btf::parse(&be), Err(BtfError::Unsupported(_))));
    }

    #[test]
    fn bad_records_are_errors() {
        let blob = |f: &dyn Fn(&mut Builder)| {
            let mut b = Builder::new();
            b.int("int", 4, 32);
            f(&mut b);
            Btf::parse(&b.build())
        };
        // A vlen far beyond the data.
        let e = blob(&|b| {
            b.raw("s", KIND_STRUCT, false, 0xffff, 4, &[]);
        })
        .unwrap_err();
        assert!(e.to_string().contains("type [2] (STRUCT) truncated"), "{e}");
        // Kinds this reader (and the kernel) do not know: 0 and 25.
        for kind in [0, 25] {
            let e = blob(&|b| {
                b.raw("k", kind, false, 0, 0, &[]);
            })
            .unwrap_err();
            assert!(matches!(e, BtfError::Unsupported(_)), "{kind}: {e}");
        }
        // Names past the strings, on a type and on a member.
        assert!(
            blob(&|b| {
                b.raw_named(1000, KIND_INT, false, 0, 4, &[32]);
            })
            .is_err()
        );
        assert!(
            blob(&|b| {
                b.raw("s", KIND_STRUCT, false, 1, 4, &[1000, 1, 0]);
            })
            .is_err()
        );
        // A struct that is only a header.
        assert!(Btf::parse(&[header(0, 8, 8, 1), vec![0; 9]].concat()).is_err());
    }

    /// Lookups in cyclic or fanned-out type graphs end with an error.
    #[test]
    fn cyclic_and_exploding_graphs_are_errors() {
        let mut b = Builder::new();
        let int = b.int("int", 4, 32);
        // typedef loop: [2] -> [3] -> [2]
        let t1 = b.refer(KIND_TYPEDEF, "a", 3);
        b.refer(KIND_TYPEDEF, "b", t1);
        b.composite(KIND_STRUCT, "loopy", 4, false, &[("m", t1, 0)]);
        // An anonymous member of the struct's own type.
        let selfish = b.next_id;
        b.composite(KIND_STRUCT, "selfish", 4, false, &[("", selfish, 0)]);
        // An array of itself.
        let arr = b.next_id;
        b.array(arr, int, 2);
        b.composite(KIND_STRUCT, "arrloop", 4, false, &[("m", arr, 0)]);
        // A reference past the last type.
        b.composite(KIND_STRUCT, "dangling", 4, false, &[("m", 9999, 0)]);
        // 20 levels of 4 anonymous members each: 4^20 paths.
        let first = b.next_id;
        for level in 0..20u32 {
            let next = first + level + 1;
            let ms: Vec<M> = (0..4).map(|i| ("", next, i * 32)).collect();
            b.composite(
                KIND_STRUCT,
                if level == 0 { "fan" } else { "" },
                16,
                false,
                &ms,
            );
        }
        b.composite(KIND_STRUCT, "", 4, false, &[("leaf", int, 0)]);
        let btf = Btf::parse(&b.build()).unwrap();
        assert!(btf.member("loopy", "m").is_err());
        assert!(btf.member("selfish", "m").is_err());
        assert!(btf.member("arrloop", "m").is_err());
        assert!(btf.member("dangling", "m").is_err());
        assert!(btf.member("fan", "nope").is_err());
        assert_eq!(btf.member("fan", "leaf").unwrap(), layout(0, 4, 0, 0));
    }

    /// Random damage to a valid blob: parsing and lookups may fail but
    /// must not panic or hang.
    #[test]
    fn damaged_blobs_never_panic() {
        let good = sample_builder().build();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut parsed = 0;
        for _ in 0..20_000 {
            let mut blob = good.clone();
            for _ in 0..=next() % 4 {
                let at = (next() % blob.len() as u64) as usize;
                blob[at] = match next() % 3 {
                    0 => next() as u8,
                    1 => blob[at] ^ (1 << (next() % 8)),
                    _ => 0xff,
                };
            }
            if next() % 8 == 0 {
                blob.truncate((next() % blob.len() as u64) as usize);
            }
            if let Ok(btf) = Btf::parse(&blob) {
                parsed += 1;
                for (s, m) in [("sample", "f3"), ("sample", "y"), ("outer", "s.y")] {
                    let _ = btf.member(s, m);
                }
                let _ = btf.func_params("my_writepages");
                let _ = btf.func_params("my_printk");
            }
        }
        assert!(
            parsed > 1000,
            "only {parsed} damaged blobs parsed: lookups barely ran"
        );
    }

    #[test]
    fn split_blob_continues_ids_and_strings() {
        let base = sample();
        let base_count = base.type_count();
        let sample_id = find_composite(&base, "sample");
        let int_id = find_type(&base, KIND_INT, "int");
        let mut b = Builder::split_on(&base);
        // A member named with a string of the base ("wide").
        let wide = name_offset(&base, "wide");
        let outer_id = find_composite(&base, "outer");
        let ps = b.refer(KIND_PTR, "", sample_id);
        let s = b.next_id;
        let name = b.str("modstruct");
        let m2 = b.str("m2");
        b.raw_named(
            name,
            KIND_STRUCT,
            false,
            3,
            24,
            &[wide, int_id, 0, m2, ps, 64, 0, outer_id, 128],
        );
        let ps2 = b.refer(KIND_PTR, "", s);
        let proto = b.func_proto(int_id, &[("mapping", ps2), ("wbc", ps)]);
        b.func("mod_writepages", proto);
        let split_blob = b.build();
        assert_ne!(b.strings.first(), Some(&0));

        let btf = Btf::parse_split(base.clone(), &split_blob).unwrap();
        assert_eq!(btf.type_count(), base_count + 5);
        assert_eq!(btf.ty(s).unwrap().kind(), KIND_STRUCT);
        assert_eq!(btf.member("modstruct", "wide").unwrap(), layout(0, 4, 0, 0));
        assert_eq!(btf.member("modstruct", "m2").unwrap(), layout(8, 8, 0, 0));
        // Through the anonymous member of the base's `struct outer`.
        assert_eq!(
            btf.member("modstruct", "s.y").unwrap(),
            layout(16 + 28, 4, 0, 0)
        );
        assert_eq!(
            btf.func_params("mod_writepages").unwrap(),
            ["mapping", "wbc"]
        );
        // The split blob's own functions, and only those.
        assert_eq!(
            btf.function_names_after(base_count).unwrap(),
            ["mod_writepages"]
        );
        // The base is still all there.
        assert_eq!(
            btf.member("sample", "f3").unwrap(),
            base.member("sample", "f3").unwrap()
        );
        assert_eq!(btf.func_params("my_printk").unwrap(), ["fmt", "..."]);

        // Standalone, the split blob is not valid BTF; on a base with fewer
        // strings its names point past the end.
        assert!(Btf::parse(&split_blob).is_err());
        let mut small = Builder::new();
        small.int("int", 4, 32);
        let small = Btf::parse(&small.build()).unwrap();
        assert!(Btf::parse_split(small, &split_blob).is_err());
        // Truncations of the split blob are errors too.
        for len in 0..split_blob.len() {
            assert!(
                Btf::parse_split(base.clone(), &split_blob[..len]).is_err(),
                "{len}"
            );
        }
    }

    #[test]
    fn module_names_are_plain_file_names() {
        for bad in ["", "vmlinux", "../vmlinux", "ext4/..", "a b", "/etc/passwd"] {
            assert!(
                matches!(
                    Btf::from_kernel(Some(bad)),
                    Err(BtfError::InvalidModuleName(_))
                ),
                "{bad:?}"
            );
            assert!(!Btf::kernel_has_module_btf(bad));
        }
        let e = Btf::from_files(Path::new("/nonexistent/btf"), None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "reading /nonexistent/btf: No such file or directory (os error 2)"
        );
    }

    // ---- The running kernel, cross-checked with bpftool -------------------

    const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

    fn vmlinux() -> &'static Btf {
        static BTF: OnceLock<Btf> = OnceLock::new();
        BTF.get_or_init(|| Btf::from_kernel(None).expect("parsing /sys/kernel/btf/vmlinux"))
    }

    /// One `[id] KIND 'name' key=value...` record of `bpftool btf dump
    /// format raw`, with its indented member/parameter/enumerator lines.
    #[derive(Debug, Default)]
    struct RawType {
        kind: String,
        name: String,
        attrs: HashMap<String, String>,
        items: Vec<RawItem>,
    }

    #[derive(Debug)]
    struct RawItem {
        name: Option<String>,
        attrs: HashMap<String, String>,
    }

    impl RawType {
        fn num(&self, key: &str) -> i64 {
            num(&self.attrs, key, &self.name)
        }
    }

    fn num(attrs: &HashMap<String, String>, key: &str, ctx: &str) -> i64 {
        attrs
            .get(key)
            .unwrap_or_else(|| panic!("bpftool printed no {key} for {ctx}: {attrs:?}"))
            .parse()
            .unwrap_or_else(|e| panic!("{key} of {ctx}: {e}"))
    }

    /// `'name' k=v k=v` or `k=v ...`: the quoted name and the k=v pairs.
    fn split_line(line: &str) -> (Option<String>, HashMap<String, String>) {
        let (name, rest) = match line.strip_prefix('\'') {
            Some(quoted) => {
                let end = quoted.find('\'').expect("closing quote");
                (Some(quoted[..end].to_owned()), &quoted[end + 1..])
            }
            None => (None, line),
        };
        let attrs = rest
            .split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.trim_end_matches(',').to_owned()))
            .collect();
        (name, attrs)
    }

    /// Runs `bpftool [args] btf dump file <file> format raw` and parses it.
    fn bpftool_raw(extra_args: &[&str], file: &Path) -> HashMap<u32, RawType> {
        let out = Command::new("bpftool")
            .args(extra_args)
            .args(["btf", "dump", "file"])
            .arg(file)
            .args(["format", "raw"])
            .output()
            .expect("running bpftool (needed for the cross-check; it is in linux-tools)");
        assert!(
            out.status.success(),
            "bpftool failed on {}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).expect("bpftool output is UTF-8");
        let mut types = HashMap::new();
        let mut current: Option<(u32, RawType)> = None;
        for line in text.lines() {
            if let Some(item) = line.strip_prefix('\t') {
                let (name, attrs) = split_line(item);
                let (_, t) = current.as_mut().expect("an item line before any type");
                t.items.push(RawItem { name, attrs });
                continue;
            }
            let rest = line
                .strip_prefix('[')
                .expect("a type line starts with [id]");
            let (id, rest) = rest.split_once("] ").expect("[id] KIND");
            let (kind, rest) = rest.split_once(' ').expect("KIND 'name'");
            let (name, attrs) = split_line(rest);
            let t = RawType {
                kind: kind.to_owned(),
                name: name.expect("a quoted name"),
                attrs,
                items: Vec::new(),
            };
            if let Some((id, t)) = current.replace((id.parse().expect("numeric id"), t)) {
                types.insert(id, t);
            }
        }
        if let Some((id, t)) = current {
            types.insert(id, t);
        }
        types
    }

    fn vmlinux_raw() -> &'static HashMap<u32, RawType> {
        static RAW: OnceLock<HashMap<u32, RawType>> = OnceLock::new();
        RAW.get_or_init(|| bpftool_raw(&[], Path::new(VMLINUX)))
    }

    fn our_name(btf: &Btf, off: u32) -> String {
        let name = String::from_utf8_lossy(btf.name(off).unwrap()).into_owned();
        if name.is_empty() {
            "(anon)".into()
        } else {
            name
        }
    }

    /// Every type of vmlinux as parsed here matches what bpftool (libbpf)
    /// parsed: same ids, kinds, names and kind-specific data. A wrong
    /// trailing length for any kind would shift everything after it.
    #[test]
    fn every_vmlinux_type_matches_bpftool() {
        let (btf, raw) = (vmlinux(), vmlinux_raw());
        assert_eq!(btf.type_count(), raw.len());
        assert_eq!(raw.keys().max().copied(), Some(btf.type_count() as u32));
        let mut members = 0;
        for id in 1..=btf.type_count() as u32 {
            let (t, r) = (btf.ty(id).unwrap(), &raw[&id]);
            let ctx = format!("[{id}] {} {}", r.kind, r.name);
            assert_eq!(kind_name(t.kind()), r.kind, "{ctx}");
            assert_eq!(our_name(btf, t.name_off), r.name, "{ctx}");
            let n = |key: &str| r.num(key);
            let items_len = if matches!(t.kind(), KIND_INT | KIND_VAR | KIND_DECL_TAG | KIND_ARRAY)
            {
                0
            } else {
                t.vlen()
            };
            assert_eq!(r.items.len(), items_len, "{ctx}");
            match t.kind() {
                KIND_INT => {
                    assert_eq!(n("size"), i64::from(t.size_or_type), "{ctx}");
                    assert_eq!(n("nr_bits"), i64::from(t.extra[0] & 0xff), "{ctx}");
                    assert_eq!(
                        n("bits_offset"),
                        i64::from(t.extra[0] >> 16 & 0xff),
                        "{ctx}"
                    );
                }
                KIND_PTR | KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT
                | KIND_TYPE_TAG | KIND_VAR => {
                    assert_eq!(n("type_id"), i64::from(t.size_or_type), "{ctx}");
                }
                KIND_ARRAY => {
                    assert_eq!(n("type_id"), i64::from(t.extra[0]), "{ctx}");
                    assert_eq!(n("index_type_id"), i64::from(t.extra[1]), "{ctx}");
                    assert_eq!(n("nr_elems"), i64::from(t.extra[2]), "{ctx}");
                }
                KIND_STRUCT | KIND_UNION => {
                    assert_eq!(n("size"), i64::from(t.size_or_type), "{ctx}");
                    assert_eq!(n("vlen"), t.vlen() as i64, "{ctx}");
                    for (m, item) in t.members().zip(&r.items) {
                        let (bits, bf) = if t.kflag() {
                            (m.offset & 0xff_ffff, m.offset >> 24)
                        } else {
                            (m.offset, 0)
                        };
                        let a = &item.attrs;
                        assert_eq!(
                            item.name.as_deref(),
                            Some(&*our_name(btf, m.name_off)),
                            "{ctx}"
                        );
                        assert_eq!(num(a, "type_id", &ctx), i64::from(m.type_id), "{ctx}");
                        assert_eq!(num(a, "bits_offset", &ctx), i64::from(bits), "{ctx}");
                        let raw_bf = a
                            .get("bitfield_size")
                            .map_or(0, |_| num(a, "bitfield_size", &ctx));
                        assert_eq!(raw_bf, i64::from(bf), "{ctx}");
                        members += 1;
                    }
                }
                KIND_ENUM | KIND_ENUM64 => {
                    assert_eq!(n("size"), i64::from(t.size_or_type), "{ctx}");
                    let stride = if t.kind() == KIND_ENUM { 2 } else { 3 };
                    for (e, item) in t.extra.chunks_exact(stride).zip(&r.items) {
                        assert_eq!(item.name.as_deref(), Some(&*our_name(btf, e[0])), "{ctx}");
                        let val = match (t.kind(), t.kflag()) {
                            (KIND_ENUM, true) => (e[1] as i32).to_string(),
                            (KIND_ENUM, false) => e[1].to_string(),
                            (_, signed) => {
                                let v = u64::from(e[2]) << 32 | u64::from(e[1]);
                                if signed {
                                    format!("{}LL", v as i64)
                                } else {
                                    format!("{v}ULL")
                                }
                            }
                        };
                        assert_eq!(item.attrs["val"], val, "{ctx}");
                    }
                }
                KIND_FWD => {
                    let fwd = if t.kflag() { "union" } else { "struct" };
                    assert_eq!(r.attrs["fwd_kind"], fwd, "{ctx}");
                }
                KIND_FUNC => {
                    assert_eq!(n("type_id"), i64::from(t.size_or_type), "{ctx}");
                    let linkage = ["static", "global", "extern"][t.vlen()];
                    assert_eq!(r.attrs["linkage"], linkage, "{ctx}");
                }
                KIND_FUNC_PROTO => {
                    assert_eq!(n("ret_type_id"), i64::from(t.size_or_type), "{ctx}");
                    for (p, item) in t.extra.chunks_exact(2).zip(&r.items) {
                        assert_eq!(item.name.as_deref(), Some(&*our_name(btf, p[0])), "{ctx}");
                        assert_eq!(num(&item.attrs, "type_id", &ctx), i64::from(p[1]), "{ctx}");
                    }
                }
                KIND_DATASEC => {
                    assert_eq!(n("size"), i64::from(t.size_or_type), "{ctx}");
                    for (v, item) in t.extra.chunks_exact(3).zip(&r.items) {
                        let got: Vec<i64> = ["type_id", "offset", "size"]
                            .iter()
                            .map(|k| num(&item.attrs, k, &ctx))
                            .collect();
                        assert_eq!(
                            got,
                            v.iter().map(|&w| i64::from(w)).collect::<Vec<_>>(),
                            "{ctx}"
                        );
                    }
                }
                KIND_FLOAT => assert_eq!(n("size"), i64::from(t.size_or_type), "{ctx}"),
                KIND_DECL_TAG => {
                    assert_eq!(n("type_id"), i64::from(t.size_or_type), "{ctx}");
                    assert_eq!(n("component_idx"), i64::from(t.extra[0] as i32), "{ctx}");
                }
                other => panic!("{ctx}: kind {other} not cross-checked"),
            }
        }
        assert!(members > 10_000, "only {members} members compared");
    }

    /// bpftool's view of where `path` lives in `struct_name`, worked out
    /// independently from its text: (bit offset, bitfield size, byte size).
    fn raw_member(raw: &HashMap<u32, RawType>, struct_name: &str, path: &str) -> (i64, i64, i64) {
        fn skip(raw: &HashMap<u32, RawType>, mut id: i64) -> (i64, &RawType) {
            loop {
                let t = &raw[&(id as u32)];
                match t.kind.as_str() {
                    "TYPEDEF" | "CONST" | "VOLATILE" | "RESTRICT" | "TYPE_TAG" => {
                        id = t.num("type_id")
                    }
                    _ => return (id, t),
                }
            }
        }
        fn size(raw: &HashMap<u32, RawType>, id: i64) -> i64 {
            let (_, t) = skip(raw, id);
            match t.kind.as_str() {
                "PTR" => 8,
                "ARRAY" => size(raw, t.num("type_id")) * t.num("nr_elems"),
                _ => t.num("size"),
            }
        }
        fn find(raw: &HashMap<u32, RawType>, t: &RawType, name: &str) -> Option<(i64, i64, i64)> {
            for item in &t.items {
                let a = &item.attrs;
                let bits = num(a, "bits_offset", name);
                let bf = a
                    .get("bitfield_size")
                    .map_or(0, |_| num(a, "bitfield_size", name));
                let ty = num(a, "type_id", name);
                if item.name.as_deref() == Some(name) {
                    return Some((bits, bf, ty));
                }
                let (_, inner) = skip(raw, ty);
                if item.name.as_deref() == Some("(anon)")
                    && matches!(inner.kind.as_str(), "STRUCT" | "UNION")
                    && let Some((b, f, t)) = find(raw, inner, name)
                {
                    return Some((bits + b, f, t));
                }
            }
            None
        }
        let mut found: Vec<(i64, i64, i64)> = raw
            .values()
            .filter(|t| t.name == struct_name && matches!(t.kind.as_str(), "STRUCT" | "UNION"))
            .filter_map(|t| {
                let mut t = t;
                let mut bits = 0;
                let parts: Vec<&str> = path.split('.').collect();
                for (i, part) in parts.iter().enumerate() {
                    let (b, f, ty) = find(raw, t, part)?;
                    bits += b;
                    if i + 1 == parts.len() {
                        return Some((bits, f, size(raw, ty)));
                    }
                    t = skip(raw, ty).1;
                }
                None
            })
            .collect();
        found.dedup();
        assert_eq!(found.len(), 1, "bpftool: {struct_name}.{path}: {found:?}");
        found[0]
    }

    /// The members the eBPF programs read, resolved here and checked
    /// against bpftool's dump of the same vmlinux.
    #[test]
    fn kernel_members_match_bpftool() {
        let (btf, raw) = (vmlinux(), vmlinux_raw());
        let cases: &[(&str, &str)] = &[
            ("writeback_control", "nr_to_write"),
            ("writeback_control", "pages_skipped"),
            ("writeback_control", "range_start"),
            ("writeback_control", "range_end"),
            ("writeback_control", "sync_mode"),
            ("writeback_control", "for_kupdate"),
            ("writeback_control", "for_background"),
            ("writeback_control", "range_cyclic"),
            ("inode", "i_ino"),
            ("inode", "i_sb"),
            ("inode", "i_mapping"),
            ("inode", "i_data.host"),
            ("super_block", "s_dev"),
            ("address_space", "host"),
            ("address_space", "writeback_index"),
            ("task_struct", "pid"),
            // Members inside anonymous unions/structs of these structs.
            ("inode", "i_nlink"),
            ("inode", "i_rcu"),
            ("address_space", "i_mmap"),
        ];
        for &(s, m) in cases {
            let got = btf.member(s, m).unwrap_or_else(|e| panic!("{e}"));
            let (bits, bf, size) = raw_member(raw, s, m);
            let ctx = format!(
                "{s}.{m}: ours {got:?}, bpftool bits_offset={bits} bitfield_size={bf} size={size}"
            );
            if bf == 0 {
                assert_eq!(got, layout((bits / 8) as u32, size as u32, 0, 0), "{ctx}");
                assert_eq!(bits % 8, 0, "{ctx}");
            } else {
                assert_eq!(
                    i64::from(got.byte_offset) * 8 + i64::from(got.bit_offset),
                    bits,
                    "{ctx}"
                );
                assert_eq!(i64::from(got.bit_size), bf, "{ctx}");
                assert!(matches!(got.size, 1 | 2 | 4 | 8), "{ctx}");
                assert_eq!(got.byte_offset % got.size, 0, "{ctx}");
                assert!(
                    u32::from(got.bit_offset + got.bit_size) <= got.size * 8,
                    "{ctx}"
                );
            }
        }
        // Facts that hold on every kernel wbscope supports.
        let m = |s, n| btf.member(s, n).unwrap();
        assert_eq!(m("writeback_control", "nr_to_write"), layout(0, 8, 0, 0));
        for flag in ["for_kupdate", "for_background", "range_cyclic"] {
            let l = m("writeback_control", flag);
            assert_eq!((l.size, l.bit_size), (1, 1), "{flag}: {l:?}");
        }
        assert_eq!(m("writeback_control", "sync_mode").size, 4);
        assert_eq!(m("inode", "i_sb").size, 8);
        assert_eq!(m("task_struct", "pid").size, 4);
        assert_eq!(m("super_block", "s_dev").size, 4);
        assert_eq!(
            m("inode", "i_data.host").byte_offset,
            m("inode", "i_data").byte_offset + m("address_space", "host").byte_offset
        );
    }

    #[test]
    fn kernel_lookup_errors() {
        let btf = vmlinux();
        let err = |s: &str, m: &str| btf.member(s, m).unwrap_err().to_string();
        assert_eq!(
            err("writeback_control", "nr_to_writ"),
            "struct writeback_control has no member nr_to_writ"
        );
        assert_eq!(
            err("writeback_contro", "nr_to_write"),
            "no struct or union named writeback_contro in BTF"
        );
        assert_eq!(
            err("inode", "i_sb.s_dev"),
            "inode.i_sb is a pointer, not a struct or union, so it has no member s_dev"
        );
        assert_eq!(
            btf.func_params("ext4_writepagez").unwrap_err().to_string(),
            "no function named ext4_writepagez in BTF"
        );
        let e = Btf::from_kernel(Some("no_such_module_xyz")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "reading /sys/kernel/btf/no_such_module_xyz: No such file or directory (os error 2)"
        );
        // A truncated vmlinux is an error, wherever it is cut.
        let bytes = fs::read(VMLINUX).unwrap();
        for len in [0, 1, 23, 24, 25, 4096, bytes.len() / 2, bytes.len() - 1] {
            assert!(Btf::parse(&bytes[..len]).is_err(), "{len}");
        }
    }

    /// `ext4_writepages(mapping, wbc)`: from ext4's split BTF if ext4 is a
    /// loaded module, else from vmlinux (ext4 built in); checked against
    /// bpftool either way.
    #[test]
    fn ext4_writepages_params() {
        let module = Btf::kernel_has_module_btf("ext4");
        let (owned, owned_raw);
        let (btf, raw) = if module {
            owned = Btf::from_kernel(Some("ext4")).unwrap();
            owned_raw = bpftool_raw(&["-B", VMLINUX], Path::new("/sys/kernel/btf/ext4"));
            (&owned, &owned_raw)
        } else {
            (vmlinux(), vmlinux_raw())
        };
        let params = btf.func_params("ext4_writepages").unwrap();
        assert_eq!(
            params,
            ["mapping", "wbc"],
            "from {}",
            if module { "ext4" } else { "vmlinux" }
        );
        let func = raw
            .values()
            .find(|t| t.kind == "FUNC" && t.name == "ext4_writepages")
            .expect("bpftool shows ext4_writepages");
        let proto = &raw[&(func.num("type_id") as u32)];
        let names: Vec<&str> = proto
            .items
            .iter()
            .filter_map(|i| i.name.as_deref())
            .collect();
        assert_eq!(names, params);
    }

    /// A split blob built here on top of the real vmlinux reads the same
    /// here as in bpftool given vmlinux as its base (`-B`), i.e. ids and
    /// string offsets continue after the base's as libbpf has them.
    #[test]
    fn split_on_vmlinux_matches_bpftool() {
        let base = vmlinux();
        let mut b = Builder::split_on(base);
        let inode = find_composite(base, "inode");
        let long = find_type(base, KIND_INT, "long int");
        let pinode = b.refer(KIND_PTR, "", inode);
        let i_sb = name_offset(base, "i_sb"); // a base string naming a split member
        let st = b.next_id;
        let name = b.str("wbscope_split_test");
        let n = b.str("n");
        b.raw_named(
            name,
            KIND_STRUCT,
            false,
            3,
            24,
            &[i_sb, pinode, 0, n, long, 64, 0, inode, 128],
        );
        let pst = b.refer(KIND_PTR, "", st);
        let proto = b.func_proto(long, &[("first", pst), ("second", pinode)]);
        b.func("wbscope_split_fn", proto);
        let blob = b.build();
        let btf = Btf::parse_split(base.clone(), &blob).unwrap();
        assert_eq!(btf.type_count(), base.type_count() + 5);
        assert_eq!(
            btf.member("wbscope_split_test", "i_sb").unwrap(),
            layout(0, 8, 0, 0)
        );
        assert_eq!(
            btf.member("wbscope_split_test", "n").unwrap(),
            layout(8, 8, 0, 0)
        );
        let i_ino = base.member("inode", "i_ino").unwrap();
        assert_eq!(
            btf.member("wbscope_split_test", "i_ino").unwrap(),
            layout(16 + i_ino.byte_offset, i_ino.size, 0, 0)
        );
        assert_eq!(
            btf.func_params("wbscope_split_fn").unwrap(),
            ["first", "second"]
        );

        let path =
            std::env::temp_dir().join(format!("wbscope-btf-split-{}.bin", std::process::id()));
        fs::write(&path, &blob).unwrap();
        let raw = bpftool_raw(&["-B", VMLINUX], &path);
        fs::remove_file(&path).unwrap();
        let s = &raw[&st];
        assert_eq!(
            (s.kind.as_str(), s.name.as_str()),
            ("STRUCT", "wbscope_split_test")
        );
        let names: Vec<_> = s.items.iter().map(|i| i.name.clone().unwrap()).collect();
        assert_eq!(names, ["i_sb", "n", "(anon)"]);
        assert_eq!(num(&s.items[2].attrs, "type_id", "anon"), i64::from(inode));
        let f = raw.values().find(|t| t.kind == "FUNC").unwrap();
        assert_eq!(f.name, "wbscope_split_fn");
        let proto = &raw[&(f.num("type_id") as u32)];
        let params: Vec<_> = proto
            .items
            .iter()
            .map(|i| i.name.clone().unwrap())
            .collect();
        assert_eq!(params, ["first", "second"]);
    }

    /// bpftool (libbpf) accepts the synthetic blob the other tests use and
    /// reads its members at the bit offsets written.
    #[test]
    fn synthetic_blob_is_valid_for_bpftool() {
        let b = sample_builder();
        let path =
            std::env::temp_dir().join(format!("wbscope-btf-sample-{}.bin", std::process::id()));
        fs::write(&path, b.build()).unwrap();
        let raw = bpftool_raw(&[], &path);
        fs::remove_file(&path).unwrap();
        let btf = sample();
        assert_eq!(raw.len(), btf.type_count());
        for (s, m) in [
            ("sample", "f3"),
            ("sample", "f4"),
            ("sample", "y"),
            ("sample", "wide"),
            ("outer", "s.y"),
        ] {
            let (bits, bf, _) = raw_member(&raw, s, m);
            let got = btf.member(s, m).unwrap();
            assert_eq!(
                i64::from(got.byte_offset) * 8 + i64::from(got.bit_offset),
                bits,
                "{s}.{m}"
            );
            assert_eq!(i64::from(got.bit_size), bf, "{s}.{m}");
        }
    }

    fn find_type(btf: &Btf, kind: u32, name: &str) -> u32 {
        (1..btf.starts.len() as u32)
            .find(|&id| {
                let t = btf.ty(id).unwrap();
                t.kind() == kind && btf.name_is(t.name_off, name)
            })
            .unwrap_or_else(|| panic!("no {} {name}", kind_name(kind)))
    }

    fn find_composite(btf: &Btf, name: &str) -> u32 {
        find_type(btf, KIND_STRUCT, name)
    }

    /// Offset of string `s` in `btf`'s strings.
    fn name_offset(btf: &Btf, s: &str) -> u32 {
        let needle = [&[0], s.as_bytes(), &[0]].concat();
        let at = btf
            .strings
            .windows(needle.len())
            .position(|w| w == needle)
            .unwrap_or_else(|| panic!("no string {s}"));
        at as u32 + 1
    }
}
