//! [`Program`]: a verified, memory-mapped `.pte`, shareable across threads.

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use kiln_kernels::compute::threads::Threads;

use crate::cores::default_thread_count;
use crate::data::{NamedDataSource, ProgramData, PtdFile};
use crate::delegate::BackendRegistry;
use crate::error::{Error, Result};
use crate::io::{TensorMeta, ValueMeta};
use crate::mapped::MappedFile;
use crate::method::{Compiled, Method};
use crate::plan::{self, MethodPlan, ValueDef};
use crate::registry::KernelRegistry;

/// The most [`default_memory_limit`] allows: 8 GiB.
pub const MAX_DEFAULT_MEMORY_LIMIT: u64 = 8 << 30;

/// The memory one loaded method may take unless told otherwise (planned arenas, the constants
/// it owns, the compiled steps' prepared weights and the compiled memory plan, counted
/// together): the smaller of
/// [`MAX_DEFAULT_MEMORY_LIMIT`] and half the machine's memory (`MemTotal` of `/proc/meminfo`;
/// the cap alone where that cannot be read).
pub fn default_memory_limit() -> u64 {
    static LIMIT: OnceLock<u64> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| mem_total(&m));
        total.map_or(MAX_DEFAULT_MEMORY_LIMIT, |t| (t / 2).min(MAX_DEFAULT_MEMORY_LIMIT))
    })
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
    let kib = line.trim().strip_suffix("kB")?.trim().parse::<u64>().ok()?;
    kib.checked_mul(1024)
}
/// ExecuTorch's `ET_MAX_INSTRUCTIONS`: instructions one `execute` may run.
pub const DEFAULT_INSTRUCTION_LIMIT: u64 = 10_000_000;

/// Options for loading methods.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Kernels to resolve operators against.
    pub kernels: KernelRegistry,
    /// Backends for delegates.
    pub backends: BackendRegistry,
    /// Most bytes a loaded method may take, all its memory counted together (default:
    /// [`default_memory_limit`]). Its memory plan is checked against it before anything is
    /// allocated.
    pub memory_limit: u64,
    /// Most instructions one `execute` may run.
    pub instruction_limit: u64,
    /// Whether methods go through the compile stage's rewrites (fusion, folding, prepared
    /// kernels); off runs every instruction as the interpreter does, for bisecting.
    pub compile: bool,
    /// The threads loaded methods split large kernels over. The default is one pool shared
    /// by the process, of [`default_thread_count`] threads (one per big core this process
    /// may run on).
    pub threads: Threads,
}

/// The process-wide pool of [`LoadOptions::default`], started on first use (no pool if the
/// system refuses the threads).
fn default_threads() -> Threads {
    static POOL: OnceLock<Threads> = OnceLock::new();
    POOL.get_or_init(|| Threads::new(default_thread_count().threads).unwrap_or_default()).clone()
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            kernels: KernelRegistry::builtin().clone(),
            backends: BackendRegistry::new(),
            memory_limit: default_memory_limit(),
            instruction_limit: DEFAULT_INSTRUCTION_LIMIT,
            compile: true,
            threads: default_threads(),
        }
    }
}

/// The program's bytes: a memory map, or bytes handed over by the caller.
pub(crate) enum ProgramFile {
    Mapped(MappedFile),
    Owned { name: String, bytes: Vec<u8> },
}

impl ProgramFile {
    pub fn bytes(&self) -> &[u8] {
        match self {
            ProgramFile::Mapped(m) => m.bytes(),
            ProgramFile::Owned { bytes, .. } => bytes,
        }
    }

    pub fn name(&self) -> String {
        match self {
            ProgramFile::Mapped(m) => m.path().display().to_string(),
            ProgramFile::Owned { name, .. } => name.clone(),
        }
    }
}

/// Why a method could not be decoded when the program loaded.
pub(crate) enum DecodeFailure {
    /// The method's plan was refused; [`Program::plan`] decodes it again for the typed error
    /// (which is not `Clone`), so callers can match on its kind.
    Plan,
    /// Its XNNPACK delegates could not be lowered.
    Delegates(String),
}

