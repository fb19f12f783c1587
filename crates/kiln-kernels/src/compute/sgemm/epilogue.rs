//! The fused epilogue: bias, residual and activation applied to each finished tile.

use super::kernel::clamp1;
use crate::compute::special::erf;

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

    /// The activation of one value. The formulas are evaluated in f64 and rounded once, as
    /// kiln's unary operators do, so a fused activation equals the separate operator.
    pub fn apply(self, x: f32) -> f32 {
        let v = f64::from(x);
        let r = match self {
            Activation::None => return x,
            Activation::Clamp { min, max } => return clamp1(x, min, max),
            Activation::Hardswish => v * (v + 3.0).clamp(0.0, 6.0) / 6.0,
            Activation::Sigmoid => 1.0 / (1.0 + (-v).exp()),
            Activation::Silu => v / (1.0 + (-v).exp()),
            Activation::Gelu => 0.5 * v * (1.0 + erf(v * std::f64::consts::FRAC_1_SQRT_2)),
            Activation::GeluTanh => {
                let k = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * v * (1.0 + (k * (v + 0.044715 * v * v * v)).tanh())
            }
        };
        r as f32
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
        for x in &mut c[at + i * ldc..][..cols] {
            *x = act.apply(*x);
        }
    }
}
