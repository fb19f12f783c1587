//! Prepared linear layer (f32): the weight packed once at construction, fused bias, residual
//! and activation.

use crate::compute::sgemm::{
    gemm_packed_b, gemm_packed_b_cols, need, Activation, Bias, Epilogue, GemmError, GemmScratch,
    MatRef, PackedB,
};
use crate::compute::threads::{
    self, caller_scratch, split, with_pieces, Threads, TASKS_PER_THREAD,
};

/// Multiply-adds from which a linear layer of many rows splits over threads.
const PARALLEL_MACS: usize = 1 << 18;

/// Multiply-adds from which a one-row product (a classifier, a squeeze-excite layer) splits
/// over threads by output features: it streams its weights from memory once, each thread
/// its share, so a smaller one pays than for many rows.
const PARALLEL_ROW_MACS: usize = 1 << 16;

/// Rows a split of a many-row product keeps together: whole tiles of every GEMM kernel's
/// rows in most parts.
const ROWS_UNIT: usize = 16;

/// Reusable buffers of [`PackedLinear::run`]: one per thread.
#[derive(Debug, Default)]
pub struct LinearScratch {
    parts: Vec<Part>,
}

impl LinearScratch {
    /// Bytes its buffers hold.
    pub fn heap_bytes(&self) -> usize {
        self.parts.iter().map(|p| p.gemm.heap_bytes()).sum()
    }
}

/// One thread's GEMM scratch, and the first error its tasks met.
#[derive(Debug, Default)]
struct Part {
    gemm: GemmScratch,
    error: Option<GemmError>,
}

/// How a linear layer's weight is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightLayout {
    /// `[N, K]`: PyTorch's `linear` weight.
    OutIn,
    /// `[K, N]`: a matrix product's right operand.
    InOut,
}

/// A linear layer `y = act(x * weight^T + bias + residual)` with the weight packed once.
#[derive(Debug)]
pub struct PackedLinear {
    weight: PackedB,
    bias: Option<Vec<f32>>,
    act: Activation,
}

impl PackedLinear {
    /// Bytes of prepared weights it holds (the packed weight and the bias).
    pub fn heap_bytes(&self) -> usize {
        self.weight.heap_bytes() + self.bias.as_ref().map_or(0, |b| b.capacity() * 4)
    }

    /// Prepares the layer: `weight` is `[out_features, in_features]` row-major (PyTorch
    /// `linear`), `bias` has `out_features` values. An error when a slice has the wrong
    /// length, a size overflows, or a clamp bound is NaN.
    pub fn new(
        in_features: usize,
        out_features: usize,
        weight: &[f32],
        bias: Option<&[f32]>,
        act: Activation,
    ) -> Result<Self, GemmError> {
        Self::with_weight(in_features, out_features, weight, WeightLayout::OutIn, bias, act)
    }

    /// The same with `weight` laid out as `layout` says ([`WeightLayout::InOut`]: a matrix
    /// product's `[K, N]` right operand, packed from where it lies).
    pub fn with_weight(
        in_features: usize,
        out_features: usize,
        weight: &[f32],
        layout: WeightLayout,
        bias: Option<&[f32]>,
        act: Activation,
    ) -> Result<Self, GemmError> {
        let wlen =
            in_features.checked_mul(out_features).ok_or(GemmError::Overflow("linear weight"))?;
        if weight.len() != wlen {
            return Err(GemmError::Short { what: "linear weight", need: wlen, len: weight.len() });
        }
        if let Some(b) = bias {
            if b.len() != out_features {
                return Err(GemmError::Short {
                    what: "linear bias",
                    need: out_features,
                    len: b.len(),
                });
            }
        }
        if let Activation::Clamp { min, max } = act {
            if min.is_nan() || max.is_nan() {
                return Err(GemmError::Invalid("linear: clamp bound is NaN"));
            }
        }
        // weight^T: element (k, n) at weight[n * in_features + k] ([N, K]), or at
        // weight[k * out_features + n] ([K, N]).
        let wt = match layout {
            WeightLayout::OutIn => MatRef::new(weight, in_features, out_features, 1, in_features)?,
            WeightLayout::InOut => MatRef::new(weight, in_features, out_features, out_features, 1)?,
        };
        let weight = PackedB::new(wt)?;
        Ok(PackedLinear { weight, bias: bias.map(<[f32]>::to_vec), act })
    }

