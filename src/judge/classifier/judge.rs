//! The classifier judge itself: its encoder (in process or served) and head, loaded from
//! `[classifier]`, one verdict per trace.

use std::sync::Arc;

use super::config::ClassifierConfig;
use super::encoder::TextEncoder;
use super::features::pair_features;
use super::head::Head;
use super::served::Served;
use crate::dimensions::{JudgeKind, PerQuality, Quality};
use crate::judge::llm::LlmError;
use crate::judge::{Citations, Verdict, clean_score};
use crate::trace::Trace;

/// Why the classifier could not load or score.
#[derive(Debug, thiserror::Error)]
pub enum ClassifierError {
    /// A file of the model directory could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// `config.json` or the head is malformed or asks for what is not supported.
    #[error("model config: {0}")]
    Config(String),
    /// `tokenizer.json` could not be loaded or applied.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The tensors are missing, misshapen or failed to compute.
    #[error("tensor: {0}")]
    Tensor(#[from] candle_core::Error),
    /// An input the encoder cannot take.
    #[error("input: {0}")]
    Input(String),
    /// The model server failed, after its retries.
    #[error("model server: {0}")]
    Served(#[from] LlmError),
}

impl ClassifierError {
    /// The failure as the judge pool counts it (`outcome` of `ragwatch_judge_requests_total`): a
    /// model server's as the LLM client's; an in-process failure as an answer that did not parse.
    pub(crate) fn into_llm(self) -> LlmError {
        match self {
            Self::Served(e) => e,
            other => LlmError::Parse(format!("classifier: {other}")),
        }
    }
}

/// A faithfulness classifier: encoder and head.
#[derive(Debug)]
pub struct Classifier {
    text: TextEncoder,
    head: Head,
    identity: String,
}

impl Classifier {
    /// Loads the encoder in `model_dir` (in process) and the head in `head_path` (JSON), windows as
    /// the head was trained.
    pub fn load(
        model_dir: &std::path::Path,
        head_path: &std::path::Path,
    ) -> Result<Self, ClassifierError> {
        Self::from_config(&ClassifierConfig {
            model_dir: Some(model_dir.to_path_buf()),
            head: Some(head_path.to_path_buf()),
            ..ClassifierConfig::default()
        })
    }

    /// The judge `[classifier]` describes: in process, or served when `served` is set.
    pub fn from_config(config: &ClassifierConfig) -> Result<Self, ClassifierError> {
        let missing = |key: &str| ClassifierError::Config(format!("classifier.{key} is not set"));
        let dir = config
            .model_dir
            .as_deref()
            .ok_or_else(|| missing("model_dir"))?;
        let head_path = config.head.as_deref().ok_or_else(|| missing("head"))?;
        let head = Head::load(head_path)?;
        let window = config.window_tokens.or(Some(head.window_tokens));
        let text = match &config.served {
            Some(s) => TextEncoder::served(dir, window, Served::new(s)?)?,
            None => TextEncoder::load(dir, window)?,
        };
        let want = 3 + 2 * text.tokens().config().hidden_size;
        if head.weights.len() != want {
            return Err(ClassifierError::Config(format!(
                "the head has {} weights; this encoder's features number {want}",
                head.weights.len()
            )));
        }
        Ok(Self {
            text,
            head,
            identity: super::identity(config),
        })
    }

    /// The model and head, as `ragwatch_judge_info{model}` records them.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The texts of a trace in the order the features read them: answer, question, contexts.
    fn texts(trace: &Trace) -> Vec<&str> {
        let mut texts: Vec<&str> = vec![&trace.answer, &trace.query];
        texts.extend(trace.contexts.iter().map(|c| c.text.as_str()));
        texts
    }

    /// Probability that the trace's answer is supported by its contexts, in process (blocking).
    pub fn score(&self, trace: &Trace) -> Result<f64, ClassifierError> {
        let vectors = self.text.embed(&Self::texts(trace))?;
        Ok(self.probability(&vectors))
    }

    /// [`Classifier::score`] from the model server's vectors.
    pub async fn score_served(&self, trace: &Trace) -> Result<f64, ClassifierError> {
        let vectors = self.text.embed_served(&Self::texts(trace)).await?;
        Ok(self.probability(&vectors))
    }

    fn probability(&self, vectors: &[Vec<f32>]) -> f64 {
        let features = pair_features(&vectors[0], &vectors[1], &vectors[2..]);
        self.head.predict(&features)
    }

    /// The verdict on `trace`: in process on a blocking thread, or from the model server.
    pub async fn judge(self: &Arc<Self>, trace: &Trace) -> Result<Verdict, ClassifierError> {
        let p = if self.text.in_process() {
            let (me, trace) = (Arc::clone(self), trace.clone());
            tokio::task::spawn_blocking(move || me.score(&trace))
                .await
                .map_err(|e| ClassifierError::Input(format!("the scoring thread failed: {e}")))??
        } else {
            self.score_served(trace).await?
        };
        Ok(self.verdict(p))
    }

    /// The verdict of probability `p`: faithfulness only (the head is trained on hallucination
    /// labels, not on relevancy).
    pub fn verdict(&self, p: f64) -> Verdict {
        Verdict {
            judge: JudgeKind::Classifier,
            scores: PerQuality::default().with(Quality::Faithfulness, clean_score(p)),
            refusal: false,
            uncertain: (p - 0.5).abs() < 0.1,
            citations: Citations::default(),
            details: serde_json::json!({"probability": p, "model": self.identity}),
        }
    }
}
