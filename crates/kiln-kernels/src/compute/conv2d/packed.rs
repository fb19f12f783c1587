//! [`PackedConv2d`]: a convolution's weights packed once and the plan that runs it.

use crate::compute::conv::im2col;
use crate::compute::interleave::interleave3;
use crate::compute::linear::PackedLinear;

use crate::compute::conv2d::depthwise::channels::{sum_channels, ChannelOut, ChannelPlane, BLOCK};
use crate::compute::conv2d::depthwise::rows::{
    clamp_as_vectors, row_spans, sum_taps, RowSpan, TapEpilogue, TapPlane, LANES,
};
use crate::compute::sgemm::{
    clamp1, gemm_indirect, gemm_packed_a_rows, gemm_packed_b_at, gemm_packed_b_cols,
    indirection_fits, out_len, selected, Activation, Bias, ColumnsOf, Epilogue, GemmError,
    GemmScratch, Im2col, Indirection, MatRef, PackB, PackedA, PackedB,
};
use crate::compute::threads::{caller_scratch, split, with_pieces, Threads, TASKS_PER_THREAD};

use super::geometry::{
    check_images, is_depthwise, is_pointwise, mul, Conv2dGeometry, Layout, Layouts,
};
use super::grouped::{self, Grouped};
use super::scratch::{first_error, window, ConvScratch, PartScratch};
use super::winograd::Winograd;

/// Multiply-adds per image from which a convolution splits over threads (below, waking the
/// workers costs more than they save).
const PARALLEL_MACS: usize = 1 << 18;

/// Fewest output pixels a task computes in a split whose every task reads all the layer's
/// weights (runs of pixels): more tasks read the weights again for fewer pixels each
/// (resnet50's Winograd layers on 14x14 pixels, 4 MB of transformed weights, ran 30-40%
/// slower on 4 tasks a thread, 24 pixels each, than on 1, 98 each), fewer let a preempted or
/// slower thread hold the layer up (mobilenet_v2's 1x1 layers on 28x28 to 112x112 pixels
/// ran slower on one task a thread). A split by output channels, which packs the whole input
/// per task, keeps one task per thread.
const WEIGHT_READ_PIXELS: usize = 96;

/// What one depthwise multiply-add costs in [`PARALLEL_MACS`]' units: it reads its own input
/// value and weight (nothing is reused across output channels), about four GEMM ones
/// (mobilenet_v2's 14x14x576 stride-2 depthwise, 254K multiply-adds, ran in 28 us on one
/// thread after a layer split over two, 17 us split itself).
const DEPTHWISE_MAC_COST: usize = 4;

/// How the convolution runs.
#[derive(Debug)]
pub(super) enum Plan {
    /// One packed weight matrix per group; `pointwise` when B is the input itself.
    Gemm { groups: Vec<PackedA>, pointwise: bool },
    /// Direct per-channel kernel; weights `[C, kh, kw]` contiguous; see [`Phases`]. Narrow
    /// outputs run on `blocks` instead, and channels-last ones only on them (their `weight`
    /// is then empty).
    Depthwise { weight: Vec<f32>, phases: Phases, blocks: Option<ChannelBlocks> },
    /// One group and fewer output pixels than a register tile is wide (the last layers of a
    /// CNN at low resolution): the product is computed transposed, pixels as rows and the
    /// packed weights as the right operand, so the tile's width runs over output channels;
    /// the result is transposed into NCHW.
    FewPixels { weight: PackedB },
    /// A pointwise convolution written channels-last: the product with pixels as rows (the
    /// input, NCHW or NHWC, read where it lies) and the packed weights as the right operand
    /// is the NHWC output itself.
    PixelRows { weight: PackedB },
    /// One group written channels-last, not pointwise: [`Plan::PixelRows`] with a
    /// channels-last input read where it lies through an indirection buffer, and the weights
    /// packed in its depth order, taps outer and channels inner.
    /// An NCHW input is first copied channels-last with `copy` zeros around it (rows,
    /// columns).
    Indirect { weight: PackedB, ind: Indirection, copy: Option<[usize; 2]> },
    /// A 3x3 stride-1 convolution of one group, channels-last in and out, with enough
    /// channels and output pixels: Winograd F(2x2, 3x3) (see [`Winograd`]).
    Winograd(Winograd),
    /// Groups of a few channels each, channels-last in and out: a direct kernel over each
    /// pixel's window (see [`Grouped`]).
    Grouped(Grouped),
    /// A pointwise convolution of one group over a one-pixel image (squeeze-excite's layers
    /// after the global mean): in either layout an image is a vector of channels, and the
    /// batch is a linear layer's rows (split over threads by output channels, each thread
    /// streaming its share of the weights). As [`Plan::Gemm`] the product was a register
    /// tile one column wide; on mobilenet_v3_large's 960 -> 240 it took 97 us against
    /// XNNPACK's 25.
    Linear(PackedLinear),
}

/// Channels-last in and out.
const NHWC: Layouts = Layouts { input: Layout::Nhwc, output: Layout::Nhwc };

/// Widest output for which a depthwise convolution runs on [`ChannelBlocks`]: below it, a
/// row of the per-plane kernel fills a fraction of its vectors (measured on mobilenet_v2).
const CHANNEL_BLOCKS_MAX_OW: usize = 14;

/// Most output pixels for [`Plan::FewPixels`]: below the narrowest register tile (16).
const FEW_PIXELS: usize = 16;

/// A convolution with its weights prepared for repeated runs.
#[derive(Debug)]
pub struct PackedConv2d {
    pub(super) g: Conv2dGeometry,
    pub(super) oh: usize,
    pub(super) ow: usize,
    pub(super) plan: Plan,
    pub(super) layouts: Layouts,
    /// The bias per output channel, unless the plan holds it laid out with its weights
    /// ([`Plan::Grouped`], [`Plan::Linear`]).
    pub(super) bias: Option<Vec<f32>>,
    pub(super) act: Activation,
}

impl PackedConv2d {
    /// Bytes of prepared weights (and index tables) it holds.
    pub fn heap_bytes(&self) -> usize {
        let plan = match &self.plan {
            Plan::Gemm { groups, .. } => groups.iter().map(PackedA::heap_bytes).sum(),
            Plan::Depthwise { weight, phases, blocks } => {
                weight.capacity() * 4
                    + phases.heap_bytes()
                    + blocks.as_ref().map_or(0, ChannelBlocks::heap_bytes)
            }
            Plan::FewPixels { weight } | Plan::PixelRows { weight } => weight.heap_bytes(),
            Plan::Indirect { weight, ind, .. } => weight.heap_bytes() + ind.heap_bytes(),
            Plan::Winograd(w) => w.heap_bytes(),
            Plan::Grouped(k) => k.heap_bytes(),
            Plan::Linear(l) => l.heap_bytes(),
        };
        plan + self.bias.as_ref().map_or(0, |b| b.capacity() * 4)
    }

    /// Prepares the convolution: `weight` is `[Cout, Cin/groups, kh, kw]` contiguous (PyTorch
    /// layout), `bias` has `Cout` values. An error when a size is zero, the groups do not
    /// divide the channels, the kernel does not fit the padded input, a size overflows, or a
    /// slice has the wrong length.
    pub fn new(
        g: Conv2dGeometry,
        weight: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
    ) -> Result<Self, GemmError> {
        Self::with_layouts(g, weight, bias, act, Layouts::default())
    }

    /// Whether a convolution of geometry `g` can run with `layouts`. Every convolution runs
    /// NCHW to NCHW. A pointwise one (1x1, stride 1, no padding, one group) takes and writes
    /// either layout; any other one-group convolution reads NCHW and writes either, or runs
    /// NHWC to NHWC, when its indirection buffer stays within
    /// [`MAX_INDIRECTION_OFFSETS`](crate::compute::sgemm::MAX_INDIRECTION_OFFSETS); a depthwise one of at least 16
    /// channels (a block) runs NHWC to NHWC, and so does a grouped one whose groups have a few
    /// channels each (at least two in and out, at most 64 out).
    pub fn supports(g: &Conv2dGeometry, layouts: Layouts) -> bool {
        match layouts {
            Layouts { input: Layout::Nchw, output: Layout::Nchw } => true,
            _ if g.groups == 1 && is_pointwise(g) => true,
            // Channels-last output reads through an indirection buffer, which must stay within
            // its cap.
            _ if g.groups == 1 => {
                let oh = out_len(g.in_h, g.kh, g.stride[0], g.padding[0], g.dilation[0]);
                let ow = out_len(g.in_w, g.kw, g.stride[1], g.padding[1], g.dilation[1]);
                let pixels = oh.zip(ow).and_then(|(h, w)| h.checked_mul(w));
                let taps = g.kh.checked_mul(g.kw);
                let fits = pixels.zip(taps).is_some_and(|(p, t)| indirection_fits(p, t));
                (layouts.input == Layout::Nchw || layouts.output == Layout::Nhwc) && fits
            }
            Layouts { input: Layout::Nhwc, output: Layout::Nhwc } => {
                (is_depthwise(g) && g.groups >= BLOCK) || grouped::supports(g)
            }
            _ => false,
        }
    }

