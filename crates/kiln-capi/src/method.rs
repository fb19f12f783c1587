//! Execution states of a program's methods: their signature, inputs set (copied) or bound to
//! the caller's memory (read where it lies), execute, outputs read in place.

use std::ffi::{c_char, c_void, CStr};

use kiln_kernels::DType;
use kiln_runtime::{Input, Method, Output, TensorInput, ValueMeta};

use crate::program::{program_arg, KilnProgram};
use crate::status::{guard, put, Failure, KilnStatus};

/// Most dimensions a tensor of the C API has.
pub const KILN_MAX_RANK: usize = 8;

/// An execution state of one method (opaque): its own inputs, outputs and planned memory,
/// sharing the program's packed weights. Use one from one thread at a time; several states
/// of one program run at once on their own threads. Freed by `kiln_method_free`.
pub struct KilnMethod {
    method: Method,
    /// Per input, what the caller set or bound.
    inputs: Vec<Option<Given>>,
    /// The last execute's outputs.
    outputs: Vec<Output>,
}

/// An input the caller set.
enum Given {
    /// Copied when set.
    Tensor {
        dtype: DType,
        sizes: Vec<usize>,
        data: Vec<u8>,
    },
    /// The caller's memory, read at each execute.
    Bound {
        dtype: DType,
        sizes: Vec<usize>,
        data: *const u8,
        nbytes: usize,
    },
    Int(i64),
    Double(f64),
    Bool(bool),
}

/// What kind of value an input or output is.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KilnValueKind {
    /// A tensor.
    KilnValueTensor = 0,
    /// A 64-bit integer.
    KilnValueInt = 1,
    /// A double.
    KilnValueDouble = 2,
    /// A boolean.
    KilnValueBool = 3,
    /// A string.
    KilnValueString = 4,
    /// None.
    KilnValueNone = 5,
    /// A list (not settable through the C API).
    KilnValueList = 6,
}

/// A declared input or output: its kind and, for a tensor, its dtype (ExecuTorch's
/// `ScalarType` number: 6 is float32, 4 int64, 1 int8), rank and sizes (the upper bounds
/// when `dynamic`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KilnValueInfo {
    /// The kind.
    pub kind: KilnValueKind,
    /// A tensor's dtype.
    pub dtype: i32,
    /// A tensor's rank (at most `KILN_MAX_RANK`).
    pub rank: u32,
    /// 1 when a tensor's sizes may change (any sizes of the same rank with at most as many
    /// elements), else 0.
    pub dynamic: u8,
    /// A tensor's sizes, `rank` of them.
    pub sizes: [i64; KILN_MAX_RANK],
}

/// A tensor output of the last execute: its values at `data` (`nbytes` bytes, row-major,
/// little-endian), valid until the state's next execute or its free.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct KilnTensor {
    /// Its dtype (ExecuTorch's `ScalarType` number).
    pub dtype: i32,
    /// Its rank.
    pub rank: u32,
    /// Its sizes, `rank` of them.
    pub sizes: [i64; KILN_MAX_RANK],
    /// Its values.
    pub data: *const c_void,
    /// Their bytes.
    pub nbytes: usize,
}

fn info(meta: &ValueMeta) -> KilnValueInfo {
    use KilnValueKind::*;
    let mut out = KilnValueInfo {
        kind: KilnValueNone,
        dtype: -1,
        rank: 0,
        dynamic: 0,
        sizes: [0; KILN_MAX_RANK],
    };
    match meta {
        ValueMeta::Tensor(t) => {
            out.kind = KilnValueTensor;
            out.dtype = i32::from(t.dtype.code());
            out.rank = t.sizes.len() as u32;
            out.dynamic = u8::from(t.dynamic);
            for (dst, &s) in out.sizes.iter_mut().zip(&t.sizes) {
                *dst = s as i64;
            }
        }
        ValueMeta::Int => out.kind = KilnValueInt,
        ValueMeta::Double => out.kind = KilnValueDouble,
        ValueMeta::Bool => out.kind = KilnValueBool,
        ValueMeta::String => out.kind = KilnValueString,
        ValueMeta::None => out.kind = KilnValueNone,
        ValueMeta::List(_) => out.kind = KilnValueList,
    }
    out
}

