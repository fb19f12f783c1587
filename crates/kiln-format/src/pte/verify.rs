//! Semantic verification of a `.pte`, run by [`Program::open`] after the flatbuffers verifier.
//!
//! Covers ExecuTorch's `InternalConsistency` (`validate_program`: non-null plans and values,
//! tensor sizes, scalar types, numel/nbytes overflow, TensorList items) and the checks its
//! runtime makes at method load (argument and instruction indices, rank, dim_order, segment and
//! constant bounds, delegate indices), plus stricter ones: every list item points to a value of
//! the right kind, planned tensors fit their arena, JumpFalse/Free operate on the right kinds,
//! and every segment range lies inside the file.

use super::program::{
    index, loc, vec_loc, Limits, Method, Program, Tensor, TensorData, Value, ValueKind, FORMAT,
};
use super::scalar_type::ScalarType;
use super::Unaligned;
use crate::error::{Error, Result};

impl<'a> Program<'a> {
    /// Opens and fully verifies a `.pte` held in `bytes` (the whole file, e.g. a memory map),
    /// with the default [`Limits`].
    pub fn open(bytes: &'a [u8]) -> Result<Self> {
        Self::open_with(bytes, &Limits::default())
    }

    /// Opens and fully verifies a `.pte` with explicit caps.
    pub fn open_with(bytes: &'a [u8], limits: &Limits) -> Result<Self> {
        let parsed = Self::parse(bytes, limits)?;
        program(&parsed, limits)?;
        Ok(parsed)
    }
}

/// Checks everything above; the first problem found is returned.
pub fn program(p: &Program<'_>, limits: &Limits) -> Result<()> {
    let raw = p.raw();
    let n_segments = p.num_segments();
    for i in 0..n_segments {
        p.segment_range(i)?;
    }
    let segment_size = |i: u32, field: &dyn Fn() -> String, at: Option<u64>| -> Result<u64> {
        let i = index(i.into(), n_segments, field, at)?;
        p.segment(i).map(|s| s.size)
    };

    if let Some(cs) = raw.constant_segment() {
        let at = loc(&cs._tab);
        let offsets = cs.offsets();
        // Files that keep constants inline may carry an empty constant_segment with no segments.
        if offsets.is_some_and(|o| !o.is_empty()) {
            let size =
                segment_size(cs.segment_index(), &|| "constant_segment.segment_index".into(), at)?;
            check_offsets(p, offsets, size, "constant_segment")?;
        }
        if offsets.is_some_and(|o| o.len() > 1)
            && raw.constant_buffer().is_some_and(|b| !b.is_empty())
        {
            return Err(Error::invalid(
                FORMAT,
                "constant_buffer",
                at,
                "both constant_segment.offsets and the inline constant_buffer hold constants",
            ));
        }
    }
    for (i, sub) in raw.mutable_data_segments().into_iter().flat_map(|v| v.iter()).enumerate() {
        let path = format!("mutable_data_segments[{i}]");
        let size =
            segment_size(sub.segment_index(), &|| format!("{path}.segment_index"), loc(&sub._tab))?;
        check_offsets(p, sub.offsets(), size, &path)?;
    }
    for (i, nd) in raw.named_data().into_iter().flat_map(|v| v.iter()).enumerate() {
        let at = loc(&nd._tab);
        if nd.key().is_none() {
            return Err(Error::invalid(FORMAT, format!("named_data[{i}].key"), at, "missing"));
        }
        segment_size(nd.segment_index(), &|| format!("named_data[{i}].segment_index"), at)?;
    }
    if raw.execution_plan().is_none() {
        return Err(Error::invalid(FORMAT, "execution_plan", Some(0), "missing"));
    }
    for m in p.methods() {
        method(p, &m, limits)?;
    }
    Ok(())
}

