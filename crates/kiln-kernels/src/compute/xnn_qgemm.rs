//! The fast loops behind [`super::xnn_quant`]'s QS8 convolution and QS8 fully connected layers
//! (the QD8 ones are in [`super::xnn_qd8`]): integer dot products, `u8 x i8` four at a time
//! (`vpdpbusd` of AVX-512 VNNI, or of AVX-VNNI in [`super::xnn_avxvnni`]; [`quad_product`])
//! or `i16 x i16` in pairs (AVX-512 VNNI
//! `vpdpwssd`, AVX-512BW and AVX2 `vpmaddwd`, portable loops; [`panel_product`]), chosen at run
//! time, register-blocked, split over the worker threads; the ISA layer ([`Isa`], [`IsaTask`])
//! the int8 loops share.
//!
//! # Exactness
//! Activations minus their zero point lie in `[-255, 255]` and weights in `[-128, 127]`, so
//! each product fits an `i16` and each pair of products an `i32`: only the running sums may
//! wrap, and wrapping addition is associative, so every summation order (blocking, vector
//! lanes, thread split) gives the very `i32` of the scalar loops. The requantization of each
//! sum is [`qs8_requantize`] (or the callers' float formulas), unchanged. The callers check
//! that the zero points are in `[-128, 127]` before using these loops.
//!
//! # Pair panels
//! Weights are packed once (at load, by `xnn_qconv`), per group, in panels of [`NR`] output
//! channels: `[kp / 2][NR][2]` `i16` (`kp` the group's `kh*kw*c/groups` rounded up to even;
//! missing channels and the odd tail are zeros), so one 512-bit load holds two inputs of 16
//! channels. Each output pixel's window is gathered once into an `i16` row in the weights'
//! `[tap][c]` order (zero point subtracted; padded taps and the tail are zeros). A microkernel
//! multiplies up to [`MR`] gathered rows by a panel: per input pair, one broadcast per row and
//! one load of the panel, so the accumulators are the output channels and need no horizontal
//! sums. The quad panels are the same with four `i8` inputs per lane; their rows are gathered
//! ([`quad_product`]) or read in place through each tap's offset ([`tap_product`], where one
//! broadcast serves two panels).
#![allow(unsafe_code)]

use super::threads::{split, with_pieces, Threads, TASKS_PER_THREAD};
#[cfg(target_arch = "x86_64")]
use super::xnn_avxvnni as avxvnni;
use super::xnn_qmath::{qs8_requantize, Qs8Out, MAGIC_BIAS, MAGIC_BIAS_BITS};

#[cfg(target_arch = "x86_64")]
use super::xnn_qpanel::{TapSrc, VnniOut};
pub(crate) use super::xnn_qpanel::{NR, PADDED};
/// Output pixels per microkernel call.
pub(crate) const MR: usize = 8;
/// Multiply-adds from which a fully connected layer splits its work over the threads: a
/// classifier of one row reads each weight once, at the memory's speed, which two cores
/// pull faster than one (resnet50_q8's 2048 x 1000 layer, 2M: 91 -> 68 us on two threads).
pub(crate) const PARALLEL_MACS: usize = 1 << 20;

/// The instruction sets of the loops, in increasing order of preference. Each implies the
/// ones before it except [`Isa::AvxVnni`], which only [`Isa::Avx2`] comes with: the AVX-512
/// cores of Ice Lake and Zen 4 lack it, so a loop picked by `isa >= Isa::Avx512` never runs
/// its code, and [`Isa::has_quads`] names the two sets with `vpdpbusd`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Isa {
    /// Plain Rust, vectorized by the compiler for the build's baseline.
    Portable,
    /// AVX2.
    Avx2,
    /// AVX2 with AVX-VNNI (`vpdpbusd` on 256-bit vectors: Alder Lake and later client cores,
    /// Zen 5).
    AvxVnni,
    /// AVX2, AVX-512F and AVX-512BW.
    Avx512,
    /// As [`Isa::Avx512`] plus AVX-512 VNNI.
    Vnni,
}

/// The widest [`Isa`] this CPU runs ([`crate::compute::cpu`]; none on other targets).
pub(crate) fn best_isa() -> Isa {
    let f = crate::compute::cpu::features();
    let avx512 = f.avx2 && f.avx512f && f.avx512bw;
    if avx512 && f.avx512vnni {
        Isa::Vnni
    } else if avx512 {
        Isa::Avx512
    } else if f.avx2 && f.avxvnni {
        Isa::AvxVnni
    } else if f.avx2 {
        Isa::Avx2
    } else {
        Isa::Portable
    }
}

/// A task's loop, written once in plain Rust and built for each [`Isa`] by [`Isa::run`].
pub(crate) trait IsaTask {
    /// What the task writes.
    type Out: ?Sized;
    /// Whether the loop gains from VNNI (`vpdpwssd`): only then is it built with AVX-512 VNNI
    /// or AVX-VNNI.
    const VNNI: bool = false;
    /// Runs share `run` of the task into `out`. Implementations are `#[inline(always)]`, so
    /// the target features of [`Isa::run`]'s caller for the set apply to the whole loop.
    fn run(&self, run: std::ops::Range<usize>, out: &mut Self::Out);
}

impl Isa {
    /// Whether the set multiplies unsigned bytes by signed ones four at a time (`vpdpbusd`):
    /// the loops of [`quad_product`], [`tap_product`] and the qd8 quad sums.
    pub(crate) fn has_quads(self) -> bool {
        matches!(self, Isa::AvxVnni | Isa::Vnni)
    }

    /// Whether this CPU runs the set's loops.
    #[cfg(test)]
    fn runs_here(self) -> bool {
        let f = crate::compute::cpu::features();
        let avx512 = f.avx2 && f.avx512f && f.avx512bw;
        match self {
            Isa::Portable => true,
            Isa::Avx2 => f.avx2,
            Isa::AvxVnni => f.avx2 && f.avxvnni,
            Isa::Avx512 => avx512,
            Isa::Vnni => avx512 && f.avx512vnni,
        }
    }

