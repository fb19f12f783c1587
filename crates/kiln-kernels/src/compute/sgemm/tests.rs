//! Every available microkernel against a naive f64 reference.

use super::*;
use crate::compute::special::erf;

/// Independent f64 reference of an activation.
pub(crate) fn act_ref(act: Activation, x: f64) -> f64 {
    match act {
        Activation::None => x,
        Activation::Clamp { min, max } => {
            if x.is_nan() {
                x
            } else {
                x.max(f64::from(min)).min(f64::from(max))
            }
        }
        Activation::Hardswish => x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
        Activation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Activation::Silu => x * (1.0 / (1.0 + (-x).exp())),
        Activation::Gelu => 0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2)),
        Activation::GeluTanh => {
            let inner = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3));
            0.5 * x * (1.0 + inner.tanh())
        }
    }
}

const ACTS: [Activation; 8] = [
    Activation::None,
    Activation::RELU,
    Activation::Clamp { min: -0.5, max: 0.75 },
    Activation::Hardswish,
    Activation::Sigmoid,
    Activation::Silu,
    Activation::Gelu,
    Activation::GeluTanh,
];

/// A random `rows x cols` matrix stored row-major or column-major (with padding).
struct Stored {
    data: Vec<f32>,
    rs: usize,
    cs: usize,
}

fn stored(rng: &mut fastrand::Rng, rows: usize, cols: usize) -> Stored {
    let pad = rng.usize(0..3);
    let (rs, cs, len) = if rng.bool() {
        (cols + pad, 1, rows * (cols + pad))
    } else {
        (1, rows + pad, cols * (rows + pad))
    };
    let data = (0..len.max(1)).map(|_| rng.f32() * 2.0 - 1.0).collect();
    Stored { data, rs, cs }
}

impl Stored {
    fn at(&self, i: usize, j: usize) -> f32 {
        self.data[i * self.rs + j * self.cs]
    }
}

/// Checks `got` (row stride `ldc`) against the reference of `act(a*b + bias + residual)`;
/// tolerance scaled with the depth and the magnitude of the summed terms.
#[allow(clippy::too_many_arguments)]
fn check(
    what: &str,
    m: usize,
    n: usize,
    k: usize,
    a: &Stored,
    b: &Stored,
    ep: &Epilogue<'_>,
    got: &[f32],
    ldc: usize,
) {
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut mag) = (0f64, 0f64);
            for p in 0..k {
                let t = f64::from(a.at(i, p)) * f64::from(b.at(p, j));
                s += t;
                mag += t.abs();
            }
            let bias = match ep.bias {
                Bias::None => 0.0,
                Bias::PerRow(v) => v[i],
                Bias::PerCol(v) => v[j],
            };
            let res = ep.residual.map_or(0.0, |r| r[i * ldc + j]);
            s += f64::from(bias) + f64::from(res);
            mag += f64::from(bias.abs()) + f64::from(res.abs());
            let want = act_ref(ep.act, s);
            let tol = 2.0 * f64::from(f32::EPSILON) * ((k + 2) as f64 * mag + want.abs()) + 1e-30;
            let g = f64::from(got[i * ldc + j]);
            assert!(
                (g - want).abs() <= tol,
                "{what} {m}x{n}x{k} {:?} ({i},{j}): got {g}, want {want}, tol {tol}",
                ep.act
            );
        }
    }
}