/// The state behind `m`, or an error naming it.
///
/// # Safety
/// `m` is null or a valid state.
unsafe fn state<'a>(m: *const KilnMethod) -> Result<&'a KilnMethod, Failure> {
    // SAFETY: the caller's contract.
    unsafe { m.as_ref() }.ok_or_else(|| Failure::argument("method is null"))
}

/// The same, to change.
///
/// # Safety
/// `m` is null or a valid state no other thread uses.
unsafe fn state_mut<'a>(m: *mut KilnMethod) -> Result<&'a mut KilnMethod, Failure> {
    // SAFETY: the caller's contract.
    unsafe { m.as_mut() }.ok_or_else(|| Failure::argument("method is null"))
}

/// Where input `index` of `m` is kept, or an error naming it.
///
/// # Safety
/// `m` is null or a valid state no other thread uses.
unsafe fn input_slot<'a>(
    m: *mut KilnMethod,
    index: usize,
) -> Result<&'a mut Option<Given>, Failure> {
    // SAFETY: the caller's contract.
    let s = unsafe { state_mut(m) }?;
    let count = s.inputs.len();
    s.inputs
        .get_mut(index)
        .ok_or_else(|| Failure::argument(format!("input {index} of a method with {count}")))
}

/// A new execution state of the method `name` of `program` into `*out` (its weights packed
/// once per program, shared by every state), to be freed by `kiln_method_free`.
///
/// # Safety
/// `program` is a valid program, `name` a NUL-terminated string, `out` writable.
#[no_mangle]
pub unsafe extern "C" fn kiln_method_new(
    program: *const KilnProgram,
    name: *const c_char,
    out: *mut *mut KilnMethod,
) -> KilnStatus {
    guard(|| {
        // SAFETY: the contract above.
        let program = unsafe { program_arg(program) }?;
        if name.is_null() || out.is_null() {
            return Err(Failure::argument("name or out is null"));
        }
        // SAFETY: a NUL-terminated string (the contract above).
        let name = unsafe { CStr::from_ptr(name) }
            .to_str()
            .map_err(|_| Failure::argument("the method name is not UTF-8"))?;
        let method = program.program().method(name)?;
        let inputs = (0..method.inputs().len()).map(|_| None).collect();
        let boxed = Box::new(KilnMethod { method, inputs, outputs: Vec::new() });
        // SAFETY: `out` is writable (checked non-null; the contract above).
        unsafe { *out = Box::into_raw(boxed) };
        Ok(())
    })
}

/// Frees an execution state (null is ignored).
///
/// # Safety
/// `m` is null or a state from `kiln_method_new`, not freed before.
#[no_mangle]
pub unsafe extern "C" fn kiln_method_free(m: *mut KilnMethod) {
    if !m.is_null() {
        // SAFETY: made by Box::into_raw in `kiln_method_new`, freed once.
        drop(unsafe { Box::from_raw(m) });
    }
}

/// The number of the method's inputs, into `*out`.
///
/// # Safety
/// `m` is a valid state, `out` writable.
#[no_mangle]
pub unsafe extern "C" fn kiln_method_input_count(
    m: *const KilnMethod,
    out: *mut usize,
) -> KilnStatus {
    // SAFETY: the contract above.
    guard(|| unsafe { put(out, state(m)?.inputs.len()) })
}

/// The number of the method's outputs, into `*out`.
///
/// # Safety
/// `m` is a valid state, `out` writable.
#[no_mangle]
pub unsafe extern "C" fn kiln_method_output_count(
    m: *const KilnMethod,
    out: *mut usize,
) -> KilnStatus {
    // SAFETY: the contract above.
    guard(|| unsafe { put(out, state(m)?.method.outputs().len()) })
}