    /// Runs share `run` of `task` into `out` in a function compiled for this set.
    pub(crate) fn run<T: IsaTask>(self, task: &T, run: std::ops::Range<usize>, out: &mut T::Out) {
        match self {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Isa::Vnni` is only chosen when the CPU has AVX-512F, AVX-512BW and
            // AVX-512 VNNI (and AVX2).
            Isa::Vnni if T::VNNI => unsafe { on_vnni(task, run, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Isa::Avx512` and above are only chosen when the CPU has AVX-512F and
            // AVX-512BW (and AVX2).
            Isa::Avx512 | Isa::Vnni => unsafe { on_avx512(task, run, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Isa::AvxVnni` is only chosen when the CPU has AVX2 and AVX-VNNI.
            Isa::AvxVnni if T::VNNI => unsafe { on_avxvnni(task, run, out) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Isa::Avx2` and `Isa::AvxVnni` are only chosen when the CPU has AVX2.
            Isa::Avx2 | Isa::AvxVnni => unsafe { on_avx2(task, run, out) },
            _ => task.run(run, out),
        }
    }
}

/// [`IsaTask::run`] built for AVX-512 VNNI.
///
/// # Safety
/// The CPU has AVX-512F, AVX-512BW, AVX-512 VNNI and AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2")]
unsafe fn on_vnni<T: IsaTask>(task: &T, run: std::ops::Range<usize>, out: &mut T::Out) {
    task.run(run, out)
}

/// [`IsaTask::run`] built for AVX-512.
///
/// # Safety
/// The CPU has AVX-512F, AVX-512BW and AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx2")]
unsafe fn on_avx512<T: IsaTask>(task: &T, run: std::ops::Range<usize>, out: &mut T::Out) {
    task.run(run, out)
}

/// [`IsaTask::run`] built for AVX2 with AVX-VNNI.
///
/// # Safety
/// The CPU has AVX2 and AVX-VNNI.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avxvnni")]
unsafe fn on_avxvnni<T: IsaTask>(task: &T, run: std::ops::Range<usize>, out: &mut T::Out) {
    task.run(run, out)
}

/// [`IsaTask::run`] built for AVX2.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn on_avx2<T: IsaTask>(task: &T, run: std::ops::Range<usize>, out: &mut T::Out) {
    task.run(run, out)
}

/// Every [`Isa`] this CPU runs (tests run each).
#[cfg(test)]
pub(crate) fn isas() -> Vec<Isa> {
    [Isa::Portable, Isa::Avx2, Isa::AvxVnni, Isa::Avx512, Isa::Vnni]
        .into_iter()
        .filter(|&i| i.runs_here())
        .collect()
}

/// How many tasks a layer of `macs` multiply-adds over `units` indivisible pieces is split
/// into: one below `min_macs`.
pub(crate) fn parts(threads: &Threads, macs: usize, min_macs: usize, units: usize) -> usize {
    match macs >= min_macs {
        true => threads.tasks_for(TASKS_PER_THREAD, units),
        false => 1,
    }
}

/// Calls `$f::<R>($args)` for the runtime row count `$r` in `1..=MR`.
macro_rules! by_rows {
    ($r:expr, $f:ident, ($($a:expr),*)) => {
        match $r {
            1 => $f::<1>($($a),*),
            2 => $f::<2>($($a),*),
            3 => $f::<3>($($a),*),
            4 => $f::<4>($($a),*),
            5 => $f::<5>($($a),*),
            6 => $f::<6>($($a),*),
            7 => $f::<7>($($a),*),
            8 => $f::<8>($($a),*),
            _ => unreachable!("at most MR rows"),
        }
    };
}

/// `acc[r * NR + n] = Σ_k a[r * lda + k] * w[k][n]` for rows `r < rows` of a panel `w`
/// packed `[kp / 2][NR][2]` (`i16`).
///
/// # Panics
/// If `rows` is not in `1..=MR`, `kp` is odd, `w` is not `kp * NR` long or `a` is shorter
/// than `(rows - 1) * lda + kp`.
pub(crate) fn panel_product(
    isa: Isa,
    a: &[i16],
    lda: usize,
    rows: usize,
    w: &[i16],
    kp: usize,
    acc: &mut [i32; MR * NR],
) {
    assert!((1..=MR).contains(&rows) && kp.is_multiple_of(2) && w.len() == kp * NR);
    assert!(a.len() >= (rows - 1) * lda + kp);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Vnni` and `Isa::Avx512` are only chosen (by `best_isa`, or in tests
        // among `isas`) when the CPU has AVX-512F and AVX-512BW, `Vnni` also AVX-512 VNNI; the
        // asserts above bound every read and write of the kernel of `rows` rows (rows of `kp`
        // values at `r * lda`, `kp * NR` weights, `rows * NR` sums).
        Isa::Vnni | Isa::Avx512 => unsafe {
            let k = if isa == Isa::Vnni { &PANEL_VNNI } else { &PANEL_AVX512 };
            k[rows - 1](a.as_ptr(), lda, w.as_ptr(), kp, acc.as_mut_ptr())
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => {
            for r0 in (0..rows).step_by(4) {
                let r = (rows - r0).min(4);
                let (ap, cp) = (a[r0 * lda..].as_ptr(), acc[r0 * NR..].as_mut_ptr());
                // SAFETY: as above, with AVX2; rows `r0..r0 + r` are inside the asserted rows.
                unsafe { PANEL_AVX2[r - 1](ap, lda, w.as_ptr(), kp, cp) }
            }
        }
        _ => by_rows!(rows, panel_portable, (a, lda, w, kp, acc)),
    }
}

/// The portable panel product of `R` rows.
fn panel_portable<const R: usize>(
    a: &[i16],
    lda: usize,
    w: &[i16],
    kp: usize,
    acc: &mut [i32; MR * NR],
) {
    let mut c = [[0i32; NR]; R];
    for (kk, wk) in w.chunks_exact(2 * NR).enumerate().take(kp / 2) {
        for (r, cr) in c.iter_mut().enumerate() {
            let a0 = a[r * lda + 2 * kk] as i32;
            let a1 = a[r * lda + 2 * kk + 1] as i32;
            for (s, wp) in cr.iter_mut().zip(wk.chunks_exact(2)) {
                *s = s.wrapping_add(a0 * wp[0] as i32 + a1 * wp[1] as i32);
            }
        }
    }
    for (r, cr) in c.iter().enumerate() {
        acc[r * NR..(r + 1) * NR].copy_from_slice(cr);
    }
}

/// A vector panel kernel: `(a, lda, w, kp, acc)` as [`panel_product`]'s, for the row count
/// the kernel was built for.
///
/// # Safety (of calling one)
/// The CPU has the kernel's features; `a` holds the kernel's rows of `kp` (even) values `lda`
/// apart, `w` holds `kp * NR` values and `acc` `rows * NR`.
#[cfg(target_arch = "x86_64")]
type PanelFn = unsafe fn(*const i16, usize, *const i16, usize, *mut i32);

/// The AVX-512 VNNI panel kernels, 1 to [`MR`] rows.
#[cfg(target_arch = "x86_64")]
const PANEL_VNNI: [PanelFn; MR] = [
    panel_vnni::<1>,
    panel_vnni::<2>,
    panel_vnni::<3>,
    panel_vnni::<4>,
    panel_vnni::<5>,
    panel_vnni::<6>,
    panel_vnni::<7>,
    panel_vnni::<8>,
];

/// The AVX-512F and AVX-512BW panel kernels, 1 to [`MR`] rows.
#[cfg(target_arch = "x86_64")]
const PANEL_AVX512: [PanelFn; MR] = [
    panel_avx512::<1>,
    panel_avx512::<2>,
    panel_avx512::<3>,
    panel_avx512::<4>,
    panel_avx512::<5>,
    panel_avx512::<6>,
    panel_avx512::<7>,
    panel_avx512::<8>,
];

/// The AVX2 panel kernels, 1 to 4 rows (eight accumulators of 8 lanes fill the 16 registers).
#[cfg(target_arch = "x86_64")]
const PANEL_AVX2: [PanelFn; 4] =
    [panel_avx2::<1>, panel_avx2::<2>, panel_avx2::<3>, panel_avx2::<4>];

/// Defines an AVX-512 panel product of `R` rows: `$madd(acc, a, w)` adds the pairwise
/// products of `a` and `w` to `acc`.
#[cfg(target_arch = "x86_64")]
macro_rules! panel_avx512_fn {
    ($name:ident, $features:literal, $madd:expr) => {
        /// The AVX-512 panel product of `R` rows.
        ///
        /// # Safety
        /// The CPU has the enabled features; `a` holds `R` rows of `kp` (even) values `lda`
        /// apart, `w` holds `kp * NR` values and `acc` `R * NR`.
        #[target_feature(enable = $features)]
        unsafe fn $name<const R: usize>(
            a: *const i16,
            lda: usize,
            w: *const i16,
            kp: usize,
            acc: *mut i32,
        ) {
            use std::arch::x86_64::*;
            let mut c = [_mm512_setzero_si512(); R];
            // Row pointers, advanced one input pair at a time (`wrapping_add`: no overflow
            // checks in the loop; every pointer read is in bounds by the caller's contract).
            let mut rows: [*const i32; R] =
                std::array::from_fn(|r| a.wrapping_add(r.wrapping_mul(lda)).cast::<i32>());
            let mut wp = w;
            for _ in 0..kp / 2 {
                // SAFETY: the current pair of each row `r < R` and the current panel row are
                // inside the buffers (the caller's contract).
                unsafe {
                    let wv = _mm512_loadu_si512(wp.cast());
                    for (cr, ar) in c.iter_mut().zip(rows.iter_mut()) {
                        *cr = $madd(*cr, _mm512_set1_epi32(ar.read_unaligned()), wv);
                        *ar = ar.wrapping_add(1);
                    }
                }
                wp = wp.wrapping_add(2 * NR);
            }
            for (r, cr) in c.iter().enumerate() {
                // SAFETY: `acc` holds `R * NR` values.
                unsafe { _mm512_storeu_si512(acc.wrapping_add(r * NR).cast(), *cr) };
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
panel_avx512_fn!(panel_vnni, "avx512f,avx512bw,avx512vnni", std::arch::x86_64::_mm512_dpwssd_epi32);
#[cfg(target_arch = "x86_64")]
panel_avx512_fn!(panel_avx512, "avx512f,avx512bw", |c, a, w| {
    use std::arch::x86_64::*;
    _mm512_add_epi32(c, _mm512_madd_epi16(a, w))
});

/// The AVX2 panel product of `R` rows (`R <= 4`), in two 8-lane halves.
///
/// # Safety
/// The CPU has AVX2; `a` holds `R` rows of `kp` (even) values `lda` apart, `w` holds `kp * NR`
/// values and `acc` `R * NR`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn panel_avx2<const R: usize>(
    a: *const i16,
    lda: usize,
    w: *const i16,
    kp: usize,
    acc: *mut i32,
) {
    use std::arch::x86_64::*;
    let mut c0 = [_mm256_setzero_si256(); R];
    let mut c1 = [_mm256_setzero_si256(); R];
    // Row pointers advanced one input pair at a time, as in the AVX-512 kernels.
    let mut rows: [*const i32; R] =
        std::array::from_fn(|r| a.wrapping_add(r.wrapping_mul(lda)).cast::<i32>());
    let mut wp = w;
    for _ in 0..kp / 2 {
        // SAFETY: the current pair of each row `r < R` and the current panel row are inside
        // the buffers (the caller's contract).
        unsafe {
            let w0 = _mm256_loadu_si256(wp.cast());
            let w1 = _mm256_loadu_si256(wp.wrapping_add(NR).cast());
            for ((c0, c1), ar) in c0.iter_mut().zip(c1.iter_mut()).zip(rows.iter_mut()) {
                let pair = _mm256_set1_epi32(ar.read_unaligned());
                *c0 = _mm256_add_epi32(*c0, _mm256_madd_epi16(pair, w0));
                *c1 = _mm256_add_epi32(*c1, _mm256_madd_epi16(pair, w1));
                *ar = ar.wrapping_add(1);
            }
        }
        wp = wp.wrapping_add(2 * NR);
    }
    for r in 0..R {
        // SAFETY: `acc` holds `R * NR` values.
        unsafe {
            _mm256_storeu_si256(acc.wrapping_add(r * NR).cast(), c0[r]);
            _mm256_storeu_si256(acc.wrapping_add(r * NR + NR / 2).cast(), c1[r]);
        }
    }
}

/// XNNPACK's fp32 requantization of one panel's sums (`xnn_qmath::qs8_requantize` after the
/// bias, wrapping): the panel's live lanes' biases and scales, and the output's clamp bounds
/// minus its zero point.
pub(crate) struct Requant<'a> {
    pub bias: &'a [i32],
    pub scales: &'a [f32],
    pub o: &'a Qs8Out,
}

impl Requant<'_> {
    /// The requantization as the vector loops' pointers (`scales.len()` channels).
    #[cfg(target_arch = "x86_64")]
    fn vnni_out(&self) -> VnniOut {
        VnniOut {
            bias: self.bias.as_ptr(),
            scales: self.scales.as_ptr(),
            n: self.scales.len(),
            o: *self.o,
        }
    }
}

/// `dst[r * ldd + n] = requantize(Σ_k a[r * lda + k] * w[n / NR][k][n % NR])` for rows
/// `r < rows` and the `rq.scales.len()` output channels `n`, of unsigned activations (the
/// callers' `x + 128`) and the channels' panels `w`, each packed `[k / 4][NR][4]` (`i8`):
/// four activations at a time (`vpdpbusd` of AVX-512 VNNI or AVX-VNNI: four `u8 x i8`
/// products summed into each `i32` lane, no saturation; or portable loops), the sums
/// requantized in registers,
/// panel after panel. The caller folds `-128 * Σ_k w` into the bias.
///
/// # Panics
/// If `rows` is not in `1..=MR`, the bias has another count than the scales, `k` is not a
/// multiple of 4, `w` is shorter than the channels' panels, `a` is shorter than
/// `(rows - 1) * lda + k` or `dst` than `(rows - 1) * ldd + channels`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn quad_product(
    isa: Isa,
    a: &[u8],
    lda: usize,
    rows: usize,
    k: usize,
    w: &[i8],
    rq: &Requant<'_>,
    dst: &mut [i8],
    ldd: usize,
) {
    let n = rq.scales.len();
    assert!((1..=MR).contains(&rows) && rq.bias.len() == n);
    assert!(k.is_multiple_of(4) && w.len() >= n.div_ceil(NR) * k * NR);
    assert!(a.len() >= (rows - 1) * lda + k && dst.len() >= (rows - 1) * ldd + n);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Vnni` is only chosen (by `best_isa`, or in tests among `isas`) when
        // the CPU has AVX-512F, AVX-512BW and AVX-512 VNNI; the asserts above bound every read
        // (rows of `k` values at `r * lda`, `k * NR` weights a panel, `n` biases and scales)
        // and write (`n` values at `r * ldd`).
        Isa::Vnni => unsafe {
            let q = rq.vnni_out();
            QUADS_VNNI[rows - 1](a.as_ptr(), lda, k, w.as_ptr(), &q, dst.as_mut_ptr(), ldd)
        },
        #[cfg(target_arch = "x86_64")]
        Isa::AvxVnni => {
            let q = rq.vnni_out();
            for (r0, r) in avxvnni::row_calls(rows) {
                let (ar, dr) = (a[r0 * lda..].as_ptr(), dst[r0 * ldd..].as_mut_ptr());
                // SAFETY: `Isa::AvxVnni` is only chosen (by `best_isa`, or in tests among
                // `isas`) when the CPU has AVX2 and AVX-VNNI; rows `r0..r0 + r` are inside the
                // rows the asserts above bound, as are the weights, biases and scales.
                unsafe { avxvnni::QUADS[r - 1](ar, lda, k, w.as_ptr(), &q, dr, ldd) }
            }
        }
        _ => {
            for (p, wp) in w.chunks_exact(k * NR).take(n.div_ceil(NR)).enumerate() {
                let ch = p * NR..(p * NR + NR).min(n);
                for r in 0..rows {
                    let mut sums = [0i32; NR];
                    add_quads(&mut sums, &a[r * lda..][..k], wp);
                    requantize_panel(
                        &mut dst[r * ldd + ch.start..][..ch.len()],
                        &sums,
                        ch.clone(),
                        rq,
                    );
                }
            }
        }
    }
}

