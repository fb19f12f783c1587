//! What a loaded method will hold, predicted before it runs, beside what the process held at
//! its peak: the `memory` field of `kiln run --json` and `kiln bench --json`, and the rows of
//! `kiln inspect --memory`.

use kiln_runtime::footprint::resident;
use kiln_runtime::Footprint;
use serde::Serialize;

/// A method's predicted peak, by kind, and (after executes) the process's measured one.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct MemoryReport {
    /// The process's resident set before the program was loaded (0 where the OS does not
    /// say).
    pub baseline_bytes: u64,
    /// The pages the values of the execution states span in their buffers (per state, times
    /// `states`).
    pub activations_bytes: u64,
    /// Execution states the prediction counts activations for.
    pub states: usize,
    /// The compiled steps' packed weights.
    pub packed_weights_bytes: u64,
    /// Constants made at load.
    pub constants_made_bytes: u64,
    /// Pages of the program file and external data that steps read in place.
    pub mapped_in_place_bytes: u64,
    /// Pages of constant tables steps gather rows of (embeddings): resident only where runs
    /// read them, so not in the prediction (at most this much more).
    pub gathered_tables_bytes: u64,
    /// The sum of the above: the peak resident set predicted for the process.
    pub predicted_peak_bytes: u64,
    /// The process's peak resident set when the report was made (`VmHWM`), once it has run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_peak_bytes: Option<u64>,
    /// What the compiled steps' scratch buffers of the states hold after the runs so far
    /// (allocated at the first execute; not in the prediction).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scratch_bytes: Option<u64>,
}

impl MemoryReport {
    /// The prediction for `states` execution states of a method with `footprint`, in a
    /// process that held `baseline` bytes before loading it.
    pub(crate) fn predict(baseline: Option<u64>, footprint: Footprint, states: usize) -> Self {
        let baseline_bytes = baseline.unwrap_or(0);
        let activations_bytes = footprint.activations * states as u64;
        MemoryReport {
            baseline_bytes,
            activations_bytes,
            states,
            packed_weights_bytes: footprint.packed_weights,
            constants_made_bytes: footprint.constants_made,
            mapped_in_place_bytes: footprint.mapped_in_place,
            gathered_tables_bytes: footprint.gathered_tables,
            predicted_peak_bytes: baseline_bytes + footprint.total() - footprint.activations
                + activations_bytes,
            measured_peak_bytes: None,
            scratch_bytes: None,
        }
    }

    /// The same with the process's peak so far and the states' scratch (`scratch` bytes)
    /// after their runs beside it.
    pub(crate) fn measured(mut self, scratch: u64) -> Self {
        self.measured_peak_bytes = resident().map(|(_, peak)| peak);
        self.scratch_bytes = Some(scratch);
        self
    }
}

/// The resident set now, the baseline of a prediction made before a load.
pub(crate) fn baseline() -> Option<u64> {
    resident().map(|(now, _)| now)
}
