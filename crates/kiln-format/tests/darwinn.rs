//! DarwiNN readers and algorithms on the real Edge TPU models in `shared/testdata/edgetpu`,
//! compared with `facts.json` (decoded independently by `shared/tools/dwn_inspect.py`).

mod common;

use std::path::PathBuf;

use common::{mutate, shared_testdata, Rng};
use kiln_format::darwinn::custom_op::{find_ops, EdgetpuOp};
use kiln_format::darwinn::link::{self, Addresses};
use kiln_format::darwinn::schema::{AnyHint, Layer};
use kiln_format::darwinn::{dma, relayout, select, Package};
use kiln_format::tflite::Model;
use serde_json::Value;

/// (file name, bytes, facts.json entry) of each sample model.
type Samples = Vec<(String, Vec<u8>, Value)>;

fn samples(test: &str) -> Option<(PathBuf, Samples)> {
    let dir = shared_testdata("edgetpu", test)?;
    let facts: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("facts.json")).unwrap()).unwrap();
    let mut out = Vec::new();
    for (name, fact) in facts.as_object().unwrap() {
        out.push((name.clone(), std::fs::read(dir.join(name)).unwrap(), fact.clone()));
    }
    assert!(!out.is_empty());
    Some((dir, out))
}

fn ops<'a>(model: &Model<'a>) -> Vec<(EdgetpuOp<'a>, Package<'a>)> {
    find_ops(model)
        .unwrap()
        .into_iter()
        .map(|op| {
            let pkg = Package::open(op.data.packages[0].bytes).unwrap();
            (op, pkg)
        })
        .collect()
}

fn ints(v: &Value) -> Vec<i64> {
    v.as_array().map(|a| a.iter().map(|x| x.as_i64().unwrap()).collect()).unwrap_or_default()
}

fn check_layer(l: &Layer<'_>, f: &Value, at: &str) {
    assert_eq!(l.name().unwrap_or_default(), f["name"], "{at}");
    assert_eq!(i64::from(l.cache_on_dram()), f["cache_on_dram"].as_i64().unwrap(), "{at}");
    assert_eq!(i64::from(l.any_layer_type().0), f["any_layer_type"].as_i64().unwrap(), "{at}");
    let shape: Option<Vec<Vec<i64>>> = l.shape().map(|s| {
        s.dimension()
            .iter()
            .flatten()
            .map(|r| vec![i64::from(r.start()), i64::from(r.end())])
            .collect()
    });
    let fshape: Option<Vec<Vec<i64>>> = f["shape"].as_array().map(|a| a.iter().map(ints).collect());
    assert_eq!(shape, fshape, "{at}.shape");
    if let Some(out) = l.any_layer_as_output_layer() {
        assert_eq!(
            i64::from(out.data_type().0),
            f["outputlayer_data_type"].as_i64().unwrap(),
            "{at}"
        );
        let lay = out.layout().unwrap();
        let get = |v: Option<flatbuffers::Vector<'_, i32>>| -> Vec<i64> {
            v.unwrap().iter().map(i64::from).collect()
        };
        let fl = &f["layout"];
        assert_eq!(get(lay.y_coordinate_to_linear_tile_id_map()), ints(&fl["y_tile"]), "{at}");
        assert_eq!(get(lay.x_coordinate_to_linear_tile_id_map()), ints(&fl["x_tile"]), "{at}");
        assert_eq!(get(lay.linearized_tile_byte_offset()), ints(&fl["tile_byte_off"]), "{at}");
        assert_eq!(get(lay.x_coordinate_to_local_byte_offset()), ints(&fl["x_local_byte"]), "{at}");
        assert_eq!(get(lay.y_coordinate_to_local_y_offset()), ints(&fl["y_local_y"]), "{at}");
        assert_eq!(get(lay.x_coordinate_to_local_y_row_size()), ints(&fl["x_row_size"]), "{at}");
        assert!(out.shape_info().is_none() && f.get("shape_info").is_none(), "{at}");
    }
}

