//! A bounds-checked FlexBuffer reader (maps, vectors, scalars, strings, blobs).
//!
//! Written for the `custom_options` of TFLite custom operators. It differs from the common
//! crates in one way that matters: strings are returned as raw bytes, never checked for UTF-8,
//! because the Edge TPU custom op keeps a whole binary DarwiNN package in a FlexBuffer string.
//!
//! Layout facts used here (FlexBuffers wire format):
//! - the last byte is the root's byte width, the byte before it the root's packed type
//!   (`type << 2 | log2(width)`), and the root value sits just before those two bytes;
//! - inline scalars (null, int, uint, float, bool) take their parent's width; everything else is
//!   an unsigned offset, in the parent's width, pointing *backwards* to the data, whose own width
//!   is the one in the packed type;
//! - strings, blobs and vectors have their length just before the data (one width wide); an
//!   untyped vector or map is followed by one packed-type byte per element; a map also has, at
//!   data - 3 widths, the offset of its sorted keys vector and, at data - 2 widths, that vector's
//!   width.
//!
//! Every read goes through [`ByteReader`], so hostile input gives an error, never a panic.
//! Nothing here recurses except [`Reference::to_json`], which has a depth limit.

use crate::bytes::ByteReader;
use crate::error::{Error, Result};

const FORMAT: &str = "flexbuffer";

/// Deepest nesting [`Reference::to_json`] follows (offsets may form cycles in hostile data).
pub const MAX_DEPTH: usize = 32;

/// Most values [`Reference::to_json`] visits (shared sub-vectors could otherwise make a small
/// buffer expand exponentially).
pub const MAX_JSON_VALUES: u64 = 1 << 16;

/// The FlexBuffer value types (the upper six bits of a packed type byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlexType {
    /// No value.
    Null,
    /// Signed integer, inline.
    Int,
    /// Unsigned integer, inline.
    UInt,
    /// Float, inline.
    Float,
    /// NUL-terminated key.
    Key,
    /// Length-prefixed, NUL-terminated bytes (any bytes; not checked for UTF-8).
    String,
    /// Signed integer behind an offset.
    IndirectInt,
    /// Unsigned integer behind an offset.
    IndirectUInt,
    /// Float behind an offset.
    IndirectFloat,
    /// Map with a sorted keys vector.
    Map,
    /// Vector of values with a type byte each.
    Vector,
    /// Vector of signed integers.
    VectorInt,
    /// Vector of unsigned integers.
    VectorUInt,
    /// Vector of floats.
    VectorFloat,
    /// Vector of keys.
    VectorKey,
    /// Vector of strings (deprecated by FlexBuffers but still readable).
    VectorString,
    /// Fixed-length (2, 3 or 4) vector of signed integers.
    FixedVectorInt(u8),
    /// Fixed-length (2, 3 or 4) vector of unsigned integers.
    FixedVectorUInt(u8),
    /// Fixed-length (2, 3 or 4) vector of floats.
    FixedVectorFloat(u8),
    /// Length-prefixed bytes.
    Blob,
    /// Boolean, inline.
    Bool,
    /// Vector of booleans.
    VectorBool,
}

impl FlexType {
    /// Decodes the type number (a packed type byte shifted right by two).
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            0 => FlexType::Null,
            1 => FlexType::Int,
            2 => FlexType::UInt,
            3 => FlexType::Float,
            4 => FlexType::Key,
            5 => FlexType::String,
            6 => FlexType::IndirectInt,
            7 => FlexType::IndirectUInt,
            8 => FlexType::IndirectFloat,
            9 => FlexType::Map,
            10 => FlexType::Vector,
            11 => FlexType::VectorInt,
            12 => FlexType::VectorUInt,
            13 => FlexType::VectorFloat,
            14 => FlexType::VectorKey,
            15 => FlexType::VectorString,
            16 => FlexType::FixedVectorInt(2),
            17 => FlexType::FixedVectorUInt(2),
            18 => FlexType::FixedVectorFloat(2),
            19 => FlexType::FixedVectorInt(3),
            20 => FlexType::FixedVectorUInt(3),
            21 => FlexType::FixedVectorFloat(3),
            22 => FlexType::FixedVectorInt(4),
            23 => FlexType::FixedVectorUInt(4),
            24 => FlexType::FixedVectorFloat(4),
            25 => FlexType::Blob,
            26 => FlexType::Bool,
            36 => FlexType::VectorBool,
            _ => return None,
        })
    }

    /// True for the types stored in their parent's slot rather than behind an offset.
    pub fn is_inline(self) -> bool {
        matches!(
            self,
            FlexType::Null | FlexType::Int | FlexType::UInt | FlexType::Float | FlexType::Bool
        )
    }
}

