//! What `kiln verify --strict` flags in a valid program: what ExecuTorch and kiln read but
//! the format, or the size of the file, says is off.

use super::program::{Program, TensorData, Value};

/// A planned arena is flagged when it is more than this many times what its tensors reach...
const ARENA_FACTOR: u64 = 4;
/// ...and at least this many bytes over it.
const ARENA_SLACK: u64 = 64 << 10;

/// Why the program in `bytes` is valid but suspect, for `kiln verify --strict`: 8-byte values
/// off their alignment, trailing data after its declared end (with an extended header), or a
/// planned arena far larger than its tensors reach. `Ok` when it is none of these; a program
/// that does not open fails with why.
pub fn check(bytes: &[u8]) -> Result<(), String> {
    let program = Program::open(bytes).map_err(|e| e.to_string())?;
    let misaligned = super::alignment::misaligned_scalars(&program);
    if let Some(first) = misaligned.first() {
        return Err(format!(
            "{} 8-byte value(s) not 8-byte aligned (ExecuTorch and kiln read them, the format \
             asks for alignment), the first {} at offset {}",
            misaligned.len(),
            first.field,
            first.offset
        ));
    }
    let layout = program.layout();
    if layout.header.is_some() {
        let (end, what) = if layout.segment_base_offset == 0 {
            (layout.program_size, "the program")
        } else {
            (layout.segment_end, "the segment data")
        };
        let len = bytes.len() as u64;
        if len > end {
            return Err(format!(
                "{} bytes of trailing data after the end of {what} at offset {end}",
                len - end
            ));
        }
    }
    for method in program.methods() {
        let planned = method.planned_buffer_sizes();
        let mut reach = vec![0u64; planned.len()];
        for index in 0..method.num_values() {
            let Value::Tensor(t) = method.value(index).map_err(|e| e.to_string())? else {
                continue;
            };
            let alloc = match t.data() {
                TensorData::Planned(a)
                | TensorData::PlannedInitialized(a, _)
                | TensorData::ExternalPlanned(_, a) => a,
                _ => continue,
            };
            let arena = (alloc.memory_id as usize).checked_sub(1).and_then(|i| reach.get_mut(i));
            if let Some(r) = arena {
                *r = (*r).max(alloc.offset.saturating_add(t.nbytes()));
            }
        }
        for (i, (&size, &used)) in planned.iter().zip(&reach).enumerate() {
            if size > used.saturating_mul(ARENA_FACTOR) && size - used >= ARENA_SLACK {
                return Err(format!(
                    "method {:?} plans memory arena {} of {size} bytes but its tensors reach \
                     only {used} bytes",
                    method.name(),
                    i + 1
                ));
            }
        }
    }
    Ok(())
}
