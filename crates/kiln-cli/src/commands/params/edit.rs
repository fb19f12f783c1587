//! The edit commands and the new-entry flags shared by `create` and `append`.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use kiln_format::irpa::builder::Plan;
use kiln_format::irpa::edit::{self, Patch};
use kiln_format::irpa::source::TensorType;
use kiln_format::irpa::tensor_metadata;
use kiln_format::irpa::transform::{self, Options};
use kiln_format::irpa::{Archive, BuildEntry, Payload};
use kiln_format::npy::Npy;
use kiln_runtime::MappedFile;

use super::args::KeyFlags;
use super::args::{self, DataArg, SplatArg};
use super::sources;
use super::write::{write_output, write_plan};
use crate::input::Input;
use kiln_format::irpa::ParamFile;

/// Entries to add: `--data NAME=FILE.npy` and `--splat NAME=LENGTH:HEXPATTERN`.
#[derive(clap::Args)]
pub struct NewEntries {
    /// A data entry holding the array of a .npy file (or a raw file's bytes).
    #[arg(long, value_name = "NAME=FILE.npy", value_parser = args::data)]
    data: Vec<DataArg>,
    /// A splat entry: LENGTH bytes of the repeated pattern (1, 2, 4, 8 or 16 bytes of hex).
    #[arg(long, value_name = "NAME=LENGTH:HEXPATTERN", value_parser = args::new_splat)]
    splat: Vec<SplatArg>,
    /// Alignment of data in the storage segment (a power of two).
    #[arg(long, default_value_t = 64, value_parser = args::alignment)]
    pub alignment: u64,
}

/// The new entries with their files mapped.
pub struct Loaded<'n> {
    splats: &'n [SplatArg],
    data: Vec<(&'n str, MappedFile, &'n Path)>,
}

impl NewEntries {
    /// Maps the data files.
    pub fn load(&self) -> Result<Loaded<'_>> {
        let mut data = Vec::with_capacity(self.data.len());
        for d in &self.data {
            data.push((d.name.as_str(), MappedFile::open(&d.path)?, d.path.as_path()));
        }
        Ok(Loaded { splats: &self.splat, data })
    }
}

/// The payload bytes of a .npy file (C order) with its dtype and shape, or the whole file
/// (untyped) when it is not a .npy.
pub fn payload_of<'a>(bytes: &'a [u8], path: &Path) -> Result<(&'a [u8], Option<TensorType>)> {
    if !bytes.starts_with(b"\x93NUMPY") {
        return Ok((bytes, None));
    }
    let npy = Npy::parse(bytes).with_context(|| path.display().to_string())?;
    if npy.fortran_order && npy.shape.iter().filter(|&&d| d > 1).count() > 1 {
        bail!(
            "{}: Fortran-order arrays are not stored in C order; save with np.ascontiguousarray",
            path.display()
        );
    }
    let descr = tensor_metadata::known_descr(&npy.descr);
    let tensor = TensorType { dtype: npy.descr.clone(), npy_descr: descr, shape: npy.shape };
    Ok((npy.data, Some(tensor)))
}

impl Loaded<'_> {
    /// The mapped data files.
    pub fn maps(&self) -> Vec<&MappedFile> {
        self.data.iter().map(|(_, map, _)| map).collect()
    }

    /// Splats first, then data entries, each in flag order (as iree-create-parameters does);
    /// with `typed`, a .npy array's dtype and shape go into its entry's metadata.
    pub fn entries(&self, typed: bool) -> Result<Vec<BuildEntry<'_>>> {
        let mut out = Vec::with_capacity(self.splats.len() + self.data.len());
        for s in self.splats {
            out.push(BuildEntry {
                name: Cow::Borrowed(s.name.as_bytes()),
                metadata: Cow::Borrowed(&[]),
                payload: Payload::Splat { pattern: Cow::Borrowed(&s.pattern), length: s.length },
            });
        }
        for (name, map, path) in &self.data {
            let (bytes, tensor) = payload_of(map.bytes(), path)?;
            let metadata = match tensor {
                Some(t) if typed => tensor_metadata::encode(&t),
                _ => Vec::new(),
            };
            out.push(BuildEntry {
                name: Cow::Borrowed(name.as_bytes()),
                metadata: Cow::Owned(metadata),
                payload: Payload::Data(bytes),
            });
        }
        Ok(out)
    }
}