/// What input (`inputs`) or output `index` of `m` is declared as, into `*out`.
///
/// # Safety
/// `m` is null or a valid state, `out` null or writable.
unsafe fn declared(
    m: *const KilnMethod,
    inputs: bool,
    index: usize,
    out: *mut KilnValueInfo,
) -> KilnStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let method = &unsafe { state(m) }?.method;
        let (what, metas) =
            if inputs { ("input", method.inputs()) } else { ("output", method.outputs()) };
        let meta = metas.get(index).ok_or_else(|| {
            Failure::argument(format!("{what} {index} of a method with {}", metas.len()))
        })?;
        // SAFETY: the caller's contract.
        unsafe { put(out, info(meta)) }
    })
}

/// What input `index` is declared as, into `*out`.
///
/// # Safety
/// `m` is a valid state, `out` writable.
#[no_mangle]
pub unsafe extern "C" fn kiln_method_input_info(
    m: *const KilnMethod,
    index: usize,
    out: *mut KilnValueInfo,
) -> KilnStatus {
    // SAFETY: the contract above.
    unsafe { declared(m, true, index, out) }
}

/// What output `index` is declared as, into `*out`.
///
/// # Safety
/// `m` is a valid state, `out` writable.
#[no_mangle]
pub unsafe extern "C" fn kiln_method_output_info(
    m: *const KilnMethod,
    index: usize,
    out: *mut KilnValueInfo,
) -> KilnStatus {
    // SAFETY: the contract above.
    unsafe { declared(m, false, index, out) }
}

/// A tensor input's dtype and sizes from the C arguments, checked against `nbytes` at
/// `data`.
///
/// # Safety
/// `sizes` is null or points to `rank` values.
unsafe fn tensor_arg(
    index: usize,
    dtype: i32,
    sizes: *const i64,
    rank: usize,
    data: *const c_void,
    nbytes: usize,
) -> Result<(DType, Vec<usize>), Failure> {
    let dtype = DType::from_code(i64::from(dtype))
        .ok_or_else(|| Failure::argument(format!("dtype {dtype} is no ExecuTorch ScalarType")))?;
    if rank > KILN_MAX_RANK {
        return Err(Failure::argument(format!("rank {rank} is over {KILN_MAX_RANK}")));
    }
    if rank > 0 && sizes.is_null() {
        return Err(Failure::argument("sizes is null"));
    }
    // SAFETY: `sizes` points to `rank` values (the caller's contract; checked non-null).
    let dims = if rank == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(sizes, rank) } };
    let dims: Vec<usize> = dims
        .iter()
        .map(|&d| {
            usize::try_from(d).map_err(|_| Failure::argument(format!("size {d} is negative")))
        })
        .collect::<Result<_, _>>()?;
    let need = dims
        .iter()
        .try_fold(dtype.size(), |n, &d| n.checked_mul(d))
        .ok_or_else(|| Failure::argument("the sizes overflow"))?;
    if need != nbytes {
        return Err(Failure::new(
            KilnStatus::KilnErrorInput,
            format!("input {index}: {dims:?} of {} takes {need} bytes, not {nbytes}", dtype.name()),
        ));
    }
    if nbytes > 0 && data.is_null() {
        return Err(Failure::argument("data is null"));
    }
    Ok((dtype, dims))
}