/// Adds the products of unsigned activations `a` (a multiple of 4) and the panel rows `w`
/// (`[a.len() / 4][NR][4]`) to each channel's sum, wrapping: the portable quad loop.
fn add_quads(sums: &mut [i32; NR], a: &[u8], w: &[i8]) {
    for (xq, wq) in a.chunks_exact(4).zip(w.chunks_exact(4 * NR)) {
        for (s, wc) in sums.iter_mut().zip(wq.chunks_exact(4)) {
            for (&x, &wv) in xq.iter().zip(wc) {
                *s = s.wrapping_add(i32::from(x) * i32::from(wv));
            }
        }
    }
}

/// `dst[j] = qs8_requantize(bias + sums[j])` for the live channels `ch` of a panel (`dst` and
/// `ch` as long).
fn requantize_panel(
    dst: &mut [i8],
    sums: &[i32; NR],
    ch: std::ops::Range<usize>,
    rq: &Requant<'_>,
) {
    let (b, sc) = (&rq.bias[ch.clone()], &rq.scales[ch]);
    for (((d, &s), &b), &sc) in dst.iter_mut().zip(sums).zip(b).zip(sc) {
        *d = qs8_requantize(b.wrapping_add(s), sc, rq.o);
    }
}

/// The windows of a block of output pixels read in place (XNNPACK's indirection), for
/// [`tap_product`]: a convolution of `c` input channels a pixel (a multiple of 4), each window
/// `offsets.len() / rows` taps, over unsigned activations `x` (the input plus 128).
/// `offsets[t * rows + r]` is where row `r`'s tap `t` starts in `x`, or [`PADDED`] for a tap
/// outside the input, read from `zp_row` (`c` copies of the input zero point plus 128)
/// instead.
pub(crate) struct TapRows<'a> {
    pub x: &'a [u8],
    pub zp_row: &'a [u8],
    pub offsets: &'a [usize],
    pub c: usize,
}

