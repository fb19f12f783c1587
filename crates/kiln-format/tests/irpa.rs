//! IREE parameter archives: kiln's builder against archives written by IREE 3.13.0
//! (`tools/fixtures/irpa/make_irpa_fixtures.py`), linked headers, edits, and mutated files.

mod common;

use std::borrow::Cow;

use common::{fixture, mutate, Rng};
use kiln_format::gguf::Gguf;
use kiln_format::io::WriteSink;
use kiln_format::irpa::builder::Plan;
use kiln_format::irpa::edit;
use kiln_format::irpa::source::ParamSource;
use kiln_format::irpa::transform::{self, Options};
use kiln_format::irpa::verify::{findings, verify, Severity};
use kiln_format::irpa::{Archive, BuildEntry, EntryKind, Payload, SourceEntry};
use kiln_format::safetensors::SafeTensors;

fn read(rel: &str) -> Vec<u8> {
    std::fs::read(fixture(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// name, metadata, splat pattern (None for data), data bytes, splat length.
type ManifestEntry = (String, Vec<u8>, Option<Vec<u8>>, Vec<u8>, u64);

/// The entries a manifest of a Python-API case lists, exactly as given to IREE.
fn manifest_entries(case: &str) -> (Vec<ManifestEntry>, u64) {
    let text = std::fs::read_to_string(fixture(&format!("irpa/{case}.manifest.json"))).unwrap();
    let m: serde_json::Value = serde_json::from_str(&text).unwrap();
    let entries = m["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let metadata = e["metadata"].as_str().unwrap_or("").as_bytes().to_vec();
            let name = e["name"].as_str().unwrap().to_string();
            if e["kind"] == "splat" {
                (
                    name,
                    metadata,
                    Some(hex(e["pattern"].as_str().unwrap())),
                    Vec::new(),
                    e["length"].as_u64().unwrap(),
                )
            } else {
                (name, metadata, None, hex(e["hex"].as_str().unwrap()), 0)
            }
        })
        .collect();
    (entries, m["alignment"].as_u64().unwrap())
}

#[test]
fn builder_matches_iree_python_api_byte_for_byte() {
    for case in ["empty", "splats", "data_metadata", "many"] {
        let (spec, alignment) = manifest_entries(case);
        let entries: Vec<BuildEntry> = spec
            .iter()
            .map(|(name, metadata, pattern, data, length)| BuildEntry {
                name: Cow::Borrowed(name.as_bytes()),
                metadata: Cow::Borrowed(metadata),
                payload: match pattern {
                    Some(p) => Payload::Splat { pattern: Cow::Borrowed(p), length: *length },
                    None => Payload::Data(data),
                },
            })
            .collect();
        let built = Plan::new(&entries, alignment).unwrap().to_vec();
        let iree = read(&format!("irpa/{case}.irpa"));
        assert_eq!(built.len(), iree.len(), "{case}: size");
        let first_diff = built.iter().zip(&iree).position(|(a, b)| a != b);
        assert_eq!(first_diff, None, "{case}: first differing byte");
    }
}

#[test]
fn reader_indexes_iree_archives() {
    let data = read("irpa/data_metadata.irpa");
    let archive = verify(&data).unwrap();
    let keys: Vec<_> = archive.entries().iter().map(|e| e.key().into_owned()).collect();
    assert_eq!(keys, ["weight", "array", "meta", "bias", "w"]);
    let meta = archive.find(b"meta").unwrap();
    assert_eq!(meta.metadata, b"hello");
    assert!(matches!(meta.kind, EntryKind::Data { length: 5, bytes: [0, 1, 2, 3, 4], .. }));
    let bias = archive.find(b"bias").unwrap();
    assert!(matches!(bias.kind, EntryKind::Splat { length: 120, pattern_length: 4, .. }));
    // Every reference case verifies without errors.
    for case in [
        "empty",
        "splats",
        "data_metadata",
        "many",
        "align64",
        "align4096",
        "merged",
        "edited",
        "stripped",
    ] {
        let data = read(&format!("irpa/{case}.irpa"));
        let archive = Archive::parse(&data).unwrap();
        let errors: Vec<_> =
            findings(&archive).into_iter().filter(|f| f.severity == Severity::Error).collect();
        assert!(errors.is_empty(), "{case}: {errors:?}");
    }
}

/// Loads any supported source file's entries.
fn with_entries<R>(rel: &str, f: impl FnOnce(Vec<SourceEntry<'_>>) -> R) -> R {
    let data = read(rel);
    if rel.ends_with(".irpa") {
        f(Archive::parse(&data).unwrap().param_entries().unwrap())
    } else if rel.ends_with(".safetensors") {
        f(SafeTensors::parse(&data).unwrap().param_entries().unwrap())
    } else {
        f(Gguf::parse(&data).unwrap().param_entries().unwrap())
    }
}

#[test]
fn convert_matches_iree_convert_parameters_byte_for_byte() {
    for case in ["from_safetensors", "from_gguf", "merged", "edited", "stripped"] {
        let text = std::fs::read_to_string(fixture(&format!("irpa/{case}.manifest.json"))).unwrap();
        let m: serde_json::Value = serde_json::from_str(&text).unwrap();
        let args: Vec<String> = m["kiln_convert"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect();
        // IREE's converter writes no type metadata.
        let mut options = Options { untyped: true, ..Options::default() };
        for pair in args.chunks(2) {
            match pair[0].as_str() {
                "--exclude" => options.exclude.push(pair[1].as_bytes().to_vec()),
                "--splat" => options.splat.push((pair[1].as_bytes().to_vec(), vec![0])),
                "--rename" => {
                    let (a, b) = pair[1].split_once('=').unwrap();
                    options.rename.push((a.as_bytes().to_vec(), b.as_bytes().to_vec()));
                }
                "--strip" => options.strip = true,
                other => panic!("unexpected {other}"),
            }
        }
        let inputs: Vec<Vec<u8>> = m["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| read(&format!("irpa/{}", i.as_str().unwrap())))
            .collect();
        let names: Vec<&str> =
            m["inputs"].as_array().unwrap().iter().map(|i| i.as_str().unwrap()).collect();
        let mut all = Vec::new();
        let parsed_irpa: Vec<_> = inputs
            .iter()
            .zip(&names)
            .map(|(d, n)| n.ends_with(".irpa").then(|| Archive::parse(d).unwrap()))
            .collect();
        let parsed_st: Vec<_> = inputs
            .iter()
            .zip(&names)
            .map(|(d, n)| n.ends_with(".safetensors").then(|| SafeTensors::parse(d).unwrap()))
            .collect();
        let parsed_gguf: Vec<_> = inputs
            .iter()
            .zip(&names)
            .map(|(d, n)| n.ends_with(".gguf").then(|| Gguf::parse(d).unwrap()))
            .collect();
        for i in 0..inputs.len() {
            let source: &dyn ParamSource = match (&parsed_irpa[i], &parsed_st[i], &parsed_gguf[i]) {
                (Some(a), _, _) => a,
                (_, Some(s), _) => s,
                (_, _, Some(g)) => g,
                _ => unreachable!(),
            };
            all.extend(source.param_entries().unwrap());
        }
        let entries = transform::apply(&all, &options);
        let built = Plan::new(&entries, 64).unwrap().to_vec();
        let iree = read(&format!("irpa/{case}.irpa"));
        assert_eq!(built.len(), iree.len(), "{case}: size");
        assert_eq!(
            built.iter().zip(&iree).position(|(a, b)| a != b),
            None,
            "{case}: first differing byte"
        );
    }
    with_entries("irpa/small.safetensors", |e| assert_eq!(e.len(), 5));
}

#[test]
fn linked_headers_are_followed_at_their_own_offsets() {
    let a = read("irpa/data_metadata.irpa");
    let b = read("irpa/many.irpa");
    let (pa, pb) = (Archive::parse(&a).unwrap(), Archive::parse(&b).unwrap());
    let out = edit::link(&[(&a, &pa), (&b, &pb)], None);
    let mut linked = WriteSink(Vec::new());
    out.write(&mut linked, &mut |_, _| {}).unwrap();
    let linked = linked.0;
    assert_eq!(linked.len() as u64, out.total_size());
    let archive = verify(&linked).unwrap();
    assert_eq!(archive.headers().len(), 2);
    assert_eq!(archive.headers()[1].offset, a.len() as u64);
    assert_eq!(archive.entries().len(), pa.entries().len() + pb.entries().len());
    for (x, y) in archive.entries()[pa.entries().len()..].iter().zip(pb.entries()) {
        assert_eq!((x.name, x.metadata), (y.name, y.metadata));
        if let (
            EntryKind::Data { bytes: bx, offset: ox, .. },
            EntryKind::Data { bytes: by, offset: oy, .. },
        ) = (x.kind, y.kind)
        {
            assert_eq!(bx, by);
            assert_eq!(ox, oy + a.len() as u64);
        }
    }
    // Linking the linked file again follows the whole chain to its last header.
    let pl = Archive::parse(&linked).unwrap();
    let out = edit::link(&[(&linked, &pl), (&a, &pa)], None);
    let mut twice = WriteSink(Vec::new());
    out.write(&mut twice, &mut |_, _| {}).unwrap();
    let twice = twice.0;
    assert_eq!(verify(&twice).unwrap().headers().len(), 3);
}

#[test]
fn erase_marks_entries_skip_and_keeps_everything_else() {
    let data = read("irpa/data_metadata.irpa");
    let archive = Archive::parse(&data).unwrap();
    let patches = edit::erase(&archive, &[b"meta", b"weight"]).unwrap();
    let mut out = WriteSink(Vec::new());
    edit::patched(&data, patches).write(&mut out, &mut |_, _| {}).unwrap();
    let out = out.0;
    assert_eq!(out.len(), data.len());
    let erased = verify(&out).unwrap();
    let live: Vec<_> = erased.live_entries().map(|e| e.key().into_owned()).collect();
    assert_eq!(live, ["array", "bias", "w"]);
    assert_eq!(out.iter().zip(&data).filter(|(a, b)| a != b).count(), 2);
    assert_eq!(common::error_kind(edit::erase(&archive, &[b"nope"])), "NotFound");
}

fn header_only(entry_count: u64) -> Vec<u8> {
    let entries = [BuildEntry {
        name: Cow::Borrowed(b"k"),
        metadata: Cow::Borrowed(b""),
        payload: Payload::Data(b"abcd"),
    }];
    let mut v = Plan::new(&entries[..entry_count as usize], 64).unwrap().to_vec();
    v.truncate(4096);
    v
}

#[test]
fn rejects_wrapping_chains_overlaps_and_misalignment() {
    // next_header_offset that wraps around to offset 0 (a cycle).
    let mut v = header_only(1);
    v[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    let err = Archive::parse(&v).unwrap_err().to_string();
    assert!(err.contains("next_header_offset"), "{err}");
    // A next header that points inside the header itself.
    v[16..24].copy_from_slice(&8u64.to_le_bytes());
    assert_eq!(common::error_kind(Archive::parse(&v)), "Invalid");
    // Storage segment moved over the entry table: parses (IREE accepts it) but fails verify.
    let mut v = header_only(1);
    v[72..80].copy_from_slice(&96u64.to_le_bytes());
    assert!(Archive::parse(&v).is_ok());
    let err = verify(&v).unwrap_err().to_string();
    assert!(err.contains("overlaps"), "{err}");
    // Data moved off its 64-byte alignment.
    let mut v = header_only(1);
    let storage = u64::from_le_bytes(v[72..80].try_into().unwrap());
    v[72..80].copy_from_slice(&(storage + 1).to_le_bytes());
    let err = verify(&v).unwrap_err().to_string();
    assert!(err.contains("aligned"), "{err}");
    // A linked header that is not 16-byte aligned.
    let mut chained = header_only(1);
    chained[16..24].copy_from_slice(&4104u64.to_le_bytes());
    chained.resize(4104, 0);
    chained.extend_from_slice(&header_only(1));
    let err = verify(&chained).unwrap_err().to_string();
    assert!(err.contains("16-byte aligned"), "{err}");
    // Entry count larger than the table can hold.
    let mut v = header_only(1);
    v[32..40].copy_from_slice(&1000u64.to_le_bytes());
    assert_eq!(common::error_kind(Archive::parse(&v)), "Invalid");
}

#[test]
fn newer_headers_are_skipped_not_fatal() {
    let mut chained = header_only(1);
    chained[16..24].copy_from_slice(&4096u64.to_le_bytes());
    let mut second = header_only(1);
    second[4..6].copy_from_slice(&1u16.to_le_bytes());
    chained.extend_from_slice(&second);
    let archive = Archive::parse(&chained).unwrap();
    assert_eq!(archive.headers().len(), 2);
    assert!(archive.headers()[1].skipped);
    assert_eq!(archive.entries().len(), 1);
    assert!(findings(&archive).iter().any(|f| f.severity == Severity::Warning));
}

#[test]
fn mutated_fixtures_never_panic() {
    let mut rng = Rng::new(0x1e5a);
    for case in
        ["irpa/data_metadata.irpa", "irpa/many.irpa", "irpa/splats.irpa", "irpa/align4096.irpa"]
    {
        let original = read(case);
        for _ in 0..400 {
            let bytes = mutate(&original, &mut rng);
            if let Ok(a) = Archive::parse(&bytes) {
                let _ = findings(&a);
                let _ = a.param_entries();
            }
        }
    }
}

#[test]
fn external_entries_round_trip_and_data_offsets_match_iree() {
    let entries = [
        BuildEntry {
            name: Cow::Borrowed(b"ext"),
            metadata: Cow::Borrowed(b"md"),
            payload: Payload::External {
                path: Cow::Borrowed(b"weights.bin"),
                offset: 4096,
                length: 100,
            },
        },
        BuildEntry {
            name: Cow::Borrowed(b"d"),
            metadata: Cow::Borrowed(b""),
            payload: Payload::Data(b"xyz"),
        },
    ];
    let plan = Plan::new(&entries, 64).unwrap();
    let bytes = plan.to_vec();
    let archive = verify(&bytes).unwrap();
    let e = archive.find(b"ext").unwrap();
    assert_eq!(e.metadata, b"md");
    assert!(matches!(
        e.kind,
        EntryKind::External { path: b"weights.bin", offset: 4096, length: 100 }
    ));
    let d = archive.find(b"d").unwrap();
    assert!(
        matches!(d.kind, EntryKind::Data { offset, bytes: b"xyz", .. } if Some(offset) == plan.data_offset(1))
    );
    assert_eq!(plan.data_offset(0), None);
    // The rebuilt many-entry archive places every data entry where IREE put it.
    let iree = read("irpa/many.irpa");
    let archive = Archive::parse(&iree).unwrap();
    let source = archive.param_entries().unwrap();
    let built: Vec<BuildEntry> = source.iter().map(|e| e.to_build(false)).collect();
    let plan = Plan::new(&built, 64).unwrap();
    for (i, e) in source.iter().enumerate() {
        assert_eq!(plan.data_offset(i), e.offset, "entry {i}");
    }
    assert_eq!(plan.storage().offset, archive.headers()[0].storage_segment.offset);
}

#[test]
fn headers_sharing_one_entry_table_cannot_multiply_entries() {
    // 40 headers in front of many.irpa, each pointing its segments at many.irpa's 300-entry table.
    let many = read("irpa/many.irpa");
    let n = 40u64;
    let start = n * 96;
    let mut file = Vec::new();
    for i in 0..n {
        let mut h = many[..96].to_vec();
        let shift = start - i * 96;
        for seg in [40usize, 56, 72] {
            let off = u64::from_le_bytes(many[seg..seg + 8].try_into().unwrap());
            h[seg..seg + 8].copy_from_slice(&(off + shift).to_le_bytes());
        }
        h[16..24].copy_from_slice(&96u64.to_le_bytes());
        file.extend_from_slice(&h);
    }
    file.extend_from_slice(&many);
    let err = Archive::parse(&file).unwrap_err().to_string();
    assert!(err.contains("over the limit"), "{err}");
    // One header in front still parses: 600 entries fit the cap.
    let mut two = file[(n as usize - 1) * 96..].to_vec();
    two.truncate(96 + many.len());
    let archive = Archive::parse(&two).unwrap();
    assert_eq!(archive.entries().len(), 600);
    assert!(findings(&archive)
        .iter()
        .any(|f| f.severity == Severity::Error && f.message.contains("overlaps")));
}
