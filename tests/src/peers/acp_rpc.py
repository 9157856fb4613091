"""What the scripted ACP peers share: JSON-RPC 2.0, a message a line on stdin and
stdout, as the Agent Client Protocol frames it. Written next to each peer, which
imports it (a script's own directory is first on Python's path)."""
import json
import sys

next_id = [1000]


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def read():
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)


def call(method, params):
    """A request of the peer's own; answers to it are told from requests by their id."""
    next_id[0] += 1
    mine = next_id[0]
    send({"jsonrpc": "2.0", "id": mine, "method": method, "params": params})
    while True:
        m = read()
        if m.get("id") == mine and "method" not in m:
            return m
