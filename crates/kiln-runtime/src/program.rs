//! [`Program`]: a verified, memory-mapped `.pte`, shareable across threads.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use crate::compiled::Compiled;
use crate::data::{NamedDataSource, PtdFile};
use crate::decoded::{Decoded, ProgramFile};
use crate::error::{Error, Result};
use crate::io::ValueMeta;
use crate::irpa_data::irpa_sources;
use crate::mapped::MappedFile;
use crate::method::Method;
use crate::options::LoadOptions;
use crate::plan::MethodPlan;

/// A loaded program: the mapped file, verified by `kiln-format`, with every method decoded.
/// Cheap to clone (an `Arc`); `Send + Sync`, so threads can share one and each load its own
/// [`Method`] (an execution state: states of one method share its compiled steps and packed
/// weights, see [`Program::method`]).
#[derive(Clone)]
pub struct Program {
    pub(crate) decoded: Arc<Decoded>,
    /// The methods loaded and still alive, by name: a new load of one is a new execution
    /// state of it, sharing its compiled steps and prepared weights.
    loaded: Arc<Mutex<HashMap<String, Weak<Compiled>>>>,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("file", &self.decoded.file.name())
            .field("methods", &self.method_names())
            .finish()
    }
}

/// The size from which [`ProgramBuilder::load_bytes`] maps a program's bytes from a temporary
/// file rather than keeping them on the heap (1 MiB: a smaller program holds too little to
/// give back to be worth a file per load, as for a fuzzer loading thousands a second).
pub const SPILL_BYTES: usize = 1 << 20;

/// Builds a [`Program`] with external data and options.
#[derive(Debug, Default)]
pub struct ProgramBuilder {
    sources: Vec<Arc<dyn NamedDataSource>>,
    options: LoadOptions,
}

impl ProgramBuilder {
    /// Adds external data from a `.ptd` file.
    pub fn ptd(mut self, path: impl AsRef<Path>) -> Result<Self> {
        self.sources.push(Arc::new(PtdFile::open(path)?));
        Ok(self)
    }

    /// Adds any named data source (searched in the order added).
    pub fn data_source(mut self, source: Arc<dyn NamedDataSource>) -> Self {
        self.sources.push(source);
        self
    }

    /// Adds the external data file `path` for the program at `program`: a `.ptd`, or an
    /// `.irpa` archive (with the splats it expands for the program's external tensors), told
    /// apart by their magic. An error names a file of any other kind.
    pub fn data_file(self, path: impl AsRef<Path>, program: &Path) -> Result<Self> {
        let path = path.as_ref();
        let refused = |reason: String| Error::DataFile { path: path.display().to_string(), reason };
        let mut head = Vec::with_capacity(16);
        std::fs::File::open(path)
            .and_then(|f| f.take(16).read_to_end(&mut head))
            .map_err(|e| refused(e.to_string()))?;
        match kiln_format::detect(&head) {
            Some(kiln_format::Kind::Irpa) => {
                Ok(irpa_sources(path, program)?.into_iter().fold(self, |b, s| b.data_source(s)))
            }
            Some(kiln_format::Kind::Ptd) => self.ptd(path),
            kind => Err(refused(format!(
                "external data is a .ptd or an .irpa file, not {}",
                kind.map_or("an unrecognised file".to_string(), |k| format!("a {k} file"))
            ))),
        }
    }

    /// Sets the load options (kernels, backends, limits).
    pub fn options(mut self, options: LoadOptions) -> Self {
        self.options = options;
        self
    }

    /// Maps, verifies and decodes the program.
    pub fn load(self, path: impl AsRef<Path>) -> Result<Program> {
        let path = path.as_ref();
        let started = Instant::now();
        let file = ProgramFile::Mapped(MappedFile::open(path)?);
        Ok(Program::new(Decoded::open(file, self.sources, self.options, started.elapsed())?))
    }