/// Every offset of a `SubsegmentOffsets` lies inside its segment.
fn check_offsets(
    p: &Program<'_>,
    offsets: Option<
        flatbuffers::Vector<'_, kiln_schema::program::executorch_flatbuffer::UnalignedULong>,
    >,
    size: u64,
    path: &str,
) -> Result<()> {
    let Some(offsets) = offsets else { return Ok(()) };
    let at = vec_loc(p.bytes(), &offsets);
    for (i, o) in offsets.iter().map(|o| o.get()).enumerate() {
        if o > size {
            return Err(Error::invalid(
                FORMAT,
                format!("{path}.offsets[{i}]"),
                at,
                format!("{o} is past the end of its {size}-byte segment"),
            ));
        }
    }
    Ok(())
}

fn method(p: &Program<'_>, m: &Method<'_>, limits: &Limits) -> Result<()> {
    let path = format!("execution_plan[{}]", m.index());
    let plan = m.raw();
    let at = loc(&plan._tab);
    if plan.name().is_none() {
        return Err(Error::invalid(FORMAT, format!("{path}.name"), at, "missing"));
    }
    if plan.values().is_none() {
        return Err(Error::invalid(FORMAT, format!("{path}.values"), at, "missing"));
    }
    let arenas = plan.non_const_buffer_sizes();
    for (i, s) in arenas.into_iter().flat_map(|v| v.iter()).map(|s| s.get()).enumerate() {
        if s < 0 {
            return Err(Error::invalid(
                FORMAT,
                format!("{path}.non_const_buffer_sizes[{i}]"),
                arenas.and_then(|v| vec_loc(p.bytes(), &v)),
                format!("{s} is negative"),
            ));
        }
    }
    let arena_sizes = m.non_const_buffer_sizes();
    for (i, d) in plan.non_const_buffer_device().into_iter().flat_map(|v| v.iter()).enumerate() {
        index(
            d.buffer_idx().into(),
            arena_sizes.len(),
            || format!("{path}.non_const_buffer_device[{i}].buffer_idx"),
            loc(&d._tab),
        )?;
    }

    // Values: decode each (tags, tensor rules, list indices), remember kinds for cross checks.
    let n = m.num_values();
    let mut kinds: Vec<(ValueKind, Option<ScalarType>)> = Vec::with_capacity(n);
    for i in 0..n {
        let v = m.value(i)?;
        kinds.push((v.kind(), if let Value::Tensor(t) = &v { Some(t.dtype()) } else { None }));
    }
    for i in 0..n {
        let vpath = || format!("{path}.values[{i}]");
        match m.value(i)? {
            Value::Tensor(t) => tensor(p, &t, &arena_sizes, &|| format!("{}.tensor", vpath()))?,
            Value::IntList(items) => {
                for (j, x) in items.iter().enumerate() {
                    expect_kind(&kinds, x.get(), &[ValueKind::Int], &|| {
                        format!("{}.int_list.items[{j}]", vpath())
                    })?;
                }
            }
            Value::TensorList(items) => {
                for (j, x) in items.iter().enumerate() {
                    let f = || format!("{}.tensor_list.items[{j}]", vpath());
                    expect_kind(&kinds, x.into(), &[ValueKind::Tensor], &f)?;
                    earlier(x.into(), i, &f)?;
                }
            }
            Value::OptionalTensorList(items) => {
                for (j, x) in items.iter().enumerate() {
                    if x == -1 {
                        continue;
                    }
                    let f = || format!("{}.optional_tensor_list.items[{j}]", vpath());
                    expect_kind(&kinds, x.into(), &[ValueKind::Tensor, ValueKind::Null], &f)?;
                    earlier(x.into(), i, &f)?;
                }
            }
            _ => {}
        }
    }
    m.inputs()?;
    m.outputs()?;

    // Operators and delegates decode (names present, data locations in range).
    for op in m.operators() {
        op?;
    }
    let n_inline = p.raw().backend_delegate_data().map_or(0, |v| v.len());
    for (i, d) in m.delegates().enumerate() {
        let d = d?;
        let field = || format!("{path}.delegates[{i}].processed.index");
        match d.data {
            super::program::DelegateData::Inline(j) => {
                index(j.into(), n_inline, field, None)?;
            }
            super::program::DelegateData::Segment(j) => {
                index(j.into(), p.num_segments(), field, None)?;
            }
        }
    }

    // Instructions: indices are checked by decoding; kinds of JumpFalse and Free operands here.
    for chain in m.chains() {
        chain.inputs()?;
        chain.outputs()?;
        let count = chain.num_instructions();
        if count > limits.max_instructions {
            return Err(Error::Limit {
                format: FORMAT,
                what: format!("{path}.chains[..].instructions count"),
                value: count as u64,
                limit: limits.max_instructions as u64,
            });
        }
        for (k, ins) in chain.instructions().enumerate() {
            let ipath = || format!("{path}.chains[..].instructions[{k}]");
            match ins? {
                super::program::Instruction::JumpFalse { cond, .. } => match kinds.get(cond) {
                    Some((ValueKind::Bool, _))
                    | Some((ValueKind::Tensor, Some(ScalarType::Bool))) => {}
                    _ => {
                        return Err(Error::invalid(
                            FORMAT,
                            format!("{}.jump_false_call.cond_value_index", ipath()),
                            None,
                            format!("value {cond} is not a Bool or a bool tensor"),
                        ))
                    }
                },
                super::program::Instruction::Free { value } => {
                    expect_kind(&kinds, value as i64, &[ValueKind::Tensor], &|| {
                        format!("{}.free_call.value_index", ipath())
                    })?;
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Value `x` exists and is of one of `allowed` kinds.
fn expect_kind(
    kinds: &[(ValueKind, Option<ScalarType>)],
    x: i64,
    allowed: &[ValueKind],
    field: &dyn Fn() -> String,
) -> Result<()> {
    let i = index(x, kinds.len(), field, None)?;
    let k = kinds[i].0;
    if allowed.contains(&k) {
        Ok(())
    } else {
        let names: Vec<&str> = allowed.iter().map(|k| k.name()).collect();
        Err(Error::invalid(
            FORMAT,
            field(),
            None,
            format!("value {i} is a {}, expected {}", k.name(), names.join(" or ")),
        ))
    }
}

/// List items must refer to values parsed before the list (ExecuTorch parses in order).
fn earlier(x: i64, list_index: usize, field: &dyn Fn() -> String) -> Result<()> {
    if x < list_index as i64 {
        Ok(())
    } else {
        Err(Error::invalid(
            FORMAT,
            field(),
            None,
            format!("value {x} comes after the list (value {list_index})"),
        ))
    }
}

/// Data of a tensor: constants inside their segment or buffer, planned tensors inside their
/// arena, initial mutable data inside its segment.
fn tensor(
    p: &Program<'_>,
    t: &Tensor<'_>,
    arena_sizes: &[u64],
    path: &dyn Fn() -> String,
) -> Result<()> {
    let at = loc(&t.raw()._tab);
    let planned = |a: super::program::Allocation| -> Result<()> {
        let field = || format!("{}.allocation_info.memory_id", path());
        if a.memory_id == 0 {
            return Err(Error::invalid(FORMAT, field(), at, "memory_id 0 is reserved"));
        }
        let id = index(a.memory_id.into(), arena_sizes.len(), field, at)?;
        let end = a.offset.checked_add(t.nbytes());
        if end.is_none_or(|e| e > arena_sizes[id]) {
            return Err(Error::invalid(
                FORMAT,
                format!("{}.allocation_info", path()),
                at,
                format!(
                    "{} bytes at offset {} do not fit arena {id} of {} bytes",
                    t.nbytes(),
                    a.offset,
                    arena_sizes[id]
                ),
            ));
        }
        Ok(())
    };
    let with_path = |e: Error| match e {
        Error::Invalid { reason, .. } => {
            Error::invalid(FORMAT, format!("{}.data_buffer_idx", path()), at, reason)
        }
        other => other,
    };
    match t.data() {
        TensorData::Runtime | TensorData::External(_) => {}
        TensorData::Planned(a) | TensorData::ExternalPlanned(_, a) => planned(a)?,
        TensorData::Constant(i) => {
            p.constant_data(i as usize, t.nbytes()).map_err(with_path)?;
        }
        TensorData::PlannedInitialized(a, i) => {
            planned(a)?;
            p.mutable_data(i as usize, t.nbytes()).map_err(with_path)?;
        }
    }
    Ok(())
}
