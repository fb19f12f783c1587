//! The verified zero-copy `.ptd` reader.

use flatbuffers::VerifierOptions;
use kiln_schema::flat_tensor::flat_tensor_flatbuffer as fb;
use kiln_schema::or_zero;
use serde::Serialize;

use super::header::Header;
use crate::error::{Error, Result};
use crate::pte::{ScalarType, Tensor, MAX_RANK};

const FORMAT: &str = "ptd";

/// The layout of a named tensor: dtype, sizes and dim_order (checked like a `.pte` tensor).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TensorLayout {
    /// Element type.
    pub scalar_type: ScalarType,
    /// Sizes, each >= 0.
    pub sizes: Vec<i32>,
    /// Dimension order, a permutation of `0..rank`.
    pub dim_order: Vec<u8>,
}

impl TensorLayout {
    /// Byte size (`numel * element size`), overflow-checked.
    pub fn nbytes(&self) -> Option<u64> {
        self.sizes.iter().try_fold(self.scalar_type.size() as u64, |acc, s| {
            acc.checked_mul(u64::try_from(*s).ok()?)
        })
    }

    /// ExecuTorch's `validateTensorLayout`: an external tensor of a `.pte` must match the
    /// layout exactly (scalar type, rank, every size, every dim_order entry).
    pub fn check_matches(&self, tensor: &Tensor<'_>, name: &str) -> Result<()> {
        let sizes: Vec<i32> = tensor.sizes().iter().collect();
        let dim_order: Vec<u8> = tensor.dim_order().iter().collect();
        if tensor.dtype() != self.scalar_type || sizes != self.sizes || dim_order != self.dim_order
        {
            return Err(Error::invalid(
                FORMAT,
                format!("named_data[{name:?}].tensor_layout"),
                None,
                format!(
                    "{} {:?} dim_order {:?} does not match the program's {} {:?} dim_order {:?}",
                    self.scalar_type.schema_name(),
                    self.sizes,
                    self.dim_order,
                    tensor.dtype().schema_name(),
                    sizes,
                    dim_order
                ),
            ));
        }
        Ok(())
    }

    fn decode(l: fb::TensorLayout<'_>, path: &dyn Fn() -> String) -> Result<Self> {
        let at = Some(l._tab.loc() as u64);
        let bad = |f: &str, r: String| Error::invalid(FORMAT, format!("{}.{f}", path()), at, r);
        let scalar_type = ScalarType::from_code(i64::from(l.scalar_type().0)).ok_or_else(|| {
            bad("scalar_type", format!("unknown scalar type {}", l.scalar_type().0))
        })?;
        let sizes: Vec<i32> = l.sizes().map(|v| v.iter().collect()).unwrap_or_default();
        let dim_order: Vec<u8> = l.dim_order().map(|v| v.iter().collect()).unwrap_or_default();
        if sizes.len() > MAX_RANK {
            return Err(bad(
                "sizes",
                format!("rank {} is over the limit of {MAX_RANK}", sizes.len()),
            ));
        }
        if let Some((i, s)) = sizes.iter().enumerate().find(|(_, s)| **s < 0) {
            return Err(bad(&format!("sizes[{i}]"), format!("{s} is negative")));
        }
        let mut seen = [false; MAX_RANK];
        let permutation = dim_order.len() == sizes.len()
            && dim_order.iter().all(|d| {
                let d = usize::from(*d);
                d < sizes.len() && !std::mem::replace(&mut seen[d], true)
            });
        if !permutation {
            return Err(bad(
                "dim_order",
                format!("{dim_order:?} is not a permutation of 0..{}", sizes.len()),
            ));
        }
        let layout = TensorLayout { scalar_type, sizes, dim_order };
        if layout.nbytes().is_none_or(|n| n > i64::MAX as u64) {
            return Err(bad("sizes", "byte size overflows".into()));
        }
        Ok(layout)
    }
}

/// One named entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The key (a fully qualified tensor name, or a backend's blob id).
    pub key: &'a str,
    /// Index into the segments.
    pub segment_index: u32,
    /// The data.
    pub data: &'a [u8],
    /// The tensor layout, when the data is a tensor.
    pub layout: Option<TensorLayout>,
}

/// A verified `.ptd` over the bytes of the whole file.
#[derive(Clone, Copy)]
pub struct FlatTensor<'a> {
    bytes: &'a [u8],
    header: Header,
    root: fb::FlatTensor<'a>,
}