    /// [`PackedConv2d::new`] for activations in `layouts`; an error when the convolution does
    /// not [support](PackedConv2d::supports) them.
    pub fn with_layouts(
        g: Conv2dGeometry,
        weight: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
        layouts: Layouts,
    ) -> Result<Self, GemmError> {
        if [g.in_channels, g.in_h, g.in_w, g.out_channels, g.kh, g.kw, g.groups].contains(&0) {
            return Err(GemmError::Invalid("conv2d: zero size"));
        }
        if !g.in_channels.is_multiple_of(g.groups) || !g.out_channels.is_multiple_of(g.groups) {
            return Err(GemmError::Invalid("conv2d: groups do not divide the channels"));
        }
        if let Activation::Clamp { min, max } = act {
            if min.is_nan() || max.is_nan() {
                return Err(GemmError::Invalid("conv2d: clamp bound is NaN"));
            }
        }
        let oh = out_len(g.in_h, g.kh, g.stride[0], g.padding[0], g.dilation[0]);
        let ow = out_len(g.in_w, g.kw, g.stride[1], g.padding[1], g.dilation[1]);
        let (Some(oh), Some(ow)) = (oh, ow) else {
            return Err(GemmError::Invalid("conv2d: kernel, stride or dilation does not fit"));
        };
        let (cin_g, cout_g) = (g.in_channels / g.groups, g.out_channels / g.groups);
        let kdim = mul(mul(cin_g, g.kh)?, g.kw)?;
        // Sizes `run` computes per image must not overflow either.
        mul(mul(g.in_channels, g.in_h)?, g.in_w)?;
        mul(mul(g.out_channels, oh)?, ow)?;
        let wlen = mul(g.out_channels, kdim)?;
        if weight.len() != wlen {
            return Err(GemmError::Short { what: "conv2d weight", need: wlen, len: weight.len() });
        }
        if let Some(b) = bias {
            if b.len() != g.out_channels {
                return Err(GemmError::Short {
                    what: "conv2d bias",
                    need: g.out_channels,
                    len: b.len(),
                });
            }
        }
        if !Self::supports(&g, layouts) {
            return Err(GemmError::Invalid("conv2d: layouts this convolution does not support"));
        }
        let plan = if g.groups == 1 && is_pointwise(&g) && g.in_h * g.in_w == 1 {
            Plan::Linear(PackedLinear::new(g.in_channels, g.out_channels, weight, bias, act)?)
        } else if is_depthwise(&g) {
            let blocks = (ow <= CHANNEL_BLOCKS_MAX_OW || layouts.input == Layout::Nhwc)
                .then(|| ChannelBlocks::new(&g, ow, weight, bias))
                .transpose()?;
            let per_plane = match layouts.input {
                Layout::Nchw => weight.to_vec(),
                Layout::Nhwc => Vec::new(),
            };
            Plan::Depthwise { weight: per_plane, phases: Phases::new(&g, oh, ow)?, blocks }
        } else if layouts == NHWC && grouped::supports(&g) {
            Plan::Grouped(Grouped::new(&g, ow, weight, bias)?)
        } else if layouts == NHWC && Winograd::supports(&g, oh, ow) {
            Plan::Winograd(Winograd::new(&g, oh, ow, weight)?)
        } else if g.groups == 1 && layouts.output == Layout::Nhwc && !is_pointwise(&g) {
            // Depth (ky, kx, c): element (k, o) at weight[o * kdim + c * kk + t] for
            // k = t * cin + c, packed panel by panel straight from the filters (a transposed
            // copy first held a third copy of the weight at the peak of the load: 9.4 MB for
            // each of resnet50's largest layers). A panel's filters are read together, each
            // store beside the last.
            let (cin, kk) = (g.in_channels, g.kh * g.kw);
            let mut packed = PackedB::zeroed(kdim, g.out_channels)?;
            let nr = packed.panel_cols();
            for (o0, panel) in packed.panels_mut() {
                let outs = o0..(o0 + nr).min(g.out_channels);
                for (k, row) in panel.chunks_exact_mut(nr).enumerate() {
                    let (t, c) = (k / cin, k % cin);
                    for (dst, o) in row.iter_mut().zip(outs.clone()) {
                        *dst = weight[o * kdim + c * kk + t];
                    }
                }
            }
            let weight = packed;
            let (geometry, mr) = (g.per_group(oh, ow), selected().ind_mr);
            // An NCHW input is copied channels-last, padded when a kernel row's pixels lie
            // side by side.
            let (ind, copy) = match layouts.input {
                Layout::Nhwc => (Indirection::new(&geometry, mr)?, None),
                Layout::Nchw if g.dilation[1] == 1 => {
                    (Indirection::padded(&geometry, mr)?, Some(g.padding))
                }
                Layout::Nchw => (Indirection::new(&geometry, mr)?, Some([0, 0])),
            };
            Plan::Indirect { weight, ind, copy }
        } else if g.groups == 1 && layouts.output == Layout::Nhwc {
            // weight^T: element (k, c) at weight[c * kdim + k].
            let wt = MatRef::new(weight, kdim, g.out_channels, 1, kdim)?;
            Plan::PixelRows { weight: PackedB::new(wt)? }
        } else if g.groups == 1 && oh * ow <= FEW_PIXELS && layouts.input == Layout::Nchw {
            let wt = MatRef::new(weight, kdim, g.out_channels, 1, kdim)?;
            Plan::FewPixels { weight: PackedB::new(wt)? }
        } else {
            let groups = weight
                .chunks_exact(cout_g * kdim)
                .map(|w| PackedA::new(MatRef::new(w, cout_g, kdim, kdim, 1)?))
                .collect::<Result<Vec<_>, _>>()?;
            Plan::Gemm { groups, pointwise: is_pointwise(&g) }
        };
        // A plan that lays the bias out with its weights is the only holder of it.
        let own_bias = !matches!(plan, Plan::Grouped(_) | Plan::Linear(_));
        let bias = bias.filter(|_| own_bias).map(<[f32]>::to_vec);
        Ok(PackedConv2d { g, oh, ow, plan, layouts, bias, act })
    }

