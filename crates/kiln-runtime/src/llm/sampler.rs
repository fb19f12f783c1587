//! Choosing the next token from logits, as ExecuTorch's LLM runner does
//! (`extension/llm/sampler/sampler.cpp`): greedy argmax (the first maximum wins) at
//! temperature 0; otherwise softmax of `logits / temperature` and one coin from an xorshift64*
//! generator per token, through nucleus (top-p) sampling when `0 < top_p < 1`, else over the
//! whole distribution. The same seed gives the same tokens as that sampler.

/// xorshift64* (Marsaglia; Vigna's multiplier), the runner's generator.
#[derive(Clone, Debug)]
struct XorShift64Star(u64);

impl XorShift64Star {
    fn next_u32(&mut self) -> u32 {
        let mut s = self.0;
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        self.0 = s;
        (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32
    }

    /// A float in [0, 1) from the top 24 bits.
    fn next_f32(&mut self) -> f32 {
        (self.next_u32() >> 8) as f32 / 16_777_216.0
    }
}

/// How the next token is chosen.
#[derive(Clone, Debug)]
pub struct Sampler {
    temperature: f32,
    top_p: f32,
    /// Sample among this many most likely tokens only (ties at the last one kept).
    top_k: Option<usize>,
    rng: XorShift64Star,
    /// Scratch: probabilities, and (probability, token) candidates for top-p.
    probs: Vec<f32>,
    candidates: Vec<(f32, usize)>,
}

impl Sampler {
    /// `temperature` 0 (or below) is greedy; `top_p` outside (0, 1) samples from the whole
    /// distribution.
    pub fn new(temperature: f32, top_p: f32, seed: u64) -> Sampler {
        Sampler {
            temperature,
            top_p,
            top_k: None,
            rng: XorShift64Star(seed),
            probs: Vec::new(),
            candidates: Vec::new(),
        }
    }

    /// Keeps only the `k` most likely tokens before sampling (tokens tied with the `k`-th
    /// stay); `None` or 0 keeps all. No effect on a greedy sampler.
    pub fn with_top_k(mut self, k: Option<usize>) -> Sampler {
        self.top_k = k.filter(|&k| k > 0);
        self
    }

    /// Greedy: argmax.
    pub fn greedy() -> Sampler {
        Sampler::new(0.0, 0.0, 0)
    }

    /// Whether this sampler always takes the argmax.
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }

    /// The next token. `logits` must not be empty.
    pub fn sample(&mut self, logits: &[f32]) -> usize {
        if self.is_greedy() {
            return argmax(logits);
        }
        let inv = 1.0 / self.temperature;
        self.probs.clear();
        self.probs.extend(logits.iter().map(|&l| l * inv));
        if let Some(k) = self.top_k.filter(|&k| k < self.probs.len()) {
            // The k-th largest scaled logit; everything below it gets no probability.
            let mut sorted = self.probs.clone();
            let (_, &mut kth, _) = sorted.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
            for p in &mut self.probs {
                if *p < kth {
                    *p = f32::NEG_INFINITY;
                }
            }
        }
        softmax(&mut self.probs);
        let coin = self.rng.next_f32();
        if self.top_p <= 0.0 || self.top_p >= 1.0 {
            sample_cdf(&self.probs, coin)
        } else {
            self.sample_top_p(coin)
        }
    }

    /// Nucleus sampling: the smallest set of most likely tokens whose probabilities pass
    /// `top_p`, sampled with the coin scaled to that set's mass.
    fn sample_top_p(&mut self, coin: f32) -> usize {
        let n = self.probs.len();
        // Tokens below this probability cannot be in the nucleus (the runner's prefilter).
        let cutoff = (1.0 - self.top_p) / (n.max(2) - 1) as f32;
        self.candidates.clear();
        self.candidates.extend(
            self.probs.iter().enumerate().filter(|(_, &p)| p >= cutoff).map(|(i, &p)| (p, i)),
        );
        if self.candidates.is_empty() {
            return argmax(&self.probs);
        }
        self.candidates.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut mass = 0f32;
        let mut last = self.candidates.len() - 1;
        for (i, &(p, _)) in self.candidates.iter().enumerate() {
            mass += p;
            if mass > self.top_p {
                last = i;
                break;
            }
        }
        let r = coin * mass;
        let mut cdf = 0f32;
        for &(p, token) in &self.candidates[..=last] {
            cdf += p;
            if r < cdf {
                return token;
            }
        }
        self.candidates[last].1
    }
}

/// Index of the first maximum.
pub fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate().skip(1) {
        if v > logits[best] {
            best = i;
        }
    }
    best
}

fn softmax(x: &mut [f32]) {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sum = 0f32;
    for v in x.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in x.iter_mut() {
        *v /= sum;
    }
}

fn sample_cdf(probs: &[f32], coin: f32) -> usize {
    let mut cdf = 0f32;
    for (i, &p) in probs.iter().enumerate() {
        cdf += p;
        if coin < cdf {
            return i;
        }
    }
    probs.len() - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_maximum() {
        assert_eq!(argmax(&[0.5, 2.0, -1.0, 2.0]), 1);
        assert_eq!(Sampler::greedy().sample(&[3.0, 1.0, 3.0]), 0);
    }

    #[test]
    fn xorshift_matches_its_definition() {
        // Marsaglia's xorshift64 with (12, 25, 27) from seed 1, then Vigna's multiplier:
        // the first state is 1 ^ (1 << 25) ^ ((1 ^ (1 << 25)) >> 27) = 0x2000001.
        let mut g = XorShift64Star(1);
        let expect = (0x2000001u64.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32;
        assert_eq!(g.next_u32(), expect);
    }

    #[test]
    fn sampling_follows_the_distribution() {
        // One token with almost all of the mass is always chosen; top-p 0.5 keeps only it.
        let logits = [0.0, 12.0, 0.0, 0.0];
        let mut s = Sampler::new(1.0, 0.5, 7);
        assert!((0..100).all(|_| s.sample(&logits) == 1));
        // Two equal tokens share the draws roughly evenly over the whole distribution.
        let mut s = Sampler::new(1.0, 1.0, 7);
        let ones = (0..2000).filter(|_| s.sample(&[5.0, 5.0, -30.0]) == 1).count();
        assert!((800..1200).contains(&ones), "{ones}");
        // The same seed repeats itself.
        let a: Vec<usize> = {
            let mut s = Sampler::new(0.8, 0.9, 42);
            (0..50).map(|i| s.sample(&[1.0, 0.5, (i % 3) as f32, 0.2])).collect()
        };
        let mut s = Sampler::new(0.8, 0.9, 42);
        let b: Vec<usize> = (0..50).map(|i| s.sample(&[1.0, 0.5, (i % 3) as f32, 0.2])).collect();
        assert_eq!(a, b);
    }
}