impl std::fmt::Debug for FlatTensor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlatTensor").field("header", &self.header).finish()
    }
}

impl<'a> FlatTensor<'a> {
    /// Opens and verifies a `.ptd`: header, identifier `FT01`, flatbuffer verifier (with caps
    /// bounded by the flatbuffer size), every segment inside the segment data, every entry's
    /// key present, segment index in range and layout valid and no larger than its segment.
    pub fn open(bytes: &'a [u8]) -> Result<Self> {
        let ident = bytes.get(4..8);
        if ident != Some(b"FT01".as_slice()) {
            return Err(Error::BadMagic {
                format: FORMAT,
                offset: 4,
                expected: "\"FT01\"".into(),
                found: format!("{:?}", String::from_utf8_lossy(ident.unwrap_or(&[]))),
            });
        }
        let header = Header::parse(bytes)?;
        // Header::parse checked the flatbuffer end against the file length.
        let fb_len = usize::try_from(header.flatbuffer_end()).unwrap_or(usize::MAX);
        let fb_bytes = bytes.get(..fb_len).unwrap_or(&[]);
        let opts = VerifierOptions {
            max_depth: 16,
            max_tables: fb_len / 4 + 1,
            max_apparent_size: fb_len.saturating_mul(4).max(1 << 16),
            ignore_missing_null_terminator: false,
        };
        let root = fb::root_as_flat_tensor_with_opts(&opts, fb_bytes)
            .map_err(|source| Error::Flatbuffer { format: FORMAT, source })?;
        let ft = FlatTensor { bytes, header, root };
        ft.verify()?;
        Ok(ft)
    }

