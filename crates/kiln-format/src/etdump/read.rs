//! Reading an ETDump: size prefix and identifier, the flatbuffers verifier with caps bounded by
//! the file size, then a decode into [`ETDump`] that checks what the verifier cannot (exactly
//! one event kind per event, a value's kind naming a field that is present) and caps the event
//! count. Errors name the field path (`run_data[1].events[4]`) and, where known, the offset.

use flatbuffers::{Table, Vector, VerifierOptions};
use kiln_schema::etdump::etdump as fb;
use kiln_schema::{or_zero, Unaligned};

use super::model::{
    AllocationEvent, DebugEvent, ETDump, Event, ProfileEvent, RunData, Tensor, Value, ValueType,
};
use super::{FORMAT, IDENTIFIER};
use crate::error::{Error, Result};

/// Caps applied while reading, so that a hostile file cannot make the reader allocate or walk
/// without bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Deepest nesting of flatbuffer tables (an ETDump nests 8 deep at most).
    pub max_depth: usize,
    /// Most events in the whole file, all blocks together.
    pub max_events: usize,
    /// The verifier's apparent-size cap, as a multiple of the file size (a table reached
    /// through many offsets counts each time).
    pub apparent_size_factor: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_depth: 16, max_events: 16_000_000, apparent_size_factor: 4 }
    }
}

impl Limits {
    fn verifier_options(&self, len: usize) -> VerifierOptions {
        VerifierOptions {
            max_depth: self.max_depth,
            max_tables: len / 4 + 1,
            max_apparent_size: len.saturating_mul(self.apparent_size_factor).max(1 << 16),
            ignore_missing_null_terminator: false,
        }
    }
}

impl ETDump {
    /// Verifies and decodes the bytes of a whole `.etdp` file, with the default [`Limits`].
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        Self::parse_with(bytes, &Limits::default())
    }

    /// Verifies and decodes an `.etdp` file with explicit caps.
    pub fn parse_with(bytes: &[u8], limits: &Limits) -> Result<Self> {
        let ident = bytes.get(8..12).ok_or_else(|| Error::Truncated {
            format: FORMAT,
            field: "file_identifier".into(),
            offset: 8,
            end: 12,
            len: bytes.len() as u64,
        })?;
        if ident != IDENTIFIER {
            return Err(Error::BadMagic {
                format: FORMAT,
                offset: 8,
                expected: "\"ED00\" after a 4-byte size prefix".into(),
                found: format!("{:?}", String::from_utf8_lossy(ident)),
            });
        }
        let prefix = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let rest = bytes.len() as u64 - 4;
        if u64::from(prefix) != rest {
            return Err(Error::invalid(
                FORMAT,
                "size prefix",
                Some(0),
                format!("says {prefix} bytes follow, the file has {rest}"),
            ));
        }
        let root = fb::size_prefixed_root_as_etdump_with_opts(
            &limits.verifier_options(bytes.len()),
            bytes,
        )
        .map_err(|source| Error::Flatbuffer { format: FORMAT, source })?;
        let total_events: usize = root
            .run_data()
            .map(|runs| runs.iter().map(|r| r.events().map_or(0, |e| e.len())).sum())
            .unwrap_or(0);
        if total_events > limits.max_events {
            return Err(Error::Limit {
                format: FORMAT,
                what: "event count".into(),
                value: total_events as u64,
                limit: limits.max_events as u64,
            });
        }
        let run_data = root
            .run_data()
            .map(|runs| runs.iter().enumerate().map(|(i, r)| run(r, i)).collect())
            .transpose()?
            .unwrap_or_default();
        Ok(ETDump { version: root.version(), run_data })
    }
}

fn loc(t: &Table<'_>) -> Option<u64> {
    Some(t.loc() as u64)
}

fn string(s: Option<&str>) -> Option<String> {
    s.map(str::to_string)
}