/// One value inside a FlexBuffer: where it sits, its parent's width and its packed type.
#[derive(Clone, Copy, Debug)]
pub struct Reference<'a> {
    data: ByteReader<'a>,
    /// Offset of the value's slot in the data.
    pos: u64,
    /// Width of the slot (the parent's byte width).
    parent_width: u8,
    /// Width of the data behind an offset (from the packed type).
    width: u8,
    ty: FlexType,
}

/// The root value of the FlexBuffer `data`.
pub fn root(data: &[u8]) -> Result<Reference<'_>> {
    let r = ByteReader::new(data, FORMAT);
    let len = data.len() as u64;
    if len < 3 {
        return Err(Error::invalid(FORMAT, "root", Some(0), format!("{len} bytes is too short")));
    }
    let root_width = r.u8(len - 1, "root.width")?;
    check_width(root_width, "root.width", len - 1)?;
    let packed = r.u8(len - 2, "root.type")?;
    let pos = (len - 2).checked_sub(u64::from(root_width)).ok_or_else(|| {
        Error::invalid(FORMAT, "root", Some(len - 2), format!("width {root_width} does not fit"))
    })?;
    Reference::new(r, pos, root_width, packed, "root")
}

fn check_width(w: u8, field: &str, offset: u64) -> Result<()> {
    if matches!(w, 1 | 2 | 4 | 8) {
        Ok(())
    } else {
        Err(Error::invalid(
            FORMAT,
            field,
            Some(offset),
            format!("byte width {w} is not 1, 2, 4 or 8"),
        ))
    }
}

/// Reads an unsigned integer `width` bytes wide.
fn read_uint(r: &ByteReader<'_>, pos: u64, width: u8, field: &str) -> Result<u64> {
    Ok(match width {
        1 => u64::from(r.u8(pos, field)?),
        2 => u64::from(r.u16(pos, field)?),
        4 => u64::from(r.u32(pos, field)?),
        _ => r.u64(pos, field)?,
    })
}

/// Reads a signed integer `width` bytes wide.
fn read_int(r: &ByteReader<'_>, pos: u64, width: u8, field: &str) -> Result<i64> {
    Ok(match width {
        1 => i64::from(r.u8(pos, field)? as i8),
        2 => i64::from(r.u16(pos, field)? as i16),
        4 => i64::from(r.i32(pos, field)?),
        _ => r.i64(pos, field)?,
    })
}

fn read_float(r: &ByteReader<'_>, pos: u64, width: u8, field: &str) -> Result<f64> {
    match width {
        4 => Ok(f64::from(f32::from_bits(r.u32(pos, field)?))),
        8 => Ok(f64::from_bits(r.u64(pos, field)?)),
        w => Err(Error::invalid(FORMAT, field, Some(pos), format!("float of width {w}"))),
    }
}

impl<'a> Reference<'a> {
    fn new(
        data: ByteReader<'a>,
        pos: u64,
        parent_width: u8,
        packed: u8,
        field: &str,
    ) -> Result<Self> {
        let ty = FlexType::from_code(packed >> 2).ok_or_else(|| {
            Error::invalid(FORMAT, field, Some(pos), format!("unknown value type {}", packed >> 2))
        })?;
        Ok(Reference { data, pos, parent_width, width: 1 << (packed & 3), ty })
    }

    /// The value's type.
    pub fn flex_type(&self) -> FlexType {
        self.ty
    }

    /// Offset of the value's slot in the FlexBuffer.
    pub fn offset(&self) -> u64 {
        self.pos
    }

    /// Follows the backwards offset in this value's slot to the data it points at.
    fn target(&self, field: &str) -> Result<u64> {
        let off = read_uint(&self.data, self.pos, self.parent_width, field)?;
        self.pos.checked_sub(off).ok_or_else(|| {
            Error::invalid(
                FORMAT,
                field,
                Some(self.pos),
                format!("offset {off} points before the start"),
            )
        })
    }

