//! NPU operators for AMD Ryzen AI-style runtimes, and the fusion of a chain of them into one
//! transaction binary, after AMD's DynamicDispatch ("DD").
//!
//! An operator ([`NpuOp`]) states what buffers it needs ([`OpArgMap`]: which kernel argument,
//! which ONNX argument, where in the argument and how many bytes), hands out a transaction
//! binary for given shapes, its super-kernel parameters, and formats its constant inputs.
//! [`fuse`] takes a chain of operator instances ([`Node`]) and builds what one kernel run
//! needs: one transaction whose DDR_PATCH ops name the five fused buffers (input 0, output 1,
//! scratch 2, const 3, super-kernel params 4), the filled const and super-kernel buffers, and the
//! fused kernel's own arg map ([`Fused`]). The reference [`Device`] runs such a transaction on
//! the CPU: register writes and polls against a register map, DDR patches into the five
//! buffers' addresses, and kiln's KILN_LAUNCH custom op as kiln CPU kernels.
//!
//! The concrete operators are in [`ops`]: float32 elementwise arithmetic and activations,
//! matrix products, convolution, normalization, pooling, data movement and reductions, each
//! launching one of kiln's portable CPU kernels, so any chain of them fuses and runs on the
//! reference device.
//!
//! [`KilnNpuBackend`] runs the delegates `kiln lower --to npu` makes; [`load_options`] is the
//! one place it is registered: the load options `kiln` and the Python package start from.
//!
//! This is a crate of its own rather than a module of `kiln-runtime`: it needs only
//! `kiln-format`'s transaction reader and writer and `kiln-kernels`' portable CPU kernels,
//! none of the program loader or planner, and what builds on it (concrete operators,
//! lowering) is NPU-specific too.

mod arg_map;
mod arg_type;
mod backend;
mod buffers;
mod device;
mod error;
mod fuse;
pub mod lower;
mod op;
pub mod ops;

pub use arg_map::{arg_for_patch, OpArgMap, ARG_ALIGN};
pub use arg_type::OpArgType;
pub use backend::{load_options, KilnNpuBackend};
pub use buffers::{BUFFERS, DDR_BASE, WINDOW};
pub use device::{Device, RunSummary};
pub use error::{Error, Result};
pub use fuse::{fuse, fuse_with_outputs, Fused, Node, PackedTensor};
pub use op::{ConstBufferIo, ConstTensor, NpuOp, TensorDesc};
