//! Traces in the shapes real framework instrumentations send, span for span (names, attributes,
//! the JSON inside them), assembled under each preset: what the question, contexts and answer come
//! out as, and which traces are not judged and why.
//!
//! - LangChain (langchain-core 1.8) + OpenLLMetry (opentelemetry-instrumentation-langchain 0.62):
//!   `RunnableSequence.workflow` root with `{"inputs": Q, "tags": [], ...}` / `{"outputs": A}`; the
//!   retriever `vector_db_retrieve VectorStoreRetriever` with its documents only in
//!   `traceloop.entity.output`; the model call `ChatOpenAI.chat` in GenAI attributes.
//! - LlamaIndex (llama-index-core 0.14) + OpenLLMetry (opentelemetry-instrumentation-llamaindex
//!   0.62): `RetrieverQueryEngine.workflow` root with `{"str_or_query_bundle": Q}`, nested
//!   `VectorIndexRetriever.task` spans whose output is a JSON array of JSON-encoded nodes with
//!   scores, task spans for embeddings and text splitting; index building as its own trace.
//! - Haystack (haystack-ai 3.4) + OpenInference: `Pipeline.run` root whose input is keyed by
//!   component and whose output holds the generator's replies as Python reprs.

use opentelemetry_proto::tonic::common::v1::{KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;

use super::build::{attr, request, str_attr as s};
use super::{Assembler, Completed, Outcome};
use crate::trace::Trace;
use crate::trace::config::DecodeConfig;
use crate::trace::otlp::config::{AssemblyConfig, Preset};

const Q: &str = "What should I know about the kettle?";
const A: &str = "From the documents: The Aurora kettle boils a litre of water in three minutes.";
const D0: &str = "The Aurora kettle boils a litre of water in three minutes.";
const D1: &str = "The Ergo chair supports up to one hundred and fifty kilograms.";

/// A span named `name`: started in id order, ended in reverse id order (a parent ends last).
fn sp(id: u64, parent: u64, name: &str, attributes: Vec<KeyValue>) -> Span {
    Span {
        name: name.into(),
        start_time_unix_nano: id * 1000,
        end_time_unix_nano: 1_700_000_000_000_000_000 - id,
        ..super::build::span(&[3; 16], id, parent, attributes)
    }
}

fn assemble(preset: Preset, spans: Vec<Span>) -> Outcome {
    let decode = DecodeConfig {
        preset,
        ..DecodeConfig::default()
    };
    let mut a: Assembler<u32> = Assembler::new(&decode, &AssemblyConfig::default());
    let mut out: Vec<Completed<u32>> = Vec::new();
    a.add_request(request(spans), None, 0, &mut out);
    a.finish(&mut out);
    assert_eq!(out.len(), 1);
    out.pop()
        .map(|c| c.outcome)
        .unwrap_or_else(|| unreachable!())
}

fn judged(o: Outcome) -> Trace {
    match o {
        Outcome::Trace(t) => t,
        o => panic!("not judged: {o:?}"),
    }
}

fn unjudged(o: Outcome) -> &'static str {
    match o {
        Outcome::Unjudged(_, why) => why,
        o => panic!("judged or rejected: {o:?}"),
    }
}

fn texts(t: &Trace) -> Vec<(Option<&str>, &str, Option<f64>)> {
    t.contexts
        .iter()
        .map(|c| (c.id.as_deref(), c.text.as_str(), c.score))
        .collect()
}

fn task(entity: &str, input: &str, output: &str) -> Vec<KeyValue> {
    vec![
        s("traceloop.workflow.name", "RunnableSequence"),
        s("traceloop.span.kind", "task"),
        s("traceloop.entity.name", entity),
        s("gen_ai.provider.name", "langchain"),
        s("gen_ai.operation.name", "execute_task"),
        s("traceloop.entity.input", input),
        s("traceloop.entity.output", output),
    ]
}

