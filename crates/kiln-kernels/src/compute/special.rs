//! Special functions missing from `std`.

/// The error function, accurate to about 1e-16 relative.
///
/// Uses the everywhere-convergent series `erf(x) = 2/sqrt(pi) * exp(-x^2) * sum_n 2^n x^(2n+1) /
/// (1*3*..*(2n+1))`, whose terms are all positive (no cancellation); `|x| >= 6` returns `±1`
/// (`erfc(6) < 3e-17`).
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let ax = x.abs();
    if ax >= 6.0 {
        return x.signum();
    }
    let x2 = ax * ax;
    let mut term = ax;
    let mut sum = ax;
    let mut k = 0.0;
    loop {
        k += 1.0;
        term *= 2.0 * x2 / (2.0 * k + 1.0);
        sum += term;
        if term <= sum * 1e-17 {
            break;
        }
    }
    let r = 2.0 / std::f64::consts::PI.sqrt() * (-x2).exp() * sum;
    r.min(1.0).copysign(x)
}

#[cfg(test)]
mod tests {
    #[test]
    fn erf_values() {
        // Reference values from the definition (tables of erf).
        let cases = [
            (0.0, 0.0),
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
            (-3.0, -0.999_977_909_503_001_4),
        ];
        for (x, e) in cases {
            assert!((super::erf(x) - e).abs() < 1e-15, "erf({x})");
        }
    }
}
