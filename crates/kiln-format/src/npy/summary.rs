//! The summary behind `kiln inspect --json` for a `.npy`: its header, with the element count
//! and where the data is.

use serde_json::{json, Value};

use super::Npy;

/// The header as JSON: dtype, shape, order, elements, where the data is.
pub fn summarize(npy: &Npy<'_>) -> Value {
    json!({
        "dtype": npy.descr,
        "shape": npy.shape,
        "fortran_order": npy.fortran_order,
        "elements": npy.shape.iter().product::<u64>(),
        "data_offset": npy.data_offset,
        "data_bytes": npy.data.len(),
    })
}
