//! Borrowed tensor views: [`TensorRef`] (read-only input) and [`TensorMut`] (resizable output).

use crate::dtype::DType;
use crate::element::Element;
use crate::shape::{Shape, ShapeError};

/// Why a tensor view could not be built or accessed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TensorError {
    /// The data slice is shorter than the shape (or bound) needs.
    #[error("{dtype} tensor of sizes {sizes:?} needs {needed} bytes, data has {actual}")]
    DataTooShort {
        /// The dtype.
        dtype: DType,
        /// The sizes.
        sizes: Vec<usize>,
        /// Bytes needed.
        needed: usize,
        /// Bytes available.
        actual: usize,
    },
    /// The data is not aligned to the element size.
    #[error("{dtype} tensor data at address {addr:#x} is not aligned to {align} bytes")]
    Misaligned {
        /// The dtype.
        dtype: DType,
        /// The address.
        addr: usize,
        /// Required alignment.
        align: usize,
    },
    /// Access with a Rust element type that does not match the dtype.
    #[error("tensor has dtype {actual}, accessed as {expected}")]
    DType {
        /// The dtype the accessor asked for.
        expected: DType,
        /// The tensor's dtype.
        actual: DType,
    },
    /// A resize that the tensor's [`Capacity`] does not allow.
    #[error("cannot resize {kind} tensor from {from:?} to {to:?}{bound}")]
    Resize {
        /// "static" or "dynamic-bound".
        kind: &'static str,
        /// The current sizes.
        from: Vec<usize>,
        /// The requested sizes.
        to: Vec<usize>,
        /// ", capacity N elements" for bounded tensors.
        bound: String,
    },
    /// A shape error.
    #[error(transparent)]
    Shape(#[from] ShapeError),
}

fn check_data(dtype: DType, shape: &Shape, numel: usize, data: &[u8]) -> Result<(), TensorError> {
    let needed = numel * dtype.size();
    if data.len() < needed {
        return Err(TensorError::DataTooShort {
            dtype,
            sizes: shape.sizes().to_vec(),
            needed,
            actual: data.len(),
        });
    }
    let align = dtype.size();
    let addr = data.as_ptr() as usize;
    if needed > 0 && !addr.is_multiple_of(align) {
        return Err(TensorError::Misaligned { dtype, addr, align });
    }
    Ok(())
}

fn dtype_check<T: Element>(dtype: DType) -> Result<(), TensorError> {
    if T::DTYPE == dtype {
        Ok(())
    } else {
        Err(TensorError::DType { expected: T::DTYPE, actual: dtype })
    }
}

/// The dtype and shape accessors [`TensorRef`] and [`TensorMut`] share (for a [`TensorMut`],
/// the shape is the current one: resizing keeps the rank).
macro_rules! shape_accessors {
    () => {
        /// The dtype.
        pub fn dtype(&self) -> DType {
            self.dtype
        }

        /// The shape.
        pub fn shape(&self) -> &Shape {
            &self.shape
        }

        /// The sizes.
        pub fn sizes(&self) -> &[usize] {
            self.shape.sizes()
        }

        /// Number of dimensions.
        pub fn rank(&self) -> usize {
            self.shape.rank()
        }

        /// Number of elements.
        pub fn numel(&self) -> usize {
            self.shape.numel()
        }
    };
}

/// A read-only tensor: dtype, shape (sizes + dim order) and element-aligned data bytes.
///
/// The data slice holds at least `numel * dtype.size()` bytes (it may be longer, e.g. a whole
/// planned region); only that prefix belongs to the tensor. Elements are stored at the offsets
/// given by [`Shape::strides`] (dim-order strides, no storage offset).
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    dtype: DType,
    shape: Shape,
    data: &'a [u8],
}

impl<'a> TensorRef<'a> {
    /// A view; checks the data length and its alignment to the element size.
    pub fn new(dtype: DType, shape: Shape, data: &'a [u8]) -> Result<Self, TensorError> {
        check_data(dtype, &shape, shape.numel(), data)?;
        let len = shape.numel() * dtype.size();
        Ok(TensorRef { dtype, shape, data: &data[..len] })
    }

    /// A contiguous view over a typed slice (convenient for tests and callers).
    pub fn from_slice<T: Element>(sizes: &[usize], data: &'a [T]) -> Result<Self, TensorError> {
        TensorRef::new(T::DTYPE, Shape::contiguous(sizes)?, bytemuck::cast_slice(data))
    }

    /// A 0-dimensional view of one element (cannot fail: the array is aligned and sized).
    pub fn from_scalar<T: Element>(value: &'a [T; 1]) -> Self {
        TensorRef { dtype: T::DTYPE, shape: Shape::scalar(), data: bytemuck::cast_slice(value) }
    }

    shape_accessors!();

