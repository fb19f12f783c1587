//! Writing `.ptd` files with ExecuTorch's layout (`extension/flat_tensor/serialize/serialize.py`):
//! the `FH01` header spliced in after byte 8, segments 128-byte aligned after the flatbuffer,
//! zero padding between them and none after the last.

use flatbuffers::FlatBufferBuilder;
use kiln_schema::flat_tensor::{executorch_flatbuffer as st, flat_tensor_flatbuffer as fb};

use super::header::{Header, LENGTH, PADDED_LENGTH};
use super::reader::{FlatTensor, TensorLayout};
use crate::bytes::align_up;
use crate::error::{Error, Result};

/// Segment alignment ExecuTorch uses (`FlatTensorConfig.segment_alignment`).
pub const SEGMENT_ALIGNMENT: u64 = 128;

/// An owned `.ptd`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlatTensorModel {
    /// `FlatTensor.version` (ExecuTorch writes 0).
    pub version: u32,
    /// Segment contents, in file order.
    pub segments: Vec<Vec<u8>>,
    /// Named entries; several may share a segment.
    pub named_data: Vec<NamedDataModel>,
}

/// One named entry of a [`FlatTensorModel`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedDataModel {
    /// The key.
    pub key: String,
    /// Index into [`FlatTensorModel::segments`].
    pub segment_index: u32,
    /// Tensor layout, when the data is a tensor.
    pub layout: Option<TensorLayout>,
}

impl FlatTensorModel {
    /// Copies a verified `.ptd` into an owned model.
    pub fn from_flat_tensor(ft: &FlatTensor<'_>) -> Result<Self> {
        let segments = (0..ft.num_segments())
            .map(|i| ft.segment_bytes(i).map(<[u8]>::to_vec))
            .collect::<Result<_>>()?;
        let named_data = ft
            .entries()
            .map(|e| {
                e.map(|e| NamedDataModel {
                    key: e.key.to_string(),
                    segment_index: e.segment_index,
                    layout: e.layout,
                })
            })
            .collect::<Result<_>>()?;
        Ok(FlatTensorModel { version: ft.version(), segments, named_data })
    }

    /// Adds a tensor as a new segment named `key`.
    pub fn push_tensor(&mut self, key: &str, layout: TensorLayout, data: Vec<u8>) -> Result<()> {
        if layout.nbytes() != Some(data.len() as u64) {
            return Err(Error::invalid(
                "ptd",
                format!("named_data[{key:?}]"),
                None,
                format!("layout needs {:?} bytes, data has {}", layout.nbytes(), data.len()),
            ));
        }
        let segment_index = u32::try_from(self.segments.len())
            .map_err(|_| Error::invalid("ptd", "segments", None, "too many segments"))?;
        self.segments.push(data);
        self.named_data.push(NamedDataModel {
            key: key.into(),
            segment_index,
            layout: Some(layout),
        });
        Ok(())
    }

    /// Serializes the model.
    pub fn write(&self) -> Result<Vec<u8>> {
        let too_big = || Error::invalid("ptd", "segments", None, "total size overflows");
        let mut offsets = Vec::with_capacity(self.segments.len());
        let mut end = 0u64;
        for s in &self.segments {
            let offset = align_up(end, SEGMENT_ALIGNMENT).ok_or_else(too_big)?;
            end = offset.checked_add(s.len() as u64).ok_or_else(too_big)?;
            offsets.push(offset);
        }
        for (i, nd) in self.named_data.iter().enumerate() {
            if nd.segment_index as usize >= self.segments.len() {
                return Err(Error::invalid(
                    "ptd",
                    format!("named_data[{i}].segment_index"),
                    None,
                    format!("{} is outside 0..{}", nd.segment_index, self.segments.len()),
                ));
            }
        }

        let mut b = FlatBufferBuilder::new();
        let segs: Vec<_> = self
            .segments
            .iter()
            .zip(&offsets)
            .map(|(s, o)| {
                fb::DataSegment::create(
                    &mut b,
                    &fb::DataSegmentArgs {
                        offset: Some(&fb::UnalignedULong::new(*o)),
                        size: Some(&fb::UnalignedULong::new(s.len() as u64)),
                    },
                )
            })
            .collect();
        let segs = b.create_vector(&segs);
        let named: Vec<_> = self
            .named_data
            .iter()
            .map(|nd| {
                let key = b.create_string(&nd.key);
                let layout = nd.layout.as_ref().map(|l| {
                    let sizes = b.create_vector(&l.sizes);
                    let dim_order = b.create_vector(&l.dim_order);
                    fb::TensorLayout::create(
                        &mut b,
                        &fb::TensorLayoutArgs {
                            scalar_type: st::ScalarType(l.scalar_type.code()),
                            sizes: Some(sizes),
                            dim_order: Some(dim_order),
                        },
                    )
                });
                fb::NamedData::create(
                    &mut b,
                    &fb::NamedDataArgs {
                        key: Some(key),
                        segment_index: nd.segment_index,
                        tensor_layout: layout,
                    },
                )
            })
            .collect();
        let named = b.create_vector(&named);
        let root = fb::FlatTensor::create(
            &mut b,
            &fb::FlatTensorArgs {
                version: self.version,
                segments: Some(segs),
                named_data: Some(named),
            },
        );
        fb::finish_flat_tensor_buffer(&mut b, root);
        let flat = b.finished_data();

        let fb_size = flat.len() as u64;
        let base = align_up(fb_size + PADDED_LENGTH, SEGMENT_ALIGNMENT).ok_or_else(too_big)?;
        let header = Header {
            length: LENGTH,
            flatbuffer_offset: PADDED_LENGTH,
            flatbuffer_size: fb_size,
            segment_base_offset: base,
            segment_data_size: end,
        };
        let total =
            usize::try_from(base.checked_add(end).ok_or_else(too_big)?).map_err(|_| too_big())?;
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&splice_header(flat, &header.encode())?);
        out.resize(base as usize, 0);
        for (s, o) in self.segments.iter().zip(&offsets) {
            out.resize((base + o) as usize, 0);
            out.extend_from_slice(s);
        }
        Ok(out)
    }
}

/// Inserts `header` into a finished flatbuffer after byte 8 and moves the root offset past it,
/// as ExecuTorch's `_insert_flatbuffer_header` does (internal offsets are relative, so they stay
/// valid; the header length is a multiple of 16, so alignment is kept).
pub(crate) fn splice_header(flat: &[u8], header: &[u8]) -> Result<Vec<u8>> {
    let bad = || Error::invalid("flatbuffer", "root offset", Some(0), "finished buffer too short");
    let root = flat.get(0..4).ok_or_else(bad)?;
    let root = u32::from_le_bytes([root[0], root[1], root[2], root[3]]);
    let root =
        u32::try_from(header.len()).ok().and_then(|h| root.checked_add(h)).ok_or_else(bad)?;
    let mut out = Vec::with_capacity(flat.len() + header.len());
    out.extend_from_slice(&root.to_le_bytes());
    out.extend_from_slice(flat.get(4..8).ok_or_else(bad)?);
    out.extend_from_slice(header);
    out.extend_from_slice(flat.get(8..).ok_or_else(bad)?);
    Ok(out)
}