/// Sets tensor input `index`: `rank` sizes at `sizes`, `nbytes` bytes at `data` (row-major,
/// little-endian, of dtype `dtype`, ExecuTorch's `ScalarType` number), copied: the caller may
/// reuse its memory when the call returns. The dtype and shape are checked against the
/// declaration at the next execute.
///
/// # Safety
/// `m` is a valid state; `sizes` points to `rank` values; `data` to `nbytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn kiln_method_set_input(
    m: *mut KilnMethod,
    index: usize,
    dtype: i32,
    sizes: *const i64,
    rank: usize,
    data: *const c_void,
    nbytes: usize,
) -> KilnStatus {
    guard(|| {
        // SAFETY: the contract above.
        let slot = unsafe { input_slot(m, index) }?;
        // SAFETY: the contract above.
        let (dtype, sizes) = unsafe { tensor_arg(index, dtype, sizes, rank, data, nbytes) }?;
        let bytes = if nbytes == 0 {
            Vec::new()
        } else {
            // SAFETY: `data` points to `nbytes` readable bytes (the contract above; non-null).
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), nbytes) }.to_vec()
        };
        *slot = Some(Given::Tensor { dtype, sizes, data: bytes });
        Ok(())
    })
}

/// Binds tensor input `index` to the caller's memory, without a copy: the arguments are
/// those of `kiln_method_set_input`, but every later execute reads the `nbytes` at `data` as
/// they are then, until the input is set or bound again or the state is freed; change them
/// between executes to run on new data. The method reads them where they lie when no step of
/// it writes the input and `data` is aligned for the dtype (4 bytes for float32; 64 is
/// fastest); otherwise each execute copies them. `kiln_method_input_in_place` says which the
/// last execute did.
///
/// # Safety
/// `m` is a valid state; `sizes` points to `rank` values; `data` to `nbytes` bytes that stay
/// valid while bound and that nothing writes during an execute of this state.
#[no_mangle]
pub unsafe extern "C" fn kiln_method_bind_input(
    m: *mut KilnMethod,
    index: usize,
    dtype: i32,
    sizes: *const i64,
    rank: usize,
    data: *const c_void,
    nbytes: usize,
) -> KilnStatus {
    guard(|| {
        // SAFETY: the contract above.
        let slot = unsafe { input_slot(m, index) }?;
        // SAFETY: the contract above.
        let (dtype, sizes) = unsafe { tensor_arg(index, dtype, sizes, rank, data, nbytes) }?;
        *slot = Some(Given::Bound { dtype, sizes, data: data.cast(), nbytes });
        Ok(())
    })
}

/// Whether the last execute read input `index` where the caller's memory lies (`*out` = 1)
/// or from a copy (0; also before the first execute).
///
/// # Safety
/// `m` is a valid state, `out` writable.
#[no_mangle]
pub unsafe extern "C" fn kiln_method_input_in_place(
    m: *const KilnMethod,
    index: usize,
    out: *mut u8,
) -> KilnStatus {
    guard(|| {
        // SAFETY: the contract above.
        let s = unsafe { state(m) }?;
        if index >= s.inputs.len() {
            return Err(Failure::argument(format!(
                "input {index} of a method with {}",
                s.inputs.len()
            )));
        }
        // SAFETY: the contract above.
        unsafe { put(out, u8::from(s.method.reads_input_in_place(index))) }
    })
}

/// Keeps `given` as input `index` of `m`.
///
/// # Safety
/// `m` is null or a valid state no other thread uses.
unsafe fn set_given(m: *mut KilnMethod, index: usize, given: Given) -> KilnStatus {
    guard(|| {
        // SAFETY: the caller's contract.
        let slot = unsafe { input_slot(m, index) }?;
        *slot = Some(given);
        Ok(())
    })
}

/// Sets input `index`, declared an Int, to `value` (it must equal the traced value, as in
/// ExecuTorch).
///
/// # Safety
/// `m` is a valid state.
#[no_mangle]
pub unsafe extern "C" fn kiln_method_set_input_int(
    m: *mut KilnMethod,
    index: usize,
    value: i64,
) -> KilnStatus {
    // SAFETY: the contract above.
    unsafe { set_given(m, index, Given::Int(value)) }
}

