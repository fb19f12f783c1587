//! The summary behind `kiln inspect --json` for a `.ptd`: version, segments, and each named
//! tensor with its segment, size and layout.

use serde_json::{json, Value};

use super::reader::FlatTensor;
use crate::error::Result;

/// `kiln inspect --json` for a `.ptd` of `file_size` bytes.
pub fn summarize(ft: &FlatTensor<'_>, file_size: usize) -> Result<Value> {
    let mut entries = Vec::with_capacity(ft.len());
    for e in ft.entries() {
        let e = e?;
        entries.push(json!({
            "key": e.key,
            "segment": e.segment_index,
            "size": e.data.len(),
            "dtype": e.layout.as_ref().map(|l| l.scalar_type.schema_name()),
            "shape": e.layout.as_ref().map(|l| l.sizes.clone()),
            "dim_order": e.layout.as_ref().map(|l| l.dim_order.clone()),
        }));
    }
    let segments: Vec<_> = (0..ft.num_segments())
        .map(|i| ft.segment(i).map(|(offset, size)| json!({"offset": offset, "size": size})))
        .collect::<Result<_>>()?;
    Ok(json!({
        "format": "ptd",
        "version": ft.version(),
        "segment_base_offset": ft.header().segment_base_offset,
        "segments": segments,
        "named_data": entries,
        "file_size": file_size,
    }))
}
