//! The `KernelDef` of each shape of kernel: how many argument values it takes and which
//! positions it writes (a `.out` kernel's out tensor and return value, a view, a scalar, an
//! in-place `self`), from its name, its schema inputs and its function.

use crate::kernel::{KernelDef, KernelFn, OutKind, OutSlot};

const fn slots<const N: usize, const P: usize>(kind: OutKind) -> [[OutSlot; N]; P] {
    let mut t = [[OutSlot { position: 0, kind: OutKind::Tensor }; N]; P];
    let mut p = 0;
    while p < P {
        let mut k = 0;
        while k < N {
            t[p][k] = OutSlot { position: (p + k) as u8, kind };
            k += 1;
        }
        p += 1;
    }
    t
}

const MAX_POS: usize = 24;
static TENSOR1: [[OutSlot; 1]; MAX_POS] = slots::<1, MAX_POS>(OutKind::Tensor);
static TENSOR2: [[OutSlot; 2]; MAX_POS] = slots::<2, MAX_POS>(OutKind::Tensor);
static TENSOR3: [[OutSlot; 3]; MAX_POS] = slots::<3, MAX_POS>(OutKind::Tensor);
static LIST1: [[OutSlot; 1]; MAX_POS] = slots::<1, MAX_POS>(OutKind::TensorList);
static SCALAR1: [[OutSlot; 1]; MAX_POS] = slots::<1, MAX_POS>(OutKind::Scalar);
static VIEW1: [[OutSlot; 1]; MAX_POS] = view_slots();

const fn view_slots() -> [[OutSlot; 1]; MAX_POS] {
    let mut t = slots::<1, MAX_POS>(OutKind::View(0));
    let mut p = 0;
    while p < MAX_POS {
        t[p][0].kind = OutKind::View(0);
        p += 1;
    }
    t
}

/// A `.out` kernel: `inputs` schema inputs, then one out tensor, then the return value (the
/// same value as the out).
pub(crate) fn out1(name: &'static str, inputs: usize, run: KernelFn) -> KernelDef {
    KernelDef { name, arity: (inputs + 2) as u8, outs: &TENSOR1[inputs], in_place: false, run }
}

/// A kernel with `n` (2 or 3) out tensors after `inputs` inputs, then a TensorList return.
pub(crate) fn out_n(name: &'static str, inputs: usize, n: usize, run: KernelFn) -> KernelDef {
    let outs: &'static [OutSlot] = if n == 2 { &TENSOR2[inputs] } else { &TENSOR3[inputs] };
    KernelDef { name, arity: (inputs + n + 1) as u8, outs, in_place: false, run }
}

/// A kernel whose out is a TensorList after `inputs` inputs, then a TensorList return.
pub(crate) fn out_list(name: &'static str, inputs: usize, run: KernelFn) -> KernelDef {
    KernelDef { name, arity: (inputs + 2) as u8, outs: &LIST1[inputs], in_place: false, run }
}

/// A kernel returning a scalar: `inputs` inputs, then the return value it writes.
pub(crate) fn ret_scalar(name: &'static str, inputs: usize, run: KernelFn) -> KernelDef {
    KernelDef { name, arity: (inputs + 1) as u8, outs: &SCALAR1[inputs], in_place: false, run }
}

/// A view kernel: `inputs` inputs, then the returned view of input 0.
pub(crate) fn ret_view(name: &'static str, inputs: usize, run: KernelFn) -> KernelDef {
    KernelDef { name, arity: (inputs + 1) as u8, outs: &VIEW1[inputs], in_place: false, run }
}

/// An in-place kernel mutating schema position 0 (`self`), with `inputs` schema arguments
/// (self included) and a return value (self again).
pub(crate) fn in_place(name: &'static str, inputs: usize, run: KernelFn) -> KernelDef {
    KernelDef { name, arity: (inputs + 1) as u8, outs: &TENSOR1[0], in_place: true, run }
}