/// One random case on `kernel`, through all three entry points.
fn case(rng: &mut fastrand::Rng, kernel: &'static Kernel, m: usize, n: usize, k: usize) {
    let a = stored(rng, m, k);
    let b = stored(rng, k, n);
    let ldc = n + rng.usize(0..3);
    let c_len = if m == 0 { 0 } else { (m - 1) * ldc + n };
    let row_bias: Vec<f32> = (0..m).map(|_| rng.f32() - 0.5).collect();
    let col_bias: Vec<f32> = (0..n).map(|_| rng.f32() - 0.5).collect();
    let residual: Vec<f32> = (0..c_len).map(|_| rng.f32() - 0.5).collect();
    let bias = match rng.usize(0..3) {
        0 => Bias::None,
        1 => Bias::PerRow(&row_bias),
        _ => Bias::PerCol(&col_bias),
    };
    let ep = Epilogue {
        bias,
        residual: if rng.bool() { Some(&residual) } else { None },
        act: ACTS[rng.usize(0..ACTS.len())],
    };
    let am = MatRef::new(&a.data, m, k, a.rs, a.cs).unwrap();
    let bm = MatRef::new(&b.data, k, n, b.rs, b.cs).unwrap();
    let mut scratch = GemmScratch::default();

    let mut c = vec![f32::NAN; c_len];
    gemm_on(kernel, am, bm, &mut c, ldc, &ep, &mut scratch).unwrap();
    check(kernel.name, m, n, k, &a, &b, &ep, &c, ldc);

    let pa = PackedA::with_kernel(kernel, am).unwrap();
    let mut c = vec![f32::NAN; c_len];
    gemm_packed_a(&pa, &bm, &mut c, ldc, &ep, &mut scratch).unwrap();
    check(kernel.name, m, n, k, &a, &b, &ep, &c, ldc);

    let pb = PackedB::with_kernel(kernel, bm).unwrap();
    let mut c = vec![f32::NAN; c_len];
    gemm_packed_b(am, &pb, &mut c, ldc, &ep, &mut scratch).unwrap();
    check(kernel.name, m, n, k, &a, &b, &ep, &c, ldc);
}

#[test]
fn every_kernel_matches_reference() {
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    for kernel in available() {
        // Edges: below one tile, exactly one tile, k = 0 and 1.
        for (m, n, k) in [
            (1, 1, 0),
            (1, 1, 1),
            (kernel.mr, kernel.nr, 1),
            (kernel.mr - 1, kernel.nr - 1, 0),
            (kernel.mr + 1, kernel.nr + 1, 7),
            (2, 3, kernel.kc * 2 + 5),
        ] {
            case(&mut rng, kernel, m, n, k);
        }
        for _ in 0..60 {
            let (m, n, k) = (rng.usize(1..50), rng.usize(1..80), rng.usize(0..300));
            case(&mut rng, kernel, m, n, k);
        }
        // Several row, column and depth blocks.
        case(&mut rng, kernel, kernel.mc + 5, 40, kernel.kc + 3);
        // Strips: row panels across several whole column panels and a narrower last one,
        // over two depth blocks (the second accumulating).
        case(&mut rng, kernel, 2 * kernel.mr + 3, 4 * kernel.nr + 5, kernel.kc + 9);
        case(&mut rng, kernel, 3, kernel.nc + 7, 9);
        // Tile by tile (a packed B too large to stay in cache between row panels): each
        // column panel down a stack of whole row panels, then the short last one.
        let n = 3 * kernel.nr + 7;
        case(&mut rng, kernel, 3 * kernel.mr + 5, n, STRIP_B_BYTES / 4 / n + 9);
    }
}