    /// The value as a signed integer (int, uint, bool or their indirect forms).
    pub fn as_i64(&self, field: &str) -> Result<i64> {
        match self.ty {
            FlexType::Int => read_int(&self.data, self.pos, self.parent_width, field),
            FlexType::UInt | FlexType::Bool => {
                let v = read_uint(&self.data, self.pos, self.parent_width, field)?;
                i64::try_from(v).map_err(|_| self.type_error(field, "an integer that fits i64"))
            }
            FlexType::IndirectInt => read_int(&self.data, self.target(field)?, self.width, field),
            FlexType::IndirectUInt => {
                let v = read_uint(&self.data, self.target(field)?, self.width, field)?;
                i64::try_from(v).map_err(|_| self.type_error(field, "an integer that fits i64"))
            }
            _ => Err(self.type_error(field, "an integer")),
        }
    }

    /// The value as a float (float, indirect float, or an integer converted).
    pub fn as_f64(&self, field: &str) -> Result<f64> {
        match self.ty {
            FlexType::Float => read_float(&self.data, self.pos, self.parent_width, field),
            FlexType::IndirectFloat => {
                read_float(&self.data, self.target(field)?, self.width, field)
            }
            _ => self.as_i64(field).map(|v| v as f64),
        }
    }

    /// The bytes of a string, blob or key (strings without their NUL; any bytes accepted), and
    /// their offset in the FlexBuffer.
    pub fn as_bytes_at(&self, field: &str) -> Result<(u64, &'a [u8])> {
        match self.ty {
            FlexType::String | FlexType::Blob => {
                let start = self.target(field)?;
                let len_at = start.checked_sub(u64::from(self.width)).ok_or_else(|| {
                    Error::invalid(FORMAT, field, Some(start), "length prefix before the start")
                })?;
                let len = read_uint(&self.data, len_at, self.width, field)?;
                Ok((start, self.data.slice(start, len, field)?))
            }
            FlexType::Key => {
                let start = self.target(field)?;
                Ok((start, key_at(&self.data, start, field)?))
            }
            _ => Err(self.type_error(field, "a string, blob or key")),
        }
    }

