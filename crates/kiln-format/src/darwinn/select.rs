//! What libedgetpu decides after parsing a package (`PackageRegistry`, `driver.cc`): the
//! runtime-version check, the legal sets of executables, which one runs and which one caches
//! parameters, and when parameter caching has to run before an inference.

use std::collections::BTreeSet;

use super::{executable_type_name, Executable, Package};
use crate::error::{Error, Result};

const FORMAT: &str = "darwinn";

/// `kMinValidRuntimeVersion`: older packages only get a warning.
pub const MIN_VALID_RUNTIME_VERSION: i32 = 10;

/// `kCurrent` of the newest public libedgetpu (14, Coral "Grouper").
pub const CURRENT_RUNTIME_VERSION: i32 = 14;

/// Checks `min_runtime_version` against a runtime of version `runtime`. Returns a warning for
/// versions below [`MIN_VALID_RUNTIME_VERSION`] and the driver's FailedPrecondition as an error
/// when the package is newer than the runtime.
pub fn check_runtime_version(min_runtime_version: i32, runtime: i32) -> Result<Option<String>> {
    if min_runtime_version > runtime {
        return Err(Error::unsupported(
            FORMAT,
            "min_runtime_version",
            None,
            format!("Package requires runtime version ({min_runtime_version}), which is newer than this runtime version ({runtime})."),
        ));
    }
    if min_runtime_version < MIN_VALID_RUNTIME_VERSION {
        return Ok(Some(format!(
            "min_runtime_version {min_runtime_version} is below the minimum valid version {MIN_VALID_RUNTIME_VERSION}"
        )));
    }
    Ok(None)
}

/// The executables the driver uses from one package.
#[derive(Clone, Copy)]
pub struct Selection<'a> {
    /// The executable that runs inferences, and its index in the package.
    pub main: (usize, Executable<'a>),
    /// The PARAMETER_CACHING executable run before it when parameters are not cached.
    pub parameter_caching: Option<(usize, Executable<'a>)>,
}

/// Applies the driver's checks after parsing (`GetExecutablesFromBinary`, steps 3 to 6) for a
/// runtime of version `runtime`, then chooses the executables
/// (`GetMainExecutableFromExecutableMap` / `GetPCExecutableFromExecutableMap`). Returns the
/// selection and any warnings.
pub fn select<'a>(package: &Package<'a>, runtime: i32) -> Result<(Selection<'a>, Vec<String>)> {
    let root = package.root();
    let mut warnings = Vec::new();
    if !package.has_identifier() {
        warnings.push("package file identifier is not DWN1".to_string());
    }
    warnings.extend(check_runtime_version(root.min_runtime_version(), runtime)?);
    if root.virtual_chip_id() == -1 {
        return Err(Error::unsupported(
            FORMAT,
            "virtual_chip_id",
            None,
            "This is a multi-chip package.",
        ));
    }
    if package.multi_executable_bytes().is_empty() {
        return Err(Error::invalid(
            FORMAT,
            "serialized_multi_executable",
            None,
            "No executables to register.",
        ));
    }
    let exes = package.executables();
    if exes.is_empty() {
        return Err(Error::invalid(
            FORMAT,
            "serialized_multi_executable.serialized_executables",
            None,
            "No executables provided.",
        ));
    }
    let mut by_type: [Option<(usize, Executable<'a>)>; 3] = [None; 3];
    for (i, e) in exes.iter().enumerate() {
        let field = format!("serialized_executables[{i}]");
        if e.root().batch_size() < 1 {
            return Err(Error::invalid(
                FORMAT,
                format!("{field}.batch_size"),
                None,
                "Executable has invalid batch size.",
            ));
        }
        let t = e.root().type_();
        let slot = usize::try_from(t.0).ok().and_then(|k| by_type.get_mut(k)).ok_or_else(|| {
            Error::unsupported(
                FORMAT,
                format!("{field}.type"),
                None,
                format!(
                    "Found executable types that are not yet supported ({}).",
                    executable_type_name(t)
                ),
            )
        })?;
        if slot.is_some() {
            return Err(Error::invalid(
                FORMAT,
                format!("{field}.type"),
                None,
                "Multiple executables of the same type were found in the package.",
            ));
        }
        *slot = Some((i, *e));
    }
    let [sa, pc, eo] = by_type;
    let selection = match (exes, sa, pc, eo) {
        // One executable is the main one whatever its type.
        ([only], ..) => Selection { main: (0, *only), parameter_caching: None },
        ([_, _], None, Some(pc), Some(eo)) => Selection { main: eo, parameter_caching: Some(pc) },
        ([_, _, _], Some(sa), Some(_), Some(_)) => Selection { main: sa, parameter_caching: None },
        _ => {
            return Err(Error::invalid(
                FORMAT,
                "serialized_executables",
                None,
                "Invalid combination of executables in the package.",
            ));
        }
    };
    Ok((selection, warnings))
}

/// The order of submissions for one inference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Submission {
    /// Run package `package`'s PARAMETER_CACHING executable.
    CacheParameters {
        /// Caller's package id.
        package: usize,
    },
    /// Run package `package`'s main executable.
    Infer {
        /// Caller's package id.
        package: usize,
    },
}

/// The driver's parameter-caching state (`current_parameter_caching_token_` and the set of
/// packages whose parameters are cached).
#[derive(Clone, Debug, Default)]
pub struct CacheState {
    token: u64,
    cached: BTreeSet<usize>,
}

impl CacheState {
    /// The token whose parameters are resident (0 = none).
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Submits one inference of `selection` (identified by the caller as `package`) and returns
    /// what runs, in order, as `Driver::SubmitInferenceRequest` decides.
    pub fn submit(&mut self, package: usize, selection: &Selection<'_>) -> Result<Vec<Submission>> {
        let main_token = selection.main.1.root().parameter_caching_token();
        if main_token == 0 || main_token != self.token {
            self.token = 0;
            self.cached.clear();
        }
        let mut out = Vec::new();
        if let Some((_, pc)) = selection.parameter_caching {
            if !self.cached.contains(&package) {
                let token = pc.root().parameter_caching_token();
                if token == 0 {
                    return Err(Error::invalid(
                        FORMAT,
                        "parameter_caching_token",
                        None,
                        "Parameter caching tag is not set.",
                    ));
                }
                out.push(Submission::CacheParameters { package });
                self.token = token;
                self.cached.insert(package);
            }
        }
        out.push(Submission::Infer { package });
        Ok(out)
    }
}