    /// The tensor's bytes (exactly `numel * dtype.size()`).
    pub fn bytes(&self) -> &'a [u8] {
        self.data
    }

    /// The elements in storage order, typed; fails if `T` does not match the dtype.
    pub fn as_slice<T: Element>(&self) -> Result<&'a [T], TensorError> {
        dtype_check::<T>(self.dtype)?;
        // Length and alignment were checked at construction.
        bytemuck::try_cast_slice(self.data).map_err(|_| TensorError::Misaligned {
            dtype: self.dtype,
            addr: self.data.as_ptr() as usize,
            align: self.dtype.size(),
        })
    }

    /// The same data viewed with another shape of equal element count.
    pub fn reshaped(&self, shape: Shape) -> Result<TensorRef<'a>, TensorError> {
        TensorRef::new(self.dtype, shape, self.data)
    }
}

/// How far a [`TensorMut`] may be resized (ExecuTorch's `TensorShapeDynamism`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capacity {
    /// `STATIC`: any size change is refused.
    Static,
    /// `DYNAMIC_BOUND` (and `DYNAMIC_UNBOUND`, treated as bounded): any sizes of the same rank
    /// with at most this many elements.
    Bound(usize),
}

/// A writable output tensor: dtype, current shape, [`Capacity`] and the data bytes.
///
/// Kernels call [`TensorMut::resize`] with the output sizes they compute before writing. The
/// data slice must hold the capacity (`bound * dtype.size()` bytes for bounded tensors, the
/// current size for static ones). After the call the runtime reads the new shape back with
/// [`TensorMut::shape`] and stores it in its value table.
#[derive(Debug)]
pub struct TensorMut<'a> {
    dtype: DType,
    shape: Shape,
    capacity: Capacity,
    data: &'a mut [u8],
}

impl<'a> TensorMut<'a> {
    /// An output view; checks that `data` holds the capacity and is element-aligned.
    pub fn new(
        dtype: DType,
        shape: Shape,
        capacity: Capacity,
        data: &'a mut [u8],
    ) -> Result<Self, TensorError> {
        let cap = match capacity {
            Capacity::Static => shape.numel(),
            Capacity::Bound(n) => n.max(shape.numel()),
        };
        check_data(dtype, &shape, cap, data)?;
        Ok(TensorMut { dtype, shape, capacity, data })
    }

    /// A static contiguous output over a typed slice.
    pub fn from_slice<T: Element>(sizes: &[usize], data: &'a mut [T]) -> Result<Self, TensorError> {
        TensorMut::new(
            T::DTYPE,
            Shape::contiguous(sizes)?,
            Capacity::Static,
            bytemuck::cast_slice_mut(data),
        )
    }

    shape_accessors!();

    /// The capacity.
    pub fn capacity(&self) -> Capacity {
        self.capacity
    }

    /// Sets new sizes (same rank, dim order kept), as ExecuTorch's `resize_tensor`: a static
    /// tensor only accepts its current sizes, a bounded one any sizes of the same rank within
    /// the bound (and within the data slice).
    pub fn resize(&mut self, sizes: &[usize]) -> Result<(), TensorError> {
        if sizes == self.shape.sizes() {
            return Ok(());
        }
        let refuse = |kind: &'static str, bound: String, from: Shape| TensorError::Resize {
            kind,
            from: from.sizes().to_vec(),
            to: sizes.to_vec(),
            bound,
        };
        match self.capacity {
            Capacity::Static => Err(refuse("static", String::new(), self.shape)),
            Capacity::Bound(bound) => {
                if sizes.len() != self.shape.rank() {
                    return Err(refuse("dynamic-bound", ", rank is fixed".to_string(), self.shape));
                }
                let new = self.shape.with_sizes(sizes)?;
                let cap = bound.min(self.data.len() / self.dtype.size().max(1));
                if new.numel() > cap {
                    return Err(refuse(
                        "dynamic-bound",
                        format!(", capacity {cap} elements"),
                        self.shape,
                    ));
                }
                self.shape = new;
                Ok(())
            }
        }
    }

    /// The tensor's bytes at the current shape.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.shape.numel() * self.dtype.size();
        &mut self.data[..len]
    }

    /// The elements at the current shape, typed; fails if `T` does not match the dtype.
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T], TensorError> {
        dtype_check::<T>(self.dtype)?;
        let dtype = self.dtype;
        let bytes = self.bytes_mut();
        let addr = bytes.as_ptr() as usize;
        bytemuck::try_cast_slice_mut(bytes).map_err(|_| TensorError::Misaligned {
            dtype,
            addr,
            align: dtype.size(),
        })
    }

    /// A read-only view of the current contents.
    pub fn as_ref(&self) -> TensorRef<'_> {
        let len = self.shape.numel() * self.dtype.size();
        TensorRef { dtype: self.dtype, shape: self.shape, data: &self.data[..len] }
    }
}
