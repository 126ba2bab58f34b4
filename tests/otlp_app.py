#!/usr/bin/env python3
"""A small RAG service instrumented with the OpenTelemetry Python SDK, for ragwatch's OTLP tests.

Each request is a trace: a root span holding the question and the answer, a retrieval span holding
the documents (id, text, score), and the model call, made with the real `openai` client against a
local stand-in server and traced by a real instrumentor:

  openinference  openinference-instrumentation-openai; CHAIN and RETRIEVER spans with
                 openinference-semantic-conventions
  openllmetry    Traceloop's opentelemetry-instrumentation-openai; a workflow span
                 (traceloop.entity.*) and a vector-store span with db.query.result events
  gen_ai         workflow and retrieval spans from opentelemetry-util-genai (the GenAI conventions'
                 own helper, content on spans); the chat span from Traceloop's instrumentor, which
                 writes GenAI attributes (gen_ai.operation.name, gen_ai.input/output.messages).
                 (opentelemetry-instrumentation-openai-v2 2.4b0 imports a module that
                 opentelemetry-util-genai 1.3b0 no longer has.)

Spans go out through the real OTLP/HTTP exporter (--endpoint, BatchSpanProcessor), the real
OTLP/gRPC exporter (--grpc-endpoint HOST:PORT, gzip) and/or to
--batches: the same spans serialized as ExportTraceServiceRequest messages, --batch-size spans per
message, so a message holds several traces and a trace's spans sit in several messages, as the
Collector's Kafka exporter writes them (otlp_proto: each message a big-endian u32 length then the
bytes; --json: OTLP JSON, one request per line). --native writes the same traces in ragwatch's own
schema, for comparison.

usage: otlp_app.py --preset P --n N [--seed S] [--endpoint URL] [--grpc-endpoint HOST:PORT]
                   [--batches FILE [--json]]
                   [--batch-size K] [--native FILE] [--strata a,b]
"""
import argparse
import base64
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ANSWERS = {}