/// A product of 17 to 24 columns (on AVX-512, its columns past 16 summed in a ymm register)
/// gives, column by column, the bits of the same columns of a product 32 columns wide (summed
/// in two zmm registers): with A packed per call or read in place, over one and two depth
/// blocks, with a bias per column and a clamp.
#[test]
fn narrow_tiles_give_the_bits_of_wide_ones() {
    let mut rng = fastrand::Rng::with_seed(24);
    for kernel in available() {
        for n in 17..=24 {
            let (m, k) = (rng.usize(1..3 * kernel.mr), [1, 24, kernel.kc + 9][n % 3]);
            let a: Vec<f32> = (0..m * k).map(|_| rng.f32() - 0.5).collect();
            let b: Vec<f32> = (0..k * 32).map(|_| rng.f32() - 0.5).collect();
            let bias: Vec<f32> = (0..32).map(|_| rng.f32() - 0.5).collect();
            let am = MatRef::new(&a, m, k, k, 1).unwrap();
            let ep = |width: usize| Epilogue {
                bias: Bias::PerCol(&bias[..width]),
                residual: None,
                act: Activation::Clamp { min: -0.5, max: 0.5 },
            };
            let mut s = GemmScratch::default();
            let run = |width: usize, packed_b: bool, s: &mut GemmScratch| {
                let bm = MatRef::new(&b, k, width, 32, 1).unwrap();
                let mut c = vec![f32::NAN; m * width];
                if packed_b {
                    let pb = PackedB::with_kernel(kernel, bm).unwrap();
                    gemm_packed_b(am, &pb, &mut c, width, &ep(width), s).unwrap();
                } else {
                    gemm_on(kernel, am, bm, &mut c, width, &ep(width), s).unwrap();
                }
                c
            };
            for packed_b in [false, true] {
                let (narrow, wide) = (run(n, packed_b, &mut s), run(32, packed_b, &mut s));
                for (i, row) in narrow.chunks(n).enumerate() {
                    for (j, x) in row.iter().enumerate() {
                        let y = wide[i * 32 + j];
                        let what = format!("{} {m}x{k}x{n} ({i}, {j})", kernel.name);
                        assert_eq!(x.to_bits(), y.to_bits(), "{what}: {x} vs {y}");
                    }
                }
            }
        }
    }
}

/// A read in place (rows of a matrix, as a 1x1 convolution over a channels-last image
/// reads them; on AMD's cores in strips of 7 rows) gives the bits of A packed into panels
/// (strips of `mr` rows): with whole and partial row panels, one and several column panels,
/// and the epilogue.
#[test]
fn a_in_place_gives_the_bits_of_a_packed() {
    let mut rng = fastrand::Rng::with_seed(7);
    for kernel in available() {
        for (m, n, k) in [(14, 32, 9), (28, 16, 24), (47, 40, 100), (3 * kernel.mr + 5, 96, 33)] {
            let a: Vec<f32> = (0..m * k).map(|_| rng.f32() - 0.5).collect();
            let b: Vec<f32> = (0..k * n).map(|_| rng.f32() - 0.5).collect();
            let bias: Vec<f32> = (0..n).map(|_| rng.f32() - 0.5).collect();
            let res: Vec<f32> = (0..m * n).map(|_| rng.f32() - 0.5).collect();
            let ep = Epilogue {
                bias: Bias::PerCol(&bias),
                residual: Some(&res),
                act: Activation::Clamp { min: -0.5, max: 0.5 },
            };
            let (am, bm) =
                (MatRef::new(&a, m, k, k, 1).unwrap(), MatRef::new(&b, k, n, n, 1).unwrap());
            let mut s = GemmScratch::default();
            let mut in_place = vec![f32::NAN; m * n];
            let pb = PackedB::with_kernel(kernel, bm).unwrap();
            gemm_packed_b(am, &pb, &mut in_place, n, &ep, &mut s).unwrap();
            let mut packed = vec![f32::NAN; m * n];
            let pa = PackedA::with_kernel(kernel, am).unwrap();
            gemm_packed_a(&pa, &bm, &mut packed, n, &ep, &mut s).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&in_place), bits(&packed), "{} {m}x{k}x{n}", kernel.name);
        }
    }
}

#[test]
fn every_activation_on_every_kernel() {
    let mut rng = fastrand::Rng::with_seed(3);
    for kernel in available() {
        for act in ACTS {
            let (m, n, k) = (kernel.mr + 2, kernel.nr + 3, 17);
            let a = stored(&mut rng, m, k);
            let b = stored(&mut rng, k, n);
            let bias: Vec<f32> = (0..m).map(|_| rng.f32() * 4.0 - 2.0).collect();
            let ep = Epilogue { bias: Bias::PerRow(&bias), residual: None, act };
            let am = MatRef::new(&a.data, m, k, a.rs, a.cs).unwrap();
            let bm = MatRef::new(&b.data, k, n, b.rs, b.cs).unwrap();
            let mut c = vec![0.0; m * n];
            gemm_on(kernel, am, bm, &mut c, n, &ep, &mut GemmScratch::default()).unwrap();
            check(kernel.name, m, n, k, &a, &b, &ep, &c, n);
        }
    }
}

