//! The payload as JSON: the header, then the graph with schema field names (`xnodes` with
//! their kind and fields, `xvalues`, `constant_data`), from the verified decoded form.

use serde_json::{json, Value as Json};

use super::model::{Constant, Op, Payload, Quant, Scales, Value};

fn scales(s: &Scales) -> Json {
    match s {
        Scales::Inline(v) => json!({ "scale": v }),
        Scales::Constant(i) => json!({ "scale_buffer_idx": i }),
    }
}

fn quant(q: &Quant) -> Json {
    let mut j = match q {
        Quant::PerTensor { scale, zero_point } => {
            json!({ "scale": scale, "zero_point": zero_point })
        }
        Quant::PerChannel { scales: s, channel_dim, num_scales } => {
            let mut j = scales(s);
            j["channel_dim"] = json!(channel_dim);
            j["num_scales"] = json!(num_scales);
            j
        }
        Quant::PerChannelGroup { scales: s, channel_dim, group_size, num_scales } => {
            let mut j = scales(s);
            j["channel_dim"] = json!(channel_dim);
            j["group_size"] = json!(group_size);
            j["num_scales"] = json!(num_scales);
            j
        }
        Quant::PerTokenDynamic { num_nonbatch_dims } => {
            json!({ "num_nonbatch_dims": num_nonbatch_dims })
        }
    };
    j["type"] = json!(q.name());
    j
}

fn value(i: usize, v: &Value) -> Json {
    let mut j = json!({
        "id_out": i,
        "datatype": v.datatype.name(),
        "dims": v.dims,
        "constant_buffer_idx": v.constant.unwrap_or(0),
        "external_id": v.external_id,
        "flags": v.flags,
    });
    if let Some(q) = &v.quant {
        j["quant_params"] = quant(q);
    }
    j
}

/// A JSON number, or a string for the infinities and NaN JSON cannot hold.
fn float(x: f32) -> Json {
    if x.is_finite() {
        json!(x)
    } else {
        json!(x.to_string())
    }
}

fn op(o: &Op) -> Json {
    match o {
        Op::Binary { a, b, output, flags, .. } => {
            json!({ "input1_id": a, "input2_id": b, "output_id": output, "flags": flags })
        }
        Op::Unary { input, output, flags, .. } => {
            json!({ "input_id": input, "output_id": output, "flags": flags })
        }
        Op::FullyConnected { input, filter, bias, output, flags } => json!({
            "input1_id": input, "filter_id": filter, "bias_id": bias,
            "output_id": output, "flags": flags,
        }),
        Op::Conv(c) => json!({
            "padding": c.padding, "kernel": c.kernel, "subsampling": c.stride,
            "dilation": c.dilation, "group_input_channels": c.group_input_channels,
            "group_output_channels": c.group_output_channels, "groups": c.groups,
            "adjustment": c.adjustment, "input1_id": c.input, "filter_id": c.filter,
            "bias_id": c.bias, "output_id": c.output, "flags": c.flags,
        }),
        Op::Pool(p) => json!({
            "padding": p.padding, "pooling": p.pooling, "stride": p.stride,
            "dilation": p.dilation, "input_id": p.input, "output_id": p.output, "flags": p.flags,
        }),
        Op::ArgMaxPool { padding, pooling, input, values, indices } => json!({
            "padding": padding, "pooling": pooling, "input_id": input,
            "output_value_id": values, "output_index_id": indices,
        }),
        Op::Transpose { perm, input, output } => {
            json!({ "perm": perm, "input_id": input, "output_id": output })
        }
        Op::Reshape { new_shape, input, output } => {
            json!({ "new_shape": new_shape, "input_id": input, "output_id": output })
        }
        Op::Slice { offsets, sizes, input, output } => json!({
            "offsets": offsets, "sizes": sizes, "input_id": input, "output_id": output,
        }),
        Op::Pad { pre, post, value, input, output } => json!({
            "pre_paddings": pre, "post_paddings": post, "padding_value": float(*value),
            "input_id": input, "output_id": output,
        }),
        Op::ResizeBilinear { height, width, input, output, flags } => json!({
            "new_height": height, "new_width": width, "input_id": input,
            "output_id": output, "flags": flags,
        }),
        Op::Concat { axis, inputs, output } => {
            json!({ "axis": axis, "input_ids": inputs, "output_id": output })
        }
        Op::LeakyRelu { slope, input, output } => {
            json!({ "negative_slope": float(*slope), "input_id": input, "output_id": output })
        }
        Op::Elu { alpha, input, output } => {
            json!({ "alpha": float(*alpha), "input_id": input, "output_id": output })
        }
        Op::Sdpa { query, key, value, scale, mask, output } => json!({
            "query_id": query, "key_id": key, "value_id": value, "scale_id": scale,
            "mask_id": mask, "output_id": output,
        }),
    }
}

/// Dumps a verified payload.
pub fn dump(p: &Payload<'_>) -> Json {
    let g = &p.graph;
    let header = p.header.as_ref().map(|h| {
        json!({
            "length": h.length,
            "flatbuffer_offset": h.flatbuffer.start,
            "flatbuffer_size": h.flatbuffer.len(),
            "constant_data_offset": h.constants.start,
            "constant_data_size": h.constants.len(),
        })
    });
    let nodes: Vec<Json> = g
        .nodes
        .iter()
        .map(|n| {
            let mut j = json!({ "kind": n.kind, "debug_handle": n.debug_handle });
            j["fields"] = op(&n.op);
            if let Some((lo, hi)) = n.min_max {
                j["output_min_max"] = json!({ "output_min": float(lo), "output_max": float(hi) });
            }
            j
        })
        .collect();
    let constants: Vec<Json> = g
        .constants
        .iter()
        .map(|c| match c {
            None => json!(null),
            Some(Constant::Region(r)) => json!({ "offset": r.start, "size": r.len() }),
            Some(Constant::Inline(r)) => json!({ "inline_offset": r.start, "size": r.len() }),
            Some(Constant::Named { key, size }) => json!({ "named_key": key, "size": size }),
        })
        .collect();
    json!({
        "format": "xnnpack",
        "header": header,
        "identifier": String::from_utf8_lossy(&p.identifier),
        "version": g.version,
        "num_externs": g.num_externs,
        "input_ids": g.input_ids,
        "output_ids": g.output_ids,
        "xnodes": nodes,
        "xvalues": g.values.iter().enumerate().map(|(i, v)| value(i, v)).collect::<Vec<_>>(),
        "constant_data": constants,
    })
}
