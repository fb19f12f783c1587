//! The compile stage on the ExecuTorch fixtures: every compiled step stands for original
//! instructions whose operators are those the file holds, every instruction is stood for
//! exactly once, batch norms after convolutions are folded away, and a compiled method gives
//! the interpreter's results (the interpreter's results are checked against ExecuTorch's in
//! `fixtures.rs`, the compiled ones there too, since compiling is the default).

mod common;

use common::{pte_dir, read_npy};
use kiln_runtime::{Input, LoadOptions, Output, Program, TensorInput, ValueMeta};
use serde_json::Value;

const BATCH_NORM: &str = "aten::_native_batch_norm_legit_no_training.out";

/// The operator of every instruction of method `name`, per chain, read from the file with
/// kiln-format's reader (not the runtime).
fn file_operators(bytes: &[u8], name: &str) -> Vec<Vec<String>> {
    use kiln_format::pte::{Instruction, Program};
    let program = Program::open(bytes).unwrap();
    let m = program.method_by_name(name).unwrap();
    let ops: Vec<String> = m.operators().map(|o| o.unwrap().full_name()).collect();
    m.chains()
        .map(|c| {
            c.instructions()
                .map(|i| match i.unwrap() {
                    Instruction::Kernel { op_index, .. } => ops[op_index].clone(),
                    Instruction::Delegate { .. } => "delegate".into(),
                    Instruction::Move { .. } => "MoveCall".into(),
                    Instruction::JumpFalse { .. } => "JumpFalseCall".into(),
                    Instruction::Free { .. } => "FreeCall".into(),
                })
                .collect()
        })
        .collect()
}