/// Edit commands; each writes OUTPUT and leaves the input untouched.
#[derive(Subcommand)]
pub enum EditCommand {
    /// Add entries in a new archive linked after ARCHIVE's last header (ARCHIVE's bytes are kept).
    Append {
        /// The archive to extend.
        archive: PathBuf,
        /// Output archive.
        #[arg(short, long)]
        output: PathBuf,
        #[command(flatten)]
        new: NewEntries,
        /// Also add every entry of this parameter file (.irpa, .safetensors, .gguf, .ptd, .pte).
        #[arg(long, value_name = "FILE")]
        from: Vec<PathBuf>,
        #[command(flatten)]
        keys: KeyFlags,
    },
    /// Mark entries as erased (type SKIP) in place; nothing else changes.
    Erase {
        /// The archive.
        archive: PathBuf,
        /// Keys to erase.
        #[arg(required = true)]
        keys: Vec<String>,
        /// Output archive.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Replace entries' data with .npy (or raw) files: in place when the length is the same,
    /// otherwise by rebuilding the archive.
    Replace {
        /// The archive.
        archive: PathBuf,
        /// Output archive.
        #[arg(short, long)]
        output: PathBuf,
        /// New data for an entry.
        #[arg(long, value_name = "NAME=FILE.npy", required = true, value_parser = args::data)]
        data: Vec<DataArg>,
    },
    /// Concatenate archives into one file with linked headers (no data is re-encoded).
    Concat {
        /// Archives, in order.
        #[arg(required = true, num_args = 2..)]
        files: Vec<PathBuf>,
        /// Output archive.
        #[arg(short, long)]
        output: PathBuf,
        /// Accept several entries with the same key (IREE finds only the first).
        #[arg(long)]
        allow_duplicates: bool,
    },
    /// Rewrite with one header at the head, live entries in order and no dead space.
    Repack {
        /// The archive.
        archive: PathBuf,
        /// Output archive.
        #[arg(short, long)]
        output: PathBuf,
        /// Alignment of data in the storage segment (a power of two).
        #[arg(long, default_value_t = 64, value_parser = args::alignment)]
        alignment: u64,
    },
    /// Turn every entry into a zero splat of the same length (drops all data).
    Strip {
        /// The archive.
        archive: PathBuf,
        /// Output archive.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Turn the given entries into splats of the same length (zero byte unless a pattern is given).
    Splat {
        /// The archive.
        archive: PathBuf,
        /// Keys, optionally with a hex pattern.
        #[arg(required = true, value_name = "KEY[=HEXPATTERN]", value_parser = args::splat_key)]
        keys: Vec<(Vec<u8>, Vec<u8>)>,
        /// Output archive.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Rename entries.
    Rename {
        /// The archive.
        archive: PathBuf,
        /// Renames.
        #[arg(required = true, value_name = "OLD=NEW", value_parser = args::rename)]
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
        /// Output archive.
        #[arg(short, long)]
        output: PathBuf,
        /// Accept several entries with the same key (IREE finds only the first).
        #[arg(long)]
        allow_duplicates: bool,
    },
    /// Leave entries out.
    Exclude {
        /// The archive.
        archive: PathBuf,
        /// Keys to leave out.
        #[arg(required = true)]
        keys: Vec<String>,
        /// Output archive.
        #[arg(short, long)]
        output: PathBuf,
    },
}

/// Runs an edit command.
pub fn run(cmd: EditCommand) -> Result<ExitCode> {
    // Edits that keep every key need no duplicate check; rename and the linking edits do.
    let same_keys = KeyFlags { allow_duplicates: true, no_tensor_metadata: false };
    match cmd {
        EditCommand::Append { archive, output, new, from, keys } => {
            append(&archive, &output, &new, &from, keys)?
        }
        EditCommand::Erase { archive, keys, output } => {
            let input = crate::input::open(&archive)?;
            let parsed = parse_archive(&input)?;
            let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
            let patches =
                edit::erase(&parsed, &keys).with_context(|| archive.display().to_string())?;
            let out = edit::patched(input.bytes(), patches);
            write_output(&output, out.total_size(), &[&input.file], |w, p| out.write(w, p))?;
        }
        EditCommand::Replace { archive, output, data } => replace(&archive, &output, &data)?,
        EditCommand::Concat { files, output, allow_duplicates } => {
            let inputs = sources::open_all(&files)?;
            let parsed = inputs.iter().map(parse_archive).collect::<Result<Vec<_>>>()?;
            let flags = KeyFlags { allow_duplicates, no_tensor_metadata: false };
            let all: Vec<BuildEntry<'_>> = parsed
                .iter()
                .flat_map(|a| a.live_entries())
                .map(|e| BuildEntry {
                    name: Cow::Borrowed(e.name),
                    metadata: Cow::Borrowed(&[]),
                    payload: Payload::Data(&[]),
                })
                .collect();
            flags.check(&all)?;
            let pairs: Vec<(&[u8], &Archive<'_>)> =
                inputs.iter().map(Input::bytes).zip(&parsed).collect();
            let out = edit::link(&pairs, None);
            let maps: Vec<&MappedFile> = inputs.iter().map(|i| &i.file).collect();
            write_output(&output, out.total_size(), &maps, |w, p| out.write(w, p))?;
        }
        EditCommand::Repack { archive, output, alignment } => {
            rebuild(&archive, &output, &Options::default(), alignment, &[], same_keys)?
        }
        EditCommand::Strip { archive, output } => {
            let o = Options { strip: true, ..Options::default() };
            rebuild(&archive, &output, &o, 64, &[], same_keys)?
        }
        EditCommand::Splat { archive, keys, output } => {
            let names: Vec<Vec<u8>> = keys.iter().map(|(k, _)| k.clone()).collect();
            let o = Options { splat: keys, ..Options::default() };
            rebuild(&archive, &output, &o, 64, &names, same_keys)?
        }
        EditCommand::Rename { archive, pairs, output, allow_duplicates } => {
            let names: Vec<Vec<u8>> = pairs.iter().map(|(k, _)| k.clone()).collect();
            let o = Options { rename: pairs, ..Options::default() };
            let flags = KeyFlags { allow_duplicates, no_tensor_metadata: false };
            rebuild(&archive, &output, &o, 64, &names, flags)?
        }
        EditCommand::Exclude { archive, keys, output } => {
            let names: Vec<Vec<u8>> = keys.iter().map(|k| k.as_bytes().to_vec()).collect();
            let o = Options { exclude: names.clone(), ..Options::default() };
            rebuild(&archive, &output, &o, 64, &names, same_keys)?
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn parse_archive(input: &Input) -> Result<Archive<'_>> {
    crate::input::expect(input, kiln_format::Kind::Irpa)?;
    Archive::parse(input.bytes()).with_context(|| input.file.path().display().to_string())
}

/// Rebuilds one parameter file into a fresh archive with `options`; every key in `must_exist`
/// has to name an entry.
fn rebuild(
    path: &Path,
    output: &Path,
    options: &Options,
    alignment: u64,
    must_exist: &[Vec<u8>],
    keys: KeyFlags,
) -> Result<()> {
    let input = crate::input::open(path)?;
    let parsed = sources::parse(&input)?;
    let all = parsed.source().param_entries().with_context(|| path.display().to_string())?;
    for k in must_exist {
        if !all.iter().any(|e| &*e.key == k.as_slice()) {
            bail!("{}: no entry named `{}`", path.display(), String::from_utf8_lossy(k));
        }
    }
    let entries = transform::apply(&all, options);
    keys.check(&entries)?;
    let plan = Plan::new(&entries, alignment)?;
    write_plan(output, &plan, &[&input.file])
}

fn append(
    path: &Path,
    output: &Path,
    new: &NewEntries,
    from: &[PathBuf],
    keys: KeyFlags,
) -> Result<()> {
    let input = crate::input::open(path)?;
    let base = parse_archive(&input)?;
    let loaded = new.load()?;
    let mut entries = loaded.entries(!keys.no_tensor_metadata)?;
    let opened = sources::open_all(from)?;
    let parsed = sources::parse_all(&opened)?;
    let paths: Vec<&Path> = from.iter().map(PathBuf::as_path).collect();
    let extra = sources::entries_of(&parsed, &paths)?;
    entries.extend(extra.iter().map(|e| e.to_build(!keys.no_tensor_metadata)));
    if entries.is_empty() {
        bail!("nothing to append: give --data, --splat or --from");
    }
    // The base archive's keys come first, as a reader of the linked file sees them.
    let mut all: Vec<BuildEntry<'_>> = base
        .live_entries()
        .map(|e| BuildEntry {
            name: Cow::Borrowed(e.name),
            metadata: Cow::Borrowed(&[]),
            payload: Payload::Data(&[]),
        })
        .collect();
    all.extend(entries.iter().cloned());
    keys.check(&all)?;
    let plan = Plan::new(&entries, new.alignment)?;
    let out = edit::link(&[(input.bytes(), &base)], Some(&plan));
    let mut maps = loaded.maps();
    maps.push(&input.file);
    maps.extend(opened.iter().map(|i| &i.file));
    write_output(output, out.total_size(), &maps, |w, p| out.write(w, p))
}

/// New data for an entry: key, bytes, and the type metadata of a .npy file.
type Replacement<'a> = (&'a [u8], &'a [u8], Option<Vec<u8>>);

fn replace(path: &Path, output: &Path, data: &[DataArg]) -> Result<()> {
    let input = crate::input::open(path)?;
    let parsed = sources::parse(&input)?;
    let mut files = Vec::with_capacity(data.len());
    for d in data {
        files.push((d.name.as_str(), MappedFile::open(&d.path)?, d.path.as_path()));
    }
    let mut new: Vec<Replacement<'_>> = Vec::with_capacity(files.len());
    for (name, map, file) in &files {
        let (bytes, tensor) = payload_of(map.bytes(), file)?;
        new.push((name.as_bytes(), bytes, tensor.as_ref().map(tensor_metadata::encode)));
    }
    if let ParamFile::Irpa(archive) = &parsed {
        let mut patches: Vec<Patch<'_>> = Vec::new();
        for (name, bytes, metadata) in &new {
            // In place only when the entry's recorded type stays true.
            let same_type = metadata
                .as_ref()
                .is_none_or(|m| archive.find(name).is_some_and(|e| e.metadata == m.as_slice()));
            match edit::replace_in_place(archive, name, bytes)
                .with_context(|| path.display().to_string())?
            {
                Some(p) if same_type => patches.push(p),
                _ => break,
            }
        }
        if patches.len() == new.len() {
            edit::sort_patches(&mut patches)?;
            let out = edit::patched(input.bytes(), patches);
            let mut maps: Vec<&MappedFile> = files.iter().map(|(_, map, _)| map).collect();
            maps.push(&input.file);
            return write_output(output, out.total_size(), &maps, |w, p| out.write(w, p));
        }
    }
    let all = parsed.source().param_entries()?;
    for (name, _, _) in &new {
        if !all.iter().any(|e| &*e.key == *name) {
            bail!("{}: no entry named `{}`", path.display(), String::from_utf8_lossy(name));
        }
    }
    let entries: Vec<BuildEntry<'_>> = all
        .iter()
        .map(|e| {
            let mut b = e.to_build(true);
            if let Some((_, bytes, metadata)) = new.iter().find(|(n, _, _)| *n == &*e.key) {
                b.payload = Payload::Data(bytes);
                if let Some(m) = metadata {
                    b.metadata = Cow::Owned(m.clone());
                }
            }
            b
        })
        .collect();
    let plan = Plan::new(&entries, kiln_format::irpa::DEFAULT_DATA_ALIGNMENT)?;
    let mut maps: Vec<&MappedFile> = files.iter().map(|(_, map, _)| map).collect();
    maps.push(&input.file);
    write_plan(output, &plan, &maps)
}
