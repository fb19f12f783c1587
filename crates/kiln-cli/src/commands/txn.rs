//! `kiln txn`: AIE transaction binaries: `inspect` (one line per op, or JSON) and `patch`
//! (resolve DDR_PATCH ops with given argument addresses). Also the text form of `kiln inspect`
//! and the `kiln dump` arm for transaction files.
//!
//! Both commands accept the binary form and mlir-aie's text form (one hex word per line);
//! `patch` writes the form it read.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use kiln_format::txn::registers::register_name;
use kiln_format::txn::{
    binary_of, resolve_patches, summary, to_hex_text, CustomPayload, Op, OpKind, Txn,
};

use crate::input::Input;
use crate::output::print_json;

/// Arguments of `kiln txn`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// List the header and every op, one line per op, with register names where known.
    Inspect {
        /// The transaction (binary, or text with one hex word per line), or a `.pte` holding
        /// `KilnNpuBackend` delegates (then `--delegate` picks one).
        file: PathBuf,
        /// In a `.pte`: the index of the NPU delegate in the method's delegate table.
        #[arg(long)]
        delegate: Option<usize>,
        /// In a `.pte`: the method (default: the first).
        #[arg(long)]
        method: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Write `address + argplus` into the register word each DDR_PATCH op targets.
    Patch {
        /// The transaction (binary, or text with one hex word per line).
        file: PathBuf,
        /// Address of kernel argument N as the firmware sees it, e.g. `--arg 0=0x80001000`.
        #[arg(long = "arg", value_name = "N=ADDR", required = true, value_parser = parse_arg)]
        args: Vec<(u64, u64)>,
        /// Output file (same form as the input).
        #[arg(short, long)]
        output: PathBuf,
        /// Write the output even when a DDR_PATCH op's argument has no `--arg` (its word keeps
        /// the old value); without it that is refused and nothing is written.
        #[arg(long)]
        allow_unpatched: bool,
    },
}

