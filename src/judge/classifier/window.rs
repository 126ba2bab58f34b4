//! Windows over a long input: an encoder sees at most `max_position_embeddings` tokens, and RAG
//! contexts run longer. A text is cut into overlapping windows of token ids, each embedded on its
//! own; the text's vector is the mean of its windows' vectors. A text that fits is one window, so
//! short inputs embed exactly as the encoder alone would.

/// How long inputs are cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Tokens per window, special tokens excluded.
    pub tokens: usize,
    /// Tokens from one window's start to the next one's (overlap = `tokens - stride`).
    pub stride: usize,
}

impl Window {
    /// Windows of `tokens` ids advancing by `stride` (both at least 1; `stride` at most `tokens`).
    pub fn new(tokens: usize, stride: usize) -> Self {
        let tokens = tokens.max(1);
        Self {
            tokens,
            stride: stride.clamp(1, tokens),
        }
    }

    /// The windows of `ids`: `[0, tokens)`, `[stride, stride + tokens)`, ..., the last one ending
    /// at the end of `ids` (so it may overlap its predecessor more). An input that fits, empty
    /// included, is one window.
    pub fn split<'a>(&self, ids: &'a [u32]) -> Vec<&'a [u32]> {
        let n = ids.len();
        if n <= self.tokens {
            return vec![ids];
        }
        let mut out = Vec::with_capacity(n.div_ceil(self.stride));
        let mut start = 0;
        while start + self.tokens < n {
            out.push(&ids[start..start + self.tokens]);
            start += self.stride;
        }
        out.push(&ids[n - self.tokens..]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_short_input_is_one_window() {
        let w = Window::new(4, 2);
        assert_eq!(w.split(&[1, 2, 3]), vec![&[1, 2, 3][..]]);
        let empty: &[u32] = &[];
        assert_eq!(w.split(empty), vec![empty]);
    }

    #[test]
    fn a_long_input_overlaps_and_ends_at_its_end() {
        let w = Window::new(4, 2);
        let ids: Vec<u32> = (0..7).collect();
        assert_eq!(
            w.split(&ids),
            vec![&[0, 1, 2, 3][..], &[2, 3, 4, 5][..], &[3, 4, 5, 6][..]]
        );
    }

    proptest! {
        #[test]
        fn windows_cover_every_token_and_fit(n in 0usize..600, tokens in 1usize..300, stride in 1usize..300) {
            let w = Window::new(tokens, stride);
            let ids: Vec<u32> = (0..n as u32).collect();
            let windows = w.split(&ids);
            let mut seen = vec![false; n];
            for win in &windows {
                prop_assert!(win.len() <= w.tokens);
                // Each window is a contiguous run of the input.
                for pair in win.windows(2) {
                    prop_assert_eq!(pair[0] + 1, pair[1]);
                }
                for id in *win {
                    seen[*id as usize] = true;
                }
            }
            prop_assert!(seen.into_iter().all(|s| s));
        }
    }
}