/// Sets input `index`, declared a Double, to `value` (it must equal the traced value within
/// 1e-4 absolute / 1e-5 relative).
///
/// # Safety
/// `m` is a valid state.
#[no_mangle]
pub unsafe extern "C" fn kiln_method_set_input_double(
    m: *mut KilnMethod,
    index: usize,
    value: f64,
) -> KilnStatus {
    // SAFETY: the contract above.
    unsafe { set_given(m, index, Given::Double(value)) }
}

/// Sets input `index`, declared a Bool, to `value` (0 is false; it must equal the traced
/// value).
///
/// # Safety
/// `m` is a valid state.
#[no_mangle]
pub unsafe extern "C" fn kiln_method_set_input_bool(
    m: *mut KilnMethod,
    index: usize,
    value: u8,
) -> KilnStatus {
    // SAFETY: the contract above.
    unsafe { set_given(m, index, Given::Bool(value != 0)) }
}

/// Runs the method on the inputs set (every one must be); its outputs replace the last's.
///
/// # Safety
/// `m` is a valid state no other thread uses meanwhile.
#[no_mangle]
pub unsafe extern "C" fn kiln_method_execute(m: *mut KilnMethod) -> KilnStatus {
    guard(|| {
        // SAFETY: the contract above.
        let s = unsafe { state_mut(m) }?;
        let mut inputs = Vec::with_capacity(s.inputs.len());
        for (i, given) in s.inputs.iter().enumerate() {
            inputs.push(match given {
                Some(Given::Tensor { dtype, sizes, data }) => {
                    Input::Tensor(TensorInput { dtype: *dtype, sizes, data })
                }
                &Some(Given::Bound { dtype, ref sizes, data, nbytes }) => {
                    let data = if nbytes == 0 {
                        &[][..]
                    } else {
                        // SAFETY: bound to `nbytes` bytes the caller keeps valid and unwritten
                        // while bound and this execute runs (`kiln_method_bind_input`).
                        unsafe { std::slice::from_raw_parts(data, nbytes) }
                    };
                    Input::Tensor(TensorInput { dtype, sizes, data })
                }
                Some(Given::Int(v)) => Input::Int(*v),
                Some(Given::Double(v)) => Input::Double(*v),
                Some(Given::Bool(v)) => Input::Bool(*v),
                None => {
                    return Err(Failure::new(
                        KilnStatus::KilnErrorInput,
                        format!("input {i} is not set"),
                    ))
                }
            });
        }
        s.outputs = s.method.execute(&inputs)?;
        Ok(())
    })
}

/// Tensor output `index` of the last execute, into `*out` (its data valid until the next
/// execute or the state's free).
///
/// # Safety
/// `m` is a valid state, `out` writable.
#[no_mangle]
pub unsafe extern "C" fn kiln_method_output(
    m: *const KilnMethod,
    index: usize,
    out: *mut KilnTensor,
) -> KilnStatus {
    guard(|| {
        // SAFETY: the contract above.
        let s = unsafe { state(m) }?;
        let t = match s.outputs.get(index) {
            Some(Output::Tensor(t)) => t,
            Some(other) => {
                return Err(Failure::argument(format!("output {index} is not a tensor: {other:?}")))
            }
            None if s.outputs.is_empty() => {
                return Err(Failure::argument("the method has not run"))
            }
            None => {
                return Err(Failure::argument(format!(
                    "output {index} of a method with {}",
                    s.outputs.len()
                )))
            }
        };
        let mut tensor = KilnTensor {
            dtype: i32::from(t.dtype.code()),
            rank: t.sizes.len() as u32,
            sizes: [0; KILN_MAX_RANK],
            data: t.data.as_ptr().cast(),
            nbytes: t.data.len(),
        };
        for (dst, &d) in tensor.sizes.iter_mut().zip(&t.sizes) {
            *dst = d as i64;
        }
        // SAFETY: the contract above.
        unsafe { put(out, tensor) }
    })
}
