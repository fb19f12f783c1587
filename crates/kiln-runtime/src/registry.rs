//! The kernel registry: `name.overload` -> kernel, built from [`kiln_kernels::kernels`].

use std::collections::HashMap;
use std::sync::OnceLock;

use kiln_kernels::KernelDef;

/// Kernels by `name.overload` (`aten::add.out`; just `name` for PyTorch's default overload).
#[derive(Clone, Debug, Default)]
pub struct KernelRegistry {
    map: HashMap<&'static str, &'static KernelDef>,
}

impl KernelRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every kernel of `kiln-kernels`, built once per process.
    pub fn builtin() -> &'static KernelRegistry {
        static REG: OnceLock<KernelRegistry> = OnceLock::new();
        REG.get_or_init(|| {
            let mut r = KernelRegistry::new();
            for def in kiln_kernels::kernels() {
                r.register(def);
            }
            r
        })
    }

    /// Adds (or replaces) a kernel under its name.
    pub fn register(&mut self, def: &'static KernelDef) {
        self.map.insert(def.name, def);
    }

    /// The kernel for `name` (`name.overload`).
    pub fn get(&self, name: &str) -> Option<&'static KernelDef> {
        self.map.get(name).copied()
    }

    /// Whether a kernel is registered under `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.map.contains_key(name)
    }

    /// Number of kernels.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the registry is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Registered names, sorted.
    pub fn names(&self) -> Vec<&'static str> {
        let mut v: Vec<_> = self.map.keys().copied().collect();
        v.sort_unstable();
        v
    }
}