fn load(name: &str, expected: &Value, compile: bool) -> Program {
    let dir = pte_dir();
    let files = &expected["files"];
    let mut builder = Program::builder().options(LoadOptions { compile, ..LoadOptions::default() });
    if let Some(ptd) = files.get("ptd").and_then(Value::as_str) {
        builder = builder.ptd(dir.join(ptd)).unwrap();
    }
    builder.load(dir.join(files["pte"].as_str().unwrap())).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn fixtures() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(pte_dir()).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        if let Some(stem) = file.strip_suffix(".expected.json") {
            let v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            out.push((stem.to_string(), v));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn compiled_steps_stand_for_every_instruction_once() {
    let mut folded = 0;
    for (name, expected) in fixtures() {
        let program = load(&name, &expected, true);
        let bytes =
            std::fs::read(pte_dir().join(expected["files"]["pte"].as_str().unwrap())).unwrap();
        for m in expected["inspect"]["methods"].as_array().unwrap() {
            let method = m["name"].as_str().unwrap();
            let Ok(loaded) = program.method(method) else { continue };
            let file_ops = file_operators(&bytes, method);
            let total: usize = file_ops.iter().map(Vec::len).sum();
            assert_eq!(total as u64, m["instructions"].as_u64().unwrap(), "{name}.{method}");
            let mut seen: Vec<Vec<u32>> = vec![Vec::new(); file_ops.len()];
            for step in loaded.compiled() {
                assert!(!step.origins.is_empty(), "{name}.{method}: a step without origins");
                let want: Vec<String> = step
                    .origins
                    .iter()
                    .map(|&k| file_ops[step.chain][k as usize].clone())
                    .collect();
                // The file names a delegate call "delegate", the runtime "delegate:<backend>".
                let got: Vec<&str> = step
                    .operators
                    .iter()
                    .map(|o| if o.starts_with("delegate:") { "delegate" } else { o.as_str() })
                    .collect();
                assert_eq!(got, want, "{name}.{method}: operators of {step:?}");
                seen[step.chain].extend(&step.origins);
                assert_ne!(step.kind, BATCH_NORM, "{name}.{method}: batch norm left unfolded");
            }
            for (c, s) in seen.iter_mut().enumerate() {
                s.sort_unstable();
                // An XNNPACK delegate call is lowered into many steps, each standing for it.
                s.dedup_by(|a, b| a == b && file_ops[c][*a as usize] == "delegate");
                let all: Vec<u32> = (0..file_ops[c].len() as u32).collect();
                assert_eq!(*s, all, "{name}.{method} chain {c}: instructions stood for");
            }
            folded += file_ops.iter().flatten().filter(|o| *o == BATCH_NORM).count();
        }
    }
    // mobilenet_v2 and resnet_small hold batch norms after convolutions.
    assert!(folded > 0, "no fixture had a batch norm to fold");
}

/// ExecuTorch unrolls `torch.nn.LSTM` and `GRU` into one gate block per time step and layer.
/// Every float32 gate operator of the file (`sigmoid`, `tanh`, `mul`, and the adds and subs
/// among them) runs inside a map step, one map per cell: as many maps as the file has cells
/// (three sigmoids per LSTM cell, two per GRU cell, counted in the file with kiln-format's
/// reader).
#[test]
fn recurrent_cells_compile_to_one_map_each() {
    for (name, sigmoids_per_cell) in [("lstm", 3), ("gru", 2)] {
        let expected: Value = serde_json::from_slice(
            &std::fs::read(pte_dir().join(format!("{name}.expected.json"))).unwrap(),
        )
        .unwrap();
        let program = load(name, &expected, true);
        let bytes = std::fs::read(pte_dir().join(format!("{name}.pte"))).unwrap();
        let file_ops = file_operators(&bytes, "forward");
        let gates = ["aten::sigmoid.out", "aten::tanh.out", "aten::mul.out"];
        let gate_count = file_ops[0].iter().filter(|o| gates.contains(&o.as_str())).count();
        let sigmoids = file_ops[0].iter().filter(|o| *o == "aten::sigmoid.out").count();
        assert!(sigmoids > 0 && sigmoids % sigmoids_per_cell == 0, "{name}: {sigmoids}");
        let method = program.method("forward").unwrap();
        let maps: Vec<_> = method.compiled().iter().filter(|s| s.kind.starts_with("map")).collect();
        assert_eq!(maps.len(), sigmoids / sigmoids_per_cell, "{name}: map steps");
        let in_maps =
            maps.iter().flat_map(|s| &s.operators).filter(|o| gates.contains(&o.as_str())).count();
        assert_eq!(in_maps, gate_count, "{name}: gate operators inside maps");
    }
}

/// Concatenations along the outermost dimension (stacked RNN states, a ViT's class token
/// before its patches, a U-Net's skip connection at batch one) run as no step: their inputs
/// are written in place inside the output. These fixtures' outputs match ExecuTorch's
/// (`fixtures.rs`) with the concatenations removed.
#[test]
fn outer_concatenations_are_removed() {
    for name in ["lstm", "gru", "vit_small", "upsample_concat"] {
        let expected: Value = serde_json::from_slice(
            &std::fs::read(pte_dir().join(format!("{name}.expected.json"))).unwrap(),
        )
        .unwrap();
        let program = load(name, &expected, true);
        let bytes = std::fs::read(pte_dir().join(format!("{name}.pte"))).unwrap();
        let cats =
            file_operators(&bytes, "forward")[0].iter().filter(|o| *o == "aten::cat.out").count();
        assert!(cats > 0, "{name} has no cat");
        let method = program.method("forward").unwrap();
        let steps = method.compiled();
        assert!(steps.iter().all(|s| s.kind != "aten::cat.out"), "{name}: a cat step is left");
    }
}

fn inputs_of(run: &Value, metas: &[ValueMeta]) -> Vec<common::Array> {
    run["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .zip(metas)
        .map(|(f, meta)| {
            let want = match meta {
                ValueMeta::Tensor(t) => Some(t.dtype),
                _ => None,
            };
            read_npy(&pte_dir().join(f.as_str().unwrap()), want)
        })
        .collect()
}

fn as_f64(out: &Output) -> Vec<f64> {
    match out {
        Output::Tensor(t) => common::f64s(t.dtype, &t.data),
        Output::Int(x) => vec![*x as f64],
        Output::Double(x) => vec![*x],
        Output::Bool(x) => vec![f64::from(u8::from(*x))],
        _ => Vec::new(),
    }
}

#[test]
fn compiled_methods_give_the_interpreters_results() {
    for (name, expected) in fixtures() {
        let compiled = load(&name, &expected, true);
        let interpreted = load(&name, &expected, false);
        for m in expected["inspect"]["methods"].as_array().unwrap() {
            let method = m["name"].as_str().unwrap();
            let (Ok(mut a), Ok(mut b)) = (compiled.method(method), interpreted.method(method))
            else {
                continue;
            };
            let Some(run) = expected["runs"].get(method) else { continue };
            let metas = a.inputs();
            let arrays = inputs_of(run, &metas);
            let inputs: Vec<Input<'_>> = arrays
                .iter()
                .zip(&metas)
                .map(|(x, meta)| match meta {
                    ValueMeta::Tensor(_) => Input::Tensor(TensorInput {
                        dtype: x.dtype,
                        sizes: &x.sizes,
                        data: &x.data,
                    }),
                    ValueMeta::Int => {
                        Input::Int(i64::from_le_bytes(x.data[..8].try_into().unwrap()))
                    }
                    ValueMeta::Double => {
                        Input::Double(f64::from_le_bytes(x.data[..8].try_into().unwrap()))
                    }
                    ValueMeta::Bool => Input::Bool(x.data[0] != 0),
                    _ => Input::None,
                })
                .collect();
            // Twice: the second run starts from the state the first left.
            for r in 0..2 {
                let got = a.execute(&inputs).unwrap_or_else(|e| panic!("{name}.{method}: {e}"));
                let want = b.execute(&inputs).unwrap();
                assert_eq!(got.len(), want.len());
                for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                    let (g, w) = (as_f64(g), as_f64(w));
                    assert_eq!(g.len(), w.len(), "{name}.{method} output {k}");
                    for (x, y) in g.iter().zip(&w) {
                        let close =
                            (x - y).abs() <= 1e-5 + 1e-5 * y.abs() || (x.is_nan() && y.is_nan());
                        assert!(close, "{name}.{method} run {r} output {k}: {x} vs {y}");
                    }
                }
            }
        }
    }
}

/// A delegate kiln lowers goes through the same passes as portable code. mobilenet_v2's
/// XNNPACK export compiles to the plan of its portable export (same kernels, layouts and
/// algorithms, step for step), and in every float XNNPACK fixture no convolution, max pooling
/// or matrix product with a constant weight is left to the interpreter (a lowering that
/// blocked a lift, as a max pooling's return value once did, ran resnet18 30% slower).
#[test]
fn xnnpack_exports_compile_like_portable_ones() {
    let plan = |path: std::path::PathBuf| -> Vec<(String, Option<String>, Option<String>)> {
        let program = Program::load(&path).unwrap();
        let m = program.method("forward").unwrap();
        m.compiled()
            .iter()
            .map(|s| {
                let kind = s.kind.split('[').next().unwrap_or("").to_string();
                (kind, s.layout.clone(), s.algorithm.clone())
            })
            .collect()
    };
    let dir = pte_dir();
    assert_eq!(
        plan(dir.join("mobilenet_v2_xnnpack.pte")),
        plan(dir.join("mobilenet_v2_portable.pte")),
        "mobilenet_v2: the XNNPACK export's plan differs from the portable export's"
    );
    let xdir = dir.join("../xnnpack");
    let mut checked = 0;
    for entry in std::fs::read_dir(&xdir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let float = !name.starts_with("q") && name.ends_with(".pte");
        if !float {
            continue;
        }
        // Transposed convolutions have no compiled kernel (portable ones neither).
        let expected: Value =
            serde_json::from_slice(&std::fs::read(path.with_extension("expected.json")).unwrap())
                .unwrap();
        let transposed = expected["xnnpack"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["nodes"].get("XNNConvTranspose2d").is_some());
        // Steps over dynamic shapes are interpreted (portable ones too).
        let program = Program::load(&path).unwrap();
        let dynamic = program
            .method_inputs("forward")
            .unwrap()
            .iter()
            .any(|m| matches!(m, ValueMeta::Tensor(t) if t.dynamic));
        if dynamic {
            continue;
        }
        for (kind, _, _) in plan(path.clone()) {
            let interpreted = match kind.as_str() {
                "aten::convolution.out" => !transposed,
                "aten::max_pool2d_with_indices.out" | "aten::addmm.out" => true,
                _ => false,
            };
            assert!(!interpreted, "{name}: {kind} was not compiled");
        }
        checked += 1;
    }
    assert!(checked > 50, "only {checked} float XNNPACK fixtures");
}

/// torchvision's EfficientNet blocks (`mbconv_se`): XNNPACK writes SiLU as a sigmoid and a
/// multiply, and a squeeze-excite block scales its channels with a broadcast multiply. Every
/// sigmoid and multiply of the delegate is fused into a convolution (as its SiLU or sigmoid
/// epilogue) or runs as a channel scale, so no elementwise step is left; and the depthwise
/// convolutions, the means and the channel scales between them run channels-last. The
/// outputs match ExecuTorch's in `fixtures.rs`.
#[test]
fn squeeze_excite_blocks_fuse_silu_and_stay_channels_last() {
    let program = Program::load(pte_dir().join("../xnnpack/mbconv_se.pte")).unwrap();
    let method = program.method("forward").unwrap();
    let steps = method.compiled();
    let kinds: Vec<&str> = steps.iter().map(|s| s.kind.split('[').next().unwrap()).collect();
    let elementwise = ["map", "aten::mul.out", "aten::sigmoid.out"];
    assert!(kinds.iter().all(|k| !elementwise.contains(k)), "{kinds:?}");
    let silu = steps.iter().filter(|s| s.kind.ends_with("+sigmoid.out+mul.out]")).count();
    assert_eq!(silu, 6, "three SiLUs per block fused into their convolutions: {kinds:?}");
    for kind in ["channel_scale", "mean"] {
        let layouts: Vec<_> =
            steps.iter().filter(|s| s.kind.starts_with(kind)).map(|s| s.layout.clone()).collect();
        assert_eq!(layouts, vec![Some("nhwc".to_string()); 2], "{kind}");
    }
    let depthwise: Vec<_> = steps
        .iter()
        .filter(|s| s.delegate_ops.iter().any(|o| o == "XNNDepthwiseConv2d"))
        .map(|s| s.layout.as_deref())
        .collect();
    assert_eq!(depthwise, [Some("nhwc>nhwc"); 2]);
}

/// XNNPACK runs a 1-D convolution as a 2-D one between reshapes (`[N, C, L]` to
/// `[N, C, 1, L]` and back). The reshapes become aliases of the convolution's output with its
/// own sizes, so a stack of 1-D convolutions (`conv1d_stack`, wav2letter's shape) passes
/// channels-last from the first convolution's output to the last one's input. The outputs
/// match ExecuTorch's in `fixtures.rs`.
#[test]
fn one_dimensional_convolution_stacks_run_channels_last() {
    let program = Program::load(pte_dir().join("../xnnpack/conv1d_stack.pte")).unwrap();
    let method = program.method("forward").unwrap();
    let layouts: Vec<_> = method.compiled().iter().map(|s| s.layout.clone()).collect();
    let want = ["nchw>nhwc", "nhwc>nhwc", "nhwc>nchw"].map(|l| Some(l.to_string()));
    assert_eq!(layouts, want);
}

/// PyTorch's `_safe_softmax` (what `scaled_dot_product_attention` exports: the softmax, then
/// `eq(-inf)`, `logical_not`, `any`, `logical_not`, `full_like(0)` and `where` to zero fully
/// masked rows) runs as one softmax step per attention block, in a ViT (the seven nodes in a
/// row) and in a transformer encoder. No comparison, mask or `where` step is left. The
/// outputs match ExecuTorch's in `fixtures.rs`.
#[test]
fn safe_softmaxes_of_attention_blocks_run_as_one_step() {
    for (name, blocks) in [("vit_tiny", 2), ("transformer_encoder", 2)] {
        let path = pte_dir().join(format!("../xnnpack/{name}.pte"));
        let program = Program::load(path).unwrap();
        let method = program.method("forward").unwrap();
        let steps = method.compiled();
        let kinds: Vec<&str> = steps.iter().map(|s| s.kind.split('[').next().unwrap()).collect();
        let fused = steps.iter().filter(|s| s.kind.starts_with("softmax[_softmax.out+")).count();
        assert_eq!(fused, blocks, "{name}: {kinds:?}");
        let masks = ["aten::eq.Scalar_out", "aten::any.out", "aten::where.self_out"];
        assert!(kinds.iter().all(|k| !masks.contains(k)), "{name}: {kinds:?}");
    }
}

/// XNNPACK's QS8 convolutions run as steps prepared at load (weights laid out once), an int8
/// clamp after one narrows its output range instead of running, an int8 max pooling runs in
/// the delegate's NHWC layout with no transposes around it, and a float hardswish between
/// converts is looked up in an int8 table. The outputs match ExecuTorch's bit for bit in
/// `fixtures.rs`.
#[test]
fn quantized_convolutions_run_prepared() {
    let steps = |name: &str| -> Vec<String> {
        let path = pte_dir().join(format!("../xnnpack/{name}.pte"));
        let program = Program::load(path).unwrap();
        let method = program.method("forward").unwrap();
        method.compiled().iter().map(|s| s.kind.clone()).collect()
    };
    let cnn = steps("qs8_cnn");
    let convs = cnn.iter().filter(|k| k.starts_with("qs8_conv2d[")).count();
    assert_eq!(convs, 4, "{cnn:?}");
    assert!(cnn.iter().all(|k| k != "kiln_xnnpack::qs8_convolution.out"), "{cnn:?}");
    let clamped = steps("q8_conv2d_hardtanh");
    let fused = "qs8_conv2d[kiln_xnnpack::qs8_convolution.out+clamp.out]";
    assert!(clamped.iter().any(|k| k == fused), "{clamped:?}");
    assert!(clamped.iter().all(|k| k != "aten::clamp.out"), "{clamped:?}");
    let pooled = steps("q8_max_pool2d");
    let at = pooled.iter().position(|k| k == "kiln_xnnpack::qs8_max_pool.out");
    let before = at.and_then(|i| i.checked_sub(1)).map(|i| pooled[i].as_str());
    assert_eq!(before.map(|k| k.starts_with("qs8_conv2d[")), Some(true), "{pooled:?}");
    // A float hardswish between converts (mobilenet_v3's form) becomes one int8 table.
    let table = steps("q8_hardswish");
    let lookup = "qs8_lookup[kiln_xnnpack::convert.out+hardswish.out+kiln_xnnpack::convert.out]";
    assert_eq!(table.iter().filter(|k| *k == lookup).count(), 1, "{table:?}");
    assert!(table.iter().all(|k| k != "aten::hardswish.out"), "{table:?}");
}
