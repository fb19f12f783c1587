//! Matrix multiplication over strided operands in a calc type: f32 on kiln's packed kernels,
//! every calc type through a portable reference loop.

use std::cell::RefCell;

use crate::compute::sgemm::{self, Epilogue, GemmScratch, MatRef};
use crate::element::Calc;

/// A strided matrix operand: element slice, rows, columns, row stride, column stride.
#[derive(Clone, Copy, Debug)]
pub struct Mat<'a, T> {
    /// The elements.
    pub data: &'a [T],
    /// Row stride (elements).
    pub rs: usize,
    /// Column stride (elements).
    pub cs: usize,
}

/// A strided mutable matrix operand.
#[derive(Debug)]
pub struct MatMut<'a, T> {
    /// The elements.
    pub data: &'a mut [T],
    /// Row stride (elements).
    pub rs: usize,
    /// Column stride (elements).
    pub cs: usize,
}

/// Largest element index touched by an `rows x cols` matrix with these strides, plus one.
fn extent(rows: usize, cols: usize, rs: usize, cs: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    (rows - 1).checked_mul(rs)?.checked_add((cols - 1).checked_mul(cs)?)?.checked_add(1)
}

/// Whether the operands of an `m x k` by `k x n` product into `m x n` fit their slices.
pub fn fits<T, U>(
    m: usize,
    n: usize,
    k: usize,
    a: &Mat<'_, T>,
    b: &Mat<'_, T>,
    c: &MatMut<'_, U>,
) -> bool {
    let ok = |e: Option<usize>, len: usize| e.is_some_and(|e| e <= len);
    ok(extent(m, k, a.rs, a.cs), a.data.len())
        && ok(extent(k, n, b.rs, b.cs), b.data.len())
        && ok(extent(m, n, c.rs, c.cs), c.data.len())
}

/// Reference: `c = (accumulate ? c : 0) + a * b` in the calc type, any element type.
pub fn gemm_ref<C: Calc>(
    m: usize,
    n: usize,
    k: usize,
    a: Mat<'_, C>,
    b: Mat<'_, C>,
    c: MatMut<'_, C>,
    accumulate: bool,
) -> bool {
    if !fits(m, n, k, &a, &b, &c) {
        return false;
    }
    for i in 0..m {
        for j in 0..n {
            let mut acc = C::ZERO;
            for p in 0..k {
                acc = acc.add(a.data[i * a.rs + p * a.cs].mul(b.data[p * b.rs + j * b.cs]));
            }
            let dst = &mut c.data[i * c.rs + j * c.cs];
            *dst = if accumulate { dst.add(acc) } else { acc };
        }
    }
    true
}

/// A calc type matrix products run in: f32 through kiln's packed kernels ([`sgemm`]), f64
/// and i64 through the reference loops of [`gemm_ref`] (the default; no model we run
/// multiplies double matrices where speed matters, and one f64 kernel family would cost the
/// library as much code as the f32 one).
pub trait Gemm: Calc {
    /// `c = (accumulate ? c : 0) + a * b`; returns `false` (nothing written) when the operands do
    /// not fit their slices.
    fn gemm(
        m: usize,
        n: usize,
        k: usize,
        a: Mat<'_, Self>,
        b: Mat<'_, Self>,
        c: MatMut<'_, Self>,
        accumulate: bool,
    ) -> bool {
        gemm_ref(m, n, k, a, b, c, accumulate)
    }
}

impl Gemm for i64 {}

impl Gemm for f64 {}

impl Gemm for f32 {
    fn gemm(
        m: usize,
        n: usize,
        k: usize,
        a: Mat<'_, f32>,
        b: Mat<'_, f32>,
        c: MatMut<'_, f32>,
        accumulate: bool,
    ) -> bool {
        if !fits(m, n, k, &a, &b, &c) {
            return false;
        }
        if m == 0 || n == 0 {
            return true;
        }
        if k == 0 {
            if !accumulate {
                for i in 0..m {
                    for j in 0..n {
                        c.data[i * c.rs + j * c.cs] = 0.0;
                    }
                }
            }
            return true;
        }
        let (Ok(am), Ok(bm)) =
            (MatRef::new(a.data, m, k, a.rs, a.cs), MatRef::new(b.data, k, n, b.rs, b.cs))
        else {
            return false;
        };
        // The packing buffers of this thread's products, kept between calls (a batched product
        // makes one call per matrix).
        thread_local! {
            static SCRATCH: RefCell<GemmScratch> = RefCell::new(GemmScratch::default());
        }
        let product = |c: &mut [f32], ldc: usize| {
            SCRATCH
                .with(|s| match s.try_borrow_mut() {
                    Ok(mut scratch) => sgemm::gemm(am, bm, c, ldc, &Epilogue::NONE, &mut scratch),
                    Err(_) => {
                        sgemm::gemm(am, bm, c, ldc, &Epilogue::NONE, &mut GemmScratch::default())
                    }
                })
                .is_ok()
        };
        if !accumulate && c.cs == 1 && c.rs >= n {
            return product(c.data, c.rs);
        }
        // Other output layouts: the product into a dense block, then added or stored there.
        let mut block = vec![0.0f32; m * n];
        if !product(&mut block, n) {
            return false;
        }
        for (i, row) in block.chunks_exact(n).enumerate() {
            for (j, &v) in row.iter().enumerate() {
                let dst = &mut c.data[i * c.rs + j * c.cs];
                *dst = if accumulate { *dst + v } else { v };
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Property test: the f32 kernels equal the reference on random shapes and strides, the
    /// output row-major or column-major.
    #[test]
    fn fast_equals_reference() {
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..60 {
            let (m, n, k) = (rng.usize(1..40), rng.usize(1..40), rng.usize(0..70));
            let a_t = rng.bool();
            let b_t = rng.bool();
            let a: Vec<f32> = (0..m * k).map(|_| rng.f32() - 0.5).collect();
            let b: Vec<f32> = (0..k * n).map(|_| rng.f32() - 0.5).collect();
            let (ars, acs) = if a_t { (1, m) } else { (k, 1) };
            let (brs, bcs) = if b_t { (1, k) } else { (n, 1) };
            let init: Vec<f32> = (0..m * n).map(|_| rng.f32()).collect();
            let acc = rng.bool();
            let (crs, ccs) = if rng.bool() { (n, 1) } else { (1, m) };
            let mut c1 = init.clone();
            let mut c2 = init.clone();
            assert!(f32::gemm(
                m,
                n,
                k,
                Mat { data: &a, rs: ars, cs: acs },
                Mat { data: &b, rs: brs, cs: bcs },
                MatMut { data: &mut c1, rs: crs, cs: ccs },
                acc
            ));
            assert!(gemm_ref(
                m,
                n,
                k,
                Mat { data: &a, rs: ars, cs: acs },
                Mat { data: &b, rs: brs, cs: bcs },
                MatMut { data: &mut c2, rs: crs, cs: ccs },
                acc
            ));
            for (x, y) in c1.iter().zip(&c2) {
                assert!((x - y).abs() <= 1e-4 * (1.0 + y.abs()), "{m}x{n}x{k}: {x} vs {y}");
            }
        }
    }

    #[test]
    fn rejects_out_of_bounds_operands() {
        let a = [1.0f32; 4];
        let mut c = [0.0f32; 4];
        assert!(!f32::gemm(
            2,
            2,
            3,
            Mat { data: &a, rs: 2, cs: 1 },
            Mat { data: &a, rs: 2, cs: 1 },
            MatMut { data: &mut c, rs: 2, cs: 1 },
            false
        ));
    }
}
