//! Samsung ONE Circle models (`CIR0`): a verified zero-copy reader ([`CircleModel`]), a writer
//! that preserves everything it does not change ([`CircleEditor`]), and the luci-profile
//! origin tables stored in a model's metadata ([`origins`]); [`summary`] is what `kiln inspect`
//! and `kiln dump` show of a model.
//!
//! The schema is Circle 0.10 (`crates/kiln-schema/schema/circle.fbs`), generated with the object
//! API. Buffers come in two forms: inline `data`, or, for models over 2 GiB, `offset`/`size`
//! relative to the start of the file (used when `offset > 1`); operators' large custom options
//! likewise. [`CircleModel::buffer_data`] serves both.

mod layout;
/// The luci-profile origin tables of a model.
pub mod origins;
mod read;
pub mod summary;
mod write;

pub use read::{
    builtin_operator, operator_code_name, CircleModel, MetadataEntry, FORMAT, IDENTIFIER,
};

pub use kiln_schema::circle::circle as schema;
pub use write::CircleEditor;
