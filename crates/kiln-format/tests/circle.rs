//! Circle models: the real files from Samsung ONE round-trip byte-identically, re-read equal
//! after edits (origin tables, external data), and survive mutation.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;

use common::{mutate, shared_testdata, Rng};
use kiln_format::circle::origins::{read_tables, subgraph_origins, write_tables};
use kiln_format::circle::schema::ModelT;
use kiln_format::circle::{CircleEditor, CircleModel};
use kiln_format::origins::{OpTable, Origin, SourceTable};

fn real_files(test: &str) -> Vec<(String, Vec<u8>)> {
    let Some(dir) = shared_testdata("circle", test) else { return Vec::new() };
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "circle"))
        .collect();
    paths.sort();
    assert_eq!(paths.len(), 4, "expected the four real Circle files");
    paths
        .into_iter()
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), fs::read(&p).unwrap()))
        .collect()
}

/// Offset of `inner` inside `outer` (both views of the same file).
fn offset_in(outer: &[u8], inner: &[u8]) -> usize {
    inner.as_ptr() as usize - outer.as_ptr() as usize
}

#[test]
fn unchanged_models_write_back_identical_bytes() {
    for (name, bytes) in real_files("unchanged_models_write_back_identical_bytes") {
        let model = CircleModel::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let editor = CircleEditor::new(model);
        assert!(!editor.is_changed());
        assert_eq!(&*editor.to_bytes().unwrap(), &bytes[..], "{name}");
    }
}

#[test]
fn repacked_models_reread_equal_with_aligned_data() {
    for (name, bytes) in real_files("repacked_models_reread_equal_with_aligned_data") {
        let model = CircleModel::parse(&bytes).unwrap();
        let original = model.model().unpack();
        let mut editor = CircleEditor::new(model);
        editor.model_mut();
        let out = editor.to_bytes().unwrap().into_owned();
        let reread = CircleModel::parse(&out).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(reread.model().unpack(), original, "{name}");
        for (i, b) in reread.model().buffers().unwrap().iter().enumerate() {
            if let Some(d) = b.data().filter(|d| !d.is_empty()) {
                assert_eq!(offset_in(&out, d.bytes()) % 16, 0, "{name}: buffers[{i}] misaligned");
            }
        }
        // Repacking is deterministic and a fixed point.
        let mut again = CircleEditor::new(reread);
        again.model_mut();
        assert_eq!(&*again.to_bytes().unwrap(), &out[..], "{name}");
    }
}

/// The model without metadata and with only its first `n` buffers, for comparing everything
/// an origin-table edit must not touch.
fn without_metadata(mut m: ModelT, n: usize) -> ModelT {
    m.metadata = None;
    if let Some(b) = m.buffers.as_mut() {
        b.truncate(n);
    }
    m
}

#[test]
fn adding_origin_tables_rereads_equal() {
    for (name, bytes) in real_files("adding_origin_tables_rereads_equal") {
        let model = CircleModel::parse(&bytes).unwrap();
        let original = model.model().unpack();
        let num_buffers = original.buffers.as_ref().map_or(0, Vec::len);
        let old_metadata = original.metadata.clone().unwrap_or_default();
        assert_eq!(read_tables(&model).unwrap().source_table, None, "{name}");

        let sources = SourceTable::from([(0, "conv".to_string()), (7, "relu".to_string())]);
        let ops = OpTable::from([(0, BTreeSet::from([0, 7]))]);
        let mut editor = CircleEditor::new(model);
        write_tables(&mut editor, &sources, &ops).unwrap();
        let out = editor.to_bytes().unwrap().into_owned();
        let reread = CircleModel::parse(&out).unwrap_or_else(|e| panic!("{name}: {e}"));
        let tables = read_tables(&reread).unwrap();
        assert_eq!(tables.source_table.as_ref(), Some(&sources), "{name}");
        assert_eq!(tables.op_table.as_ref(), Some(&ops), "{name}");

        let new = reread.model().unpack();
        // Metadata: the old entries unchanged, then source table and op table, in luci's order
        // and in new buffers after all existing ones.
        let metadata = new.metadata.clone().unwrap();
        assert_eq!(metadata[..old_metadata.len()], old_metadata[..], "{name}");
        let added: Vec<_> = metadata[old_metadata.len()..]
            .iter()
            .map(|m| (m.name.clone().unwrap(), m.buffer))
            .collect();
        let base = num_buffers.max(1) as u32;
        assert_eq!(
            added,
            [("ONE_source_table".to_string(), base), ("ONE_op_table".to_string(), base + 1)],
            "{name}"
        );
        // Everything else is equal.
        assert_eq!(
            without_metadata(new, num_buffers),
            without_metadata(original, num_buffers),
            "{name}"
        );
        for entry in reread.metadata() {
            if entry.name == "CIRCLE_TRAINING" {
                assert_eq!(reread.buffer_data(entry.buffer).unwrap().len(), 92, "{name}");
            }
        }

        // Setting the tables again reuses their buffers instead of adding more.
        let mut editor = CircleEditor::new(reread);
        write_tables(&mut editor, &SourceTable::new(), &OpTable::new()).unwrap();
        let out2 = editor.to_bytes().unwrap().into_owned();
        let again = CircleModel::parse(&out2).unwrap();
        assert_eq!(again.model().buffers().unwrap().len(), num_buffers.max(1) + 2, "{name}");
        let tables = read_tables(&again).unwrap();
        assert_eq!(tables.op_table, Some(OpTable::new()));
    }
}

