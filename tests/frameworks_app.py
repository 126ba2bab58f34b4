#!/usr/bin/env python3
"""A RAG pipeline built with a real framework and traced by a real instrumentor, for
tests/it/frameworks.rs.

  --framework langchain   langchain-core's InMemoryVectorStore (a deterministic hashing embedding),
                          a prompt, langchain-openai's ChatOpenAI, StrOutputParser
  --framework llamaindex  llama-index-core's VectorStoreIndex (in memory, the same embedding) and its
                          query engine, llama-index-llms-openai's OpenAI
  --framework haystack    haystack-ai's InMemoryDocumentStore, InMemoryBM25Retriever,
                          ChatPromptBuilder, OpenAIChatGenerator
  --framework dspy        a dspy.Module: dspy.Retrieve over an in-memory retrieval model (the same
                          embedding), dspy.Predict("context, question -> answer"), dspy.LM
  --instrumentor openllmetry | openinference

The model is a loopback OpenAI-compatible stand-in (http.server in this process) that answers with
the first sentence of the prompt's first document (in DSPy's field markers when the prompt asks for
them). Nothing is downloaded at run time.

Spans go out through the OpenTelemetry SDK's OTLP/HTTP exporter (--endpoint) and are also written
as OTLP protobuf requests (--batches: a big-endian u32 length before each message, the Collector
file exporter's `proto` form) and as OTLP JSON lines (--otlp-json: one request per line, ids in hex,
the file exporter's `json` form); the same export calls in both. --truth gets
one JSON line per query with what the pipeline itself used: its trace id, the question, the
retrieved documents (id, text) and the answer. --dump writes every span's name and attributes (to
see what an instrumentor emits).

usage: frameworks_app.py --framework F --instrumentor I --n N [--endpoint URL] [--batches FILE]
                         [--otlp-json FILE] [--truth FILE] [--dump FILE]
"""
import argparse
import base64
import hashlib
import json
import math
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOPICS = [
    ("kettle", "The Aurora kettle boils a litre of water in three minutes."),
    ("lamp", "The Lumen desk lamp has five brightness levels and a USB port."),
    ("bike", "The Strider bike weighs nine kilograms and folds in ten seconds."),
    ("tent", "The Summit tent sleeps four people and packs down to two kilograms."),
    ("phone", "The Orbit phone battery lasts two days on a single charge."),
    ("chair", "The Ergo chair supports up to one hundred and fifty kilograms."),
    ("oven", "The Brava oven preheats to two hundred degrees in six minutes."),
    ("drone", "The Kite drone flies for thirty minutes and films in 4K."),
    ("watch", "The Tempo watch is water resistant to fifty metres."),
    ("speaker", "The Echo speaker plays for twenty hours and pairs two devices."),
]
EXTRA = [
    "Orders ship within two working days from the Lisbon warehouse.",
    "Returns are free within thirty days of delivery.",
    "Every product carries a two year warranty.",
]
DOCS = [(f"doc-{i}", text) for i, (_, text) in enumerate(TOPICS)] + [
    (f"doc-x{i}", text) for i, text in enumerate(EXTRA)]
QUESTIONS = [f"What should I know about the {name}?" for name, _ in TOPICS] + [
    f"How long does the {name} last or take?" for name, _ in TOPICS]
DIM = 64
TOP_K = 2


def embed(text):
    """A bag-of-words hashing embedding, unit length: deterministic, nothing to download."""
    v = [0.0] * DIM
    for w in re.findall(r"[a-z0-9]+", text.lower()):
        h = int.from_bytes(hashlib.sha256(w.encode()).digest()[:4], "big")
        v[h % DIM] += 1.0 if h & 1 << 31 else -1.0
    n = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / n for x in v]


