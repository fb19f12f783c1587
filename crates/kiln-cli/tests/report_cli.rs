//! `kiln report`: the page is self-contained, and it renders in a real headless Chromium
//! without script errors (skipped, with a note, where no `chromium` is installed).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{kiln, s, scratch};

fn fixture(path: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(path);
    p.to_string_lossy().into_owned()
}

/// Writes the report of `model` to `out` (2 profiled executes) and returns the page.
fn report(model: &str, out: &Path) -> String {
    let (code, stdout, stderr) = kiln(&["report", &fixture(model), "--iters", "2", "-o", s(out)]);
    assert_eq!(code, 0, "{model}: {stderr}");
    assert!(stdout.contains("compiled steps"), "{stdout}");
    std::fs::read_to_string(out).unwrap()
}

#[test]
fn the_page_refers_to_nothing_outside_it() {
    let dir = scratch("report", "self-contained");
    let out = dir.join("report.html");
    let html = report("xnnpack/transformer_encoder.pte", &out);
    for outside in ["http://", "https://", "src=", "href=", "@import", "//cdn", "<link"] {
        assert!(!html.contains(outside), "the page holds {outside:?}");
    }
    // The only url() is the arrow marker inside the page.
    assert_eq!(html.matches("url(").count(), html.matches("url(#arrow)").count());
    // The XNNPACK delegate is drawn as a group with its nodes inside.
    assert!(html.contains(r#"class="node group""#) && html.contains(r#"class="node inner""#));
    assert!(html.contains(r#"id="report-data""#));
}

#[test]
fn usage_and_input_errors() {
    let dir = scratch("report", "errors");
    let out = dir.join("r.html");
    let cnn = fixture("pte/tiny_cnn.pte");
    let (code, _, _) = kiln(&["report", &cnn, "--iters", "0", "-o", s(&out)]);
    assert_eq!(code, 2);
    let (code, _, _) = kiln(&["report", &cnn]);
    assert_eq!(code, 2, "-o is required");
    let (code, _, stderr) = kiln(&["report", &cnn, "--method", "nope", "-o", s(&out)]);
    assert_eq!(code, 1, "{stderr}");
    let missing = dir.join("missing.pte");
    let (code, _, _) = kiln(&["report", s(&missing), "-o", s(&out)]);
    assert_eq!(code, 1);
    assert!(!out.exists(), "no page is written for a failed report");
}

/// `chromium` on the PATH.
fn chromium() -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("chromium"))
        .find(|p| p.is_file())
}

/// Runs headless Chromium on `page` with `args` (at most two minutes); its standard output
/// (through a file: a pipe nobody reads while waiting would stall a large DOM dump).
fn headless(browser: &Path, profile: &Path, page: &Path, args: &[&str]) -> String {
    let stdout = profile.with_extension("out");
    let mut child = Command::new(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--virtual-time-budget=10000", "--window-size=1400,900"])
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("chromium did not finish within two minutes on {}", page.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    String::from_utf8_lossy(&std::fs::read(&stdout).unwrap()).into_owned()
}

/// The number of distinct colours and the share of pixels that are not the most common
/// colour (the background), of a PNG file.
fn colours(png_file: &Path) -> (usize, f64) {
    let decoder =
        png::Decoder::new(std::io::BufReader::new(std::fs::File::open(png_file).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    let mut counts = std::collections::HashMap::new();
    for px in buf[..info.buffer_size()].chunks_exact(channels) {
        *counts.entry(px[..3.min(channels)].to_vec()).or_insert(0usize) += 1;
    }
    let total: usize = counts.values().sum();
    let background = counts.values().copied().max().unwrap_or(0);
    (counts.len(), (total - background) as f64 / total.max(1) as f64)
}

#[test]
fn reports_render_in_headless_chromium() {
    let Some(browser) = chromium() else {
        println!("SKIPPED: chromium not found");
        return;
    };
    let dir = scratch("report", "chromium");
    for model in
        ["pte/resnet_small.pte", "pte/transformer_block.pte", "xnnpack/transformer_encoder.pte"]
    {
        let stem = Path::new(model).file_stem().unwrap().to_str().unwrap();
        let page = dir.join(format!("{stem}.html"));
        report(model, &page);
        let profile = dir.join(format!("{stem}-profile"));
        let dom = headless(&browser, &profile, &page, &["--dump-dom"]);
        assert!(dom.contains(r#"data-ready="1""#), "{model}: the script did not finish:\n{dom}");
        // The error handler marks the error box `data-errors="1"` (its own text names the
        // attribute in another form).
        assert!(!dom.contains(r#"data-errors="1""#), "{model}: script errors:\n{dom}");
        // The script filled the chart and the steps table.
        assert!(dom.contains(r#"class="bar""#) && dom.contains("<tr"), "{model}");
        let shot = dir.join(format!("{stem}.png"));
        headless(&browser, &profile, &page, &[&format!("--screenshot={}", shot.display())]);
        let (distinct, drawn) = colours(&shot);
        assert!(distinct >= 64, "{model}: {distinct} colours in {}", shot.display());
        assert!(drawn > 0.05, "{model}: {:.1}% drawn in {}", drawn * 100.0, shot.display());
        println!("{model}: {} ({distinct} colours, {:.0}% drawn)", shot.display(), drawn * 100.0);
    }
}