#[test]
fn origins_follow_lucis_importer() {
    for (name, bytes) in real_files("origins_follow_lucis_importer") {
        let model = CircleModel::parse(&bytes).unwrap();
        let subgraphs = model.model().subgraphs().unwrap();
        for s in 0..subgraphs.len() {
            let sg = subgraphs.get(s);
            let origins = subgraph_origins(&model, s).unwrap();
            let ops = sg.operators().map_or(0, |o| o.len());
            assert_eq!(origins.len(), ops, "{name}");
            // Without tables, operator i is its own origin, named after its first output.
            for (i, op) in sg.operators().iter().flatten().enumerate() {
                let out = op.outputs().unwrap().get(0) as usize;
                let tensor_name = sg.tensors().unwrap().get(out).name().unwrap_or("(noname)");
                let expected = Origin::single(i as u32, tensor_name);
                assert_eq!(origins.get(&(i as u32)), Some(&expected), "{name}");
            }
        }
        // With tables, operator 0 of every subgraph takes its origin from them; an empty op
        // table is "no origin information".
        let sources = SourceTable::from([(3, "a".to_string()), (4, "b".to_string())]);
        let ops = OpTable::from([(0, BTreeSet::from([3, 4]))]);
        let mut editor = CircleEditor::new(model);
        write_tables(&mut editor, &sources, &ops).unwrap();
        let out = editor.to_bytes().unwrap().into_owned();
        let reread = CircleModel::parse(&out).unwrap();
        let origins = subgraph_origins(&reread, 0).unwrap();
        let ids: Vec<u32> = origins.get(&0).unwrap().ids().into_iter().collect();
        assert_eq!(ids, [3, 4], "{name}");
        let mut editor = CircleEditor::new(reread);
        write_tables(&mut editor, &sources, &OpTable::new()).unwrap();
        let out = editor.to_bytes().unwrap().into_owned();
        let origins = subgraph_origins(&CircleModel::parse(&out).unwrap(), 0).unwrap();
        assert_eq!(origins.get(&0).unwrap().ids(), BTreeSet::from([0]), "{name}");
    }
}

#[test]
fn external_buffer_data_is_read_and_rewritten() {
    for (name, bytes) in real_files("external_buffer_data_is_read_and_rewritten") {
        let model = CircleModel::parse(&bytes).unwrap();
        let count = model.model().buffers().map_or(0, |b| b.len()) as u32;
        let originals: Vec<Vec<u8>> =
            (0..count).map(|i| model.buffer_data(i).unwrap().to_vec()).collect();
        // Turn every non-empty buffer into the offset/size form, pointing at where its data
        // sits in the original file: the writer then copies it after the flatbuffer.
        let mut editor = CircleEditor::new(model);
        let m = editor.model_mut();
        for (i, b) in m.buffers.iter_mut().flatten().enumerate() {
            if let Some(d) = b.data.take().filter(|d| !d.is_empty()) {
                let inner = model.buffer_data(i as u32).unwrap();
                b.offset = offset_in(&bytes, inner) as u64;
                b.size = d.len() as u64;
            }
        }
        let external = editor.to_bytes().unwrap().into_owned();
        let ext_model = CircleModel::parse(&external).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (i, want) in originals.iter().enumerate() {
            assert_eq!(ext_model.buffer_data(i as u32).unwrap(), &want[..], "{name}: buffers[{i}]");
            let b = ext_model.model().buffers().unwrap().get(i);
            if !want.is_empty() {
                assert!(b.data().is_none() && b.offset() % 16 == 0, "{name}: buffers[{i}]");
            }
        }
        // Unchanged: identical bytes; edited: the external data moves and still reads back.
        assert_eq!(&*CircleEditor::new(ext_model).to_bytes().unwrap(), &external[..]);
        let mut editor = CircleEditor::new(ext_model);
        editor.set_metadata("kiln_test", vec![1, 2, 3]).unwrap();
        let edited = editor.to_bytes().unwrap().into_owned();
        let edited_model = CircleModel::parse(&edited).unwrap();
        for (i, want) in originals.iter().enumerate() {
            assert_eq!(
                edited_model.buffer_data(i as u32).unwrap(),
                &want[..],
                "{name}: buffers[{i}]"
            );
        }
        assert_eq!(edited_model.metadata_data("kiln_test").unwrap(), Some(&[1u8, 2, 3][..]));
    }
}

