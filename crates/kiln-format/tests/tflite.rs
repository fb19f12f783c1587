//! The minimal TFLite reader: the operator-code rule, default opcode index, large custom
//! options, and mutated real files.

mod common;

use common::{mutate, shared_testdata, Rng};
use flatbuffers::FlatBufferBuilder;
use kiln_format::tflite::{schema, Model};

/// A model with three operator codes, three operators (the last without `opcode_index`) and two
/// quantized tensors.
fn build_model() -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::new();
    let custom = fbb.create_string("edgetpu-custom-op");
    let codes = [
        // Old files: deprecated code 32 only.
        schema::OperatorCode::create(
            &mut fbb,
            &schema::OperatorCodeArgs {
                deprecated_builtin_code: 32,
                custom_code: Some(custom),
                version: 1,
                builtin_code: 0,
            },
        ),
        // Codes above 127 live in builtin_code; the deprecated byte saturates at 127.
        schema::OperatorCode::create(
            &mut fbb,
            &schema::OperatorCodeArgs {
                deprecated_builtin_code: 127,
                custom_code: None,
                version: 2,
                builtin_code: 150,
            },
        ),
        schema::OperatorCode::create(
            &mut fbb,
            &schema::OperatorCodeArgs {
                deprecated_builtin_code: 3,
                custom_code: None,
                version: 1,
                builtin_code: 0,
            },
        ),
    ];
    let codes = fbb.create_vector(&codes);
    let opts = fbb.create_vector(&[1u8, 2, 3]);
    let ins = fbb.create_vector(&[0i32]);
    let outs = fbb.create_vector(&[1i32]);
    let op0 = schema::Operator::create(
        &mut fbb,
        &schema::OperatorArgs {
            opcode_index: 0,
            inputs: Some(ins),
            outputs: Some(outs),
            custom_options: Some(opts),
            ..Default::default()
        },
    );
    let op1 = schema::Operator::create(
        &mut fbb,
        &schema::OperatorArgs { opcode_index: 2, ..Default::default() },
    );
    let op2 = schema::Operator::create(&mut fbb, &schema::OperatorArgs::default());
    let ops = fbb.create_vector(&[op0, op1, op2]);
    let scale = fbb.create_vector(&[0.5f32]);
    let zp = fbb.create_vector(&[-3i64]);
    let q = schema::QuantizationParameters::create(
        &mut fbb,
        &schema::QuantizationParametersArgs {
            scale: Some(scale),
            zero_point: Some(zp),
            ..Default::default()
        },
    );
    let mut tensors = Vec::new();
    for (name, ty) in [("in", 9i8), ("out", 3)] {
        let n = fbb.create_string(name);
        let shape = fbb.create_vector(&[1i32, 4]);
        tensors.push(schema::Tensor::create(
            &mut fbb,
            &schema::TensorArgs {
                shape: Some(shape),
                type_: ty,
                name: Some(n),
                quantization: Some(q),
                ..Default::default()
            },
        ));
    }
    let tensors = fbb.create_vector(&tensors);
    let sg = schema::SubGraph::create(
        &mut fbb,
        &schema::SubGraphArgs {
            tensors: Some(tensors),
            operators: Some(ops),
            ..Default::default()
        },
    );
    let sgs = fbb.create_vector(&[sg]);
    let model = schema::Model::create(
        &mut fbb,
        &schema::ModelArgs {
            version: 3,
            operator_codes: Some(codes),
            subgraphs: Some(sgs),
            ..Default::default()
        },
    );
    schema::finish_model_buffer(&mut fbb, model);
    fbb.finished_data().to_vec()
}

/// A one-operator model whose custom options are the 4 bytes at `offset` of the file.
fn rebuild_with_large_offset(offset: u64) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::new();
    let custom = fbb.create_string("edgetpu-custom-op");
    let code = schema::OperatorCode::create(
        &mut fbb,
        &schema::OperatorCodeArgs {
            deprecated_builtin_code: 32,
            custom_code: Some(custom),
            version: 1,
            builtin_code: 0,
        },
    );
    let codes = fbb.create_vector(&[code]);
    let op = schema::Operator::create(
        &mut fbb,
        &schema::OperatorArgs {
            large_custom_options_offset: offset,
            large_custom_options_size: 4,
            ..Default::default()
        },
    );
    let ops = fbb.create_vector(&[op]);
    let sg = schema::SubGraph::create(
        &mut fbb,
        &schema::SubGraphArgs { operators: Some(ops), ..Default::default() },
    );
    let sgs = fbb.create_vector(&[sg]);
    let model = schema::Model::create(
        &mut fbb,
        &schema::ModelArgs {
            version: 3,
            operator_codes: Some(codes),
            subgraphs: Some(sgs),
            ..Default::default()
        },
    );
    schema::finish_model_buffer(&mut fbb, model);
    fbb.finished_data().to_vec()
}

