//! Prepared steps bound at load: where every tensor of the step lives, resolved once.
//!
//! A compiled step whose tensors all have static float32 shapes and fixed places (planned in a
//! method buffer, or constants) needs nothing from the value table at run time. Loading
//! records each tensor's byte range, sorts the step's buffer regions and checks once that no
//! written region overlaps another; a run then only splits the buffers along those regions and
//! hands the float32 slices to the kernel
//! ([`PreparedKernel::run_bound`]). The general path builds a view
//! (sizes, strides, dim order) of every tensor, an argument list and an output list per call,
//! and writes the shapes back after it: for the small steps of recurrent models that costs more
//! than the arithmetic.
//!
//! Only the straight-line methods the compile stage rewrites have prepared steps, and no step
//! of theirs moves or frees a value, so the places found at load hold for every run.

use std::ops::Range;
use std::sync::Arc;

use kiln_kernels::arena::{check_regions, split_regions, Access, Borrowed, Region};
use kiln_kernels::{Capacity, DType, KernelContext, OutKind};

use super::prepared::{PreparedKernel, StepScratch, MAX_TENSORS};
use crate::arena::{Arena, ConstBuf, Line};
use crate::data::NamedDataSource;
use crate::step::{Call, Role};
use crate::value::{Storage, Val};

/// Identity order of up to `2 * MAX_TENSORS` regions already sorted by start.
const ORDER: [usize; 2 * MAX_TENSORS] = {
    let mut o = [0; 2 * MAX_TENSORS];
    let mut i = 0;
    while i < o.len() {
        o[i] = i;
        i += 1;
    }
    o
};

/// Where a read tensor's bytes are.
#[derive(Clone, Debug)]
enum Place {
    /// In a method buffer: borrowed through the binding's regions.
    Buffer,
    /// Outside the buffers (a constant in the program file, made at load or in external data,
    /// or an input read in place), of this many bytes ([`Constants::bytes`]).
    Constant(Storage, usize),
}

/// Where the tensors of one prepared step live, resolved at load.
#[derive(Debug)]
pub(crate) struct Binding {
    /// Per read, in the step's order.
    reads: Box<[Place]>,
    /// How many tensors the step writes.
    writes: usize,
    /// The method buffers the step touches, ascending, each with its range of `regions`.
    buffers: Box<[(u32, Range<usize>)]>,
    /// The step's regions in method buffers, sorted by buffer and start; checked at load.
    regions: Box<[Region]>,
    /// Per region: the index of the read or write it holds.
    targets: Box<[usize]>,
}

/// The binding of prepared call `call`, when every tensor it reads or writes is a float32
/// tensor of static dense shape, aligned for `f32`, planned in `buffers` (or, for reads, a
/// constant), and no written region overlaps another region of the call; `None` otherwise
/// (the step then runs through the general path, which reports any error). Every execution
/// state of the method has buffers of the same sizes, so the binding holds for each.
pub(crate) fn bind(
    call: &Call,
    values: &[Val],
    buffers: &[usize],
    constants: &Constants<'_>,
) -> Option<Binding> {
    let mut reads = Vec::new();
    let mut writes = 0usize;
    // (buffer, region, target)
    let mut entries: Vec<(u32, Region, usize)> = Vec::new();
    let aligned = |b: &[u8]| bytemuck::try_cast_slice::<u8, f32>(b).is_ok();
    for (&v, role) in call.args.iter().zip(call.roles.iter()) {
        let Some(Val::Tensor(t)) = values.get(v as usize) else { return None };
        if t.dtype != DType::Float || t.capacity != Capacity::Static {
            return None;
        }
        if !t.shape.is_dense_row_major() {
            return None;
        }
        let len = t.nbytes();
        let access = match role {
            Role::In => Access::Read,
            Role::Out(OutKind::Tensor) => Access::Write,
            _ => return None,
        };
        match (t.storage, access) {
            (Storage::Buf { buf, offset }, _) => {
                let range = offset..offset.checked_add(len)?;
                if offset % std::mem::align_of::<f32>() != 0 {
                    return None;
                }
                let target = if access == Access::Read { reads.len() } else { writes };
                entries.push((buf, Region { range, access }, target));
                if access == Access::Read {
                    reads.push(Place::Buffer);
                } else {
                    writes += 1;
                }
            }
            (storage, Access::Read) => {
                // An input read in place is given aligned at every run, and only then.
                if !matches!(storage, Storage::Input { .. })
                    && !aligned(constants.bytes(storage, len)?)
                {
                    return None;
                }
                reads.push(Place::Constant(storage, len));
            }
            // A constant written.
            _ => return None,
        }
    }
    // The callee receives its writes in `outs` order: it must be the order of the positions.
    let written: Vec<u32> = (0..call.roles.len() as u32)
        .filter(|&p| matches!(call.roles[p as usize], Role::Out(_)))
        .collect();
    let outs: Vec<u32> = call.outs.iter().map(|&(p, _)| p).collect();
    if written != outs || reads.len() > MAX_TENSORS || writes > MAX_TENSORS {
        return None;
    }
    entries.sort_by_key(|e| (e.0, e.1.range.start));
    let mut groups = Vec::new();
    let mut k = 0;
    while k < entries.len() {
        let buf = entries[k].0;
        let end = k + entries[k..].iter().take_while(|e| e.0 == buf).count();
        let regions: Vec<Region> = entries[k..end].iter().map(|e| e.1.clone()).collect();
        let arena = buffers.get(buf as usize)? * std::mem::size_of::<Line>();
        check_regions(arena, &regions, &ORDER[..regions.len()]).ok()?;
        groups.push((buf, k..end));
        k = end;
    }
    Some(Binding {
        reads: reads.into_boxed_slice(),
        writes,
        buffers: groups.into_boxed_slice(),
        targets: entries.iter().map(|e| e.2).collect(),
        regions: entries.into_iter().map(|e| e.1).collect(),
    })
}

