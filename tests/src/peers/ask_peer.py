"""A scripted ACP agent for Berth's approval tests: JSON-RPC 2.0 a line on stdin and
stdout, the protocol's real shapes. Each prompt line `run: CMD` becomes a
`session/request_permission` for an `execute` tool call (options allow_once,
allow_always, reject_once); on an allow it runs CMD with sh in the session's cwd. It
answers the prompt with what it ran and refused, and stopReason `cancelled` when a
request was answered `cancelled`."""
import os
import subprocess
import sys

from acp_rpc import call, read, send

cwd = [os.getcwd()]


def update(session, text):
    send({"jsonrpc": "2.0", "method": "session/update", "params": {
        "sessionId": session,
        "update": {"sessionUpdate": "agent_message_chunk",
                   "content": {"type": "text", "text": text}}}})


OPTIONS = [
    {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
    {"optionId": "always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "no", "name": "Reject", "kind": "reject_once"},
]

while True:
    m = read()
    method, mid = m.get("method"), m.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": 1, "agentCapabilities": {}}})
    elif method == "session/new":
        cwd[0] = m["params"].get("cwd") or cwd[0]
        send({"jsonrpc": "2.0", "id": mid, "result": {"sessionId": "peer-1"}})
    elif method == "session/prompt":
        sid = m["params"]["sessionId"]
        text = "\n".join(b.get("text", "") for b in m["params"]["prompt"])
        said, stop = [], "end_turn"
        for n, line in enumerate(text.splitlines()):
            if not line.startswith("run: "):
                continue
            cmd = line[len("run: "):]
            r = call("session/request_permission", {
                "sessionId": sid,
                "toolCall": {"toolCallId": "call-%d" % n, "title": cmd,
                             "kind": "execute", "rawInput": {"command": cmd}},
                "options": OPTIONS})
            outcome = r.get("result", {}).get("outcome", {})
            if outcome.get("outcome") == "cancelled":
                stop = "cancelled"
                break
            if outcome.get("optionId") in ("yes", "always"):
                subprocess.run(cmd, shell=True, cwd=cwd[0], stdout=sys.stderr)
                said.append("ran " + cmd)
            else:
                said.append("refused " + cmd)
        update(sid, "; ".join(said) or "nothing to run")
        send({"jsonrpc": "2.0", "id": mid, "result": {"stopReason": stop}})
    elif method is not None and mid is not None:
        send({"jsonrpc": "2.0", "id": mid,
              "error": {"code": -32601, "message": "no " + method}})