#[test]
fn clamp_propagates_nan() {
    for kernel in available() {
        let a = [f32::NAN, 1.0];
        let b = [1.0f32; 3];
        let am = MatRef::new(&a, 2, 1, 1, 1).unwrap();
        let bm = MatRef::new(&b, 1, 3, 3, 1).unwrap();
        let ep = Epilogue { act: Activation::RELU, ..Epilogue::NONE };
        let mut c = [0.0; 6];
        gemm_on(kernel, am, bm, &mut c, 3, &ep, &mut GemmScratch::default()).unwrap();
        assert!(c[..3].iter().all(|x| x.is_nan()), "{}", kernel.name);
        assert_eq!(c[3..], [1.0; 3], "{}", kernel.name);
    }
}

#[test]
fn steady_state_does_not_grow_scratch() {
    let (m, n, k) = (37, 300, 290);
    let a = vec![0.5f32; m * k];
    let b = vec![0.25f32; k * n];
    let am = MatRef::new(&a, m, k, k, 1).unwrap();
    let bm = MatRef::new(&b, k, n, n, 1).unwrap();
    let mut c = vec![0.0; m * n];
    let mut s = GemmScratch::default();
    gemm(am, bm, &mut c, n, &Epilogue::NONE, &mut s).unwrap();
    let caps = (s.a.capacity(), s.b.capacity(), s.a.as_ptr(), s.b.as_ptr());
    gemm(am, bm, &mut c, n, &Epilogue::NONE, &mut s).unwrap();
    assert_eq!(caps, (s.a.capacity(), s.b.capacity(), s.a.as_ptr(), s.b.as_ptr()));
    assert!(c.iter().all(|&x| x == 0.125 * k as f32));
}

/// A tile of `panels` x `cols` over buffers sized for exactly `panels` whole panels.
fn strip_tile<'a>(b: &'a [f32], c: &'a mut [f32], panels: usize, cols: usize) -> Tile<'a> {
    Tile {
        kc: 2,
        a: &[0.0; 2],
        a_rs: 1,
        a_ks: 1,
        b,
        b_stride: 2 * 8,
        c,
        ldc: 3 * 8,
        rows: 1,
        stack: 1,
        a_stack: 0,
        panels,
        cols,
        accumulate: false,
        row_bias: None,
        col_bias: None,
        residual: None,
        clamp: None,
        ind: None,
    }
}

#[test]
fn strip_bounds_are_checked() {
    let (b, mut c) = ([0.0f32; 3 * 2 * 8], [0.0f32; 3 * 8]);
    assert!(strip_tile(&b, &mut c, 3, 8).check(1, 8));
    assert!(strip_tile(&b, &mut c, 1, 5).check(1, 8));
    // No tiles; several tiles not all whole; more tiles than B panels or C columns.
    assert!(!strip_tile(&b, &mut c, 0, 8).check(1, 8));
    assert!(!strip_tile(&b, &mut c, 2, 7).check(1, 8));
    assert!(!strip_tile(&b[..b.len() - 1], &mut c, 3, 8).check(1, 8));
    assert!(!strip_tile(&b, &mut c[..3 * 8 - 1], 3, 8).check(1, 8));
    assert!(!strip_tile(&b, &mut c, usize::MAX, 8).check(1, 8));
    let bias = [0.0f32; 3 * 8 - 1];
    let mut t = strip_tile(&b, &mut c, 3, 8);
    t.col_bias = Some(&bias);
    assert!(!t.check(1, 8));
}

/// `stack` strips of 2 rows of depth 2, A's rows in place (2 values apart, 4 per strip).
fn stacked_tile<'a>(a: &'a [f32], b: &'a [f32], c: &'a mut [f32], stack: usize) -> Tile<'a> {
    let tile = strip_tile(b, c, 1, 8);
    Tile { a, a_rs: 2, b_stride: 0, ldc: 8, rows: 2, stack, a_stack: 4, ..tile }
}