    /// How the convolution computes, for reports: `gemm` (a 1x1 convolution as one product),
    /// `im2col` (a product over lazily packed im2col panels), `igemm` (through an indirection
    /// buffer), `winograd` (F(2x2, 3x3)), `few-pixels` (the product transposed), `linear` (a
    /// pointwise convolution of one-pixel images),
    /// `depthwise` (per channel plane), `depthwise-blocks` (16 channels at a time) or `grouped`
    /// (a direct kernel over groups of a few channels).
    pub fn algorithm(&self) -> &'static str {
        match &self.plan {
            Plan::Gemm { pointwise: true, .. } | Plan::PixelRows { .. } => "gemm",
            Plan::Linear(_) => "linear",
            Plan::Gemm { pointwise: false, .. } => "im2col",
            Plan::Depthwise { blocks: Some(_), .. } => "depthwise-blocks",
            Plan::Depthwise { blocks: None, .. } => "depthwise",
            Plan::FewPixels { .. } => "few-pixels",
            Plan::Indirect { .. } => "igemm",
            Plan::Winograd(_) => "winograd",
            Plan::Grouped(_) => "grouped",
        }
    }

    /// Output height and width.
    pub fn out_hw(&self) -> (usize, usize) {
        (self.oh, self.ow)
    }

    /// Runs the convolution: `input` is `[batch, Cin, H, W]`, `out` `[batch, Cout, OH, OW]`,
    /// each contiguous in its layout of [`PackedConv2d::with_layouts`]; `residual` (if any) is
    /// laid out as `out` and added before the activation. Large layers split their work over
    /// `threads` (the same bits for any thread count). An error (nothing written) when a slice is short
    /// or a size overflows.
    pub fn run(
        &self,
        batch: usize,
        input: &[f32],
        residual: Option<&[f32]>,
        out: &mut [f32],
        scratch: &mut ConvScratch,
        threads: &Threads,
    ) -> Result<(), GemmError> {
        let g = &self.g;
        let in_img = g.in_channels * g.in_h * g.in_w;
        let ohw = self.oh * self.ow;
        let out_img = g.out_channels * ohw;
        check_images(batch, [in_img, out_img], input, residual, out)?;
        if let Plan::Linear(l) = &self.plan {
            return l.run(batch, input, residual, out, &mut scratch.linear, threads);
        }
        let (cin_g, cout_g) = (g.in_channels / g.groups, g.out_channels / g.groups);
        let (in_grp, out_grp) = (cin_g * g.in_h * g.in_w, cout_g * ohw);
        let kk = g.kh * g.kw;
        // Multiply-adds per image, to decide whether splitting pays.
        let macs = out_img.saturating_mul(cin_g * kk);
        let cost = if is_depthwise(g) { macs.saturating_mul(DEPTHWISE_MAC_COST) } else { macs };
        // Threads the layer splits over, and how many tasks of at most `units` it cuts a split
        // into.
        let parallel = cost >= PARALLEL_MACS;
        let parts = if parallel { threads.available() } else { 1 };
        let tasks = |units: usize| match parallel {
            true => threads.tasks_for(TASKS_PER_THREAD, units),
            false => 1,
        };
        // Tasks of a split into runs of `units` pixel units (`unit_pixels` each) whose every
        // task reads all the weights: [`WEIGHT_READ_PIXELS`] pixels a task at least, one task
        // a thread at least.
        let reading_tasks = |units: usize, unit_pixels: usize| {
            let most = (units * unit_pixels / WEIGHT_READ_PIXELS).clamp(1, units.max(1));
            tasks(most).max(parts.min(units))
        };
        for b in 0..batch {
            let x_img = &input[b * in_img..][..in_img];
            let y_img = &mut out[b * out_img..][..out_img];
            let r_img = residual.map(|r| &r[b * out_img..][..out_img]);
            // Group `gi`'s input, residual, output and bias.
            let groups = y_img.chunks_exact_mut(out_grp).enumerate().map(|(gi, y)| GroupIo {
                x: &x_img[gi * in_grp..][..in_grp],
                res: r_img.map(|r| &r[gi * out_grp..][..out_grp]),
                y,
                bias: self.bias.as_ref().map(|v| &v[gi * cout_g..][..cout_g]),
            });
            match &self.plan {
                Plan::Depthwise { phases, blocks: Some(blocks), .. }
                    if self.layouts.input == Layout::Nhwc =>
                {
                    // Each task takes a run of output rows, every block of them.
                    let runs = split(self.oh, 1, tasks(self.oh));
                    let tasks = with_pieces(runs, y_img, self.ow * g.groups);
                    threads.for_each(tasks, |(rows, y)| {
                        self.depthwise_rows(
                            blocks,
                            &phases.spans[rows.clone()],
                            x_img,
                            r_img,
                            rows.start,
                            y,
                        )
                    });
                }
                Plan::Depthwise { phases, blocks: Some(blocks), .. } => {
                    // Each task takes a run of whole blocks.
                    let runs = split(g.groups, BLOCK, tasks(g.groups / BLOCK));
                    let tasks = with_pieces(runs, y_img, ohw);
                    threads.for_each_with(tasks, &mut scratch.parts, |part, (chans, y)| {
                        for (y, c0) in y.chunks_mut(BLOCK * ohw).zip(chans.step_by(BLOCK)) {
                            let block = Block { conv: self, blocks, spans: &phases.spans, c0 };
                            block.run(x_img, r_img, y, &mut part.row);
                        }
                    });
                }
                Plan::Depthwise { weight, phases, blocks: None } => {
                    // Channel planes are independent: each task takes a run of them.
                    let runs = split(g.groups, 1, tasks(g.groups));
                    let tasks = with_pieces(runs, y_img, ohw);
                    threads.for_each_with(tasks, &mut scratch.parts, |part, (chans, y)| {
                        for (i, c) in chans.enumerate() {
                            let plane = Plane {
                                g,
                                oh: self.oh,
                                ow: self.ow,
                                weight: &weight[c * kk..][..kk],
                                phases,
                                bias: self.bias.as_ref().map_or(0.0, |v| v[c]),
                                act: self.act,
                            };
                            let x = &x_img[c * in_grp..][..in_grp];
                            let res = r_img.map(|r| &r[c * ohw..][..ohw]);
                            plane.run(x, res, &mut y[i * ohw..][..ohw], &mut part.row);
                        }
                    });
                }
                Plan::Gemm { groups: packed, pointwise } => {
                    for (a, io) in packed.iter().zip(groups) {
                        let (mr, kdim) = (a.panel_rows(), a.k());
                        // Splitting the output channels makes every task pack the whole
                        // input (so there is one task a thread); splitting the pixels makes
                        // every task compute into its own buffer, copied into place after.
                        // Channels split when the input is no bigger than the output and each
                        // thread gets two row panels.
                        if parts > 1 && *pointwise && cout_g >= kdim && cout_g >= 2 * mr * parts {
                            self.split_channels(a, io, parts, scratch, threads)?;
                        } else {
                            let cols = reading_tasks(ohw.div_ceil(a.tile_cols()), a.tile_cols());
                            self.split_pixels(a, *pointwise, io, cols, scratch, threads)?;
                        }
                    }
                }
                Plan::PixelRows { weight } => {
                    // Any row count makes a tile (A is read in place): the tasks split the
                    // pixels evenly, to a row (7x7 pixels on two threads: 25 and 24, not 28
                    // and 21), each at least a strip of the kernel's tiles.
                    let strips = ohw.div_ceil(weight.tile_rows());
                    self.pixel_rows(
                        r_img,
                        y_img,
                        1,
                        reading_tasks(strips, weight.tile_rows()).max(parts.min(ohw)),
                        &mut scratch.parts,
                        threads,
                        |rows, y, ep, gemm| self.pixels_of(weight, x_img, rows, y, ep, gemm),
                    )?;
                }
                Plan::Indirect { weight, ind, copy } => {
                    let x_img = match copy {
                        Some(pad) => {
                            let dims = [g.in_channels, g.in_h, g.in_w];
                            let rows = tasks(g.in_h);
                            channels_last(x_img, dims, *pad, &mut scratch.col, rows, threads);
                            &scratch.col[..]
                        }
                        None => x_img,
                    };
                    let (cout, mr) = (g.out_channels, ind.panel_rows());
                    // `scratch.col` holds the copy: the tasks take the rest of the scratch.
                    let ConvScratch { parts: parts_scratch, apart, .. } = scratch;
                    let col_panels = cout.div_ceil(weight.panel_cols());
                    if parts > 1 && ohw.div_ceil(mr) < 4 * parts && col_panels >= parts {
                        // Few pixels: each task streams its share of the weights instead of
                        // all of them.
                        let io = (x_img, r_img, y_img);
                        let n = tasks(col_panels);
                        self.indirect_channels(
                            weight,
                            ind,
                            io,
                            n,
                            (parts_scratch, apart),
                            threads,
                        )?;
                        continue;
                    }
                    self.pixel_rows(
                        r_img,
                        y_img,
                        mr,
                        reading_tasks(ohw.div_ceil(mr), mr),
                        parts_scratch,
                        threads,
                        |rows, y, ep, gemm| {
                            gemm_indirect(ind, x_img, rows, weight, 0..cout, y, cout, ep, gemm)
                        },
                    )?;
                }
                Plan::Grouped(k) => {
                    // Each task takes a run of output pixels, whole runs of the kernel's.
                    let cout = g.out_channels;
                    let runs = split(ohw, grouped::PIXELS, tasks(ohw.div_ceil(grouped::PIXELS)));
                    // A clamp after no residual is applied in registers.
                    let clamp = match (r_img, self.act) {
                        (None, Activation::Clamp { min, max }) => Some((min, max)),
                        _ => None,
                    };
                    threads.for_each(with_pieces(runs, y_img, cout), |(pixels, y)| {
                        let res = r_img.map(|r| &r[pixels.start * cout..][..pixels.len() * cout]);
                        k.pixels(x_img, pixels, clamp, y);
                        if let Some(r) = res {
                            y.iter_mut().zip(r).for_each(|(y, &r)| *y += r);
                        }
                        if clamp.is_none() {
                            self.act.apply_in_place(y);
                        }
                    });
                }
                Plan::Winograd(w) => {
                    let bias = self.bias.as_deref();
                    // A row of tiles is two rows of output pixels.
                    let n = reading_tasks(w.tile_rows(), 2 * self.ow);
                    w.run(x_img, r_img, y_img, bias, self.act, n, &mut scratch.parts, threads);
                    first_error(&mut scratch.parts)?;
                }
                Plan::FewPixels { weight } => {
                    let n = tasks(weight.n().div_ceil(weight.panel_cols()));
                    for io in groups {
                        self.few_pixels(weight, io, n, scratch, threads)?;
                    }
                }
                // Run above, for the whole batch.
                Plan::Linear(_) => {}
            }
        }
        Ok(())
    }

    /// A product whose rows are the output pixels (an NHWC output `y`), split into `parts`
    /// tasks of whole units of `unit` rows: `product(rows, y, ep, gemm)` computes pixels
    /// `rows` into `y` (their outputs) with `ep` (the bias per channel, those pixels'
    /// residual, the activation).
    #[allow(clippy::too_many_arguments)]
    fn pixel_rows(
        &self,
        residual: Option<&[f32]>,
        y: &mut [f32],
        unit: usize,
        parts: usize,
        scratch: &mut Vec<PartScratch>,
        threads: &Threads,
        product: impl Fn(
                std::ops::Range<usize>,
                &mut [f32],
                &Epilogue<'_>,
                &mut GemmScratch,
            ) -> Result<(), GemmError>
            + Sync,
    ) -> Result<(), GemmError> {
        let (cout, ohw) = (self.g.out_channels, self.oh * self.ow);
        let runs = split(ohw, unit, parts.min(ohw.div_ceil(unit)));
        let tasks = with_pieces(runs, y, cout);
        let bias = self.bias.as_deref().map_or(Bias::None, Bias::PerCol);
        threads.for_each_with(tasks, scratch, |part, (rows, y)| {
            let res = residual.map(|r| &r[rows.start * cout..][..rows.len() * cout]);
            let ep = Epilogue { bias, residual: res, act: self.act };
            let result = product(rows, y, &ep, &mut part.gemm);
            part.note(result);
        });
        first_error(scratch)
    }

    /// [`Plan::Indirect`] with the output channels split into `parts` tasks of whole panels,
    /// each computing every pixel of its channels into its own piece of `apart`; the pieces
    /// are then copied into `y`, adding the residual and applying the activation after it on
    /// the way (the same operations, in the same order, as the fused epilogue).
    fn indirect_channels(
        &self,
        weight: &PackedB,
        ind: &Indirection,
        (x, res, y): (&[f32], Option<&[f32]>, &mut [f32]),
        parts: usize,
        (scratch, apart): (&mut Vec<PartScratch>, &mut Vec<f32>),
        threads: &Threads,
    ) -> Result<(), GemmError> {
        let (cout, ohw) = (self.g.out_channels, self.oh * self.ow);
        let act = if res.is_some() { Activation::None } else { self.act };
        let runs = || split(cout, weight.panel_cols(), parts);
        let apart = window(apart, ohw * cout);
        threads.for_each_with(with_pieces(runs(), apart, ohw), scratch, |part, (cols, out)| {
            let w = cols.len();
            let bias = self.bias.as_deref().map_or(Bias::None, |b| Bias::PerCol(&b[cols.start..]));
            let ep = Epilogue { bias, residual: None, act };
            let result = gemm_indirect(ind, x, 0..ohw, weight, cols, out, w, &ep, &mut part.gemm);
            part.note(result);
        });
        first_error(scratch)?;
        for (cols, block) in with_pieces(runs(), apart, ohw) {
            place_columns(block, cols, y, cout, res, self.act);
        }
        Ok(())
    }

    /// Output rows `row0..` of an NHWC depthwise convolution into `y` (those rows);
    /// `spans` are those rows' input rows.
    pub(super) fn depthwise_rows(
        &self,
        blocks: &ChannelBlocks,
        spans: &[RowSpan],
        x: &[f32],
        res: Option<&[f32]>,
        row0: usize,
        y: &mut [f32],
    ) {
        let g = &self.g;
        let (c, kk) = (g.groups, g.kh * g.kw);
        let clamp = self.act.clamp();
        let plane = ChannelPlane {
            data: x,
            blocks: c / BLOCK,
            row_stride: g.in_w * c,
            pixel_stride: c,
            cols: g.in_w,
            pad: g.padding[1],
            spans,
            dilation_h: g.dilation[0],
            stride_w: g.stride[1],
            dilation_w: g.dilation[1],
            weights: &blocks.weights[..c / BLOCK * kk * BLOCK],
            kw: g.kw,
        };
        let out = ChannelOut {
            out: y,
            residual: res.map(|r| &r[row0 * self.ow * c..]),
            pixel_stride: c,
            ow: self.ow,
        };
        sum_channels(out, &plane, &blocks.bias, clamp);
        if !c.is_multiple_of(BLOCK) {
            // The last channels as one block ending at the last channel: it overlaps the
            // block before it, whose channels it sums again to the same bits.
            let c0 = c - BLOCK;
            let plane =
                ChannelPlane { data: &x[c0..], blocks: 1, weights: &blocks.tail_weights, ..plane };
            let out = ChannelOut {
                out: &mut y[c0..],
                residual: res.map(|r| &r[row0 * self.ow * c + c0..]),
                pixel_stride: c,
                ow: self.ow,
            };
            sum_channels(out, &plane, &blocks.tail_bias, clamp);
        }
        if self.act.is_pointwise_pass() {
            self.act.apply_in_place(y);
        }
    }

    /// Output pixels `pixels` of a [`Plan::PixelRows`] convolution (`weight` its packed
    /// weights) of the image `x` into `y` (those pixels' outputs), with `ep`.
    fn pixels_of(
        &self,
        weight: &PackedB,
        x: &[f32],
        pixels: std::ops::Range<usize>,
        y: &mut [f32],
        ep: &Epilogue<'_>,
        gemm: &mut GemmScratch,
    ) -> Result<(), GemmError> {
        self.with_source(x, true, |src| {
            let at = ColumnsOf::new(src, pixels)?;
            gemm_packed_b_at(&at, weight, y, self.g.out_channels, ep, gemm)
        })
    }

    /// [`PackedConv2d::pixels_of`] with the convolution's own bias and activation and no
    /// residual.
    pub(super) fn pointwise_pixels(
        &self,
        weight: &PackedB,
        x: &[f32],
        pixels: std::ops::Range<usize>,
        y: &mut [f32],
        gemm: &mut GemmScratch,
    ) -> Result<(), GemmError> {
        let bias = self.bias.as_deref().map_or(Bias::None, Bias::PerCol);
        let ep = Epilogue { bias, residual: None, act: self.act };
        self.pixels_of(weight, x, pixels, y, &ep, gemm)
    }

    /// The right operand of one group's product: the input itself (pointwise) or its lazy
    /// im2col, handed to `f`.
    fn with_source<R>(
        &self,
        x: &[f32],
        pointwise: bool,
        f: impl FnOnce(&dyn PackB) -> Result<R, GemmError>,
    ) -> Result<R, GemmError> {
        let g = &self.g;
        let (cin_g, ohw) = (g.in_channels / g.groups, self.oh * self.ow);
        if pointwise && self.layouts.input == Layout::Nhwc {
            // Channel `c` of pixel `p` at x[p * Cin + c].
            f(&MatRef::new(x, cin_g, ohw, 1, cin_g)?)
        } else if pointwise {
            f(&MatRef::new(x, cin_g, ohw, ohw, 1)?)
        } else {
            let geometry = [cin_g, g.in_h, g.in_w];
            f(&Im2col::new(x, geometry, [g.kh, g.kw], g.stride, g.padding, g.dilation)?)
        }
    }

    /// One group's GEMM with its output channels split into `parts` runs of whole panels,
    /// each part packing the input for itself and writing its rows of `y` in place.
    fn split_channels(
        &self,
        a: &PackedA,
        io: GroupIo<'_>,
        parts: usize,
        scratch: &mut ConvScratch,
        threads: &Threads,
    ) -> Result<(), GemmError> {
        let GroupIo { x, res, y, bias } = io;
        let ohw = self.oh * self.ow;
        let runs = split(a.m(), a.panel_rows(), parts);
        let tasks = with_pieces(runs, y, ohw);
        threads.for_each_with(tasks, &mut scratch.parts, |part, (rows, y)| {
            let ep = Epilogue {
                bias: bias.map_or(Bias::None, |v| Bias::PerRow(&v[rows.clone()])),
                residual: res.map(|r| &r[rows.start * ohw..rows.end * ohw]),
                act: self.act,
            };
            let result = self.with_source(x, true, |src| {
                gemm_packed_a_rows(a, rows, src, y, ohw, &ep, &mut part.gemm)
            });
            part.note(result);
        });
        scratch.outcome()
    }

    /// One group's GEMM with its output pixels split into `parts` tasks of whole register
    /// tiles, each packing its columns of the input and computing them into its own piece of
    /// the scratch; the pieces are then copied into `y`, adding the residual and applying the
    /// activation after it on the way (the same operations, in the same order, as the fused
    /// epilogue). One task computes straight into `y`.
    fn split_pixels(
        &self,
        a: &PackedA,
        pointwise: bool,
        io: GroupIo<'_>,
        parts: usize,
        scratch: &mut ConvScratch,
        threads: &Threads,
    ) -> Result<(), GemmError> {
        let GroupIo { x, res, y, bias } = io;
        let (m, ohw) = (a.m(), self.oh * self.ow);
        let bias = bias.map_or(Bias::None, Bias::PerRow);
        if parts <= 1 {
            let ep = Epilogue { bias, residual: res, act: self.act };
            let gemm = &mut caller_scratch(&mut scratch.parts).gemm;
            return self.with_source(x, pointwise, |src| {
                gemm_packed_a_rows(a, 0..m, src, y, ohw, &ep, gemm)
            });
        }
        let act = if res.is_some() { Activation::None } else { self.act };
        let ep = Epilogue { bias, residual: None, act };
        let runs = || split(ohw, a.tile_cols(), parts);
        let ConvScratch { parts: scratch, apart, .. } = scratch;
        let apart = window(apart, m * ohw);
        threads.for_each_with(with_pieces(runs(), apart, m), scratch, |part, (cols, out)| {
            let w = cols.len();
            let result = self.with_source(x, pointwise, |src| {
                let src = ColumnsOf::new(src, cols)?;
                gemm_packed_a_rows(a, 0..m, &src, out, w, &ep, &mut part.gemm)
            });
            part.note(result);
        });
        first_error(scratch)?;
        for (cols, block) in with_pieces(runs(), apart, m) {
            place_columns(block, cols, y, ohw, res, self.act);
        }
        Ok(())
    }

    /// [`Plan::FewPixels`] on one group: the product transposed (pixels as rows), computed
    /// by `parts` threads over runs of output channels, each transposing its channels into
    /// NCHW `y` with the residual and the activation after it.
    fn few_pixels(
        &self,
        weight: &PackedB,
        io: GroupIo<'_>,
        parts: usize,
        scratch: &mut ConvScratch,
        threads: &Threads,
    ) -> Result<(), GemmError> {
        let GroupIo { x, res, y, bias } = io;
        let g = &self.g;
        let ohw = self.oh * self.ow;
        let geo = g.per_group(self.oh, self.ow);
        let kdim = weight.k();
        let col = &mut scratch.col;
        col.clear();
        col.resize(kdim * ohw, 0.0);
        im2col(&geo, x, [g.in_h * g.in_w, g.in_w, 1], col);
        // Rows are pixels: element (p, k) of the transposed im2col matrix.
        let a = MatRef::new(col, ohw, kdim, 1, ohw)?;
        // The residual is laid out NCHW, so it and the activation after it are applied while
        // transposing.
        let act = if res.is_some() { Activation::None } else { self.act };
        let runs = split(weight.n(), weight.panel_cols(), parts);
        let tasks = with_pieces(runs, y, ohw);
        threads.for_each_with(tasks, &mut scratch.parts, |part, (chans, y)| {
            let w = chans.len();
            let product = window(&mut part.out, ohw * w);
            let ep = Epilogue {
                bias: bias.map_or(Bias::None, |b| Bias::PerCol(&b[chans.clone()])),
                residual: None,
                act,
            };
            let start = chans.start;
            let result = gemm_packed_b_cols(a, weight, chans, product, w, &ep, &mut part.gemm);
            for (c, row) in y.chunks_exact_mut(ohw).enumerate() {
                for (p, o) in row.iter_mut().enumerate() {
                    *o = product[p * w + c];
                }
                if let Some(r) = res {
                    for (o, &r) in row.iter_mut().zip(&r[(start + c) * ohw..][..ohw]) {
                        *o += r;
                    }
                    self.act.apply_in_place(row);
                }
            }
            part.note(result);
        });
        scratch.outcome()
    }
}