    fn verify(&self) -> Result<()> {
        if self.root.segments().is_none() || self.root.named_data().is_none() {
            return Err(Error::invalid(FORMAT, "segments/named_data", None, "missing"));
        }
        for i in 0..self.num_segments() {
            self.segment_bytes(i)?;
        }
        for i in 0..self.len() {
            self.entry(i)?;
        }
        Ok(())
    }

    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The whole file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The generated flatbuffer view (verified).
    pub fn raw(&self) -> fb::FlatTensor<'a> {
        self.root
    }

    /// `FlatTensor.version`.
    pub fn version(&self) -> u32 {
        self.root.version()
    }

    /// Number of segments.
    pub fn num_segments(&self) -> usize {
        self.root.segments().map_or(0, |v| v.len())
    }

    /// Segment `index` as written: offset relative to the segment base, and size.
    pub fn segment(&self, index: usize) -> Result<(u64, u64)> {
        match self.root.segments().filter(|v| index < v.len()) {
            Some(v) => Ok((or_zero(v.get(index).offset()), or_zero(v.get(index).size()))),
            None => Err(Error::invalid(
                FORMAT,
                format!("segments[{index}]"),
                None,
                format!("there are {} segments", self.num_segments()),
            )),
        }
    }

    /// The bytes of segment `index`, checked to lie in the segment data.
    pub fn segment_bytes(&self, index: usize) -> Result<&'a [u8]> {
        let (offset, size) = self.segment(index)?;
        let h = &self.header;
        let start = h.segment_base_offset.checked_add(offset);
        let end = start.and_then(|s| s.checked_add(size));
        let data_end = h.segment_base_offset.saturating_add(h.segment_data_size);
        match (start, end) {
            (Some(s), Some(e)) if e <= data_end && e <= self.bytes.len() as u64 => {
                Ok(&self.bytes[s as usize..e as usize])
            }
            _ => Err(Error::invalid(
                FORMAT,
                format!("segments[{index}]"),
                None,
                format!(
                    "offset {offset} + size {size} from base {} is outside the segment data \
                     ({} bytes)",
                    h.segment_base_offset, h.segment_data_size
                ),
            )),
        }
    }

    /// Number of named entries.
    pub fn len(&self) -> usize {
        self.root.named_data().map_or(0, |v| v.len())
    }

    /// True when there are no named entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entry `index`, decoded and checked.
    pub fn entry(&self, index: usize) -> Result<Entry<'a>> {
        let path = || format!("named_data[{index}]");
        let Some(v) = self.root.named_data().filter(|v| index < v.len()) else {
            return Err(Error::invalid(
                FORMAT,
                path(),
                None,
                format!("there are {} entries", self.len()),
            ));
        };
        let nd = v.get(index);
        let at = Some(nd._tab.loc() as u64);
        let key = nd
            .key()
            .ok_or_else(|| Error::invalid(FORMAT, format!("{}.key", path()), at, "missing"))?;
        let seg = nd.segment_index();
        if seg as usize >= self.num_segments() {
            return Err(Error::invalid(
                FORMAT,
                format!("{}.segment_index", path()),
                at,
                format!("index {seg} is outside 0..{}", self.num_segments()),
            ));
        }
        let data = self.segment_bytes(seg as usize)?;
        let layout = match nd.tensor_layout() {
            Some(l) => {
                let layout = TensorLayout::decode(l, &|| format!("{}.tensor_layout", path()))?;
                let nbytes = layout.nbytes().unwrap_or(u64::MAX);
                if nbytes > data.len() as u64 {
                    return Err(Error::invalid(
                        FORMAT,
                        format!("{}.tensor_layout", path()),
                        at,
                        format!("needs {nbytes} bytes but segment {seg} has {}", data.len()),
                    ));
                }
                Some(layout)
            }
            None => None,
        };
        Ok(Entry { key, segment_index: seg, data, layout })
    }

    /// Every entry, in file order.
    pub fn entries(&self) -> impl Iterator<Item = Result<Entry<'a>>> + '_ {
        (0..self.len()).map(|i| self.entry(i))
    }

    /// The entry named `key` (a linear search, like ExecuTorch's `FlatTensorDataMap`).
    pub fn get(&self, key: &str) -> Result<Entry<'a>> {
        let found = self
            .root
            .named_data()
            .into_iter()
            .flat_map(|v| v.iter())
            .position(|nd| nd.key() == Some(key));
        match found {
            Some(i) => self.entry(i),
            None => Err(Error::NotFound { format: FORMAT, what: "named data", name: key.into() }),
        }
    }

    /// The data of external tensor `tensor` (named `name` in the program), after ExecuTorch's
    /// exact layout check.
    pub fn tensor_data(&self, name: &str, tensor: &Tensor<'_>) -> Result<&'a [u8]> {
        let entry = self.get(name)?;
        let layout = entry.layout.as_ref().ok_or_else(|| {
            Error::invalid(FORMAT, format!("named_data[{name:?}]"), None, "has no tensor layout")
        })?;
        layout.check_matches(tensor, name)?;
        let n = usize::try_from(tensor.nbytes()).ok();
        n.and_then(|n| entry.data.get(..n)).ok_or_else(|| {
            Error::invalid(FORMAT, format!("named_data[{name:?}]"), None, "data too short")
        })
    }
}

impl FlatTensor<'_> {
    /// The whole file as JSON, shaped like `flatc --json` output of `flat_tensor.fbs`, with the
    /// `FH01` header.
    pub fn dump(&self) -> serde_json::Value {
        let h = &self.header;
        let segments: Vec<_> = self
            .root
            .segments()
            .into_iter()
            .flat_map(|v| v.iter())
            .map(|s| serde_json::json!({"offset": or_zero(s.offset()), "size": or_zero(s.size())}))
            .collect();
        let named: Vec<_> = self
            .root
            .named_data()
            .into_iter()
            .flat_map(|v| v.iter())
            .map(|n| {
                let layout = n.tensor_layout().map(|l| {
                    let st = l.scalar_type();
                    serde_json::json!({
                        "scalar_type": st.variant_name().map_or_else(|| st.0.to_string(), str::to_string),
                        "sizes": l.sizes().map(|v| v.iter().collect::<Vec<_>>()),
                        "dim_order": l.dim_order().map(|v| v.iter().collect::<Vec<_>>()),
                    })
                });
                serde_json::json!({
                    "key": n.key(),
                    "segment_index": n.segment_index(),
                    "tensor_layout": layout,
                })
            })
            .collect();
        serde_json::json!({
            "format": "ptd",
            "header": {
                "length": h.length,
                "flatbuffer_offset": h.flatbuffer_offset,
                "flatbuffer_size": h.flatbuffer_size,
                "segment_base_offset": h.segment_base_offset,
                "segment_data_size": h.segment_data_size,
            },
            "flat_tensor": {
                "version": self.root.version(),
                "segments": segments,
                "named_data": named,
            },
        })
    }
}