#[test]
fn operator_codes_follow_the_deprecated_builtin_rule() {
    let bytes = build_model();
    let model = Model::open(&bytes).unwrap();
    let codes: Vec<i32> = model.operator_codes().iter().map(|c| c.code()).collect();
    assert_eq!(codes, [32, 150, 3]);
    assert!(model.operator_codes()[0].is_custom("edgetpu-custom-op"));
    let ops = model.operators().unwrap();
    assert_eq!(ops.len(), 3);
    // Operator 2 has no opcode_index field: it defaults to 0.
    assert_eq!(ops[1].opcode_index, 2);
    assert_eq!(ops[2].opcode_index, 0);
    let co = ops[0].custom_options.unwrap();
    assert_eq!(co.bytes, [1, 2, 3]);
    assert_eq!(&bytes[co.offset as usize..co.offset as usize + 3], [1, 2, 3]);
    let t = model.tensor(0, 0).unwrap();
    assert_eq!(
        (t.name, t.dtype, t.scale.as_slice(), t.zero_point.as_slice()),
        (Some("in"), 9, &[0.5f32][..], &[-3i64][..])
    );
    assert_eq!(common::error_kind(model.tensor(0, 2)), "Invalid");
    assert_eq!(common::error_kind(model.tensor(0, -1)), "Invalid");
}

#[test]
fn large_custom_options_are_read_from_the_file_when_inline_ones_are_absent() {
    let base = rebuild_with_large_offset(2);
    let offset = base.len() as u64;
    let mut bytes = rebuild_with_large_offset(offset);
    assert_eq!(bytes.len() as u64, offset, "same layout whatever the offset value");
    bytes.extend_from_slice(b"LRG!");
    let model = Model::open(&bytes).unwrap();
    let co = model.operators().unwrap()[0].custom_options.unwrap();
    assert_eq!((co.offset, co.bytes), (offset, &b"LRG!"[..]));
    // Pointing past the end is an error naming the field.
    let short = &bytes[..bytes.len() - 1];
    let err = Model::open(short).unwrap().operators().unwrap_err().to_string();
    assert!(err.contains("large_custom_options"), "{err}");
}

#[test]
fn wrong_identifier_and_mutated_real_files() {
    assert!(Model::open(b"\x10\0\0\0CIR0\0\0\0\0").err().unwrap().to_string().contains("TFL3"));
    let Some(dir) = shared_testdata("edgetpu", "wrong_identifier_and_mutated_real_files") else {
        return;
    };
    let mut rng = Rng::new(1234);
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "tflite") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        // The flatbuffer structure of these files sits before and after the large package.
        for _ in 0..400 {
            let m = mutate(&bytes, &mut rng);
            if let Ok(model) = Model::open(&m) {
                let _ = model.operator_codes();
                if let Ok(ops) = model.operators() {
                    for op in &ops {
                        for &t in op.inputs.iter().chain(&op.outputs) {
                            let _ = model.tensor(op.subgraph, t);
                        }
                    }
                }
            }
        }
    }
}

/// Builtin operator names follow TFLite's `schema.fbs` numbering (codes from that schema).
#[test]
fn builtin_operator_names_follow_tflite_numbering() {
    use kiln_format::tflite::builtin_operator_name;
    for (code, name) in [
        (0, "ADD"),
        (3, "CONV_2D"),
        (4, "DEPTHWISE_CONV_2D"),
        (6, "DEQUANTIZE"),
        (9, "FULLY_CONNECTED"),
        (22, "RESHAPE"),
        (25, "SOFTMAX"),
        (32, "CUSTOM"),
        (114, "QUANTIZE"),
    ] {
        assert_eq!(builtin_operator_name(code), Some(name), "code {code}");
    }
    assert_eq!(builtin_operator_name(-2), None, "Circle-only codes are not TFLite's");
    assert_eq!(builtin_operator_name(100_000), None);
}