#[test]
fn summaries_match_the_provenance_notes() {
    let files = real_files("summaries_match_the_provenance_notes");
    for (name, bytes) in &files {
        let model = CircleModel::parse(bytes).unwrap();
        let m = model.model();
        let sg = m.subgraphs().unwrap();
        let ops: Vec<String> = sg
            .iter()
            .flat_map(|s| {
                s.operators().into_iter().flatten().map(|o| model.operator_name(o.opcode_index()))
            })
            .collect();
        match name.as_str() {
            "one_nnfw_api_autocompilation_conv2d.circle" => {
                assert_eq!((sg.len(), ops.as_slice()), (1, &["CONV_2D".to_string()][..]));
                assert_eq!(sg.get(0).tensors().unwrap().len(), 4);
                assert_eq!(m.buffers().unwrap().len(), 5);
            }
            "one_circle_plus_gen_sample.circle" => {
                assert_eq!(ops, ["FULLY_CONNECTED"]);
                let inputs: Vec<i32> =
                    sg.get(0).operators().unwrap().get(0).inputs().unwrap().iter().collect();
                assert_eq!(inputs, [0, 1, -1]);
            }
            "one_circle_plus_gen_sample_tparam.circle" => {
                let md = model.metadata();
                assert_eq!((md.len(), md[0].name, md[0].buffer), (1, "CIRCLE_TRAINING", 6));
            }
            "one_vscode_while_000.circle" => {
                assert_eq!(ops, ["WHILE", "EQUAL", "ADD", "BatchMatMulV2"]);
            }
            other => panic!("unexpected file {other}"),
        }
    }
}

#[test]
fn mutated_real_models_never_panic() {
    let mut rng = Rng::new(0xc1c1e);
    let mut accepted = 0;
    for (_, original) in real_files("mutated_real_models_never_panic") {
        for _ in 0..400 {
            let bytes = mutate(&original, &mut rng);
            let Ok(model) = CircleModel::parse(&bytes) else { continue };
            accepted += 1;
            let _ = read_tables(&model);
            let _ = subgraph_origins(&model, 0);
            let mut editor = CircleEditor::new(model);
            if editor.set_metadata("ONE_op_table", vec![0; 4]).is_ok() {
                if let Ok(out) = editor.to_bytes() {
                    CircleModel::parse(&out).expect("a repacked accepted model must parse");
                }
            }
        }
    }
    eprintln!("{accepted} of 1600 mutants were accepted");
}

#[test]
fn mutated_origin_tables_never_panic() {
    use kiln_format::origins::{
        decode_op_table, decode_source_table, encode_op_table, encode_source_table,
    };
    let sources =
        SourceTable::from([(0, "conv".to_string()), (3, "relu6".to_string()), (9, "".to_string())]);
    let ops = OpTable::from([(0, BTreeSet::from([0, 3])), (4, BTreeSet::from([9]))]);
    let source_bytes = encode_source_table(&sources).unwrap();
    let op_bytes = encode_op_table(&ops).unwrap();
    let mut rng = Rng::new(0x7ab1e);
    let mut accepted = 0;
    for _ in 0..2000 {
        let m = mutate(&source_bytes, &mut rng);
        if let Ok(t) = decode_source_table(&m) {
            accepted += 1;
            assert_eq!(encode_source_table(&t).unwrap().len(), m.len());
        }
        let m = mutate(&op_bytes, &mut rng);
        if let Ok(t) = decode_op_table(&m) {
            accepted += 1;
            assert_eq!(decode_op_table(&encode_op_table(&t).unwrap()).unwrap(), t);
        }
    }
    assert!(accepted > 0, "some mutants (changed ids or name bytes) must decode");
}
