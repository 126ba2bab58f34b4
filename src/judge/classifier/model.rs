//! A BERT-family encoder run on the CPU with candle: the weights of `model.safetensors` in a model
//! directory (its `config.json` read by [`super::Tokens`]), token states mean-pooled into one vector
//! per input. Nothing is downloaded: the directory is mounted or shipped beside the binary.

use std::collections::HashMap;
use std::path::Path;

use super::ClassifierError;
use super::tokens::{EncoderConfig, Tokens, read};
use candle_core::{DType, Device, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, Module, VarBuilder};

/// The feed-forward activation named by `hidden_act`: the checkpoint's, not a hard-coded one.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Activation {
    GeluErf,
    GeluTanh,
    Relu,
}

impl Activation {
    fn parse(name: &str) -> Result<Self, ClassifierError> {
        match name {
            "gelu" => Ok(Self::GeluErf),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(Self::GeluTanh),
            "relu" => Ok(Self::Relu),
            other => Err(ClassifierError::Config(format!(
                "hidden_act {other:?} is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu)"
            ))),
        }
    }

    fn apply(self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Self::GeluErf => x.gelu_erf(),
            Self::GeluTanh => x.gelu(),
            Self::Relu => x.relu(),
        }
    }
}

/// One transformer layer: self-attention, then feed-forward, each with a residual and a layer norm.
#[derive(Debug)]
struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
}

impl Layer {
    fn load(l: &VarBuilder<'_>, config: &EncoderConfig) -> candle_core::Result<Self> {
        let (h, eps) = (config.hidden_size, config.layer_norm_eps);
        let att = l.pp("attention");
        Ok(Self {
            query: candle_nn::linear(h, h, att.pp("self.query"))?,
            key: candle_nn::linear(h, h, att.pp("self.key"))?,
            value: candle_nn::linear(h, h, att.pp("self.value"))?,
            attention_out: candle_nn::linear(h, h, att.pp("output.dense"))?,
            attention_norm: candle_nn::layer_norm(h, eps, att.pp("output.LayerNorm"))?,
            intermediate: candle_nn::linear(
                h,
                config.intermediate_size,
                l.pp("intermediate.dense"),
            )?,
            output: candle_nn::linear(config.intermediate_size, h, l.pp("output.dense"))?,
            output_norm: candle_nn::layer_norm(h, eps, l.pp("output.LayerNorm"))?,
        })
    }
}

/// A loaded encoder: its weights and how to run them.
#[derive(Debug)]
pub struct Encoder {
    config: EncoderConfig,
    activation: Activation,
    pad_id: u32,
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    embedding_norm: LayerNorm,
    layers: Vec<Layer>,
    device: Device,
}