    /// The bytes of a string, blob or key (see [`Reference::as_bytes_at`]).
    pub fn as_bytes(&self, field: &str) -> Result<&'a [u8]> {
        Ok(self.as_bytes_at(field)?.1)
    }

    /// The value as a map.
    pub fn as_map(&self, field: &str) -> Result<Map<'a>> {
        if self.ty != FlexType::Map {
            return Err(self.type_error(field, "a map"));
        }
        let values = self.untyped_vector(field)?;
        let w = u64::from(self.width);
        let keys_slot = values.start.checked_sub(3 * w).ok_or_else(|| {
            Error::invalid(FORMAT, field, Some(values.start), "map header before the start")
        })?;
        let keys_off = read_uint(&self.data, keys_slot, self.width, field)?;
        let keys_start = keys_slot.checked_sub(keys_off).ok_or_else(|| {
            Error::invalid(FORMAT, field, Some(keys_slot), "keys offset points before the start")
        })?;
        let keys_width = read_uint(&self.data, keys_slot + w, self.width, field)?;
        let keys_width = u8::try_from(keys_width).unwrap_or(0);
        check_width(keys_width, field, keys_slot + w)?;
        let keys = typed_vector(&self.data, keys_start, keys_width, field)?;
        if keys.len != values.len {
            return Err(Error::invalid(
                FORMAT,
                field,
                Some(keys_start),
                format!("{} keys for {} values", keys.len, values.len),
            ));
        }
        Ok(Map { keys, values })
    }

    /// The value as a vector (untyped, typed or fixed-length).
    pub fn as_vector(&self, field: &str) -> Result<Vector<'a>> {
        let (elem_ty, fixed) = match self.ty {
            FlexType::Vector => (None, None),
            FlexType::VectorInt => (Some(FlexType::Int), None),
            FlexType::VectorUInt => (Some(FlexType::UInt), None),
            FlexType::VectorFloat => (Some(FlexType::Float), None),
            FlexType::VectorKey => (Some(FlexType::Key), None),
            FlexType::VectorString => (Some(FlexType::String), None),
            FlexType::VectorBool => (Some(FlexType::Bool), None),
            FlexType::FixedVectorInt(n) => (Some(FlexType::Int), Some(n)),
            FlexType::FixedVectorUInt(n) => (Some(FlexType::UInt), Some(n)),
            FlexType::FixedVectorFloat(n) => (Some(FlexType::Float), Some(n)),
            _ => return Err(self.type_error(field, "a vector")),
        };
        let start = self.target(field)?;
        let body = match fixed {
            Some(n) => {
                self.data.slice(start, u64::from(n) * u64::from(self.width), field)?;
                Body { data: self.data, start, len: u64::from(n), width: self.width }
            }
            None if elem_ty.is_none() => self.untyped_vector(field)?,
            None => typed_vector(&self.data, start, self.width, field)?,
        };
        Ok(Vector { body, elem_ty })
    }

    /// The untyped vector (or map values) this value points at, with its type bytes checked to
    /// be in bounds.
    fn untyped_vector(&self, field: &str) -> Result<Body<'a>> {
        let start = self.target(field)?;
        let body = typed_vector(&self.data, start, self.width, field)?;
        // One packed-type byte per element follows the elements.
        self.data.slice(body.end()?, body.len, field)?;
        Ok(body)
    }

    fn type_error(&self, field: &str, wanted: &str) -> Error {
        Error::invalid(
            FORMAT,
            field,
            Some(self.pos),
            format!("expected {wanted}, found {:?}", self.ty),
        )
    }

    /// The value as JSON, for display: strings that are valid UTF-8 up to 64 bytes print as
    /// text, longer or binary ones as `"bytes[N]"`; nesting stops at [`MAX_DEPTH`] and the walk
    /// at [`MAX_JSON_VALUES`] values.
    pub fn to_json(&self, field: &str) -> Result<serde_json::Value> {
        let mut budget = MAX_JSON_VALUES;
        self.json_at_depth(field, 0, &mut budget)
    }

    fn json_at_depth(
        &self,
        field: &str,
        depth: usize,
        budget: &mut u64,
    ) -> Result<serde_json::Value> {
        use serde_json::Value;
        if depth > MAX_DEPTH {
            return Err(Error::Limit {
                format: FORMAT,
                what: format!("nesting depth at {field}"),
                value: depth as u64,
                limit: MAX_DEPTH as u64,
            });
        }
        *budget = budget.checked_sub(1).ok_or_else(|| Error::Limit {
            format: FORMAT,
            what: format!("values visited at {field}"),
            value: MAX_JSON_VALUES + 1,
            limit: MAX_JSON_VALUES,
        })?;
        Ok(match self.ty {
            FlexType::Null => Value::Null,
            FlexType::Bool => Value::Bool(self.as_i64(field)? != 0),
            FlexType::Int | FlexType::UInt | FlexType::IndirectInt | FlexType::IndirectUInt => {
                Value::from(self.as_i64(field)?)
            }
            FlexType::Float | FlexType::IndirectFloat => Value::from(self.as_f64(field)?),
            FlexType::Key | FlexType::String | FlexType::Blob => {
                let b = self.as_bytes(field)?;
                match std::str::from_utf8(b) {
                    Ok(s) if b.len() <= 64 && self.ty != FlexType::Blob => Value::from(s),
                    _ => Value::from(format!("bytes[{}]", b.len())),
                }
            }
            FlexType::Map => {
                let map = self.as_map(field)?;
                let mut out = serde_json::Map::new();
                for i in 0..map.len() {
                    let key = String::from_utf8_lossy(map.key(i, field)?).into_owned();
                    let sub = format!("{field}.{key}");
                    out.insert(key, map.value(i, &sub)?.json_at_depth(&sub, depth + 1, budget)?);
                }
                Value::Object(out)
            }
            _ => {
                let v = self.as_vector(field)?;
                let mut out = Vec::new();
                for i in 0..v.len() {
                    let sub = format!("{field}[{i}]");
                    out.push(v.get(i, &sub)?.json_at_depth(&sub, depth + 1, budget)?);
                }
                Value::Array(out)
            }
        })
    }
}

