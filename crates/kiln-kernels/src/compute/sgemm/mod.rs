//! Packed single-precision GEMM with fused epilogues, for operands known at load time.
//!
//! `c = act(a * b + bias + residual)` with BLIS-style blocking: for each `nc` column block of
//! B and `kc` depth block, B is packed into `nr`-column panels; for each `mc` row block of A,
//! A is packed into `mr`-row panels; a register-tile microkernel ([`Kernel`]) computes each
//! `mr x nr` tile of C. A constant operand ([`PackedA`], [`PackedB`]) is packed once over its
//! whole depth and reused by every call; the other operand is packed per call into a reusable
//! [`GemmScratch`], from a dense strided matrix ([`MatRef`]) or straight from a convolution
//! input ([`Im2col`], "lazy im2col"), except a left operand whose rows are contiguous (a
//! row-major matrix, a channels-last image): the microkernel reads its rows where they lie,
//! as XNNPACK's GEMMs do, and nothing is copied. A convolution over a channels-last image
//! reads it where it lies too, through an [`Indirection`] buffer of one offset per output
//! pixel and tap ([`gemm_indirect`], XNNPACK's IGEMM). The epilogue (bias, residual, clamp) is applied in
//! registers on the last depth block; other activations run over the finished tile while it
//! is in cache. A call runs on one thread; callers split a product over threads by output rows
//! ([`gemm_packed_a_rows`]) or columns ([`ColumnsOf`]). The depth is summed in the same order
//! for every tile, so every output element has the same bits whatever the split, for a given
//! [`Kernel`], and one kernel is used per process.

mod epilogue;
mod error;
mod indirect;
mod kernel;
mod pack;
mod packed_buf;
mod select;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

#[cfg(test)]
pub(crate) mod tests;

pub use epilogue::{Activation, Bias, Epilogue};
pub use indirect::{fits as indirection_fits, Indirection, MAX_OFFSETS as MAX_INDIRECTION_OFFSETS};
pub use kernel::Kernel;
pub use pack::{ColumnsOf, Im2col, MatRef, PackB};
pub use select::{available, selected};

pub(crate) use kernel::clamp1;
pub(crate) use pack::out_len;

pub(crate) use epilogue::activate_tile;
pub use error::GemmError;
use kernel::Tile;
pub(crate) use pack::aligned_window;
pub(crate) use packed_buf::PackedBuf;

/// Per-call packing buffers, reused across calls (grown only when a call needs more).
#[derive(Debug, Default)]
pub struct GemmScratch {
    a: Vec<f32>,
    b: Vec<f32>,
}

impl GemmScratch {
    /// Bytes its buffers hold.
    pub fn heap_bytes(&self) -> usize {
        (self.a.capacity() + self.b.capacity()) * 4
    }
}

/// Zeros for a `depth x width` operand packed over its whole depth in panels of `w` columns,
/// 64-byte aligned.
fn zeroed_panels(depth: usize, width: usize, w: usize) -> Result<PackedBuf, GemmError> {
    let len = width
        .div_ceil(w)
        .checked_mul(w)
        .and_then(|v| v.checked_mul(depth))
        .ok_or(GemmError::Overflow("packed operand"))?;
    PackedBuf::zeroed(len)
}

/// Packs `src` (`depth x width`) over its whole depth into panels of `w` columns, 64-byte
/// aligned.
fn pack_whole(src: &MatRef<'_>, w: usize) -> Result<PackedBuf, GemmError> {
    let (depth, width) = (src.k(), src.n());
    let mut buf = zeroed_panels(depth, width, w)?;
    if depth > 0 && width > 0 {
        src.pack(0, depth, 0, width, w, buf.values_mut());
    }
    Ok(buf)
}

/// A constant `m x k` left operand (e.g. convolution weights `[Cout, Cin*kh*kw]`), packed
/// once into `mr`-row panels over the whole depth.
#[derive(Debug)]
pub struct PackedA {
    kernel: &'static Kernel,
    m: usize,
    k: usize,
    data: PackedBuf,
}

