//! The `[planes, H, W]` view that pooling and resampling kernels share: a 3-D or 4-D tensor in
//! any dim order seen as planes of `H x W`, the output's strides and sizes, and the 2-element
//! int lists of their window arguments.

use crate::error::KernelError;
use crate::kernel::KernelContext;
use crate::shape::int_pair;
use crate::tensor::{TensorMut, TensorRef};

/// `[planes, H, W]` view of a 3-D or 4-D tensor: plane count, (n, c) sizes and strides.
pub(crate) struct Planes {
    pub(crate) n: usize,
    pub(crate) c: usize,
    pub(crate) h: usize,
    pub(crate) w: usize,
    /// Strides of n, c, h, w (n stride 0 for 3-D tensors).
    pub(crate) st: [usize; 4],
}

impl Planes {
    /// Writes `f(base, y, x)` at every position `(y, x)` of every plane of `dst`, an output of
    /// `oh x ow` planes with strides `os` (from [`out_planes`]), in the order n, c, y, x;
    /// `base` is the offset of the input plane at the same (n, c).
    pub(crate) fn fill<T>(
        &self,
        dst: &mut [T],
        os: [usize; 4],
        [oh, ow]: [usize; 2],
        mut f: impl FnMut(usize, usize, usize) -> T,
    ) {
        for n in 0..self.n {
            for c in 0..self.c {
                let (base, obase) = (n * self.st[0] + c * self.st[1], n * os[0] + c * os[1]);
                for y in 0..oh {
                    for x in 0..ow {
                        dst[obase + y * os[2] + x * os[3]] = f(base, y, x);
                    }
                }
            }
        }
    }
}

/// The planes of `t` (argument `name`), or the error for another rank.
pub(crate) fn planes(
    ctx: &KernelContext,
    t: &TensorRef<'_>,
    name: &'static str,
) -> Result<Planes, KernelError> {
    let s = t.shape().strides();
    match t.sizes() {
        &[n, c, h, w] => Ok(Planes { n, c, h, w, st: [s[0], s[1], s[2], s[3]] }),
        &[c, h, w] => Ok(Planes { n: 1, c, h, w, st: [0, s[0], s[1], s[2]] }),
        other => Err(ctx.shape_err(name, "[N, C, H, W] or [C, H, W]", other)),
    }
}

/// The (n, c, h, w) strides of an output of rank 3 or 4 (n stride 0 for 3-D).
pub(crate) fn out_planes(out: &TensorMut<'_>) -> [usize; 4] {
    let s = out.shape().strides();
    if out.rank() == 4 {
        [s[0], s[1], s[2], s[3]]
    } else {
        [0, s[0], s[1], s[2]]
    }
}

/// `x`'s sizes with the last two replaced by `oh`, `ow`.
pub(crate) fn out_sizes(x: &TensorRef<'_>, oh: usize, ow: usize) -> Vec<usize> {
    let mut s = x.sizes().to_vec();
    let r = s.len();
    s[r - 2] = oh;
    s[r - 1] = ow;
    s
}

/// A 2-element int list parameter ([`int_pair`]: 1 element repeats; `default` when empty).
pub(crate) fn pair(
    ctx: &KernelContext,
    v: &[i64],
    name: &'static str,
    default: Option<[usize; 2]>,
    min: i64,
) -> Result<[usize; 2], KernelError> {
    int_pair(v, default, min).ok_or_else(|| {
        let why = match v.len() {
            1 | 2 => format!("{v:?} has a value below {min}"),
            _ => format!("expected 1 or 2 values, got {v:?}"),
        };
        ctx.invalid(name, why)
    })
}
