//! The FlexBuffer reader against buffers built, and values decoded, by the official Python
//! FlexBuffers implementation (`tools/fixtures/flexbuffer.py`).

mod common;

use common::{fixture, mutate, Rng};
use kiln_format::flexbuffer::{self, FlexType, Reference};
use serde_json::{json, Value};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The value in the fixture's JSON convention (strings and blobs as {"bytes": hex}).
fn decode(r: &Reference<'_>, depth: usize) -> Value {
    assert!(depth < 16);
    match r.flex_type() {
        FlexType::Null => Value::Null,
        FlexType::Bool => Value::Bool(r.as_i64("b").unwrap() != 0),
        FlexType::Int | FlexType::UInt | FlexType::IndirectInt | FlexType::IndirectUInt => {
            json!(r.as_i64("i").unwrap())
        }
        FlexType::Float | FlexType::IndirectFloat => json!(r.as_f64("f").unwrap()),
        FlexType::String | FlexType::Blob | FlexType::Key => {
            json!({ "bytes": hex(r.as_bytes("s").unwrap()) })
        }
        FlexType::Map => {
            let m = r.as_map("m").unwrap();
            let mut out = serde_json::Map::new();
            for i in 0..m.len() {
                let k = String::from_utf8(m.key(i, "k").unwrap().to_vec()).unwrap();
                out.insert(k, decode(&m.value(i, "v").unwrap(), depth + 1));
            }
            Value::Object(out)
        }
        _ => {
            let v = r.as_vector("v").unwrap();
            Value::Array((0..v.len()).map(|i| decode(&v.get(i, "e").unwrap(), depth + 1)).collect())
        }
    }
}

const FIXTURES: [&str; 3] = ["edgetpu_like", "scalars", "nested"];

#[test]
fn decodes_what_the_official_implementation_decodes() {
    for name in FIXTURES {
        let data = std::fs::read(fixture(&format!("flexbuffer/{name}.flexbuf"))).unwrap();
        let expected: Value = serde_json::from_str(
            &std::fs::read_to_string(fixture(&format!("flexbuffer/{name}.json"))).unwrap(),
        )
        .unwrap();
        let root = flexbuffer::root(&data).unwrap();
        assert_eq!(decode(&root, 0), expected["value"], "{name}");
    }
}

#[test]
fn edgetpu_options_from_the_official_builder() {
    let data = std::fs::read(fixture("flexbuffer/edgetpu_like.flexbuf")).unwrap();
    let opts = kiln_format::darwinn::custom_op::parse_custom_options(&data, 100).unwrap();
    assert_eq!(opts.version, Some(0));
    assert_eq!(opts.chip_name, Some(&b"beagle"[..]));
    assert_eq!(opts.execution_preference, Some(-1));
    assert_eq!(opts.chips, Some(vec![17]));
    assert_eq!(opts.packages.len(), 1);
    assert_eq!(opts.packages[0].bytes, [0xffu8, 0x00, 0x80].repeat(30));
    let at = (opts.packages[0].file_offset - 100) as usize;
    assert_eq!(&data[at..at + 90], opts.packages[0].bytes);
}

#[test]
fn mutated_fixtures_give_values_or_errors() {
    let mut rng = Rng::new(99);
    for name in FIXTURES {
        let data = std::fs::read(fixture(&format!("flexbuffer/{name}.flexbuf"))).unwrap();
        for _ in 0..2000 {
            let m = mutate(&data, &mut rng);
            if let Ok(r) = flexbuffer::root(&m) {
                let _ = r.to_json("root");
            }
            let _ = kiln_format::darwinn::custom_op::parse_custom_options(&m, 0);
        }
    }
}
