//! The whole program as JSON, shaped like `flatc --json --defaults-json` output of
//! `program.fbs`: schema field names, enum values by name, unions as `<field>_type` plus the
//! member table. Absent tables and vectors are left out; segment data is not included (it is
//! not part of the flatbuffer), only the header and the segment table.

use flatbuffers::{Follow, ForwardsUOffset, Vector};
use kiln_schema::program::executorch_flatbuffer as fb;
use kiln_schema::{or_zero, Unaligned};
use serde_json::{json, Map, Value as Json};

use super::program::Program;

/// A JSON object builder that skips absent fields.
#[derive(Default)]
struct Obj(Map<String, Json>);

impl Obj {
    fn set(mut self, key: &str, value: impl Into<Json>) -> Self {
        self.0.insert(key.to_string(), value.into());
        self
    }
    fn opt(mut self, key: &str, value: Option<Json>) -> Self {
        if let Some(v) = value {
            self.0.insert(key.to_string(), v);
        }
        self
    }
    fn done(self) -> Json {
        Json::Object(self.0)
    }
}

fn scalars<'a, T>(v: Option<Vector<'a, T>>) -> Option<Json>
where
    T: Follow<'a> + 'a,
    T::Inner: Into<Json>,
{
    v.map(|v| Json::Array(v.iter().map(Into::into).collect()))
}

/// A vector of 8-byte scalars declared as structs (see `kiln_schema::Unaligned`).
fn unaligned<'a, T>(v: Option<Vector<'a, T>>) -> Option<Json>
where
    T: Follow<'a, Inner = &'a T> + Unaligned + 'a,
    T::Value: Into<Json>,
{
    v.map(|v| Json::Array(v.iter().map(|x| x.get().into()).collect()))
}

/// A double as JSON, which has no NaN or infinities: those as strings, like flatc writes them.
pub(crate) fn double(d: f64) -> Json {
    if d.is_finite() {
        json!(d)
    } else {
        json!(d.to_string())
    }
}

fn tables<'a, T>(
    v: Option<Vector<'a, ForwardsUOffset<T>>>,
    f: impl Fn(<T as Follow<'a>>::Inner) -> Json,
) -> Option<Json>
where
    T: Follow<'a> + 'a,
{
    v.map(|v| Json::Array(v.iter().map(f).collect()))
}

fn enum_name(name: Option<&str>, value: i64) -> Json {
    match name {
        Some(n) => json!(n),
        None => json!(value),
    }
}

/// Dumps a verified program.
pub fn dump(p: &Program<'_>) -> Json {
    let r = p.raw();
    let layout = p.layout();
    let header = layout.header.map(|h| {
        json!({
            "length": h.length,
            "program_size": h.program_size,
            "segment_base_offset": h.segment_base_offset,
            "segment_data_size": h.segment_data_size,
        })
    });
    let program = Obj::default()
        .set("version", r.version())
        .opt("execution_plan", tables(r.execution_plan(), plan))
        .opt(
            "constant_buffer",
            tables(r.constant_buffer(), |b| {
                Obj::default().opt("storage", scalars(b.storage())).done()
            }),
        )
        .opt(
            "backend_delegate_data",
            tables(r.backend_delegate_data(), |b| {
                Obj::default().opt("data", scalars(b.data())).done()
            }),
        )
        .opt(
            "segments",
            tables(
                r.segments(),
                |s| json!({"offset": or_zero(s.offset()), "size": or_zero(s.size())}),
            ),
        )
        .opt("constant_segment", r.constant_segment().map(subsegment))
        .opt("mutable_data_segments", tables(r.mutable_data_segments(), subsegment))
        .opt(
            "named_data",
            tables(r.named_data(), |n| {
                Obj::default()
                    .opt("key", n.key().map(Json::from))
                    .set("segment_index", n.segment_index())
                    .done()
            }),
        )
        .done();
    Obj::default()
        .set("format", "pte")
        .opt("extended_header", header)
        .set("program", program)
        .done()
}

fn subsegment(s: fb::SubsegmentOffsets<'_>) -> Json {
    Obj::default()
        .set("segment_index", s.segment_index())
        .opt("offsets", unaligned(s.offsets()))
        .done()
}

fn plan(p: fb::ExecutionPlan<'_>) -> Json {
    Obj::default()
        .opt("name", p.name().map(Json::from))
        .opt(
            "container_meta_type",
            p.container_meta_type().map(|c| {
                Obj::default()
                    .opt("encoded_inp_str", c.encoded_inp_str().map(Json::from))
                    .opt("encoded_out_str", c.encoded_out_str().map(Json::from))
                    .done()
            }),
        )
        .opt("values", tables(p.values(), evalue))
        .opt("inputs", scalars(p.inputs()))
        .opt("outputs", scalars(p.outputs()))
        .opt("chains", tables(p.chains(), chain))
        .opt(
            "operators",
            tables(p.operators(), |o| {
                Obj::default()
                    .opt("name", o.name().map(Json::from))
                    .opt("overload", o.overload().map(Json::from))
                    .done()
            }),
        )
        .opt("delegates", tables(p.delegates(), delegate))
        .opt("non_const_buffer_sizes", unaligned(p.non_const_buffer_sizes()))
        .opt(
            "non_const_buffer_device",
            tables(p.non_const_buffer_device(), |d| {
                json!({
                    "buffer_idx": d.buffer_idx(),
                    "device_type": enum_name(d.device_type().variant_name(), d.device_type().0.into()),
                    "device_index": d.device_index(),
                })
            }),
        )
        .done()
}

