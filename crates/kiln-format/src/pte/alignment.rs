//! 8-byte scalars a program stores at offsets that are not multiples of 8.
//!
//! The flatbuffers format aligns every scalar to its size, and ExecuTorch's serializer does;
//! but ExecuTorch's runtime also reads files where an 8-byte value sits 4 bytes off, and so
//! does kiln (its schema reads those values unaligned; see `kiln-schema/schema/program.fbs`).
//! [`misaligned_scalars`] lists them for `kiln verify --strict`.

use super::program::Program;
use super::Vector;

/// One misaligned 8-byte value, or vector of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Misaligned {
    /// Where it is in the program, e.g. `execution_plan[0].values[56].int_list.items`.
    pub field: String,
    /// Its offset in the file.
    pub offset: u64,
}

/// Every 8-byte field and vector of `program` whose file offset is not a multiple of 8, in
/// file order of the walk (segments, constant and mutable segment offsets, then per method its
/// buffer sizes and values).
pub fn misaligned_scalars(program: &Program<'_>) -> Vec<Misaligned> {
    let file = program.bytes();
    let mut found = Vec::new();
    let mut check = |field: &dyn Fn() -> String, at: Option<usize>| {
        let offset = at.and_then(|a| a.checked_sub(file.as_ptr() as usize));
        if let Some(offset) = offset.filter(|o| o % 8 != 0) {
            found.push(Misaligned { field: field(), offset: offset as u64 });
        }
    };
    let raw = program.raw();
    for (i, s) in raw.segments().into_iter().flat_map(|v| v.iter()).enumerate() {
        check(&|| format!("segments[{i}].offset"), s.offset().map(address));
        check(&|| format!("segments[{i}].size"), s.size().map(address));
    }
    if let Some(cs) = raw.constant_segment() {
        check(&|| "constant_segment.offsets".into(), cs.offsets().map(start));
    }
    for (i, m) in raw.mutable_data_segments().into_iter().flat_map(|v| v.iter()).enumerate() {
        check(&|| format!("mutable_data_segments[{i}].offsets"), m.offsets().map(start));
    }
    for (p, plan) in raw.execution_plan().into_iter().flat_map(|v| v.iter()).enumerate() {
        check(
            &|| format!("execution_plan[{p}].non_const_buffer_sizes"),
            plan.non_const_buffer_sizes().map(start),
        );
        for (v, value) in plan.values().into_iter().flat_map(|v| v.iter()).enumerate() {
            let path = |what: &str| format!("execution_plan[{p}].values[{v}].{what}");
            let at = if let Some(x) = value.val_as_int() {
                Some(("int.int_val", x.int_val().map(address)))
            } else if let Some(x) = value.val_as_double() {
                Some(("double.double_val", x.double_val().map(address)))
            } else if let Some(x) = value.val_as_int_list() {
                Some(("int_list.items", x.items().map(start)))
            } else if let Some(x) = value.val_as_double_list() {
                Some(("double_list.items", x.items().map(start)))
            } else {
                value.val_as_tensor().and_then(|t| t.extra_tensor_info()).map(|e| {
                    (
                        "tensor.extra_tensor_info.mutable_data_segments_idx",
                        e.mutable_data_segments_idx().map(address),
                    )
                })
            };
            if let Some((what, at)) = at {
                check(&|| path(what), at);
            }
        }
    }
    found
}

fn address<T>(value: &T) -> usize {
    value as *const T as usize
}

/// Where a vector's elements start (they are 8 bytes apart, so all share that alignment). An
/// empty vector counts too: the alignment of its start is what the format prescribes, and the
/// one misaligned value in ExecuTorch's own xor program is an empty int64 list.
fn start<T>(v: Vector<'_, T>) -> usize {
    v.bytes().as_ptr() as usize
}
