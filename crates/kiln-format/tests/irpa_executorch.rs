//! ExecuTorch files as parameter sources: the named tensors of `.ptd` files and the named data
//! of `.pte` files, against archives IREE's `ParameterIndex` wrote from the same tensors as
//! ExecuTorch's own Python deserializers read them (`tools/fixtures/irpa/make_irpa_fixtures.py`).

mod common;

use common::fixture;
use kiln_format::irpa::builder::Plan;
use kiln_format::irpa::source::ParamSource;
use kiln_format::irpa::verify::verify;
use kiln_format::irpa::{BuildEntry, EntryKind, Payload};
use kiln_format::ptd::FlatTensor;
use kiln_format::pte::model::{ExtraTensorInfoModel, ProgramModel, ValueModel};
use kiln_format::pte::writer::write;
use kiln_format::pte::Program;

fn fnv1a64(data: &[u8]) -> u64 {
    data.iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3))
}

/// (key, length, FNV-1a 64) of every entry the fixture script recorded.
fn manifest(case: &str) -> Vec<(String, u64, u64)> {
    let text = std::fs::read_to_string(fixture(&format!("irpa/{case}.manifest.json"))).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["key"].as_str().unwrap().to_string(),
                e["length"].as_u64().unwrap(),
                u64::from_str_radix(e["fnv1a64"].as_str().unwrap(), 16).unwrap(),
            )
        })
        .collect()
}

fn data(p: &Payload<'_>) -> Vec<u8> {
    match p {
        Payload::Data(b) => b.to_vec(),
        other => panic!("not a data payload: {other:?}"),
    }
}

/// Converts `source` like `kiln params convert` and checks the archive entry by entry against
/// the source's own lookup, the recorded manifest and (when kept) IREE's archive.
fn check_case(case: &str, source: &dyn ParamSource, lookup: &dyn Fn(&str) -> Vec<u8>) {
    let expected = manifest(case);
    let entries = source.param_entries().unwrap();
    let listed: Vec<(String, u64, u64)> = entries
        .iter()
        .map(|e| (e.key_str().into_owned(), e.payload.length(), fnv1a64(&data(&e.payload))))
        .collect();
    assert_eq!(listed, expected, "{case}: keys, order, lengths and checksums");
    let build: Vec<BuildEntry<'_>> = entries.iter().map(|e| e.to_build(false)).collect(); // IREE writes no metadata
    let built = Plan::new(&build, 64).unwrap().to_vec();
    let archive = verify(&built).unwrap();
    let live: Vec<_> = archive.live_entries().collect();
    assert_eq!(live.len(), expected.len(), "{case}");
    for (e, (key, _, _)) in live.iter().zip(&expected) {
        assert_eq!(e.name, key.as_bytes(), "{case}");
        let EntryKind::Data { bytes, .. } = e.kind else { panic!("{case}: {key} is not data") };
        assert!(bytes == lookup(key).as_slice(), "{case}: {key} bytes differ from the source");
    }
    if let Ok(iree) = std::fs::read(fixture(&format!("irpa/{case}.irpa"))) {
        assert!(built == iree, "{case}: not byte-identical to IREE's archive");
    }
}

#[test]
fn ptd_tensors_convert_like_iree() {
    let bytes = std::fs::read(fixture("pte/external_constants.ptd")).unwrap();
    let ptd = FlatTensor::open(&bytes).unwrap();
    check_case("from_ptd_external_constants", &ptd, &|k| ptd.get(k).unwrap().data.to_vec());
    let entries = ptd.param_entries().unwrap();
    let t = entries[0].tensor.as_ref().unwrap();
    let layout = ptd.get("fc1.weight").unwrap().layout.unwrap();
    assert_eq!(t.dtype, layout.scalar_type.schema_name());
    assert_eq!(t.shape, layout.sizes.iter().map(|s| *s as u64).collect::<Vec<_>>());
}

#[test]
fn pte_named_data_converts_like_iree() {
    for (case, file) in [
        ("from_pte_xnnpack_cnn", "pte/xnnpack_cnn.pte"),
        ("from_pte_mobilenet_v2_xnnpack", "pte/mobilenet_v2_xnnpack.pte"),
    ] {
        let bytes = std::fs::read(fixture(file)).unwrap();
        let p = Program::open(&bytes).unwrap();
        check_case(case, &p, &|k| p.named_data_bytes(k).unwrap().to_vec());
    }
}

/// tiny_cnn.pte with fully qualified names given to its constant tensors (`name(idx)` picks
/// the name of constant buffer `idx`).
fn with_constant_names(name: impl Fn(u32) -> String) -> Vec<u8> {
    let bytes = std::fs::read(fixture("pte/tiny_cnn.pte")).unwrap();
    let mut model = ProgramModel::from_program(&Program::open(&bytes).unwrap()).unwrap();
    for m in &mut model.methods {
        for v in &mut m.values {
            if let ValueModel::Tensor(t) = v {
                if t.data_buffer_idx > 0 && t.allocation.is_none() {
                    t.extra = Some(ExtraTensorInfoModel {
                        mutable_data_segments_idx: 0,
                        fully_qualified_name: Some(name(t.data_buffer_idx)),
                        external: false,
                        device_type: 0,
                        device_index: 0,
                    });
                }
            }
        }
    }
    write(&model).unwrap()
}

#[test]
fn pte_constants_with_fully_qualified_names_are_entries() {
    let bytes = with_constant_names(|i| format!("const.{i}"));
    let p = Program::open(&bytes).unwrap();
    let entries = p.param_entries().unwrap();
    let mut expected = Vec::new();
    for m in p.methods() {
        for v in 0..m.num_values() {
            if let kiln_format::pte::Value::Tensor(t) = m.value(v).unwrap() {
                if let kiln_format::pte::TensorData::Constant(i) = t.data() {
                    let key = format!("const.{i}");
                    if !expected.iter().any(|(k, _): &(String, Vec<u8>)| *k == key) {
                        expected
                            .push((key, p.constant_data(i as usize, t.nbytes()).unwrap().to_vec()));
                    }
                }
            }
        }
    }
    assert!(expected.len() >= 2, "tiny_cnn has constants");
    let got: Vec<(String, Vec<u8>)> =
        entries.iter().map(|e| (e.key_str().into_owned(), data(&e.payload))).collect();
    assert_eq!(got, expected);
    // One name for two different constants is rejected, naming the tensor.
    let bytes = with_constant_names(|_| "same".into());
    let err = Program::open(&bytes).unwrap().param_entries().unwrap_err().to_string();
    assert!(err.contains("fully_qualified_name") && err.contains("\"same\""), "{err}");
}
