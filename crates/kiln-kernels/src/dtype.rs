//! Element types: ExecuTorch's [`DType`] (the `kiln-dtype` crate's `ScalarType`, which
//! kiln-format shares) and PyTorch's rules for combining them ([`promote_types`],
//! [`can_cast`]).

/// A tensor's element type, numbered as ExecuTorch numbers it. Kernels compute on the
/// floating and integer types and bool ([`DType::is_computable`]); kiln's tensors hold every
/// type [`DType::is_supported`] accepts.
pub use kiln_dtype::ScalarType as DType;

/// PyTorch's `promoteTypes` for two tensor dtypes that kernels compute with.
///
/// Returns `None` for pairs PyTorch rejects or kiln does not compute with (quantized types,
/// unsigned 16/32/64-bit).
pub fn promote_types(a: DType, b: DType) -> Option<DType> {
    use DType::*;
    if !a.is_computable() || !b.is_computable() {
        return None;
    }
    if a == b {
        return Some(a);
    }
    // Floats.
    if a.is_float() || b.is_float() {
        if !(a.is_float() && b.is_float()) {
            return Some(if a.is_float() { a } else { b });
        }
        return Some(match (a, b) {
            (Double, _) | (_, Double) => Double,
            (Float, _) | (_, Float) => Float,
            // Half with BFloat16.
            _ => Float,
        });
    }
    if a == Bool {
        return Some(b);
    }
    if b == Bool {
        return Some(a);
    }
    // Integers: uint8 with a signed type gives the next signed type that holds both.
    let rank = |t: DType| match t {
        Char => 1,
        Short => 2,
        Int => 3,
        Long => 4,
        _ => 0,
    };
    Some(match (a, b) {
        (Byte, Char) | (Char, Byte) => Short,
        (Byte, o) | (o, Byte) => o,
        _ => {
            if rank(a) >= rank(b) {
                a
            } else {
                b
            }
        }
    })
}

/// Whether PyTorch's `canCast(from, to)` allows writing a `from` result into a `to` tensor:
/// no float into an integral type, no non-bool into bool.
pub fn can_cast(from: DType, to: DType) -> bool {
    !(from.is_float() && !to.is_float() || from != DType::Bool && to == DType::Bool)
}
