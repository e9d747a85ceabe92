"""This machine's loopback TCP limit, measured beside `gregor perf` in the same run.

usage: python3 limits.py tcp [MiB]   -> prints "tcp loopback: N MB/s"

One connection on 127.0.0.1, a sender thread writing 1 MiB buffers with sendall and the main
thread reading them with recv_into: the bytes per second one TCP connection can carry here,
which bounds what any broker can take from one producer connection. The disk limit is measured by
the shell script with dd (sequential 1 MiB writes, then fdatasync).
"""
import socket
import sys
import threading
import time


def tcp(mib: int) -> float:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    chunk = b"\0" * (1 << 20)

    def send():
        c = socket.create_connection(("127.0.0.1", port))
        for _ in range(mib):
            c.sendall(chunk)
        c.close()

    t = threading.Thread(target=send)
    start = time.perf_counter()
    t.start()
    conn, _ = server.accept()
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    total = 0
    while True:
        n = conn.recv_into(view)
        if n == 0:
            break
        total += n
    elapsed = time.perf_counter() - start
    t.join()
    if total != mib << 20:
        raise SystemExit(f"received {total} bytes, sent {mib << 20}")
    return total / elapsed / 1e6


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "tcp":
        raise SystemExit(__doc__)
    mib = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
    print(f"tcp loopback: {tcp(mib):.0f} MB/s")
