//! The register-tile microkernels and the once-per-process choice among them.
//!
//! A microkernel computes one `rows x cols` tile of C (`rows <= mr`, `cols <= nr`) from A
//! (a packed panel, for each k `mr` values, rows beyond `rows` ignored; `rows` rows read
//! where they lie; or, through an indirection buffer, runs of a channels-last image, see
//! [`Indirect`]) and a B panel (for each k: `nr` values, columns beyond `cols` ignored),
//! then applies the tile epilogue in registers:
//! `c = (accumulate ? c : 0) + acc (+ row bias) (+ col bias) (+ residual)`, then the clamp.
//! One call may compute a strip of such tiles side by side (the same rows of A, consecutive B
//! panels), and a stack of such strips one under the other (the next `rows` rows of A and
//! C): with short depths the epilogue and the call between tiles are a large share of the
//! time, and one call runs its tiles back to back in one loop.

/// Blocking and dispatch data of one microkernel.
#[derive(Debug)]
pub struct Kernel {
    /// Name for reports, e.g. `"avx512 14x32"`.
    pub name: &'static str,
    /// Rows of the register tile (A panel height).
    pub mr: usize,
    /// Rows of a tile whose A is read through an indirection buffer (`Indirect`); at most
    /// `mr`, and `mc` is a multiple.
    pub ind_mr: usize,
    /// Columns of the register tile (B panel width).
    pub nr: usize,
    /// Depth of one cache block (the B micro-panel `kc x nr` stays in L1).
    pub kc: usize,
    /// Rows of one A cache block (`mc x kc` stays in L2); a multiple of `mr`.
    pub mc: usize,
    /// Columns of one B cache block; a multiple of `nr`.
    pub nc: usize,
    pub(crate) run: fn(&mut Tile<'_>),
}

/// One microkernel call. The driver guarantees the slice lengths documented on each field;
/// [`Tile::check`] verifies them before any unchecked access.
pub(crate) struct Tile<'a> {
    /// Depth of the product (may be 0).
    pub kc: usize,
    /// A: element `(i, p)` at `a[i * a_rs + p * a_ks]`, every one of the `rows x kc` inside.
    pub a: &'a [f32],
    /// A's row stride: 1 in a packed panel, the row stride of a matrix read in place.
    pub a_rs: usize,
    /// A's depth stride: `mr` in a packed panel, 1 in a matrix read in place.
    pub a_ks: usize,
    /// B panels: `kc * nr` values each, the first at 0, panel `q` at `q * b_stride`.
    pub b: &'a [f32],
    /// Values from one B panel to the next (unused with one panel).
    pub b_stride: usize,
    /// C tile origin: at least [`Tile::span`] values.
    pub c: &'a mut [f32],
    /// Row stride of C (and of the residual).
    pub ldc: usize,
    /// Rows to compute per strip, `1..=mr`.
    pub rows: usize,
    /// Strips stacked one under the other (at least 1): strip `s` computes C's rows from
    /// `s * rows` from A's values from `s * a_stack` on, or, with an indirection buffer, from
    /// the offsets of the next panel of it ([`Indirect::strip`]; `a_stack` unused).
    pub stack: usize,
    /// Values of A from one stacked strip to the next (unused with one strip).
    pub a_stack: usize,
    /// Tiles side by side (at least 1), tile `q` computing C's columns from `q * nr` with B
    /// panel `q`: a strip of tiles sharing their rows of A, computed in one call.
    pub panels: usize,
    /// Columns of each tile, `1..=nr`; `nr` when there are several.
    pub cols: usize,
    /// Add the existing C (a later K block) instead of overwriting it.
    pub accumulate: bool,
    /// Bias per row: at least `rows` values.
    pub row_bias: Option<&'a [f32]>,
    /// Bias per column: at least [`Tile::width`] values.
    pub col_bias: Option<&'a [f32]>,
    /// Residual with the layout of C: at least [`Tile::span`] values.
    pub residual: Option<&'a [f32]>,
    /// `min(max(x, lo), hi)`, NaN propagating.
    pub clamp: Option<(f32, f32)>,
    /// When set, A is read through it and `a_rs`, `a_ks` are unused.
    pub ind: Option<Indirect<'a>>,
}