#[test]
fn stack_bounds_are_checked() {
    let (a, b, mut c) = ([0.0f32; 3 * 4], [0.0f32; 2 * 8], [0.0f32; 6 * 8]);
    assert!(stacked_tile(&a, &b, &mut c, 3).check(2, 8));
    // No strips; A or C one value short of the last strip; a stack past usize.
    assert!(!stacked_tile(&a, &b, &mut c, 0).check(2, 8));
    assert!(!stacked_tile(&a[..a.len() - 1], &b, &mut c, 3).check(2, 8));
    assert!(!stacked_tile(&a, &b, &mut c[..6 * 8 - 1], 3).check(2, 8));
    assert!(!stacked_tile(&a, &b, &mut c, usize::MAX).check(2, 8));
    let bias = [0.0f32; 6 - 1];
    let mut t = stacked_tile(&a, &b, &mut c, 3);
    t.row_bias = Some(&bias);
    assert!(!t.check(2, 8));
    // A stacked indirection buffer needs the offsets of every strip: 2 strips of 2 taps of
    // 1 channel (kc 2), 2 offsets per tap.
    let (offsets, zeros) = ([0usize; 2 * 2 * 2], [0.0f32; 1]);
    let ind =
        |offsets| kernel::Indirect { offsets, stride: 2, channels: 1, reach: 1, zeros: &zeros };
    let mut t = stacked_tile(&a, &b, &mut c, 2);
    t.ind = Some(ind(&offsets[..offsets.len() - 1]));
    assert!(!t.check(2, 8));
    t.ind = Some(ind(&offsets));
    assert!(t.check(2, 8));
    t.stack = usize::MAX;
    assert!(!t.check(2, 8));
    // No kernel computes a stacked indirect call whose offsets stop short of its last strip,
    // not even one that splits it tile by tile.
    for kernel in available() {
        let (b, mut c) = ([0.0f32; 2 * 32], [0.0f32; 6 * 32]);
        let mut t = stacked_tile(&a, &b, &mut c, 2);
        (t.ldc, t.cols) = (32, 1);
        t.ind = Some(ind(&offsets[..offsets.len() - 1]));
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (kernel.run)(&mut t)));
        assert!(run.is_err(), "{}", kernel.name);
    }
}

/// A stacked indirect call (strip `s` reading the offsets of the `s`-th panel after the
/// first) gives, on every kernel, the bits of its strips computed one call each.
#[test]
fn stacked_indirect_strips_give_the_bits_of_single_calls() {
    let mut rng = fastrand::Rng::with_seed(0x57a);
    for kernel in available() {
        for _ in 0..30 {
            let (rows, nr) = (kernel.ind_mr, kernel.nr);
            let (channels, taps, stack) = (rng.usize(1..10), rng.usize(1..5), rng.usize(1..6));
            let cols = rng.usize(1..=nr);
            let kc = taps * channels;
            let image: Vec<f32> = (0..200).map(|_| rng.f32() * 2.0 - 1.0).collect();
            let offsets: Vec<usize> = (0..stack * taps * rows)
                .map(|_| {
                    if rng.usize(0..5) == 0 {
                        kernel::ZERO_ROW
                    } else {
                        rng.usize(0..=200 - channels)
                    }
                })
                .collect();
            let zeros = vec![0.0f32; channels];
            let b: Vec<f32> = (0..kc * nr).map(|_| rng.f32() - 0.5).collect();
            let ldc = cols + rng.usize(0..3);
            let len = (stack * rows - 1) * ldc + cols;
            let bias: Vec<f32> = (0..cols).map(|_| rng.f32() - 0.5).collect();
            let residual: Vec<f32> = (0..len).map(|_| rng.f32() - 0.5).collect();
            let residual = rng.bool().then_some(&residual[..]);
            let clamp = rng.bool().then_some((-0.5f32, 0.5f32));
            let tile = |offsets: &'_ [usize], c: &mut Vec<f32>, at: usize, stack: usize| {
                let mut t = Tile {
                    kc,
                    a: &image,
                    a_rs: 0,
                    a_ks: 0,
                    b: &b,
                    b_stride: 0,
                    c: &mut c[at..],
                    ldc,
                    rows,
                    stack,
                    a_stack: 0,
                    panels: 1,
                    cols,
                    accumulate: false,
                    row_bias: None,
                    col_bias: Some(&bias),
                    residual: residual.map(|r| &r[at..]),
                    clamp,
                    ind: Some(kernel::Indirect {
                        offsets,
                        stride: rows,
                        channels,
                        reach: image.len(),
                        zeros: &zeros,
                    }),
                };
                (kernel.run)(&mut t);
            };
            let mut stacked = vec![f32::NAN; len];
            tile(&offsets, &mut stacked, 0, stack);
            let mut single = vec![f32::NAN; len];
            for s in 0..stack {
                tile(&offsets[s * taps * rows..], &mut single, s * rows * ldc, 1);
            }
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&stacked), bits(&single), "{} stack {stack}", kernel.name);
        }
    }
}

