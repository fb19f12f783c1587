//! The C library from C: `examples/c/classify.c` and the C tests of `tests/c/` compiled with
//! the system's `cc` against `include/kiln.h` and the `libkiln.so` this build made, and run:
//! every entry point and its error paths (`api_test.c`), also under valgrind on the AVX2 and
//! the portable kernels (`KILN_MAX_ISA`; valgrind does not run AVX-512), four C threads
//! running their own states of one program at once (`threads_test.c`), an exported LLM's
//! greedy tokens through `kiln_generate` against ExecuTorch's (`generate_test.c`), and the example's
//! top-5 against ExecuTorch's recorded output and `kiln run --out-dir`'s output array. The
//! example is also built as a user builds it: installed by `tools/capi/install.sh`, compiled
//! with `pkg-config`'s flags, shared and static. SKIPPED (printed) without `cc`, the
//! pkg-config builds without `pkg-config`, and the valgrind runs without `valgrind`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The folder holding this build's `libkiln.so` (the test binary is in its `deps/`).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps.to_path_buf(), deps.parent().unwrap().to_path_buf()]
        .into_iter()
        .find(|d| d.join("libkiln.so").exists())
        .unwrap_or_else(|| panic!("no libkiln.so beside {}", exe.display()))
}

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Compiles `source` (relative to the repository) into `out` against the header and the
/// library of this build, or with `flags` (pkg-config's) where given.
fn compile(source: &str, out: &Path, flags: Option<&str>) {
    let repo = repo();
    let mut cc = Command::new("cc");
    cc.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-pthread"])
        .arg(format!("-I{}", repo.join("examples/c").display()))
        .arg(repo.join(source));
    match flags {
        Some(flags) => cc.args(flags.split_whitespace()),
        None => cc
            .arg("-DKILN_INSPECT")
            .arg(format!("-I{}", repo.join("crates/kiln-capi/include").display()))
            .arg(format!("-L{}", lib_dir().display()))
            .arg("-lkiln"),
    };
    let status = cc.args(["-lm", "-o"]).arg(out).status().unwrap();
    assert!(status.success(), "cc {source} failed");
}