fn delegate(d: fb::BackendDelegate<'_>) -> Json {
    Obj::default()
        .opt("id", d.id().map(Json::from))
        .opt(
            "processed",
            d.processed().map(|p| {
                json!({
                    "location": enum_name(p.location().variant_name(), p.location().0.into()),
                    "index": p.index(),
                })
            }),
        )
        .opt(
            "compile_specs",
            tables(d.compile_specs(), |c| {
                Obj::default()
                    .opt("key", c.key().map(Json::from))
                    .opt("value", scalars(c.value()))
                    .done()
            }),
        )
        .done()
}

fn chain(c: fb::Chain<'_>) -> Json {
    Obj::default()
        .opt("inputs", scalars(c.inputs()))
        .opt("outputs", scalars(c.outputs()))
        .opt("instructions", tables(c.instructions(), instruction))
        .opt(
            "stacktrace",
            tables(c.stacktrace(), |fl| {
                Obj::default()
                    .opt(
                        "items",
                        tables(fl.items(), |f| {
                            Obj::default()
                                .opt("filename", f.filename().map(Json::from))
                                .set("lineno", f.lineno())
                                .opt("name", f.name().map(Json::from))
                                .opt("context", f.context().map(Json::from))
                                .done()
                        }),
                    )
                    .done()
            }),
        )
        .done()
}

fn instruction(i: fb::Instruction<'_>) -> Json {
    let t = i.instr_args_type();
    let args = if let Some(k) = i.instr_args_as_kernel_call() {
        Some(Obj::default().set("op_index", k.op_index()).opt("args", scalars(k.args())).done())
    } else if let Some(d) = i.instr_args_as_delegate_call() {
        Some(
            Obj::default()
                .set("delegate_index", d.delegate_index())
                .opt("args", scalars(d.args()))
                .done(),
        )
    } else if let Some(m) = i.instr_args_as_move_call() {
        Some(json!({"move_from": m.move_from(), "move_to": m.move_to()}))
    } else if let Some(j) = i.instr_args_as_jump_false_call() {
        Some(json!({
            "cond_value_index": j.cond_value_index(),
            "destination_instruction": j.destination_instruction(),
        }))
    } else {
        i.instr_args_as_free_call().map(|f| json!({"value_index": f.value_index()}))
    };
    Obj::default()
        .set("instr_args_type", enum_name(t.variant_name(), t.0.into()))
        .opt("instr_args", args)
        .done()
}

fn evalue(e: fb::EValue<'_>) -> Json {
    let t = e.val_type();
    let val = if e.val_as_null().is_some() {
        Some(json!({}))
    } else if let Some(v) = e.val_as_int() {
        Some(json!({"int_val": or_zero(v.int_val())}))
    } else if let Some(v) = e.val_as_bool() {
        Some(json!({"bool_val": v.bool_val()}))
    } else if let Some(v) = e.val_as_double() {
        // JSON has no NaN or infinities: write those as strings, like flatc does.
        Some(json!({"double_val": double(or_zero(v.double_val()))}))
    } else if let Some(v) = e.val_as_string() {
        Some(Obj::default().opt("string_val", v.string_val().map(Json::from)).done())
    } else if let Some(v) = e.val_as_tensor() {
        Some(tensor(v))
    } else if let Some(v) = e.val_as_int_list() {
        Some(Obj::default().opt("items", unaligned(v.items())).done())
    } else if let Some(v) = e.val_as_double_list() {
        Some(
            Obj::default()
                .opt(
                    "items",
                    v.items()
                        .map(|items| Json::Array(items.iter().map(|d| double(d.get())).collect())),
                )
                .done(),
        )
    } else if let Some(v) = e.val_as_bool_list() {
        Some(Obj::default().opt("items", scalars(v.items())).done())
    } else if let Some(v) = e.val_as_tensor_list() {
        Some(Obj::default().opt("items", scalars(v.items())).done())
    } else {
        e.val_as_optional_tensor_list()
            .map(|v| Obj::default().opt("items", scalars(v.items())).done())
    };
    Obj::default().set("val_type", enum_name(t.variant_name(), t.0.into())).opt("val", val).done()
}

fn tensor(t: fb::Tensor<'_>) -> Json {
    let st = t.scalar_type();
    let dy = t.shape_dynamism();
    Obj::default()
        .set("scalar_type", enum_name(st.variant_name(), st.0.into()))
        .set("storage_offset", t.storage_offset())
        .opt("sizes", scalars(t.sizes()))
        .opt("dim_order", scalars(t.dim_order()))
        .set("requires_grad", t.requires_grad())
        .set("data_buffer_idx", t.data_buffer_idx())
        .opt(
            "allocation_info",
            t.allocation_info().map(|a| {
                json!({
                    "memory_id": a.memory_id(),
                    "memory_offset_low": a.memory_offset_low(),
                    "memory_offset_high": a.memory_offset_high(),
                })
            }),
        )
        .set("layout", t.layout())
        .set("shape_dynamism", enum_name(dy.variant_name(), dy.0.into()))
        .opt(
            "extra_tensor_info",
            t.extra_tensor_info().map(|e| {
                Obj::default()
                    .set("mutable_data_segments_idx", or_zero(e.mutable_data_segments_idx()))
                    .opt("fully_qualified_name", e.fully_qualified_name().map(Json::from))
                    .set("location", enum_name(e.location().variant_name(), e.location().0.into()))
                    .set(
                        "device_type",
                        enum_name(e.device_type().variant_name(), e.device_type().0.into()),
                    )
                    .set("device_index", e.device_index())
                    .done()
            }),
        )
        .done()
}