#[test]
fn hostile_shapes_are_errors() {
    let v = [1.0f32; 8];
    assert!(matches!(MatRef::new(&v, 3, 3, 3, 1), Err(GemmError::Short { .. })));
    assert!(matches!(MatRef::new(&v, usize::MAX, 2, usize::MAX, 1), Err(GemmError::Overflow(_))));
    assert!(MatRef::new(&v, 0, usize::MAX, 5, 1).is_ok());
    let a = MatRef::new(&v, 2, 4, 4, 1).unwrap();
    let b3 = MatRef::new(&v, 3, 2, 2, 1).unwrap();
    let b4 = MatRef::new(&v, 4, 2, 2, 1).unwrap();
    let mut s = GemmScratch::default();
    let mut c = [0.0f32; 4];
    let ep = Epilogue::NONE;
    assert!(matches!(gemm(a, b3, &mut c, 2, &ep, &mut s), Err(GemmError::Invalid(_))));
    assert!(matches!(gemm(a, b4, &mut c[..3], 2, &ep, &mut s), Err(GemmError::Short { .. })));
    assert!(matches!(gemm(a, b4, &mut c, 1, &ep, &mut s), Err(GemmError::Invalid(_))));
    assert!(matches!(gemm(a, b4, &mut c, usize::MAX, &ep, &mut s), Err(GemmError::Overflow(_))));
    let short = [0.0f32; 1];
    for bias in [Bias::PerRow(&short), Bias::PerCol(&short)] {
        let ep = Epilogue { bias, ..Epilogue::NONE };
        assert!(matches!(gemm(a, b4, &mut c, 2, &ep, &mut s), Err(GemmError::Short { .. })));
    }
    let ep = Epilogue { residual: Some(&short), ..Epilogue::NONE };
    assert!(matches!(gemm(a, b4, &mut c, 2, &ep, &mut s), Err(GemmError::Short { .. })));
    let ep = Epilogue { act: Activation::Clamp { min: f32::NAN, max: 1.0 }, ..Epilogue::NONE };
    assert!(matches!(gemm(a, b4, &mut c, 2, &ep, &mut s), Err(GemmError::Invalid(_))));
    let pa = PackedA::new(a).unwrap();
    assert!(matches!(
        gemm_packed_a(&pa, &b3, &mut c, 2, &Epilogue::NONE, &mut s),
        Err(GemmError::Invalid(_))
    ));
    let pb = PackedB::new(b3).unwrap();
    assert!(matches!(
        gemm_packed_b(a, &pb, &mut c, 2, &Epilogue::NONE, &mut s),
        Err(GemmError::Invalid(_))
    ));
    assert_eq!(c, [0.0; 4]);
}

