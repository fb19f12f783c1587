//! Typed access to kernel arguments, with errors naming the schema argument.

use crate::dtype::DType;
use crate::error::{ErrorKind, KernelError};
use crate::kernel::KernelContext;
use crate::tensor::{TensorMut, TensorRef};
use crate::value::{Arg, Out, Scalar, ViewOut};

/// The arguments of one call, decoded by schema position and name.
pub(crate) struct Args<'c, 'x> {
    pub ctx: &'c KernelContext,
    pub args: &'c [Arg<'x>],
}

impl<'c, 'x> Args<'c, 'x> {
    pub fn new(ctx: &'c KernelContext, args: &'c [Arg<'x>]) -> Self {
        Args { ctx, args }
    }

    fn get(&self, pos: usize, name: &'static str) -> Result<&Arg<'x>, KernelError> {
        self.args.get(pos).ok_or_else(|| {
            self.ctx.err(ErrorKind::ArgType {
                arg: name,
                position: pos,
                expected: "a value",
                actual: "nothing (too few arguments)",
            })
        })
    }

    fn wrong(
        &self,
        pos: usize,
        name: &'static str,
        expected: &'static str,
        a: &Arg<'_>,
    ) -> KernelError {
        self.ctx.err(ErrorKind::ArgType { arg: name, position: pos, expected, actual: a.tag() })
    }

    pub fn tensor(&self, pos: usize, name: &'static str) -> Result<TensorRef<'x>, KernelError> {
        match self.get(pos, name)? {
            Arg::Tensor(t) => Ok(*t),
            a => Err(self.wrong(pos, name, "Tensor", a)),
        }
    }

    pub fn opt_tensor(
        &self,
        pos: usize,
        name: &'static str,
    ) -> Result<Option<TensorRef<'x>>, KernelError> {
        match self.get(pos, name)? {
            Arg::Tensor(t) => Ok(Some(*t)),
            Arg::None => Ok(None),
            a => Err(self.wrong(pos, name, "Tensor or None", a)),
        }
    }

    pub fn int(&self, pos: usize, name: &'static str) -> Result<i64, KernelError> {
        match self.get(pos, name)? {
            Arg::Int(v) => Ok(*v),
            a => Err(self.wrong(pos, name, "Int", a)),
        }
    }

    pub fn opt_int(&self, pos: usize, name: &'static str) -> Result<Option<i64>, KernelError> {
        match self.get(pos, name)? {
            Arg::Int(v) => Ok(Some(*v)),
            Arg::None => Ok(None),
            a => Err(self.wrong(pos, name, "Int or None", a)),
        }
    }

    pub fn bool(&self, pos: usize, name: &'static str) -> Result<bool, KernelError> {
        match self.get(pos, name)? {
            Arg::Bool(v) => Ok(*v),
            a => Err(self.wrong(pos, name, "Bool", a)),
        }
    }

    pub fn double(&self, pos: usize, name: &'static str) -> Result<f64, KernelError> {
        match self.get(pos, name)? {
            Arg::Double(v) => Ok(*v),
            Arg::Int(v) => Ok(*v as f64),
            a => Err(self.wrong(pos, name, "Double", a)),
        }
    }

    pub fn opt_double(&self, pos: usize, name: &'static str) -> Result<Option<f64>, KernelError> {
        match self.get(pos, name)? {
            Arg::None => Ok(None),
            _ => self.double(pos, name).map(Some),
        }
    }

    pub fn scalar(&self, pos: usize, name: &'static str) -> Result<Scalar, KernelError> {
        match self.get(pos, name)? {
            Arg::Int(v) => Ok(Scalar::Int(*v)),
            Arg::Double(v) => Ok(Scalar::Double(*v)),
            Arg::Bool(v) => Ok(Scalar::Bool(*v)),
            a => Err(self.wrong(pos, name, "Int, Double or Bool", a)),
        }
    }

    pub fn opt_scalar(
        &self,
        pos: usize,
        name: &'static str,
    ) -> Result<Option<Scalar>, KernelError> {
        match self.get(pos, name)? {
            Arg::None => Ok(None),
            _ => self.scalar(pos, name).map(Some),
        }
    }

    pub fn string(&self, pos: usize, name: &'static str) -> Result<&'x str, KernelError> {
        match self.get(pos, name)? {
            Arg::String(s) => Ok(s),
            a => Err(self.wrong(pos, name, "String", a)),
        }
    }

    pub fn opt_string(
        &self,
        pos: usize,
        name: &'static str,
    ) -> Result<Option<&'x str>, KernelError> {
        match self.get(pos, name)? {
            Arg::String(s) => Ok(Some(s)),
            Arg::None => Ok(None),
            a => Err(self.wrong(pos, name, "String or None", a)),
        }
    }

    pub fn int_list(&self, pos: usize, name: &'static str) -> Result<&'x [i64], KernelError> {
        match self.get(pos, name)? {
            Arg::IntList(v) => Ok(v),
            a => Err(self.wrong(pos, name, "IntList", a)),
        }
    }

    pub fn opt_int_list(
        &self,
        pos: usize,
        name: &'static str,
    ) -> Result<Option<&'x [i64]>, KernelError> {
        match self.get(pos, name)? {
            Arg::IntList(v) => Ok(Some(v)),
            Arg::None => Ok(None),
            a => Err(self.wrong(pos, name, "IntList or None", a)),
        }
    }

    pub fn opt_double_list(
        &self,
        pos: usize,
        name: &'static str,
    ) -> Result<Option<&'x [f64]>, KernelError> {
        match self.get(pos, name)? {
            Arg::DoubleList(v) => Ok(Some(v)),
            Arg::None => Ok(None),
            a => Err(self.wrong(pos, name, "DoubleList or None", a)),
        }
    }

    pub fn tensor_list(
        &self,
        pos: usize,
        name: &'static str,
    ) -> Result<&'x [TensorRef<'x>], KernelError> {
        match self.get(pos, name)? {
            Arg::TensorList(v) => Ok(v),
            a => Err(self.wrong(pos, name, "TensorList", a)),
        }
    }

