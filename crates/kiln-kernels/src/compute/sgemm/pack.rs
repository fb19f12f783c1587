//! Packing into panels: the layouts the microkernels read.
//!
//! A panel of width `w` holds, for each k of its depth, `w` consecutive values (zero beyond
//! the matrix edge). B is packed in panels of `nr` columns; A in panels of `mr` rows, which
//! is the same layout as packing `A^T` in column panels.

use super::error::GemmError;
use crate::compute::conv::Geometry;
use crate::compute::transpose::transpose;

/// Floats of slack that let a buffer start on a 64-byte boundary.
const ALIGN_SLACK: usize = 16;

/// Offset (in elements) of the first 64-byte aligned element of `v` (at most 15).
pub(crate) fn aligned_offset(v: &[f32]) -> usize {
    v.as_ptr().align_offset(64).min(ALIGN_SLACK - 1)
}

/// A 64-byte aligned window of `len` elements of `v`, growing `v` only when it is too short.
pub(crate) fn aligned_window(v: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if v.len() < len + ALIGN_SLACK {
        v.resize(len + ALIGN_SLACK, 0.0);
    }
    let off = aligned_offset(v);
    &mut v[off..off + len]
}

/// A source of B panels: a `k x n` matrix that may exist only implicitly (im2col).
pub trait PackB {
    /// Rows (the depth of the product).
    fn k(&self) -> usize;
    /// Columns.
    fn n(&self) -> usize;
    /// Packs rows `k0..k0 + kc` and columns `n0..n0 + nc` (inside the matrix) into
    /// `nc.div_ceil(nr)` panels of `nr * kc` values each, in order: panel `q`, row `kk` holds
    /// columns `n0 + q * nr ..` at `dst[q * nr * kc + kk * nr ..][..nr]`, zero past column
    /// `n0 + nc`. `dst` holds at least `nc.div_ceil(nr) * nr * kc` values.
    fn pack(&self, k0: usize, kc: usize, n0: usize, nc: usize, nr: usize, dst: &mut [f32]);

    /// When every column is contiguous (element `(kk, j)` at `data[j * stride + kk]`), the
    /// data and `stride`: the transposed product can then read this matrix's columns as the
    /// rows of its left operand where they lie, with no packing.
    fn columns_in_place(&self) -> Option<(&[f32], usize)> {
        None
    }
}

/// Columns `start..start + n` of another right operand, as an operand of its own (threads
/// computing disjoint column ranges of one product each pack their own columns).
#[derive(Clone, Copy)]
pub struct ColumnsOf<'a> {
    inner: &'a dyn PackB,
    start: usize,
    n: usize,
}

impl<'a> ColumnsOf<'a> {
    /// Columns `range` of `inner`; an error when the range is not inside it.
    pub fn new(inner: &'a dyn PackB, range: std::ops::Range<usize>) -> Result<Self, GemmError> {
        if range.start > range.end || range.end > inner.n() {
            return Err(GemmError::Invalid("gemm: column range outside B"));
        }
        Ok(ColumnsOf { inner, start: range.start, n: range.len() })
    }
}

impl PackB for ColumnsOf<'_> {
    fn k(&self) -> usize {
        self.inner.k()
    }

    fn n(&self) -> usize {
        self.n
    }

    fn pack(&self, k0: usize, kc: usize, n0: usize, nc: usize, nr: usize, dst: &mut [f32]) {
        self.inner.pack(k0, kc, self.start + n0, nc, nr, dst);
    }

    fn columns_in_place(&self) -> Option<(&[f32], usize)> {
        let (data, stride) = self.inner.columns_in_place()?;
        Some((data.get(self.start.checked_mul(stride)?..)?, stride))
    }
}

/// A dense strided matrix view whose extent was checked against its slice.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    rs: usize,
    cs: usize,
}

impl<'a> MatRef<'a> {
    /// A `rows x cols` view with element `(i, j)` at `data[i * rs + j * cs]`; an error when
    /// the last element lies outside `data` or the index overflows.
    pub fn new(
        data: &'a [f32],
        rows: usize,
        cols: usize,
        rs: usize,
        cs: usize,
    ) -> Result<Self, GemmError> {
        let need = if rows == 0 || cols == 0 {
            Some(0)
        } else {
            (rows - 1)
                .checked_mul(rs)
                .and_then(|r| r.checked_add((cols - 1).checked_mul(cs)?))
                .and_then(|v| v.checked_add(1))
        };
        let need = need.ok_or(GemmError::Overflow("matrix extent"))?;
        if need > data.len() {
            return Err(GemmError::Short { what: "matrix", need, len: data.len() });
        }
        Ok(MatRef { data, rows, cols, rs, cs })
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The transposed view (no copy).
    pub fn t(self) -> Self {
        MatRef { rows: self.cols, cols: self.rows, rs: self.cs, cs: self.rs, ..self }
    }
}

impl PackB for MatRef<'_> {
    fn k(&self) -> usize {
        self.rows
    }