/// Why a bound step failed.
pub(crate) enum BoundError {
    /// The kernel refused its data.
    Kernel(kiln_kernels::KernelError),
    /// The method's memory no longer fits the binding.
    Memory(String),
}

/// What steps read outside an execution state's buffers, unchanged while a run lasts: the
/// program file, the method's constants made at load, the external data sources and, during a
/// run, the inputs it reads where they were given ([`Storage::Input`]).
pub(crate) struct Constants<'a> {
    pub file: &'a [u8],
    pub made: &'a [ConstBuf],
    pub sources: &'a [Arc<dyn NamedDataSource>],
    /// Per method input, the bytes a run reads in place (empty outside a run and for inputs
    /// kept in method memory); each is aligned for its dtype.
    pub inputs: &'a [&'a [u8]],
}

impl<'a> Constants<'a> {
    /// The same with `inputs` as the run's inputs read in place.
    pub fn with_inputs<'b>(&self, inputs: &'b [&'b [u8]]) -> Constants<'b>
    where
        'a: 'b,
    {
        Constants { file: self.file, made: self.made, sources: self.sources, inputs }
    }

    /// The `len` bytes of a tensor stored at `storage` (in the file, made at load, in an
    /// external source or an input read in place); `None` for other storage or where they are
    /// out of range.
    pub fn bytes(&self, storage: Storage, len: usize) -> Option<&'a [u8]> {
        let (data, offset): (&'a [u8], usize) = match storage {
            Storage::File { offset } => (self.file, offset),
            Storage::Const { buf, offset } => (self.made.get(buf as usize)?.bytes(), offset),
            Storage::Ext { source, offset } => (self.sources.get(source as usize)?.bytes(), offset),
            Storage::Input { index, offset } => (self.inputs.get(index as usize)?, offset),
            Storage::Buf { .. } | Storage::Empty => return None,
        };
        data.get(offset..offset.checked_add(len)?)
    }
}

