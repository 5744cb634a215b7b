#!/usr/bin/env python3
"""A real SMTP server for the integration tests (aiosmtpd), on 127.0.0.1.

Every message it accepts is stored as one JSON file in --dir, named by arrival order
(000001.json, ...): {"mail_from": ..., "rcpt_tos": [...], "data": "<the DATA bytes, as text>"},
written whole (a temporary file renamed). It prints "LISTENING <port>" once it accepts
connections (--port 0 picks a free port) and stops when its standard input closes, so it never
outlives the test that started it.

With --discard it keeps nothing and prints "RECEIVED <n>" every second instead: a sink for
benchmarks (every booking sends an email), where writing each message would be the bottleneck.

With --refuse-first N it answers the first N messages "554" (a permanent refusal, as a mail
server refusing everything for a while does) and stores nothing of them. With --refuse-after N
it takes the first N messages and refuses every later one. --temporary makes those refusals
"451" (a refusal for now) instead. Each refused DATA transaction leaves an empty file
NNNNNN.refused in --dir (numbered in its own order), so a test counts the transactions.

Usage: smtp_sink.py --dir DIR [--port PORT] [--refuse-first N | --refuse-after N] [--temporary]
       smtp_sink.py --discard [--port PORT]
"""

import argparse
import asyncio
import json
import os
import sys

from aiosmtpd.smtp import SMTP


class Sink:
    """Stores each message's envelope and bytes (or only counts them, without a directory)."""

    def __init__(self, directory, refuse_first=0, refuse_after=None, temporary=False):
        self.directory = directory
        self.count = 0
        self.refuse = refuse_first
        self.refuse_after = refuse_after
        self.refused = 0
        if temporary:
            self.refusal = "451 4.3.0 Try again later (test sink)"
        else:
            self.refusal = "554 Transaction failed: refusing for now (test sink)"

    async def handle_DATA(self, server, session, envelope):
        if self.refuse > 0 or (self.refuse_after is not None and self.count >= self.refuse_after):
            self.refuse = max(self.refuse - 1, 0)
            self.refused += 1
            if self.directory is not None:
                open(os.path.join(self.directory, f"{self.refused:06d}.refused"), "w").close()
            return self.refusal
        self.count += 1
        if self.directory is None:
            return "250 OK: discarded"
        name = f"{self.count:06d}.json"
        record = {
            "mail_from": envelope.mail_from,
            "rcpt_tos": list(envelope.rcpt_tos),
            "data": envelope.original_content.decode("utf-8", "replace"),
        }
        tmp = os.path.join(self.directory, "." + name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(record, f)
        os.rename(tmp, os.path.join(self.directory, name))
        return "250 OK: stored"


async def report(handler):
    """Prints the count of messages received, every second."""
    while True:
        await asyncio.sleep(1)
        print(f"RECEIVED {handler.count}", flush=True)


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir")
    parser.add_argument("--discard", action="store_true")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--refuse-first", type=int, default=0)
    parser.add_argument("--refuse-after", type=int)
    parser.add_argument("--temporary", action="store_true")
    args = parser.parse_args()
    if (args.dir is None) == (not args.discard):
        parser.error("give either --dir DIR or --discard")
    loop = asyncio.get_running_loop()
    handler = Sink(None if args.discard else args.dir, args.refuse_first, args.refuse_after, args.temporary)
    server = await loop.create_server(
        lambda: SMTP(handler, hostname="sink.test", ident="clinic-booking test sink"),
        host="127.0.0.1",
        port=args.port,
    )
    port = server.sockets[0].getsockname()[1]
    print(f"LISTENING {port}", flush=True)
    if args.discard:
        asyncio.ensure_future(report(handler))
    await loop.run_in_executor(None, sys.stdin.read)
    server.close()
    await server.wait_closed()


if __name__ == "__main__":
    asyncio.run(main())