    /// Verifies and decodes a program held in memory (`name` appears in errors). Bytes of
    /// [`SPILL_BYTES`] or more are written to an unlinked temporary file and mapped
    /// ([`MappedFile::spill`]; a write of their size), so that, as for a program loaded from
    /// a path, the pages of the constants a method load packs are given back and the process
    /// holds its packed weights once. Smaller programs, and any where no temporary file can
    /// be written, keep their bytes as they are, beside the packed weights. Constants that are
    /// not aligned for their dtype are copied at method load.
    pub fn load_bytes(self, name: &str, bytes: Vec<u8>) -> Result<Program> {
        let started = Instant::now();
        let spilled = (bytes.len() >= SPILL_BYTES).then(|| MappedFile::spill(name, &bytes));
        let file = match spilled {
            Some(Ok(map)) => {
                drop(bytes);
                ProgramFile::Mapped(map)
            }
            _ => ProgramFile::Owned { name: name.to_string(), bytes },
        };
        Ok(Program::new(Decoded::open(file, self.sources, self.options, started.elapsed())?))
    }
}

impl Program {
    /// Maps and fully verifies `path` (no external data, default options).
    pub fn load(path: impl AsRef<Path>) -> Result<Program> {
        Program::builder().load(path)
    }

    /// Maps `path` with external constants from the `.ptd` file `ptd`.
    pub fn load_with_data(path: impl AsRef<Path>, ptd: impl AsRef<Path>) -> Result<Program> {
        Program::builder().ptd(ptd)?.load(path)
    }

    /// A builder for external data sources and options.
    pub fn builder() -> ProgramBuilder {
        ProgramBuilder::default()
    }

    fn new(decoded: Decoded) -> Program {
        Program { decoded: Arc::new(decoded), loaded: Arc::default() }
    }

    /// The program's bytes as verified: the mapped file, or the bytes it was loaded from
    /// (their pages read in again where a load gave them back).
    pub fn file_bytes(&self) -> &[u8] {
        self.decoded.file.bytes()
    }

    /// Method names in file order.
    pub fn method_names(&self) -> Vec<&str> {
        self.decoded.method_names()
    }

    pub(crate) fn plan(&self, name: &str) -> Result<Arc<MethodPlan>> {
        self.decoded.plan(name)
    }

    /// Loads method `name`: memory plan, constants, resolved kernels and delegates, compiled
    /// steps with their weights packed. While a [`Method`] of that name loaded from this
    /// program is alive, this is another execution state of it ([`Method::another`]): its
    /// own memory, the compiled steps, packed weights and constants shared, not made again.
    /// Each thread running a method at the same time takes its own state.
    pub fn method(&self, name: &str) -> Result<Method> {
        let plan = self.plan(name)?;
        // Held while loading: two threads asking at once compile the method once.
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fixed) = loaded.get(name).and_then(Weak::upgrade) {
            return Method::with_state(fixed);
        }
        let method = crate::load::load(self.decoded.clone(), plan)?;
        loaded.insert(name.to_string(), Arc::downgrade(&method.fixed));
        Ok(method)
    }

    /// The declared inputs of method `name`.
    pub fn method_inputs(&self, name: &str) -> Result<Vec<ValueMeta>> {
        let plan = self.plan(name)?;
        Ok(plan.inputs.iter().map(|&i| plan.meta(i)).collect())
    }

    /// The declared outputs of method `name`.
    pub fn method_outputs(&self, name: &str) -> Result<Vec<ValueMeta>> {
        let plan = self.plan(name)?;
        Ok(plan.outputs.iter().map(|&i| plan.meta(i)).collect())
    }

    /// Operators of method `name` (`name.overload`) that have no kernel in the program's
    /// registry.
    pub fn missing_operators(&self, name: &str) -> Result<Vec<String>> {
        let plan = self.plan(name)?;
        Ok(plan
            .operators
            .iter()
            .filter(|o| !self.decoded.options.kernels.contains(o))
            .cloned()
            .collect())
    }
}