/// Runs `kernel` (with its `scratch`) on the tensors of binding `b`.
pub(crate) fn run(
    b: &Binding,
    kernel: &dyn PreparedKernel,
    scratch: &mut StepScratch,
    ctx: &mut KernelContext,
    buffers: &mut [Arena],
    constants: &Constants<'_>,
) -> Result<(), BoundError> {
    let memory = |what: &str| BoundError::Memory(what.to_string());
    let mut borrowed: [Option<Borrowed<'_>>; 2 * MAX_TENSORS] = Default::default();
    let mut rest: &mut [Arena] = buffers;
    let mut rest_base = 0u32;
    let mut parts: &mut [Option<Borrowed<'_>>] = &mut borrowed;
    for (buf, range) in b.buffers.iter() {
        let skip = buf.checked_sub(rest_base).ok_or_else(|| memory("buffers out of order"))?;
        let taken = std::mem::take(&mut rest);
        if skip as usize >= taken.len() {
            return Err(memory("a bound buffer does not exist"));
        }
        let (_, tail) = taken.split_at_mut(skip as usize);
        let (one, tail) = tail.split_at_mut(1);
        rest = tail;
        rest_base = buf + 1;
        let (mine, others) = std::mem::take(&mut parts).split_at_mut(range.len());
        parts = others;
        let arena: &mut [u8] = bytemuck::cast_slice_mut(one[0].as_mut_slice());
        split_regions(arena, &b.regions[range.clone()], &ORDER[..range.len()], mine)
            .map_err(|e| BoundError::Memory(format!("memory plan: {e}")))?;
    }
    let mut reads: [&[f32]; MAX_TENSORS] = Default::default();
    let mut writes: [&mut [f32]; MAX_TENSORS] = Default::default();
    fn f32s(bytes: Option<&[u8]>) -> Option<&[f32]> {
        bytes.and_then(|d| bytemuck::try_cast_slice(d).ok())
    }
    for (slot, place) in reads.iter_mut().zip(b.reads.iter()) {
        *slot = match place {
            Place::Buffer => continue,
            &Place::Constant(storage, len) => f32s(constants.bytes(storage, len)),
        }
        .ok_or_else(|| memory("a bound constant or input is outside its data"))?;
    }
    for (slot, &t) in borrowed.iter_mut().zip(b.targets.iter()) {
        match slot.take() {
            Some(Borrowed::Read(d)) => {
                let r = reads.get_mut(t).ok_or_else(|| memory("read index"))?;
                *r = bytemuck::try_cast_slice(d).map_err(|_| memory("a read is not f32"))?;
            }
            Some(Borrowed::Write(d)) => {
                let w = writes.get_mut(t).ok_or_else(|| memory("write index"))?;
                *w = bytemuck::try_cast_slice_mut(d).map_err(|_| memory("a write is not f32"))?;
            }
            None => return Err(memory("a bound region was not borrowed")),
        }
    }
    kernel
        .run_bound(scratch, ctx, &reads[..b.reads.len()], &mut writes[..b.writes])
        .map_err(BoundError::Kernel)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{Input, Output, TensorInput, ValueMeta};
    use crate::program::Program;
    use crate::step::Callee;
    use kiln_kernels::Shape;

    fn fixture(name: &str) -> Program {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/pte");
        Program::load(dir.join(name)).unwrap()
    }

    /// Float32 values spread over [-2, 2], as bytes.
    fn spread_input(sizes: &[usize]) -> Vec<u8> {
        let n: usize = sizes.iter().product();
        (0..n).flat_map(|i| (2.0 * (i as f32 * 0.77).sin()).to_le_bytes()).collect()
    }

    /// Prepared steps of every kind are bound (linear layers and maps in the recurrent
    /// fixtures; convolutions, a max pooling and a mean in resnet_stem; the fused
    /// pointwise+depthwise pairs in mobilenet_v2) and give the same bits as the general path
    /// that builds views and argument lists (the binding removed).
    #[test]
    fn bound_steps_equal_the_general_path() {
        for name in ["lstm.pte", "gru.pte", "resnet_stem.pte", "mobilenet_v2_portable.pte"] {
            let program = fixture(name);
            let mut bound = program.method("forward").unwrap();
            // Loaded apart, so that it does not share the steps it changes.
            let plan = program.plan("forward").unwrap();
            let mut general = crate::load::load(program.decoded.clone(), plan).unwrap();
            let fixed = Arc::get_mut(&mut general.fixed).expect("one state");
            let count = fixed.bindings.iter_mut().filter_map(Option::take).count();
            assert!(count > 0, "{name}: no step was bound");
            let ValueMeta::Tensor(meta) = &bound.inputs()[0] else { panic!("{name}: input") };
            let sizes = meta.sizes.clone();
            let data = spread_input(&sizes);
            let input =
                [Input::Tensor(TensorInput { dtype: meta.dtype, sizes: &sizes, data: &data })];
            let a = bound.execute(&input).unwrap();
            let b = general.execute(&input).unwrap();
            for (x, y) in a.iter().zip(&b) {
                let (Output::Tensor(x), Output::Tensor(y)) = (x, y) else { panic!("{name}") };
                assert_eq!(x.data, y.data, "{name}");
            }
        }
    }

    /// A step whose written region overlaps one it reads is not bound (the general path then
    /// reports the overlap), nor is one with a tensor of dynamic shape.
    #[test]
    fn overlapping_or_dynamic_tensors_are_not_bound() {
        let slot = |offset: usize, capacity: Capacity| {
            Val::Tensor(crate::value::TensorSlot {
                dtype: DType::Float,
                shape: Shape::contiguous(&[4]).unwrap(),
                capacity,
                cap_bytes: 16,
                storage: Storage::Buf { buf: 0, offset },
                writable: true,
            })
        };
        let call = Call {
            callee: Callee::Prepared(0),
            name: "map".into(),
            instruction: 0,
            args: Box::new([0, 1]),
            roles: Box::new([Role::In, Role::Out(OutKind::Tensor)]),
            outs: Box::new([(1, OutKind::Tensor)]),
        };
        // One buffer of one cache line.
        let buffers = [1];
        let bind_with = |values: &[Val]| {
            bind(
                &call,
                values,
                &buffers,
                &Constants { file: &[], made: &[], sources: &[], inputs: &[] },
            )
        };
        assert!(bind_with(&[slot(0, Capacity::Static), slot(16, Capacity::Static)]).is_some());
        assert!(bind_with(&[slot(0, Capacity::Static), slot(8, Capacity::Static)]).is_none());
        assert!(bind_with(&[slot(0, Capacity::Bound(4)), slot(16, Capacity::Static)]).is_none());
        // Outside the buffer's 64 bytes.
        assert!(bind_with(&[slot(0, Capacity::Static), slot(56, Capacity::Static)]).is_none());
    }
}