/// `x` (`[c, h, w]`) channels-last into `out`, with `pad` zero rows above and below and
/// zero columns left and right; the rows split into `parts` runs over `threads`.
fn channels_last(
    x: &[f32],
    [c, h, w]: [usize; 3],
    pad: [usize; 2],
    out: &mut Vec<f32>,
    parts: usize,
    threads: &Threads,
) {
    let line = (w + 2 * pad[1]) * c;
    let len = (h + 2 * pad[0]) * line;
    let (top, rest) = window(out, len).split_at_mut(pad[0] * line);
    let (inside, bottom) = rest.split_at_mut(h * line);
    top.fill(0.0);
    bottom.fill(0.0);
    threads.for_each(with_pieces(split(h, 1, parts), inside, line), |(rows, lines)| {
        for (y, line) in rows.zip(lines.chunks_exact_mut(line)) {
            let (left, rest) = line.split_at_mut(pad[1] * c);
            let (pixels, right) = rest.split_at_mut(w * c);
            left.fill(0.0);
            right.fill(0.0);
            let row = |ch: usize| &x[(ch * h + y) * w..][..w];
            if c == 3 {
                // An image's three colours: pixel by pixel, one sequential write.
                interleave3(row(0), row(1), row(2), pixels);
            } else {
                // Channel by channel, each value to its pixel's slot (one pass per channel
                // over the output row, which stays in cache).
                for ch in 0..c {
                    for (px, &v) in pixels.chunks_exact_mut(c).zip(row(ch)) {
                        px[ch] = v;
                    }
                }
            }
        }
    });
}