impl TapRows<'_> {
    /// The windows of `rows` rows of `taps` taps as the vector loops' pointers.
    #[cfg(target_arch = "x86_64")]
    fn pointers(&self, rows: usize, taps: usize) -> TapSrc {
        TapSrc {
            x: self.x.as_ptr(),
            zp_row: self.zp_row.as_ptr(),
            offsets: self.offsets.as_ptr(),
            rows,
            taps,
            c: self.c,
        }
    }

    /// The `c` inputs of row `r`'s tap `t`.
    fn tap(&self, rows: usize, t: usize, r: usize) -> &[u8] {
        match self.offsets[t * rows + r] {
            PADDED => &self.zp_row[..self.c],
            at => &self.x[at..][..self.c],
        }
    }
}

/// [`quad_product`] of `rows` windows read in place (`t`) rather than gathered, taps in the
/// weights' `[tap][c]` order, `k = taps * c`.
///
/// # Panics
/// If `rows` is not in `1..=MR`, `c` is not a positive multiple of 4, the offsets are not
/// `rows` a tap or one lies outside `x` (less `c`), `zp_row` is shorter than `c`, the bias has
/// another count than the scales, `w` is shorter than the channels' panels or `dst` than
/// `(rows - 1) * ldd + channels`.
pub(crate) fn tap_product(
    isa: Isa,
    t: &TapRows<'_>,
    rows: usize,
    w: &[i8],
    rq: &Requant<'_>,
    dst: &mut [i8],
    ldd: usize,
) {
    let (n, c) = (rq.scales.len(), t.c);
    assert!((1..=MR).contains(&rows) && rq.bias.len() == n);
    assert!(c > 0 && c.is_multiple_of(4) && t.zp_row.len() >= c);
    assert!(!t.offsets.is_empty() && t.offsets.len().is_multiple_of(rows));
    let in_x = t.x.len().checked_sub(c);
    assert!(t.offsets.iter().all(|&o| o == PADDED || in_x.is_some_and(|last| o <= last)));
    let k = t.offsets.len() / rows * c;
    assert!(w.len() >= n.div_ceil(NR) * k * NR && dst.len() >= (rows - 1) * ldd + n);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Vnni` is only chosen (by `best_isa`, or in tests among `isas`) when
        // the CPU has AVX-512F, AVX-512BW and AVX-512 VNNI; the asserts above bound every read
        // (`c` values at each offset or at `zp_row`, `k * NR` weights a panel, `n` biases and
        // scales) and write (`n` values at `r * ldd`).
        Isa::Vnni => unsafe {
            let (q, src) = (rq.vnni_out(), t.pointers(rows, k / c));
            TAPS_VNNI[rows - 1](&src, w.as_ptr(), &q, dst.as_mut_ptr(), ldd)
        },
        #[cfg(target_arch = "x86_64")]
        Isa::AvxVnni => {
            let (q, src) = (rq.vnni_out(), t.pointers(rows, k / c));
            for (r0, r) in avxvnni::row_calls(rows) {
                let dr = dst[r0 * ldd..].as_mut_ptr();
                // SAFETY: `Isa::AvxVnni` is only chosen (by `best_isa`, or in tests among
                // `isas`) when the CPU has AVX2 and AVX-VNNI; rows `r0..r0 + r` are among the
                // `rows` whose offsets the asserts above bound, as are the weights, biases,
                // scales and output rows.
                unsafe { avxvnni::TAPS[r - 1](&src, r0, w.as_ptr(), &q, dr, ldd) }
            }
        }
        _ => {
            for (p, wp) in w.chunks_exact(k * NR).take(n.div_ceil(NR)).enumerate() {
                let ch = p * NR..(p * NR + NR).min(n);
                for r in 0..rows {
                    let mut sums = [0i32; NR];
                    for (tap, wt) in wp.chunks_exact(c * NR).enumerate() {
                        add_quads(&mut sums, t.tap(rows, tap, r), wt);
                    }
                    requantize_panel(
                        &mut dst[r * ldd + ch.start..][..ch.len()],
                        &sums,
                        ch.clone(),
                        rq,
                    );
                }
            }
        }
    }
}

/// The AVX-512 VNNI tap products, indexed by row count minus one.
#[cfg(target_arch = "x86_64")]
type TapFn = unsafe fn(&TapSrc, *const i8, &VnniOut, *mut i8, usize);
#[cfg(target_arch = "x86_64")]
const TAPS_VNNI: [TapFn; MR] = [
    taps_vnni::<1>,
    taps_vnni::<2>,
    taps_vnni::<3>,
    taps_vnni::<4>,
    taps_vnni::<5>,
    taps_vnni::<6>,
    taps_vnni::<7>,
    taps_vnni::<8>,
];

/// The AVX-512 VNNI tap product of `R` rows, requantized (see [`tap_product`]): panels two at
/// a time, then the last one alone.
///
/// # Safety
/// The CPU has AVX-512F, AVX-512BW and AVX-512 VNNI; `src` holds `taps * R` offsets, each
/// [`PADDED`] or the start of `c` (a multiple of 4) values of `x`, and `zp_row` `c` values; `w`
/// holds `taps * c * NR` values for each panel of `q.n` channels, `q`'s bias and scales hold
/// `q.n` values and `dst` `R` rows of them `ldd` apart.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn taps_vnni<const R: usize>(
    src: &TapSrc,
    w: *const i8,
    q: &VnniOut,
    dst: *mut i8,
    ldd: usize,
) {
    let k = src.taps * src.c;
    let mut c0 = 0;
    while c0 + NR < q.n {
        // SAFETY: the caller's contract, for panels `c0 / NR` and the next.
        unsafe {
            let (b0, s0) = panel_requant(q, c0);
            let (b1, s1) = panel_requant(q, c0 + NR);
            let [c, d] = tap_loop::<R, 2>(src, w.wrapping_add(c0 * k), [b0, b1]);
            store_panel(&c, s0, q, c0, dst, ldd);
            store_panel(&d, s1, q, c0 + NR, dst, ldd);
        }
        c0 += 2 * NR;
    }
    if c0 < q.n {
        // SAFETY: the caller's contract, for this panel.
        unsafe {
            let (b, s) = panel_requant(q, c0);
            let [c] = tap_loop::<R, 1>(src, w.wrapping_add(c0 * k), [b]);
            store_panel(&c, s, q, c0, dst, ldd);
        }
    }
}

/// The `vpdpbusd` sums of `R` rows' windows (`src`) by `P`
/// consecutive panels of weights `[taps * c / 4][NR][4]` from `w`, each panel's sums starting
/// from its `init`.
///
/// # Safety
/// As [`taps_vnni`], with `w` holding `P` panels.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tap_loop<const R: usize, const P: usize>(
    src: &TapSrc,
    w: *const i8,
    init: [std::arch::x86_64::__m512i; P],
) -> [[std::arch::x86_64::__m512i; R]; P] {
    let (panel, tap) = (src.taps * src.c * NR, src.c * NR);
    let mut acc = std::array::from_fn(|p| [init[p]; R]);
    for t in 0..src.taps {
        // SAFETY: tap `t`'s `R` offsets are inside `offsets` (the caller's contract).
        let rows: [*const u8; R] =
            std::array::from_fn(|r| match unsafe { src.offsets.add(t * R + r).read() } {
                PADDED => src.zp_row,
                at => src.x.wrapping_add(at),
            });
        // SAFETY: each row's tap holds `c` values and each panel `c / 4` quads from tap `t`'s
        // (the caller's contract).
        acc = unsafe { quad_steps(rows, src.c / 4, w.wrapping_add(t * tap), panel, acc) };
    }
    acc
}

/// The AVX-512 VNNI quad products, indexed by row count minus one.
#[cfg(target_arch = "x86_64")]
type QuadFn = unsafe fn(*const u8, usize, usize, *const i8, &VnniOut, *mut i8, usize);
#[cfg(target_arch = "x86_64")]
const QUADS_VNNI: [QuadFn; MR] = [
    quads_vnni::<1>,
    quads_vnni::<2>,
    quads_vnni::<3>,
    quads_vnni::<4>,
    quads_vnni::<5>,
    quads_vnni::<6>,
    quads_vnni::<7>,
    quads_vnni::<8>,
];

/// The AVX-512 VNNI quad product of `R` rows, requantized (see [`quad_product`]).
///
/// # Safety
/// The CPU has AVX-512F, AVX-512BW and AVX-512 VNNI; `a` holds `R` rows of `k` (a multiple of
/// 4) values `lda` apart, `w` holds `k * NR` values for each panel of `q.n` channels, `q`'s
/// bias and scales hold `q.n` values and `dst` `R` rows of them `ldd` apart.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn quads_vnni<const R: usize>(
    a: *const u8,
    lda: usize,
    k: usize,
    w: *const i8,
    q: &VnniOut,
    dst: *mut i8,
    ldd: usize,
) {
    let mut c0 = 0;
    if two_panels() {
        while c0 + NR < q.n {
            // SAFETY: the caller's contract is `quad_loop`'s, for panels `c0 / NR` and the
            // next.
            unsafe {
                let (b0, s0) = panel_requant(q, c0);
                let (b1, s1) = panel_requant(q, c0 + NR);
                let (wc, panel) = (w.wrapping_add(c0 * k), k * NR);
                let [c, d] = quad_loop::<R, 2>(a, lda, k, wc, panel, [b0, b1]);
                store_panel(&c, s0, q, c0, dst, ldd);
                store_panel(&d, s1, q, c0 + NR, dst, ldd);
            }
            c0 += 2 * NR;
        }
    }
    while c0 < q.n {
        // SAFETY: the caller's contract is `quad_loop`'s, for this panel.
        unsafe {
            let (b, s) = panel_requant(q, c0);
            let [c] = quad_loop::<R, 1>(a, lda, k, w.wrapping_add(c0 * k), 0, [b]);
            store_panel(&c, s, q, c0, dst, ldd);
        }
        c0 += NR;
    }
}

/// Whether [`quads_vnni`] multiplies two panels a broadcast. On Intel's AVX-512 cores two
/// ports run `vpdpbusd` with a latency of 5 cycles, so one panel's 8 accumulators leave them
/// waiting: 16 run resnet50_q8's 1x1 layers 12-33% faster (whole model 11% on one and two
/// threads; the mobilenets and shufflenet, whose 1x1 layers are small, within 3%). Zen 4
/// runs one 512-bit `vpdpbusd` a cycle as two halves, and there the second panel's loads cost
/// more than they give (3-6% slower).
#[cfg(target_arch = "x86_64")]
pub(crate) fn two_panels() -> bool {
    !crate::compute::cpu::is_amd()
}

/// The live lanes of the panel of channels from `c0`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn panel_mask(q: &VnniOut, c0: usize) -> u16 {
    (u32::MAX >> (32 - (q.n - c0).min(NR))) as u16
}

/// The biases and scales of the panel of channels from `c0` (`c0 < q.n`).
///
/// # Safety
/// The CPU has AVX-512F; `q`'s bias and scales hold `q.n` values.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn panel_requant(
    q: &VnniOut,
    c0: usize,
) -> (std::arch::x86_64::__m512i, std::arch::x86_64::__m512) {
    use std::arch::x86_64::*;
    let mask = panel_mask(q, c0);
    // SAFETY: the masked loads read the panel's live channels' biases and scales only.
    unsafe {
        let b = _mm512_maskz_loadu_epi32(mask, q.bias.wrapping_add(c0));
        (b, _mm512_maskz_loadu_ps(mask, q.scales.wrapping_add(c0)))
    }
}

/// Requantizes `R` rows of one panel's sums and stores the live channels at column `c0`.
///
/// # Safety
/// The CPU has AVX-512F and AVX-512BW; `dst` holds `R` rows of `q.n` values `ldd` apart.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn store_panel<const R: usize>(
    c: &[std::arch::x86_64::__m512i; R],
    scales: std::arch::x86_64::__m512,
    q: &VnniOut,
    c0: usize,
    dst: *mut i8,
    ldd: usize,
) {
    use std::arch::x86_64::*;
    let mask = panel_mask(q, c0);
    for (r, cr) in c.iter().enumerate() {
        let v = requantize16(*cr, scales, &q.o);
        let d = dst.wrapping_add(r * ldd + c0);
        // SAFETY: row `r` of `dst` holds the live channels (the masked store writes only
        // them).
        unsafe { _mm512_mask_cvtepi32_storeu_epi8(d.cast(), mask, v) };
    }
}

/// The `vpdpbusd` sums of `R` rows of `k` unsigned activations (`lda` apart) by `P` panels
/// of weights `[k / 4][NR][4]` from `w`, `panel` bytes apart, each panel's sums
/// starting from its `init`: one vector of [`NR`] channel sums per row and panel, one
/// broadcast of a row's quad serving every panel.
///
/// # Safety
/// The CPU has AVX-512F, AVX-512BW and AVX-512 VNNI; `a` holds `R` rows of `k` (a multiple of
/// 4) values `lda` apart and `w` holds `k * NR` values at each `p * panel`, `p < P`.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(crate) unsafe fn quad_loop<const R: usize, const P: usize>(
    a: *const u8,
    lda: usize,
    k: usize,
    w: *const i8,
    panel: usize,
    init: [std::arch::x86_64::__m512i; P],
) -> [[std::arch::x86_64::__m512i; R]; P] {
    let rows: [*const u8; R] = std::array::from_fn(|r| a.wrapping_add(r.wrapping_mul(lda)));
    // SAFETY: the caller's contract.
    unsafe { quad_steps(rows, k / 4, w, panel, std::array::from_fn(|p| [init[p]; R])) }
}

/// The loop of [`quad_loop`] and [`tap_loop`]: `quads` steps of four unsigned activations of
/// each of the `R` rows (broadcast once, from `rows`) by the next row of each of `P` panels
/// (`panel` bytes apart, from `w`), added to `acc`.
///
/// # Safety
/// The CPU has AVX-512F, AVX-512BW and AVX-512 VNNI; each row holds `4 * quads` values and
/// each panel `quads` rows of `4 * NR` weights.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn quad_steps<const R: usize, const P: usize>(
    mut rows: [*const u8; R],
    quads: usize,
    w: *const i8,
    panel: usize,
    mut acc: [[std::arch::x86_64::__m512i; R]; P],
) -> [[std::arch::x86_64::__m512i; R]; P] {
    use std::arch::x86_64::*;
    let mut wp = w;
    for _ in 0..quads {
        // SAFETY: the current quad of each row and the current row of each panel are inside
        // the buffers (the caller's contract); the pointers only advance with `wrapping_add`.
        unsafe {
            let wv: [__m512i; P] =
                std::array::from_fn(|p| _mm512_loadu_si512(wp.wrapping_add(p * panel).cast()));
            for r in 0..R {
                let x = _mm512_set1_epi32(rows[r].cast::<i32>().read_unaligned());
                for p in 0..P {
                    acc[p][r] = _mm512_dpbusd_epi32(acc[p][r], x, wv[p]);
                }
                rows[r] = rows[r].wrapping_add(4);
            }
        }
        wp = wp.wrapping_add(4 * NR);
    }
    acc
}

/// `qs8_requantize` of 16 sums (bias added): `rne(clamp(acc * scale, qmin - zp, qmax - zp)) +
/// zp`, with `max` then `min` so that NaN becomes the low bound, and the rounding by XNNPACK's
/// magic bias, as `xnn_qmath::quantize_scaled`. The AVX-512 QS8 loops' epilogue.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn requantize16(
    acc: std::arch::x86_64::__m512i,
    scales: std::arch::x86_64::__m512,
    o: &Qs8Out,
) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    let (lo, hi) = ((o.qmin - o.zero_point) as f32, (o.qmax - o.zero_point) as f32);
    let v = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), scales);
    let v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
    let bits = _mm512_castps_si512(_mm512_add_ps(v, _mm512_set1_ps(MAGIC_BIAS)));
    // The magic bias's bits less the zero point: one subtraction removes the one and adds
    // the other (exact: both are small integers).
    _mm512_sub_epi32(bits, _mm512_set1_epi32(MAGIC_BIAS_BITS.wrapping_sub(o.zero_point)))
}

