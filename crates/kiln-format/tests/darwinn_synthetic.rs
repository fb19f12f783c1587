//! DarwiNN algorithms on executables built with the writer, for the paths no sample model
//! exercises (shape_info re-layout, repeated executions, selection rules, linker errors).

mod common;

use common::error_kind;
use kiln_format::darwinn::link::{self, Addresses};
use kiln_format::darwinn::schema::{
    DataType, Description, Direction, ExecutableType, InterruptType, Position,
};
use kiln_format::darwinn::writer::{
    write_package, BitstreamSpec, DmaHintsSpec, ExecutableSpec, FieldOffsetSpec, HintSpec,
    LayerKind, LayerSpec, MetaSpec, PackageSpec, ShapeInfoSpec, TensorLayoutSpec,
};
use kiln_format::darwinn::{dma, numerics, relayout, select, Executable, Package};

fn output(name: &str, y: i32, x: i32, z: i32, size_bytes: i32) -> LayerSpec {
    LayerSpec {
        name: Some(name.to_string()),
        size_bytes,
        y_dim: y,
        x_dim: x,
        z_dim: z,
        numerics: Some((128, 0.5)),
        data_type: DataType::FIXED_POINT8,
        kind: LayerKind::Output {
            layout: None,
            data_type: DataType::FIXED_POINT8,
            shape_info: None,
        },
        execution_count_per_inference: 1,
        cache_on_dram: false,
        shape: None,
    }
}

fn field(
    desc: Description,
    name: &str,
    batch: i32,
    position: Position,
    offset_bit: i32,
) -> FieldOffsetSpec {
    FieldOffsetSpec {
        meta: Some(MetaSpec { desc, batch, name: Some(name.to_string()), position }),
        offset_bit,
    }
}

fn executable(type_: ExecutableType, token: u64) -> ExecutableSpec {
    ExecutableSpec {
        version: 0,
        name: Some("model".into()),
        serialized_model: None,
        batch_size: 1,
        scratch_size_bytes: 64,
        instruction_bitstreams: Some(vec![BitstreamSpec {
            bitstream: Some(vec![0xa5; 32]),
            field_offsets: Some(vec![
                field(
                    Description::BASE_ADDRESS_INPUT_ACTIVATION,
                    "in",
                    0,
                    Position::LOWER_32BIT,
                    3,
                ),
                field(
                    Description::BASE_ADDRESS_INPUT_ACTIVATION,
                    "in",
                    0,
                    Position::UPPER_32BIT,
                    40,
                ),
                field(
                    Description::BASE_ADDRESS_OUTPUT_ACTIVATION,
                    "out",
                    0,
                    Position::LOWER_32BIT,
                    77,
                ),
                field(Description::BASE_ADDRESS_PARAMETER, "", 0, Position::LOWER_32BIT, 128),
                field(Description::BASE_ADDRESS_SCRATCH, "", 0, Position::UPPER_32BIT, 200),
            ]),
        }]),
        parameters: Some(vec![1, 2, 3, 4]),
        dma_hints: Some(DmaHintsSpec {
            hints: Some(vec![
                HintSpec::Instruction { chunk: 0, direction: Direction::INFEED },
                HintSpec::Descriptor {
                    meta: Some(MetaSpec {
                        desc: Description::BASE_ADDRESS_INPUT_ACTIVATION,
                        batch: 0,
                        name: Some("in".into()),
                        position: Position::LOWER_32BIT,
                    }),
                    offset_in_bytes: 0,
                    size_in_bytes: 16,
                    direction: Direction::INFEED,
                },
                HintSpec::Interrupt {
                    kind: InterruptType::SCALAR_CORE_INT_0,
                    direction: Direction::OUTFEED,
                },
                HintSpec::Fence { direction: Direction::INFEED },
            ]),
            fully_deterministic: true,
        }),
        input_layers: Some(vec![LayerSpec {
            kind: LayerKind::Input,
            ..output("in", 1, 1, 16, 16)
        }]),
        output_layers: Some(vec![output("out", 1, 1, 10, 16)]),
        chip: Some("beagle".into()),
        estimated_cycles: 0,
        used_narrow_memory_bytes_per_tile: 0,
        type_,
        parameter_caching_token: token,
        use_tpu_dram_for_parameters: false,
        estimated_cycles_64bit: 0,
    }
}

fn layer_of(spec: &ExecutableSpec) -> Vec<u8> {
    spec.build().unwrap()
}