/// Copies `block` (a part's rows of `cols.len()` values, row-major) into columns `cols` of
/// `y` (row stride `ld`): with a residual (laid out as `y`), `act(block + residual)`, the
/// operations of the fused epilogue after a part computed without them; without one, as is
/// (the part applied the activation).
fn place_columns(
    block: &[f32],
    cols: std::ops::Range<usize>,
    y: &mut [f32],
    ld: usize,
    res: Option<&[f32]>,
    act: Activation,
) {
    let w = cols.len();
    for (row, src) in block.chunks_exact(w).enumerate() {
        let at = row * ld + cols.start;
        let dst = &mut y[at..][..w];
        match res {
            Some(r) => add_then_activate(dst, src, &r[at..][..w], act),
            None => dst.copy_from_slice(src),
        }
    }
}

/// `dst = act(src + residual)`, the activation matched once so that the common ones (none,
/// clamp) vectorize.
fn add_then_activate(dst: &mut [f32], src: &[f32], residual: &[f32], act: Activation) {
    let sums = dst.iter_mut().zip(src.iter().zip(residual));
    match act {
        Activation::None => sums.for_each(|(d, (&s, &r))| *d = s + r),
        Activation::Clamp { min, max } => {
            sums.for_each(|(d, (&s, &r))| *d = clamp1(s + r, min, max))
        }
        _ => {
            sums.for_each(|(d, (&s, &r))| *d = s + r);
            act.apply_in_place(dst);
        }
    }
}

/// One group's input, residual, output and bias.
struct GroupIo<'a> {
    x: &'a [f32],
    res: Option<&'a [f32]>,
    y: &'a mut [f32],
    bias: Option<&'a [f32]>,
}

/// How a depthwise convolution lays out an input row so that every tap reads `LANES`
/// contiguous values. The row, zero-padded, is split into its `stride` phases: phase `ph`
/// holds padded columns `ph, ph + s, ph + 2s, ...` (`len` values, zeros beyond the row). Tap
/// `kx` of output column `ox` reads padded column `ox * s + kx * d`, which is element
/// `ox + (kx * d) / s` of phase `(kx * d) % s`: `taps[kx]` is that element's offset for
/// `ox = 0` in the row's phases laid end to end. `spans[oy]` are the input rows output row
/// `oy` reads.
#[derive(Debug)]
pub(super) struct Phases {
    len: usize,
    taps: Vec<usize>,
    pub(super) spans: Vec<RowSpan>,
}

impl Phases {
    fn heap_bytes(&self) -> usize {
        self.taps.capacity() * size_of::<usize>()
            + self.spans.capacity() * size_of::<crate::compute::conv2d::depthwise::rows::RowSpan>()
    }

    fn new(g: &Conv2dGeometry, oh: usize, ow: usize) -> Result<Phases, GemmError> {
        let (s, d) = (g.stride[1], g.dilation[1]);
        let reach = mul(g.kw - 1, d)?;
        let len = mul(ow.div_ceil(LANES), LANES)?
            .checked_add(reach / s)
            .ok_or(GemmError::Overflow("conv2d"))?;
        mul(mul(len, s)?, g.in_h)?;
        let taps = (0..g.kw).map(|kx| (kx * d % s) * len + kx * d / s).collect();
        let (sh, dh, ph) = (g.stride[0], g.dilation[0], g.padding[0]);
        let spans = row_spans(g.in_h, oh, g.kh, sh, dh, ph);
        Ok(Phases { len, taps, spans })
    }

    /// Values of one phased row.
    fn row_len(&self, g: &Conv2dGeometry) -> usize {
        self.len * g.stride[1]
    }

    /// Lays `row` (one input row) out as its phases in `dst` (`row_len` values).
    fn fill(&self, g: &Conv2dGeometry, row: &[f32], dst: &mut [f32]) {
        let (s, p) = (g.stride[1], g.padding[1]);
        for (ph, dst) in dst.chunks_exact_mut(self.len).enumerate() {
            // Elements j0..j0 + n of this phase lie inside the row (from column c0 on), the
            // others in the padding.
            let j0 = p.saturating_sub(ph).div_ceil(s).min(self.len);
            let c0 = j0 * s + ph - p;
            let n =
                if c0 < row.len() { (self.len - j0).min((row.len() - c0).div_ceil(s)) } else { 0 };
            let (pad, rest) = dst.split_at_mut(j0);
            let (inside, tail) = rest.split_at_mut(n);
            pad.fill(0.0);
            tail.fill(0.0);
            let src = &row[c0.min(row.len())..];
            match s {
                1 => inside.copy_from_slice(&src[..n]),
                2 => {
                    for (d, pair) in inside.iter_mut().zip(src.chunks_exact(2)) {
                        *d = pair[0];
                    }
                    if let (Some(d), [.., last]) = (inside.get_mut(src.len() / 2), src) {
                        *d = *last; // an odd row's last column
                    }
                }
                _ => {
                    for (d, &v) in inside.iter_mut().zip(src.iter().step_by(s)) {
                        *d = v;
                    }
                }
            }
        }
    }
}

/// One channel plane of a depthwise convolution.
struct Plane<'a> {
    g: &'a Conv2dGeometry,
    oh: usize,
    ow: usize,
    /// `[kh, kw]` taps.
    weight: &'a [f32],
    phases: &'a Phases,
    bias: f32,
    act: Activation,
}

impl Plane<'_> {
    /// `out[oy, ox] = act(sum_{ky, kx} w[ky, kx] * x[oy*s + ky*d - p, ox*s + kx*d - p]
    /// plus bias plus residual[oy, ox])`, summed in `ky`, `kx` order (taps in the padding
    /// add zero; rows in the padding are skipped). The input rows are first laid out as
    /// [`Phases`] in `scratch`, so each output value is a [`sum_taps`] of contiguous runs.
    fn run(&self, x: &[f32], res: Option<&[f32]>, out: &mut [f32], scratch: &mut Vec<f32>) {
        let g = self.g;
        let (h, w, ow) = (g.in_h, g.in_w, self.ow);
        let row_len = self.phases.row_len(g);
        // Every value is written by `fill`: the buffer only grows.
        let scratch = window(scratch, h * row_len);
        for (row, dst) in x.chunks_exact(w).zip(scratch.chunks_exact_mut(row_len)) {
            self.phases.fill(g, row, dst);
        }
        let plane = TapPlane {
            plane: &scratch[..],
            row_len,
            spans: &self.phases.spans,
            dilation: g.dilation[0],
            weights: self.weight,
            taps: &self.phases.taps,
        };
        let clamp = self.act.clamp();
        let out = &mut out[..self.oh * ow];
        sum_taps(out, ow, plane, TapEpilogue { bias: self.bias, residual: res, clamp });
        if self.act.is_pointwise_pass() {
            self.act.apply_in_place(out);
        }
    }
}

/// Depthwise weights and bias regrouped for [`sum_channels`]: block `b` holds channels
/// `b * BLOCK ..`, as `[kh][kw][BLOCK]` weights and `BLOCK` biases (zero past the last
/// channel); an input row is laid out as `cols` pixels. When the channels do not fill whole
/// blocks and there are more than a block of them, the tail block holds the last `BLOCK`
/// channels the same way: channels-last images are summed on whole blocks, then on it.
#[derive(Debug)]
pub(super) struct ChannelBlocks {
    weights: Vec<f32>,
    bias: Vec<f32>,
    tail_weights: Vec<f32>,
    tail_bias: Vec<f32>,
    cols: usize,
}

impl ChannelBlocks {
    fn heap_bytes(&self) -> usize {
        let tail = self.tail_weights.capacity() + self.tail_bias.capacity();
        (self.weights.capacity() + self.bias.capacity() + tail) * 4
    }

    fn new(
        g: &Conv2dGeometry,
        ow: usize,
        weight: &[f32],
        bias: Option<&[f32]>,
    ) -> Result<ChannelBlocks, GemmError> {
        let (c, kk) = (g.groups, g.kh * g.kw);
        let blocks = c.div_ceil(BLOCK);
        let mut weights = vec![0f32; mul(mul(blocks, kk)?, BLOCK)?];
        for (ch, taps) in weight.chunks_exact(kk).enumerate() {
            let (b, l) = (ch / BLOCK, ch % BLOCK);
            for (t, &w) in taps.iter().enumerate() {
                weights[(b * kk + t) * BLOCK + l] = w;
            }
        }
        let mut padded = vec![0f32; blocks * BLOCK];
        if let Some(bias) = bias {
            padded[..c].copy_from_slice(bias);
        }
        let (mut tail_weights, mut tail_bias) = (Vec::new(), Vec::new());
        if c > BLOCK && !c.is_multiple_of(BLOCK) {
            let c0 = c - BLOCK;
            tail_weights = vec![0f32; kk * BLOCK];
            for (l, taps) in weight.chunks_exact(kk).skip(c0).enumerate() {
                for (t, &w) in taps.iter().enumerate() {
                    tail_weights[t * BLOCK + l] = w;
                }
            }
            tail_bias = bias.map_or_else(|| vec![0f32; BLOCK], |b| b[c0..].to_vec());
        }
        let cols = mul(ow - 1, g.stride[1])?
            .checked_add(mul(g.kw - 1, g.dilation[1])?)
            .and_then(|v| v.checked_add(1))
            .ok_or(GemmError::Overflow("conv2d"))?;
        mul(mul(cols, BLOCK)?, g.in_h)?;
        Ok(ChannelBlocks { weights, bias: padded, tail_weights, tail_bias, cols })
    }
}

/// One block of a depthwise convolution on [`ChannelBlocks`]: channels `c0..` (at most
/// [`BLOCK`], as many as its output holds planes).
struct Block<'a> {
    conv: &'a PackedConv2d,
    blocks: &'a ChannelBlocks,
    spans: &'a [RowSpan],
    c0: usize,
}