impl PackedA {
    /// Bytes of packed values it holds.
    pub fn heap_bytes(&self) -> usize {
        self.data.heap_bytes()
    }

    /// Packs `a` for the [`selected`] kernel.
    pub fn new(a: MatRef<'_>) -> Result<Self, GemmError> {
        Self::with_kernel(selected(), a)
    }

    pub(crate) fn with_kernel(kernel: &'static Kernel, a: MatRef<'_>) -> Result<Self, GemmError> {
        let data = pack_whole(&a.t(), kernel.mr)?;
        Ok(PackedA { kernel, m: a.rows(), k: a.cols(), data })
    }

    /// Rows.
    pub fn m(&self) -> usize {
        self.m
    }

    /// Depth.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Rows per packed panel: a row range [`gemm_packed_a_rows`] takes starts at a multiple.
    pub fn panel_rows(&self) -> usize {
        self.kernel.mr
    }

    /// Columns of the register tile its kernel computes.
    pub fn tile_cols(&self) -> usize {
        self.kernel.nr
    }
}

/// A constant `k x n` right operand (e.g. a linear weight `[N, K]` viewed transposed), packed
/// once into `nr`-column panels over the whole depth.
#[derive(Debug)]
pub struct PackedB {
    kernel: &'static Kernel,
    k: usize,
    n: usize,
    data: PackedBuf,
}

impl PackedB {
    /// Bytes of packed values it holds.
    pub fn heap_bytes(&self) -> usize {
        self.data.heap_bytes()
    }

    /// Packs `b` for the [`selected`] kernel.
    pub fn new(b: MatRef<'_>) -> Result<Self, GemmError> {
        Self::with_kernel(selected(), b)
    }

    pub(crate) fn with_kernel(kernel: &'static Kernel, b: MatRef<'_>) -> Result<Self, GemmError> {
        let data = pack_whole(&b, kernel.nr)?;
        Ok(PackedB { kernel, k: b.rows(), n: b.cols(), data })
    }

    /// A `k x n` operand of zeros for the [`selected`] kernel, to be filled panel by panel
    /// ([`PackedB::panels_mut`]) from a layout no [`MatRef`] describes, with no copy of the
    /// matrix in between.
    pub(crate) fn zeroed(k: usize, n: usize) -> Result<Self, GemmError> {
        let kernel = selected();
        Ok(PackedB { kernel, k, n, data: zeroed_panels(k, n, kernel.nr)? })
    }

    /// Its panels in order, each with the first column it holds: panel row `kk` holds
    /// columns `j0..` at `[kk * nr..][..nr]` (zero past column `n`).
    pub(crate) fn panels_mut(&mut self) -> impl Iterator<Item = (usize, &mut [f32])> {
        let (nr, k) = (self.kernel.nr, self.k);
        self.data
            .values_mut()
            .chunks_exact_mut((nr * k).max(1))
            .enumerate()
            .map(move |(q, p)| (q * nr, p))
    }

    /// Depth.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Columns per packed panel: a column range [`gemm_packed_b_cols`] takes starts at a
    /// multiple.
    pub fn panel_cols(&self) -> usize {
        self.kernel.nr
    }

    /// Rows of the register tile its kernel computes (of the left operand).
    pub fn tile_rows(&self) -> usize {
        self.kernel.mr
    }

    /// An error unless `cols` is a range of its columns starting on a panel.
    fn check_cols(&self, cols: &std::ops::Range<usize>) -> Result<(), GemmError> {
        if cols.start > cols.end || cols.end > self.n || !cols.start.is_multiple_of(self.kernel.nr)
        {
            return Err(GemmError::Invalid("gemm: column range outside B or not on a panel"));
        }
        Ok(())
    }
}

