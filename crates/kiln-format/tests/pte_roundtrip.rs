//! Writer round trip over every `.pte` fixture: read -> model -> write -> read gives an equal
//! model, and the written file follows ExecuTorch's layout rules.

mod common;

use std::fs;

use kiln_format::pte::model::{ProgramModel, SegmentModel};
use kiln_format::pte::writer::write;
use kiln_format::pte::{Constants, Program, Unaligned};

#[test]
fn read_write_read_gives_an_equal_program() {
    let dir = common::fixture("pte");
    let mut count = 0;
    for entry in fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "pte") {
            continue;
        }
        let name = path.display().to_string();
        let original = fs::read(&path).unwrap();
        let model = ProgramModel::from_program(&Program::open(&original).unwrap()).unwrap();
        let written = write(&model).unwrap();
        let program = Program::open(&written).unwrap_or_else(|e| panic!("{name}: {e}"));
        let again = ProgramModel::from_program(&program).unwrap();
        assert!(again == model, "{name}: the model changed in the round trip");
        // Writing the re-read model gives the same bytes (the writer is deterministic).
        assert_eq!(write(&again).unwrap(), written, "{name}");

        // ExecuTorch's layout rules.
        let layout = program.layout();
        let segment_bytes: u64 = program.segments().map(|s| s.size).sum();
        match layout.header {
            None => assert_eq!(segment_bytes, 0, "{name}: segment data needs a header"),
            Some(h) => {
                assert_eq!(h.length, 32);
                assert_eq!(h.segment_base_offset % 128, 0, "{name}");
                assert_eq!(h.segment_base_offset + h.segment_data_size, written.len() as u64);
                assert!(h.segment_base_offset >= h.program_size);
            }
        }
        for s in program.segments() {
            assert_eq!(s.offset % 128, 0, "{name}: segment offset {}", s.offset);
        }
        if let Constants::Segment { offsets, .. } = program.constants() {
            assert!(offsets.iter().all(|o| o.get() % 16 == 0), "{name}: constant offsets");
        }
        // Raw segments (delegate blobs, named data) keep their exact bytes and sizes.
        let orig_program = Program::open(&original).unwrap();
        for (i, seg) in model.segments.iter().enumerate() {
            if let SegmentModel::Raw(bytes) = seg {
                assert_eq!(program.segment_bytes(i).unwrap(), bytes.as_slice());
                assert_eq!(orig_program.segment_bytes(i).unwrap(), bytes.as_slice());
            }
        }
        count += 1;
    }
    assert!(count >= 7, "only {count} pte fixtures");
}

#[test]
fn inline_constants_and_delegate_data_are_16_byte_aligned() {
    // Move the constant segment of a fixture into the deprecated inline constant_buffer and
    // a delegate blob into backend_delegate_data; the written data must start 16-aligned.
    let bytes = fs::read(common::fixture("pte/xnnpack_cnn.pte")).unwrap();
    let mut model = ProgramModel::from_program(&Program::open(&bytes).unwrap()).unwrap();
    let ci = model.constant_segment.take().unwrap() as usize;
    let SegmentModel::Buffers { buffers, .. } =
        std::mem::replace(&mut model.segments[ci], SegmentModel::Raw(Vec::new()))
    else {
        panic!("constant segment is a buffer segment");
    };
    model.constant_buffer = buffers;
    let d = &mut model.methods[0].delegates[0];
    let kiln_format::pte::DelegateData::Segment(seg) = d.data else { panic!("segment delegate") };
    let SegmentModel::Raw(blob) = model.segments[seg as usize].clone() else { panic!() };
    model.backend_delegate_data.push(blob.clone());
    d.data = kiln_format::pte::DelegateData::Inline(0);
    let written = write(&model).unwrap();
    let program = Program::open(&written).unwrap();
    let raw = program.raw();
    let base = written.as_ptr() as usize;
    for b in raw.constant_buffer().unwrap().iter() {
        let storage = b.storage().unwrap().bytes();
        assert_eq!((storage.as_ptr() as usize - base) % 16, 0);
    }
    let inline = raw.backend_delegate_data().unwrap().get(0).data().unwrap().bytes();
    assert_eq!((inline.as_ptr() as usize - base) % 16, 0);
    assert_eq!(inline, blob.as_slice());
    let m = program.method(0).unwrap();
    assert_eq!(program.delegate_data(&m.delegate(0).unwrap()).unwrap(), blob.as_slice());
    assert_eq!(ProgramModel::from_program(&program).unwrap(), model);
}

#[test]
fn rewriting_keeps_constants_that_overlap_the_next_buffer() {
    // Found by the `pte` fuzz target: a valid program whose constant tensor reads past the
    // next constant offset (ExecuTorch only checks offset + nbytes <= segment size). Splitting
    // the segment at offsets alone truncated that tensor's data.
    let bytes = fs::read(common::fixture("pte-regress/overlapping_constants.pte")).unwrap();
    let model = ProgramModel::from_program(&Program::open(&bytes).unwrap()).unwrap();
    let written = write(&model).unwrap();
    Program::open(&written).unwrap();
}