/// A tile's A read through an indirection buffer (XNNPACK's IGEMM: a convolution over a
/// channels-last image with no im2col). The depth is `kc / channels` taps of `channels`
/// values each; row `i`'s values of tap `t` are the `channels` values of `a` from
/// `offsets[t * stride + i]`, or `zeros` where that offset is [`ZERO_ROW`] (a tap in the
/// padding).
#[derive(Clone, Copy)]
pub(crate) struct Indirect<'a> {
    /// Per tap, `stride` offsets into A, the first `rows` used.
    pub offsets: &'a [usize],
    /// Offsets per tap.
    pub stride: usize,
    /// Values per tap (at least 1).
    pub channels: usize,
    /// `o + channels <= reach` for every offset `o` of `offsets` but [`ZERO_ROW`] (the
    /// [`Indirection`](super::Indirection) it comes from checked them all once).
    pub reach: usize,
    /// At least `channels` zeros.
    pub zeros: &'a [f32],
}

/// The offset of a row that reads [`Indirect::zeros`].
pub(crate) const ZERO_ROW: usize = usize::MAX;

impl Indirect<'_> {
    /// Taps of a tile of depth `kc`, when `kc` is whole taps.
    fn taps(&self, kc: usize) -> Option<usize> {
        (self.channels > 0 && kc.is_multiple_of(self.channels)).then(|| kc / self.channels)
    }

    /// Whether every offset the `stack` strips of `rows x kc` tiles read is in `offsets` and
    /// points at `channels` values inside `a` (or is [`ZERO_ROW`]), and `zeros` is long
    /// enough: each offset is below `reach`, so `reach <= a.len()` answers for all of them
    /// at once. Strip `s` reads the offsets from [`Indirect::strip`]`(s, kc)` on.
    fn covers(&self, a: &[f32], rows: usize, stack: usize, kc: usize) -> bool {
        let Some(taps) = self.taps(kc) else { return false };
        if taps == 0 {
            return true;
        }
        let span = taps
            .checked_mul(stack.saturating_sub(1))
            .and_then(|v| v.checked_add(taps - 1))
            .and_then(|v| v.checked_mul(self.stride))
            .and_then(|v| v.checked_add(rows));
        self.zeros.len() >= self.channels
            && rows <= self.stride
            && span.is_some_and(|s| s <= self.offsets.len())
            && self.reach <= a.len()
    }

    /// Where strip `s` of a stacked call of depth `kc` starts in `offsets`: the strips are
    /// consecutive panels of the indirection buffer, `taps * stride` offsets each.
    #[inline]
    pub fn strip(&self, s: usize, kc: usize) -> usize {
        s * (kc / self.channels.max(1)) * self.stride
    }

    /// Row `i`'s values of tap `t` (valid after [`Indirect::covers`]).
    #[inline]
    pub fn row<'s>(&'s self, a: &'s [f32], t: usize, i: usize) -> &'s [f32] {
        match self.offsets[t * self.stride + i] {
            ZERO_ROW => &self.zeros[..self.channels],
            o => &a[o..][..self.channels],
        }
    }
}

impl<'a> Tile<'a> {
    /// Columns of the strip: `(panels - 1) * nr + cols` (saturating; `check` bounds it).
    pub fn width(&self, nr: usize) -> usize {
        self.panels.saturating_sub(1).saturating_mul(nr).saturating_add(self.cols)
    }

    /// Rows of C the call computes, `stack * rows`, `None` on overflow.
    pub fn total_rows(&self) -> Option<usize> {
        self.stack.checked_mul(self.rows)
    }

    /// Values of C the call spans: `(total_rows - 1) * ldc + width`, `None` on overflow.
    pub fn span(&self, nr: usize) -> Option<usize> {
        let width = self.panels.checked_sub(1)?.checked_mul(nr)?.checked_add(self.cols)?;
        self.total_rows()?.checked_sub(1)?.checked_mul(self.ldc)?.checked_add(width)
    }

    /// Whether every slice covers what the kernel of tile size `mr x nr` reads or writes.
    pub fn check(&self, mr: usize, nr: usize) -> bool {
        if !(1..=mr).contains(&self.rows) || !(1..=nr).contains(&self.cols) || self.panels == 0 {
            return false;
        }
        if self.panels > 1 && self.cols != nr {
            return false;
        }
        if self.stack == 0 {
            return false;
        }
        let (Some(span), Some(rows)) = (self.span(nr), self.total_rows()) else { return false };
        let width = self.width(nr);
        let b_need = (self.panels - 1)
            .checked_mul(self.b_stride)
            .and_then(|v| v.checked_add(self.kc.checked_mul(nr)?));
        let a_end = |kc: usize| {
            let last = (self.stack - 1).checked_mul(self.a_stack)?;
            let last = last.checked_add((self.rows - 1).checked_mul(self.a_rs)?)?;
            last.checked_add((kc - 1).checked_mul(self.a_ks)?)
        };
        let a_ok = match &self.ind {
            Some(ind) => ind.covers(self.a, self.rows, self.stack, self.kc),
            None => self.kc == 0 || a_end(self.kc).is_some_and(|v| v < self.a.len()),
        };
        a_ok && b_need.is_some_and(|v| v <= self.b.len())
            && (rows == 1 || self.ldc >= width)
            && span <= self.c.len()
            && self.row_bias.is_none_or(|b| b.len() >= rows)
            && self.col_bias.is_none_or(|b| b.len() >= width)
            && self.residual.is_none_or(|r| r.len() >= span)
    }