#[test]
fn shape_info_relayout_copies_every_slice_to_its_packed_position() {
    // y=4, x=5, z=6 in two slices of two rows each, z padded to 8 and x rows padded to 48.
    let (ys, xs, zs) = (4i32, 5i32, 6i32);
    let slice = |y0: i32| TensorLayoutSpec {
        shape: vec![(0, 0), (y0, y0 + 1), (0, xs - 1), (0, zs - 1)],
        stride: vec![96, 48, 8, 1],
    };
    let offsets = vec![0, 200];
    let mut layer = output("out", ys, xs, zs, 400);
    layer.shape = Some(vec![(0, 0), (0, ys - 1), (0, xs - 1), (0, zs - 1)]);
    layer.kind = LayerKind::Output {
        layout: None,
        data_type: DataType::FIXED_POINT8,
        shape_info: Some(ShapeInfoSpec {
            slice_layout: vec![slice(0), slice(2)],
            slice_offset: offsets.clone(),
        }),
    };
    let mut spec = executable(ExecutableType::STAND_ALONE, 0);
    spec.output_layers = Some(vec![layer]);
    let bytes = layer_of(&spec);
    let exe = Executable::open(&bytes, 0).unwrap();
    let l = exe.output_layers()[0];
    let src: Vec<u8> = (0..400u32).map(|i| (i * 7 % 251) as u8).collect();
    let dense = relayout::relayout(&l, &src).unwrap();
    assert_eq!(dense.len(), (ys * xs * zs) as usize);
    for y in 0..ys {
        for x in 0..xs {
            for z in 0..zs {
                let (base, y0) = if y < 2 { (offsets[0], 0) } else { (offsets[1], 2) };
                let s = base + (y - y0) * 48 + x * 8 + z;
                assert_eq!(
                    dense[((y * xs + x) * zs + z) as usize],
                    src[s as usize],
                    "y={y} x={x} z={z}"
                );
            }
        }
    }
    // An offset that is not a multiple of the element size, or a slice outside the layer shape,
    // is rejected.
    let mut bad = spec.clone();
    if let Some(LayerKind::Output { shape_info: Some(si), .. }) =
        bad.output_layers.as_mut().map(|l| &mut l[0].kind)
    {
        si.slice_layout[1].shape[1] = (3, 4);
    }
    let bytes = layer_of(&bad);
    let exe = Executable::open(&bytes, 0).unwrap();
    assert!(relayout::relayout(&exe.output_layers()[0], &src)
        .unwrap_err()
        .to_string()
        .contains("outside Layer.shape"));
}

#[test]
fn one_dimensional_output_executed_three_times_skips_the_padding() {
    let mut layer = output("out", 1, 1, 5, 8);
    layer.execution_count_per_inference = 3;
    let mut spec = executable(ExecutableType::STAND_ALONE, 0);
    spec.output_layers = Some(vec![layer]);
    let bytes = layer_of(&spec);
    let exe = Executable::open(&bytes, 0).unwrap();
    let src: Vec<u8> = (0..24).collect();
    let dense = relayout::relayout(&exe.output_layers()[0], &src).unwrap();
    assert_eq!(dense, [0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 16, 17, 18, 19, 20]);
    // The source must be exactly the padded size.
    assert_eq!(error_kind(relayout::relayout(&exe.output_layers()[0], &src[..23])), "Invalid");
}

#[test]
fn signed_transform_and_dequantization_use_the_device_zero_point() {
    let mut layer = output("out", 1, 1, 4, 4);
    layer.data_type = DataType::SIGNED_FIXED_POINT8;
    layer.numerics = Some((86, 0.25)); // TFLite int8 zero point -42
    let mut spec = executable(ExecutableType::STAND_ALONE, 0);
    spec.output_layers = Some(vec![layer]);
    let bytes = layer_of(&spec);
    let exe = Executable::open(&bytes, 0).unwrap();
    let l = exe.output_layers()[0];
    let device = [86u8, 90, 0, 255];
    let real = numerics::dequantize(&l, &device).unwrap();
    assert_eq!(real, [0.0, 1.0, -21.5, 42.25]);
    let mut host = device;
    numerics::transform_signed(&mut host, l.data_type()).unwrap();
    // int8 view: q - (-42) times 0.25 gives the same reals.
    let from_host: Vec<f32> = host.iter().map(|&b| (f32::from(b as i8) + 42.0) * 0.25).collect();
    assert_eq!(from_host, real);
    let mut wide = [0x00u8, 0x80, 0xff, 0x7f];
    numerics::transform_signed(&mut wide, DataType::SIGNED_FIXED_POINT16).unwrap();
    assert_eq!(wide, [0x00, 0x00, 0xff, 0xff]);
    assert_eq!(
        error_kind(numerics::transform_signed(&mut [0u8; 3], DataType::SIGNED_FIXED_POINT16)),
        "Invalid"
    );
}

