#!/usr/bin/env python3
"""A raw OTLP/gRPC client for tests/it/otlp.rs: grpcio calls with payloads the test chooses.

Reads JSON lines from stdin, {"method": "/pkg.Service/Method", "payload": HEX, "gzip": bool}, makes
each call against --target HOST:PORT and prints one JSON line per call: {"code": "OK" | the gRPC
status code name, "details": text, "answer": HEX of the answer's bytes}.

usage: otlp_grpc_client.py --target HOST:PORT [--token T] < calls.jsonl
"""
import argparse
import json
import sys

import grpc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--token", help="bearer token sent as `authorization` metadata")
    a = ap.parse_args()
    # No client-side size limit: the server's limit is what is tested.
    channel = grpc.insecure_channel(a.target, options=[("grpc.max_send_message_length", -1)])
    for line in sys.stdin:
        call = json.loads(line)
        stub = channel.unary_unary(call["method"])
        compression = grpc.Compression.Gzip if call.get("gzip") else grpc.Compression.NoCompression
        try:
            metadata = [("authorization", f"Bearer {a.token}")] if a.token else None
            answer = stub(bytes.fromhex(call["payload"]), timeout=20, compression=compression,
                          metadata=metadata)
            out = {"code": "OK", "details": "", "answer": answer.hex()}
        except grpc.RpcError as e:
            out = {"code": e.code().name, "details": e.details() or "", "answer": ""}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