/// Runs `kiln txn`.
pub fn run(args: Args) -> Result<ExitCode> {
    match args.command {
        Command::Inspect { file, delegate, method, json } => {
            let txn = match delegate {
                Some(d) => delegate_txn(&file, method.as_deref(), d)?,
                None if method.is_some() => {
                    return Err(crate::Usage("--method needs --delegate".into()).into())
                }
                None => read(&file)?.0,
            };
            show(&txn, json)?;
        }
        Command::Patch { file, args, output, allow_unpatched } => {
            patch(&file, &args, &output, allow_unpatched)?
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `N=ADDR`, each decimal or `0x` hexadecimal.
fn parse_arg(s: &str) -> Result<(u64, u64), String> {
    let (n, addr) = s.split_once('=').ok_or_else(|| format!("{s:?} is not N=ADDR"))?;
    Ok((parse_u64(n)?, parse_u64(addr)?))
}

fn parse_u64(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|e| format!("{s:?}: {e}"))
}

/// Largest text form read: 9 bytes a word (8 digits and a newline), for a binary of 256 MiB.
const MAX_TEXT_BYTES: usize = 9 << 26;

/// Reads a transaction in either form (through [`binary_of`]); the flag says whether it was
/// text. The file is mapped, not read: a binary is parsed in place, so its header's size check
/// comes before any work.
fn read(path: &Path) -> Result<(Txn, bool)> {
    let file = crate::input::read(path)?;
    let bytes = file.bytes();
    let context = || path.display().to_string();
    if bytes.len() > MAX_TEXT_BYTES && kiln_format::txn::is_hex_text(bytes) {
        bail!(
            "{}: {} bytes of hex text, more than the {MAX_TEXT_BYTES} kiln reads in that form",
            path.display(),
            bytes.len()
        );
    }
    let data = binary_of(bytes).with_context(context)?;
    let is_text = matches!(data, std::borrow::Cow::Owned(_));
    Ok((Txn::parse(&data).with_context(context)?, is_text))
}

/// The fused transaction of NPU delegate `index` of `method` (or the first method) in the
/// program at `path`.
fn delegate_txn(path: &Path, method: Option<&str>, index: usize) -> Result<Txn> {
    let file = crate::input::read(path)?;
    let context = || path.display().to_string();
    let program = kiln_format::pte::Program::open(file.bytes()).with_context(context)?;
    let m = match method {
        Some(name) => program.method_by_name(name).with_context(context)?,
        None => program.methods().next().with_context(|| format!("{}: no methods", context()))?,
    };
    let d = m
        .delegates()
        .nth(index)
        .with_context(|| format!("{}: method {:?} has no delegate {index}", context(), m.name()))?
        .with_context(context)?;
    if d.id != kiln_format::npu_delegate::BACKEND_ID {
        bail!("{}: delegate {index} is a {} delegate, not an NPU one", context(), d.id);
    }
    let npu = kiln_format::npu_delegate::NpuDelegate::parse(program.delegate_data(&d)?)
        .with_context(|| format!("{}: delegate {index}", context()))?;
    Ok(Txn::parse(&npu.txn)?)
}

fn patch(file: &Path, args: &[(u64, u64)], output: &Path, allow_unpatched: bool) -> Result<()> {
    let (mut txn, is_text) = read(file)?;
    let mut map = BTreeMap::new();
    for (n, addr) in args {
        if map.insert(*n, *addr).is_some() {
            return Err(crate::Usage(format!("--arg {n} given twice")).into());
        }
    }
    let outcome = resolve_patches(&mut txn, &map).with_context(|| file.display().to_string())?;
    if !outcome.unresolved.is_empty() && !allow_unpatched {
        let missing: BTreeSet<u64> = outcome.unresolved.iter().map(|(_, a)| *a).collect();
        let missing: Vec<String> = missing.iter().map(u64::to_string).collect();
        bail!(
            "{}: {} DDR_PATCH op(s) use argument(s) {} with no --arg; give them, or pass \
             --allow-unpatched to write a partly patched file",
            file.display(),
            outcome.unresolved.len(),
            missing.join(", ")
        );
    }
    let bytes = txn.to_bytes()?;
    if is_text {
        kiln_format::io::write_bytes_atomic(output, to_hex_text(&bytes)?.as_bytes())?;
    } else {
        kiln_format::io::write_bytes_atomic(output, &bytes)?;
    }
    for p in &outcome.patched {
        let op = &txn.ops[p.patch_op];
        eprintln!(
            "patched {} (arg {}) at DDR_PATCH offset 0x{:x}: 0x{:08x} -> 0x{:08x}",
            register_name(p.regaddr, txn.header.num_mem_tile_rows),
            p.argidx,
            op.offset,
            p.old,
            p.new
        );
    }
    for (i, argidx) in &outcome.unresolved {
        eprintln!(
            "warning: DDR_PATCH at offset 0x{:x} uses argument {argidx}, which was not given",
            txn.ops[*i].offset
        );
    }
    for argidx in &outcome.unused_args {
        eprintln!("warning: no DDR_PATCH op uses argument {argidx}");
    }
    eprintln!(
        "{}: {} of {} patches resolved",
        output.display(),
        outcome.patched.len(),
        outcome.patched.len() + outcome.unresolved.len()
    );
    Ok(())
}

/// `kiln inspect` arm for transactions (binary or hex text), as text: one line per op.
pub fn print(input: &Input) -> Result<ExitCode> {
    let bytes =
        binary_of(input.bytes()).with_context(|| input.file.path().display().to_string())?;
    let txn = Txn::parse(&bytes).with_context(|| input.file.path().display().to_string())?;
    show(&txn, false)?;
    Ok(ExitCode::SUCCESS)
}

/// `kiln dump` arm: the JSON of `inspect --json` plus every padding byte.
pub fn dump(input: &Input) -> Result<ExitCode> {
    let bytes =
        binary_of(input.bytes()).with_context(|| input.file.path().display().to_string())?;
    let txn = Txn::parse(&bytes).with_context(|| input.file.path().display().to_string())?;
    print_json(&summary::summarize(&txn, true)?)?;
    Ok(ExitCode::SUCCESS)
}

fn show(txn: &Txn, json: bool) -> Result<()> {
    if json {
        return print_json(&summary::summarize(txn, false)?);
    }
    let h = &txn.header;
    outln!(
        "AIE transaction v{}.{}  dev_gen {}  {} rows × {} cols ({} memory-tile rows)  {} ops  {} bytes",
        h.major, h.minor, h.dev_gen, h.num_rows, h.num_cols, h.num_mem_tile_rows, h.num_ops, h.txn_size
    );
    for op in &txn.ops {
        outln!("{:#07x}  {:<14} {}", op.offset, op.kind.name(), describe(op, h.num_mem_tile_rows));
    }
    Ok(())
}

fn reg(addr: u64, mem_rows: u8) -> String {
    format!("{} (0x{addr:08x})", register_name(addr, mem_rows))
}

/// The text after the op name on an `inspect` line.
fn describe(op: &Op, mem_rows: u8) -> String {
    match &op.kind {
        OpKind::Write { reg_off, value, .. } => {
            format!("{} = 0x{value:08x}", reg(*reg_off, mem_rows))
        }
        OpKind::BlockWrite { reg_off, data, .. } => {
            let words: Vec<String> = data.iter().take(8).map(|w| format!("{w:08x}")).collect();
            let more = if data.len() > 8 { " ..." } else { "" };
            format!(
                "{} ← {} words [{}{more}]",
                reg(u64::from(*reg_off), mem_rows),
                data.len(),
                words.join(" ")
            )
        }
        OpKind::Masked { reg_off, value, mask, .. } => {
            format!("{} value 0x{value:08x} mask 0x{mask:08x}", reg(*reg_off, mem_rows))
        }
        OpKind::Custom { payload, .. } => match payload {
            CustomPayload::Tct { word, config } => {
                format!(
                    "col {} row {} direction {}  cols {} rows {} channel {}",
                    (word >> 16) & 0xff,
                    (word >> 8) & 0xff,
                    word & 0xff,
                    (config >> 16) & 0xff,
                    (config >> 8) & 0xff,
                    config >> 24
                )
            }
            CustomPayload::DdrPatch(p) => {
                format!("{} ← arg {} + 0x{:x}", reg(p.regaddr(), mem_rows), p.argidx(), p.argplus())
            }
            CustomPayload::ReadRegs { addresses, .. } => {
                let regs: Vec<String> = addresses.iter().map(|a| reg(*a, mem_rows)).collect();
                regs.join(", ")
            }
            CustomPayload::RecordTimer { id } => format!("id {id}"),
            CustomPayload::MergeSync { bytes } => format!("payload {}", hex(bytes)),
            CustomPayload::Launch(l) => {
                let regs: Vec<String> = l.arg_regs.iter().map(|a| reg(*a, mem_rows)).collect();
                let words = |w: &[u64]| w.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
                // Shapes and parameters when the words hold them, else the raw words.
                let dims = match l.shapes() {
                    Ok((shapes, params)) => {
                        let shapes: Vec<String> =
                            shapes.iter().map(|s| format!("[{}]", words(s))).collect();
                        format!("shapes [{}] params [{}]", shapes.join(", "), words(params))
                    }
                    Err(_) => format!("dims [{}]", words(&l.dims)),
                };
                format!("{} dtype {} args [{}] {dims}", l.kernel.name(), l.dtype, regs.join(", "))
            }
            CustomPayload::Raw(bytes) => format!("{} payload bytes {}", bytes.len(), hex(bytes)),
        },
        OpKind::Noop { .. } | OpKind::UpdateScratch { .. } => String::new(),
        OpKind::Preempt { level, .. } => format!("level {level}"),
        OpKind::LoadPdi { pdi_id, pdi_size, pdi_address, .. } => {
            format!("pdi {pdi_id} size {pdi_size} address 0x{pdi_address:x}")
        }
        OpKind::LoadPmStart { pm_load_id, .. } => format!("pm_load_id {pm_load_id}"),
        OpKind::CreateScratchpad { usage_type, size, scratch_offset, .. } => {
            format!("usage {usage_type} size {size} offset 0x{scratch_offset:x}")
        }
        OpKind::StateTable { state_table_idx, func, func_arg, reg_off, .. } => {
            let reg_text =
                reg_off.map(|r| format!(" {}", reg(u64::from(r), mem_rows))).unwrap_or_default();
            format!("table {state_table_idx} func {func} arg {func_arg}{reg_text}")
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
