//! The edit commands and the new-entry flags shared by `create` and `append`.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use kiln_format::irpa::builder::{check_pattern, Plan};
use kiln_format::irpa::edit::{self, Patch};
use kiln_format::irpa::transform::{self, Options};
use kiln_format::irpa::{Archive, BuildEntry, Payload, SourceEntry};
use kiln_format::npy::Npy;
use kiln_runtime::MappedFile;

use super::sources::{self, Parsed};
use super::{hex, parse_splat_key, write::write_output, write_plan};
use crate::input::Input;

/// Entries to add: `--data NAME=FILE.npy` and `--splat NAME=LENGTH:HEXPATTERN`.
#[derive(clap::Args)]
pub struct NewEntries {
    /// A data entry holding the array of a .npy file (or a raw file's bytes).
    #[arg(long, value_name = "NAME=FILE.npy")]
    data: Vec<String>,
    /// A splat entry: LENGTH bytes of the repeated pattern (1, 2, 4, 8 or 16 bytes of hex).
    #[arg(long, value_name = "NAME=LENGTH:HEXPATTERN")]
    splat: Vec<String>,
    /// Alignment of data in the storage segment (a power of two).
    #[arg(long, default_value_t = 64)]
    pub alignment: u64,
}

/// The new entries with their files mapped.
pub struct Loaded {
    splats: Vec<(String, Vec<u8>, u64)>,
    data: Vec<(String, MappedFile, PathBuf)>,
}

impl NewEntries {
    /// Parses the flags and maps the data files.
    pub fn load(&self) -> Result<Loaded> {
        let mut splats = Vec::new();
        for s in &self.splat {
            let (name, spec) = s
                .rsplit_once('=')
                .with_context(|| format!("--splat {s:?}: expected NAME=LENGTH:HEXPATTERN"))?;
            let (len, pat) = spec
                .split_once(':')
                .with_context(|| format!("--splat {s:?}: expected LENGTH:HEXPATTERN"))?;
            let length: u64 =
                len.parse().with_context(|| format!("--splat {s:?}: bad length {len:?}"))?;
            let pattern = hex(pat).with_context(|| format!("--splat {s:?}"))?;
            check_pattern(&pattern).with_context(|| format!("--splat {s:?}"))?;
            if !length.is_multiple_of(pattern.len() as u64) {
                bail!(
                    "--splat {s:?}: length {length} is not a multiple of the {}-byte pattern",
                    pattern.len()
                );
            }
            splats.push((name.to_string(), pattern, length));
        }
        let mut data = Vec::new();
        for d in &self.data {
            let (name, file) =
                d.split_once('=').with_context(|| format!("--data {d:?}: expected NAME=FILE"))?;
            let map = MappedFile::open(file)?;
            data.push((name.to_string(), map, PathBuf::from(file)));
        }
        Ok(Loaded { splats, data })
    }
}

/// The payload bytes of a .npy file (C order), or the whole file when it is not a .npy.
pub fn payload_of<'a>(bytes: &'a [u8], path: &Path) -> Result<&'a [u8]> {
    if !bytes.starts_with(b"\x93NUMPY") {
        return Ok(bytes);
    }
    let npy = Npy::parse(bytes).with_context(|| path.display().to_string())?;
    if npy.fortran_order && npy.shape.iter().filter(|&&d| d > 1).count() > 1 {
        bail!(
            "{}: Fortran-order arrays are not stored in C order; save with np.ascontiguousarray",
            path.display()
        );
    }
    Ok(npy.data)
}

impl Loaded {
    /// The mapped data files.
    pub fn maps(&self) -> Vec<&MappedFile> {
        self.data.iter().map(|(_, map, _)| map).collect()
    }