    /// `out[m, N] = act(x[m, K] * weight^T + bias + residual)`, all row-major; `residual` (if
    /// any) has the shape of `out`. A large product splits over `threads`: a one-row product
    /// (a classifier) by output features, a product of many rows (a transformer's tokens) by
    /// rows. Every output element is computed by the same code whatever the split, so the
    /// bits are the same for any thread count. An error (nothing written) when a slice is
    /// short.
    pub fn run(
        &self,
        m: usize,
        x: &[f32],
        residual: Option<&[f32]>,
        out: &mut [f32],
        scratch: &mut LinearScratch,
        threads: &Threads,
    ) -> Result<(), GemmError> {
        let (k, n) = (self.weight.k(), self.weight.n());
        let a = MatRef::new(x, m, k, k, 1)?;
        let bias = self.bias.as_deref();
        let macs = m.saturating_mul(k).saturating_mul(n);
        let split_cols = m == 1;
        let nr = self.weight.panel_cols();
        let least = if split_cols { PARALLEL_ROW_MACS } else { PARALLEL_MACS };
        let parts = match macs >= least {
            // Each part streams its own output features' weights.
            true if split_cols => threads.tasks_for(TASKS_PER_THREAD, n.div_ceil(nr)),
            // Each part streams every weight (as a one-thread product does, block by block):
            // one part per thread, so that the weights are read once per thread, not once per
            // task.
            true => threads.tasks_for(1, m.div_ceil(ROWS_UNIT)),
            false => 1,
        };
        if parts == 1 {
            let ep =
                Epilogue { bias: bias.map_or(Bias::None, Bias::PerCol), residual, act: self.act };
            let gemm = &mut caller_scratch(&mut scratch.parts).gemm;
            return gemm_packed_b(a, &self.weight, out, n, &ep, gemm);
        }
        let len = m.checked_mul(n).ok_or(GemmError::Overflow("linear output"))?;
        need("linear output", len, out.len())?;
        if let Some(r) = residual {
            need("linear residual", len, r.len())?;
        }
        if split_cols {
            // One row: each part's output features are a contiguous piece of it.
            let pieces = with_pieces(split(n, nr, parts), &mut out[..n], 1);
            threads.for_each_with(pieces, &mut scratch.parts, |part, (cols, piece)| {
                let ep = Epilogue {
                    bias: bias.map_or(Bias::None, |b| Bias::PerCol(&b[cols.clone()])),
                    residual: residual.map(|r| &r[cols.clone()]),
                    act: self.act,
                };
                let w = cols.len();
                let e = gemm_packed_b_cols(a, &self.weight, cols, piece, w, &ep, &mut part.gemm);
                if let Err(e) = e {
                    part.error.get_or_insert(e);
                }
            });
        } else {
            // Rows: each part's rows of the input, the residual and the output are contiguous.
            let pieces = with_pieces(split(m, ROWS_UNIT, parts), &mut out[..len], n);
            threads.for_each_with(pieces, &mut scratch.parts, |part, (rows, piece)| {
                let ep = Epilogue {
                    bias: bias.map_or(Bias::None, Bias::PerCol),
                    residual: residual.map(|r| &r[rows.start * n..rows.end * n]),
                    act: self.act,
                };
                let run = MatRef::new(&x[rows.start * k..rows.end * k], rows.len(), k, k, 1)
                    .and_then(|a| gemm_packed_b(a, &self.weight, piece, n, &ep, &mut part.gemm));
                if let Err(e) = run {
                    part.error.get_or_insert(e);
                }
            });
        }
        // Every part's error is taken, so none is left for the next call.
        threads::first_error(scratch.parts.iter_mut().filter_map(|p| p.error.take()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::sgemm::tests::act_ref;

    #[test]
    fn packed_linear_matches_naive_loop() {
        let mut rng = fastrand::Rng::with_seed(0x11);
        let mut scratch = LinearScratch::default();
        let threads = Threads::default();
        for case in 0..80 {
            let m = if case % 4 == 0 { 1 } else { rng.usize(1..40) };
            let (k, n) = (rng.usize(0..300), rng.usize(1..150));
            let w: Vec<f32> = (0..n * k).map(|_| rng.f32() - 0.5).collect();
            let b: Vec<f32> = (0..n).map(|_| rng.f32() - 0.5).collect();
            let x: Vec<f32> = (0..m * k).map(|_| rng.f32() - 0.5).collect();
            let r: Vec<f32> = (0..m * n).map(|_| rng.f32() - 0.5).collect();
            let bias = if rng.bool() { Some(&b[..]) } else { None };
            let res = if rng.bool() { Some(&r[..]) } else { None };
            let act = [Activation::None, Activation::RELU, Activation::GeluTanh][case % 3];
            let lin = PackedLinear::new(k, n, &w, bias, act).unwrap();
            let mut out = vec![f32::NAN; m * n];
            lin.run(m, &x, res, &mut out, &mut scratch, &threads).unwrap();
            for i in 0..m {
                for j in 0..n {
                    let (mut s, mut mag) = (0f64, 0f64);
                    for p in 0..k {
                        let t = f64::from(x[i * k + p]) * f64::from(w[j * k + p]);
                        s += t;
                        mag += t.abs();
                    }
                    for e in [bias.map_or(0.0, |b| b[j]), res.map_or(0.0, |r| r[i * n + j])] {
                        s += f64::from(e);
                        mag += f64::from(e.abs());
                    }
                    let want = act_ref(act, s);
                    let tol = 3.0 * f64::from(f32::EPSILON) * ((k + 2) as f64 * mag + want.abs());
                    let got = f64::from(out[i * n + j]);
                    assert!((got - want).abs() <= tol + 1e-30, "{m}x{k}x{n} ({i},{j})");
                }
            }
        }
    }

    #[test]
    fn a_classifier_gives_the_same_bits_on_any_thread_count() {
        let mut rng = fastrand::Rng::with_seed(0x12);
        let (k, n) = (1280, 1000);
        assert!(k * n >= PARALLEL_MACS);
        let w: Vec<f32> = (0..n * k).map(|_| rng.f32() - 0.5).collect();
        let b: Vec<f32> = (0..n).map(|_| rng.f32() - 0.5).collect();
        let x: Vec<f32> = (0..k).map(|_| rng.f32() - 0.5).collect();
        let r: Vec<f32> = (0..n).map(|_| rng.f32() - 0.5).collect();
        let lin = PackedLinear::new(k, n, &w, Some(&b), Activation::RELU).unwrap();
        let mut first: Option<Vec<u32>> = None;
        for threads in [1, 2, 3].map(|t| Threads::new(t).unwrap()) {
            let mut out = vec![f32::NAN; n];
            lin.run(1, &x, Some(&r), &mut out, &mut LinearScratch::default(), &threads).unwrap();
            for j in 0..n {
                let dot: f64 = (0..k).map(|i| f64::from(x[i]) * f64::from(w[j * k + i])).sum();
                let want = (dot + f64::from(b[j]) + f64::from(r[j])).max(0.0);
                assert!((f64::from(out[j]) - want).abs() < 1e-4, "[{j}] {} vs {want}", out[j]);
            }
            let bits: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
            match &first {
                None => first = Some(bits),
                Some(f) => assert!(*f == bits, "{} threads differ", threads.count()),
            }
        }
    }

    #[test]
    fn many_rows_give_the_same_bits_on_any_thread_count() {
        // Token counts of a transformer (one not a multiple of the row unit), both activations
        // a linear fuses, a residual: every thread count gives the one-thread bits.
        let mut rng = fastrand::Rng::with_seed(0x13);
        for (m, k, n, act) in
            [(128, 96, 200, Activation::GeluTanh), (37, 160, 64, Activation::RELU)]
        {
            assert!(m * k * n >= PARALLEL_MACS);
            let w: Vec<f32> = (0..n * k).map(|_| rng.f32() - 0.5).collect();
            let b: Vec<f32> = (0..n).map(|_| rng.f32() - 0.5).collect();
            let x: Vec<f32> = (0..m * k).map(|_| rng.f32() - 0.5).collect();
            let r: Vec<f32> = (0..m * n).map(|_| rng.f32() - 0.5).collect();
            let lin = PackedLinear::new(k, n, &w, Some(&b), act).unwrap();
            let mut first: Option<Vec<u32>> = None;
            for threads in [1, 2, 3, 4].map(|t| Threads::new(t).unwrap()) {
                let mut out = vec![f32::NAN; m * n];
                let mut scratch = LinearScratch::default();
                lin.run(m, &x, Some(&r), &mut out, &mut scratch, &threads).unwrap();
                assert!(
                    out.iter().all(|v| v.is_finite()),
                    "{} threads left a hole",
                    threads.count()
                );
                let bits: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
                match &first {
                    None => first = Some(bits),
                    Some(f) => {
                        assert!(*f == bits, "{m}x{k}x{n}: {} threads differ", threads.count())
                    }
                }
            }
        }
    }

    #[test]
    fn hostile_linear_is_an_error() {
        let w = [1.0f32; 6];
        let act = Activation::None;
        assert!(PackedLinear::new(3, 3, &w, None, act).is_err());
        assert!(PackedLinear::new(usize::MAX, 2, &w, None, act).is_err());
        assert!(PackedLinear::new(3, 2, &w, Some(&[1.0]), act).is_err());
        let lin = PackedLinear::new(3, 2, &w, None, act).unwrap();
        let mut s = LinearScratch::default();
        let t = Threads::default();
        let mut out = [0.0f32; 4];
        assert!(lin.run(2, &[1.0; 5], None, &mut out, &mut s, &t).is_err());
        assert!(lin.run(2, &[1.0; 6], None, &mut out[..3], &mut s, &t).is_err());
        assert!(lin.run(2, &[1.0; 6], Some(&[0.0; 3]), &mut out, &mut s, &t).is_err());
        assert!(lin.run(usize::MAX, &[1.0; 6], None, &mut out, &mut s, &t).is_err());
        assert_eq!(out, [0.0; 4]);
        lin.run(2, &[1.0; 6], None, &mut out, &mut s, &t).unwrap();
        assert_eq!(out, [3.0; 4]);
    }
}
