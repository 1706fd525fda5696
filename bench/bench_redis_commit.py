"""The Redis server's CPU a commit of the redis provider (its commit script).

    python bench/bench_redis_commit.py --tree TREE [--commits 20] [--keys 50000]

Through TREE's redis provider (PYTHONPATH=TREE, a key prefix of its own, its keys
deleted at the end), against the server at 127.0.0.1:6379: each round prepares
``--keys`` keys (half of them new to the namespace, half written before) and
commits them; the server's CPU (INFO cpu, user + sys) is read before and after
each commit only, and summed. Any other client of the server counts too: run the
trees interleaved.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import uuid
from pathlib import Path


def server_cpu() -> float:
    info = subprocess.run(["redis-cli", "info", "cpu"], capture_output=True, text=True).stdout
    fields = dict(re.findall(r"^(used_cpu_(?:user|sys)):([0-9.]+)", info, re.M))
    return float(fields["used_cpu_user"]) + float(fields["used_cpu_sys"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", type=Path, required=True)
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--keys", type=int, default=50_000)
    args = parser.parse_args()
    sys.path.insert(0, str(args.tree.resolve()))
    from statestream_providers.redis import RedisStateProvider

    prefix = f"bench-commit-{uuid.uuid4().hex[:8]}:"
    provider = RedisStateProvider(host="127.0.0.1", key_prefix=prefix)
    backend = provider._open_backend("ns")
    n, spent = args.keys, 0.0
    try:
        for txid in range(args.commits):
            plain = {f"w{(txid * n // 2 + i) % (8 * n)}": txid for i in range(n)}
            if hasattr(backend, "write_prepared_plain"):
                backend.write_prepared_plain(txid, plain, [])
            else:  # a tree before it (main at 2c10803): the encoded entries
                delta = [(b'"%s"' % k.encode(), b"%d" % v) for k, v in plain.items()]
                backend.write_prepared(txid, delta)
            before = server_cpu()
            backend.apply_prepared(txid)
            spent += server_cpu() - before
    finally:
        client = provider.connection.client()[0]
        for key in list(client.scan_iter(match=f"{prefix}*")):
            client.unlink(key)
    print(f"{args.tree}: server CPU {spent:.2f} s for {args.commits} commits of {n:,} keys")


if __name__ == "__main__":
    main()
