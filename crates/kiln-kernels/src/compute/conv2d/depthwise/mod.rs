//! Depthwise convolution (`groups == Cin == Cout`), three ways: the direct per-plane kernel
//! over zero-padded, stride-split rows (`rows.rs`), blocks of 16 channels laid out
//! channels-last (`channels.rs`), both used by [`super::PackedConv2d`], and the general
//! operator's strided direct loop (`direct.rs`, [`depthwise`]).

pub(crate) mod channels;
mod direct;
pub(crate) mod rows;

pub use direct::depthwise;
