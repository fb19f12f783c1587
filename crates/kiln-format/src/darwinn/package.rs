//! Opening a DarwiNN `Package` and the executables nested inside it, with verification.
//!
//! Nesting: `Package` (identifier `DWN1`) -> `serialized_multi_executable: [ubyte]` (a
//! MultiExecutable flatbuffer, see [`super::multi`]) -> one `Executable` flatbuffer per string.
//! Every level is verified before it is read: the Package and each Executable by the flatbuffers
//! verifier with size-derived caps, the MultiExecutable by hand (its strings hold binary data),
//! and every `multi_chip_package[i].serialized_package` as a nested Package.
//!
//! Like libedgetpu, a missing `DWN1` identifier is not an error (the driver only warns); it is
//! reported through [`Package::has_identifier`].

use super::multi::MultiExecutable;
use super::schema;
use crate::error::{Error, Result};
use crate::tflite::{offset_in, verifier_options};

const FORMAT: &str = "darwinn";

/// The Package file identifier.
pub const IDENTIFIER: &[u8; 4] = b"DWN1";

/// How deep `multi_chip_package` nesting is followed during verification.
pub const MAX_NESTED_PACKAGES: usize = 4;

/// A verified Package with its executables.
#[derive(Clone)]
pub struct Package<'a> {
    data: &'a [u8],
    root: schema::Package<'a>,
    executables: Vec<Executable<'a>>,
    multi_offset: Option<u64>,
}

/// A verified Executable.
#[derive(Clone, Copy)]
pub struct Executable<'a> {
    data: &'a [u8],
    root: schema::Executable<'a>,
    offset: u64,
}

impl<'a> Executable<'a> {
    /// Verifies `data` as an Executable flatbuffer (no identifier). `offset` is where the blob
    /// sits in the Package, for messages and display.
    pub fn open(data: &'a [u8], offset: u64) -> Result<Self> {
        let opts = verifier_options(data.len());
        let root = flatbuffers::root_with_opts::<schema::Executable>(&opts, data)
            .map_err(|source| Error::Flatbuffer { format: "darwinn.executable", source })?;
        Ok(Executable { data, root, offset })
    }

    /// The verified root table: every field and nested table of the schema.
    pub fn root(&self) -> schema::Executable<'a> {
        self.root
    }

    /// The serialized executable.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Offset of the executable inside its Package.
    pub fn offset_in_package(&self) -> u64 {
        self.offset
    }

    /// `parameters`, empty when absent.
    pub fn parameters(&self) -> &'a [u8] {
        self.root.parameters().map(|v| v.bytes()).unwrap_or_default()
    }

    /// Offset of `parameters` inside the executable (None when absent).
    pub fn parameters_offset(&self) -> Option<u64> {
        self.root.parameters().and_then(|v| offset_in(self.data, v.bytes()))
    }

    /// The instruction bitstreams' bytes, in order (an absent bitstream is empty).
    pub fn bitstreams(&self) -> Vec<&'a [u8]> {
        self.root
            .instruction_bitstreams()
            .map(|v| {
                v.iter().map(|b| b.bitstream().map(|x| x.bytes()).unwrap_or_default()).collect()
            })
            .unwrap_or_default()
    }

    /// The input layers, in order.
    pub fn input_layers(&self) -> Vec<schema::Layer<'a>> {
        self.root.input_layers().map(|v| v.iter().collect()).unwrap_or_default()
    }

    /// The output layers, in order.
    pub fn output_layers(&self) -> Vec<schema::Layer<'a>> {
        self.root.output_layers().map(|v| v.iter().collect()).unwrap_or_default()
    }

    /// The layer (input or output) named `name`.
    pub fn layer(&self, name: &str) -> Option<(schema::Layer<'a>, bool)> {
        let find = |v: Vec<schema::Layer<'a>>| v.into_iter().find(|l| l.name() == Some(name));
        find(self.output_layers())
            .map(|l| (l, false))
            .or_else(|| find(self.input_layers()).map(|l| (l, true)))
    }
}

