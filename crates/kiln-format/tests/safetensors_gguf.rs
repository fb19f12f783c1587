//! safetensors and GGUF readers on files written by the official Python packages
//! (`safetensors` 0.8.0, `gguf` 0.19.0; tools/fixtures/irpa/make_irpa_fixtures.py), checked
//! against the offsets iree-dump-parameters printed for the same files, plus mutated files.

mod common;

use common::{fixture, mutate, Rng};
use kiln_format::gguf::{ggml_type, Gguf, GGML_TYPES};
use kiln_format::irpa::source::ParamSource;
use kiln_format::safetensors::SafeTensors;

fn read(rel: &str) -> Vec<u8> {
    std::fs::read(fixture(rel)).unwrap()
}

/// (start, end, key) rows of an iree-dump-parameters table.
fn iree_rows(rel: &str) -> Vec<(u64, u64, String)> {
    let text = std::fs::read_to_string(fixture(rel)).unwrap();
    text.lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split(" | ").map(str::trim).collect();
            let start = cols.first()?.parse().ok()?;
            Some((start, cols.get(1)?.parse().ok()?, cols.get(3)?.trim_matches('`').to_string()))
        })
        .collect()
}

#[test]
fn safetensors_entries_match_iree_in_document_order() {
    let data = read("irpa/small.safetensors");
    let st = SafeTensors::parse(&data).unwrap();
    let ours: Vec<(u64, u64, String)> = st
        .tensors
        .iter()
        .map(|t| (t.offset, t.offset + t.data.len() as u64, t.name.clone()))
        .collect();
    assert_eq!(ours, iree_rows("irpa/small.safetensors.dump.txt"));
    let b = st.tensors.iter().find(|t| t.name == "b.weight").unwrap();
    assert_eq!((b.dtype.name, b.shape.as_slice()), ("F32", &[3u64, 4][..]));
    assert_eq!(&b.data[4..8], &1.0f32.to_le_bytes());
    assert_eq!(
        st.metadata,
        [
            ("format".to_string(), "np".to_string()),
            ("origin".to_string(), "kiln fixtures".to_string())
        ]
    );
    assert_eq!(st.param_entries().unwrap().len(), 5);
}

#[test]
fn safetensors_rejects_inconsistent_headers() {
    let mk = |json: &str, data: usize| {
        let mut v = (json.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(json.as_bytes());
        v.extend(std::iter::repeat_n(0u8, data));
        v
    };
    assert!(SafeTensors::parse(&mk(
        r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
        8
    ))
    .is_ok());
    for bad in [
        r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
        r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}}"#,
        r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}"#,
        r#"{"a":{"dtype":"X9","shape":[2],"data_offsets":[0,8]}}"#,
        r#"{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}"#,
        r#"{"a":{"dtype":"F32","shape":[18446744073709551615, 2],"data_offsets":[0,8]}}"#,
        r#"[1]"#,
    ] {
        assert!(SafeTensors::parse(&mk(bad, 8)).is_err(), "{bad}");
    }
    // The safetensors crate's loader refuses overlaps, holes and trailing bytes, which kiln's
    // own reader accepted; each error names what is wrong.
    let overlapping = mk(
        r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}"#,
        8,
    );
    let hole = mk(
        r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}}"#,
        8,
    );
    for (file, tensor) in [(overlapping, "b"), (hole, "b")] {
        let e = SafeTensors::parse(&file).unwrap_err();
        assert!(
            matches!(&e, kiln_format::Error::Invalid { field, .. } if field == &format!("{tensor}.data_offsets")),
            "{e}"
        );
    }
    // Errors the crate reports without a name still name the tensor.
    let e = SafeTensors::parse(&mk(
        r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"F32","shape":[3],"data_offsets":[2,10]}}"#,
        8,
    ))
    .unwrap_err();
    assert!(e.to_string().contains("b.data_offsets"), "{e}");
    let trailing = mk(r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#, 9);
    let e = SafeTensors::parse(&trailing).unwrap_err();
    assert!(e.to_string().contains("bytes after the last tensor"), "{e}");
}

#[test]
fn gguf_entries_match_iree() {
    let data = read("irpa/small.gguf");
    let g = Gguf::parse(&data).unwrap();
    g.verify().unwrap();
    assert_eq!((g.version, g.alignment), (3, 64));
    let ours: Vec<(u64, u64, String)> = g
        .tensors
        .iter()
        .map(|t| {
            (t.offset, t.offset + t.data.len() as u64, String::from_utf8_lossy(t.name).into_owned())
        })
        .collect();
    assert_eq!(ours, iree_rows("irpa/small.gguf.dump.txt"));
    let names: Vec<_> = g.tensors.iter().map(|t| t.ggml_type.name).collect();
    assert_eq!(names, ["F32", "F16", "Q8_0", "Q4_0"]);
    assert!(g.metadata.iter().any(|kv| kv.key == b"tokenizer.ggml.tokens"));
    // Version 2 has the same little-endian layout.
    let mut v2 = data.clone();
    v2[4..8].copy_from_slice(&2u32.to_le_bytes());
    assert_eq!(Gguf::parse(&v2).unwrap().tensors.len(), 4);
    let mut v1 = data.clone();
    v1[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert!(Gguf::parse(&v1).is_err());
}

#[test]
fn ggml_type_table_equals_gguf_py() {
    let text = std::fs::read_to_string(fixture("irpa/ggml_types.json")).unwrap();
    let table: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(table.len(), GGML_TYPES.len());
    for (name, v) in &table {
        let v: Vec<u64> = v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        let t = ggml_type(v[0] as u32).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!((t.name, t.block_elems, t.block_bytes), (name.as_str(), v[1], v[2]));
    }
}

#[test]
fn mutated_safetensors_and_gguf_never_panic() {
    let mut rng = Rng::new(0x5afe);
    let st = read("irpa/small.safetensors");
    let gg = read("irpa/small.gguf");
    for _ in 0..2000 {
        let m = mutate(&st, &mut rng);
        if let Ok(s) = SafeTensors::parse(&m) {
            let _ = s.param_entries();
        }
        let m = mutate(&gg, &mut rng);
        if let Ok(g) = Gguf::parse(&m) {
            let _ = g.verify();
            let _ = g.param_entries();
        }
    }
}
