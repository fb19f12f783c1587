//! Operator semantics, one module per op family. Each module lists its kernels in a
//! `pub(crate) fn kernels() -> Vec<KernelDef>`; [`crate::kernels`] concatenates them.

use crate::kernel::KernelDef;

pub(crate) mod args;
pub(crate) mod defs;
pub(crate) mod dense;
pub(crate) mod planes;
pub(crate) mod pointwise;

pub(crate) mod binary;
pub(crate) mod conv;
pub(crate) mod fast;
pub(crate) mod fast_pointwise;
pub(crate) mod fast_reduce;
pub(crate) mod index;
pub(crate) mod linalg;
pub(crate) mod norm;
pub mod pool;
pub(crate) mod prim;
pub(crate) mod quant;
pub(crate) mod reduce;
pub(crate) mod shape;
pub(crate) mod unary;

pub(crate) mod activation;
pub(crate) mod distance;
pub(crate) mod llm;
pub(crate) mod moments;
pub(crate) mod movement;
pub(crate) mod norm_stats;
pub(crate) mod pad;
pub(crate) mod quant_token;
pub(crate) mod quant_weight;
pub(crate) mod random;
pub(crate) mod sample;
pub(crate) mod scatter;
pub(crate) mod sort;
pub mod xnnpack;

/// Every kernel of every family.
pub(crate) fn all() -> Vec<KernelDef> {
    let mut v = Vec::new();
    v.extend(binary::kernels());
    v.extend(unary::kernels());
    v.extend(linalg::kernels());
    v.extend(llm::kernels());
    v.extend(conv::kernels());
    v.extend(reduce::kernels());
    v.extend(norm::kernels());
    v.extend(shape::kernels());
    v.extend(pool::kernels());
    v.extend(index::kernels());
    v.extend(prim::kernels());
    v.extend(quant::kernels());
    v.extend(pad::kernels());
    v.extend(sort::kernels());
    v.extend(scatter::kernels());
    v.extend(movement::kernels());
    v.extend(activation::kernels());
    v.extend(moments::kernels());
    v.extend(norm_stats::kernels());
    v.extend(sample::kernels());
    v.extend(distance::kernels());
    v.extend(quant_token::kernels());
    v.extend(quant_weight::kernels());
    v.extend(xnnpack::kernels());
    v.extend(random::kernels());
    v
}