/// A NUL-terminated key starting at `start`.
fn key_at<'a>(r: &ByteReader<'a>, start: u64, field: &str) -> Result<&'a [u8]> {
    let rest = r.data().get(start as usize..).ok_or_else(|| Error::Truncated {
        format: FORMAT,
        field: field.to_string(),
        offset: start,
        end: start,
        len: r.len() as u64,
    })?;
    let n = rest
        .iter()
        .position(|&b| b == 0)
        .ok_or_else(|| Error::invalid(FORMAT, field, Some(start), "key has no NUL terminator"))?;
    Ok(&rest[..n])
}

/// A length-prefixed run of equal-width slots, bounds-checked.
#[derive(Clone, Copy, Debug)]
struct Body<'a> {
    data: ByteReader<'a>,
    start: u64,
    len: u64,
    width: u8,
}

impl Body<'_> {
    fn end(&self) -> Result<u64> {
        self.len
            .checked_mul(u64::from(self.width))
            .and_then(|n| n.checked_add(self.start))
            .ok_or_else(|| Error::invalid(FORMAT, "vector", Some(self.start), "length overflows"))
    }

    fn slot(&self, i: usize) -> Option<u64> {
        if (i as u64) < self.len {
            Some(self.start + i as u64 * u64::from(self.width))
        } else {
            None
        }
    }
}

/// The vector whose length prefix sits just before `start`; its slots must be in bounds.
fn typed_vector<'a>(r: &ByteReader<'a>, start: u64, width: u8, field: &str) -> Result<Body<'a>> {
    let len_at = start.checked_sub(u64::from(width)).ok_or_else(|| {
        Error::invalid(FORMAT, field, Some(start), "length prefix before the start")
    })?;
    let len = read_uint(r, len_at, width, field)?;
    let body = Body { data: *r, start, len, width };
    let end = body.end()?;
    r.slice(start, end - start, field)?;
    Ok(body)
}

/// A FlexBuffer map: sorted keys and their values.
#[derive(Clone, Copy, Debug)]
pub struct Map<'a> {
    keys: Body<'a>,
    values: Body<'a>,
}

impl<'a> Map<'a> {
    /// Number of entries (bounded by the data size).
    pub fn len(&self) -> usize {
        self.values.len as usize
    }

    /// True when the map has no entries.
    pub fn is_empty(&self) -> bool {
        self.values.len == 0
    }

    /// The key of entry `i`.
    pub fn key(&self, i: usize, field: &str) -> Result<&'a [u8]> {
        let slot = self.keys.slot(i).ok_or_else(|| index_error(field, i, self.len()))?;
        let off = read_uint(&self.keys.data, slot, self.keys.width, field)?;
        let start = slot.checked_sub(off).ok_or_else(|| {
            Error::invalid(FORMAT, field, Some(slot), "key offset points before the start")
        })?;
        key_at(&self.keys.data, start, field)
    }

    /// The value of entry `i`.
    pub fn value(&self, i: usize, field: &str) -> Result<Reference<'a>> {
        element(&self.values, None, i, field)
    }

    /// The value stored under `key`, if any (a linear scan, so unsorted keys also work).
    pub fn get(&self, key: &[u8], field: &str) -> Result<Option<Reference<'a>>> {
        for i in 0..self.len() {
            if self.key(i, field)? == key {
                return self.value(i, field).map(Some);
            }
        }
        Ok(None)
    }
}

/// A FlexBuffer vector of any kind.
#[derive(Clone, Copy, Debug)]
pub struct Vector<'a> {
    body: Body<'a>,
    /// Element type of a typed vector; `None` for an untyped vector (a type byte per element).
    elem_ty: Option<FlexType>,
}

impl<'a> Vector<'a> {
    /// Number of elements (bounded by the data size).
    pub fn len(&self) -> usize {
        self.body.len as usize
    }

    /// True when the vector is empty.
    pub fn is_empty(&self) -> bool {
        self.body.len == 0
    }

    /// Element `i`.
    pub fn get(&self, i: usize, field: &str) -> Result<Reference<'a>> {
        element(&self.body, self.elem_ty, i, field)
    }
}

