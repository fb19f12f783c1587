//! Value parsers of the `kiln params` flags: a malformed value is a usage error (exit 2),
//! reported by clap before anything is read or written.

use std::path::PathBuf;

use kiln_format::irpa::builder::check_pattern;
use kiln_format::irpa::transform;

/// `--data NAME=FILE`: an entry holding a .npy file's array (or a raw file's bytes).
#[derive(Clone, Debug)]
pub struct DataArg {
    /// The entry's key.
    pub name: String,
    /// The file.
    pub path: PathBuf,
}

/// Parses `NAME=FILE`.
pub fn data(s: &str) -> Result<DataArg, String> {
    match s.split_once('=') {
        Some((name, file)) if !file.is_empty() => {
            Ok(DataArg { name: name.to_string(), path: PathBuf::from(file) })
        }
        _ => Err(format!("{s:?}: expected NAME=FILE")),
    }
}

/// `--splat NAME=LENGTH:HEXPATTERN`: LENGTH bytes of a repeated pattern.
#[derive(Clone, Debug)]
pub struct SplatArg {
    /// The entry's key.
    pub name: String,
    /// The pattern (1, 2, 4, 8 or 16 bytes).
    pub pattern: Vec<u8>,
    /// Length in bytes, a multiple of the pattern's.
    pub length: u64,
}

/// Parses `NAME=LENGTH:HEXPATTERN`.
pub fn new_splat(s: &str) -> Result<SplatArg, String> {
    let (name, spec) =
        s.rsplit_once('=').ok_or(format!("{s:?}: expected NAME=LENGTH:HEXPATTERN"))?;
    let (len, pat) = spec.split_once(':').ok_or(format!("{s:?}: expected LENGTH:HEXPATTERN"))?;
    let length: u64 = len.parse().map_err(|_| format!("{s:?}: bad length {len:?}"))?;
    let pattern = hex(pat).map_err(|e| format!("{s:?}: {e}"))?;
    check_pattern(&pattern).map_err(|e| format!("{s:?}: {e}"))?;
    if !length.is_multiple_of(pattern.len() as u64) {
        return Err(format!(
            "{s:?}: length {length} is not a multiple of the {}-byte pattern",
            pattern.len()
        ));
    }
    Ok(SplatArg { name: name.to_string(), pattern, length })
}

/// Parses `OLD=NEW` into key bytes.
pub fn rename(s: &str) -> Result<(Vec<u8>, Vec<u8>), String> {
    let (old, new) = s.split_once('=').ok_or(format!("{s:?}: expected OLD=NEW"))?;
    Ok((old.as_bytes().to_vec(), new.as_bytes().to_vec()))
}

/// Parses `KEY` or `KEY=HEXPATTERN` (1, 2, 4, 8 or 16 bytes; a zero byte when absent).
pub fn splat_key(s: &str) -> Result<(Vec<u8>, Vec<u8>), String> {
    match s.rsplit_once('=') {
        Some((key, pat)) if !pat.is_empty() && pat.bytes().all(|b| b.is_ascii_hexdigit()) => {
            let pattern = hex(pat).map_err(|e| format!("{s:?}: {e}"))?;
            check_pattern(&pattern).map_err(|e| format!("{s:?}: {e}"))?;
            Ok((key.as_bytes().to_vec(), pattern))
        }
        _ => Ok((s.as_bytes().to_vec(), vec![0])),
    }
}

/// Parses a data alignment: a power of two.
pub fn alignment(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(a) if a.is_power_of_two() => Ok(a),
        _ => Err(format!("{s:?} is not a power of two")),
    }
}

/// Decodes an even-length hex string.
fn hex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err(format!("hex {s:?} has an odd number of digits"));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or(format!("bad hex {s:?}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        assert_eq!(data("w=x.npy").unwrap().path, PathBuf::from("x.npy"));
        assert!(data("w").is_err() && data("w=").is_err());
        let s = new_splat("s=16:0000803f").unwrap();
        assert_eq!((s.name.as_str(), s.length, s.pattern), ("s", 16, vec![0, 0, 0x80, 0x3f]));
        for bad in ["s", "s=16", "s=x:00", "s=15:0000803f", "s=3:000000", "s=4:0g"] {
            assert!(new_splat(bad).is_err(), "{bad}");
        }
        assert_eq!(splat_key("w=0000803f").unwrap().1, [0, 0, 0x80, 0x3f]);
        assert_eq!(splat_key("w").unwrap(), (b"w".to_vec(), vec![0]));
        assert!(splat_key("w=000000").is_err());
        assert_eq!(alignment("4096"), Ok(4096));
        assert!(alignment("3").is_err() && alignment("0").is_err() && alignment("x").is_err());
        assert!(rename("a").is_err());
    }
}

/// How keys and types are written, for the commands that build entries.
#[derive(clap::Args, Clone, Copy)]
pub struct KeyFlags {
    /// Accept several entries with the same key (IREE finds only the first).
    #[arg(long)]
    pub allow_duplicates: bool,
    /// Write no dtype/shape metadata: the bytes IREE's command-line tools write.
    #[arg(long)]
    pub no_tensor_metadata: bool,
}

impl KeyFlags {
    /// Fails on a duplicate key unless `--allow-duplicates`.
    pub fn check(&self, entries: &[kiln_format::irpa::BuildEntry<'_>]) -> anyhow::Result<()> {
        if !self.allow_duplicates {
            transform::check_unique(entries).map_err(|e| {
                anyhow::anyhow!("{e}; pass --allow-duplicates to write both entries")
            })?;
        }
        Ok(())
    }
}
