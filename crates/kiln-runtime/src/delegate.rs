//! Delegates: the [`Backend`] trait and the registry that maps `BackendDelegate.id` to a backend.
//!
//! A backend turns a delegate's processed blob into a [`DelegateHandle`] at method load; a
//! `DelegateCall` then runs the handle with the call's values (inputs first, then the
//! [`DelegateHandle::num_outputs`] outputs), using the same value types as kernels.
//!
//! kiln's own XNNPACK support is not a handle: `XnnpackBackend` delegates are lowered into
//! the method's kernel calls when the program is decoded ([`crate::xnnpack`]), unless a
//! backend is registered under that id, which then takes them.

use std::collections::HashMap;
use std::sync::Arc;

use kiln_kernels::{Arg, KernelContext, Out};

use crate::data::NamedDataMap;
pub use crate::error::BackendError;

/// What a backend receives at delegate init.
#[derive(Debug)]
pub struct DelegateInit<'a> {
    /// The method name.
    pub method: &'a str,
    /// The delegate's index in the method.
    pub index: usize,
    /// The processed blob (inline or segment data of the program).
    pub processed: &'a [u8],
    /// Compile specs (key, value).
    pub compile_specs: &'a [(String, Vec<u8>)],
    /// The program's named data (`.pte` named segments, then `.ptd` / `.irpa` sources).
    pub named_data: &'a dyn NamedDataMap,
}

impl std::fmt::Debug for dyn NamedDataMap + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NamedDataMap")
    }
}

/// A backend (ExecuTorch `BackendInterface`), registered under the id programs name it by.
pub trait Backend: Send + Sync {
    /// The id, equal to `BackendDelegate.id` (`XnnpackBackend`, ...).
    fn id(&self) -> &str;
    /// Whether the backend can run on this machine.
    fn is_available(&self) -> bool {
        true
    }
    /// Prepares one delegate of a method.
    fn init(&self, init: &DelegateInit<'_>) -> Result<Box<dyn DelegateHandle>, BackendError>;
}

/// An initialised delegate, owned by one loaded method.
pub trait DelegateHandle: Send {
    /// How many of the call's trailing values are outputs.
    fn num_outputs(&self) -> usize;
    /// Runs the delegate: `args` holds the inputs (outputs appear as [`Arg::Output`]), `outs`
    /// the outputs in order.
    fn execute(
        &mut self,
        ctx: &mut KernelContext,
        args: &[Arg<'_>],
        outs: &mut [Out<'_, '_>],
    ) -> Result<(), BackendError>;
}

/// Backends by id.
#[derive(Clone, Default)]
pub struct BackendRegistry {
    map: HashMap<String, Arc<dyn Backend>>,
}

impl std::fmt::Debug for BackendRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendRegistry").field("ids", &self.ids()).finish()
    }
}

impl BackendRegistry {
    /// An empty registry (XNNPACK delegates need none: kiln lowers them itself).
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a backend under its id.
    pub fn register(&mut self, backend: Arc<dyn Backend>) {
        self.map.insert(backend.id().to_string(), backend);
    }

    /// The backend for `id`, if registered and available.
    pub fn get(&self, id: &str) -> Option<&Arc<dyn Backend>> {
        self.map.get(id).filter(|b| b.is_available())
    }

    /// Registered ids, sorted.
    pub fn ids(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.map.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }
}