#[test]
fn selection_follows_the_driver_rules() {
    let header = PackageSpec {
        min_runtime_version: 13,
        compiler_version: "cl/1".into(),
        ..Default::default()
    };
    let build = |types: &[ExecutableType]| -> Vec<u8> {
        let blobs: Vec<Vec<u8>> =
            types.iter().map(|&t| executable(t, 0x1234).build().unwrap()).collect();
        let refs: Vec<&[u8]> = blobs.iter().map(Vec::as_slice).collect();
        write_package(&header, &refs).unwrap()
    };
    use ExecutableType as T;
    let rt = select::CURRENT_RUNTIME_VERSION;
    let p = build(&[T::STAND_ALONE, T::PARAMETER_CACHING, T::EXECUTION_ONLY]);
    let pkg = Package::open(&p).unwrap();
    let (sel, _) = select::select(&pkg, rt).unwrap();
    assert_eq!(sel.main.0, 0);
    assert!(sel.parameter_caching.is_none());
    let p = build(&[T::EXECUTION_ONLY, T::PARAMETER_CACHING]);
    let pkg = Package::open(&p).unwrap();
    let (sel, _) = select::select(&pkg, rt).unwrap();
    assert_eq!((sel.main.0, sel.parameter_caching.map(|p| p.0)), (0, Some(1)));
    // A lone PARAMETER_CACHING executable is still the main one.
    let p = build(&[T::PARAMETER_CACHING]);
    assert_eq!(select::select(&Package::open(&p).unwrap(), rt).unwrap().0.main.0, 0);
    for (types, msg) in [
        (&[T::STAND_ALONE, T::PARAMETER_CACHING][..], "Invalid combination"),
        (&[T::EXECUTION_ONLY, T::EXECUTION_ONLY][..], "Multiple executables of the same type"),
    ] {
        let p = build(types);
        let err = select::select(&Package::open(&p).unwrap(), rt).err().unwrap().to_string();
        assert!(err.contains(msg), "{err}");
    }
    assert!(select::check_runtime_version(9, rt).unwrap().is_some());
    assert_eq!(error_kind(select::check_runtime_version(14, 13)), "Unsupported");
    // Two packages sharing a token keep each other's parameters cached; a third does not.
    let p = build(&[T::EXECUTION_ONLY, T::PARAMETER_CACHING]);
    let pkg = Package::open(&p).unwrap();
    let (sel, _) = select::select(&pkg, rt).unwrap();
    let mut state = select::CacheState::default();
    use select::Submission::{CacheParameters, Infer};
    assert_eq!(
        state.submit(1, &sel).unwrap(),
        [CacheParameters { package: 1 }, Infer { package: 1 }]
    );
    assert_eq!(
        state.submit(2, &sel).unwrap(),
        [CacheParameters { package: 2 }, Infer { package: 2 }]
    );
    assert_eq!(state.submit(1, &sel).unwrap(), [Infer { package: 1 }]);
    assert_eq!(state.token(), 0x1234);
}

#[test]
fn linking_unaligned_fields_and_driver_crash_cases() {
    let spec = executable(ExecutableType::STAND_ALONE, 0);
    let bytes = spec.build().unwrap();
    let exe = Executable::open(&bytes, 0).unwrap();
    let mut addrs = Addresses {
        parameters: Some(0x1111_2222_3333_4444),
        scratch: Some(0xaaaa_bbbb_0000_0000),
        ..Default::default()
    };
    addrs.inputs.insert("in".into(), vec![0x0123_4567_89ab_cdef]);
    let (linked, report) = link::link(&exe, &addrs).unwrap();
    let read = |bit| link::read_field(&linked[0], bit).unwrap();
    assert_eq!(read(3), 0x89ab_cdef);
    assert_eq!(read(40), 0x0123_4567);
    assert_eq!(read(128), 0x3333_4444);
    assert_eq!(read(200), 0xaaaa_bbbb);
    // The output got no address: left as compiled, and reported.
    assert_eq!(read(77), link::read_field(exe.bitstreams()[0], 77).unwrap());
    assert_eq!(report.unpatched.len(), 1);
    assert!(report.unpatched[0].1.contains("\"out\""));
    // Out-of-range batch, bad position, field past the end, scratch batch: errors, not crashes.
    let mut two = addrs.clone();
    two.inputs.insert("in".into(), vec![]);
    assert_eq!(error_kind(link::link(&exe, &two)), "Invalid");
    for (i, edit, kind) in [(0usize, 0u8, "Invalid"), (4, 1, "Unsupported"), (3, 2, "Invalid")] {
        let mut s = spec.clone();
        let fo =
            &mut s.instruction_bitstreams.as_mut().unwrap()[0].field_offsets.as_mut().unwrap()[i];
        match edit {
            0 => fo.meta.as_mut().unwrap().position = Position(7),
            1 => fo.meta.as_mut().unwrap().batch = 1,
            _ => fo.offset_bit = 8 * 32 - 31,
        }
        let b = s.build().unwrap();
        let e = Executable::open(&b, 0).unwrap();
        assert_eq!(error_kind(link::link(&e, &addrs)), kind, "edit {edit}");
    }
    let unknown =
        Addresses { inputs: [("nope".to_string(), vec![1])].into(), ..Default::default() };
    assert_eq!(error_kind(link::link(&exe, &unknown)), "NotFound");
}

