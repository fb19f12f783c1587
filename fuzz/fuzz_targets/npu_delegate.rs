#![no_main]
//! Fuzzes the NPU delegate reader (`kiln_format::npu_delegate`): what it accepts writes back
//! to bytes it reads as the same delegate, and, when the buffers are small, the reference
//! device runs the delegate's transaction to an answer or an error, never a panic.

use kiln_format::npu_delegate::NpuDelegate;
use kiln_npu::{Device, OpArgType};
use libfuzzer_sys::fuzz_target;

/// Largest buffer the target hands the device, to keep runs fast.
const SMALL: u64 = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Ok(d) = NpuDelegate::parse(data) else { return };
    let bytes = d.to_bytes().unwrap();
    assert_eq!(NpuDelegate::parse(&bytes).unwrap(), d);
    let b = d.manifest.buffers;
    if [b.input, b.output, b.scratch].iter().any(|&n| n > SMALL) {
        return;
    }
    let Ok(mut device) = Device::for_delegate(&d) else { return };
    device.buffer_mut(OpArgType::Input).fill(0x3f);
    let _ = device.run(&d.txn);
});