/// Where the A panels come from.
enum ASrc<'a> {
    /// Rows from `row0` on of a packed operand.
    Packed(&'a PackedA, usize),
    /// A transposed: `A^T` (`k x m`), packed per call as column panels of `A^T`, or read in
    /// place when its columns are contiguous ([`PackB::columns_in_place`]).
    Lazy(&'a dyn PackB),
    /// Rows from `row0` on of a channels-last image read through its indirection buffer.
    Indirect(&'a Indirection, &'a [f32], usize),
}

/// Where the B panels come from.
enum BSrc<'a> {
    /// Columns from `col0` on of a packed operand.
    Packed(&'a PackedB, usize),
    Lazy(&'a dyn PackB),
}

/// `c = act(a * b + bias + residual)` with `a` packed once; `b` (`a.k() x n`) is packed per
/// call into `scratch`. `c` has row stride `ldc`.
pub fn gemm_packed_a(
    a: &PackedA,
    b: &dyn PackB,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue<'_>,
    scratch: &mut GemmScratch,
) -> Result<(), GemmError> {
    gemm_packed_a_rows(a, 0..a.m, b, c, ldc, ep, scratch)
}

/// Rows `rows` of [`gemm_packed_a`]'s product: `c`, the bias and the residual hold those rows
/// only (row `rows.start` of the product is row 0 of `c`). `rows.start` must be a multiple of
/// [`PackedA::panel_rows`]. Threads compute disjoint row ranges of one product this way.
pub fn gemm_packed_a_rows(
    a: &PackedA,
    rows: std::ops::Range<usize>,
    b: &dyn PackB,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue<'_>,
    scratch: &mut GemmScratch,
) -> Result<(), GemmError> {
    if b.k() != a.k {
        return Err(GemmError::Invalid("gemm: depth of B differs from A"));
    }
    if rows.start > rows.end || rows.end > a.m || !rows.start.is_multiple_of(a.kernel.mr) {
        return Err(GemmError::Invalid("gemm: row range outside A or not on a panel"));
    }
    let (m, k) = (rows.len(), a.k);
    drive(a.kernel, m, b.n(), k, ASrc::Packed(a, rows.start), BSrc::Lazy(b), c, ldc, ep, scratch)
}

/// `c = act(a * b + bias + residual)` with `b` packed once; `a` (`m x b.k()`) is packed per
/// call into `scratch`. `c` has row stride `ldc`.
pub fn gemm_packed_b(
    a: MatRef<'_>,
    b: &PackedB,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue<'_>,
    scratch: &mut GemmScratch,
) -> Result<(), GemmError> {
    gemm_packed_b_cols(a, b, 0..b.n, c, ldc, ep, scratch)
}

/// Columns `cols` of [`gemm_packed_b`]'s product: `c`, the column bias and the residual hold
/// those columns only (column `cols.start` of the product is column 0 of `c`, whose row
/// stride is `ldc`). `cols.start` must be a multiple of [`PackedB::panel_cols`]. Threads
/// compute disjoint column ranges of a one-row product this way.
pub fn gemm_packed_b_cols(
    a: MatRef<'_>,
    b: &PackedB,
    cols: std::ops::Range<usize>,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue<'_>,
    scratch: &mut GemmScratch,
) -> Result<(), GemmError> {
    if a.cols() != b.k {
        return Err(GemmError::Invalid("gemm: depth of A differs from B"));
    }
    b.check_cols(&cols)?;
    let (n, k) = (cols.len(), b.k);
    drive(
        b.kernel,
        a.rows(),
        n,
        k,
        ASrc::Lazy(&a.t()),
        BSrc::Packed(b, cols.start),
        c,
        ldc,
        ep,
        scratch,
    )
}

/// [`gemm_packed_b`] with the left operand given transposed and possibly implicit: the
/// product `at^T * b`, `at` being `b.k() x m` (an im2col matrix makes the rows of the product
/// output pixels, so `c` is a channels-last image).
pub fn gemm_packed_b_at(
    at: &dyn PackB,
    b: &PackedB,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue<'_>,
    scratch: &mut GemmScratch,
) -> Result<(), GemmError> {
    if at.k() != b.k {
        return Err(GemmError::Invalid("gemm: depth of A differs from B"));
    }
    drive(b.kernel, at.n(), b.n, b.k, ASrc::Lazy(at), BSrc::Packed(b, 0), c, ldc, ep, scratch)
}

/// Rows `rows` and columns `cols` of the convolution `act(image * b + bias + residual)`,
/// the left operand being `image` (a channels-last image, [`Indirection::image_len`] values)
/// read through `ind`, whose depth order `b` was packed in. `c`, the residual and a per-row
/// bias hold those rows and columns only (element `(rows.start, cols.start)` of the product
/// is `c[0]`, row stride `ldc`; a per-column bias starts at column `cols.start`).
/// `rows.start` must be a multiple of [`Indirection::panel_rows`], `cols.start` of
/// [`PackedB::panel_cols`]. Threads compute disjoint blocks of one product this way.
#[allow(clippy::too_many_arguments)]
pub fn gemm_indirect(
    ind: &Indirection,
    image: &[f32],
    rows: std::ops::Range<usize>,
    b: &PackedB,
    cols: std::ops::Range<usize>,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue<'_>,
    scratch: &mut GemmScratch,
) -> Result<(), GemmError> {
    if ind.depth() != b.k {
        return Err(GemmError::Invalid("gemm: depth of the image's taps differs from B"));
    }
    if ind.panel_rows() != b.kernel.ind_mr {
        return Err(GemmError::Invalid("gemm: indirection panels differ from the kernel's"));
    }
    need("convolution image", ind.image_len(), image.len())?;
    let mr = b.kernel.ind_mr;
    if rows.start > rows.end || rows.end > ind.rows() || !rows.start.is_multiple_of(mr) {
        return Err(GemmError::Invalid("gemm: row range outside the image or not on a panel"));
    }
    b.check_cols(&cols)?;
    let a = ASrc::Indirect(ind, image, rows.start);
    let (m, n) = (rows.len(), cols.len());
    drive(b.kernel, m, n, b.k, a, BSrc::Packed(b, cols.start), c, ldc, ep, scratch)
}

/// `c = act(a * b + bias + residual)` with both operands packed per call (products of two
/// activations: matmul, bmm), on the [`selected`] kernel.
pub fn gemm(
    a: MatRef<'_>,
    b: MatRef<'_>,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue<'_>,
    scratch: &mut GemmScratch,
) -> Result<(), GemmError> {
    gemm_on(selected(), a, b, c, ldc, ep, scratch)
}

/// [`gemm`] on a given kernel.
pub(crate) fn gemm_on(
    kernel: &'static Kernel,
    a: MatRef<'_>,
    b: MatRef<'_>,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue<'_>,
    scratch: &mut GemmScratch,
) -> Result<(), GemmError> {
    if a.cols() != b.rows() {
        return Err(GemmError::Invalid("gemm: depth of A differs from B"));
    }
    drive(
        kernel,
        a.rows(),
        b.cols(),
        a.cols(),
        ASrc::Lazy(&a.t()),
        BSrc::Lazy(&b),
        c,
        ldc,
        ep,
        scratch,
    )
}

/// An error when an operand (`what`) has `len` elements but needs `need`.
pub(crate) fn need(what: &'static str, need: usize, len: usize) -> Result<(), GemmError> {
    if len < need {
        Err(GemmError::Short { what, need, len })
    } else {
        Ok(())
    }
}

/// Checks C, bias, residual and activation against an `m x n` product.
fn check_epilogue(
    m: usize,
    n: usize,
    c: &[f32],
    ldc: usize,
    ep: &Epilogue<'_>,
) -> Result<(), GemmError> {
    if m > 1 && ldc < n {
        return Err(GemmError::Invalid("gemm: row stride of C is below its width"));
    }
    let span = if m == 0 || n == 0 {
        0
    } else {
        (m - 1)
            .checked_mul(ldc)
            .and_then(|v| v.checked_add(n))
            .ok_or(GemmError::Overflow("gemm output"))?
    };
    need("gemm output", span, c.len())?;
    match ep.bias {
        Bias::None => {}
        Bias::PerRow(b) => need("row bias", m, b.len())?,
        Bias::PerCol(b) => need("column bias", n, b.len())?,
    }
    if let Some(r) = ep.residual {
        need("residual", span, r.len())?;
    }
    if let Activation::Clamp { min, max } = ep.act {
        if min.is_nan() || max.is_nan() {
            return Err(GemmError::Invalid("gemm: clamp bound is NaN"));
        }
    }
    Ok(())
}

/// Largest block of B (bytes) walked in strips: every row panel reads all of it again.
const STRIP_B_BYTES: usize = 256 << 10;

/// The blocked loop nest shared by every entry point.
#[allow(clippy::too_many_arguments)]
fn drive(
    kernel: &'static Kernel,
    m: usize,
    n: usize,
    k: usize,
    a: ASrc<'_>,
    b: BSrc<'_>,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue<'_>,
    scratch: &mut GemmScratch,
) -> Result<(), GemmError> {
    check_epilogue(m, n, c, ldc, ep)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    let mr = match a {
        ASrc::Indirect(..) => kernel.ind_mr,
        _ => kernel.mr,
    };
    let nr = kernel.nr;
    // Depth block. B packed at load is read panel by panel in one stream over the whole
    // depth (as XNNPACK's kernels do): blocking it only re-reads C, measured no faster, and
    // would make the bits depend on how many rows a call gets (a split over threads). An
    // indirect A is read tap by tap by the microkernel, over the whole depth.
    let kc_block = match (&a, &b) {
        (ASrc::Indirect(..), _) | (_, BSrc::Packed(..)) => k.max(1),
        _ => kernel.kc,
    };
    // Per-call buffers: one kc x nc block of B, one mc x kc block of A.
    let kc_max = kc_block.min(k);
    let b_len = n.min(kernel.nc).div_ceil(nr) * nr * kc_max;
    let a_len = m.min(kernel.mc).div_ceil(mr) * mr * kc_max;
    let GemmScratch { a: a_buf, b: b_buf } = scratch;
    let a_in_place = match &a {
        ASrc::Lazy(at) => at.columns_in_place(),
        ASrc::Packed(..) | ASrc::Indirect(..) => None,
    };
    let clamp = ep.act.clamp();
    // Strips of tiles (each row panel across the block's columns) when the block of B stays
    // in cache between row panels, or there is one row panel; otherwise, and always for an
    // indirect A (its rows are read through per-panel offsets), column panel by column
    // panel, each down a stack of row panels.
    let b_block_bytes = kc_max.saturating_mul(n.min(kernel.nc)).saturating_mul(4);
    let strips = !matches!(a, ASrc::Indirect(..)) && (m <= mr || b_block_bytes <= STRIP_B_BYTES);
    for jc in (0..n).step_by(kernel.nc) {
        let nc = kernel.nc.min(n - jc);
        let mut pc = 0;
        loop {
            let kc = kc_block.min(k - pc);
            let (first, last) = (pc == 0, pc + kc >= k);
            // B panels of this block: (slice, stride between panels, offset of depth pc).
            let (b_blk, b_stride, b_at): (&[f32], usize, usize) = match &b {
                BSrc::Packed(p, col0) => {
                    (p.data.values(), nr * k, ((col0 + jc) / nr) * nr * k + pc * nr)
                }
                BSrc::Lazy(src) => {
                    let win = aligned_window(b_buf, b_len);
                    if kc > 0 {
                        src.pack(pc, kc, jc, nc, nr, win);
                    }
                    (win, nr * kc, 0)
                }
            };
            for ic in (0..m).step_by(kernel.mc) {
                let mc = kernel.mc.min(m - ic);
                // A rows of this block: (slice, stride between row panels, offset of row
                // ic and depth pc, row stride, depth stride).
                let (a_blk, a_stride, a_at, a_rs, a_ks): (&[f32], usize, usize, usize, usize) =
                    match (&a, a_in_place) {
                        (ASrc::Packed(p, row0), _) => {
                            let at = ((row0 + ic) / mr) * mr * k + pc * mr;
                            (p.data.values(), mr * k, at, 1, mr)
                        }
                        (ASrc::Lazy(_), Some((data, lda))) => {
                            (data, mr * lda, ic * lda + pc, lda, 1)
                        }
                        // The image itself; each tile takes its panel of the buffer.
                        (ASrc::Indirect(_, image, _), _) => (image, 0, 0, 0, 0),
                        (ASrc::Lazy(at), None) => {
                            let win = aligned_window(a_buf, a_len);
                            if kc > 0 {
                                at.pack(pc, kc, ic, mc, mr, win);
                            }
                            (win, mr * kc, 0, 1, mr)
                        }
                    };
                // One call: `stack` row panels of `rows` rows from row `ir`, each `panels`
                // tiles from column `jr`.
                let mut run = |ir: usize,
                               rows: usize,
                               stack: usize,
                               jr: usize,
                               panels: usize,
                               cols: usize| {
                    let bp = &b_blk[b_at + (jr / nr) * b_stride..];
                    let ap = &a_blk[a_at + (ir / mr) * a_stride..];
                    let (i, j) = (ic + ir, jc + jr);
                    let ind = match &a {
                        ASrc::Indirect(ind, _, row0) => Some(ind.panels(row0 + i, stack)),
                        _ => None,
                    };
                    let at = i * ldc + j;
                    let mut tile = Tile {
                        kc,
                        a: ap,
                        a_rs,
                        a_ks,
                        b: bp,
                        b_stride,
                        c: &mut c[at..],
                        ldc,
                        rows,
                        stack,
                        a_stack: a_stride,
                        panels,
                        cols,
                        accumulate: !first,
                        row_bias: None,
                        col_bias: None,
                        residual: None,
                        clamp: None,
                        ind,
                    };
                    if last {
                        match ep.bias {
                            Bias::None => {}
                            Bias::PerRow(rb) => tile.row_bias = Some(&rb[i..]),
                            Bias::PerCol(cb) => tile.col_bias = Some(&cb[j..]),
                        }
                        tile.residual = ep.residual.map(|r| &r[at..]);
                        tile.clamp = clamp;
                    }
                    let width = tile.width(nr);
                    (kernel.run)(&mut tile);
                    if last && ep.act.is_pointwise_pass() {
                        activate_tile(c, at, ldc, rows * stack, width, ep.act);
                    }
                };
                if strips {
                    // The whole row panels stacked, each across the block: all whole column
                    // panels in one call (they share the rows of A), then the narrower last
                    // one; then the same for the short last row panel.
                    let (whole, rest) = (nc / nr, nc % nr);
                    let (full, tail) = (mc / mr, mc % mr);
                    for (ir, rows, stack) in [(0, mr, full), (full * mr, tail, 1)] {
                        if rows == 0 || stack == 0 {
                            continue;
                        }
                        if whole > 0 {
                            run(ir, rows, stack, 0, whole, nr);
                        }
                        if rest > 0 {
                            run(ir, rows, stack, whole * nr, 1, rest);
                        }
                    }
                } else {
                    // Each column panel down the whole row panels stacked in one call (tile
                    // by tile in that order, without a call per tile), then the short last
                    // row panel.
                    let (full, tail) = (mc / mr, mc % mr);
                    for jr in (0..nc).step_by(nr) {
                        let cols = nr.min(nc - jr);
                        if full > 0 {
                            run(0, mr, full, jr, 1, cols);
                        }
                        if tail > 0 {
                            run(full * mr, tail, 1, jr, 1, cols);
                        }
                    }
                }
            }
            pc += kc;
            if pc >= k {
                break;
            }
        }
    }
    Ok(())
}