class StandIn(BaseHTTPRequestHandler):
    """OpenAI-compatible chat completions: the first sentence of the first document in the prompt."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = "\n".join(m["content"] if isinstance(m["content"], str) else
                           " ".join(p.get("text", "") for p in m["content"])
                           for m in body["messages"])
        found = [text for _, text in DOCS if text in prompt]
        first = min(found, key=prompt.index) if found else None
        answer = f"From the documents: {first}" if first else "I do not know."
        if "[[ ## answer ## ]]" in prompt:
            # DSPy's chat adapter reads the output fields between its markers.
            answer = f"[[ ## answer ## ]]\n{answer}\n\n[[ ## completed ## ]]"
        reply = {
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1764410400,
            "model": body.get("model", "gpt-4o-mini"),
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": answer}}],
            "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Batches:
    """A span exporter writing each export call as one length-prefixed ExportTraceServiceRequest."""

    def __init__(self, path):
        from opentelemetry.sdk.trace.export import SpanExportResult
        self.ok = SpanExportResult.SUCCESS
        self.file = open(path, "wb")
        self.lock = threading.Lock()

    def export(self, spans):
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        data = encode_spans(spans).SerializeToString()
        # Spans end on several threads (LangChain's parallel branches): one whole message a write.
        with self.lock:
            self.file.write(len(data).to_bytes(4, "big") + data)
        return self.ok

    def shutdown(self):
        self.file.close()

    def force_flush(self, timeout_millis=30000):
        return True


class JsonLines:
    """A span exporter writing each export call as one OTLP JSON line: protobuf's JSON mapping
    (camelCase names, 64-bit integers as strings, enums as integers) with trace and span ids in hex,
    as OTLP JSON wants them (protobuf's mapping would write base64)."""

    def __init__(self, path):
        from opentelemetry.sdk.trace.export import SpanExportResult
        self.ok = SpanExportResult.SUCCESS
        self.file = open(path, "w")
        self.lock = threading.Lock()

    def export(self, spans):
        from google.protobuf.json_format import MessageToDict
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        request = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
        for resource in request.get("resourceSpans", []):
            for scope in resource.get("scopeSpans", []):
                for span in scope.get("spans", []):
                    for item in [span] + span.get("links", []):
                        for key in ("traceId", "spanId", "parentSpanId"):
                            if key in item:
                                item[key] = base64.b64decode(item[key]).hex()
        line = json.dumps(request, separators=(",", ":")) + "\n"
        # Spans end on several threads; a text file's writes are not atomic: one line a write.
        with self.lock:
            self.file.write(line)
        return self.ok

    def shutdown(self):
        self.file.close()

    def force_flush(self, timeout_millis=30000):
        return True


class Roots:
    """A span exporter remembering the trace ids of root spans, in the order they end."""

    def __init__(self, dump):
        from opentelemetry.sdk.trace.export import SpanExportResult
        self.ok = SpanExportResult.SUCCESS
        self.ids = []
        self.dump = open(dump, "w") if dump else None

    def export(self, spans):
        for s in spans:
            if s.parent is None:
                self.ids.append(format(s.context.trace_id, "032x"))
            if self.dump:
                self.dump.write(json.dumps({
                    "trace": format(s.context.trace_id, "032x"), "name": s.name,
                    "span": format(s.context.span_id, "016x"),
                    "parent": format(s.parent.span_id, "016x") if s.parent else None,
                    "attributes": dict(s.attributes or {}),
                    "events": [{"name": e.name, "attributes": dict(e.attributes or {})}
                               for e in s.events]}, default=str) + "\n")
        return self.ok

    def shutdown(self):
        if self.dump:
            self.dump.close()

    def force_flush(self, timeout_millis=30000):
        return True


def instrument(framework, instrumentor, provider):
    if instrumentor == "openinference":
        if framework == "langchain":
            from openinference.instrumentation.langchain import LangChainInstrumentor as I
        elif framework == "llamaindex":
            from openinference.instrumentation.llama_index import LlamaIndexInstrumentor as I
        elif framework == "haystack":
            from openinference.instrumentation.haystack import HaystackInstrumentor as I
        else:
            from openinference.instrumentation.dspy import DSPyInstrumentor as I
        I().instrument(tracer_provider=provider)
        return
    if framework == "langchain":
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor
        LangchainInstrumentor().instrument(tracer_provider=provider)
    elif framework == "llamaindex":
        from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor
        LlamaIndexInstrumentor().instrument(tracer_provider=provider)
        # The LlamaIndex instrumentation leaves the model call to the OpenAI one.
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
        OpenAIInstrumentor().instrument(tracer_provider=provider)
    elif framework == "dspy":
        raise SystemExit("OpenLLMetry (0.62) has no DSPy instrumentation")
    else:
        raise SystemExit("OpenLLMetry's Haystack instrumentation (0.62) wraps "
                         "haystack.components.generators.openai, which Haystack 3 no longer has")


def langchain_pipeline(base_url):
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_openai import ChatOpenAI

    class Hashing(Embeddings):
        def embed_documents(self, texts):
            return [embed(t) for t in texts]

        def embed_query(self, text):
            return embed(text)

    store = InMemoryVectorStore(Hashing())
    store.add_documents([Document(page_content=t, id=i) for i, t in DOCS])
    retriever = store.as_retriever(search_kwargs={"k": TOP_K})
    prompt = ChatPromptTemplate.from_messages([
        ("system", "Answer from the documents."),
        ("human", "Documents:\n{context}\n\nQuestion: {question}")])
    llm = ChatOpenAI(model="gpt-4o-mini", base_url=base_url, api_key="test-key",
                     temperature=0, max_retries=0)

    def join(docs):
        return "\n".join(d.page_content for d in docs)

    chain = ({"context": retriever | join, "question": RunnablePassthrough()}
             | prompt | llm | StrOutputParser())

    class Seen(BaseCallbackHandler):
        def __init__(self):
            self.docs = []

        def on_retriever_end(self, documents, **kwargs):
            self.docs = [{"id": d.id, "text": d.page_content} for d in documents]

    def run(question):
        seen = Seen()
        answer = chain.invoke(question, config={"callbacks": [seen]})
        return answer, seen.docs

    return run


def llamaindex_pipeline(base_url):
    from llama_index.core import Settings, VectorStoreIndex
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.core.schema import TextNode
    from llama_index.llms.openai import OpenAI

    class Hashing(BaseEmbedding):
        def _get_query_embedding(self, query):
            return embed(query)

        async def _aget_query_embedding(self, query):
            return embed(query)

        def _get_text_embedding(self, text):
            return embed(text)

    # Token counting without tiktoken's downloaded encodings.
    Settings.tokenizer = lambda text: text.split()
    Settings.embed_model = Hashing()
    Settings.llm = OpenAI(model="gpt-4o-mini", api_base=base_url, api_key="test-key",
                          temperature=0, max_retries=0)
    index = VectorStoreIndex([TextNode(text=t, id_=i) for i, t in DOCS])
    engine = index.as_query_engine(similarity_top_k=TOP_K)

    def run(question):
        r = engine.query(question)
        return str(r.response), [{"id": n.node.node_id, "text": n.node.get_content()}
                                 for n in r.source_nodes]

    return run


def haystack_pipeline(base_url):
    from haystack import Document, Pipeline
    from haystack.components.builders import ChatPromptBuilder
    from haystack.components.generators.chat import OpenAIChatGenerator
    from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
    from haystack.dataclasses import ChatMessage
    from haystack.document_stores.in_memory import InMemoryDocumentStore
    from haystack.utils import Secret

    store = InMemoryDocumentStore()
    store.write_documents([Document(id=i, content=t) for i, t in DOCS])
    template = [
        ChatMessage.from_system("Answer from the documents."),
        ChatMessage.from_user("Documents:\n{% for d in documents %}{{ d.content }}\n{% endfor %}\n"
                              "Question: {{ question }}")]
    p = Pipeline()
    p.add_component("retriever", InMemoryBM25Retriever(document_store=store, top_k=TOP_K))
    p.add_component("prompt_builder", ChatPromptBuilder(template=template,
                                                        required_variables=["question"]))
    p.add_component("llm", OpenAIChatGenerator(api_key=Secret.from_token("test-key"),
                                               model="gpt-4o-mini", api_base_url=base_url))
    p.connect("retriever.documents", "prompt_builder.documents")
    p.connect("prompt_builder.prompt", "llm.messages")

    def run(question):
        out = p.run({"retriever": {"query": question}, "prompt_builder": {"question": question}},
                    include_outputs_from={"retriever"})
        docs = [{"id": d.id, "text": d.content} for d in out["retriever"]["documents"]]
        return out["llm"]["replies"][0].text, docs

    return run


def dspy_pipeline(base_url):
    import os
    # The model metadata from the package, not fetched from GitHub at the first call.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "true")
    import dspy

    def rm(query, k=TOP_K, **kwargs):
        """An in-memory retrieval model: the k documents nearest the query."""
        q = embed(query)
        ranked = sorted(DOCS, key=lambda d: -sum(a * b for a, b in zip(q, embed(d[1]))))
        return [dspy.dsp.utils.dotdict(long_text=text) for _, text in ranked[:k]]

    lm = dspy.LM("openai/gpt-4o-mini", api_base=base_url, api_key="test-key", cache=False,
                 num_retries=0, temperature=0)
    dspy.configure(lm=lm, rm=rm)

    class Rag(dspy.Module):
        def __init__(self):
            super().__init__()
            self.retrieve = dspy.Retrieve(k=TOP_K)
            self.generate = dspy.Predict("context, question -> answer")

        def forward(self, question):
            context = self.retrieve(question).passages
            return dspy.Prediction(
                context=context, answer=self.generate(context=context, question=question).answer)

    rag = Rag()

    def run(question):
        p = rag(question=question)
        # DSPy's Retrieve keeps only the passages' text.
        return p.answer, [{"id": "", "text": t} for t in p.context]

    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--framework", required=True, choices=["langchain", "llamaindex", "haystack", "dspy"])
    ap.add_argument("--instrumentor", required=True, choices=["openllmetry", "openinference"])
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--endpoint")
    ap.add_argument("--batches")
    ap.add_argument("--otlp-json")
    ap.add_argument("--truth")
    ap.add_argument("--dump")
    a = ap.parse_args()

    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"

    provider = TracerProvider(resource=Resource.create({"service.name": "rag-service"}))
    if a.endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=a.endpoint), schedule_delay_millis=100))
    if a.batches:
        provider.add_span_processor(SimpleSpanProcessor(Batches(a.batches)))
    if a.otlp_json:
        provider.add_span_processor(SimpleSpanProcessor(JsonLines(a.otlp_json)))
    roots = Roots(a.dump)
    provider.add_span_processor(SimpleSpanProcessor(roots))
    trace.set_tracer_provider(provider)
    instrument(a.framework, a.instrumentor, provider)

    run = {"langchain": langchain_pipeline, "llamaindex": llamaindex_pipeline,
           "haystack": haystack_pipeline, "dspy": dspy_pipeline}[a.framework](base_url)
    truth = open(a.truth, "w") if a.truth else None
    setup_traces = len(roots.ids)
    for i in range(a.n):
        question = QUESTIONS[i % len(QUESTIONS)]
        before = len(roots.ids)
        answer, docs = run(question)
        ids = roots.ids[before:]
        assert len(ids) == 1, f"query {i} made {len(ids)} root spans"
        if truth:
            truth.write(json.dumps({"trace_id": ids[0], "question": question,
                                    "contexts": docs, "answer": answer}) + "\n")
    if truth:
        truth.write(json.dumps({"setup_traces": setup_traces}) + "\n")
        truth.close()
    provider.force_flush()
    provider.shutdown()
    server.shutdown()


if __name__ == "__main__":
    main()
