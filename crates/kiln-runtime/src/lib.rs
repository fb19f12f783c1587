//! kiln's runtime: program loading, memory planning, execution, delegates and profiling.

pub mod mapped;

pub use mapped::MappedFile;
