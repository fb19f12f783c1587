//! Runtime behaviour on the committed fixtures: thread sharing, input validation, error
//! messages, external data, delegates through a test backend, and mutated programs.

mod common;

use std::sync::Arc;

use common::{compare, pte_dir, read_npy};
use kiln_kernels::{Arg, DType, KernelContext, Out};
use kiln_runtime::{
    Backend, BackendError, BackendRegistry, DelegateHandle, DelegateInit, Error, Input,
    LoadOptions, MemoryReason, Output, Program, TensorInput, ValueMeta,
};

#[path = "../../kiln-format/tests/common/mod.rs"]
mod format_common;

fn f32_input<'a>(sizes: &'a [usize], data: &'a [u8]) -> Input<'a> {
    Input::Tensor(TensorInput { dtype: DType::Float, sizes, data })
}

#[test]
fn program_and_method_are_thread_safe_types() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Program>();
    send::<kiln_runtime::Method>();
}

#[test]
fn one_program_shared_by_threads_each_running_its_own_method() {
    let dir = pte_dir();
    let program = Program::load(dir.join("multi_method.pte")).unwrap();
    let a = read_npy(&dir.join("multi_method.forward.in0.npy"), None);
    let b = read_npy(&dir.join("multi_method.forward.in1.npy"), None);
    let want0 = read_npy(&dir.join("multi_method.forward.out0.npy"), None);
    let want1 = read_npy(&dir.join("multi_method.forward.out1.npy"), None);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let mut m = program.method("forward").unwrap();
                for _ in 0..20 {
                    let out = m
                        .execute(&[f32_input(&a.sizes, &a.data), f32_input(&b.sizes, &b.data)])
                        .unwrap();
                    compare("out0", &out[0], &want0, 1e-4).unwrap();
                    compare("out1", &out[1], &want1, 1e-4).unwrap();
                }
            });
        }
    });
}

#[test]
fn inputs_are_validated_with_clear_messages() {
    let program = Program::load(pte_dir().join("multi_method.pte")).unwrap();
    let mut m = program.method("forward").unwrap();
    let data = vec![0u8; 64];
    let err = m.execute(&[f32_input(&[4, 4], &data)]).unwrap_err();
    assert!(matches!(err, Error::InputCount { expected: 2, actual: 1, .. }), "{err}");
    let err = m.execute(&[f32_input(&[4, 4], &data), f32_input(&[2, 8], &data)]).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("input 1") && msg.contains("float32[4, 4]") && msg.contains("float32[2, 8]"),
        "{msg}"
    );
    let long = vec![0u8; 128];
    let err = m
        .execute(&[
            f32_input(&[4, 4], &data),
            Input::Tensor(TensorInput { dtype: DType::Long, sizes: &[4, 4], data: &long }),
        ])
        .unwrap_err();
    assert!(err.to_string().contains("int64[4, 4]"), "{err}");
    let err = m.execute(&[f32_input(&[4, 4], &data), f32_input(&[4, 4], &data[..60])]).unwrap_err();
    assert!(err.to_string().contains("64 data bytes"), "{err}");
    let err = m.execute(&[f32_input(&[4, 4], &data), Input::Int(3)]).unwrap_err();
    assert!(err.to_string().contains("Int 3"), "{err}");
}

#[test]
fn unknown_method_lists_the_methods() {
    let program = Program::load(pte_dir().join("multi_method.pte")).unwrap();
    let err = program.method("nope").unwrap_err().to_string();
    assert!(err.contains("decode") && err.contains("encode") && err.contains("forward"), "{err}");
}

#[test]
fn constant_methods_return_their_values() {
    let program = Program::load(pte_dir().join("const_methods.pte")).unwrap();
    let mut m = program.method("get_scalar").unwrap();
    assert_eq!(m.num_instructions(), 0);
    assert_eq!(m.execute(&[]).unwrap(), vec![Output::Int(42)]);
    assert_eq!(
        program.method("get_double").unwrap().execute(&[]).unwrap(),
        vec![Output::Double(3.5)]
    );
    assert_eq!(program.method("get_bool").unwrap().execute(&[]).unwrap(), vec![Output::Bool(true)]);
}