/// The im2col packer against the explicit im2col matrix, on random sub-blocks (any `k0`, `n0`,
/// partial panels).
#[test]
fn im2col_blocks_match_explicit_matrix() {
    let mut rng = fastrand::Rng::with_seed(0x12c);
    let mut done = 0;
    while done < 200 {
        let (c, h, w) = (rng.usize(1..5), rng.usize(1..12), rng.usize(1..12));
        let (kh, kw) = (rng.usize(1..6), rng.usize(1..6));
        let st = [rng.usize(1..4), rng.usize(1..4)];
        let pd = [rng.usize(0..4), rng.usize(0..4)];
        let dl = [rng.usize(1..3), rng.usize(1..3)];
        let x: Vec<f32> = (0..c * h * w).map(|_| rng.f32() + 0.5).collect();
        let Ok(im) = Im2col::new(&x, [c, h, w], [kh, kw], st, pd, dl) else { continue };
        let (k, n) = (im.k(), im.n());
        let ow = n / out_len(h, kh, st[0], pd[0], dl[0]).unwrap();
        // Explicit im2col value of row r, column j.
        let at = |r: usize, j: usize| -> f32 {
            let (ci, ky, kx) = (r / (kh * kw), r / kw % kh, r % kw);
            let (oy, ox) = (j / ow, j % ow);
            let iy = (oy * st[0] + ky * dl[0]) as isize - pd[0] as isize;
            let ix = (ox * st[1] + kx * dl[1]) as isize - pd[1] as isize;
            if iy < 0 || ix < 0 || iy as usize >= h || ix as usize >= w {
                0.0
            } else {
                x[(ci * h + iy as usize) * w + ix as usize]
            }
        };
        let nr = [4, 8, 16, 32][rng.usize(0..4)];
        let k0 = rng.usize(0..k);
        let kc = rng.usize(1..=k - k0);
        let n0 = rng.usize(0..n);
        let nc = rng.usize(1..=n - n0);
        let mut dst = vec![f32::NAN; nc.div_ceil(nr) * nr * kc];
        im.pack(k0, kc, n0, nc, nr, &mut dst);
        for q in 0..nc.div_ceil(nr) {
            for kk in 0..kc {
                for jj in 0..nr {
                    let got = dst[q * nr * kc + kk * nr + jj];
                    let j = q * nr + jj;
                    let want = if j < nc { at(k0 + kk, n0 + j) } else { 0.0 };
                    assert_eq!(got, want, "c{c} {h}x{w} k{kh}x{kw} rows {k0}+{kc} cols {n0}+{nc}");
                }
            }
        }
        done += 1;
    }
}