    fn n(&self) -> usize {
        self.cols
    }

    fn pack(&self, k0: usize, kc: usize, n0: usize, nc: usize, nr: usize, dst: &mut [f32]) {
        for (q, panel) in dst.chunks_exact_mut(nr * kc).take(nc.div_ceil(nr)).enumerate() {
            let j0 = n0 + q * nr;
            let w = nr.min(n0 + nc - j0);
            if self.rs == 1 && self.cs != 1 {
                // Columns lie contiguous (a channels-last image's pixels): transposed in
                // blocks (reading across columns touched one cache line a value).
                let src = &self.data[j0 * self.cs + k0..];
                transpose(src, self.cs, w, kc, panel, nr);
                if w < nr {
                    panel.chunks_exact_mut(nr).for_each(|row| row[w..].fill(0.0));
                }
                continue;
            }
            if self.cs == 1 && w == nr {
                let src = &self.data[k0 * self.rs + j0..];
                let copied = match w {
                    32 => copy_rows::<32>(panel, src, self.rs),
                    16 => copy_rows::<16>(panel, src, self.rs),
                    14 => copy_rows::<14>(panel, src, self.rs),
                    7 => copy_rows::<7>(panel, src, self.rs),
                    6 => copy_rows::<6>(panel, src, self.rs),
                    4 => copy_rows::<4>(panel, src, self.rs),
                    _ => false,
                };
                if copied {
                    continue;
                }
            }
            for (kk, row) in panel.chunks_exact_mut(nr).enumerate() {
                let base = (k0 + kk) * self.rs + j0 * self.cs;
                if self.cs == 1 {
                    row[..w].copy_from_slice(&self.data[base..base + w]);
                } else {
                    for (j, d) in row[..w].iter_mut().enumerate() {
                        *d = self.data[base + j * self.cs];
                    }
                }
                row[w..].fill(0.0);
            }
        }
    }

    fn columns_in_place(&self) -> Option<(&[f32], usize)> {
        (self.rs == 1).then_some((self.data, self.cs))
    }
}

/// Each row of `panel` (rows of `W` values) copied from `W` contiguous values of `src`, the
/// rows `rs` apart: a panel of a matrix whose rows are contiguous, for the panel widths of
/// the kernels. Its own function per width, so that the copy has a fixed size the compiler
/// inlines (a `memcpy` call for a row of 14 values, AVX-512's left operand read from an NCHW
/// image, cost as much as the copy: 11% of a pointwise convolution). `false` (nothing
/// written) when `src` is too short.
fn copy_rows<const W: usize>(panel: &mut [f32], src: &[f32], rs: usize) -> bool {
    let rows = panel.len() / W;
    if rows == 0 || src.len() < (rows - 1) * rs + W {
        return false;
    }
    for (kk, row) in panel.chunks_exact_mut(W).enumerate() {
        let d: &mut [f32; W] = row.try_into().expect("a row of W values");
        let s: &[f32; W] = src[kk * rs..][..W].try_into().expect("W values");
        *d = *s;
    }
    true
}

/// The implicit im2col matrix of one image (and group) of an NCHW convolution, packed straight
/// from the input: row `(c * kh + ky) * kw + kx`, column `oy * ow + ox` holds the input at
/// channel `c`, row `oy * stride[0] + ky * dilation[0] - padding[0]`, column
/// `ox * stride[1] + kx * dilation[1] - padding[1]`, zero outside the image. The rows match
/// PyTorch's `[Cout, Cin, kh, kw]` weight layout flattened to `[Cout, Cin * kh * kw]`.
#[derive(Clone, Copy, Debug)]
pub struct Im2col<'a> {
    input: &'a [f32],
    g: Geometry,
}

/// Output size along one axis, `None` when the kernel does not fit or on overflow.
pub(crate) fn out_len(len: usize, k: usize, s: usize, p: usize, d: usize) -> Option<usize> {
    let span = k.checked_sub(1)?.checked_mul(d)?.checked_add(1)?;
    let padded = len.checked_add(p.checked_mul(2)?)?;
    if s == 0 || d == 0 || padded < span {
        return None;
    }
    Some((padded - span) / s + 1)
}

