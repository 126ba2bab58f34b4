//! The head's inputs: how close the answer sits to the question and to the contexts, from their
//! pooled vectors. `benches/classifier_cv.py` computes the same features with an independent
//! forward pass when it fits the head.

/// Unit vector of `v` (zeros stay zeros).
fn unit(v: &[f32]) -> Vec<f64> {
    let norm = v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let norm = if norm > 0.0 { norm } else { 1.0 };
    v.iter().map(|x| f64::from(*x) / norm).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The head's inputs, from the pooled vectors of the answer, the question and each context:
/// `[cos(a, q), max_i cos(a, c_i), mean_i cos(a, c_i), a * c, |a - c|]`, where every vector is made
/// unit length first and `c` is the unit mean of the unit context vectors (zeros without contexts,
/// whose cosines are then 0).
pub fn pair_features(answer: &[f32], question: &[f32], contexts: &[Vec<f32>]) -> Vec<f64> {
    let a = unit(answer);
    let q = unit(question);
    let cs: Vec<Vec<f64>> = contexts.iter().map(|c| unit(c)).collect();
    let cosines: Vec<f64> = cs.iter().map(|c| dot(&a, c)).collect();
    let max = cosines.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let max = if max.is_finite() { max } else { 0.0 };
    let mean = if cosines.is_empty() {
        0.0
    } else {
        cosines.iter().sum::<f64>() / cosines.len() as f64
    };
    let mut c = vec![0.0; a.len()];
    for ci in &cs {
        for (s, x) in c.iter_mut().zip(ci) {
            *s += x;
        }
    }
    let norm = dot(&c, &c).sqrt();
    if norm > 0.0 {
        c.iter_mut().for_each(|x| *x /= norm);
    }
    let mut out = Vec::with_capacity(3 + 2 * a.len());
    out.extend([dot(&a, &q), max, mean]);
    out.extend(a.iter().zip(&c).map(|(x, y)| x * y));
    out.extend(a.iter().zip(&c).map(|(x, y)| (x - y).abs()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_of_an_answer_equal_to_its_context() {
        let v = vec![3.0f32, 4.0];
        let f = pair_features(&v, &[0.0, 1.0], std::slice::from_ref(&v));
        let close = |x: f64, y: f64| (x - y).abs() < 1e-12;
        assert!(close(f[0], 0.8) && close(f[1], 1.0) && close(f[2], 1.0));
        assert!(close(f[3], 0.36) && close(f[4], 0.64));
        assert!(close(f[5], 0.0) && close(f[6], 0.0));
    }

    #[test]
    fn no_contexts_give_zero_cosines() {
        let f = pair_features(&[1.0, 0.0], &[1.0, 0.0], &[]);
        assert_eq!(f, vec![1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
    }
}
