//! The `kiln inspect`, `kiln verify` and `kiln dump` arms for .irpa, .safetensors and .gguf.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Result;
use kiln_format::irpa::verify::{findings, Severity};
use kiln_format::irpa::Archive;
use serde_json::{json, Value};

use crate::input::Input;
use crate::output::{human_bytes, print_json, Table};
use kiln_format::irpa::ParamFile;

/// `kiln inspect` for parameter files: a summary and the entry list.
pub fn inspect(input: &Input, as_json: bool) -> Result<ExitCode> {
    let parsed = super::sources::parse(input)?;
    let entries = parsed.source().param_entries()?;
    let mut kinds: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let mut table = Table::new(["key", "type", "dtype", "shape", "offset", "length"]);
    let mut list = Vec::with_capacity(entries.len());
    for e in &entries {
        let kind = match e.payload {
            kiln_format::irpa::Payload::Data(_) => "data",
            kiln_format::irpa::Payload::Splat { .. } => "splat",
            kiln_format::irpa::Payload::External { .. } => "external",
        };
        let slot = kinds.entry(kind).or_default();
        slot.0 += 1;
        slot.1 += e.payload.length();
        let (dtype, shape) = e.tensor.as_ref().map_or((String::new(), String::new()), |t| {
            (t.dtype.clone(), format!("{:?}", t.shape))
        });
        let offset = e.offset.map(|o| o.to_string()).unwrap_or_else(|| "-".into());
        table.row([
            e.key_str().into_owned(),
            kind.to_string(),
            dtype.clone(),
            shape,
            offset,
            e.payload.length().to_string(),
        ]);
        list.push(json!({"key": e.key_str(), "type": kind, "dtype": e.tensor.as_ref().map(|t| &t.dtype),
            "shape": e.tensor.as_ref().map(|t| &t.shape), "offset": e.offset, "length": e.payload.length()}));
    }
    let mut summary = json!({
        "file": input.file.path(),
        "kind": input.kind,
        "size": input.bytes().len(),
        "entries": entries.len(),
        "by_type": kinds.iter().map(|(k, (n, b))| (k.to_string(), json!({"count": n, "bytes": b}))).collect::<serde_json::Map<_, _>>(),
    });
    match &parsed {
        ParamFile::Irpa(a) => {
            summary["headers"] = json!(a.headers());
            summary["skipped_entries"] = json!(a.entries().len() - a.live_entries().count());
        }
        ParamFile::Safetensors(s) => {
            summary["metadata"] =
                Value::Object(s.metadata.iter().map(|(k, v)| (k.clone(), json!(v))).collect());
        }
        ParamFile::Gguf(g) => {
            summary["version"] = json!(g.version);
            summary["alignment"] = json!(g.alignment);
            summary["metadata_keys"] = json!(g
                .metadata
                .iter()
                .map(|kv| String::from_utf8_lossy(kv.key))
                .collect::<Vec<_>>());
        }
        ParamFile::Ptd(f) => summary["version"] = json!(f.version()),
        ParamFile::Pte(p) => summary["version"] = json!(p.version()),
    }
    if as_json {
        summary["tensors"] = Value::Array(list);
        print_json(&summary)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "{}: {} ({}), {} entries",
        input.file.path().display(),
        input.kind,
        human_bytes(input.bytes().len() as u64),
        entries.len()
    );
    for (k, (n, b)) in &kinds {
        outln!("  {k}: {n} entries, {}", human_bytes(*b));
    }
    match &parsed {
        ParamFile::Irpa(a) => outln!(
            "  headers: {}, skipped entries: {}",
            a.headers().len(),
            a.entries().len() - a.live_entries().count()
        ),
        ParamFile::Safetensors(s) => {
            for (k, v) in &s.metadata {
                outln!("  metadata {k}: {v}");
            }
        }
        ParamFile::Gguf(g) => outln!(
            "  GGUF v{}, alignment {}, {} metadata keys",
            g.version,
            g.alignment,
            g.metadata.len()
        ),
        ParamFile::Ptd(f) => outln!("  FlatTensor v{}", f.version()),
        ParamFile::Pte(p) => outln!("  Program v{}", p.version()),
    }
    outln!();
    out!("{}", table.render());
    Ok(ExitCode::SUCCESS)
}

/// `kiln verify` for parameter files: `Err(reason)` on the first error.
pub fn verify_outcome(input: &Input) -> Result<(), String> {
    let bytes = input.bytes();
    let result = match input.kind {
        kiln_format::Kind::Irpa => Archive::parse(bytes).map_err(|e| e.to_string()).and_then(|a| {
            match findings(&a).into_iter().find(|f| f.severity == Severity::Error) {
                Some(f) => Err(f.to_error().to_string()),
                None => Ok(()),
            }
        }),
        kiln_format::Kind::Safetensors => kiln_format::safetensors::SafeTensors::parse(bytes)
            .map(|_| ())
            .map_err(|e| e.to_string()),
        _ => kiln_format::gguf::Gguf::parse(bytes)
            .and_then(|g| g.verify())
            .map_err(|e| e.to_string()),
    };
    result
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
