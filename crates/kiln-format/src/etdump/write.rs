//! Writing an ETDump in the form ExecuTorch's runtime writes (see the module docs of
//! [`super`]): size-prefixed, identifier `ED00`, fields the runtime would leave out left out
//! (no `name` on an unnamed event, no empty `allocators` or `events` vector, `-1` defaults
//! not stored).

use flatbuffers::{FlatBufferBuilder, WIPOffset};
use kiln_schema::etdump::etdump as fb;
use kiln_schema::etdump::executorch_flatbuffer::ScalarType;

use super::model::FORMAT;
use super::model::{DebugEvent, ETDump, Event, ProfileEvent, RunData, Tensor, Value};
use crate::error::{Error, Result};

/// Largest output [`write`] builds (the flatbuffers builder cannot go past 2 GiB).
const MAX_BYTES: u64 = 1 << 30;
/// Bytes a table and its vtable take at most beyond their strings and vectors, rounded up.
const TABLE_BYTES: u64 = 128;

type Builder<'a> = FlatBufferBuilder<'a>;

/// The bytes of `dump` as an `.etdp` file.
///
/// Fails only when the file would be larger than 1 GiB.
pub fn write(dump: &ETDump) -> Result<Vec<u8>> {
    let estimate = upper_bound(dump);
    if estimate > MAX_BYTES {
        return Err(Error::Limit {
            format: FORMAT,
            what: "ETDump size".into(),
            value: estimate,
            limit: MAX_BYTES,
        });
    }
    let mut fbb = Builder::with_capacity(usize::try_from(estimate).unwrap_or(0).min(1 << 20));
    let runs: Vec<_> = dump.run_data.iter().map(|r| run(&mut fbb, r)).collect();
    let run_data = fbb.create_vector(&runs);
    let root = fb::ETDump::create(
        &mut fbb,
        &fb::ETDumpArgs { version: dump.version, run_data: Some(run_data) },
    );
    fb::finish_size_prefixed_etdump_buffer(&mut fbb, root);
    Ok(fbb.finished_data().to_vec())
}

/// An upper bound of the output size: every table, string and vector with its padding.
fn upper_bound(dump: &ETDump) -> u64 {
    let text = |s: &Option<String>| s.as_ref().map_or(0, |s| s.len() as u64 + 8);
    let tensor = |t: &Tensor| TABLE_BYTES + 16 * (t.sizes.len() + t.strides.len()) as u64 + 16;
    let mut total = TABLE_BYTES;
    for r in &dump.run_data {
        total += TABLE_BYTES + r.name.len() as u64 + 8;
        total += r.allocators.iter().map(|a| TABLE_BYTES + a.len() as u64 + 8).sum::<u64>();
        for e in &r.events {
            total += 2 * TABLE_BYTES;
            total += match e {
                Event::Profile(p) => {
                    text(&p.name)
                        + text(&p.delegate_debug_id_str)
                        + p.delegate_debug_metadata.as_ref().map_or(0, |m| m.len() as u64 + 8)
                }
                Event::Allocation(_) => 0,
                Event::Debug(d) => {
                    text(&d.name)
                        + text(&d.delegate_debug_id_str)
                        + d.debug_entry.as_ref().map_or(0, |v| {
                            8 * TABLE_BYTES
                                + v.tensor
                                    .iter()
                                    .chain(v.tensor_list.iter().flatten())
                                    .map(tensor)
                                    .sum::<u64>()
                        })
                }
            };
        }
    }
    total
}

fn run<'a>(fbb: &mut Builder<'a>, r: &RunData) -> WIPOffset<fb::RunData<'a>> {
    let name = fbb.create_string(&r.name);
    let allocators = (!r.allocators.is_empty()).then(|| {
        let tables: Vec<_> = r
            .allocators
            .iter()
            .map(|a| {
                let name = fbb.create_string(a);
                fb::Allocator::create(fbb, &fb::AllocatorArgs { name: Some(name) })
            })
            .collect();
        fbb.create_vector(&tables)
    });
    let events = (!r.events.is_empty()).then(|| {
        let tables: Vec<_> = r.events.iter().map(|e| event(fbb, e)).collect();
        fbb.create_vector(&tables)
    });
    fb::RunData::create(
        fbb,
        &fb::RunDataArgs {
            name: Some(name),
            bundled_input_index: r.bundled_input_index,
            allocators,
            events,
        },
    )
}

fn event<'a>(fbb: &mut Builder<'a>, e: &Event) -> WIPOffset<fb::Event<'a>> {
    let mut args = fb::EventArgs::default();
    match e {
        Event::Profile(p) => args.profile_event = Some(profile(fbb, p)),
        Event::Allocation(a) => {
            let size = fb::UnalignedULong::new(a.allocation_size);
            args.allocation_event = Some(fb::AllocationEvent::create(
                fbb,
                &fb::AllocationEventArgs {
                    allocator_id: a.allocator_id,
                    allocation_size: nonzero(a.allocation_size).then_some(&size),
                },
            ));
        }
        Event::Debug(d) => args.debug_event = Some(debug(fbb, d)),
    }
    fb::Event::create(fbb, &args)
}

