//! CPU kernels for kiln: ExecuTorch portable operators with PyTorch eager semantics.
//!
//! # Layers
//! - `ops` (private): operator semantics, one module per family (binary, unary, linalg,
//!   conv, reduce, norm, shape, index, prim, quant, movement, scatter, sort, llm, xnnpack,
//!   ...), or one folder per family grown large ([`pool`]: each operator's file, its prepared
//!   form and the window they share): argument decoding, broadcasting, PyTorch type promotion
//!   (`result_type` with the dimensioned / 0-dim / scalar priority classes), dtype dispatch,
//!   output resizing, NaN semantics; `ops/defs.rs` gives each shape of kernel its
//!   [`KernelDef`], `ops/planes.rs` the `[planes, H, W]` view pooling and resampling share.
//! - [`compute`]: the loops: strided walks; GEMM, in two engines (below); convolution
//!   (`compute/conv2d/`, depthwise included), fused elementwise maps, XNNPACK's quantized
//!   arithmetic; the thread pool (`compute/threads/`); the CPU's features, detected once
//!   (`compute/cpu.rs`), and the vector trait a loop for several instruction sets is written
//!   over once (`compute/lanes.rs`: AVX-512 and AVX2 registers; the sgemm microkernels and
//!   the depthwise channel blocks use it); a kernel table picked once per process
//!   (`compute/sgemm/select.rs`, the QS8 panel kernels).
//! - Prepared forms the compile stage lifts calls into keep their hooks with their kernels:
//!   the call's arguments read from their int lists, the layouts they run in, `prepare`
//!   (`ops/pool/prepared.rs`, `compute/conv2d/prepare.rs`).
//!
//! # Two ways into one GEMM engine
//! `compute/gemm.rs` ([`compute::gemm::Gemm`]) multiplies strided operands as they come:
//! any row and column strides (transposed, broadcast, channels-last views), f32, f64 and i64,
//! nothing packed ahead, for the general operators (`mm`, `bmm`, `addmm`, `linear`, the
//! general convolution): f32 packs both operands at each call for `compute/sgemm/`'s
//! microkernels (the packing buffers kept per thread), f64 and i64 run the reference loop.
//! `compute/sgemm/` itself multiplies f32 with one operand packed once at load into panels,
//! fused epilogues (bias, residual, activation), operands read through an im2col or an
//! indirection buffer, and threads splitting one product: what the compile stage's prepared
//! kernels need.
//!
//! # Types
//! - [`DType`]: ExecuTorch's `ScalarType` (numbering, element sizes, names), the `kiln-dtype`
//!   crate's enum that kiln-format shares; [`promote_types`], [`can_cast`].
//! - [`Shape`]: sizes + dim order inline (rank <= 8, no allocation), strides derived from the
//!   dim order (`[0,1,..]` contiguous, `[0,2,3,1]` channels-last).
//! - [`TensorRef`]: a read-only view (dtype, shape, `&[u8]` data, element-aligned).
//! - [`TensorMut`]: an output view (dtype, shape, [`Capacity`], `&mut [u8]` data). Kernels call
//!   [`TensorMut::resize`]: a `Static` tensor refuses any size change, a `Bound(n)` tensor
//!   accepts same-rank sizes with at most `n` elements (ExecuTorch's DYNAMIC_BOUND).
//! - [`Arg`]: a read-only argument mirroring ExecuTorch's `EValue` (None, Int, Double, Bool,
//!   String, Tensor, IntList, DoubleList, BoolList, TensorList, OptionalTensorList) plus
//!   `Output` for positions the kernel writes. [`Out`]: a written value (Tensor, TensorList,
//!   Scalar, View). [`Scalar`]: Int/Double/Bool.
//! - [`KernelFn`]: `fn(&mut KernelContext, &[Arg], &mut [Out]) -> Result<(), KernelError>`.
//! - [`KernelDef`]: `name` (`name.overload`, e.g. `aten::add.out`), `arity` (values in the
//!   instruction's argument list: every schema argument plus the trailing return value),
//!   `outs` (which positions are written, and as what), `run`. [`kernels`] is the static table
//!   of every kernel; the runtime builds its registry from it.
//! - [`KernelError`]: names the operator and what is wrong (argument name and position,
//!   expected vs actual dtype or shape).
//!
//! # How the runtime calls a kernel
//! At method load, for each `KernelCall`: look the operator up in [`kernels`] by
//! `name.overload`, check `args.len() == def.arity`, and record which argument positions are
//! outputs (`def.outs`). Per execution:
//! 1. Build `args: [Arg; arity]` by position: inputs resolve from the value table (IntLists
//!    with the *current* Int values, since sym ints change at run time); out positions and the
//!    trailing return value are `Arg::Output`.
//! 2. Build `outs` in `def.outs` order: [`Out::Tensor`] with a [`TensorMut`] over the planned
//!    region (its full capacity) and the value's current shape; [`Out::TensorList`] for list
//!    outputs; [`Out::Scalar`] for scalar results (sym ops); [`Out::View`] for `et_view`
//!    (metadata only).
//! 3. Call `(def.run)(&mut ctx, &args, &mut outs)` with one [`KernelContext`] per executing
//!    method (`ctx.op = def.name`; it keeps scratch buffers so im2col does not allocate in
//!    steady state).
//! 4. Write back: each output tensor's new shape ([`TensorMut::shape`]), scalar results into
//!    their Int/Double/Bool values, and for [`OutKind::View`] point the output value's storage at
//!    the named input's storage with the shape the kernel set.
//!
//! # Borrowing arenas without `unsafe`, and aliasing
//! Inputs borrow shared, outputs exclusively. Planned tensors of one call usually live in the
//! same arena: [`arena::split_regions`] walks the call's regions in address order with
//! `split_at_mut`, handing out written regions mutably and overlapping read regions as shared
//! sub-slices, without allocating (the caller supplies the slot array and the sorted order).
//! kiln-runtime builds the regions on every call (reads span the tensor's current bytes,
//! writes its planned capacity), sorts them by buffer and start, and splits each buffer
//! (compiled steps of static shapes have theirs built, sorted and checked once at load); a
//! zero-length region gets an empty borrow of its own kind wherever it lies. A written region
//! overlapping any other region of the call is in-place aliasing: [`arena::check_regions`]
//! reports it as [`arena::AliasError`] and the call fails with a memory-plan error (the
//! runtime does not copy aliased inputs aside). Schema in-place ops (`aten::copy_`) declare
//! `self` as their out (position 0), so they never alias.
//! Constants borrow from the mapped file; data must be element-aligned (the runtime copies a
//! misaligned constant once at load; [`TensorRef::new`] rejects misaligned data).
#![deny(unsafe_code)]
// Kernels index several parallel arrays (sizes, strides, offsets) with one loop variable.
#![allow(clippy::needless_range_loop)]

