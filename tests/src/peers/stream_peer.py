"""A scripted ACP agent that streams: JSON-RPC 2.0 a line on stdin and stdout, the
protocol's real shapes. Each prompt line is a step, in order:

  chunks: A|B|C    agent_message_chunk A, B, C, `gap-ms` apart (default 200)
  thought: A|B     agent_thought_chunk A, B, the same way
  gap-ms: N        the time between two chunks from here on
  gate: PATH       before the last chunk of the next `chunks`, wait (at most 30 s)
                   until PATH exists
  stamp: PATH      right before that last chunk, write PATH
  stamps: N        N chunks `@<unix time in ns> `, each stamped as it is written
  edit: PATH       ask permission to edit PATH (an `edit` tool call), and go on
                   whatever the answer

It answers the prompt with stopReason end_turn."""
import os
import time

from acp_rpc import call, read, send


def chunk(session, kind, text):
    send({"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": session,
        "update": {"sessionUpdate": kind, "content": {"type": "text", "text": text}}}})


def wait_for(path):
    deadline = time.time() + 30
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.02)


def turn(session, text):
    gap, gate, stamp = 0.2, None, None
    for line in text.splitlines():
        step, _, arg = line.partition(": ")
        if step in ("chunks", "thought"):
            kind = "agent_message_chunk" if step == "chunks" else "agent_thought_chunk"
            pieces = arg.split("|")
            for n, piece in enumerate(pieces):
                if n > 0:
                    time.sleep(gap)
                if n == len(pieces) - 1 and step == "chunks":
                    if gate:
                        wait_for(gate)
                    if stamp:
                        open(stamp, "w").close()
                    gate, stamp = None, None
                chunk(session, kind, piece)
        elif step == "gap-ms":
            gap = int(arg) / 1000
        elif step == "gate":
            gate = arg
        elif step == "stamp":
            stamp = arg
        elif step == "stamps":
            for n in range(int(arg)):
                if n > 0:
                    time.sleep(gap)
                chunk(session, "agent_message_chunk", "@%d " % time.time_ns())
        elif step == "edit":
            call("session/request_permission", {
                "sessionId": session,
                "toolCall": {"toolCallId": "edit-%s" % arg, "title": "Write " + arg,
                             "kind": "edit", "locations": [{"path": arg}]},
                "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                            {"optionId": "no", "name": "Reject", "kind": "reject_once"}]})


while True:
    m = read()
    method, mid = m.get("method"), m.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": 1, "agentCapabilities": {}}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": "stream-1"}})
    elif method == "session/prompt":
        p = m["params"]
        turn(p["sessionId"], "\n".join(b.get("text", "") for b in p["prompt"]))
        send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": "end_turn"}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {
            "code": -32601, "message": "method not found"}})