#[test]
fn dma_walk_of_a_built_executable() {
    let spec = executable(ExecutableType::STAND_ALONE, 0);
    let bytes = spec.build().unwrap();
    let exe = Executable::open(&bytes, 0).unwrap();
    let steps = dma::steps(&exe, true).unwrap();
    assert_eq!(
        steps,
        [
            dma::Step::Instructions { chunk: 0, bytes: 32 },
            dma::Step::Data {
                buffer: dma::Buffer::Input { name: "in".into(), batch: 0 },
                direction: Direction::INFEED,
                offset: 0,
                size: 16
            },
            dma::Step::Interrupt(0),
            dma::Step::LocalFence,
        ]
    );
    let mut bad = spec.clone();
    bad.dma_hints.as_mut().unwrap().hints.as_mut().unwrap()[0] =
        HintSpec::Instruction { chunk: 1, direction: Direction::INFEED };
    let b = bad.build().unwrap();
    assert_eq!(error_kind(dma::steps(&Executable::open(&b, 0).unwrap(), true)), "Invalid");
    let mut past = spec.clone();
    past.dma_hints.as_mut().unwrap().hints.as_mut().unwrap()[1] = HintSpec::Descriptor {
        meta: Some(MetaSpec {
            desc: Description::BASE_ADDRESS_INPUT_ACTIVATION,
            batch: 0,
            name: Some("in".into()),
            position: Position::LOWER_32BIT,
        }),
        offset_in_bytes: 4090,
        size_in_bytes: 16,
        direction: Direction::INFEED,
    };
    let b = past.build().unwrap();
    assert!(dma::steps(&Executable::open(&b, 0).unwrap(), true)
        .unwrap_err()
        .to_string()
        .contains("last page"));
}

#[test]
fn relayout_of_the_schema_comment_2x2_tile_example() {
    // executable.fbs, above `table OutputLayout`: a 4x5x32 output over 2x2 tiles, tiles 0 and 2
    // holding 2x3x32 and tiles 1 and 3 holding 2x2x32, laid out one tile after another.
    let mut layer = output("out", 4, 5, 32, 640);
    layer.kind = LayerKind::Output {
        layout: Some(kiln_format::darwinn::writer::OutputLayoutSpec {
            y_coordinate_to_linear_tile_id_map: vec![0, 0, 2, 2],
            x_coordinate_to_linear_tile_id_map: vec![0, 0, 0, 1, 1],
            linearized_tile_byte_offset: vec![0, 192, 320, 512],
            x_coordinate_to_local_byte_offset: vec![0, 32, 64, 0, 32],
            y_coordinate_to_local_y_offset: vec![0, 1, 0, 1],
            x_coordinate_to_local_y_row_size: vec![96, 96, 96, 64, 64],
        }),
        data_type: DataType::FIXED_POINT8,
        shape_info: None,
    };
    let mut spec = executable(ExecutableType::STAND_ALONE, 0);
    spec.output_layers = Some(vec![layer]);
    let bytes = spec.build().unwrap();
    let exe = Executable::open(&bytes, 0).unwrap();
    let src: Vec<u8> = (0..640u32).map(|i| (i % 253) as u8).collect();
    let dense = relayout::relayout(&exe.output_layers()[0], &src).unwrap();
    for y in 0..4usize {
        for x in 0..5usize {
            // Geometry of the example, independent of the maps.
            let (row, col) = (y / 2, usize::from(x >= 3));
            let width = if col == 0 { 3 } else { 2 };
            let tile_start = [0, 192, 320, 512][2 * row + col];
            let s = tile_start + (y % 2) * width * 32 + (x - 3 * col) * 32;
            let d = (y * 5 + x) * 32;
            assert_eq!(dense[d..d + 32], src[s..s + 32], "y={y} x={x}");
        }
    }
}