/// The convolution read through an indirection buffer (of the image, or of a padded copy),
/// on every kernel, against the product of the explicit channels-last im2col matrix, computed
/// in up to four blocks of whole panels (as threads split it).
#[test]
fn indirect_convolution_matches_reference() {
    use crate::compute::conv::Geometry;
    let mut rng = fastrand::Rng::with_seed(0x16e);
    for kernel in available() {
        let (mr, nr) = (kernel.ind_mr, kernel.nr);
        let mut done = 0;
        while done < 40 {
            // Sometimes more output pixels than a block of rows (`mc`), in several stacks.
            let side = if rng.usize(0..4) == 0 { 40 } else { 10 };
            let (c, h, w) = (rng.usize(1..20), rng.usize(1..side), rng.usize(1..side));
            let (kh, kw) = (rng.usize(1..4), rng.usize(1..4));
            let stride = [rng.usize(1..3), rng.usize(1..3)];
            let pad = [rng.usize(0..kh), rng.usize(0..kw)];
            let dil = [rng.usize(1..3), rng.usize(1..3)];
            let oh = out_len(h, kh, stride[0], pad[0], dil[0]);
            let ow = out_len(w, kw, stride[1], pad[1], dil[1]);
            let (Some(oh), Some(ow)) = (oh, ow) else { continue };
            let g = Geometry { c, h, w, kh, kw, oh, ow, stride, pad, dil };
            let image: Vec<f32> = (0..h * w * c).map(|_| rng.f32() * 2.0 - 1.0).collect();
            let (m, k, n) = (oh * ow, kh * kw * c, rng.usize(1..70));
            // Row: output pixel; depth: (ky, kx, channel); zero in the padding.
            let mut cols = vec![0f32; m * k];
            for (p, row) in cols.chunks_exact_mut(k).enumerate() {
                for (t, tap) in row.chunks_exact_mut(c).enumerate() {
                    let iy = (p / ow * stride[0] + t / kw * dil[0]) as isize - pad[0] as isize;
                    let ix = (p % ow * stride[1] + t % kw * dil[1]) as isize - pad[1] as isize;
                    if iy >= 0 && ix >= 0 && (iy as usize) < h && (ix as usize) < w {
                        let px = iy as usize * w + ix as usize;
                        tap.copy_from_slice(&image[px * c..][..c]);
                    }
                }
            }
            let a = Stored { data: cols, rs: k, cs: 1 };
            let b = stored(&mut rng, k, n);
            let pb = PackedB::with_kernel(kernel, MatRef::new(&b.data, k, n, b.rs, b.cs).unwrap())
                .unwrap();
            // Half the cases read a copy padded with zeros, a kernel row per tap.
            let (ind, image) = if dil[1] == 1 && rng.bool() {
                let (hp, wp) = (h + 2 * pad[0], w + 2 * pad[1]);
                let mut padded = vec![0f32; hp * wp * c];
                for (px, v) in image.chunks_exact(c).enumerate() {
                    let at = ((px / w + pad[0]) * wp + px % w + pad[1]) * c;
                    padded[at..][..c].copy_from_slice(v);
                }
                (Indirection::padded(&g, mr).unwrap(), padded)
            } else {
                (Indirection::new(&g, mr).unwrap(), image)
            };
            let ldc = n + rng.usize(0..3);
            let c_len = (m - 1) * ldc + n;
            let bias: Vec<f32> = (0..n).map(|_| rng.f32() - 0.5).collect();
            let residual: Vec<f32> = (0..c_len).map(|_| rng.f32() - 0.5).collect();
            let with_residual = rng.bool();
            let act = ACTS[rng.usize(0..ACTS.len())];
            let (row_cut, col_cut) = (rng.usize(0..=m / mr) * mr, rng.usize(0..=n / nr) * nr);
            let mut got = vec![f32::NAN; c_len];
            let mut scratch = GemmScratch::default();
            for rows in [0..row_cut, row_cut..m] {
                for cols in [0..col_cut, col_cut..n] {
                    if rows.is_empty() || cols.is_empty() {
                        continue;
                    }
                    let at = rows.start * ldc + cols.start;
                    let ep = Epilogue {
                        bias: Bias::PerCol(&bias[cols.start..]),
                        residual: with_residual.then(|| &residual[at..]),
                        act,
                    };
                    let out = &mut got[at..];
                    let rows = rows.clone();
                    gemm_indirect(&ind, &image, rows, &pb, cols, out, ldc, &ep, &mut scratch)
                        .unwrap();
                }
            }
            let residual = with_residual.then_some(&residual[..]);
            let ep = Epilogue { bias: Bias::PerCol(&bias), residual, act };
            check(kernel.name, m, n, k, &a, &b, &ep, &got, ldc);
            // Refusals: a short image, a row range off its panels.
            let ep = Epilogue::NONE;
            let short = &image[..image.len() - 1];
            let r = gemm_indirect(&ind, short, 0..m, &pb, 0..n, &mut got, ldc, &ep, &mut scratch);
            assert!(matches!(r, Err(GemmError::Short { .. })));
            if m > 1 {
                let r =
                    gemm_indirect(&ind, &image, 1..m, &pb, 0..n, &mut got, ldc, &ep, &mut scratch);
                assert!(matches!(r, Err(GemmError::Invalid(_))));
            }
            done += 1;
        }
    }
}