#[test]
fn delegates_nothing_handles_are_named_at_load() {
    // xnnpack_cnn with its delegate's id renamed (same length, so the file stays valid):
    // kiln lowers XnnpackBackend itself, nothing handles the other id.
    let mut bytes = std::fs::read(pte_dir().join("xnnpack_cnn.pte")).unwrap();
    let at = bytes.windows(14).position(|w| w == b"XnnpackBackend").unwrap();
    bytes[at..at + 14].copy_from_slice(b"OtherBackend42");
    let program = Program::builder().load_bytes("renamed.pte", bytes).unwrap();
    match program.method("forward") {
        Err(Error::Missing { operators, delegates, .. }) => {
            assert!(operators.is_empty(), "{operators:?}");
            assert_eq!(delegates, vec!["OtherBackend42".to_string()]);
        }
        other => panic!("expected a missing-delegate error, got {other:?}"),
    }
    // The original runs: its delegate is lowered onto kiln's kernels.
    let program = Program::load(pte_dir().join("xnnpack_cnn.pte")).unwrap();
    program.method("forward").unwrap();
}

#[test]
fn external_constants_need_their_ptd() {
    let dir = pte_dir();
    let program = Program::load(dir.join("external_constants.pte")).unwrap();
    match program.method("forward") {
        // Kernels missing: that error comes first and lists them.
        Err(Error::Missing { .. }) => {}
        Err(Error::ExternalData { reason, .. }) => assert!(reason.contains(".ptd"), "{reason}"),
        other => panic!("expected an external-data error, got {other:?}"),
    }
    let with = Program::load_with_data(
        dir.join("external_constants.pte"),
        dir.join("external_constants.ptd"),
    )
    .unwrap();
    let missing = with.missing_operators("forward").unwrap();
    if missing.is_empty() {
        with.method("forward").unwrap();
    }
    // A .ptd that lacks the names (the program's own file is not a .ptd at all).
    match Program::load_with_data(dir.join("external_constants.pte"), dir.join("tiny_cnn.pte")) {
        Err(Error::Format { source, .. }) => {
            assert!(matches!(source, kiln_format::Error::BadMagic { .. }), "{source}")
        }
        other => panic!("expected a format error, got {other:?}"),
    }
}

#[test]
fn an_xnnpack_delegates_weights_in_a_ptd_are_read_where_they_lie() {
    // xnnpack_external's delegate names its weights as named data of the .ptd (ExecuTorch's
    // external delegate constants): the plan borrows them there, copying none at decode, and
    // the compile stage packs them from the .ptd's pages (its outputs are checked against
    // ExecuTorch's in tests/fixtures.rs).
    let dir = pte_dir();
    let program =
        Program::load_with_data(dir.join("xnnpack_external.pte"), dir.join("xnnpack_external.ptd"))
            .unwrap();
    let f = program.method("forward").unwrap().footprint();
    assert_eq!(f.constants_made, 0, "{f:?}");
    assert!(f.packed_weights > 0, "{f:?}");
    // Without the .ptd the error names the missing key and where it was looked for.
    let alone = Program::load(dir.join("xnnpack_external.pte"))
        .and_then(|p| p.method("forward").map(|_| ()))
        .unwrap_err()
        .to_string();
    assert!(alone.contains("is in neither the program nor its data files"), "{alone}");
}

/// A backend standing in for XNNPACK: it checks the delegate call's values and fills the
/// output with a marker, so the test sees the runtime's delegate plumbing end to end.
struct MarkerBackend;
struct MarkerHandle {
    blob_len: usize,
}

impl Backend for MarkerBackend {
    fn id(&self) -> &str {
        "XnnpackBackend"
    }
    fn init(&self, init: &DelegateInit<'_>) -> Result<Box<dyn DelegateHandle>, BackendError> {
        // Every named constant of the payload is reachable through the init's named data.
        let payload = kiln_format::xnnpack::Payload::parse(init.processed)
            .map_err(|e| BackendError::InvalidPayload(e.to_string()))?;
        let mut named = 0;
        for c in payload.graph.constants.iter().flatten() {
            if let kiln_format::xnnpack::Constant::Named { key, size } = c {
                let data = init
                    .named_data
                    .get(key)
                    .ok_or_else(|| BackendError::MissingData { key: key.clone() })?;
                assert_eq!(data.len() as u64, *size, "{key}");
                named += 1;
            }
        }
        assert!(named > 0, "the fixture's weights are named data");
        Ok(Box::new(MarkerHandle { blob_len: init.processed.len() }))
    }
}

