//! ExecuTorch's XNNPACK delegate payload: the processed bytes of a `BackendDelegate` whose id is
//! `XnnpackBackend` (facts: `shared/reference/xnnpack-delegate.md`).
//!
//! ```text
//! [0..4 unused][XH00][u16 header length][u32 flatbuffer offset][u32 flatbuffer size]
//! [u32 constant offset][u64 constant size] ... flatbuffer (XN01 / legacy XN00) ... constants
//! ```
//!
//! [`Payload::parse`] checks the header, runs the flatbuffers verifier with caps derived from
//! the payload size and decodes the graph into plain owned structs ([`Graph`]): every value id
//! a node names, every constant index and every constant range is checked here, so code that
//! lowers the graph indexes [`Graph::values`] freely. A payload without the XH00 magic is a
//! bare flatbuffer with no constant region, as ExecuTorch's runtime reads it.

mod decode;
mod dump;
mod model;
mod summary;

pub use model::{
    BinaryKind, Constant, Conv, ConvKind, DataType, Graph, Header, Node, Op, Payload, Pool, Quant,
    Scales, UnaryKind, Value, FLAG_EXTERNAL_INPUT, FLAG_EXTERNAL_OUTPUT, INVALID_ID, MAX_RANK,
};

pub use dump::dump;
pub use summary::{summarize, Summary};

use crate::error::Result;

impl<'a> Payload<'a> {
    /// Parses and verifies a payload.
    pub fn parse(bytes: &'a [u8]) -> Result<Payload<'a>> {
        decode::payload(bytes)
    }

    /// The bytes of constant `index` of the payload itself (region or inline), or `None` for a
    /// named constant (which the program's named data holds) or an absent one.
    pub fn constant_bytes(&self, index: u32) -> Option<&'a [u8]> {
        match self.graph.constants.get(index as usize)?.as_ref()? {
            Constant::Region(r) | Constant::Inline(r) => self.bytes.get(r.clone()),
            Constant::Named { .. } => None,
        }
    }
}
