//! `.npy` headers: arrays NumPy wrote read back as NumPy describes them, and mutated ones end in
//! a value or an error, never a panic, with the data always inside the file.

mod common;

use common::{fixture, mutate, Rng};
use kiln_format::npy::Npy;

fn numpy_files() -> Vec<(String, Vec<u8>)> {
    let dir = fixture("irpa/npy");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "npy"))
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .npy fixtures in {}", dir.display());
    files
}

#[test]
fn mutated_numpy_files_never_panic() {
    let files = numpy_files();
    let mut rng = Rng::new(0x006e_7079);
    let (mut parsed, mut refused) = (0, 0);
    for i in 0..3000 {
        let m = mutate(&files[i % files.len()].1, &mut rng);
        match Npy::parse(&m) {
            Ok(npy) => {
                assert!(npy.data_offset as usize + npy.data.len() <= m.len());
                parsed += 1;
            }
            Err(_) => refused += 1,
        }
    }
    // Both outcomes occur, so the mutations reach past the magic.
    assert!(parsed > 0 && refused > 0, "{parsed} parsed, {refused} refused");
}
