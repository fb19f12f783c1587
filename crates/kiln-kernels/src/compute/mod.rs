//! Raw loops the ops call: strided walks, GEMM, convolution lowering; the prepared
//! (packed-at-load) f32 kernels of the compile stage: [`sgemm`], [`conv2d`], [`linear`], the
//! weights they are prepared from ([`f32_values`]),
//! fused elementwise groups ([`elementwise`]) and the vectorized activations they use
//! ([`activation`]), a squeeze-excite block's mean ([`global_pool`]) and scale
//! ([`channel_scale`]), softmax rows ([`softmax`]); the worker threads they split large layers over ([`threads`]); and what
//! the CPU can do ([`cpu`]), detected once, which every kernel picks its instruction set by,
//! and (on x86_64) `lanes`, the vector registers a loop is written over once for AVX-512 and
//! AVX2.

pub mod activation;
pub mod channel_scale;
pub mod conv;
pub mod conv2d;
pub mod cpu;
pub mod elementwise;
pub mod f32_values;
pub mod gemm;
pub mod global_pool;
pub(crate) mod interleave;
#[cfg(target_arch = "x86_64")]
pub(crate) mod lanes;
pub mod linear;
pub mod peak;
pub mod sgemm;
pub mod softmax;
pub mod special;
pub mod strided;
pub(crate) mod sum;
pub mod threads;
pub(crate) mod transpose;
#[cfg(target_arch = "x86_64")]
pub(crate) mod xnn_avxvnni;
pub mod xnn_lut;
pub mod xnn_qconv;
pub(crate) mod xnn_qd8;
pub(crate) mod xnn_qgemm;
#[cfg(target_arch = "x86_64")]
pub(crate) mod xnn_qgemv;
pub mod xnn_qmath;
pub(crate) mod xnn_qpanel;
pub mod xnn_quant;