/// True when `bytes` carry the `DWN1` identifier of a bare package (detection only: a file
/// may still fail [`Package::open`]).
pub fn is_package(bytes: &[u8]) -> bool {
    bytes.get(4..8) == Some(&IDENTIFIER[..])
}

impl<'a> Package<'a> {
    /// Verifies `data` as a Package and every executable inside it.
    pub fn open(data: &'a [u8]) -> Result<Self> {
        // Total bytes nested verification may walk: nested packages can share bytes, so without
        // a budget a small file could demand exponential work.
        let mut budget = (data.len() as u64).saturating_mul(8).saturating_add(1 << 16);
        let root = verify_package(data, 0, &mut budget)?;
        let mut executables = Vec::new();
        let mut multi_offset = None;
        if let Some(me) = root.serialized_multi_executable() {
            let me_bytes = me.bytes();
            multi_offset = offset_in(data, me_bytes);
            if !me_bytes.is_empty() {
                let multi = MultiExecutable::parse(me_bytes).map_err(|e| {
                    Error::invalid(
                        FORMAT,
                        "serialized_multi_executable",
                        multi_offset,
                        format!("MultiExecutable verification failed: {e}"),
                    )
                })?;
                let base = multi_offset.unwrap_or(0);
                for (i, blob) in multi.executables.iter().enumerate() {
                    let at = base + blob.offset;
                    let exe = Executable::open(blob.bytes, at).map_err(|e| {
                        Error::invalid(
                            FORMAT,
                            format!("serialized_multi_executable.serialized_executables[{i}]"),
                            Some(at),
                            format!("Executable verification failed: {e}"),
                        )
                    })?;
                    executables.push(exe);
                }
            }
        }
        Ok(Package { data, root, executables, multi_offset })
    }

    /// The verified root table.
    pub fn root(&self) -> schema::Package<'a> {
        self.root
    }

    /// The serialized package.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// True when bytes 4..8 are `DWN1` (libedgetpu only warns otherwise).
    pub fn has_identifier(&self) -> bool {
        is_package(self.data)
    }

    /// The executables, in `serialized_executables` order.
    pub fn executables(&self) -> &[Executable<'a>] {
        &self.executables
    }

    /// Offset of the MultiExecutable bytes inside the package, when present.
    pub fn multi_executable_offset(&self) -> Option<u64> {
        self.multi_offset
    }

    /// The MultiExecutable bytes (empty when absent).
    pub fn multi_executable_bytes(&self) -> &'a [u8] {
        self.root.serialized_multi_executable().map(|v| v.bytes()).unwrap_or_default()
    }
}

fn verify_package<'d>(
    data: &'d [u8],
    depth: usize,
    budget: &mut u64,
) -> Result<schema::Package<'d>> {
    *budget = budget.checked_sub(data.len() as u64).ok_or_else(|| Error::Limit {
        format: FORMAT,
        what: "bytes walked verifying nested multi_chip_package entries".into(),
        value: data.len() as u64,
        limit: *budget,
    })?;
    let opts = verifier_options(data.len());
    let root = flatbuffers::root_with_opts::<schema::Package>(&opts, data)
        .map_err(|source| Error::Flatbuffer { format: FORMAT, source })?;
    if let Some(nested) = root.multi_chip_package() {
        for (i, sp) in nested.iter().enumerate() {
            let Some(bytes) = sp.serialized_package() else { continue };
            if depth + 1 > MAX_NESTED_PACKAGES {
                return Err(Error::Limit {
                    format: FORMAT,
                    what: "multi_chip_package nesting".into(),
                    value: depth as u64 + 1,
                    limit: MAX_NESTED_PACKAGES as u64,
                });
            }
            verify_package(bytes.bytes(), depth + 1, budget).map_err(|e| {
                Error::invalid(
                    FORMAT,
                    format!("multi_chip_package[{i}].serialized_package"),
                    offset_in(data, bytes.bytes()),
                    e.to_string(),
                )
            })?;
        }
    }
    Ok(root)
}