    /// Splats first, then data entries, each in flag order (as iree-create-parameters does).
    pub fn entries(&self) -> Result<Vec<BuildEntry<'_>>> {
        let mut out = Vec::with_capacity(self.splats.len() + self.data.len());
        for (name, pattern, length) in &self.splats {
            out.push(BuildEntry {
                name: Cow::Borrowed(name.as_bytes()),
                metadata: Cow::Borrowed(&[]),
                payload: Payload::Splat { pattern: Cow::Borrowed(pattern), length: *length },
            });
        }
        for (name, map, path) in &self.data {
            out.push(BuildEntry {
                name: Cow::Borrowed(name.as_bytes()),
                metadata: Cow::Borrowed(&[]),
                payload: Payload::Data(payload_of(map.bytes(), path)?),
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
        #[arg(long, value_name = "NAME=FILE.npy", required = true)]
        data: Vec<String>,
    },
    /// Concatenate archives into one file with linked headers (no data is re-encoded).
    Concat {
        /// Archives, in order.
        #[arg(required = true, num_args = 2..)]
        files: Vec<PathBuf>,
        /// Output archive.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Rewrite with one header at the head, live entries in order and no dead space.
    Repack {
        /// The archive.
        archive: PathBuf,
        /// Output archive.
        #[arg(short, long)]
        output: PathBuf,
        /// Alignment of data in the storage segment.
        #[arg(long, default_value_t = 64)]
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
        #[arg(required = true, value_name = "KEY[=HEXPATTERN]")]
        keys: Vec<String>,
        /// Output archive.
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Rename entries.
    Rename {
        /// The archive.
        archive: PathBuf,
        /// Renames.
        #[arg(required = true, value_name = "OLD=NEW")]
        pairs: Vec<String>,
        /// Output archive.
        #[arg(short, long)]
        output: PathBuf,
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
    match cmd {
        EditCommand::Append { archive, output, new, from } => {
            append(&archive, &output, &new, &from)?
        }
        EditCommand::Erase { archive, keys, output } => {
            let input = Input::open(&archive)?;
            let parsed = parse_archive(&input)?;
            let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
            let patches =
                edit::erase(&parsed, &keys).with_context(|| archive.display().to_string())?;
            let out = edit::patched(input.bytes(), patches);
            write_output(&output, out.total_size(), &[&input.file], |w, p| out.write(w, p))?;
        }
        EditCommand::Replace { archive, output, data } => replace(&archive, &output, &data)?,
        EditCommand::Concat { files, output } => {
            let inputs = sources::open_all(&files)?;
            let parsed = inputs.iter().map(parse_archive).collect::<Result<Vec<_>>>()?;
            let pairs: Vec<(&[u8], &Archive<'_>)> =
                inputs.iter().map(Input::bytes).zip(&parsed).collect();
            let out = edit::link(&pairs, None);
            let maps: Vec<&MappedFile> = inputs.iter().map(|i| &i.file).collect();
            write_output(&output, out.total_size(), &maps, |w, p| out.write(w, p))?;
        }
        EditCommand::Repack { archive, output, alignment } => {
            rebuild(&archive, &output, &Options::default(), alignment, &[])?
        }
        EditCommand::Strip { archive, output } => {
            let o = Options { strip: true, ..Options::default() };
            rebuild(&archive, &output, &o, 64, &[])?
        }
        EditCommand::Splat { archive, keys, output } => {
            let splat = keys.iter().map(|k| parse_splat_key(k)).collect::<Result<Vec<_>>>()?;
            let names: Vec<Vec<u8>> = splat.iter().map(|(k, _)| k.clone()).collect();
            rebuild(&archive, &output, &Options { splat, ..Options::default() }, 64, &names)?
        }
        EditCommand::Rename { archive, pairs, output } => {
            let o = super::options(&[], &pairs, false, &[])?;
            let names: Vec<Vec<u8>> = o.rename.iter().map(|(k, _)| k.clone()).collect();
            rebuild(&archive, &output, &o, 64, &names)?
        }
        EditCommand::Exclude { archive, keys, output } => {
            let o = super::options(&keys, &[], false, &[])?;
            let names = o.exclude.clone();
            rebuild(&archive, &output, &o, 64, &names)?
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn parse_archive(input: &Input) -> Result<Archive<'_>> {
    input.expect(kiln_format::Kind::Irpa)?;
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
) -> Result<()> {
    let input = Input::open(path)?;
    let parsed = Parsed::new(&input)?;
    let all = parsed.source().param_entries().with_context(|| path.display().to_string())?;
    for k in must_exist {
        if !all.iter().any(|e| &*e.key == k.as_slice()) {
            bail!("{}: no entry named `{}`", path.display(), String::from_utf8_lossy(k));
        }
    }
    let entries = transform::apply(&all, options);
    let plan = Plan::new(&entries, alignment)?;
    write_plan(output, &plan, &[&input.file])
}

fn append(path: &Path, output: &Path, new: &NewEntries, from: &[PathBuf]) -> Result<()> {
    let input = Input::open(path)?;
    let base = parse_archive(&input)?;
    let loaded = new.load()?;
    let mut entries = loaded.entries()?;
    let opened = sources::open_all(from)?;
    let parsed = sources::parse_all(&opened)?;
    let paths: Vec<&Path> = from.iter().map(PathBuf::as_path).collect();
    let extra = sources::entries_of(&parsed, &paths)?;
    entries.extend(extra.iter().map(SourceEntry::to_build));
    if entries.is_empty() {
        bail!("nothing to append: give --data, --splat or --from");
    }
    let plan = Plan::new(&entries, new.alignment)?;
    let out = edit::link(&[(input.bytes(), &base)], Some(&plan));
    let mut maps = loaded.maps();
    maps.push(&input.file);
    maps.extend(opened.iter().map(|i| &i.file));
    write_output(output, out.total_size(), &maps, |w, p| out.write(w, p))
}

fn replace(path: &Path, output: &Path, data: &[String]) -> Result<()> {
    let input = Input::open(path)?;
    let parsed = Parsed::new(&input)?;
    let mut files = Vec::with_capacity(data.len());
    for d in data {
        let (name, file) =
            d.split_once('=').with_context(|| format!("--data {d:?}: expected NAME=FILE"))?;
        files.push((name.to_string(), MappedFile::open(file)?, PathBuf::from(file)));
    }
    let mut new: Vec<(&[u8], &[u8])> = Vec::with_capacity(files.len());
    for (name, map, file) in &files {
        new.push((name.as_bytes(), payload_of(map.bytes(), file)?));
    }
    if let Parsed::Irpa(archive) = &parsed {
        let mut patches: Vec<Patch<'_>> = Vec::new();
        for (name, bytes) in &new {
            match edit::replace_in_place(archive, name, bytes)
                .with_context(|| path.display().to_string())?
            {
                Some(p) => patches.push(p),
                None => break,
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
    for (name, _) in &new {
        if !all.iter().any(|e| &*e.key == *name) {
            bail!("{}: no entry named `{}`", path.display(), String::from_utf8_lossy(name));
        }
    }
    let entries: Vec<BuildEntry<'_>> = all
        .iter()
        .map(|e| {
            let mut b = e.to_build();
            if let Some((_, bytes)) = new.iter().find(|(n, _)| *n == &*e.key) {
                b.payload = Payload::Data(bytes);
            }
            b
        })
        .collect();
    let plan = Plan::new(&entries, kiln_format::irpa::DEFAULT_DATA_ALIGNMENT)?;
    let mut maps: Vec<&MappedFile> = files.iter().map(|(_, map, _)| map).collect();
    maps.push(&input.file);
    write_plan(output, &plan, &maps)
}
