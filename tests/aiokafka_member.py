#!/usr/bin/env python3
"""A plain aiokafka consumer group member for tests/it/restart_stall.rs: joins GROUP on TOPIC, reads
and discards messages, and prints `assigned N` (flushed) each time a rebalance hands it N
partitions, so the test can time the join of a member started after others were killed.

usage: aiokafka_member.py BROKERS TOPIC GROUP SESSION_MS HEARTBEAT_MS [GROUP_INSTANCE_ID]"""
import asyncio
import sys

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener


class Report(ConsumerRebalanceListener):
    def on_partitions_revoked(self, revoked):
        pass

    def on_partitions_assigned(self, assigned):
        print(f"assigned {len(assigned)}", flush=True)


async def main(brokers, topic, group, session_ms, heartbeat_ms, instance_id=None):
    consumer = AIOKafkaConsumer(
        bootstrap_servers=brokers,
        group_id=group,
        group_instance_id=instance_id,
        session_timeout_ms=int(session_ms),
        heartbeat_interval_ms=int(heartbeat_ms),
        auto_offset_reset="earliest",
        fetch_max_wait_ms=5,
    )
    await consumer.start()
    consumer.subscribe([topic], listener=Report())
    while True:
        await consumer.getmany(timeout_ms=200)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
