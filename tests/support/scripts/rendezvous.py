"""What a PyTorch job's processes do first, without PyTorch: read the variables torch.distributed reads, and meet
at MASTER_ADDR:MASTER_PORT (rank 0 listens there, the others connect and say their rank). Prints what it saw as
one JSON line: `rendezvous {...}`. Nothing here imports gpudeck."""

import json
import os
import socket
import time

names = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "NODE_RANK", "NNODES", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
seen = {name: os.environ[name] for name in names}
rank, world = int(seen["RANK"]), int(seen["WORLD_SIZE"])
address = (seen["MASTER_ADDR"], int(seen["MASTER_PORT"]))
if rank == 0:
    with socket.create_server(address) as server:
        server.settimeout(60)
        peers = []
        for _ in range(world - 1):
            conn, _ = server.accept()
            with conn:
                peers.append(int(conn.recv(16).decode()))
                conn.sendall(b"0")
    seen["peers"] = sorted(peers)
else:
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(address, timeout=5) as conn:
                conn.sendall(str(rank).encode())
                seen["peers"] = [int(conn.recv(16).decode())]
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
print("rendezvous", json.dumps(seen), flush=True)