impl Block<'_> {
    /// Lays the block's input planes out channels-last in `scratch`, sums them, and writes
    /// the planes of `out` (NCHW) with the residual and activation.
    fn run(&self, x: &[f32], res: Option<&[f32]>, out: &mut [f32], scratch: &mut Vec<f32>) {
        let (conv, blocks) = (self.conv, self.blocks);
        let g = &conv.g;
        let (h, w, ohw) = (g.in_h, g.in_w, conv.oh * conv.ow);
        let (cols, pad) = (blocks.cols, g.padding[1]);
        let n = out.len() / ohw;
        let (plane_len, out_len) = (h * cols * BLOCK, ohw * BLOCK);
        // Every value read is written first (lanes past `n` are never stored): only grows.
        let (plane, sums) = window(scratch, plane_len + out_len).split_at_mut(plane_len);
        // Input columns inside the padded row (the ones past it are never read).
        let inside = w.min(cols.saturating_sub(pad));
        for (r, row) in plane.chunks_exact_mut(cols * BLOCK).enumerate() {
            row[..pad.min(cols) * BLOCK].fill(0.0);
            row[(pad + inside).min(cols) * BLOCK..].fill(0.0);
            for c in 0..n {
                let src = &x[((self.c0 + c) * h + r) * w..][..inside];
                for (px, &v) in row[pad * BLOCK..].chunks_exact_mut(BLOCK).zip(src) {
                    px[c] = v;
                }
            }
        }
        let b = self.c0 / BLOCK;
        let kk = g.kh * g.kw;
        let channel_plane = ChannelPlane {
            data: plane,
            blocks: 1,
            row_stride: cols * BLOCK,
            pixel_stride: BLOCK,
            cols,
            pad: 0,
            spans: self.spans,
            dilation_h: g.dilation[0],
            stride_w: g.stride[1],
            dilation_w: g.dilation[1],
            weights: &blocks.weights[b * kk * BLOCK..][..kk * BLOCK],
            kw: g.kw,
        };
        let bias: &[f32; BLOCK] =
            blocks.bias[b * BLOCK..][..BLOCK].try_into().expect("BLOCK biases per block");
        let clamp = conv.act.clamp();
        // With a residual, the clamp comes after it, below.
        let sums = ChannelOut { out: sums, residual: None, pixel_stride: BLOCK, ow: conv.ow };
        sum_channels(sums, &channel_plane, bias, clamp.filter(|_| res.is_none()));
        let sums = &scratch[plane_len..][..out_len];
        for (c, y) in out.chunks_exact_mut(ohw).enumerate() {
            for (o, px) in y.iter_mut().zip(sums.chunks_exact(BLOCK)) {
                *o = px[c];
            }
            if let Some(r) = res {
                for (o, &r) in y.iter_mut().zip(&r[(self.c0 + c) * ohw..][..ohw]) {
                    let v = *o + r;
                    *o = clamp.map_or(v, |(lo, hi)| clamp_as_vectors(v, lo, hi));
                }
            }
            if conv.act.is_pointwise_pass() {
                conv.act.apply_in_place(y);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::sgemm::tests::act_ref;

    /// Naive f64 grouped convolution + bias + residual (before the activation), NCHW.
    fn conv_ref(
        g: &Conv2dGeometry,
        (oh, ow): (usize, usize),
        batch: usize,
        x: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        res: Option<&[f32]>,
    ) -> (Vec<f64>, Vec<f64>) {
        let (cin_g, cout_g) = (g.in_channels / g.groups, g.out_channels / g.groups);
        let n = batch * g.out_channels * oh * ow;
        let (mut out, mut mag) = (vec![0f64; n], vec![0f64; n]);
        for b in 0..batch {
            for co in 0..g.out_channels {
                let gi = co / cout_g;
                for oy in 0..oh {
                    for ox in 0..ow {
                        let (mut s, mut m) = (0f64, 0f64);
                        for ci in 0..cin_g {
                            let c = gi * cin_g + ci;
                            for ky in 0..g.kh {
                                for kx in 0..g.kw {
                                    let iy = (oy * g.stride[0] + ky * g.dilation[0]) as isize
                                        - g.padding[0] as isize;
                                    let ix = (ox * g.stride[1] + kx * g.dilation[1]) as isize
                                        - g.padding[1] as isize;
                                    if iy < 0
                                        || ix < 0
                                        || iy as usize >= g.in_h
                                        || ix as usize >= g.in_w
                                    {
                                        continue;
                                    }
                                    let xv = x[((b * g.in_channels + c) * g.in_h + iy as usize)
                                        * g.in_w
                                        + ix as usize];
                                    let wv = w[((co * cin_g + ci) * g.kh + ky) * g.kw + kx];
                                    let t = f64::from(xv) * f64::from(wv);
                                    s += t;
                                    m += t.abs();
                                }
                            }
                        }
                        let at = ((b * g.out_channels + co) * oh + oy) * ow + ox;
                        let extra = [bias.map_or(0.0, |v| v[co]), res.map_or(0.0, |r| r[at])];
                        for e in extra {
                            s += f64::from(e);
                            m += f64::from(e.abs());
                        }
                        out[at] = s;
                        mag[at] = m;
                    }
                }
            }
        }
        (out, mag)
    }

    fn random_geometry(rng: &mut fastrand::Rng) -> Conv2dGeometry {
        let k = [1, 3, 5, 7][rng.usize(0..4)];
        let groups = [1, 1, 2, 3, 4, 0][rng.usize(0..6)]; // 0: depthwise
        let (cin, cout) = if groups == 0 {
            let c = rng.usize(1..40); // channel blocks of 16 and a partial one
            (c, c)
        } else {
            (groups * rng.usize(1..5), groups * rng.usize(1..7))
        };
        Conv2dGeometry {
            in_channels: cin,
            in_h: rng.usize(1..14),
            in_w: rng.usize(1..14),
            out_channels: cout,
            kh: k,
            kw: if rng.bool() { k } else { [1, 3, 5][rng.usize(0..3)] },
            stride: [rng.usize(1..3), rng.usize(1..3)],
            padding: [rng.usize(0..4), rng.usize(0..4)],
            dilation: [rng.usize(1..3), rng.usize(1..3)],
            groups: if groups == 0 { cin } else { groups },
        }
    }

    impl PackedConv2d {
        /// The same convolution with a depthwise plan on channel blocks (`on`) or on planes.
        fn with_channel_blocks(mut self, on: bool) -> Self {
            let PackedConv2d { g, ow, plan, bias, .. } = &mut self;
            if let Plan::Depthwise { weight, blocks, .. } = plan {
                *blocks = on.then(|| ChannelBlocks::new(g, *ow, weight, bias.as_deref()).unwrap());
            }
            self
        }
    }

    #[test]
    fn packed_conv_matches_direct_reference() {
        let mut rng = fastrand::Rng::with_seed(0xc0);
        let acts = [
            Activation::None,
            Activation::RELU,
            Activation::Clamp { min: 0.0, max: 6.0 },
            Activation::Hardswish,
            Activation::Silu,
            Activation::Gelu,
        ];
        let (mut tested, mut depthwise, mut pointwise, mut on_blocks, mut nhwc) = (0, 0, 0, 0, 0);
        let mut one_pixel = 0;
        let mut scratch = ConvScratch::default();
        let threads = Threads::default();
        while tested < 300 {
            let mut g = random_geometry(&mut rng);
            if rng.usize(0..6) == 0 {
                (g.kh, g.kw, g.stride, g.padding) = (1, 1, [1, 1], [0, 0]);
            }
            // Squeeze-excite's layers: one-pixel images.
            if rng.usize(0..10) == 0 {
                (g.kh, g.kw, g.stride, g.padding, g.dilation) = (1, 1, [1, 1], [0, 0], [1, 1]);
                (g.in_h, g.in_w, g.groups) = (1, 1, 1);
                g.in_channels = rng.usize(1..700);
                g.out_channels = rng.usize(1..300);
            }
            let act = acts[rng.usize(0..acts.len())];
            // Depthwise layers with whole blocks of channels, so NHWC ones are made.
            if g.groups > 1 && g.groups == g.in_channels && rng.usize(0..3) == 0 {
                let c = BLOCK * rng.usize(1..3);
                (g.in_channels, g.out_channels, g.groups) = (c, c, c);
            }
            let wlen = g.out_channels * (g.in_channels / g.groups) * g.kh * g.kw;
            let w: Vec<f32> = (0..wlen).map(|_| rng.f32() - 0.5).collect();
            let bias: Vec<f32> = (0..g.out_channels).map(|_| rng.f32() - 0.5).collect();
            let bias = if rng.bool() { Some(&bias[..]) } else { None };
            let layouts = [Layout::Nchw, Layout::Nhwc]
                .map(|l| [l, Layout::Nchw, Layout::Nhwc].map(|o| Layouts { input: l, output: o }));
            let supported: Vec<Layouts> =
                layouts.into_iter().flatten().filter(|l| PackedConv2d::supports(&g, *l)).collect();
            let layout = supported[rng.usize(0..supported.len())];
            let conv = match PackedConv2d::with_layouts(g, &w, bias, act, layout) {
                Ok(c) => c,
                Err(GemmError::Invalid(_)) => continue, // kernel larger than the padded input
                Err(e) => panic!("{g:?}: {e}"),
            };
            nhwc += (layout != Layouts::default()) as usize;
            depthwise += matches!(conv.plan, Plan::Depthwise { .. }) as usize;
            pointwise += matches!(conv.plan, Plan::Gemm { pointwise: true, .. }) as usize;
            one_pixel += matches!(conv.plan, Plan::Linear(_)) as usize;
            let batch = rng.usize(1..3);
            let (oh, ow) = conv.out_hw();
            let x: Vec<f32> =
                (0..batch * g.in_channels * g.in_h * g.in_w).map(|_| rng.f32() - 0.5).collect();
            let n = batch * g.out_channels * oh * ow;
            let res: Vec<f32> = (0..n).map(|_| rng.f32() - 0.5).collect();
            let res = if rng.bool() { Some(&res[..]) } else { None };
            let mut out = vec![f32::NAN; n];
            let (cin, cout) = (g.in_channels, g.out_channels);
            if layout.output == Layout::Nhwc {
                let x = if layout.input == Layout::Nhwc {
                    to_nhwc(&x, cin, g.in_h * g.in_w)
                } else {
                    x.clone()
                };
                let r = res.map(|r| to_nhwc(r, cout, oh * ow));
                conv.run(batch, &x, r.as_deref(), &mut out, &mut scratch, &threads).unwrap();
                out = to_nchw(&out, cout, oh * ow);
            } else if layout.input == Layout::Nhwc {
                let x = to_nhwc(&x, cin, g.in_h * g.in_w);
                conv.run(batch, &x, res, &mut out, &mut scratch, &threads).unwrap();
            } else {
                conv.run(batch, &x, res, &mut out, &mut scratch, &threads).unwrap();
            }
            if let (Plan::Depthwise { blocks, .. }, Layout::Nchw) = (&conv.plan, layout.input) {
                // Both depthwise kernels give the same bits.
                let on = blocks.is_none();
                let other = conv.with_channel_blocks(on);
                let mut again = vec![f32::NAN; n];
                other.run(batch, &x, res, &mut again, &mut scratch, &threads).unwrap();
                let same = out.iter().zip(&again).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "{g:?} {act:?}: channel blocks and planes differ");
                on_blocks += 1;
            }
            let (want, mag) = conv_ref(&g, (oh, ow), batch, &x, &w, bias, res);
            for i in 0..n {
                let k = (g.in_channels / g.groups) * g.kh * g.kw;
                let tol = 3.0 * f64::from(f32::EPSILON) * (k as f64 + 2.0) * mag[i] + 1e-30;
                let want = act_ref(act, want[i]);
                let got = f64::from(out[i]);
                // Every activation is at most 1.5-Lipschitz (hardswish at 3); rounding adds an ulp.
                let tol = 1.5 * tol + f64::from(f32::EPSILON) * want.abs();
                assert!((got - want).abs() <= tol, "{g:?} {act:?} [{i}]: {got} vs {want}");
            }
            tested += 1;
        }
        assert!(depthwise > 20 && pointwise > 10, "{depthwise} depthwise, {pointwise} 1x1");
        assert!(on_blocks > 20 && nhwc > 50, "{on_blocks} on blocks, {nhwc} NHWC");
        assert!(one_pixel > 10, "{one_pixel} one-pixel images");
    }

    /// A network's first layer (three colour planes, NCHW in, NHWC out) on images wide
    /// enough for the vectorized colour interleave and a tail after it, against the
    /// reference.
    #[test]
    fn colour_image_to_channels_last_matches_reference() {
        let mut rng = fastrand::Rng::with_seed(0x3c0);
        let threads = Threads::default();
        let mut scratch = ConvScratch::default();
        for (h, w) in [(9, 37), (5, 16), (4, 50)] {
            let g = Conv2dGeometry {
                stride: [2, 2],
                padding: [1, 1],
                ..Conv2dGeometry::new(3, [h, w], 8, [3, 3])
            };
            let layout = Layouts { input: Layout::Nchw, output: Layout::Nhwc };
            let wt: Vec<f32> = (0..8 * 27).map(|_| rng.f32() - 0.5).collect();
            let conv = PackedConv2d::with_layouts(g, &wt, None, Activation::None, layout).unwrap();
            assert_eq!(conv.algorithm(), "igemm");
            let (oh, ow) = conv.out_hw();
            let x: Vec<f32> = (0..3 * h * w).map(|_| rng.f32() - 0.5).collect();
            let mut out = vec![f32::NAN; 8 * oh * ow];
            conv.run(1, &x, None, &mut out, &mut scratch, &threads).unwrap();
            let out = to_nchw(&out, 8, oh * ow);
            let (want, mag) = conv_ref(&g, (oh, ow), 1, &x, &wt, None, None);
            for (i, (&got, &want)) in out.iter().zip(&want).enumerate() {
                let tol = 3.0 * f64::from(f32::EPSILON) * 29.0 * mag[i] + 1e-30;
                assert!((f64::from(got) - want).abs() <= tol, "{h}x{w} [{i}]: {got} vs {want}");
            }
        }
    }

    /// Images `[n, c, p]` (`p` pixels) as `[n, p, c]`.
    fn to_nhwc(x: &[f32], c: usize, p: usize) -> Vec<f32> {
        let mut y = vec![0f32; x.len()];
        for (img, out) in x.chunks_exact(c * p).zip(y.chunks_exact_mut(c * p)) {
            for ch in 0..c {
                for px in 0..p {
                    out[px * c + ch] = img[ch * p + px];
                }
            }
        }
        y
    }

    /// Images `[n, p, c]` as `[n, c, p]`.
    fn to_nchw(x: &[f32], c: usize, p: usize) -> Vec<f32> {
        let mut y = vec![0f32; x.len()];
        for (img, out) in x.chunks_exact(c * p).zip(y.chunks_exact_mut(c * p)) {
            for ch in 0..c {
                for px in 0..p {
                    out[ch * p + px] = img[px * c + ch];
                }
            }
        }
        y
    }

    #[test]
    fn large_layers_give_the_same_bits_on_any_thread_count() {
        let mut rng = fastrand::Rng::with_seed(0x7d);
        let base =
            Conv2dGeometry { padding: [1, 1], ..Conv2dGeometry::new(32, [24, 24], 61, [3, 3]) };
        let depthwise = Conv2dGeometry {
            in_channels: 67,
            in_h: 97,
            in_w: 95,
            out_channels: 67,
            stride: [2, 2],
            groups: 67,
            ..base
        };
        // On channel blocks, the last one partial.
        let narrow_depthwise = Conv2dGeometry {
            in_channels: 601,
            out_channels: 601,
            groups: 601,
            in_h: 14,
            in_w: 14,
            ..depthwise
        };
        let pointwise = Conv2dGeometry { kh: 1, kw: 1, padding: [0, 0], in_h: 40, ..base };
        let few_pixels = Conv2dGeometry {
            in_channels: 256,
            in_h: 6,
            in_w: 6,
            out_channels: 97,
            stride: [2, 2],
            ..base
        };
        // Channels-last pointwise, deeper than a depth block, on few pixels: a part of a split
        // gets fewer rows than a register tile.
        let deep_pointwise =
            Conv2dGeometry { in_channels: 320, in_h: 5, in_w: 5, out_channels: 64, ..pointwise };
        // RegNet's groups of 8 channels, strided.
        let grouped = Conv2dGeometry { groups: 6, in_channels: 48, out_channels: 48, ..depthwise };
        // Squeeze-excite's expanding layer on its one-pixel image: a linear layer split by
        // output channels.
        let squeeze =
            Conv2dGeometry { in_channels: 240, in_h: 1, in_w: 1, out_channels: 1100, ..pointwise };
        let pools: Vec<Threads> = [1, 2, 3, 4].map(|n| Threads::new(n).unwrap()).into();
        let nchw = Layouts::default();
        for (g, layouts) in [
            (grouped, NHWC),
            // Channels-last on four whole blocks and a tail block.
            (depthwise, NHWC),
            (base, nchw),
            (depthwise, nchw),
            (narrow_depthwise, nchw),
            (pointwise, nchw),
            (few_pixels, nchw),
            (base, NHWC),
            (few_pixels, NHWC),
            (base, Layouts { input: Layout::Nchw, output: Layout::Nhwc }),
            (deep_pointwise, NHWC),
            (squeeze, nchw),
            (squeeze, Layouts { input: Layout::Nhwc, output: Layout::Nchw }),
        ] {
            let wlen = g.out_channels * (g.in_channels / g.groups) * g.kh * g.kw;
            let w: Vec<f32> = (0..wlen).map(|_| rng.f32() - 0.5).collect();
            let bias: Vec<f32> = (0..g.out_channels).map(|_| rng.f32() - 0.5).collect();
            let act = Activation::Clamp { min: 0.0, max: 6.0 };
            let conv = PackedConv2d::with_layouts(g, &w, Some(&bias), act, layouts).unwrap();
            let few = g == few_pixels && layouts == nchw;
            assert_eq!(few, matches!(conv.plan, Plan::FewPixels { .. }));
            let indirect = matches!(conv.plan, Plan::Indirect { .. } | Plan::Winograd(_));
            let nhwc_product = layouts.output == Layout::Nhwc
                && !is_pointwise(&g)
                && g != grouped
                && g != depthwise;
            assert_eq!(nhwc_product, indirect);
            let winograd = layouts == NHWC && g == base && crate::compute::cpu::has_avx512();
            assert_eq!(winograd, matches!(conv.plan, Plan::Winograd(_)));
            let on_blocks = matches!(conv.plan, Plan::Depthwise { blocks: Some(_), .. });
            assert_eq!(g == narrow_depthwise || (g == depthwise && layouts == NHWC), on_blocks);
            assert_eq!(g == grouped, matches!(conv.plan, Plan::Grouped(_)));
            assert_eq!(g == squeeze, matches!(conv.plan, Plan::Linear(_)));
            let (oh, ow) = conv.out_hw();
            let macs = g.out_channels * oh * ow * (g.in_channels / g.groups) * g.kh * g.kw;
            assert!(macs >= PARALLEL_MACS, "{g:?} is too small to split");
            let x: Vec<f32> = (0..g.in_channels * g.in_h * g.in_w).map(|_| rng.f32()).collect();
            let n = g.out_channels * oh * ow;
            let res: Vec<f32> = (0..n).map(|_| rng.f32() - 0.5).collect();
            let (want, mag) = conv_ref(&g, (oh, ow), 1, &x, &w, Some(&bias), Some(&res));
            let (cin, cout, ohw) = (g.in_channels, g.out_channels, oh * ow);
            let nhwc = |l: Layout, v: Vec<f32>, c: usize, p: usize| match l {
                Layout::Nhwc => to_nhwc(&v, c, p),
                Layout::Nchw => v,
            };
            let x = nhwc(layouts.input, x, cin, g.in_h * g.in_w);
            let res = nhwc(layouts.output, res, cout, ohw);
            let mut first: Option<Vec<u32>> = None;
            for threads in &pools {
                let mut out = vec![f32::NAN; n];
                let mut scratch = ConvScratch::default();
                conv.run(1, &x, Some(&res), &mut out, &mut scratch, threads).unwrap();
                if layouts.output == Layout::Nhwc {
                    out = to_nchw(&out, cout, ohw);
                }
                for i in 0..n {
                    let want = act_ref(act, want[i]);
                    let tol = 1e-5 * mag[i] + 1e-6;
                    assert!((f64::from(out[i]) - want).abs() <= tol, "{g:?} [{i}]");
                }
                let bits: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
                match &first {
                    None => first = Some(bits),
                    Some(f) => assert!(*f == bits, "{g:?}: {} threads differ", threads.count()),
                }
            }
            // A pool whose workers never get a core: the caller does all the tasks.
            let held = &pools[2];
            let _gate = held.hold_workers();
            let mut out = vec![f32::NAN; n];
            conv.run(1, &x, Some(&res), &mut out, &mut ConvScratch::default(), held).unwrap();
            if layouts.output == Layout::Nhwc {
                out = to_nchw(&out, cout, ohw);
            }
            let bits: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
            assert!(first.as_ref() == Some(&bits), "{g:?}: held workers change the bits");
        }
    }

    /// Grouped convolutions channels-last: groups of 8 output channels and wider ones (on
    /// 16 lanes, in several vectors, the last partial), strides, dilations, padding, a
    /// residual and each activation, against the reference.
    #[test]
    fn grouped_channels_last_matches_direct_reference() {
        let mut rng = fastrand::Rng::with_seed(0x96);
        let threads = Threads::default();
        let mut scratch = ConvScratch::default();
        let acts = [Activation::None, Activation::RELU, Activation::Silu];
        for (groups, cin_g, cout_g) in [(2, 8, 8), (3, 4, 12), (2, 16, 16), (4, 2, 24), (2, 5, 40)]
        {
            let g = Conv2dGeometry {
                in_channels: groups * cin_g,
                in_h: rng.usize(5..20),
                in_w: rng.usize(5..20),
                out_channels: groups * cout_g,
                kh: 3,
                kw: [1, 3][rng.usize(0..2)],
                stride: [rng.usize(1..3), rng.usize(1..3)],
                padding: [1, rng.usize(0..2)],
                dilation: [rng.usize(1..3), 1],
                groups,
            };
            let act = acts[rng.usize(0..acts.len())];
            let wlen = g.out_channels * cin_g * g.kh * g.kw;
            let w: Vec<f32> = (0..wlen).map(|_| rng.f32() - 0.5).collect();
            let bias: Vec<f32> = (0..g.out_channels).map(|_| rng.f32() - 0.5).collect();
            let conv = PackedConv2d::with_layouts(g, &w, Some(&bias), act, NHWC).unwrap();
            assert!(matches!(conv.plan, Plan::Grouped(_)), "{g:?}");
            let (oh, ow) = conv.out_hw();
            let (cin, cout, ohw) = (g.in_channels, g.out_channels, oh * ow);
            let x: Vec<f32> = (0..cin * g.in_h * g.in_w).map(|_| rng.f32() - 0.5).collect();
            let res: Vec<f32> = (0..cout * ohw).map(|_| rng.f32() - 0.5).collect();
            let (want, mag) = conv_ref(&g, (oh, ow), 1, &x, &w, Some(&bias), Some(&res));
            let mut out = vec![f32::NAN; cout * ohw];
            let (xl, rl) = (to_nhwc(&x, cin, g.in_h * g.in_w), to_nhwc(&res, cout, ohw));
            conv.run(1, &xl, Some(&rl), &mut out, &mut scratch, &threads).unwrap();
            let out = to_nchw(&out, cout, ohw);
            for i in 0..out.len() {
                let want = act_ref(act, want[i]);
                let tol = 1e-5 * mag[i] + 1e-6;
                assert!((f64::from(out[i]) - want).abs() <= tol, "{g:?} {act:?} [{i}]");
            }
        }
    }

    #[test]
    fn winograd_matches_direct_reference() {
        if !crate::compute::cpu::has_avx512() {
            eprintln!("SKIPPED: Winograd runs only on CPUs with AVX-512F");
            return;
        }
        let mut rng = fastrand::Rng::with_seed(0x3a3);
        let acts = [Activation::None, Activation::RELU, Activation::Silu];
        let mut scratch = ConvScratch::default();
        let threads = Threads::default();
        for case in 0..40 {
            let pad = rng.usize(0..3);
            let g = Conv2dGeometry {
                in_channels: rng.usize(16..40),
                // Outputs of 14 to 27 pixels: odd sizes make partial tiles.
                in_h: rng.usize(16..26),
                in_w: rng.usize(16..26),
                out_channels: rng.usize(16..40),
                kh: 3,
                kw: 3,
                stride: [1, 1],
                padding: [pad, pad],
                dilation: [1, 1],
                groups: 1,
            };
            let act = acts[case % acts.len()];
            let w: Vec<f32> =
                (0..g.out_channels * g.in_channels * 9).map(|_| rng.f32() - 0.5).collect();
            let bias: Vec<f32> = (0..g.out_channels).map(|_| rng.f32() - 0.5).collect();
            let bias = rng.bool().then_some(&bias[..]);
            let conv = PackedConv2d::with_layouts(g, &w, bias, act, NHWC).unwrap();
            assert!(matches!(conv.plan, Plan::Winograd(_)), "{g:?}");
            let (oh, ow) = conv.out_hw();
            let batch = rng.usize(1..3);
            let (cin, cout) = (g.in_channels, g.out_channels);
            let x: Vec<f32> = (0..batch * cin * g.in_h * g.in_w).map(|_| rng.f32() - 0.5).collect();
            let n = batch * cout * oh * ow;
            let res: Vec<f32> = (0..n).map(|_| rng.f32() - 0.5).collect();
            let res = rng.bool().then_some(&res[..]);
            let xl = to_nhwc(&x, cin, g.in_h * g.in_w);
            let rl = res.map(|r| to_nhwc(r, cout, oh * ow));
            let mut out = vec![f32::NAN; n];
            conv.run(batch, &xl, rl.as_deref(), &mut out, &mut scratch, &threads).unwrap();
            let out = to_nchw(&out, cout, oh * ow);
            let (want, mag) = conv_ref(&g, (oh, ow), batch, &x, &w, bias, res);
            for i in 0..n {
                let want = act_ref(act, want[i]);
                let tol = 1e-5 * mag[i] + 1e-6;
                let got = f64::from(out[i]);
                assert!((got - want).abs() <= tol, "{g:?} {act:?} [{i}]: {got} vs {want}");
            }
        }
    }

    #[test]
    fn hostile_geometry_is_an_error() {
        let ok = Conv2dGeometry { padding: [1, 1], ..Conv2dGeometry::new(2, [4, 4], 2, [3, 3]) };
        let w = vec![0.5f32; 2 * 2 * 9];
        let act = Activation::None;
        let big = usize::MAX / 2;
        for g in [
            Conv2dGeometry { in_channels: 0, ..ok },
            Conv2dGeometry { kh: 0, ..ok },
            Conv2dGeometry { groups: 0, ..ok },
            Conv2dGeometry { groups: 3, ..ok },
            Conv2dGeometry { stride: [0, 1], ..ok },
            Conv2dGeometry { dilation: [1, 0], ..ok },
            Conv2dGeometry { kh: 9, padding: [0, 0], ..ok },
            Conv2dGeometry { in_h: big, in_w: big, ..ok },
            Conv2dGeometry { padding: [usize::MAX, 1], ..ok },
            Conv2dGeometry { kh: usize::MAX, dilation: [2, 1], ..ok },
            Conv2dGeometry { out_channels: big, ..ok },
        ] {
            assert!(PackedConv2d::new(g, &w, None, act).is_err(), "{g:?}");
        }
        // An image whose indirection buffer (pixels x taps) would pass its cap: channels-last
        // output is not supported (the layout pass keeps it NCHW), and asking for it anyway
        // is an error, not an allocation the file's sizes decide.
        let tall = Conv2dGeometry { in_h: 1 << 24, ..ok };
        let nhwc_out = Layouts { input: Layout::Nchw, output: Layout::Nhwc };
        assert!(!PackedConv2d::supports(&tall, nhwc_out));
        assert!(PackedConv2d::supports(&ok, nhwc_out));
        let tall_w = PackedConv2d::with_layouts(tall, &w, None, act, nhwc_out);
        assert!(tall_w.is_err());
        assert!(PackedConv2d::new(ok, &w[1..], None, act).is_err());
        assert!(PackedConv2d::new(ok, &w, Some(&[0.0]), act).is_err());
        let nan = Activation::Clamp { min: f32::NAN, max: 0.0 };
        assert!(PackedConv2d::new(ok, &w, None, nan).is_err());

        let conv = PackedConv2d::new(ok, &w, None, act).unwrap();
        let mut s = ConvScratch::default();
        let t = Threads::default();
        let x = vec![1.0f32; 2 * 16];
        let mut out = vec![0.0f32; 2 * 16];
        assert!(conv.run(1, &x[1..], None, &mut out, &mut s, &t).is_err());
        assert!(conv.run(1, &x, None, &mut out[1..], &mut s, &t).is_err());
        assert!(conv.run(1, &x, Some(&x[1..]), &mut out, &mut s, &t).is_err());
        assert!(conv.run(2, &x, None, &mut out, &mut s, &t).is_err());
        assert!(conv.run(usize::MAX, &x, None, &mut out, &mut s, &t).is_err());
        assert!(out.iter().all(|&v| v == 0.0));
        conv.run(0, &x, None, &mut out, &mut s, &t).unwrap();
        conv.run(1, &x, None, &mut out, &mut s, &t).unwrap();
        // Centre pixel: all 2 * 9 taps inside, each 0.5 * 1.0.
        assert_eq!(out[5], 9.0);
    }
}
