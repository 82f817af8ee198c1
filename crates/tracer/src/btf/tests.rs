//! The reader against synthetic blobs (every kind, every cut, damaged
//! and hostile input) and against the running kernel, cross-checked with
//! bpftool.
use std::{collections::HashMap, sync::OnceLock};

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
    let out = wbscope_programs::BPFTOOL
        .command()
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
        let items_len = if matches!(t.kind(), KIND_INT | KIND_VAR | KIND_DECL_TAG | KIND_ARRAY) {
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
                "TYPEDEF" | "CONST" | "VOLATILE" | "RESTRICT" | "TYPE_TAG" => id = t.num("type_id"),
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

    // Removed when dropped, even when bpftool fails the test (once
    // the blobs were left in the temporary directory).
    let file = blob_file(&blob);
    let raw = bpftool_raw(&["-B", VMLINUX], file.path());
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
    let file = blob_file(&b.build());
    let raw = bpftool_raw(&[], file.path());
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

/// A blob in a temporary file for bpftool, removed when dropped.
fn blob_file(blob: &[u8]) -> tempfile::NamedTempFile {
    use std::io::Write as _;
    let mut file = tempfile::Builder::new()
        .prefix("wbscope-btf-")
        .suffix(".bin")
        .tempfile()
        .unwrap();
    file.write_all(blob).unwrap();
    file.flush().unwrap();
    file
}
