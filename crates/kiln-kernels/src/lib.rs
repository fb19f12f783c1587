//! CPU kernels for kiln.
//!
//! TODO docs
#![deny(unsafe_code)]

pub mod arena;
pub mod compute;
pub mod dtype;
pub mod element;
pub mod error;
pub mod kernel;
mod ops;
pub mod shape;
pub mod tensor;
pub mod value;

pub use dtype::{can_cast, promote_types, DType};
pub use error::{ErrorKind, KernelError};
pub use kernel::{regions_overlap, KernelContext, KernelDef, KernelFn, OutKind, OutSlot};
pub use shape::{Shape, ShapeError, MAX_RANK};
pub use tensor::{Capacity, TensorError, TensorMut, TensorRef};
pub use value::{Arg, Out, Scalar, ViewOut};

use std::sync::OnceLock;

/// Every kernel kiln implements, as `(name.overload, arity, outs, fn)` definitions, for the
/// runtime to build its registry from.
pub fn kernels() -> &'static [KernelDef] {
    static TABLE: OnceLock<Vec<KernelDef>> = OnceLock::new();
    TABLE.get_or_init(ops::all)
}

/// The kernel registered under `name` (`name.overload`), by linear search of [`kernels`].
pub fn find_kernel(name: &str) -> Option<&'static KernelDef> {
    kernels().iter().find(|k| k.name == name)
}