/// The integer sums of a fully connected layer: `a` is `m` rows of `k` activations (zero point
/// subtracted), `w` is `n` rows of `k` weights; each row pair is summed in segments of `seg`
/// (`seg` divides `k`; `nb = k / seg` segments), into `acc[(j * m + r) * nb + s]`. Split over
/// the threads by output channels.
#[allow(clippy::too_many_arguments)]
pub(crate) fn dot_rows(
    isa: Isa,
    a: &[i16],
    m: usize,
    k: usize,
    w: &[i8],
    n: usize,
    seg: usize,
    acc: &mut [i32],
    threads: &Threads,
) {
    assert!(k > 0 && seg > 0 && k.is_multiple_of(seg));
    let nb = k / seg;
    assert!(a.len() == m * k && w.len() == n * k && acc.len() == n * m * nb);
    if acc.is_empty() {
        return;
    }
    let tasks = with_pieces(split(n, 1, parts(threads, m * n * k, PARALLEL_MACS, n)), acc, m * nb);
    let d = Dots { a, m, k, seg, w };
    threads.for_each(tasks, |(cols, acc)| isa.run(&d, cols, acc));
}

/// The tasks of [`dot_rows`], each over the weight rows of its channels.
struct Dots<'a> {
    a: &'a [i16],
    m: usize,
    k: usize,
    seg: usize,
    w: &'a [i8],
}