fn langchain_openllmetry(root_input: &str, root_output: &str) -> Vec<Span> {
    let inputs = format!(
        r#"{{"inputs": "{Q}", "tags": ["map:key:question"], "metadata": {{}}, "kwargs": {{"run_type": null, "name": "RunnablePassthrough"}}}}"#
    );
    let retriever_in = format!(
        r#"{{"query": "{Q}", "tags": ["seq:step:1", "InMemoryVectorStore", "Hashing"], "metadata": {{"ls_retriever_name": "vectorstore", "ls_vector_store_provider": "InMemoryVectorStore", "ls_embedding_provider": "Hashing"}}, "kwargs": {{"name": "VectorStoreRetriever"}}}}"#
    );
    let retriever_out = format!(
        r#"{{"documents": [{{"page_content": "{D1}", "metadata": {{}}}}, {{"page_content": "{D0}", "metadata": {{}}}}], "count": 2}}"#
    );
    let joined = format!(r#"{{"outputs": "{D1}\n{D0}", "kwargs": {{"tags": ["seq:step:2"]}}}}"#);
    let join_in = format!(
        r#"{{"inputs": [{{"lc": 1, "type": "constructor", "id": ["langchain", "schema", "document", "Document"], "kwargs": {{"id": "doc-5", "page_content": "{D1}", "type": "Document"}}}}], "tags": ["seq:step:2"], "metadata": {{}}, "kwargs": {{"name": "join"}}}}"#
    );
    let parser_out = format!(r#"{{"outputs": "{A}", "kwargs": {{"tags": ["seq:step:4"]}}}}"#);
    vec![
        sp(
            3,
            2,
            "execute_task RunnablePassthrough",
            task("RunnablePassthrough", &inputs, &inputs),
        ),
        sp(
            5,
            4,
            "vector_db_retrieve VectorStoreRetriever",
            vec![
                s("traceloop.workflow.name", "RunnableSequence"),
                s(
                    "traceloop.entity.path",
                    "RunnableParallel<context,question>.RunnableSequence",
                ),
                s("gen_ai.operation.name", "vector_db_retrieve"),
                s("gen_ai.provider.name", "langchain"),
                s("traceloop.span.kind", "task"),
                s("traceloop.entity.name", "VectorStoreRetriever"),
                s("traceloop.entity.input", &retriever_in),
                s("traceloop.entity.output", &retriever_out),
            ],
        ),
        sp(6, 4, "execute_task join", task("join", &join_in, &joined)),
        sp(
            4,
            2,
            "execute_task RunnableSequence",
            task("RunnableSequence", &inputs, &joined),
        ),
        sp(
            2,
            1,
            "execute_task RunnableParallel<context,question>",
            task("RunnableParallel<context,question>", &inputs, &joined),
        ),
        sp(
            7,
            1,
            "ChatOpenAI.chat",
            vec![
                s("traceloop.workflow.name", "RunnableSequence"),
                s("gen_ai.provider.name", "openai"),
                s("gen_ai.operation.name", "chat"),
                s("gen_ai.request.model", "gpt-4o-mini"),
                s(
                    "gen_ai.system_instructions",
                    r#"[{"type": "text", "content": "Answer from the documents."}]"#,
                ),
                s(
                    "gen_ai.input.messages",
                    &format!(
                        r#"[{{"role": "user", "parts": [{{"type": "text", "content": "Documents:\n{D1}\n{D0}\n\nQuestion: {Q}"}}]}}]"#
                    ),
                ),
                s("gen_ai.response.model", "gpt-4o-mini"),
                s(
                    "gen_ai.output.messages",
                    &format!(
                        r#"[{{"role": "assistant", "parts": [{{"type": "text", "content": "{A}"}}], "finish_reason": "stop"}}]"#
                    ),
                ),
            ],
        ),
        sp(
            8,
            1,
            "execute_task StrOutputParser",
            task("StrOutputParser", &inputs, &parser_out),
        ),
        sp(
            1,
            0,
            "RunnableSequence.workflow",
            vec![
                s("traceloop.workflow.name", "RunnableSequence"),
                s("traceloop.span.kind", "workflow"),
                s("traceloop.entity.name", "RunnableSequence"),
                s("gen_ai.provider.name", "langchain"),
                s("gen_ai.operation.name", "invoke_agent"),
                s("traceloop.entity.input", root_input),
                s("traceloop.entity.output", root_output),
            ],
        ),
    ]
}

#[test]
fn langchain_openllmetry_reads_the_retriever_task_and_unwraps_inputs_outputs() {
    let input = format!(
        r#"{{"inputs": "{Q}", "tags": [], "metadata": {{}}, "kwargs": {{"name": "RunnableSequence"}}}}"#
    );
    let output = format!(r#"{{"outputs": "{A}", "kwargs": {{"tags": []}}}}"#);
    let t = judged(assemble(
        Preset::OpenLlmetry,
        langchain_openllmetry(&input, &output),
    ));
    assert_eq!((t.query.as_str(), t.answer.as_str()), (Q, A));
    // The instrumentation writes page_content and metadata only: no ids, no scores.
    assert_eq!(texts(&t), vec![(None, D1, None), (None, D0, None)]);
    // An id the application put in the document's metadata is read.
    let mut spans = langchain_openllmetry(&input, &output);
    spans[1].attributes[7] = s(
        "traceloop.entity.output",
        &format!(
            r#"{{"documents": [{{"page_content": "{D1}", "metadata": {{"id": "doc-5", "source": "x"}}}}], "count": 1}}"#
        ),
    );
    let t = judged(assemble(Preset::OpenLlmetry, spans));
    assert_eq!(texts(&t), vec![(Some("doc-5"), D1, None)]);
    assert_eq!(
        t.metadata.field::<String>("model").as_deref(),
        Some("gpt-4o-mini")
    );
}

#[test]
fn langchain_openllmetry_dict_inputs_and_objects_where_text_should_be() {
    // A chain invoked with a dict: the question is under its key.
    let input = format!(r#"{{"inputs": {{"question": "{Q}", "history": []}}, "tags": []}}"#);
    let output = format!(r#"{{"outputs": "{A}"}}"#);
    let t = judged(assemble(
        Preset::OpenLlmetry,
        langchain_openllmetry(&input, &output),
    ));
    assert_eq!(t.query, Q);
    // An input with no text in it: the retriever's query stands in.
    let input = r#"{"inputs": {"messages": [[1, 2]]}, "tags": []}"#;
    let t = judged(assemble(
        Preset::OpenLlmetry,
        langchain_openllmetry(input, &output),
    ));
    assert_eq!(t.query, Q);
    // An output that is a serialized message with no text: the model call's completion.
    let output = r#"{"outputs": {"lc": 1, "type": "constructor", "id": ["x"], "kwargs": {}}}"#;
    let t = judged(assemble(
        Preset::OpenLlmetry,
        langchain_openllmetry(input, output),
    ));
    assert_eq!(t.answer, A);
    // Nothing readable anywhere: counted, not judged.
    let mut spans = langchain_openllmetry(input, output);
    spans.retain(|sp| !sp.name.starts_with("ChatOpenAI"));
    for sp in &mut spans {
        for kv in &mut sp.attributes {
            if kv.key == "traceloop.entity.input" && sp.name.starts_with("vector_db") {
                *kv = s("traceloop.entity.input", r#"{"tags": []}"#);
            }
        }
    }
    assert_eq!(
        unjudged(assemble(Preset::OpenLlmetry, spans.clone())),
        "unreadable_question"
    );
    let question = format!(r#"{{"inputs": "{Q}"}}"#);
    spans
        .last_mut()
        .unwrap_or_else(|| unreachable!())
        .attributes[5] = s("traceloop.entity.input", &question);
    assert_eq!(
        unjudged(assemble(Preset::OpenLlmetry, spans)),
        "unreadable_answer"
    );
}

fn node(id: &str, text: &str, score: f64) -> String {
    let node = serde_json::json!({
        "node": {"id_": id, "embedding": null, "metadata": {}, "excluded_embed_metadata_keys": [],
                 "excluded_llm_metadata_keys": [], "relationships": {},
                 "metadata_template": "{key}: {value}", "metadata_separator": "\n", "text": text,
                 "mimetype": "text/plain", "start_char_idx": null, "end_char_idx": null,
                 "text_template": "{metadata_str}\n\n{content}", "class_name": "TextNode"},
        "score": score, "class_name": "NodeWithScore"});
    node.to_string()
}

fn llamaindex_task(entity: &str, input: &str, output: &str) -> Vec<KeyValue> {
    vec![
        s("traceloop.span.kind", "task"),
        s("traceloop.entity.name", entity),
        s("traceloop.entity.input", input),
        s("traceloop.entity.output", output),
    ]
}

fn llamaindex_openllmetry() -> Vec<Span> {
    let nodes = serde_json::to_string(&[node("doc-0", D0, 0.41), node("doc-5", D1, 0.37)])
        .unwrap_or_default();
    let bundle = format!(
        r#"{{"query_str": "{Q}", "image_path": null, "custom_embedding_strs": null, "embedding": null}}"#
    );
    let response =
        format!(r#"{{"response": "{A}", "metadata": {{"doc-0": {{}}, "doc-5": {{}}}}}}"#);
    let chunks = format!(r#"["{D0}\n\n{D1}"]"#);
    vec![
        sp(
            5,
            4,
            "Hashing.task",
            vec![
                s("traceloop.span.kind", "task"),
                s("traceloop.entity.name", "Hashing.task"),
                s("traceloop.entity.input", &format!(r#"{{"query": "{Q}"}}"#)),
                s("gen_ai.operation.name", "embeddings"),
                s("gen_ai.request.model", "unknown"),
                s("traceloop.entity.output", "[-0.44, 0.44, 0.0, 0.0]"),
            ],
        ),
        sp(
            4,
            3,
            "VectorIndexRetriever.task",
            llamaindex_task(
                "VectorIndexRetriever.task",
                &format!(r#"{{"query_bundle": {bundle}}}"#),
                &nodes,
            ),
        ),
        sp(
            3,
            2,
            "VectorIndexRetriever.task",
            llamaindex_task(
                "VectorIndexRetriever.task",
                &format!(r#"{{"str_or_query_bundle": {bundle}}}"#),
                &nodes,
            ),
        ),
        sp(
            7,
            6,
            "TokenTextSplitter.task",
            llamaindex_task(
                "TokenTextSplitter.task",
                &format!(r#"{{"text": "{D0}\n\n{D1}"}}"#),
                &chunks,
            ),
        ),
        sp(
            8,
            6,
            "openai.chat",
            vec![
                s("gen_ai.operation.name", "chat"),
                s("gen_ai.provider.name", "openai"),
                s("gen_ai.request.model", "gpt-4o-mini"),
                s(
                    "gen_ai.input.messages",
                    &format!(
                        r#"[{{"role": "user", "parts": [{{"content": "Context information is below.\n{D0}\nQuery: {Q}\nAnswer: ", "type": "text"}}]}}]"#
                    ),
                ),
                s("gen_ai.response.model", "gpt-4o-mini"),
                s(
                    "gen_ai.output.messages",
                    &format!(
                        r#"[{{"role": "assistant", "parts": [{{"content": "{A}", "type": "text"}}], "finish_reason": "stop"}}]"#
                    ),
                ),
            ],
        ),
        sp(
            6,
            2,
            "CompactAndRefine.task",
            llamaindex_task(
                "CompactAndRefine.task",
                &format!(r#"{{"query_str": "{Q}", "text_chunks": ["{D0}", "{D1}"]}}"#),
                &format!(r#""{A}""#),
            ),
        ),
        sp(
            2,
            1,
            "RetrieverQueryEngine.task",
            llamaindex_task(
                "RetrieverQueryEngine.task",
                &format!(r#"{{"query_bundle": {bundle}}}"#),
                &response,
            ),
        ),
        sp(
            1,
            0,
            "RetrieverQueryEngine.workflow",
            vec![
                s("traceloop.span.kind", "workflow"),
                s("traceloop.entity.name", "RetrieverQueryEngine.workflow"),
                s(
                    "traceloop.entity.input",
                    &format!(r#"{{"str_or_query_bundle": "{Q}"}}"#),
                ),
                s("traceloop.entity.output", &response),
            ],
        ),
    ]
}

#[test]
fn llamaindex_openllmetry_reads_nodes_from_the_retriever_task() {
    let t = judged(assemble(Preset::OpenLlmetry, llamaindex_openllmetry()));
    assert_eq!((t.query.as_str(), t.answer.as_str()), (Q, A));
    // The two nested retriever tasks carry the same nodes: each kept once, by id.
    assert_eq!(
        texts(&t),
        vec![
            (Some("doc-0"), D0, Some(0.41)),
            (Some("doc-5"), D1, Some(0.37))
        ]
    );
    // A query bundle object in place of the question string.
    let mut spans = llamaindex_openllmetry();
    let root = spans.last_mut().unwrap_or_else(|| unreachable!());
    root.attributes[2] = s(
        "traceloop.entity.input",
        &format!(r#"{{"str_or_query_bundle": {{"query_str": "{Q}", "embedding": null}}}}"#),
    );
    let t = judged(assemble(Preset::OpenLlmetry, spans));
    assert_eq!(t.query, Q);
    // Without the OpenAI instrumentation's model call span: judged, with no model.
    let mut spans = llamaindex_openllmetry();
    spans.retain(|sp| sp.name != "openai.chat");
    let t = judged(assemble(Preset::OpenLlmetry, spans));
    assert_eq!((t.query.as_str(), t.answer.as_str()), (Q, A));
    assert_eq!(t.metadata.field::<String>("model"), None);
}

#[test]
fn index_building_is_not_a_rag_request() {
    let texts = serde_json::json!({"texts": [D0, D1]}).to_string();
    let mut spans = vec![sp(
        1,
        0,
        "Hashing.workflow",
        vec![
            s("traceloop.span.kind", "workflow"),
            s("traceloop.entity.name", "Hashing.workflow"),
            s("traceloop.entity.input", &texts),
            s("traceloop.entity.output", "[[0.1, 0.2], [0.3, 0.4]]"),
        ],
    )];
    for id in 2..6 {
        spans.push(sp(
            id,
            1,
            "Hashing.task",
            vec![
                s("traceloop.span.kind", "task"),
                s("traceloop.entity.name", "Hashing.task"),
                s("traceloop.entity.input", &texts),
                s("gen_ai.operation.name", "embeddings"),
                s("traceloop.entity.output", "[0.1, 0.2]"),
            ],
        ));
    }
    assert_eq!(unjudged(assemble(Preset::OpenLlmetry, spans)), "not_rag");
    // The same under OpenInference: EMBEDDING spans only.
    let spans = vec![
        sp(
            2,
            1,
            "Hashing.get_text_embedding_batch",
            vec![s("openinference.span.kind", "EMBEDDING")],
        ),
        sp(
            1,
            0,
            "VectorStoreIndex.__init__",
            vec![s("openinference.span.kind", "CHAIN")],
        ),
    ];
    assert_eq!(unjudged(assemble(Preset::OpenInference, spans)), "not_rag");
}

fn haystack_openinference(generator: &[KeyValue]) -> Vec<Span> {
    let doc_repr = format!("Document(id=doc-0, content: '{D0}', score: 2.99)");
    let reply_repr = format!(
        "ChatMessage(_role=<ChatRole.ASSISTANT: 'assistant'>, _content=[TextContent(text='{A}')], _name=None, _meta={{'model': 'gpt-4o-mini'}})"
    );
    let json = |v: serde_json::Value| v.to_string();
    let mut llm = vec![
        s("input.mime_type", "application/json"),
        s("output.mime_type", "application/json"),
        s(
            "output.value",
            &json(serde_json::json!({"replies": [reply_repr]})),
        ),
        s("llm.model_name", "gpt-4o-mini"),
        s("llm.input_messages.1.message.role", "user"),
        s(
            "llm.input_messages.1.message.content",
            &format!("Documents:\n{D0}\n\nQuestion: {Q}"),
        ),
        s("openinference.span.kind", "LLM"),
    ];
    llm.extend(generator.iter().cloned());
    vec![
        sp(
            2,
            1,
            "InMemoryBM25Retriever.run",
            vec![
                s("input.mime_type", "application/json"),
                s(
                    "input.value",
                    &json(serde_json::json!({"query": Q, "filters": null, "top_k": null})),
                ),
                s("output.mime_type", "application/json"),
                s(
                    "output.value",
                    &json(serde_json::json!({"documents": [doc_repr]})),
                ),
                s("retrieval.documents.0.document.content", D0),
                s("retrieval.documents.0.document.id", "doc-0"),
                attr(
                    "retrieval.documents.0.document.score",
                    any_value::Value::DoubleValue(2.99),
                ),
                s("retrieval.documents.0.document.metadata", "{}"),
                s("openinference.span.kind", "RETRIEVER"),
            ],
        ),
        // Haystack 2's PromptBuilder is tagged LLM, with no output messages: not the generator.
        sp(
            3,
            1,
            "PromptBuilder.run",
            vec![
                s("input.mime_type", "application/json"),
                s(
                    "input.value",
                    &json(serde_json::json!({"template": null, "kwargs": {"question": Q}})),
                ),
                s("output.mime_type", "application/json"),
                s(
                    "output.value",
                    &json(
                        serde_json::json!({"prompt": format!("Documents:\n{D0}\n\nQuestion: {Q}")}),
                    ),
                ),
                s("openinference.span.kind", "LLM"),
            ],
        ),
        sp(4, 1, "OpenAIChatGenerator.run", llm),
        sp(
            1,
            0,
            "Pipeline.run",
            vec![
                s("input.mime_type", "application/json"),
                s(
                    "input.value",
                    &json(serde_json::json!({
                        "data": {"retriever": {"query": Q}, "prompt_builder": {"question": Q}},
                        "include_outputs_from": "{'retriever'}"})),
                ),
                s("output.mime_type", "application/json"),
                s(
                    "output.value",
                    &json(serde_json::json!({
                        "retriever": {"documents": [doc_repr]},
                        "llm": {"replies": [reply_repr]}})),
                ),
                s("openinference.span.kind", "CHAIN"),
            ],
        ),
    ]
}

#[test]
fn haystack_pipeline_input_by_component_and_the_generators_message() {
    let generator = [
        s("llm.output_messages.0.message.role", "assistant"),
        s("llm.output_messages.0.message.content", A),
    ];
    let t = judged(assemble(
        Preset::OpenInference,
        haystack_openinference(&generator),
    ));
    assert_eq!((t.query.as_str(), t.answer.as_str()), (Q, A));
    assert_eq!(texts(&t), vec![(Some("doc-0"), D0, Some(2.99))]);
    // Without the generator's output message the replies are reprs only: not judged.
    assert_eq!(
        unjudged(assemble(Preset::OpenInference, haystack_openinference(&[]))),
        "unreadable_answer"
    );
    // Haystack 2's generator replies are plain strings: read from the pipeline's output.
    let mut spans = haystack_openinference(&[]);
    let root = spans.last_mut().unwrap_or_else(|| unreachable!());
    root.attributes[3] = s(
        "output.value",
        &serde_json::json!({"llm": {"replies": [A], "meta": [{"model": "gpt-4o-mini"}]}})
            .to_string(),
    );
    let t = judged(assemble(Preset::OpenInference, spans));
    assert_eq!(t.answer, A);
}