pub mod arena;
pub mod compute;
pub mod dtype;
pub mod element;
pub mod error;
pub mod kernel;
mod ops;
pub mod shape;
pub mod tensor;
#[cfg(test)]
mod testing;
pub mod value;

pub use dtype::{can_cast, promote_types, DType};
pub use error::{ErrorKind, KernelError};
pub use kernel::{regions_overlap, KernelContext, KernelDef, KernelFn, OutKind, OutSlot};
pub use ops::{pool, xnnpack};
pub use shape::{Shape, ShapeError, MAX_RANK};
pub use tensor::{Capacity, TensorError, TensorMut, TensorRef};
pub use value::{Arg, Out, Scalar, ViewOut};

use std::sync::OnceLock;

/// Every kernel kiln implements (`name.overload`, arity, out slots, function), for the runtime
/// to build its registry from.
pub fn kernels() -> &'static [KernelDef] {
    static TABLE: OnceLock<Vec<KernelDef>> = OnceLock::new();
    TABLE.get_or_init(ops::all)
}

/// The kernel registered under `name` (`name.overload`), by linear search of [`kernels`].
pub fn find_kernel(name: &str) -> Option<&'static KernelDef> {
    kernels().iter().find(|k| k.name == name)
}

#[cfg(test)]
mod tests {
    #[test]
    fn kernel_names_are_unique_and_slots_in_range() {
        let ks = super::kernels();
        let mut names: Vec<&str> = ks.iter().map(|k| k.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(n, names.len(), "duplicate kernel names");
        for k in ks {
            for o in k.outs {
                assert!((o.position as usize) < k.arity as usize, "{}", k.name);
            }
        }
    }
}