pub(crate) struct ProgramInner {
    pub file: ProgramFile,
    pub sources: Vec<Arc<dyn NamedDataSource>>,
    /// `Program.named_data`: key -> the bytes of its segment in the file.
    pub named: HashMap<String, Range<usize>>,
    /// Each method decoded at load (or why it could not be).
    pub methods: Vec<(String, std::result::Result<Arc<MethodPlan>, DecodeFailure>)>,
    pub options: LoadOptions,
    /// The methods loaded and still alive, by name: a new load of one is a new execution
    /// state of it, sharing its compiled steps and prepared weights.
    pub loaded: Mutex<HashMap<String, Weak<Compiled>>>,
}

/// A loaded program: the mapped file, verified by `kiln-format`, with every method decoded.
/// Cheap to clone (an `Arc`); `Send + Sync`, so threads can share one and each load its own
/// [`Method`] (an execution state: states of one method share its compiled steps and packed
/// weights, see [`Program::method`]).
#[derive(Clone)]
pub struct Program {
    pub(crate) inner: Arc<ProgramInner>,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("file", &self.inner.file.name())
            .field("methods", &self.method_names())
            .finish()
    }
}

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

    /// Sets the load options (kernels, backends, limits).
    pub fn options(mut self, options: LoadOptions) -> Self {
        self.options = options;
        self
    }

    /// Maps, verifies and decodes the program.
    pub fn load(self, path: impl AsRef<Path>) -> Result<Program> {
        let path = path.as_ref();
        let file = MappedFile::open(path)?;
        Program::from_file(ProgramFile::Mapped(file), self.sources, self.options)
    }

    /// Verifies and decodes a program held in memory (`name` appears in errors). Constants
    /// that are not aligned for their dtype in `bytes` are copied at method load.
    pub fn load_bytes(self, name: &str, bytes: Vec<u8>) -> Result<Program> {
        let file = ProgramFile::Owned { name: name.to_string(), bytes };
        Program::from_file(file, self.sources, self.options)
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

    fn from_file(
        file: ProgramFile,
        sources: Vec<Arc<dyn NamedDataSource>>,
        options: LoadOptions,
    ) -> Result<Program> {
        let path = file.name();
        let mut named = HashMap::new();
        let methods = {
            let bytes = file.bytes();
            let pte = kiln_format::pte::Program::open(bytes)
                .map_err(|source| Error::Format { path: path.clone(), source })?;
            for (key, _) in pte.named_data() {
                let data = pte
                    .named_data_bytes(key)
                    .map_err(|source| Error::Format { path: path.clone(), source })?;
                let start = (data.as_ptr() as usize).wrapping_sub(bytes.as_ptr() as usize);
                named.entry(key.to_string()).or_insert(start..start + data.len());
            }
            let data = ProgramData { file: bytes, named: &named, sources: &sources };
            pte.methods()
                .map(|m| {
                    let plan = plan::decode(&pte, &m, &path).map_err(|_| DecodeFailure::Plan);
                    // XNNPACK delegates run as kiln kernels unless a backend is registered
                    // for them.
                    let inline = options.backends.get(crate::xnnpack::BACKEND_ID).is_none();
                    let plan = plan
                        .and_then(|mut p| {
                            if inline {
                                crate::xnnpack::inline_delegates(&mut p, bytes, &data)
                                    .map_err(DecodeFailure::Delegates)?;
                            }
                            Ok(p)
                        })
                        .map(Arc::new);
                    (m.name().to_string(), plan)
                })
                .collect()
        };
        let loaded = Mutex::new(HashMap::new());
        let inner = ProgramInner { file, sources, named, methods, options, loaded };
        Ok(Program { inner: Arc::new(inner) })
    }

    /// Method names in file order.
    pub fn method_names(&self) -> Vec<&str> {
        self.inner.methods.iter().map(|(n, _)| n.as_str()).collect()
    }

    pub(crate) fn plan(&self, name: &str) -> Result<Arc<MethodPlan>> {
        match self.inner.methods.iter().find(|(n, _)| n == name) {
            Some((_, Ok(plan))) => Ok(plan.clone()),
            Some((_, Err(DecodeFailure::Delegates(reason)))) => Err(Error::InvalidProgram {
                method: name.to_string(),
                location: "method".into(),
                reason: reason.clone(),
            }),
            Some((_, Err(DecodeFailure::Plan))) => Err(self.decode_error(name)),
            None => Err(Error::MethodNotFound {
                name: name.to_string(),
                available: self.method_names().iter().map(|s| s.to_string()).collect(),
            }),
        }
    }

    /// The error decoding method `name` gave at load, decoded again (the file is verified
    /// and the method decoded as they were then, so the same error comes back).
    fn decode_error(&self, name: &str) -> Error {
        let path = self.inner.file.name();
        let pte = match kiln_format::pte::Program::open(self.inner.file.bytes()) {
            Ok(pte) => pte,
            Err(source) => return Error::Format { path, source },
        };
        let decoded =
            pte.methods().find(|m| m.name() == name).map(|m| plan::decode(&pte, &m, &path));
        match decoded {
            Some(Err(e)) => e,
            _ => Error::InvalidProgram {
                method: name.to_string(),
                location: "method".into(),
                reason: "could not be decoded when the program loaded".into(),
            },
        }
    }

    /// Loads method `name`: memory plan, constants, resolved kernels and delegates, compiled
    /// steps with their weights packed. While a [`Method`] of that name loaded from this
    /// program is alive, this is another execution state of it ([`Method::another`]): its
    /// own memory, the compiled steps, packed weights and constants shared, not made again.
    /// Each thread running a method at the same time takes its own state.
    pub fn method(&self, name: &str) -> Result<Method> {
        let plan = self.plan(name)?;
        // Held while loading: two threads asking at once compile the method once.
        let mut loaded = self.inner.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fixed) = loaded.get(name).and_then(Weak::upgrade) {
            return Method::with_state(fixed);
        }
        let method = Method::load(self.clone(), plan)?;
        loaded.insert(name.to_string(), Arc::downgrade(&method.fixed));
        Ok(method)
    }

    /// The declared inputs of method `name`.
    pub fn method_inputs(&self, name: &str) -> Result<Vec<ValueMeta>> {
        let plan = self.plan(name)?;
        Ok(plan.inputs.iter().map(|&i| meta(&plan, i)).collect())
    }

    /// The declared outputs of method `name`.
    pub fn method_outputs(&self, name: &str) -> Result<Vec<ValueMeta>> {
        let plan = self.plan(name)?;
        Ok(plan.outputs.iter().map(|&i| meta(&plan, i)).collect())
    }

    /// Operators of method `name` (`name.overload`) that have no kernel in the program's
    /// registry.
    pub fn missing_operators(&self, name: &str) -> Result<Vec<String>> {
        let plan = self.plan(name)?;
        Ok(plan
            .operators
            .iter()
            .filter(|o| !self.inner.options.kernels.contains(o))
            .cloned()
            .collect())
    }
}

