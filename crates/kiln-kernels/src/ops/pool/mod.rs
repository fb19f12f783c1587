//! Pooling: `max_pool2d_with_indices` (`max.rs`), `avg_pool2d` (`avg.rs`),
//! `_adaptive_avg_pool2d` and `adaptive_max_pool2d` (`adaptive.rs`), and the prepared
//! values-only max pooling that compiled graphs run (`prepared.rs`), over the window they
//! share (`window.rs`). Inputs are `[N, C, H, W]` or `[C, H, W]`, in any dim order; the
//! general paths compute in `f64`.

mod adaptive;
mod avg;
mod max;
mod prepared;
mod window;

pub use prepared::{MaxPool2d, MaxPool2dArgs, PreparedMaxPool2d};

use crate::kernel::KernelDef;

/// The kernels of this family.
pub(crate) fn kernels() -> Vec<KernelDef> {
    [max::kernels(), avg::kernels(), adaptive::kernels()].concat()
}