/// `pkg-config --cflags --libs name` with `PKG_CONFIG_PATH` at `dir`.
fn pkg_config(dir: &Path, name: &str) -> String {
    let out = Command::new("pkg-config")
        .args(["--cflags", "--libs", name])
        .env("PKG_CONFIG_PATH", dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "pkg-config {name}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// The `kiln` command of this build (beside the library: `cargo test --workspace` builds it),
/// if there is one.
fn kiln_command() -> Option<PathBuf> {
    let dir = lib_dir();
    [dir.join("kiln"), dir.parent()?.join("kiln")].into_iter().find(|p| p.exists())
}

/// Runs `program` with `args` (and the library on the loader's path); its exit code and
/// output.
fn run(program: &[&Path], args: &[&Path], env: &[(&str, &str)]) -> (i32, String, String) {
    let (first, rest) = program.split_first().unwrap();
    let out = Command::new(first)
        .args(rest)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// The indices of the five largest values of a float32 `.npy`, best first.
fn top5(npy: &Path) -> Vec<usize> {
    let bytes = std::fs::read(npy).unwrap();
    let a = kiln_format::npy::Npy::parse(&bytes).unwrap();
    assert_eq!(a.descr, "<f4");
    let v: Vec<f32> =
        a.data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&i, &j| v[j].total_cmp(&v[i]));
    idx.truncate(5);
    idx
}

#[test]
fn the_c_api_works_from_c() {
    if !have("cc") {
        println!("SKIPPED: no cc to compile the C tests with");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let [api, threads, generate, classify] =
        ["api_test", "threads_test", "generate_test", "classify"].map(|n| dir.path().join(n));
    compile("crates/kiln-capi/tests/c/api_test.c", &api, None);
    compile("crates/kiln-capi/tests/c/threads_test.c", &threads, None);
    compile("crates/kiln-capi/tests/c/generate_test.c", &generate, None);
    compile("examples/c/classify.c", &classify, None);
    let fixtures = repo().join("tests/fixtures/pte");

    let (code, out, err) = run(&[&api], &[&fixtures], &[]);
    assert_eq!(code, 0, "{out}{err}");

    let model = fixtures.join("mobilenet_v2_xnnpack.pte");
    let input = fixtures.join("mobilenet_v2_xnnpack.forward.in0.npy");
    let (code, out, err) = run(&[&threads], &[&model, &input], &[]);
    assert_eq!(code, 0, "{out}{err}");

    // ExecuTorch's greedy tokens for the LLM fixture's prompt.
    let llm = repo().join("tests/fixtures/llm");
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(llm.join("fp32.expected.json")).unwrap())
            .unwrap();
    let ids = |k: &str| -> String {
        let v: Vec<String> =
            expected[k].as_array().unwrap().iter().map(|t| t.to_string()).collect();
        v.join(",")
    };
    let (prompt, tokens) = (ids("prompt"), ids("tokens"));
    let args = [llm.join("fp32.pte"), prompt.into(), tokens.into(), fixtures.join("tiny_cnn.pte")];
    let args: Vec<&Path> = args.iter().map(PathBuf::as_path).collect();
    let (code, out, err) = run(&[&generate], &args, &[]);
    assert_eq!(code, 0, "{out}{err}");

    // The example's top-5 is ExecuTorch's, and that of `kiln run` on the same input.
    let (code, out, err) = run(&[&classify], &[&model, &input], &[]);
    assert_eq!(code, 0, "{err}");
    let got: Vec<usize> = out.split_whitespace().map(|t| t.parse().unwrap()).collect();
    assert_eq!(got, top5(&fixtures.join("mobilenet_v2_xnnpack.forward.out0.npy")), "{out}");
    match kiln_command() {
        Some(kiln) => {
            let outs = dir.path().join("kiln-run");
            let status = Command::new(kiln)
                .arg("run")
                .arg(&model)
                .arg("--input")
                .arg(&input)
                .arg("--out-dir")
                .arg(&outs)
                .status()
                .unwrap();
            assert!(status.success(), "kiln run failed");
            assert_eq!(got, top5(&outs.join("output0.npy")), "against kiln run: {out}");
        }
        None => println!("SKIPPED: no kiln command beside the library to compare with"),
    }
    let (code, _, err) = run(&[&classify], &[&fixtures.join("missing.pte"), &input], &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("missing.pte"), "{err}");

    // Installed under a prefix and built with pkg-config's flags, against the shared library
    // and the archive.
    if have("pkg-config") {
        let prefix = dir.path().join("prefix");
        let status = Command::new(repo().join("tools/capi/install.sh"))
            .arg(&prefix)
            .arg(lib_dir())
            .status()
            .unwrap();
        assert!(status.success(), "tools/capi/install.sh failed");
        let pc = prefix.join("lib/pkgconfig");
        for name in ["kiln", "kiln-static"] {
            let exe = dir.path().join(format!("classify-{name}"));
            compile("examples/c/classify.c", &exe, Some(&pkg_config(&pc, name)));
            let out = Command::new(&exe)
                .args([&model, &input])
                .env("LD_LIBRARY_PATH", prefix.join("lib"))
                .output()
                .unwrap();
            assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
            let top: Vec<usize> = String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(|t| t.parse().unwrap())
                .collect();
            assert_eq!(top, got, "classify linked through {name}.pc");
        }
    } else {
        println!("SKIPPED: no pkg-config for the installed builds");
    }

    if !have("valgrind") {
        println!("SKIPPED: no valgrind for the memory checks");
        return;
    }
    let valgrind = Path::new("valgrind");
    let flags =
        ["--error-exitcode=1", "--leak-check=full", "--errors-for-leak-kinds=definite,indirect"];
    let flags: Vec<&Path> = flags.iter().map(Path::new).collect();
    for isa in ["avx2", "portable"] {
        let mut program = vec![valgrind];
        program.extend(flags.iter().copied());
        program.push(&api);
        let (code, out, err) = run(&program, &[&fixtures], &[("KILN_MAX_ISA", isa)]);
        assert_eq!(code, 0, "valgrind on {isa}:\n{out}{err}");
        assert!(err.contains("ERROR SUMMARY: 0 errors"), "valgrind on {isa}:\n{err}");
    }
}