    /// Runs `run` on each tile of the call in turn, as a call of one tile (for kernels without
    /// a strip or stack loop of their own).
    pub fn each_tile(&mut self, nr: usize, run: fn(&mut Tile<'_>)) {
        for st in 0..self.stack {
            let (i, a_at) = (st * self.rows, st * self.a_stack);
            for q in 0..self.panels {
                let (j, bq) = (q * nr, q * self.b_stride);
                let at = i * self.ldc + j;
                let mut tile = Tile {
                    kc: self.kc,
                    a: self.a.get(a_at..).unwrap_or_default(),
                    a_rs: self.a_rs,
                    a_ks: self.a_ks,
                    b: self.b.get(bq..).unwrap_or_default(),
                    b_stride: 0,
                    c: self.c.get_mut(at..).unwrap_or_default(),
                    ldc: self.ldc,
                    rows: self.rows,
                    stack: 1,
                    a_stack: 0,
                    panels: 1,
                    cols: self.cols,
                    accumulate: self.accumulate,
                    row_bias: self.row_bias.map(|b| b.get(i..).unwrap_or_default()),
                    col_bias: self.col_bias.map(|b| b.get(j..).unwrap_or_default()),
                    residual: self.residual.map(|r| r.get(at..).unwrap_or_default()),
                    clamp: self.clamp,
                    // A stacked indirect strip reads its own panel of offsets.
                    ind: self.ind.map(|ind| Indirect {
                        offsets: ind.offsets.get(ind.strip(st, self.kc)..).unwrap_or_default(),
                        ..ind
                    }),
                };
                run(&mut tile);
            }
        }
    }
}

/// NaN-propagating clamp (PyTorch `clamp`/`hardtanh`/`relu` semantics).
#[inline]
pub(crate) fn clamp1(x: f32, lo: f32, hi: f32) -> f32 {
    if x.is_nan() {
        x
    } else {
        x.max(lo).min(hi)
    }
}

const PORTABLE_MR: usize = 4;
const PORTABLE_NR: usize = 8;

/// Portable microkernel: a `4 x 8` accumulator array the compiler keeps in registers. It
/// multiplies and adds separately (no `mul_add`, which is a slow library call without FMA).
fn portable(t: &mut Tile<'_>) {
    if t.panels > 1 || t.stack > 1 {
        return t.each_tile(PORTABLE_NR, portable);
    }
    let mr = if t.ind.is_some() { PORTABLE.ind_mr } else { PORTABLE_MR };
    assert!(t.check(mr, PORTABLE_NR), "sgemm: portable tile out of bounds");
    let mut acc = [[0f32; PORTABLE_NR]; PORTABLE_MR];
    let mut add = |i: usize, a: f32, b: &[f32]| {
        for j in 0..PORTABLE_NR {
            acc[i][j] += a * b[j];
        }
    };
    let b_rows = t.b.chunks_exact(PORTABLE_NR).take(t.kc);
    match &t.ind {
        Some(ind) => {
            for (p, b) in b_rows.enumerate() {
                let (tap, c) = (p / ind.channels, p % ind.channels);
                for i in 0..t.rows {
                    add(i, ind.row(t.a, tap, i)[c], b);
                }
            }
        }
        None => {
            for (p, b) in b_rows.enumerate() {
                for i in 0..t.rows {
                    add(i, t.a[i * t.a_rs + p * t.a_ks], b);
                }
            }
        }
    }
    for (i, row) in acc.iter().enumerate().take(t.rows) {
        for (j, &v) in row.iter().enumerate().take(t.cols) {
            let at = i * t.ldc + j;
            let mut x = if t.accumulate { t.c[at] + v } else { v };
            if let Some(rb) = t.row_bias {
                x += rb[i];
            }
            if let Some(cb) = t.col_bias {
                x += cb[j];
            }
            if let Some(r) = t.residual {
                x += r[at];
            }
            if let Some((lo, hi)) = t.clamp {
                x = clamp1(x, lo, hi);
            }
            t.c[at] = x;
        }
    }
}

/// The portable kernel (always available).
pub static PORTABLE: Kernel = Kernel {
    name: "portable 4x8",
    mr: PORTABLE_MR,
    ind_mr: PORTABLE_MR,
    nr: PORTABLE_NR,
    kc: 256,
    mc: 128,
    nc: 2048,
    run: portable,
};