impl Encoder {
    /// Loads `model.safetensors` from `dir` for the model `tokens` describes. Weight names may
    /// carry a `bert.` prefix (a classification checkpoint) or not (a bare encoder).
    pub fn load(dir: &Path, tokens: &Tokens) -> Result<Self, ClassifierError> {
        let config = tokens.config().clone();
        let activation = Activation::parse(&config.hidden_act)?;
        if config.num_attention_heads == 0
            || !config
                .hidden_size
                .is_multiple_of(config.num_attention_heads)
        {
            return Err(ClassifierError::Config(format!(
                "hidden_size {} is not a multiple of num_attention_heads {}",
                config.hidden_size, config.num_attention_heads
            )));
        }
        let device = Device::Cpu;
        let bytes = read(dir, "model.safetensors")?;
        let tensors = candle_core::safetensors::load_buffer(&bytes, &device)?;
        let tensors: HashMap<String, Tensor> = tensors
            .into_iter()
            .map(|(k, t)| (k.strip_prefix("bert.").map(str::to_owned).unwrap_or(k), t))
            .collect();
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &device);
        let h = config.hidden_size;
        let eps = config.layer_norm_eps;
        let emb = vb.pp("embeddings");
        let word = candle_nn::embedding(config.vocab_size, h, emb.pp("word_embeddings"))?;
        let position = candle_nn::embedding(
            config.max_position_embeddings,
            h,
            emb.pp("position_embeddings"),
        )?;
        let token_type =
            candle_nn::embedding(config.type_vocab_size, h, emb.pp("token_type_embeddings"))?;
        let embedding_norm = candle_nn::layer_norm(h, eps, emb.pp("LayerNorm"))?;
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for i in 0..config.num_hidden_layers {
            layers.push(Layer::load(&vb.pp(format!("encoder.layer.{i}")), &config)?);
        }
        Ok(Self {
            config,
            activation,
            pad_id: tokens.pad_id(),
            word,
            position,
            token_type,
            embedding_norm,
            layers,
            device,
        })
    }

    /// The longest input the position embeddings allow, special tokens included.
    pub fn max_tokens(&self) -> usize {
        self.config.max_position_embeddings
    }

    /// Mean-pooled last hidden states of each input (ids with their special tokens, each at most
    /// [`Encoder::max_tokens`] long), run as one padded batch with an attention mask.
    pub fn embed(&self, inputs: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, ClassifierError> {
        if inputs.is_empty() {
            return Ok(Vec::new());
        }
        let t = inputs.iter().map(Vec::len).max().unwrap_or(0);
        if t == 0 || t > self.max_tokens() {
            return Err(ClassifierError::Input(format!(
                "an input of {t} tokens (1..={} allowed)",
                self.max_tokens()
            )));
        }
        let b = inputs.len();
        let mut ids = Vec::with_capacity(b * t);
        let mut mask = Vec::with_capacity(b * t);
        for input in inputs {
            ids.extend_from_slice(input);
            ids.extend(std::iter::repeat_n(self.pad_id, t - input.len()));
            mask.extend(std::iter::repeat_n(1.0f32, input.len()));
            mask.extend(std::iter::repeat_n(0.0f32, t - input.len()));
        }
        let ids = Tensor::from_vec(ids, (b, t), &self.device)?;
        let mask = Tensor::from_vec(mask, (b, t), &self.device)?;
        let hidden = self.forward(&ids, &mask)?;
        // Mean over the real tokens only.
        let m = mask.unsqueeze(2)?;
        let summed = hidden.broadcast_mul(&m)?.sum(1)?;
        let counts = m.sum(1)?;
        let pooled = summed.broadcast_div(&counts)?;
        Ok(pooled.to_vec2::<f32>()?)
    }

    /// Last hidden states `(batch, tokens, hidden)` for `ids` `(batch, tokens)` under `mask`
    /// (1 for a token, 0 for padding).
    fn forward(&self, ids: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let positions = Tensor::arange(0u32, t as u32, &self.device)?;
        let types = Tensor::zeros((b, t), DType::U32, &self.device)?;
        let x = self
            .word
            .forward(ids)?
            .broadcast_add(&self.position.forward(&positions)?)?
            .add(&self.token_type.forward(&types)?)?;
        let mut x = self.embedding_norm.forward(&x)?;
        // Padding gets a large negative score before the softmax, so no token attends to it.
        let bias = ((mask.ones_like()? - mask)? * -1e9f64)?
            .reshape((b, 1, 1, t))?
            .to_dtype(DType::F32)?;
        let heads = self.config.num_attention_heads;
        let head_dim = self.config.hidden_size / heads;
        let scale = 1.0 / (head_dim as f64).sqrt();
        for layer in &self.layers {
            let split = |y: Tensor| -> candle_core::Result<Tensor> {
                y.reshape((b, t, heads, head_dim))?
                    .transpose(1, 2)?
                    .contiguous()
            };
            let q = split(layer.query.forward(&x)?)?;
            let k = split(layer.key.forward(&x)?)?;
            let v = split(layer.value.forward(&x)?)?;
            let scores = (q.matmul(&k.t()?)? * scale)?.broadcast_add(&bias)?;
            let weights = candle_nn::ops::softmax_last_dim(&scores)?;
            let context =
                weights
                    .matmul(&v)?
                    .transpose(1, 2)?
                    .reshape((b, t, self.config.hidden_size))?;
            let attended = layer
                .attention_norm
                .forward(&(layer.attention_out.forward(&context)? + &x)?)?;
            let inner = self
                .activation
                .apply(&layer.intermediate.forward(&attended)?)?;
            x = layer
                .output_norm
                .forward(&(layer.output.forward(&inner)? + &attended)?)?;
        }
        Ok(x)
    }
}