    pub fn opt_tensor_list(
        &self,
        pos: usize,
        name: &'static str,
    ) -> Result<&'x [Option<TensorRef<'x>>], KernelError> {
        match self.get(pos, name)? {
            Arg::OptionalTensorList(v) => Ok(v),
            a => Err(self.wrong(pos, name, "OptionalTensorList", a)),
        }
    }

    /// A `ScalarType` argument.
    pub fn dtype(&self, pos: usize, name: &'static str) -> Result<DType, KernelError> {
        let code = self.int(pos, name)?;
        DType::from_code(code)
            .filter(|d| d.is_supported())
            .ok_or_else(|| self.ctx.invalid(name, format!("unknown ScalarType {code}")))
    }

    pub fn opt_dtype(&self, pos: usize, name: &'static str) -> Result<Option<DType>, KernelError> {
        match self.get(pos, name)? {
            Arg::None => Ok(None),
            _ => self.dtype(pos, name).map(Some),
        }
    }

    /// An int list as non-negative sizes.
    pub fn sizes(&self, pos: usize, name: &'static str) -> Result<Vec<usize>, KernelError> {
        self.int_list(pos, name)?
            .iter()
            .map(|&v| {
                usize::try_from(v).map_err(|_| self.ctx.invalid(name, format!("negative size {v}")))
            })
            .collect()
    }
}

/// The single output tensor of `outs` (position `idx`).
pub(crate) fn out_tensor<'o, 'x>(
    ctx: &KernelContext,
    outs: &'o mut [Out<'_, 'x>],
    idx: usize,
    name: &'static str,
) -> Result<&'o mut TensorMut<'x>, KernelError> {
    match outs.get_mut(idx) {
        Some(Out::Tensor(t)) => Ok(t),
        other => Err(ctx.err(ErrorKind::ArgType {
            arg: name,
            position: idx,
            expected: "output Tensor",
            actual: out_tag(other.as_deref()),
        })),
    }
}

/// Two output tensors.
pub(crate) fn out_tensors2<'o, 'x>(
    ctx: &KernelContext,
    outs: &'o mut [Out<'_, 'x>],
    names: [&'static str; 2],
) -> Result<[&'o mut TensorMut<'x>; 2], KernelError> {
    match outs {
        [Out::Tensor(a), Out::Tensor(b), ..] => Ok([a, b]),
        _ => Err(ctx.invalid(names[1], "expected two output tensors")),
    }
}

/// Three output tensors.
pub(crate) fn out_tensors3<'o, 'x>(
    ctx: &KernelContext,
    outs: &'o mut [Out<'_, 'x>],
    names: [&'static str; 3],
) -> Result<[&'o mut TensorMut<'x>; 3], KernelError> {
    match outs {
        [Out::Tensor(a), Out::Tensor(b), Out::Tensor(c), ..] => Ok([a, b, c]),
        _ => Err(ctx.invalid(names[2], "expected three output tensors")),
    }
}

/// The output tensor list.
pub(crate) fn out_list<'o, 'x>(
    ctx: &KernelContext,
    outs: &'o mut [Out<'_, 'x>],
    name: &'static str,
) -> Result<&'o mut [TensorMut<'x>], KernelError> {
    match outs.get_mut(0) {
        Some(Out::TensorList(l)) => Ok(l),
        other => Err(ctx.err(ErrorKind::ArgType {
            arg: name,
            position: 0,
            expected: "output TensorList",
            actual: out_tag(other.as_deref()),
        })),
    }
}

/// The scalar output.
pub(crate) fn out_scalar<'o>(
    ctx: &KernelContext,
    outs: &'o mut [Out<'_, '_>],
) -> Result<&'o mut Scalar, KernelError> {
    match outs.get_mut(0) {
        Some(Out::Scalar(s)) => Ok(s),
        other => Err(ctx.err(ErrorKind::ArgType {
            arg: "return",
            position: 0,
            expected: "output Scalar",
            actual: out_tag(other.as_deref()),
        })),
    }
}

/// The view output.
pub(crate) fn out_view<'o>(
    ctx: &KernelContext,
    outs: &'o mut [Out<'_, '_>],
) -> Result<&'o mut ViewOut, KernelError> {
    match outs.get_mut(0) {
        Some(Out::View(v)) => Ok(v),
        other => Err(ctx.err(ErrorKind::ArgType {
            arg: "out",
            position: 0,
            expected: "output View",
            actual: out_tag(other.as_deref()),
        })),
    }
}

fn out_tag(o: Option<&Out<'_, '_>>) -> &'static str {
    match o {
        None => "nothing",
        Some(Out::Tensor(_)) => "Tensor",
        Some(Out::TensorList(_)) => "TensorList",
        Some(Out::Scalar(_)) => "Scalar",
        Some(Out::View(_)) => "View",
    }
}
