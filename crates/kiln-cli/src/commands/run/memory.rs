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
    /// What the process holds beside the method's buffers, read once the method is loaded:
    /// its resident set then less the packed weights and the constants made (its code and
    /// libraries as far as loading touched them, the decoded program's tables, the
    /// allocator's heap; 0 where the OS does not say).
    pub process_bytes: u64,
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
    /// The method's part of the prediction, for one state: what `--max-memory` bounds.
    pub method_bytes: u64,
    /// The process and the method's parts for `states` states: the peak resident set
    /// predicted for the process.
    pub predicted_peak_bytes: u64,
    /// The process's peak resident set when the report was made (`VmHWM`), once it has run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub measured_peak_bytes: Option<u64>,
    /// What the compiled steps' scratch buffers of the states hold after the runs so far
    /// (allocated at the first execute; not in the prediction).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scratch_bytes: Option<u64>,
}

/// The process's resident set around a load: before it, and beside the loaded method.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Process {
    before: Option<u64>,
    beside: Option<u64>,
}

impl Process {
    /// The resident set now, before a load.
    pub(crate) fn before_load() -> Self {
        Process { before: resident().map(|(now, _)| now), beside: None }
    }

    /// The same with what the process holds beside a method just loaded (with `footprint`):
    /// its resident set now less the buffers the load filled (packed weights, constants
    /// made; a state's activations are not yet touched).
    pub(crate) fn loaded(self, footprint: &Footprint) -> Self {
        let filled = footprint.packed_weights + footprint.constants_made;
        let now = resident().map(|(now, _)| now);
        let beside = now.map(|n| n.saturating_sub(filled).max(self.before.unwrap_or(0)));
        Process { beside, ..self }
    }
}

impl MemoryReport {
    /// The prediction for `states` execution states of a method with `footprint`, in a
    /// process measured as `process`.
    pub(crate) fn predict(process: Process, footprint: Footprint, states: usize) -> Self {
        let activations_bytes = footprint.activations * states as u64;
        let process_bytes = process.beside.or(process.before).unwrap_or(0);
        let method_bytes = footprint.total();
        MemoryReport {
            baseline_bytes: process.before.unwrap_or(0),
            process_bytes,
            activations_bytes,
            states,
            packed_weights_bytes: footprint.packed_weights,
            constants_made_bytes: footprint.constants_made,
            mapped_in_place_bytes: footprint.mapped_in_place,
            gathered_tables_bytes: footprint.gathered_tables,
            method_bytes,
            predicted_peak_bytes: process_bytes + method_bytes - footprint.activations
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