#[test]
fn every_decoded_value_matches_facts() {
    let Some((_, models)) = samples("every_decoded_value_matches_facts") else { return };
    for (file, bytes, fact) in &models {
        let model = Model::open(bytes).unwrap();
        assert_eq!(i64::from(model.version()), fact["schema_version"].as_i64().unwrap(), "{file}");
        assert_eq!(model.description().unwrap_or_default(), fact["description"], "{file}");
        assert_eq!(model.num_buffers() as i64, fact["n_buffers"].as_i64().unwrap(), "{file}");
        let codes = model.operator_codes();
        for (c, f) in codes.iter().zip(fact["operator_codes"].as_array().unwrap()) {
            assert_eq!(i64::from(c.deprecated_builtin_code), f["dep"].as_i64().unwrap(), "{file}");
            assert_eq!(c.custom_code.unwrap_or_default(), f["custom"], "{file}");
            assert_eq!(i64::from(c.version), f["version"].as_i64().unwrap(), "{file}");
            assert_eq!(i64::from(c.builtin_code), f["builtin"].as_i64().unwrap(), "{file}");
            assert_eq!(c.code(), 32, "{file}: deprecated/builtin rule gives CUSTOM");
        }
        for (si, f) in fact["subgraphs"].as_array().unwrap().iter().enumerate() {
            let (inputs, outputs, n_tensors, n_ops) = model.subgraph_io(si).unwrap();
            assert_eq!(
                inputs.iter().map(|&i| i64::from(i)).collect::<Vec<_>>(),
                ints(&f["inputs"]),
                "{file}"
            );
            assert_eq!(
                outputs.iter().map(|&i| i64::from(i)).collect::<Vec<_>>(),
                ints(&f["outputs"]),
                "{file}"
            );
            assert_eq!(n_tensors as i64, f["n_tensors"].as_i64().unwrap(), "{file}");
            assert_eq!(n_ops as i64, f["n_ops"].as_i64().unwrap(), "{file}");
        }
        let found = ops(&model);
        let fops = fact["edgetpu_ops"].as_array().unwrap();
        assert_eq!(found.len(), fops.len(), "{file}");
        for ((op, pkg), fop) in found.iter().zip(fops) {
            let at = format!("{file}: op {}", op.operator);
            assert_eq!(op.subgraph as i64, fop["subgraph"].as_i64().unwrap(), "{at}");
            assert_eq!(op.operator as i64, fop["op_index"].as_i64().unwrap(), "{at}");
            assert_eq!(
                op.custom_options.offset as i64,
                fop["custom_options_file_offset"].as_i64().unwrap(),
                "{at}"
            );
            assert_eq!(
                op.custom_options.bytes.len() as i64,
                fop["custom_options_len"].as_i64().unwrap(),
                "{at}"
            );
            assert_eq!(
                op.data.packages[0].file_offset as i64,
                fop["package_file_offset"].as_i64().unwrap(),
                "{at}"
            );
            // Flex keys: facts print every string as bytes[N].
            let fkeys = fop["flex_keys"].as_object().unwrap();
            assert_eq!(op.data.keys.len(), fkeys.len(), "{at}");
            for (k, fv) in fkeys {
                let ours = &op.data.keys[k];
                match (ours, fv.as_str().and_then(|s| s.strip_prefix("bytes["))) {
                    (Value::String(s), Some(n)) => {
                        let n: usize = n.trim_end_matches(']').parse().unwrap();
                        assert!(
                            s == &format!("bytes[{n}]") || s.len() == n,
                            "{at}: key {k}: {s} vs {fv}"
                        );
                    }
                    _ => assert_eq!(ours, fv, "{at}: key {k}"),
                }
            }
            let tensors: Vec<i32> = op.inputs.iter().chain(&op.outputs).copied().collect();
            for (t, ft) in tensors.iter().zip(fop["node_tensors"].as_array().unwrap()) {
                let info = model.tensor(op.subgraph, *t).unwrap();
                assert_eq!(info.index as i64, ft["idx"].as_i64().unwrap(), "{at}");
                assert_eq!(info.name.unwrap_or_default(), ft["name"], "{at}");
                assert_eq!(
                    info.shape.iter().map(|&d| i64::from(d)).collect::<Vec<_>>(),
                    ints(&ft["shape"]),
                    "{at}"
                );
                assert_eq!(i64::from(info.dtype), ft["type"].as_i64().unwrap(), "{at}");
                let fscale: Vec<f32> = ft["scale"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_f64().unwrap() as f32)
                    .collect();
                assert_eq!(info.scale, fscale, "{at}");
                assert_eq!(info.zero_point, ints(&ft["zp"]), "{at}");
            }
            let fp = &fop["package"];
            let root = pkg.root();
            assert!(pkg.has_identifier(), "{at}");
            assert_eq!(
                i64::from(root.min_runtime_version()),
                fp["min_runtime_version"].as_i64().unwrap(),
                "{at}"
            );
            assert_eq!(
                root.signature().map_or(0, |s| s.len()) as i64,
                fp["signature_len"].as_i64().unwrap(),
                "{at}"
            );
            assert_eq!(
                i64::from(root.keypair_version()),
                fp["keypair_version"].as_i64().unwrap(),
                "{at}"
            );
            assert_eq!(root.compiler_version().unwrap_or_default(), fp["compiler_version"], "{at}");
            assert_eq!(
                i64::from(root.virtual_chip_id()),
                fp["virtual_chip_id"].as_i64().unwrap(),
                "{at}"
            );
            assert_eq!(
                root.multi_chip_package().map_or(0, |v| v.len()) as i64,
                fp["multi_chip_package"].as_i64().unwrap(),
                "{at}"
            );
            assert_eq!(root.model_identifier().unwrap_or_default(), fp["model_identifier"], "{at}");
            assert_eq!(
                pkg.multi_executable_bytes().len() as i64,
                fp["serialized_multi_executable_len"].as_i64().unwrap(),
                "{at}"
            );
            let fexes = fop["executables"].as_array().unwrap();
            assert_eq!(pkg.executables().len(), fexes.len(), "{at}");
            for (ei, (e, fe)) in pkg.executables().iter().zip(fexes).enumerate() {
                let at = format!("{at} executable {ei}");
                let r = e.root();
                assert_eq!(i64::from(r.version()), fe["version"].as_i64().unwrap(), "{at}");
                assert_eq!(
                    i64::from(r.used_narrow_memory_bytes_per_tile()),
                    fe["narrow"].as_i64().unwrap(),
                    "{at}"
                );
                assert_eq!(
                    i64::from(r.estimated_cycles()),
                    fe["estimated_cycles"].as_i64().unwrap(),
                    "{at}"
                );
                assert_eq!(
                    r.estimated_cycles_64bit(),
                    fe["est_cycles64"].as_i64().unwrap(),
                    "{at}"
                );
                assert_eq!(
                    i64::from(r.use_tpu_dram_for_parameters()),
                    fe["tpu_dram_params"].as_i64().unwrap(),
                    "{at}"
                );
                let hints = r.dma_hints().unwrap();
                let fh = &fe["dma_hints"];
                assert_eq!(
                    i64::from(hints.fully_deterministic()),
                    fh["fully_deterministic"].as_i64().unwrap(),
                    "{at}"
                );
                let hs: Vec<_> = hints.hints().unwrap().iter().collect();
                assert_eq!(hs.len() as i64, fh["n"].as_i64().unwrap(), "{at}");
                for (h, fhint) in hs.iter().zip(fh["hints"].as_array().unwrap()) {
                    let dir = if h.direction().0 == 0 { "IN" } else { "OUT" };
                    assert_eq!(dir, fhint["dir"], "{at}");
                    match h.any_hint_type() {
                        AnyHint::DmaDescriptorHint => {
                            let d = h.any_hint_as_dma_descriptor_hint().unwrap();
                            let m = d.meta().unwrap();
                            assert_eq!("Dma", fhint["kind"], "{at}");
                            assert_eq!(
                                kiln_format::darwinn::description_kind(m.desc()),
                                fhint["desc"],
                                "{at}"
                            );
                            assert_eq!(m.name().unwrap_or_default(), fhint["name"], "{at}");
                            assert_eq!(
                                i64::from(m.batch()),
                                fhint["batch"].as_i64().unwrap(),
                                "{at}"
                            );
                            assert_eq!(
                                i64::from(d.offset_in_bytes()),
                                fhint["off"].as_i64().unwrap(),
                                "{at}"
                            );
                            assert_eq!(
                                i64::from(d.size_in_bytes()),
                                fhint["size"].as_i64().unwrap(),
                                "{at}"
                            );
                        }
                        AnyHint::InstructionHint => {
                            assert_eq!("Instr", fhint["kind"], "{at}");
                            let i =
                                h.any_hint_as_instruction_hint().unwrap().instruction_chunk_index();
                            assert_eq!(i64::from(i), fhint["chunk"].as_i64().unwrap(), "{at}");
                        }
                        AnyHint::InterruptHint => {
                            assert_eq!("Interrupt", fhint["kind"], "{at}");
                            let t = h.any_hint_as_interrupt_hint().unwrap().type_().0;
                            assert_eq!(i64::from(t), fhint["int"].as_i64().unwrap(), "{at}");
                        }
                        other => assert_eq!("Fence", fhint["kind"], "{at}: {other:?}"),
                    }
                }
                for (layers, key) in [(e.input_layers(), "inputs"), (e.output_layers(), "outputs")]
                {
                    let fl = fe[key].as_array().unwrap();
                    assert_eq!(layers.len(), fl.len(), "{at}");
                    for (li, (l, f)) in layers.iter().zip(fl).enumerate() {
                        check_layer(l, f, &format!("{at} {key}[{li}]"));
                    }
                }
            }
        }
    }
}

