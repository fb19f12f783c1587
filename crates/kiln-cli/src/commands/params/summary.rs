//! The text form of `kiln inspect` and the `kiln dump` arm for .irpa, .safetensors and .gguf.

use std::process::ExitCode;

use anyhow::Result;
use kiln_format::irpa::summary::Details;
use kiln_format::irpa::{self, ParamFile};
use kiln_format::Kind;
use serde_json::{json, Value};

use crate::input::Input;
use crate::output::{human_bytes, print_json, Table};

/// `kiln inspect` for parameter files, as text: their summary ([`irpa::summary`]), entries by
/// type and the entry table.
pub fn print(input: &Input) -> Result<ExitCode> {
    let parsed = super::sources::parse(input)?;
    let path = input.file.path();
    let summary = irpa::summary::summarize(path, input.kind, input.bytes().len(), &parsed)?;
    outln!(
        "{}: {} ({}), {} entries",
        path.display(),
        summary.kind,
        human_bytes(summary.size as u64),
        summary.entries
    );
    for (k, total) in &summary.by_type {
        outln!("  {k}: {} entries, {}", total.count, human_bytes(total.bytes));
    }
    match &summary.details {
        Details::Irpa { headers, skipped_entries } => {
            outln!("  headers: {}, skipped entries: {skipped_entries}", headers.len())
        }
        Details::Safetensors { metadata } => {
            for (k, v) in metadata {
                outln!("  metadata {k}: {v}");
            }
        }
        Details::Gguf { version, alignment, metadata_keys } => outln!(
            "  GGUF v{version}, alignment {alignment}, {} metadata keys",
            metadata_keys.len()
        ),
        Details::Executorch { version } if summary.kind == Kind::Ptd => {
            outln!("  FlatTensor v{version}")
        }
        Details::Executorch { version } => outln!("  Program v{version}"),
    }
    outln!();
    let mut table = Table::new(["key", "type", "dtype", "shape", "offset", "length"]);
    for t in &summary.tensors {
        table.row([
            t.key.clone(),
            t.kind.to_string(),
            t.dtype.clone().unwrap_or_default(),
            t.shape.as_ref().map(|s| format!("{s:?}")).unwrap_or_default(),
            t.offset.map(|o| o.to_string()).unwrap_or_else(|| "-".into()),
            t.length.to_string(),
        ]);
    }
    out!("{}", table.render());
    Ok(ExitCode::SUCCESS)
}

/// `kiln dump` for parameter files: every header field and entry as JSON.
pub fn dump_json(input: &Input) -> Result<ExitCode> {
    let parsed = super::sources::parse(input)?;
    let value = match &parsed {
        ParamFile::Ptd(f) => f.dump(),
        ParamFile::Pte(p) => kiln_format::pte::dump::dump(p),
        ParamFile::Irpa(a) => json!({
            "kind": "irpa",
            "headers": a.headers(),
            "entries": a.entries().iter().map(|e| {
                let mut v = json!({"header": e.header, "index": e.index, "entry_offset": e.entry_offset,
                    "entry_size": e.entry_size, "type": e.type_name(), "type_code": e.type_code, "flags": e.flags,
                    "key": e.key(), "metadata": String::from_utf8_lossy(e.metadata), "minimum_alignment": e.minimum_alignment,
                    "length": e.length()});
                match e.kind {
                    kiln_format::irpa::EntryKind::Splat { pattern, pattern_length, .. } => {
                        v["pattern"] = json!(pattern.iter().take(pattern_length.into()).map(|b| format!("{b:02x}")).collect::<String>());
                    }
                    kiln_format::irpa::EntryKind::Data { offset, .. } => v["offset"] = json!(offset),
                    kiln_format::irpa::EntryKind::External { path, offset, .. } => {
                        v["path"] = json!(String::from_utf8_lossy(path));
                        v["offset"] = json!(offset);
                    }
                    kiln_format::irpa::EntryKind::Skip => {}
                }
                v
            }).collect::<Vec<_>>(),
        }),
        ParamFile::Safetensors(s) => json!({
            "kind": "safetensors",
            "header_len": s.header_len,
            "metadata": s.metadata,
            "tensors": s.tensors.iter().map(|t| json!({"name": t.name, "dtype": t.dtype.name, "shape": t.shape,
                "offset": t.offset, "length": t.data.len()})).collect::<Vec<_>>(),
        }),
        ParamFile::Gguf(g) => json!({
            "kind": "gguf",
            "version": g.version,
            "alignment": g.alignment,
            "data_offset": g.data_offset,
            "metadata": g.metadata.iter().map(|kv| json!({"key": String::from_utf8_lossy(kv.key), "type": kv.value_type,
                "value": gguf_value(&kv.value)})).collect::<Vec<_>>(),
            "tensors": g.tensors.iter().map(|t| json!({"name": String::from_utf8_lossy(t.name), "type": t.ggml_type.name,
                "dims": t.dims, "relative_offset": t.relative_offset, "offset": t.offset, "length": t.data.len()})).collect::<Vec<_>>(),
        }),
    };
    print_json(&value)?;
    Ok(ExitCode::SUCCESS)
}

fn gguf_value(v: &kiln_format::gguf::Value<'_>) -> Value {
    use kiln_format::gguf::Value as V;
    match v {
        V::U64(x) => json!(x),
        V::I64(x) => json!(x),
        V::F64(x) => json!(x),
        V::Bool(x) => json!(x),
        V::Str(s) => json!(String::from_utf8_lossy(s)),
        V::Array { elem_type, count } => json!({"array_of_type": elem_type, "count": count}),
    }
}
