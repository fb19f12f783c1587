//! `KilnNpuBackend`: runs the NPU delegates `kiln lower --to npu` makes, on the reference
//! [`Device`].
//!
//! At init the delegate's processed data is read and checked
//! ([`kiln_format::npu_delegate`]) and a device is set up with its const and super-kernel
//! buffers and zeroed input, output and scratch buffers of the manifest's sizes. Each call
//! copies the input tensors into the input buffer at their manifest offsets, runs the fused
//! transaction, and copies the outputs out of the output buffer.

use kiln_format::npu_delegate::{NpuDelegate, TensorSlot};
use kiln_kernels::{Arg, DType, KernelContext, Out};
use kiln_runtime::{
    Backend, BackendError, BackendRegistry, DelegateHandle, DelegateInit, LoadOptions,
};

use crate::arg_type::OpArgType;
use crate::device::Device;
use crate::lower::BACKEND_ID;

/// The backend (register it in `LoadOptions::backends`, or start from [`load_options`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct KilnNpuBackend;

impl KilnNpuBackend {
    /// Registers the backend in `backends`: programs loaded with them run the delegates
    /// `kiln lower --to npu` makes, on the reference device.
    pub fn register(backends: &mut BackendRegistry) {
        backends.register(std::sync::Arc::new(KilnNpuBackend));
    }
}

/// The options kiln loads programs with: [`LoadOptions::default`] with [`KilnNpuBackend`]
/// registered, so the delegates `kiln lower --to npu` makes run on the reference device.
/// `kiln run`, `kiln inspect --compiled` and the Python package's `kiln.load` all start
/// from these.
pub fn load_options() -> LoadOptions {
    let mut options = LoadOptions::default();
    KilnNpuBackend::register(&mut options.backends);
    options
}

impl Backend for KilnNpuBackend {
    fn id(&self) -> &str {
        BACKEND_ID
    }

    fn init(&self, init: &DelegateInit<'_>) -> Result<Box<dyn DelegateHandle>, BackendError> {
        let d = NpuDelegate::parse(init.processed)
            .map_err(|e| BackendError::InvalidPayload(e.to_string()))?;
        let device =
            Device::for_delegate(&d).map_err(|e| BackendError::InvalidPayload(e.to_string()))?;
        let slots = |names: &[String]| -> Result<Vec<TensorSlot>, BackendError> {
            names
                .iter()
                .map(|n| {
                    d.tensor(n).cloned().ok_or_else(|| {
                        BackendError::InvalidPayload(format!("the manifest names no tensor {n:?}"))
                    })
                })
                .collect()
        };
        Ok(Box::new(NpuHandle {
            inputs: slots(&d.manifest.inputs)?,
            outputs: slots(&d.manifest.outputs)?,
            device,
            txn: d.txn,
        }))
    }
}

/// One initialised delegate.
struct NpuHandle {
    device: Device,
    txn: Vec<u8>,
    inputs: Vec<TensorSlot>,
    outputs: Vec<TensorSlot>,
}

impl DelegateHandle for NpuHandle {
    fn num_outputs(&self) -> usize {
        self.outputs.len()
    }

    fn execute(
        &mut self,
        _: &mut KernelContext,
        args: &[Arg<'_>],
        outs: &mut [Out<'_, '_>],
    ) -> Result<(), BackendError> {
        let fail = BackendError::Execution;
        if args.len() != self.inputs.len() + self.outputs.len() || outs.len() != self.outputs.len()
        {
            return Err(fail(format!(
                "the call passes {} values and {} outputs; the delegate takes {} inputs and {} outputs",
                args.len(),
                outs.len(),
                self.inputs.len(),
                self.outputs.len()
            )));
        }
        for (k, slot) in self.inputs.iter().enumerate() {
            let Arg::Tensor(t) = &args[k] else {
                return Err(fail(format!(
                    "input {k} ({}) is a {}, not a tensor",
                    slot.name,
                    args[k].tag()
                )));
            };
            check_tensor(k, "input", slot, t.dtype(), t.sizes()).map_err(fail)?;
            let buffer = self.device.buffer_mut(OpArgType::Input);
            let at = slot.offset as usize..(slot.offset + slot.size) as usize;
            buffer
                .get_mut(at)
                .ok_or_else(|| fail(format!("input {k} lies outside the input buffer")))?
                .copy_from_slice(t.bytes());
        }
        self.device.run(&self.txn).map_err(|e| fail(e.to_string()))?;
        for (j, (slot, out)) in self.outputs.iter().zip(outs.iter_mut()).enumerate() {
            let Out::Tensor(t) = out else {
                return Err(fail(format!("output {j} ({}) is not a tensor", slot.name)));
            };
            let sizes: Vec<usize> = slot.shape.iter().map(|&d| d as usize).collect();
            t.resize(&sizes).map_err(|e| fail(format!("output {j} ({}): {e}", slot.name)))?;
            check_tensor(j, "output", slot, t.dtype(), t.sizes()).map_err(fail)?;
            let at = slot.offset as usize..(slot.offset + slot.size) as usize;
            let src = self
                .device
                .buffer(OpArgType::Output)
                .get(at)
                .ok_or_else(|| fail(format!("output {j} lies outside the output buffer")))?;
            t.bytes_mut()
                .get_mut(..src.len())
                .ok_or_else(|| fail(format!("output {j} is smaller than its {} bytes", src.len())))?
                .copy_from_slice(src);
        }
        Ok(())
    }
}

/// Checks that a call's tensor is the float32 tensor of `slot`'s shape.
fn check_tensor(
    k: usize,
    what: &str,
    slot: &TensorSlot,
    dtype: DType,
    sizes: &[usize],
) -> Result<(), String> {
    let same = sizes.len() == slot.shape.len()
        && sizes.iter().zip(&slot.shape).all(|(&a, &b)| a as u64 == b);
    if dtype != DType::Float || !same {
        return Err(format!(
            "{what} {k} ({}) is {dtype:?} {sizes:?}; the delegate was lowered for float32 {:?}",
            slot.name, slot.shape
        ));
    }
    Ok(())
}
