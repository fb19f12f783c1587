#![no_main]
//! Fuzzes the Circle reader, origin-table reading and the editor: anything the reader accepts
//! must survive an edit and re-read.

use kiln_format::circle::origins::{read_tables, subgraph_origins};
use kiln_format::circle::{CircleEditor, CircleModel};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(model) = CircleModel::parse(data) else { return };
    let _ = read_tables(&model);
    let subgraphs = model.model().subgraphs().map_or(0, |s| s.len());
    for s in 0..subgraphs {
        let _ = subgraph_origins(&model, s);
    }
    let unchanged = CircleEditor::new(model);
    assert_eq!(&*unchanged.to_bytes().unwrap(), data);
    let mut editor = CircleEditor::new(model);
    if editor.set_metadata("ONE_op_table", vec![0; 4]).is_ok() {
        if let Ok(bytes) = editor.to_bytes() {
            let reread = CircleModel::parse(&bytes).expect("a rewritten model must verify");
            assert_eq!(reread.metadata_data("ONE_op_table").unwrap(), Some(&[0u8; 4][..]));
        }
    }
});