fn index_error(field: &str, i: usize, len: usize) -> Error {
    Error::invalid(FORMAT, field, None, format!("index {i} out of range for length {len}"))
}

fn element<'a>(
    body: &Body<'a>,
    elem_ty: Option<FlexType>,
    i: usize,
    field: &str,
) -> Result<Reference<'a>> {
    let slot = body.slot(i).ok_or_else(|| index_error(field, i, body.len as usize))?;
    match elem_ty {
        Some(ty) => Ok(Reference {
            data: body.data,
            pos: slot,
            parent_width: body.width,
            width: body.width,
            ty,
        }),
        None => {
            let type_at = body.end()? + i as u64;
            let packed = body.data.u8(type_at, field)?;
            Reference::new(body.data, slot, body.width, packed, field)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `{"a": 7, "b": "hi\xff"}` laid out by hand as the C++ builder does (width 1).
    fn sample() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(b"a\0b\0"); // keys at 0 and 2
        b.extend_from_slice(&[3, b'h', b'i', 0xff, 0]); // string: len at 4, data at 5..8
                                                        // keys vector: len at 9, slot 10 -> key at 0 (offset 10), slot 11 -> key at 2 (offset 9)
        b.extend_from_slice(&[2, 10, 9]);
        // map header: keys offset at 12 (points to 10: offset 2), keys width 1, len 2
        b.extend_from_slice(&[2, 1, 2]);
        // values at 15, 16: int 7 inline, string offset to 5 (16 - 5 = 11)
        b.extend_from_slice(&[7, 11]);
        // types: INT width 1, STRING width 1
        b.extend_from_slice(&[1 << 2, 5 << 2]);
        // root: offset to map values at 15 from 19 = 4; type MAP width 1; root width 1
        b.extend_from_slice(&[4, 9 << 2, 1]);
        b
    }

    #[test]
    fn reads_map_with_binary_string() {
        let b = sample();
        let map = root(&b).unwrap().as_map("root").unwrap();
        assert_eq!(map.len(), 2);
        assert_eq!(map.key(0, "k").unwrap(), b"a");
        assert_eq!(map.get(b"a", "a").unwrap().unwrap().as_i64("a").unwrap(), 7);
        let (at, s) = map.get(b"b", "b").unwrap().unwrap().as_bytes_at("b").unwrap();
        assert_eq!((at, s), (5, &b"hi\xff"[..]));
        assert!(map.get(b"c", "c").unwrap().is_none());
        assert!(map.value(2, "x").is_err());
    }

    #[test]
    fn every_truncation_and_byte_flip_is_an_error_or_a_value() {
        let b = sample();
        for cut in 0..b.len() {
            let _ = root(&b[..cut]).and_then(|r| r.to_json("root"));
        }
        for i in 0..b.len() {
            for v in [0u8, 1, 0x7f, 0x80, 0xff] {
                let mut m = b.clone();
                m[i] = v;
                let _ = root(&m).and_then(|r| r.to_json("root"));
            }
        }
    }

    #[test]
    fn shared_sub_vectors_hit_the_value_budget() {
        // A chain of 30 untyped vectors, each with 8 elements pointing at the previous vector:
        // 8^30 values if expanded.
        let mut b = vec![1u8, 0, 0]; // vector 0: one null (len at 0, slot 1, type byte 2)
        let mut prev = 1usize;
        for _ in 0..30 {
            b.push(8); // length
            let start = b.len();
            for i in 0..8 {
                b.push((start + i - prev) as u8);
            }
            b.extend_from_slice(&[10 << 2; 8]);
            prev = start;
        }
        let root_slot = b.len();
        b.push((root_slot - prev) as u8);
        b.extend_from_slice(&[10 << 2, 1]);
        let err = root(&b).unwrap().to_json("root").unwrap_err().to_string();
        assert!(err.contains("values visited"), "{err}");
    }

    #[test]
    fn self_referencing_vector_hits_depth_limit() {
        // Untyped vector of length 1 at offset 1 whose element (offset 0) is the vector itself.
        let b = vec![1u8, 0, 10 << 2, 2, 10 << 2, 1];
        let err = root(&b).unwrap().to_json("root").unwrap_err().to_string();
        assert!(err.contains("nesting depth"), "{err}");
    }
}
