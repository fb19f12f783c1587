//! `.ptd` fixtures exported by ExecuTorch 1.5.1: reading, external tensor lookup from the
//! matching `.pte` (or, for a delegate's constants, the keys its payload names), writer round
//! trip, and mutations that must never panic.

mod common;

use std::fs;

use kiln_format::ptd::{FlatTensor, FlatTensorModel};
use kiln_format::pte::{Program, TensorData, Value};

fn ptd_fixtures() -> Vec<(String, Vec<u8>)> {
    let dir = common::fixture("pte");
    let mut out: Vec<(String, Vec<u8>)> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ptd"))
        .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), fs::read(&p).unwrap()))
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no .ptd fixture in {}", dir.display());
    out
}

#[test]
fn external_tensors_of_the_program_resolve_with_matching_layouts() {
    for (stem, ptd) in ptd_fixtures() {
        let ft = FlatTensor::open(&ptd).unwrap();
        let pte = fs::read(common::fixture(&format!("pte/{stem}.pte"))).unwrap();
        let program = Program::open(&pte).unwrap();
        let mut resolved = 0;
        for m in program.methods() {
            for i in 0..m.num_values() {
                if let Value::Tensor(t) = m.value(i).unwrap() {
                    if let TensorData::External(name) = t.data() {
                        let data = ft.tensor_data(name, &t).unwrap();
                        assert_eq!(data.len() as u64, t.nbytes());
                        resolved += 1;
                    }
                }
            }
        }
        if resolved == 0 {
            // A delegate's constants (xnnpack_external): every entry is a blob its payload
            // names by key, in the program file.
            assert!(!ft.is_empty(), "{stem}: no EXTERNAL tensor and no entry");
            for e in ft.entries() {
                let e = e.unwrap();
                assert!(!e.data.is_empty(), "{stem}: entry {} is empty", e.key);
                let named = pte.windows(e.key.len()).any(|w| w == e.key.as_bytes());
                assert!(named, "{stem}: neither a tensor nor a delegate names entry {}", e.key);
            }
        }
        // The header of ExecuTorch's writer: base = align(flatbuffer_size + 48, 128), data to
        // the end of the file.
        let h = ft.header();
        assert_eq!(h.flatbuffer_offset, 48);
        assert_eq!(h.segment_base_offset % 128, 0);
        assert_eq!(h.segment_base_offset + h.segment_data_size, ptd.len() as u64);
    }
}

#[test]
fn write_read_round_trip_keeps_the_model_and_layout() {
    for (stem, ptd) in ptd_fixtures() {
        let model = FlatTensorModel::from_flat_tensor(&FlatTensor::open(&ptd).unwrap()).unwrap();
        let written = model.write().unwrap();
        let again = FlatTensor::open(&written).unwrap();
        assert_eq!(FlatTensorModel::from_flat_tensor(&again).unwrap(), model, "{stem}");
        let (h0, h1) =
            (FlatTensor::open(&ptd).unwrap().header().to_owned(), again.header().to_owned());
        assert_eq!(h1.segment_data_size, h0.segment_data_size, "{stem}: same segment layout");
        for i in 0..again.num_segments() {
            assert_eq!(
                again.segment(i).unwrap(),
                FlatTensor::open(&ptd).unwrap().segment(i).unwrap()
            );
        }
    }
}

#[test]
fn mutated_ptd_never_panics() {
    let fixtures = ptd_fixtures();
    let mut rng = common::Rng::new(0x0070_7464);
    let mut rejected = 0;
    for i in 0..1000 {
        let mutated = common::mutate(&fixtures[i % fixtures.len()].1, &mut rng);
        match FlatTensor::open(&mutated) {
            Ok(ft) => {
                for e in ft.entries() {
                    let _ = e.map(|e| e.key.len());
                }
            }
            Err(_) => rejected += 1,
        }
    }
    assert!(rejected > 0);
}
