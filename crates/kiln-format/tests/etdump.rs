//! ETDumps: files ExecuTorch's runtime wrote (`tools/fixtures/export_etdump.py`) read as
//! ExecuTorch's Python deserializer reads them; kiln's writer reads back the same and builds,
//! from a program's instructions, the events ExecuTorch's runtime records; mutated files end in
//! a value or an error, never a panic.
//!
//! With `KILN_ETDUMP_OUT=DIR`, the files kiln writes here are also left in DIR for
//! `tools/fixtures/check_etdump.py` (ExecuTorch's `Inspector` on them).

mod common;

use common::{fixture, mutate, Rng};
use kiln_format::etdump::{
    self, native_call_name, DelegateDebugId, ETDump, Event, ProfileEvent, RunData,
};
use kiln_format::pte::{Instruction, Program};
use serde_json::Value as Json;

const FIXTURES: [&str; 3] = ["tiny_cnn", "xnnpack_cnn", "tiny_cnn_debug"];

fn etdp(name: &str) -> Vec<u8> {
    std::fs::read(fixture(&format!("etdump/{name}.etdp"))).unwrap()
}

fn expected(name: &str) -> Json {
    let text = std::fs::read_to_string(fixture(&format!("etdump/{name}.expected.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Leaves `bytes` as `DIR/name` when `KILN_ETDUMP_OUT=DIR` is set.
fn keep(name: &str, bytes: &[u8]) {
    if let Some(dir) = std::env::var_os("KILN_ETDUMP_OUT") {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(std::path::Path::new(&dir).join(name), bytes).unwrap();
    }
}

#[test]
fn executorch_files_read_as_executorch_reads_them() {
    for name in FIXTURES {
        let dump = ETDump::parse(&etdp(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(etdump::to_json(&dump), expected(name)["etdump"], "{name}");
    }
}

#[test]
fn rewritten_files_read_back_the_same() {
    for name in FIXTURES {
        let dump = ETDump::parse(&etdp(name)).unwrap();
        let bytes = etdump::write(&dump).unwrap();
        let prefix = u32::from_le_bytes(bytes[..4].try_into().unwrap());
        assert_eq!(prefix as usize, bytes.len() - 4, "{name}: size prefix");
        assert_eq!(&bytes[8..12], b"ED00", "{name}");
        assert_eq!(ETDump::parse(&bytes).unwrap(), dump, "{name}");
        keep(&format!("{name}.etdp"), &bytes);
    }
}

/// The events of one execute of `program`'s `forward`, as ExecuTorch's runtime records them
/// for portable kernels, with made-up times: per kernel instruction its `native_call_*` span
/// inside its `OPERATOR_CALL` span, then `Method::execute`.
fn execute_events(program: &Program<'_>) -> Vec<ProfileEvent> {
    let method = program.method_by_name("forward").unwrap();
    let chain = method.chain(0).unwrap();
    let mut events = Vec::new();
    let mut clock = 1_000u64;
    for (i, instruction) in chain.instructions().enumerate() {
        let i = i32::try_from(i).unwrap();
        match instruction.unwrap() {
            Instruction::Kernel { op_index, .. } => {
                let op = method.operator(op_index).unwrap();
                let name = native_call_name(op.name, op.overload);
                events.push(ProfileEvent::instruction(name, 0, i, clock + 10, clock + 90));
                events.push(ProfileEvent::operator_call(0, i, clock, clock + 100));
            }
            _ => panic!("instruction {i} is not a kernel call"),
        }
        clock += 100;
    }
    events.push(ProfileEvent::method(etdump::METHOD_EXECUTE, 900, clock + 10));
    events
}

/// The profile events of `run` without their times.
fn untimed(run: &RunData) -> Vec<ProfileEvent> {
    run.events
        .iter()
        .filter_map(Event::as_profile)
        .map(|e| ProfileEvent { start_time: 0, end_time: 0, ..e.clone() })
        .collect()
}

#[test]
fn execute_block_built_from_a_program_has_executorchs_events() {
    let pte = std::fs::read(fixture("pte/tiny_cnn.pte")).unwrap();
    let program = Program::open(&pte).unwrap();
    let built = ETDump::new(vec![RunData::execute(execute_events(&program))]);
    let bytes = etdump::write(&built).unwrap();
    keep("kiln_tiny_cnn.etdp", &bytes);
    let read = ETDump::parse(&bytes).unwrap();
    assert_eq!(read, built);

    let executorch = ETDump::parse(&etdp("tiny_cnn")).unwrap();
    let execute = &executorch.run_data[1];
    assert_eq!(execute.name, etdump::EXECUTE_BLOCK);
    assert_eq!(untimed(&read.run_data[0]), untimed(execute));
    assert_eq!(read.run_data[0].bundled_input_index, execute.bundled_input_index);
}

#[test]
fn delegate_operator_events_have_the_fields_xnnpack_gives_them() {
    let executorch = ETDump::parse(&etdp("xnnpack_cnn")).unwrap();
    let execute = untimed(&executorch.run_data[1]);
    let (delegate_call, operators) = execute[..execute.len() - 1].split_last().unwrap();
    assert!(!operators.is_empty());
    for op in operators {
        let id = DelegateDebugId::Str(op.delegate_debug_id_str.clone().unwrap());
        assert_eq!(&ProfileEvent::delegate_operator(id, 0, 0, 0, 0), op);
    }
    assert_eq!(delegate_call, &ProfileEvent::delegate_call(0, 0, 0, 0));
    assert_eq!(execute.last().unwrap(), &ProfileEvent::method(etdump::METHOD_EXECUTE, 0, 0));
}

#[test]
fn summaries_count_events_and_span_times() {
    let dump = ETDump::parse(&etdp("tiny_cnn_debug")).unwrap();
    let execute = &dump.run_data[1];
    let counts = execute.event_counts();
    assert_eq!((counts.profile, counts.allocation), (13, 0));
    assert_eq!(counts.debug, execute.events.len() - 13);
    let (start, end) = execute.time_span().unwrap();
    let method = execute.events.iter().filter_map(Event::as_profile).next_back().unwrap();
    assert_eq!((start, end), (method.start_time, method.end_time));
}

#[test]
fn damaged_files_are_refused_naming_what_is_wrong() {
    let good = etdp("tiny_cnn");
    let err = |bytes: &[u8]| ETDump::parse(bytes).unwrap_err().to_string();
    assert!(err(&good[..6]).contains("truncated at file_identifier"), "{}", err(&good[..6]));
    let mut ident = good.clone();
    ident[8] = b'X';
    assert!(err(&ident).contains("bad magic at offset 8"), "{}", err(&ident));
    assert!(err(&good[..good.len() - 4]).contains("size prefix"));
    let mut unprefixed = good[4..].to_vec();
    unprefixed.extend([0; 4]);
    assert!(err(&unprefixed).contains("bad magic"));
}

#[test]
fn an_event_with_no_kind_is_refused() {
    use kiln_schema::etdump::etdump as fb;
    let mut fbb = flatbuffers::FlatBufferBuilder::new();
    let event = fb::Event::create(&mut fbb, &fb::EventArgs::default());
    let events = Some(fbb.create_vector(&[event]));
    let run = fb::RunData::create(&mut fbb, &fb::RunDataArgs { events, ..Default::default() });
    let run_data = Some(fbb.create_vector(&[run]));
    let root = fb::ETDump::create(&mut fbb, &fb::ETDumpArgs { version: 0, run_data });
    fb::finish_size_prefixed_etdump_buffer(&mut fbb, root);
    let err = ETDump::parse(fbb.finished_data()).unwrap_err().to_string();
    assert!(err.contains("run_data[0].events[0]") && err.contains("0 of"), "{err}");
}

#[test]
fn mutated_etdumps_never_panic() {
    let files: Vec<Vec<u8>> = FIXTURES.iter().map(|n| etdp(n)).collect();
    let mut rng = Rng::new(0x6574_6470);
    let (mut parsed, mut refused) = (0, 0);
    for i in 0..3000 {
        let m = mutate(&files[i % files.len()], &mut rng);
        match ETDump::parse(&m) {
            Ok(dump) => {
                // What was read writes and reads back (compared as JSON: a NaN is equal there).
                let again = ETDump::parse(&etdump::write(&dump).unwrap()).unwrap();
                assert_eq!(etdump::to_json(&again), etdump::to_json(&dump));
                parsed += 1;
            }
            Err(_) => refused += 1,
        }
    }
    // Both outcomes occur, so the mutations reach past the header.
    assert!(parsed > 0 && refused > 0, "{parsed} parsed, {refused} refused");
}
