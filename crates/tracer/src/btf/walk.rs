//! Walking the type graph: resolving a type id, skipping modifiers and
//! typedefs, sizing a type, and following a member path through nested
//! structs, unions and bitfields. Every walk is bounded
//! (`MAX_RESOLVE_DEPTH`, `MAX_MEMBER_VISITS`).
use std::path::{Path, PathBuf};

use super::*;

impl Btf {
    /// Type `id`, bounds-checked. Id 0 (`void`) has kind 0 and no data.
    pub(super) fn ty(&self, id: u32) -> Result<Ty<'_>, BtfError> {
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
    pub(super) fn name(&self, off: u32) -> Result<&[u8], BtfError> {
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
    pub(super) fn name_is(&self, off: u32, name: &str) -> bool {
        let start = off as usize;
        let end = start.saturating_add(name.len());
        self.strings.get(start..end) == Some(name.as_bytes()) && self.strings.get(end) == Some(&0)
    }

    /// Follows typedefs and const/volatile/restrict/type-tag qualifiers.
    pub(super) fn skip_modifiers(&self, id: u32) -> Result<Ty<'_>, BtfError> {
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
    pub(super) fn size_of(&self, id: u32, depth: usize) -> Result<u64, BtfError> {
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
    pub(super) fn resolve_path(
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
    pub(super) fn find_member(
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
    pub(super) fn int_bitfield(&self, found: Found) -> Result<Found, BtfError> {
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
    pub(super) fn layout(&self, bits: u64, found: Found) -> Result<MemberLayout, BtfError> {
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
pub(super) struct Found {
    /// From the start of the composite searched.
    pub(super) bit_offset: u64,
    /// 0 if not a bitfield.
    pub(super) bitfield_size: u32,
    pub(super) type_id: u32,
}

/// `dir/<module>`, refusing names that are not a single plain file name.
pub(super) fn module_path(dir: &Path, module: &str) -> Result<PathBuf, BtfError> {
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
