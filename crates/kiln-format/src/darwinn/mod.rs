//! DarwiNN (Edge TPU) packages: reading and verifying `Package` -> `MultiExecutable` ->
//! `Executable`, finding them inside `*_edgetpu.tflite` files ([`found`]), writing them, and
//! the runtime-side algorithms of libedgetpu as pure functions over bytes (with the bounds
//! checks the driver lacks): executable selection, instruction linking, output re-layout,
//! numerics and the DMA-hint walk. [`summary`] and [`verdict`] are what `kiln inspect` shows of
//! an Edge TPU model and what `kiln verify` checks in one.
//!
//! Every table of the schema is reachable through [`schema`] (generated from kiln's copy of
//! `executable.fbs`) via the verified roots [`Package::root`] and [`Executable::root`];
//! `MultiExecutable` is in [`multi`].

pub mod custom_op;
pub mod dma;
pub mod found;
pub mod link;
pub mod multi;
pub mod numerics;
pub mod package;
pub mod relayout;
pub mod select;
pub mod summary;
pub mod verdict;
pub mod writer;

pub use package::{Executable, Package};

/// Generated accessors and builders for every DarwiNN table (namespace `platforms.darwinn`).
pub use kiln_schema::darwinn::platforms::darwinn as schema;

/// Schema name of a `Description` value (`UNKNOWN_<n>` for values outside the enum).
pub fn description_name(d: schema::Description) -> String {
    match d.variant_name() {
        Some(n) => n.to_string(),
        None => format!("UNKNOWN_{}", d.0),
    }
}

/// Short kind of a `Description`: INPUT, OUTPUT, PARAMETER, SCRATCH (`UNKNOWN_<n>` otherwise).
pub fn description_kind(d: schema::Description) -> String {
    match d {
        schema::Description::BASE_ADDRESS_INPUT_ACTIVATION => "INPUT".into(),
        schema::Description::BASE_ADDRESS_OUTPUT_ACTIVATION => "OUTPUT".into(),
        schema::Description::BASE_ADDRESS_PARAMETER => "PARAMETER".into(),
        schema::Description::BASE_ADDRESS_SCRATCH => "SCRATCH".into(),
        other => format!("UNKNOWN_{}", other.0),
    }
}

/// Short form of a `Position`: LOWER, UPPER (`UNKNOWN_<n>` otherwise).
pub fn position_kind(p: schema::Position) -> String {
    match p {
        schema::Position::LOWER_32BIT => "LOWER".into(),
        schema::Position::UPPER_32BIT => "UPPER".into(),
        other => format!("UNKNOWN_{}", other.0),
    }
}

/// Schema name of a `DataType` (`UNKNOWN_<n>` for values outside the enum).
pub fn data_type_name(t: schema::DataType) -> String {
    match t.variant_name() {
        Some(n) => n.to_string(),
        None => format!("UNKNOWN_{}", t.0),
    }
}

/// Schema name of an `ExecutableType` (`UNKNOWN_<n>` for values outside the enum).
pub fn executable_type_name(t: schema::ExecutableType) -> String {
    match t.variant_name() {
        Some(n) => n.to_string(),
        None => format!("UNKNOWN_{}", t.0),
    }
}

/// Bytes per element of a `DataType` (libedgetpu `TensorDataTypeSize`), `None` for values
/// outside the enum.
pub fn data_type_size(t: schema::DataType) -> Option<usize> {
    use schema::DataType as D;
    match t {
        D::FIXED_POINT8 | D::SIGNED_FIXED_POINT8 => Some(1),
        D::FIXED_POINT16 | D::SIGNED_FIXED_POINT16 | D::BFLOAT | D::HALF => Some(2),
        D::SIGNED_FIXED_POINT32 | D::SINGLE => Some(4),
        _ => None,
    }
}