pub(crate) fn meta(plan: &MethodPlan, i: u32) -> ValueMeta {
    match plan.values.get(i as usize) {
        Some(ValueDef::Tensor(t)) => ValueMeta::Tensor(TensorMeta {
            dtype: t.dtype,
            sizes: t.shape.sizes().to_vec(),
            dim_order: t.shape.dim_order().to_vec(),
            dynamic: t.dynamic,
        }),
        Some(ValueDef::Int(_)) => ValueMeta::Int,
        Some(ValueDef::Double(_)) => ValueMeta::Double,
        Some(ValueDef::Bool(_)) => ValueMeta::Bool,
        Some(ValueDef::String(_)) => ValueMeta::String,
        Some(ValueDef::None) | None => ValueMeta::None,
        Some(ValueDef::IntList(_)) => ValueMeta::List("int_list"),
        Some(ValueDef::DoubleList(_)) => ValueMeta::List("double_list"),
        Some(ValueDef::BoolList(_)) => ValueMeta::List("bool_list"),
        Some(ValueDef::TensorList(_)) => ValueMeta::List("tensor_list"),
        Some(ValueDef::OptionalTensorList(_)) => ValueMeta::List("optional_tensor_list"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_total_reads_meminfo() {
        let m = "MemTotal:       24575992 kB\nMemFree:        20000000 kB\n";
        assert_eq!(mem_total(m), Some(24575992 * 1024));
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
        assert!(default_memory_limit() <= MAX_DEFAULT_MEMORY_LIMIT);
        assert!(default_memory_limit() > 0);
    }
}
