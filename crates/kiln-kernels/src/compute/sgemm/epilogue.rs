//! The fused epilogue: bias, residual and activation applied to each finished tile.

use super::kernel::clamp1;
use crate::compute::activation;

/// The activation applied last, after bias and residual.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    /// Identity.
    None,
    /// `min(max(x, min), max)`, NaN propagating: `relu` is `Clamp { min: 0, max: +inf }`,
    /// `relu6`/`hardtanh` are finite bounds. Applied in registers by the microkernel.
    Clamp {
        /// Lower bound.
        min: f32,
        /// Upper bound.
        max: f32,
    },
    /// `x * min(max(x + 3, 0), 6) / 6`.
    Hardswish,
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    /// `x / (1 + exp(-x))`.
    Silu,
    /// `0.5 * x * (1 + erf(x / sqrt(2)))` (PyTorch `gelu`, `approximate="none"`).
    Gelu,
    /// `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))` (`approximate="tanh"`).
    GeluTanh,
}

impl Activation {
    /// `relu`.
    pub const RELU: Activation = Activation::Clamp { min: 0.0, max: f32::INFINITY };

    /// The bounds when the microkernel applies this activation in registers.
    pub(crate) fn clamp(self) -> Option<(f32, f32)> {
        match self {
            Activation::Clamp { min, max } => Some((min, max)),
            _ => None,
        }
    }

    /// Whether the activation runs after the microkernel, over the finished tile.
    pub(crate) fn is_pointwise_pass(self) -> bool {
        !matches!(self, Activation::None | Activation::Clamp { .. })
    }

    /// The activation of one value, in `f32` with the functions of
    /// [`crate::compute::activation`]; kiln's float32 `sigmoid` and `gelu` operators use the
    /// same ones, so fusing them changes no bits.
    #[inline(always)]
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Activation::None => x,
            Activation::Clamp { min, max } => clamp1(x, min, max),
            Activation::Hardswish => activation::hardswish(x),
            Activation::Sigmoid => activation::sigmoid(x),
            Activation::Silu => activation::silu(x),
            Activation::Gelu => activation::gelu(x),
            Activation::GeluTanh => activation::gelu_tanh(x),
        }
    }

    /// [`apply`](Self::apply) to every element of `xs`, in the vector loops of
    /// [`activation`] (the same bits as one element at a time).
    pub fn apply_in_place(self, xs: &mut [f32]) {
        match self {
            Activation::None => {}
            Activation::Clamp { min, max } => xs.iter_mut().for_each(|x| *x = clamp1(*x, min, max)),
            Activation::Hardswish => activation::hardswish_in_place(xs),
            Activation::Sigmoid => activation::sigmoid_in_place(xs),
            Activation::Silu => activation::silu_in_place(xs),
            Activation::Gelu => activation::gelu_in_place(xs),
            Activation::GeluTanh => activation::gelu_tanh_in_place(xs),
        }
    }
}

/// Bias added to every element of a row or of a column of C.
#[derive(Clone, Copy, Debug)]
pub enum Bias<'a> {
    /// No bias.
    None,
    /// `c[i][j] += bias[i]` (at least `m` values): convolution output channels.
    PerRow(&'a [f32]),
    /// `c[i][j] += bias[j]` (at least `n` values): linear output features.
    PerCol(&'a [f32]),
}

/// What happens to the product before it is stored:
/// `c = act(a * b + bias + residual)`.
#[derive(Clone, Copy, Debug)]
pub struct Epilogue<'a> {
    /// Bias.
    pub bias: Bias<'a>,
    /// Added after the bias; same layout (and row stride) as C.
    pub residual: Option<&'a [f32]>,
    /// Applied last.
    pub act: Activation,
}

impl Epilogue<'_> {
    /// The plain product: no bias, residual or activation.
    pub const NONE: Epilogue<'static> =
        Epilogue { bias: Bias::None, residual: None, act: Activation::None };
}

/// Applies a pointwise activation to a `rows x cols` tile at `c[at..]` with row stride `ldc`.
pub(crate) fn activate_tile(
    c: &mut [f32],
    at: usize,
    ldc: usize,
    rows: usize,
    cols: usize,
    act: Activation,
) {
    for i in 0..rows {
        act.apply_in_place(&mut c[at + i * ldc..][..cols]);
    }
}