/// Whether an 8-byte value differs from its default, 0 (flatbuffers leaves defaults out).
fn nonzero<T: Default + PartialEq>(v: T) -> bool {
    v != T::default()
}

fn profile<'a>(fbb: &mut Builder<'a>, p: &ProfileEvent) -> WIPOffset<fb::ProfileEvent<'a>> {
    let name = p.name.as_deref().map(|s| fbb.create_string(s));
    let id_str = p.delegate_debug_id_str.as_deref().map(|s| fbb.create_string(s));
    let metadata = p.delegate_debug_metadata.as_deref().map(|m| fbb.create_vector(m));
    let (start, end) = (fb::UnalignedULong::new(p.start_time), fb::UnalignedULong::new(p.end_time));
    fb::ProfileEvent::create(
        fbb,
        &fb::ProfileEventArgs {
            name,
            chain_index: p.chain_index,
            instruction_id: p.instruction_id,
            delegate_debug_id_int: p.delegate_debug_id_int,
            delegate_debug_id_str: id_str,
            delegate_debug_metadata: metadata,
            start_time: nonzero(p.start_time).then_some(&start),
            end_time: nonzero(p.end_time).then_some(&end),
        },
    )
}

fn debug<'a>(fbb: &mut Builder<'a>, d: &DebugEvent) -> WIPOffset<fb::DebugEvent<'a>> {
    let debug_entry = d.debug_entry.as_ref().map(|v| value(fbb, v));
    let id_str = d.delegate_debug_id_str.as_deref().map(|s| fbb.create_string(s));
    let name = d.name.as_deref().map(|s| fbb.create_string(s));
    let chain = fb::UnalignedULong::new(d.chain_index);
    fb::DebugEvent::create(
        fbb,
        &fb::DebugEventArgs {
            chain_index: nonzero(d.chain_index).then_some(&chain),
            instruction_id: d.instruction_id,
            debug_entry,
            delegate_debug_id_int: d.delegate_debug_id_int,
            delegate_debug_id_str: id_str,
            name,
        },
    )
}

fn value<'a>(fbb: &mut Builder<'a>, v: &Value) -> WIPOffset<fb::Value<'a>> {
    let one_tensor = v.tensor.as_ref().map(|t| tensor(fbb, t));
    let tensor_list = v.tensor_list.as_ref().map(|ts| {
        let tables: Vec<_> = ts.iter().map(|t| tensor(fbb, t)).collect();
        let tensors = Some(fbb.create_vector(&tables));
        fb::TensorList::create(fbb, &fb::TensorListArgs { tensors })
    });
    let int_value = v.int_value.map(|i| {
        let int_val = fb::UnalignedLong::new(i);
        fb::Int::create(fbb, &fb::IntArgs { int_val: nonzero(i).then_some(&int_val) })
    });
    let float_value =
        v.float_value.map(|float_val| fb::Float::create(fbb, &fb::FloatArgs { float_val }));
    let double_value = v.double_value.map(|x| {
        let double_val = fb::UnalignedDouble::new(x);
        let stored = x.to_bits() != 0;
        fb::Double::create(fbb, &fb::DoubleArgs { double_val: stored.then_some(&double_val) })
    });
    let mut bool_table = |bool_val| fb::Bool::create(fbb, &fb::BoolArgs { bool_val });
    let bool_value = v.bool_value.map(&mut bool_table);
    let output = v.output.map(&mut bool_table);
    fb::Value::create(
        fbb,
        &fb::ValueArgs {
            val: fb::ValueType(v.val.code()),
            tensor: one_tensor,
            tensor_list,
            int_value,
            float_value,
            double_value,
            bool_value,
            output,
        },
    )
}

fn tensor<'a>(fbb: &mut Builder<'a>, t: &Tensor) -> WIPOffset<fb::Tensor<'a>> {
    let longs = |v: &[i64]| v.iter().map(|&x| fb::UnalignedLong::new(x)).collect::<Vec<_>>();
    let sizes = Some(fbb.create_vector(&longs(&t.sizes)));
    let strides = Some(fbb.create_vector(&longs(&t.strides)));
    let offset = fb::UnalignedLong::new(t.offset);
    fb::Tensor::create(
        fbb,
        &fb::TensorArgs {
            scalar_type: ScalarType(t.scalar_type),
            sizes,
            strides,
            offset: nonzero(t.offset).then_some(&offset),
        },
    )
}
