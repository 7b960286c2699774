"""Jupyter baseline for bench/: the same work as our kernel, through
jupyter_client + ipykernel (Debian's packages). Prints one JSON object."""
import json
import sys
import time

from jupyter_client.manager import KernelManager

n = int(sys.argv[1]) if len(sys.argv) > 1 else 200


def run(kc, code):
    msg_id = kc.execute(code)
    result = None
    while True:
        msg = kc.get_iopub_msg(timeout=60)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "execute_result":
            result = msg["content"]["data"]["text/plain"]
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return result


t0 = time.perf_counter()
km = KernelManager(kernel_name="python3")
km.start_kernel()
kc = km.client()
kc.start_channels()
kc.wait_for_ready(timeout=60)
first = run(kc, "1 + 1")
start_ms = (time.perf_counter() - t0) * 1000
assert first == "2", first
run(kc, "x = 40")
rtts = []
for _ in range(n):
    t = time.perf_counter()
    assert run(kc, "x + 2") == "42"
    rtts.append((time.perf_counter() - t) * 1000)
kc.stop_channels()
km.shutdown_kernel(now=True)
print(json.dumps({"start_first_result_ms": start_ms, "rtt_ms": rtts}))
