//! From a convolution call to its packed form, as the compile stage prepares it: the call's
//! arguments beside its tensors ([`Conv2dArgs`]), the geometry from the tensors' sizes, batch
//! norm statistics folded into the weights and bias ([`BatchNorm`]), and the output's sizes
//! checked against what the packed convolution writes ([`PackedConv2d::prepare`]).

use super::geometry::{Conv2dGeometry, Layouts};
use super::packed::PackedConv2d;
use crate::compute::f32_values::F32Values;
use crate::compute::sgemm::{Activation, GemmError};
use crate::shape::int_pair;

/// What an `aten::convolution` call says beside its tensors (not transposed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dArgs {
    /// Stride (rows, columns).
    pub stride: [usize; 2],
    /// Zero padding on both sides (rows, columns).
    pub padding: [usize; 2],
    /// Dilation (rows, columns).
    pub dilation: [usize; 2],
    /// Groups.
    pub groups: usize,
}

impl Conv2dArgs {
    /// The arguments from the call's int lists ([`int_pair`]: one value stands for both axes)
    /// and group count; `None` for a list of another length, a stride or dilation below 1, a
    /// negative padding or fewer than one group.
    pub fn from_lists(
        stride: &[i64],
        padding: &[i64],
        dilation: &[i64],
        groups: i64,
    ) -> Option<Self> {
        Some(Conv2dArgs {
            stride: int_pair(stride, None, 1)?,
            padding: int_pair(padding, None, 0)?,
            dilation: int_pair(dilation, None, 1)?,
            groups: usize::try_from(groups).ok().filter(|&g| g > 0)?,
        })
    }

    /// The geometry of this convolution over an `input` of sizes `[N, Cin, H, W]` with a
    /// `weight` of sizes `[Cout, Cin / groups, kh, kw]`.
    pub fn geometry(&self, input: &[usize], weight: &[usize]) -> Result<Conv2dGeometry, GemmError> {
        let &[c_out, _, kh, kw] = weight else {
            return Err(GemmError::Invalid("conv2d: the weight is not 4-D"));
        };
        let &[_, c_in, h, w] = input else {
            return Err(GemmError::Invalid("conv2d: the input is not 4-D"));
        };
        Ok(Conv2dGeometry {
            stride: self.stride,
            padding: self.padding,
            dilation: self.dilation,
            groups: self.groups,
            ..Conv2dGeometry::new(c_in, [h, w], c_out, [kh, kw])
        })
    }
}

/// Inference batch norm over a convolution's output channels, to fold into its weights:
/// `y = (x - mean) * gamma / sqrt(var + eps) + beta`, `gamma` 1 and `beta` 0 when absent.
#[derive(Clone, Debug)]
pub struct BatchNorm {
    /// Per-channel scale.
    pub gamma: Option<Vec<f32>>,
    /// Per-channel shift.
    pub beta: Option<Vec<f32>>,
    /// Running mean.
    pub mean: Vec<f32>,
    /// Running variance.
    pub var: Vec<f32>,
    /// Added to the variance.
    pub eps: f64,
}

impl BatchNorm {
    /// Folds the statistics into `weight` (`c_out` rows) and returns the folded bias, in
    /// `f64` rounding once: `w' = w * s`, `b' = (b - mean) * s + beta` with
    /// `s = gamma / sqrt(var + eps)`.
    fn fold(
        &self,
        c_out: usize,
        weight: &mut [f32],
        bias: Option<&[f32]>,
    ) -> Result<Vec<f32>, GemmError> {
        let (gamma, beta) = (self.gamma.as_deref(), self.beta.as_deref());
        let per_channel = [gamma, beta, Some(&self.mean), Some(&self.var), bias];
        if per_channel.iter().flatten().any(|v| v.len() != c_out) {
            return Err(GemmError::PerChannel { what: "batch norm", channels: c_out });
        }
        let per = weight.len().checked_div(c_out).unwrap_or(0);
        let mut folded = Vec::with_capacity(c_out);
        for o in 0..c_out {
            let s =
                gamma.map_or(1.0, |v| f64::from(v[o])) / (f64::from(self.var[o]) + self.eps).sqrt();
            for w in &mut weight[o * per..(o + 1) * per] {
                *w = (f64::from(*w) * s) as f32;
            }
            let b = bias.map_or(0.0, |b| f64::from(b[o]));
            let shift = beta.map_or(0.0, |v| f64::from(v[o]));
            folded.push(((b - f64::from(self.mean[o])) * s + shift) as f32);
        }
        Ok(folded)
    }
}

impl PackedConv2d {
    /// The convolution of geometry `g` prepared as a compiled step runs it: `bn` (if any)
    /// folded into `weight` (a borrowed weight copied only then) and `bias`, packed for
    /// `layouts` with the fused activation, and checked to write an `output` of sizes
    /// `[N, Cout, OH, OW]`.
    pub fn prepare(
        g: Conv2dGeometry,
        mut weight: F32Values<'_>,
        mut bias: Option<Vec<f32>>,
        bn: Option<BatchNorm>,
        act: Activation,
        layouts: Layouts,
        output: &[usize],
    ) -> Result<Self, GemmError> {
        if let Some(bn) = bn {
            bias = Some(bn.fold(g.out_channels, weight.to_mut()?, bias.as_deref())?);
        }
        let conv = PackedConv2d::with_layouts(g, &weight, bias.as_deref(), act, layouts)?;
        let (oh, ow) = conv.out_hw();
        if output.get(1..) != Some(&[g.out_channels, oh, ow][..]) {
            let expected = format!("[N, {}, {oh}, {ow}]", g.out_channels);
            return Err(GemmError::Sizes { what: "output", actual: output.to_vec(), expected });
        }
        Ok(conv)
    }
}