/// Tiled-buffer element index computed from the facts' maps (not from kiln's reader).
fn facts_index(layout: &Value, y: usize, x: usize) -> usize {
    let m = |k: &str, i: usize| layout[k][i].as_i64().unwrap();
    let tile = (m("y_tile", y) + m("x_tile", x)) as usize;
    (m("tile_byte_off", tile) + m("y_local_y", y) * m("x_row_size", x) + m("x_local_byte", x))
        as usize
}

#[test]
fn relayout_equals_per_element_formula_on_every_3d_output() {
    let Some((_, models)) = samples("relayout_equals_per_element_formula_on_every_3d_output")
    else {
        return;
    };
    let mut rng = Rng::new(7);
    let mut checked = 0;
    for (file, bytes, fact) in &models {
        let model = Model::open(bytes).unwrap();
        for ((_, pkg), fop) in ops(&model).iter().zip(fact["edgetpu_ops"].as_array().unwrap()) {
            for (e, fe) in pkg.executables().iter().zip(fop["executables"].as_array().unwrap()) {
                for (l, fl) in e.output_layers().iter().zip(fe["outputs"].as_array().unwrap()) {
                    let (y, x, z) = (l.y_dim() as usize, l.x_dim() as usize, l.z_dim() as usize);
                    let g = relayout::Geometry::of(l).unwrap();
                    let src: Vec<u8> = (0..g.padded_size).map(|_| rng.next_u64() as u8).collect();
                    let dense = relayout::relayout(l, &src).unwrap();
                    assert_eq!(dense.len(), y * x * z * g.dts, "{file}");
                    if y == 1 && x == 1 {
                        assert_eq!(dense, src[..dense.len()], "{file}: 1-D output is a prefix");
                        continue;
                    }
                    let zb = z * g.dts;
                    for yy in 0..y {
                        for xx in 0..x {
                            let s = facts_index(&fl["layout"], yy, xx) * g.dts;
                            let d = (yy * x + xx) * zb;
                            assert_eq!(
                                dense[d..d + zb],
                                src[s..s + zb],
                                "{file}: {} y={yy} x={xx}",
                                fl["name"]
                            );
                        }
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(checked >= 6, "only {checked} 3-D outputs checked");
}

#[test]
fn linking_patches_exactly_the_fields_and_reads_back() {
    let Some((_, models)) = samples("linking_patches_exactly_the_fields_and_reads_back") else {
        return;
    };
    let mut rng = Rng::new(11);
    for (file, bytes, _) in &models {
        let model = Model::open(bytes).unwrap();
        for (_, pkg) in ops(&model) {
            for e in pkg.executables() {
                let mut addrs = Addresses {
                    parameters: Some(rng.next_u64()),
                    scratch: Some(rng.next_u64()),
                    ..Default::default()
                };
                for l in e.input_layers() {
                    addrs.inputs.insert(l.name().unwrap().to_string(), vec![rng.next_u64()]);
                }
                for l in e.output_layers() {
                    addrs.outputs.insert(l.name().unwrap().to_string(), vec![rng.next_u64()]);
                }
                let (linked, report) = link::link(e, &addrs).unwrap();
                let originals = e.bitstreams();
                let fields = link::fields(e).unwrap();
                let total: usize = fields.iter().map(Vec::len).sum();
                assert_eq!(report.patched.len() + report.unpatched.len(), total, "{file}");
                for (f, value) in &report.patched {
                    let addr = match kiln_format::darwinn::description_kind(f.desc).as_str() {
                        "INPUT" => addrs.inputs[&f.name][0],
                        "OUTPUT" => addrs.outputs[&f.name][0],
                        "PARAMETER" => addrs.parameters.unwrap(),
                        _ => addrs.scratch.unwrap(),
                    };
                    let want = if f.position.0 == 0 { addr as u32 } else { (addr >> 32) as u32 };
                    assert_eq!(*value, want, "{file}: {}", f.describe());
                    assert_eq!(
                        link::read_field(&linked[f.chunk], i64::from(f.offset_bit)).unwrap(),
                        want,
                        "{file}"
                    );
                    // Compiled placeholders are 0.
                    assert_eq!(
                        link::read_field(originals[f.chunk], i64::from(f.offset_bit)).unwrap(),
                        0,
                        "{file}"
                    );
                }
                for (f, reason) in &report.unpatched {
                    // Only zero-length parameters or scratch leave fields unpatched here.
                    assert!(
                        reason.contains("no parameters")
                            || reason.contains("scratch_size_bytes is 0"),
                        "{file}: {} {reason}",
                        f.describe()
                    );
                }
                for (c, (new, old)) in linked.iter().zip(&originals).enumerate() {
                    assert_eq!(new.len(), old.len());
                    let in_field = |bit: usize| {
                        report.patched.iter().any(|(f, _)| {
                            f.chunk == c
                                && (f.offset_bit as usize..f.offset_bit as usize + 32)
                                    .contains(&bit)
                        })
                    };
                    for (i, (a, b)) in new.iter().zip(old.iter()).enumerate() {
                        let diff = a ^ b;
                        for bit in 0..8 {
                            if diff & (1 << bit) != 0 {
                                assert!(
                                    in_field(i * 8 + bit),
                                    "{file}: chunk {c} bit {} changed outside a field",
                                    i * 8 + bit
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn dma_walk_and_selection_follow_the_driver() {
    let Some((_, models)) = samples("dma_walk_and_selection_follow_the_driver") else { return };
    for (file, bytes, fact) in &models {
        let model = Model::open(bytes).unwrap();
        for ((_, pkg), fop) in ops(&model).iter().zip(fact["edgetpu_ops"].as_array().unwrap()) {
            let (sel, warnings) = select::select(pkg, select::CURRENT_RUNTIME_VERSION).unwrap();
            assert!(warnings.is_empty(), "{file}: {warnings:?}");
            let fexes = fop["executables"].as_array().unwrap();
            let main_type = &fexes[sel.main.0]["type"];
            match fexes.len() {
                1 => assert!(sel.parameter_caching.is_none(), "{file}"),
                _ => {
                    assert_eq!(main_type, "EXECUTION_ONLY", "{file}");
                    assert_eq!(
                        fexes[sel.parameter_caching.unwrap().0]["type"],
                        "PARAMETER_CACHING",
                        "{file}"
                    );
                }
            }
            // A runtime older than the package refuses it with the driver's message.
            let min = pkg.root().min_runtime_version();
            let err = select::select(pkg, min - 1).err().unwrap().to_string();
            assert!(err.contains(&format!("Package requires runtime version ({min})")), "{err}");
            // Parameter caching runs once, then not again for the same package.
            let mut state = select::CacheState::default();
            let first = state.submit(0, &sel).unwrap();
            let second = state.submit(0, &sel).unwrap();
            assert_eq!(first.len(), 1 + usize::from(sel.parameter_caching.is_some()), "{file}");
            assert_eq!(second, [select::Submission::Infer { package: 0 }], "{file}");
            for (e, fe) in pkg.executables().iter().zip(fexes) {
                let fh = &fe["dma_hints"];
                let steps = dma::steps(e, true).unwrap();
                let deterministic = fh["fully_deterministic"].as_i64().unwrap() == 1;
                let n = fh["n"].as_u64().unwrap() as usize;
                assert_eq!(steps.len(), n + usize::from(!deterministic), "{file}");
                assert_eq!(steps.last() == Some(&dma::Step::GlobalFence), !deterministic, "{file}");
                assert_eq!(dma::steps(e, false).unwrap().last(), Some(&dma::Step::GlobalFence));
            }
        }
    }
}

/// Runs every reader and algorithm on `bytes`; only errors are allowed, never a panic.
fn exercise(bytes: &[u8]) {
    let Ok(model) = Model::open(bytes) else { return };
    let _ = model.operators();
    let Ok(found) = find_ops(&model) else { return };
    for op in found {
        for blob in &op.data.packages {
            exercise_package(blob.bytes);
        }
    }
}

fn exercise_package(bytes: &[u8]) {
    let Ok(pkg) = Package::open(bytes) else { return };
    let _ = select::select(&pkg, select::CURRENT_RUNTIME_VERSION);
    for e in pkg.executables() {
        let _ = dma::steps(e, true);
        let mut addrs =
            Addresses { parameters: Some(1 << 40), scratch: Some(7), ..Default::default() };
        for l in e.input_layers() {
            addrs.inputs.insert(l.name().unwrap_or_default().to_string(), vec![3]);
        }
        let _ = link::link(e, &addrs);
        for l in e.output_layers() {
            if let Ok(g) = relayout::Geometry::of(&l) {
                if g.padded_size <= 1 << 22 {
                    let _ = relayout::relayout(&l, &vec![1u8; g.padded_size]);
                }
            }
        }
    }
}

#[test]
fn mutated_real_files_never_panic() {
    let Some((_, models)) = samples("mutated_real_files_never_panic") else { return };
    let mut rng = Rng::new(0x5eed);
    for (_, bytes, _) in &models {
        for _ in 0..60 {
            exercise(&mutate(bytes, &mut rng));
        }
        let model = Model::open(bytes).unwrap();
        for (op, pkg) in ops(&model) {
            let co = op.custom_options.bytes;
            let pkg_bytes = op.data.packages[0].bytes;
            // The package's own structure sits in its first pages and its last bytes.
            let head = &pkg_bytes[..pkg_bytes.len().min(16 << 10)];
            for _ in 0..150 {
                let _ =
                    kiln_format::darwinn::custom_op::parse_custom_options(&mutate(co, &mut rng), 0);
                let mut m = pkg_bytes.to_vec();
                let mh = mutate(head, &mut rng);
                m[..mh.len()].copy_from_slice(&mh);
                exercise_package(&m);
                exercise_package(&mutate(pkg_bytes, &mut rng));
            }
            for e in pkg.executables() {
                let exe = e.data();
                let head = &exe[..exe.len().min(8 << 10)];
                for _ in 0..150 {
                    let mh = mutate(head, &mut rng);
                    let mut m = exe.to_vec();
                    m[..mh.len()].copy_from_slice(&mh);
                    if let Ok(x) = kiln_format::darwinn::Executable::open(&m, 0) {
                        let _ = dma::steps(&x, true);
                        let _ = link::fields(&x);
                        for l in x.output_layers() {
                            if let Ok(g) = relayout::Geometry::of(&l) {
                                if g.padded_size <= 1 << 22 {
                                    let _ = relayout::relayout(&l, &vec![0u8; g.padded_size]);
                                }
                            }
                        }
                    }
                    let _ = kiln_format::darwinn::Executable::open(&mutate(exe, &mut rng), 0);
                }
            }
        }
    }
}

#[test]
fn writer_round_trips_every_real_executable_and_package() {
    use kiln_format::darwinn::writer::{write_package, ExecutableSpec, PackageSpec};
    let Some((_, models)) = samples("writer_round_trips_every_real_executable_and_package") else {
        return;
    };
    for (file, bytes, _) in &models {
        let model = Model::open(bytes).unwrap();
        for (_, pkg) in ops(&model) {
            let root = pkg.root();
            let header = PackageSpec {
                min_runtime_version: root.min_runtime_version(),
                compiler_version: root.compiler_version().unwrap_or_default().to_string(),
                keypair_version: root.keypair_version(),
                signature: root.signature().map(|s| s.bytes().to_vec()).unwrap_or_default(),
                virtual_chip_id: root.virtual_chip_id(),
                model_identifier: root.model_identifier().unwrap_or_default().to_string(),
            };
            let specs: Vec<ExecutableSpec> =
                pkg.executables().iter().map(ExecutableSpec::from_executable).collect();
            let built: Vec<Vec<u8>> = specs.iter().map(|s| s.build().unwrap()).collect();
            for (spec, b) in specs.iter().zip(&built) {
                assert_eq!(b.len() % 4096, 0, "{file}");
                let exe = kiln_format::darwinn::Executable::open(b, 0).unwrap();
                assert_eq!(&ExecutableSpec::from_executable(&exe), spec, "{file}");
                if let Some(off) = exe.parameters_offset() {
                    assert_eq!(off % 4096, 0, "{file}: parameters at {off}");
                }
            }
            // Rebuilt executables and the original blobs both pack into a valid package.
            let originals: Vec<&[u8]> = pkg.executables().iter().map(|e| e.data()).collect();
            for blobs in [built.iter().map(Vec::as_slice).collect::<Vec<_>>(), originals.clone()] {
                let out = write_package(&header, &blobs).unwrap();
                assert_eq!(out.len() % 4096, 0);
                let back = Package::open(&out).unwrap();
                assert!(back.has_identifier());
                assert_eq!(back.multi_executable_offset(), Some(4096), "{file}");
                let r = back.root();
                assert_eq!(r.min_runtime_version(), header.min_runtime_version);
                assert_eq!(r.compiler_version().unwrap_or_default(), header.compiler_version);
                assert_eq!(r.keypair_version(), header.keypair_version);
                assert_eq!(r.virtual_chip_id(), header.virtual_chip_id);
                assert_eq!(back.executables().len(), blobs.len());
                for (e, b) in back.executables().iter().zip(&blobs) {
                    assert_eq!(e.data(), *b, "{file}");
                    assert_eq!(e.offset_in_package() % 4096, 0, "{file}");
                }
            }
            let _ = originals;
        }
    }
}
