//! XNNPACK's byte table lookup (`x8-lut`): `out[i] = table[x[i]]` over int8 activations, the
//! form of any elementwise function of one int8 value (a hardswish between two converts has
//! 256 possible inputs, so it is computed once per input and looked up).
//!
//! On AVX-512 VBMI, 64 lookups at a time: `vpermi2b` picks from two 64-byte halves of the
//! table by an index's low 7 bits, twice (the table's first and second 128 entries), and the
//! index's top bit chooses between the two. Elsewhere, one byte at a time.
#![allow(unsafe_code)]

#[cfg(test)]
use super::threads::PARALLEL_ELEMENTS;
use super::threads::{split, with_pieces, Threads};

/// A table of int8 results by int8 input: entry `q + 128` for input `q`.
pub type Qs8Table = [i8; 256];

/// `out[i] = table[x[i] + 128]`, split over `threads` ([`Threads::tasks_for_elements`]).
///
/// # Panics
/// If `x` and `out` differ in length.
pub fn lookup_qs8(x: &[i8], table: &Qs8Table, out: &mut [i8], threads: &Threads) {
    assert_eq!(x.len(), out.len(), "input and output lengths");
    const RUN: usize = 64;
    let parts = threads.tasks_for_elements(x.len(), x.len().div_ceil(RUN));
    let tasks = with_pieces(split(x.len(), RUN, parts), out, 1);
    threads.for_each(tasks, |(run, out)| lookup_run(&x[run], table, out));
}

/// One run of [`lookup_qs8`].
fn lookup_run(x: &[i8], table: &Qs8Table, out: &mut [i8]) {
    #[cfg(target_arch = "x86_64")]
    {
        let f = super::cpu::features();
        if f.avx512f && f.avx512bw && f.avx512vbmi {
            // SAFETY: the CPU has AVX-512F, AVX-512BW and AVX-512 VBMI; `x` and `out` have
            // one length (asserted by the caller, and kept by the split).
            unsafe { lookup_vbmi(x, table, out) };
            return;
        }
    }
    lookup_portable(x, table, out);
}

/// [`lookup_run`] a byte at a time.
fn lookup_portable(x: &[i8], table: &Qs8Table, out: &mut [i8]) {
    for (d, &v) in out.iter_mut().zip(x) {
        *d = table[(v as u8 ^ 0x80) as usize];
    }
}

/// [`lookup_run`] on AVX-512 VBMI.
///
/// # Safety
/// The CPU has AVX-512F, AVX-512BW and AVX-512 VBMI; `x` and `out` have one length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
unsafe fn lookup_vbmi(x: &[i8], table: &Qs8Table, out: &mut [i8]) {
    use std::arch::x86_64::*;
    // SAFETY: the table holds 256 bytes: four 64-byte loads.
    let t: [__m512i; 4] =
        std::array::from_fn(|q| unsafe { _mm512_loadu_si512(table.as_ptr().add(64 * q).cast()) });
    let flip = _mm512_set1_epi8(i8::MIN);
    let n = x.len().min(out.len());
    let mut i = 0;
    while i < n {
        // The live lanes of this block (all 64 but at the end).
        let mask: u64 = if n - i >= 64 { u64::MAX } else { (1u64 << (n - i)) - 1 };
        // SAFETY: the masked load reads lanes `i..i + live` of `x`, inside it.
        let v = unsafe { _mm512_maskz_loadu_epi8(mask, x.as_ptr().add(i)) };
        let idx = _mm512_xor_si512(v, flip);
        let lo = _mm512_permutex2var_epi8(t[0], idx, t[1]);
        let hi = _mm512_permutex2var_epi8(t[2], idx, t[3]);
        let r = _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), lo, hi);
        // SAFETY: the masked store writes lanes `i..i + live` of `out`, inside it.
        unsafe { _mm512_mask_storeu_epi8(out.as_mut_ptr().add(i), mask, r) };
        i += 64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every input of every length up to a few blocks finds its table entry, split or not, in
    /// the vector loop (where the CPU has it) and the portable one.
    #[test]
    fn lookup_finds_each_entry() {
        let mut rng = fastrand::Rng::with_seed(9);
        let table: Qs8Table = std::array::from_fn(|_| rng.i8(..));
        let two = Threads::new(2).unwrap();
        for len in (0..300).chain([PARALLEL_ELEMENTS + 77]) {
            let x: Vec<i8> = (0..len).map(|_| rng.i8(..)).collect();
            let want: Vec<i8> = x.iter().map(|&v| table[(i32::from(v) + 128) as usize]).collect();
            for th in [&Threads::default(), &two] {
                let mut got = vec![0i8; len];
                lookup_qs8(&x, &table, &mut got, th);
                assert_eq!(got, want, "length {len}");
            }
            let mut got = vec![0i8; len];
            lookup_portable(&x, &table, &mut got);
            assert_eq!(got, want, "length {len}, portable");
        }
    }
}