impl DelegateHandle for MarkerHandle {
    fn num_outputs(&self) -> usize {
        1
    }
    fn execute(
        &mut self,
        _: &mut KernelContext,
        args: &[Arg<'_>],
        outs: &mut [Out<'_, '_>],
    ) -> Result<(), BackendError> {
        let fail = |m: String| BackendError::Execution(m);
        let Some(Arg::Tensor(x)) = args.first() else {
            return Err(fail("input 0 is not a tensor".into()));
        };
        if x.sizes() != [1, 3, 32, 32] || self.blob_len == 0 {
            return Err(fail(format!("unexpected input {:?} / blob {}", x.sizes(), self.blob_len)));
        }
        let first = x.as_slice::<f32>().map_err(|e| fail(e.to_string()))?[0];
        let [Out::Tensor(y)] = outs else { return Err(fail("expected one output tensor".into())) };
        for v in y.as_mut_slice::<f32>().map_err(|e| fail(e.to_string()))? {
            *v = first + 1.0;
        }
        Ok(())
    }
}

#[test]
fn delegate_calls_reach_a_registered_backend() {
    let mut backends = BackendRegistry::new();
    backends.register(Arc::new(MarkerBackend));
    let options = LoadOptions { backends, ..LoadOptions::default() };
    let program =
        Program::builder().options(options).load(pte_dir().join("xnnpack_cnn.pte")).unwrap();
    let mut m = program.method("forward").unwrap();
    let ValueMeta::Tensor(meta) = &m.inputs()[0] else { panic!("tensor input") };
    let mut x = vec![0u8; meta.sizes.iter().product::<usize>() * 4];
    x[..4].copy_from_slice(&2.5f32.to_le_bytes());
    let out = m.execute(&[f32_input(&meta.sizes, &x)]).unwrap();
    let Output::Tensor(t) = &out[0] else { panic!("tensor output") };
    assert_eq!(t.sizes, vec![1, 10]);
    assert!(t.data.chunks_exact(4).all(|c| f32::from_le_bytes(c.try_into().unwrap()) == 3.5));
}

/// Loads mutated program bytes and runs every method that loads on deterministic inputs:
/// (whether the program loaded, how many methods ran). Errors are expected; panics fail.
fn load_and_run(bytes: Vec<u8>, options: &LoadOptions) -> (bool, usize) {
    let Ok(program) = Program::builder().options(options.clone()).load_bytes("mutated.pte", bytes)
    else {
        return (false, 0);
    };
    let mut ran = 0;
    let names: Vec<String> = program.method_names().iter().map(|s| s.to_string()).collect();
    for method in names {
        let Ok(mut m) = program.method(&method) else { continue };
        let arrays: Vec<(DType, Vec<usize>, Vec<u8>)> = m
            .inputs()
            .iter()
            .map(|meta| match meta {
                ValueMeta::Tensor(t) if t.sizes.iter().product::<usize>() < (1 << 20) => {
                    let n = t.sizes.iter().product::<usize>() * t.dtype.size();
                    (t.dtype, t.sizes.clone(), (0..n).map(|i| (i * 7) as u8).collect())
                }
                _ => (DType::Byte, vec![0], vec![]),
            })
            .collect();
        let inputs: Vec<Input<'_>> = arrays
            .iter()
            .map(|(d, s, v)| Input::Tensor(TensorInput { dtype: *d, sizes: s, data: v }))
            .collect();
        if m.execute(&inputs).is_ok() {
            ran += 1;
        }
    }
    (true, ran)
}

/// XNNPACK exports whose delegate payloads (only those bytes) are mutated: the program stays
/// a valid `.pte`, so every mutation reaches the payload reader and the lowering, and what
/// loads runs. Covers float CNNs, recurrent and attention graphs, a dynamic shape, and the
/// static and dynamic quantized kernels.
#[test]
fn mutated_xnnpack_payloads_never_panic() {
    let dir = pte_dir().join("../xnnpack");
    let mut rng = format_common::Rng::new(0x786e_6e70_6163_6b21);
    let options = LoadOptions {
        memory_limit: 64 << 20,
        instruction_limit: 100_000,
        ..LoadOptions::default()
    };
    let (mut loaded, mut ran, mut rejected) = (0, 0, 0);
    for name in [
        "conv_zoo",
        "unet_like",
        "transformer_encoder",
        "lstm",
        "dynamic_shape",
        "int_bool_outputs",
        "qs8_cnn",
        "q8_conv2d_hardtanh",
        "q8_max_pool2d",
        "q8_mul",
        "q8_hardswish",
        "qd8_mlp",
        "qb4w_linear",
        "qc4w_linear",
        "op_cat5",
        "op_slice",
    ] {
        let original = std::fs::read(dir.join(format!("{name}.pte"))).unwrap();
        let ranges: Vec<std::ops::Range<usize>> = {
            let p = kiln_format::pte::Program::open(&original).unwrap();
            let mut r = Vec::new();
            for m in p.methods() {
                for d in m.delegates() {
                    let b = p.delegate_data(&d.unwrap()).unwrap();
                    let start = b.as_ptr() as usize - original.as_ptr() as usize;
                    r.push(start..start + b.len());
                }
            }
            r
        };
        for _ in 0..60 {
            let mut bytes = original.clone();
            for _ in 0..1 + rng.below(4) {
                let r = &ranges[rng.below(ranges.len() as u64) as usize];
                let at = r.start + rng.below(r.len() as u64) as usize;
                match rng.below(3) {
                    0 => bytes[at] = rng.next_u64() as u8,
                    1 => bytes[at] = [0x00, 0x01, 0x7f, 0x80, 0xff][rng.below(5) as usize],
                    _ => {
                        let end = (at + 4).min(r.end);
                        let w = [0u32, 1, u32::MAX, 0x7fff_ffff, 1 << 16][rng.below(5) as usize];
                        bytes[at..end].copy_from_slice(&w.to_le_bytes()[..end - at]);
                    }
                }
            }
            let (l, r) = load_and_run(bytes, &options);
            loaded += l as usize;
            ran += r;
            rejected += (!l) as usize;
        }
    }
    println!("payload mutations: {loaded} loaded ({rejected} rejected), {ran} methods ran");
    assert!(loaded > 0 && ran > 0);
}

#[test]
fn mutated_programs_never_panic() {
    let dir = pte_dir();
    let mut rng = format_common::Rng::new(0x006b_696c_6e72_756e);
    let options = LoadOptions {
        memory_limit: 64 << 20,
        instruction_limit: 100_000,
        ..LoadOptions::default()
    };
    let mut loaded = 0;
    let mut ran = 0;
    for name in [
        "multi_method",
        "const_methods",
        "tiny_cnn",
        "dynamic_shape",
        "control_flow",
        "transformer_block",
        "lstm",
        "gru",
        "vit_small",
        // Channels-last 3x3 convolutions that run as Winograd.
        "resnet_stem",
    ] {
        let original = std::fs::read(dir.join(format!("{name}.pte"))).unwrap();
        for _ in 0..150 {
            let bytes = format_common::mutate(&original, &mut rng);
            let (l, r) = load_and_run(bytes, &options);
            loaded += l as usize;
            ran += r;
        }
    }
    println!("mutations: {loaded} loaded, {ran} executed");
    assert!(loaded > 0);
}

#[test]
fn the_predicted_peak_counts_against_the_memory_limit() {
    // tiny_cnn's prediction: its activations' pages and its convolutions' packed weights.
    let load = |limit: u64| {
        let options = LoadOptions { memory_limit: limit, ..LoadOptions::default() };
        Program::builder().options(options).load(pte_dir().join("tiny_cnn.pte")).unwrap()
    };
    let predicted = load(64 << 20).method("forward").unwrap().footprint();
    assert!(predicted.packed_weights > 0 && predicted.activations > 0, "{predicted:?}");
    let total = predicted.total();
    assert!(load(total).method("forward").is_ok());
    match load(total - 1).method("forward") {
        Err(Error::Memory { what, bytes, limit, reason: MemoryReason::OverLimit, .. }) => {
            assert!(what.contains("predicted peak") && what.contains("packed weights"), "{what}");
            assert_eq!((bytes, limit), (total, total - 1));
        }
        other => panic!("expected a memory error, got {other:?}"),
    }
}

#[test]
fn a_tensor_over_the_kernels_rank_is_refused_at_load_naming_it() {
    use kiln_format::pte::model::{ProgramModel, ValueModel};
    let bytes = std::fs::read(pte_dir().join("tiny_cnn.pte")).unwrap();
    let mut model =
        ProgramModel::from_program(&kiln_format::pte::Program::open(&bytes).unwrap()).unwrap();
    // The input [1, 3, 16, 16] as [1, 3, 16, 16, 1, 1, 1, 1, 1]: valid for ExecuTorch (16
    // dimensions), over kiln's kernels' 8.
    let m = &mut model.methods[0];
    let input = m.inputs[0] as usize;
    let ValueModel::Tensor(t) = &mut m.values[input] else { panic!("tensor input") };
    let rank = kiln_kernels::MAX_RANK + 1;
    t.sizes.resize(rank, 1);
    t.dim_order = (0..rank as u8).collect();
    let bytes = kiln_format::pte::writer::write(&model).unwrap();
    let program = Program::builder().load_bytes("rank9.pte", bytes).unwrap();
    // The typed error reaches callers (the Python package maps its kind to an exception), from
    // loading the method and from asking for its inputs alike.
    for err in [
        program.method("forward").map(|_| ()).unwrap_err(),
        program.method_inputs("forward").map(|_| ()).unwrap_err(),
    ] {
        assert!(matches!(err, kiln_runtime::Error::NotSupported { .. }), "{err:?}");
        let want = format!("values[{input}].tensor: not supported: rank 9");
        assert!(err.to_string().contains(&want), "{err}");
    }
}
