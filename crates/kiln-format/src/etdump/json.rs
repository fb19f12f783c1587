//! An ETDump as the JSON ExecuTorch's Python deserializer gives
//! (`executorch.devtools.etdump.serialize`: `deserialize_from_etdump_flatcc`, then
//! `_serialize_from_etdump_to_json`): every schema field, absent ones as `null`, the value kind
//! by name, the tensor scalar type as its number, one-field tables as objects (`{"int_val": 3}`),
//! metadata bytes as a list of numbers. Empty `allocators` and `events` are `null`, as ExecuTorch
//! writes them absent; a run without a name has `""`; a NaN or infinite float is a string (JSON
//! has no such numbers).

use serde_json::{json, Value as Json};

use crate::pte::dump::double;

use super::model::{DebugEvent, ETDump, Event, ProfileEvent, RunData, Tensor, Value};

/// The JSON of `dump`.
pub fn to_json(dump: &ETDump) -> Json {
    json!({
        "version": dump.version,
        "run_data": dump.run_data.iter().map(run).collect::<Vec<_>>(),
    })
}

/// `null` for an empty list.
fn list_or_null(items: Vec<Json>) -> Json {
    if items.is_empty() {
        Json::Null
    } else {
        Json::Array(items)
    }
}

fn run(r: &RunData) -> Json {
    json!({
        "name": r.name,
        "bundled_input_index": r.bundled_input_index,
        "allocators": list_or_null(r.allocators.iter().map(|a| json!({"name": a})).collect()),
        "events": list_or_null(r.events.iter().map(event).collect()),
    })
}

fn event(e: &Event) -> Json {
    let (profile, allocation, debug) = match e {
        Event::Profile(p) => (profile_event(p), Json::Null, Json::Null),
        Event::Allocation(a) => (
            Json::Null,
            json!({"allocator_id": a.allocator_id, "allocation_size": a.allocation_size}),
            Json::Null,
        ),
        Event::Debug(d) => (Json::Null, Json::Null, debug_event(d)),
    };
    json!({"profile_event": profile, "allocation_event": allocation, "debug_event": debug})
}

fn profile_event(p: &ProfileEvent) -> Json {
    json!({
        "name": p.name,
        "chain_index": p.chain_index,
        "instruction_id": p.instruction_id,
        "delegate_debug_id_int": p.delegate_debug_id_int,
        "delegate_debug_id_str": p.delegate_debug_id_str,
        "delegate_debug_metadata": p.delegate_debug_metadata,
        "start_time": p.start_time,
        "end_time": p.end_time,
    })
}

fn debug_event(d: &DebugEvent) -> Json {
    json!({
        "name": d.name,
        "chain_index": d.chain_index,
        "instruction_id": d.instruction_id,
        "delegate_debug_id_int": d.delegate_debug_id_int,
        "delegate_debug_id_str": d.delegate_debug_id_str,
        "debug_entry": d.debug_entry.as_ref().map(value),
    })
}

fn value(v: &Value) -> Json {
    json!({
        "val": v.val.name(),
        "tensor": v.tensor.as_ref().map(tensor),
        "tensor_list": v.tensor_list.as_ref().map(|ts| {
            json!({"tensors": ts.iter().map(tensor).collect::<Vec<_>>()})
        }),
        "int_value": v.int_value.map(|i| json!({"int_val": i})),
        "float_value": v.float_value.map(|x| json!({"float_val": double(f64::from(x))})),
        "double_value": v.double_value.map(|x| json!({"double_val": double(x)})),
        "bool_value": v.bool_value.map(|b| json!({"bool_val": b})),
        "output": v.output.map(|b| json!({"bool_val": b})),
    })
}

fn tensor(t: &Tensor) -> Json {
    json!({
        "scalar_type": t.scalar_type,
        "sizes": t.sizes,
        "strides": t.strides,
        "offset": t.offset,
    })
}