impl IsaTask for Dots<'_> {
    type Out = [i32];
    const VNNI: bool = true;

    /// The sums of output channels `cols` into `acc` (`cols.len() * m * nb`).
    #[inline(always)]
    fn run(&self, cols: std::ops::Range<usize>, acc: &mut [i32]) {
        let nb = self.k / self.seg;
        let w = &self.w[cols.start * self.k..cols.end * self.k];
        for (wj, accj) in w.chunks_exact(self.k).zip(acc.chunks_exact_mut(self.m * nb)) {
            for (ar, accr) in self.a.chunks_exact(self.k).zip(accj.chunks_exact_mut(nb)) {
                for ((s, asg), wsg) in
                    accr.iter_mut().zip(ar.chunks_exact(self.seg)).zip(wj.chunks_exact(self.seg))
                {
                    *s = dot(asg, wsg);
                }
            }
        }
    }
}

/// `Σ a[i] * w[i]` in wrapping `i32`.
#[inline(always)]
fn dot(a: &[i16], w: &[i8]) -> i32 {
    a.iter().zip(w).fold(0i32, |s, (&x, &y)| s.wrapping_add(x as i32 * y as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A random product of `rows` rows of depth `k` into `lanes` output channels (`ldd`
    /// apart): packed weights, biases, scales (on every third case large enough to saturate)
    /// and an output range (narrowed on every fourth).
    struct PanelCase {
        case: usize,
        rows: usize,
        k: usize,
        lanes: usize,
        ldd: usize,
        w: Vec<i8>,
        bias: Vec<i32>,
        scales: Vec<f32>,
        o: Qs8Out,
    }

    impl PanelCase {
        fn new(rng: &mut fastrand::Rng, case: usize, rows: usize, k: usize, lanes: usize) -> Self {
            let ldd = lanes + rng.usize(0..5);
            let w: Vec<i8> = (0..lanes.div_ceil(NR) * k * NR).map(|_| rng.i8(..)).collect();
            let bias: Vec<i32> = (0..lanes).map(|_| rng.i32(-1 << 20..1 << 20)).collect();
            let big = case.is_multiple_of(3);
            let scales: Vec<f32> =
                (0..lanes).map(|_| if big { rng.f32() } else { rng.f32() * 1e-4 }).collect();
            let zp = rng.i32(-128..128);
            let (qmin, qmax) = if case % 4 == 1 { (zp.max(-100), 100) } else { (-128, 127) };
            let o = Qs8Out { zero_point: zp, qmin, qmax: qmax.max(qmin) };
            PanelCase { case, rows, k, lanes, ldd, w, bias, scales, o }
        }

        fn requant(&self) -> Requant<'_> {
            Requant { bias: &self.bias, scales: &self.scales, o: &self.o }
        }

        /// The plain reference of the product, each row's `k` unsigned inputs given by
        /// `row(r)`: sums in `i64` wrapped to `i32`, the bias added, then `qs8_requantize`;
        /// checked to saturate when the scales are large.
        fn want(&self, row: impl Fn(usize) -> Vec<u8>) -> Vec<i8> {
            let (k, w) = (self.k, &self.w);
            let mut want = vec![0i8; (self.rows - 1) * self.ldd + self.lanes];
            for r in 0..self.rows {
                let a = row(r);
                for n in 0..self.lanes {
                    let s: i64 = (0..k)
                        .map(|i| {
                            let wv = w[(n / NR) * k * NR + (i / 4) * 4 * NR + n % NR * 4 + i % 4];
                            i64::from(a[i]) * i64::from(wv)
                        })
                        .sum();
                    let acc = (s as i32).wrapping_add(self.bias[n]);
                    want[r * self.ldd + n] = qs8_requantize(acc, self.scales[n], &self.o);
                }
            }
            let o = &self.o;
            let saturated = want.iter().any(|&v| i32::from(v) == o.qmin || i32::from(v) == o.qmax);
            let big = self.case.is_multiple_of(3);
            assert!(
                !big || saturated || self.lanes * self.rows < 4,
                "case {} saturates nothing",
                self.case
            );
            want
        }

        /// `product`'s output of every ISA this CPU runs equals `want` on the live channels.
        fn check(&self, want: &[i8], product: impl Fn(Isa, &mut [i8])) {
            for isa in isas() {
                let mut got = vec![0i8; want.len()];
                product(isa, &mut got);
                for r in 0..self.rows {
                    let (g, e) =
                        (&got[r * self.ldd..][..self.lanes], &want[r * self.ldd..][..self.lanes]);
                    assert_eq!(g, e, "case {} {isa:?} row {r}", self.case);
                }
            }
        }
    }

    /// The quad product of every ISA this CPU runs equals a plain reference over random row
    /// counts, depths, output channels (up to three panels, the last one partial), zero
    /// points, scales (small ones and ones that saturate at both ends) and narrowed output
    /// ranges, with row and output strides wider than a row.
    #[test]
    fn quad_product_equals_reference() {
        let mut rng = fastrand::Rng::with_seed(41);
        for case in 0..400 {
            let (rows, k, lanes) = (rng.usize(1..=MR), 4 * rng.usize(1..40), rng.usize(1..=3 * NR));
            let t = PanelCase::new(&mut rng, case, rows, k, lanes);
            let lda = k + rng.usize(0..9);
            let a: Vec<u8> = (0..(rows - 1) * lda + k).map(|_| rng.u8(..)).collect();
            let want = t.want(|r| a[r * lda..][..k].to_vec());
            t.check(&want, |isa, got| {
                quad_product(isa, &a, lda, rows, k, &t.w, &t.requant(), got, t.ldd)
            });
        }
    }

    /// The tap product of every ISA this CPU runs equals the same reference, each row's window
    /// read tap by tap from the input or, for padded taps, the zero-point row, over random row
    /// counts, taps, channels (a multiple of 4), output channels (up to five panels: pairs of
    /// panels and a last one, partial or not), padded taps, zero points and scales that
    /// saturate at both ends.
    #[test]
    fn tap_product_equals_reference() {
        let mut rng = fastrand::Rng::with_seed(43);
        let mut padded = 0;
        for case in 0..300 {
            let (rows, taps, c) = (rng.usize(1..=MR), rng.usize(1..10), 4 * rng.usize(1..12));
            let lanes = rng.usize(1..=5 * NR);
            let t = PanelCase::new(&mut rng, case, rows, taps * c, lanes);
            let pixels = rng.usize(1..6);
            let x: Vec<u8> = (0..pixels * c).map(|_| rng.u8(..)).collect();
            let zp_row = vec![rng.u8(..); c];
            let offsets: Vec<usize> = (0..taps * rows)
                .map(|_| match rng.usize(0..4) {
                    0 => PADDED,
                    _ => rng.usize(0..pixels) * c,
                })
                .collect();
            padded += offsets.iter().filter(|&&o| o == PADDED).count();
            let want = t.want(|r| {
                (0..taps)
                    .flat_map(|tap| match offsets[tap * rows + r] {
                        PADDED => zp_row.clone(),
                        at => x[at..at + c].to_vec(),
                    })
                    .collect()
            });
            let windows = TapRows { x: &x, zp_row: &zp_row, offsets: &offsets, c };
            t.check(&want, |isa, got| {
                tap_product(isa, &windows, rows, &t.w, &t.requant(), got, t.ldd)
            });
        }
        assert!(padded > 100);
    }
}
