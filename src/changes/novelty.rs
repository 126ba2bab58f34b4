//! Placeholder until the question index lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Novelty { New, Known, Unchecked }
impl Novelty {
    pub(crate) const ALL: [Novelty; 3] = [Novelty::New, Novelty::Known, Novelty::Unchecked];
    pub(crate) fn name(self) -> &'static str { match self { Novelty::New => "new", Novelty::Known => "known", Novelty::Unchecked => "unchecked" } }
}
#[derive(Debug)]
pub(crate) struct QuestionIndex;
impl QuestionIndex {
    pub(crate) fn new(_c: usize, _k: u64, _b: u64, _s: f64, _seed: u64) -> Self { QuestionIndex }
    pub(crate) fn observe(&mut self, _q: &str, _now: u64) -> Novelty { Novelty::Unchecked }
    pub(crate) fn heap_bytes(&self) -> usize { 0 }
}
