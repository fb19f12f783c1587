//! [`Decoded`]: a program file verified by `kiln-format` and every method of it decoded
//! into a plan, as a [`crate::Program`] holds it; what a method loads from.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::arena::ConstBuf;
use crate::compile::bound::Constants;
use crate::data::{NamedDataSource, ProgramData};
use crate::error::{Error, Result};
use crate::load_times::LoadTimes;
use crate::mapped::MappedFile;
use crate::options::LoadOptions;
use crate::plan::{self, MethodPlan};
use crate::value::Storage;

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

    /// Drops the resident pages of `range` of the bytes ([`MappedFile::release`]); the
    /// bytes stay readable. Bytes handed over by the caller are kept whole: pages of a heap
    /// buffer cannot be given back without losing their contents.
    pub fn release(&self, range: Range<usize>) {
        if let ProgramFile::Mapped(m) = self {
            m.release_range(range);
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
    /// The method's plan was refused; [`Decoded::plan`] decodes it again for the typed error
    /// (which is not `Clone`), so callers can match on its kind.
    Plan,
    /// Its XNNPACK delegates could not be lowered.
    Delegates(String),
}

/// A program file as decoded at open: what every method of it loads from.
pub(crate) struct Decoded {
    pub file: ProgramFile,
    pub sources: Vec<Arc<dyn NamedDataSource>>,
    /// `Program.named_data`: key -> the bytes of its segment in the file.
    pub named: HashMap<String, Range<usize>>,
    /// Each method decoded at load (or why it could not be).
    pub methods: Vec<(String, std::result::Result<Arc<MethodPlan>, DecodeFailure>)>,
    pub options: LoadOptions,
    /// How long mapping, verifying and decoding took (the method stages left zero).
    pub times: LoadTimes,
}

impl Decoded {
    /// Where a method's constants are: this file, `made` (the method's constants made at
    /// load) and the external data sources.
    pub fn constants<'a>(&'a self, made: &'a [ConstBuf]) -> Constants<'a> {
        Constants { file: self.file.bytes(), made, sources: &self.sources, inputs: &[] }
    }

    /// Gives back to the OS the resident pages of the `len` bytes of a constant stored at
    /// `storage` in the program file or an external source, once a compiled step has packed
    /// or folded it: they are read again (from the page cache) only by a step that reads
    /// them in place, or by a later load. Constants made at load are left alone.
    pub fn release_constant(&self, storage: Storage, len: usize) {
        match storage {
            Storage::File { offset } => self.file.release(offset..offset.saturating_add(len)),
            Storage::Ext { source, offset } => {
                if let Some(s) = self.sources.get(source as usize) {
                    s.release(offset..offset.saturating_add(len));
                }
            }
            Storage::Const { .. }
            | Storage::Buf { .. }
            | Storage::Input { .. }
            | Storage::Empty => {}
        }
    }

    /// Verifies `file` and decodes every method of it (lowering XNNPACK delegates into kernel
    /// calls unless `options` has a backend for them).
    /// `map` is the time the file took to map (or read), for [`Decoded::times`].
    pub fn open(
        file: ProgramFile,
        sources: Vec<Arc<dyn NamedDataSource>>,
        options: LoadOptions,
        map: Duration,
    ) -> Result<Decoded> {
        let path = file.name();
        let mut named = HashMap::new();
        let started = Instant::now();
        let mut times = LoadTimes { map, ..LoadTimes::default() };
        let methods = {
            let bytes = file.bytes();
            let pte = kiln_format::pte::Program::open(bytes)
                .map_err(|source| Error::Format { path: path.clone(), source })?;
            times.verify = started.elapsed();
            for (key, _) in pte.named_data() {
                let data = pte
                    .named_data_bytes(key)
                    .map_err(|source| Error::Format { path: path.clone(), source })?;
                let start = (data.as_ptr() as usize).wrapping_sub(bytes.as_ptr() as usize);
                named.entry(key.to_string()).or_insert(start..start + data.len());
            }
            let release = |range: Range<usize>| file.release(range);
            let data =
                ProgramData { file: bytes, named: &named, sources: &sources, release: &release };
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
        // The plans own what they need of the verified structure, and the pages verification
        // and the delegates' lowering read (converted weights among them) are read again only
        // by a method's load, which releases what it packs: none of them need stay resident.
        file.release(0..file.bytes().len());
        times.decode = started.elapsed() - times.verify;
        Ok(Decoded { file, sources, named, methods, options, times })
    }

    /// Method names in file order.
    pub fn method_names(&self) -> Vec<&str> {
        self.methods.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// Method `name`'s plan, or why it has none.
    pub fn plan(&self, name: &str) -> Result<Arc<MethodPlan>> {
        match self.methods.iter().find(|(n, _)| n == name) {
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
        let path = self.file.name();
        let pte = match kiln_format::pte::Program::open(self.file.bytes()) {
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
}