class StandIn(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat completions endpoint answering each question with its answer."""

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        question = body["messages"][-1]["content"].rsplit("Question: ", 1)[-1]
        answer = ANSWERS.get(question, "I do not know.")
        reply = {
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1764410400,
            "model": "gen-1-2026-05-01",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": answer}}],
            "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def traces(n, seed, strata):
    out = subprocess.run([sys.executable, str(Path(__file__).with_name("gen_traces.py")), str(n),
                          "--seed", str(seed), "--strata", strata],
                         check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


class Batches:
    """A span exporter writing every `size` ended spans as one ExportTraceServiceRequest."""

    def __init__(self, path, size, as_json):
        from opentelemetry.sdk.trace.export import SpanExportResult
        self.ok = SpanExportResult.SUCCESS
        self.file = open(path, "wb")
        self.size, self.as_json, self.spans = size, as_json, []

    def export(self, spans):
        self.spans.extend(spans)
        while len(self.spans) >= self.size:
            self._write(self.spans[:self.size])
            self.spans = self.spans[self.size:]
        return self.ok

    def _write(self, spans):
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        request = encode_spans(spans)
        if self.as_json:
            from google.protobuf.json_format import MessageToDict
            # OTLP JSON: enums as integers, ids as hex (protobuf's JSON uses names and base64).
            d = MessageToDict(request, use_integers_for_enums=True)
            for rs in d.get("resourceSpans", []):
                for ss in rs.get("scopeSpans", []):
                    for sp in ss.get("spans", []):
                        for k in ("traceId", "spanId", "parentSpanId"):
                            if k in sp:
                                sp[k] = base64.b64decode(sp[k]).hex()
            self.file.write(json.dumps(d).encode() + b"\n")
        else:
            data = request.SerializeToString()
            self.file.write(len(data).to_bytes(4, "big") + data)

    def shutdown(self):
        if self.spans:
            self._write(self.spans)
            self.spans = []
        self.file.close()

    def force_flush(self, timeout_millis=30000):
        return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", required=True, choices=["openinference", "openllmetry", "gen_ai"])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--strata", default="head,tail,known_failure,out_of_scope,mystery")
    ap.add_argument("--endpoint")
    ap.add_argument("--grpc-endpoint")
    ap.add_argument("--grpc-token", help="bearer token sent as gRPC `authorization` metadata")
    ap.add_argument("--batches")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--batch-size", type=int, default=7)
    ap.add_argument("--native")
    a = ap.parse_args()

    if a.preset == "gen_ai":
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
        os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"

    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    provider = TracerProvider(resource=Resource.create({"service.name": "rag-service"}))
    if a.endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=a.endpoint), max_export_batch_size=a.batch_size,
            schedule_delay_millis=100))
    if a.grpc_endpoint:
        # The OTLP/gRPC exporter, gzip-compressed as the Collector's otlp exporter sends by default.
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import \
            OTLPSpanExporter as GrpcSpanExporter
        from opentelemetry.exporter.otlp.proto.grpc.exporter import Compression
        provider.add_span_processor(BatchSpanProcessor(
            GrpcSpanExporter(endpoint=a.grpc_endpoint, insecure=True,
                             compression=Compression.Gzip,
                             headers={"authorization": f"Bearer {a.grpc_token}"}
                             if a.grpc_token else None),
            max_export_batch_size=a.batch_size, schedule_delay_millis=100))
    if a.batches:
        provider.add_span_processor(SimpleSpanProcessor(Batches(a.batches, a.batch_size, a.json)))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("rag-service")

    if a.preset == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor
    else:
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    import openai
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.server_address[1]}/v1",
                           api_key="test-key", max_retries=0)

    def generate(question, docs):
        ANSWERS[question] = t["answer"]
        context = "\n".join(f"[{d['id']}] {d['text']}" for d in docs)
        r = client.chat.completions.create(model="gen-1-2026-05-01", temperature=0, messages=[
            {"role": "system", "content": "Answer from the documents; cite them as [id]."},
            {"role": "user", "content": f"Documents:\n{context}\n\nQuestion: {question}"}])
        return r.choices[0].message.content

    native = open(a.native, "w") if a.native else None
    for t in traces(a.n, a.seed, a.strata):
        q, docs = t["query"], t["contexts"]
        if a.preset == "openinference":
            from openinference.semconv.trace import (DocumentAttributes, OpenInferenceSpanKindValues,
                                                     SpanAttributes)
            kind = SpanAttributes.OPENINFERENCE_SPAN_KIND
            with tracer.start_as_current_span("rag", attributes={
                    kind: OpenInferenceSpanKindValues.CHAIN.value,
                    SpanAttributes.INPUT_VALUE: q, SpanAttributes.INPUT_MIME_TYPE: "text/plain",
                    SpanAttributes.METADATA: json.dumps({"route": "support"}),
                    "ragwatch.stratum": t["stratum"]}) as root:
                with tracer.start_as_current_span("retrieve", attributes={
                        kind: OpenInferenceSpanKindValues.RETRIEVER.value,
                        SpanAttributes.INPUT_VALUE: q}) as r:
                    for i, d in enumerate(docs):
                        p = f"{SpanAttributes.RETRIEVAL_DOCUMENTS}.{i}."
                        r.set_attribute(p + DocumentAttributes.DOCUMENT_ID, d["id"])
                        r.set_attribute(p + DocumentAttributes.DOCUMENT_CONTENT, d["text"])
                        r.set_attribute(p + DocumentAttributes.DOCUMENT_SCORE, d["score"])
                answer = generate(q, docs)
                root.set_attribute(SpanAttributes.OUTPUT_VALUE, answer)
                root.set_attribute(SpanAttributes.OUTPUT_MIME_TYPE, "text/plain")
                trace_id = root.get_span_context().trace_id
        elif a.preset == "openllmetry":
            with tracer.start_as_current_span("rag.workflow", attributes={
                    "traceloop.span.kind": "workflow", "traceloop.entity.name": "rag",
                    "traceloop.entity.input": json.dumps({"args": [q], "kwargs": {}}),
                    "ragwatch.stratum": t["stratum"]}) as root:
                with tracer.start_as_current_span("chroma.query", attributes={
                        "db.system": "chroma", "db.operation": "query",
                        "db.vector.query.top_k": len(docs)}) as r:
                    for d in docs:
                        r.add_event("db.query.result", {"db.query.result.id": d["id"],
                                                        "db.query.result.score": d["score"],
                                                        "db.query.result.document": d["text"]})
                answer = generate(q, docs)
                root.set_attribute("traceloop.entity.output", json.dumps(answer))
                trace_id = root.get_span_context().trace_id
        else:
            from opentelemetry.util.genai.handler import TelemetryHandler
            from opentelemetry.util.genai.types import InputMessage, OutputMessage, Text
            handler = TelemetryHandler(tracer_provider=provider)
            with handler.workflow("rag") as wf:
                wf.input_messages = [InputMessage(role="user", parts=[Text(content=q)])]
                trace.get_current_span().set_attribute("ragwatch.stratum", t["stratum"])
                with handler.retrieval(data_source_id="products") as r:
                    r.query_text = q
                    # The GenAI document model has id and score; the text goes along as content.
                    r.documents = [{"id": d["id"], "score": d["score"], "content": d["text"]}
                                   for d in docs]
                answer = generate(q, docs)
                wf.output_messages = [OutputMessage(role="assistant", parts=[Text(content=answer)],
                                                    finish_reason="stop")]
                trace_id = trace.get_current_span().get_span_context().trace_id
        if native:
            t = dict(t, trace_id=format(trace_id, "032x"), answer=answer)
            native.write(json.dumps(t) + "\n")
    provider.force_flush()
    provider.shutdown()
    server.shutdown()
    if native:
        native.close()


if __name__ == "__main__":
    main()
