#!/usr/bin/env python3
"""The Python side of benches/ingest_vs_python.sh: an aiokafka consumer doing what ragwatch's ingest
does, less the offline judge's full signal set: JSON decode with field checks, stratify, hash
sampling, and a lexical support score (share of the answer's words found in the contexts).
Reads until it has consumed N messages and prints messages per second."""
import asyncio, hashlib, json, re, sys, time

from aiokafka import AIOKafkaConsumer

WORD = re.compile(r"[a-z0-9]+")
DECLARED = {"head", "tail", "known_failure", "out_of_scope"}


def process(value, counts):
    try:
        t = json.loads(value)
        tid, q, ctx, ans = t["trace_id"], t["query"], t["contexts"], t["answer"]
        if not isinstance(tid, str) or not isinstance(q, str) or not isinstance(ans, str) or not isinstance(ctx, list):
            raise ValueError
    except Exception:
        counts["rejected"] += 1
        return
    stratum = t.get("stratum") or "default"
    if stratum not in DECLARED:
        stratum = "other"
    h = int.from_bytes(hashlib.blake2b(tid.encode(), digest_size=8).digest(), "little")
    sampled = h < 0.05 * 2**64
    words = set()
    for c in ctx:
        words.update(WORD.findall((c if isinstance(c, str) else c.get("text", "")).lower()))
    a = WORD.findall(ans.lower())
    support = sum(w in words for w in a) / len(a) if a else 0.0
    counts[stratum] = counts.get(stratum, 0) + 1
    counts["sampled"] += sampled
    counts["support"] += support


async def main(brokers, topic, n):
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=brokers, group_id=f"py-{time.time()}",
                                auto_offset_reset="earliest", enable_auto_commit=True,
                                fetch_max_wait_ms=5, max_partition_fetch_bytes=8 << 20)
    await consumer.start()
    counts = {"rejected": 0, "sampled": 0, "support": 0.0}
    seen, start, cpu_start = 0, None, None
    try:
        while seen < n:
            batch = await consumer.getmany(timeout_ms=1000, max_records=5000)
            for records in batch.values():
                if start is None:
                    start, cpu_start = time.perf_counter(), time.process_time()
                for r in records:
                    process(r.value, counts)
                    seen += 1
    finally:
        await consumer.stop()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    print(f"python aiokafka: {seen} messages in {elapsed:.2f} s = {seen / elapsed:.0f} traces/s; "
          f"{cpu:.2f} CPU s = {seen / cpu:.0f} traces per CPU second")


async def produce(brokers, topic, path):
    from aiokafka import AIOKafkaProducer
    p = AIOKafkaProducer(bootstrap_servers=brokers, linger_ms=5, max_batch_size=1 << 20, max_request_size=8 << 20)
    await p.start()
    n = 0
    with open(path, "rb") as f:
        for line in f:
            await p.send(topic, line.rstrip(b"\n"))
            n += 1
    await p.flush()
    await p.stop()
    print(f"produced {n}")


if __name__ == "__main__":
    if sys.argv[1] == "produce":
        asyncio.run(produce(sys.argv[2], sys.argv[3], sys.argv[4]))
    else:
        asyncio.run(main(sys.argv[2], sys.argv[3], int(sys.argv[4])))
