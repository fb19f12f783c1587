//! Where the time before a method's first execute goes ([`LoadTimes`]): what `kiln bench
//! --json` reports as `load_split` and the Python `Program.load_times()` gives.

use std::time::Duration;

/// The time a method's load took, by stage. The first three are the program's (shared by
/// every method loaded from it), the last two the method's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadTimes {
    /// Mapping the file (or, for a stream or bytes, reading or writing it).
    pub map: Duration,
    /// Verifying the file's structure (`kiln-format`).
    pub verify: Duration,
    /// Decoding every method into a plan, XNNPACK delegates lowered into kernel calls.
    pub decode: Duration,
    /// The method's load but its packing: kernels and delegates resolved, memory placed, the
    /// compile stage's passes, the compiled memory plan.
    pub compile: Duration,
    /// Packing and laying out the compiled steps' weights.
    pub pack: Duration,
}

impl LoadTimes {
    /// All of it.
    pub fn total(&self) -> Duration {
        self.map + self.verify + self.decode + self.compile + self.pack
    }
}