fn run(r: fb::RunData<'_>, i: usize) -> Result<RunData> {
    let allocators = r
        .allocators()
        .map(|v| v.iter().map(|a| a.name().unwrap_or_default().to_string()).collect())
        .unwrap_or_default();
    let events = r
        .events()
        .map(|v| v.iter().enumerate().map(|(j, e)| event(e, &format!("run_data[{i}].events[{j}]"))))
        .map(Iterator::collect::<Result<Vec<_>>>)
        .transpose()?
        .unwrap_or_default();
    Ok(RunData {
        name: r.name().unwrap_or_default().to_string(),
        bundled_input_index: r.bundled_input_index(),
        allocators,
        events,
    })
}

fn event(e: fb::Event<'_>, field: &str) -> Result<Event> {
    match (e.profile_event(), e.allocation_event(), e.debug_event()) {
        (Some(p), None, None) => Ok(Event::Profile(ProfileEvent {
            name: string(p.name()),
            chain_index: p.chain_index(),
            instruction_id: p.instruction_id(),
            delegate_debug_id_int: p.delegate_debug_id_int(),
            delegate_debug_id_str: string(p.delegate_debug_id_str()),
            delegate_debug_metadata: p.delegate_debug_metadata().map(|m| m.bytes().to_vec()),
            start_time: or_zero(p.start_time()),
            end_time: or_zero(p.end_time()),
        })),
        (None, Some(a), None) => Ok(Event::Allocation(AllocationEvent {
            allocator_id: a.allocator_id(),
            allocation_size: or_zero(a.allocation_size()),
        })),
        (None, None, Some(d)) => Ok(Event::Debug(DebugEvent {
            name: string(d.name()),
            chain_index: or_zero(d.chain_index()),
            instruction_id: d.instruction_id(),
            debug_entry: d
                .debug_entry()
                .map(|v| value(v, &format!("{field}.debug_event.debug_entry")))
                .transpose()?,
            delegate_debug_id_int: d.delegate_debug_id_int(),
            delegate_debug_id_str: string(d.delegate_debug_id_str()),
        })),
        (p, a, d) => {
            let set = [p.is_some(), a.is_some(), d.is_some()].iter().filter(|&&s| s).count();
            Err(Error::invalid(
                FORMAT,
                field,
                loc(&e._tab),
                format!("{set} of profile_event, allocation_event, debug_event are set, not one"),
            ))
        }
    }
}

fn value(v: fb::Value<'_>, field: &str) -> Result<Value> {
    let code = v.val().0;
    let val = ValueType::from_code(code).ok_or_else(|| {
        Error::invalid(FORMAT, format!("{field}.val"), loc(&v._tab), format!("unknown kind {code}"))
    })?;
    let tensor_list = v.tensor_list().map(|l| {
        l.tensors().map(|ts| ts.iter().map(tensor).collect::<Vec<_>>()).unwrap_or_default()
    });
    let decoded = Value {
        val,
        tensor: v.tensor().map(tensor),
        tensor_list,
        int_value: v.int_value().map(|i| or_zero(i.int_val())),
        float_value: v.float_value().map(|f| f.float_val()),
        double_value: v.double_value().map(|d| or_zero(d.double_val())),
        bool_value: v.bool_value().map(|b| b.bool_val()),
        output: v.output().map(|b| b.bool_val()),
    };
    let present = match val {
        ValueType::Int => decoded.int_value.is_some(),
        ValueType::Bool => decoded.bool_value.is_some(),
        ValueType::Float => decoded.float_value.is_some(),
        ValueType::Double => decoded.double_value.is_some(),
        ValueType::Tensor => decoded.tensor.is_some(),
        ValueType::TensorList => decoded.tensor_list.is_some(),
        ValueType::Null | ValueType::String => true,
    };
    if !present {
        return Err(Error::invalid(
            FORMAT,
            field,
            loc(&v._tab),
            format!("kind {} but its field is absent", val.name()),
        ));
    }
    Ok(decoded)
}

fn longs(v: Option<Vector<'_, fb::UnalignedLong>>) -> Vec<i64> {
    v.map(|v| v.iter().map(|x| x.get()).collect()).unwrap_or_default()
}

fn tensor(t: fb::Tensor<'_>) -> Tensor {
    Tensor {
        scalar_type: t.scalar_type().0,
        sizes: longs(t.sizes()),
        strides: longs(t.strides()),
        offset: or_zero(t.offset()),
    }
}
