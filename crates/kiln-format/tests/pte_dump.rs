//! `kiln dump` of a `.pte` equals what the official `flatc --json --defaults-json` prints
//! (recorded by `tools/fixtures/flatc_dump.sh`).

mod common;

use std::fs;

use kiln_format::pte::{dump::dump, Program};

#[test]
fn dump_matches_flatc_json() {
    for m in ["const_methods", "control_flow", "xnnpack_cnn"] {
        let bytes = fs::read(common::fixture(&format!("pte/{m}.pte"))).unwrap();
        let want: serde_json::Value = serde_json::from_slice(
            &fs::read(common::fixture(&format!("pte-flatc/{m}.json"))).unwrap(),
        )
        .unwrap();
        let got = dump(&Program::open(&bytes).unwrap());
        assert_eq!(got["program"], want, "{m}");
    }
}
