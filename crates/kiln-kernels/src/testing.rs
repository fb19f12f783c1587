//! What the unit tests share: typed out tensors, and running a kernel by name on its fast
//! paths or on its general path only.

use crate::compute::threads::Threads;
use crate::element::Element;
use crate::{find_kernel, Arg, Capacity, KernelContext, KernelError, Out, Shape, TensorMut};

/// An out tensor over `data`: `sizes` in dim order `order` (contiguous when empty), capacity
/// `cap`.
pub(crate) fn out<'a, T: Element>(
    data: &'a mut [T],
    sizes: &[usize],
    order: &[u8],
    cap: Capacity,
) -> Out<'a, 'a> {
    let shape = match order {
        [] => Shape::contiguous(sizes),
        _ => Shape::new(sizes, order),
    };
    let bytes = bytemuck::cast_slice_mut(data);
    Out::Tensor(TensorMut::new(T::DTYPE, shape.unwrap(), cap, bytes).unwrap())
}

/// Runs kernel `name` on `args` into `outs` on `threads`: with its fast paths, or with its
/// general path only when `general`.
pub(crate) fn run_kernel<'x>(
    name: &str,
    general: bool,
    threads: &Threads,
    args: &[Arg<'x>],
    outs: &mut [Out<'_, 'x>],
) -> Result<(), KernelError> {
    let def = find_kernel(name).unwrap_or_else(|| panic!("no kernel {name}"));
    let mut ctx = KernelContext::new(def.name).with_threads(threads.clone());
    ctx.general_only = general;
    (def.run)(&mut ctx, args, outs)
}

/// The current sizes of out `i` of `outs`.
pub(crate) fn out_sizes(outs: &[Out<'_, '_>], i: usize) -> Vec<usize> {
    match &outs[i] {
        Out::Tensor(t) => t.sizes().to_vec(),
        other => panic!("out {i} is not a tensor: {other:?}"),
    }
}