impl<'a> Im2col<'a> {
    /// The im2col view of `input` (`[c, h, w]` contiguous); an error when a size is zero, the
    /// kernel does not fit the padded image, a size overflows, or `input` is short.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        input: &'a [f32],
        [c, h, w]: [usize; 3],
        [kh, kw]: [usize; 2],
        stride: [usize; 2],
        pad: [usize; 2],
        dil: [usize; 2],
    ) -> Result<Self, GemmError> {
        if [c, h, w, kh, kw].contains(&0) {
            return Err(GemmError::Invalid("im2col: zero size"));
        }
        let oh = out_len(h, kh, stride[0], pad[0], dil[0]);
        let ow = out_len(w, kw, stride[1], pad[1], dil[1]);
        let (Some(oh), Some(ow)) = (oh, ow) else {
            return Err(GemmError::Invalid("im2col: kernel, stride or dilation does not fit"));
        };
        let need = c.checked_mul(h).and_then(|v| v.checked_mul(w));
        let k = c.checked_mul(kh).and_then(|v| v.checked_mul(kw));
        let n = oh.checked_mul(ow);
        let (Some(need), Some(_), Some(_)) = (need, k, n) else {
            return Err(GemmError::Overflow("im2col"));
        };
        if input.len() < need {
            return Err(GemmError::Short { what: "im2col input", need, len: input.len() });
        }
        Ok(Im2col { input, g: Geometry { c, h, w, kh, kw, oh, ow, stride, pad, dil } })
    }

    /// Output columns `ox` whose tap `kx` reads inside the input row: `lo..hi`.
    fn valid_cols(&self, kx: usize) -> (usize, usize) {
        let (s, p, off) = (self.g.stride[1], self.g.pad[1], kx * self.g.dil[1]);
        let lo = if p > off { (p - off).div_ceil(s) } else { 0 }.min(self.g.ow);
        let hi =
            if self.g.w + p > off { ((self.g.w - 1 + p - off) / s + 1).min(self.g.ow) } else { 0 };
        (lo, hi.max(lo))
    }

    /// Writes columns `ox0..ox0 + dst.len()` of output row `oy` for tap `(ci, ky, kx)`, whose
    /// in-row output columns are `cols` (from `valid_cols(kx)`).
    #[allow(clippy::too_many_arguments)]
    fn fill(
        &self,
        dst: &mut [f32],
        ci: usize,
        ky: usize,
        kx: usize,
        (lo, hi): (usize, usize),
        oy: usize,
        ox0: usize,
    ) {
        let iy = (oy * self.g.stride[0] + ky * self.g.dil[0]).checked_sub(self.g.pad[0]);
        let Some(iy) = iy.filter(|&iy| iy < self.g.h) else {
            dst.fill(0.0);
            return;
        };
        let end = ox0 + dst.len();
        let (a, b) = (lo.clamp(ox0, end), hi.clamp(ox0, end));
        dst[..a - ox0].fill(0.0);
        dst[b - ox0..].fill(0.0);
        if a < b {
            let row = &self.input[(ci * self.g.h + iy) * self.g.w..][..self.g.w];
            // In range by `valid_cols`: a * s + kx * d >= pad.
            let first = a * self.g.stride[1] + kx * self.g.dil[1] - self.g.pad[1];
            let out = &mut dst[a - ox0..b - ox0];
            if self.g.stride[1] == 1 {
                out.copy_from_slice(&row[first..first + out.len()]);
            } else if self.g.stride[1] == 2 {
                // Pairs vectorize where `step_by` would not.
                let src = &row[first..];
                for (d, pair) in out.iter_mut().zip(src.chunks_exact(2)) {
                    *d = pair[0];
                }
                if let (Some(d), [.., last]) = (out.get_mut(src.len() / 2), src) {
                    *d = *last; // the row's last column, an odd one out
                }
            } else {
                for (d, x) in out.iter_mut().zip(row[first..].iter().step_by(self.g.stride[1])) {
                    *d = *x;
                }
            }
        }
    }
}

impl PackB for Im2col<'_> {
    fn k(&self) -> usize {
        self.g.c * self.g.kh * self.g.kw
    }

    fn n(&self) -> usize {
        self.g.oh * self.g.ow
    }

    fn pack(&self, k0: usize, kc: usize, n0: usize, nc: usize, nr: usize, dst: &mut [f32]) {
        // Row by row, so the tap is decoded once per row and the output position advances
        // without divisions.
        let taps = self.g.kh * self.g.kw;
        let (mut ci, mut ky, mut kx) = (k0 / taps, (k0 % taps) / self.g.kw, k0 % self.g.kw);
        let (oy0, ox0) = (n0 / self.g.ow, n0 % self.g.ow);
        for kk in 0..kc {
            let cols = self.valid_cols(kx);
            let (mut oy, mut ox) = (oy0, ox0);
            for (q, panel) in dst.chunks_exact_mut(nr * kc).take(nc.div_ceil(nr)).enumerate() {
                let row = &mut panel[kk * nr..][..nr];
                let w = nr.min(nc - q * nr);
                let mut j = 0;
                while j < w {
                    let len = (self.g.ow - ox).min(w - j);
                    self.fill(&mut row[j..j + len], ci, ky, kx, cols, oy, ox);
                    j += len;
                    ox += len;
                    if ox == self.g.ow {
                        (oy, ox) = (oy + 1, 0);
                    }
                }
                row[w..].fill(0.0);
            }
            kx += 1;
            if kx == self.g.kw {
                kx = 0;
                ky += 1;
                if ky == self.g.kh {
                    ky = 0;
                    ci += 1;
                }
            }
        }
    }
}
