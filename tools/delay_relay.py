#!/usr/bin/env python3
"""delay_relay.py — a TCP relay that delays every byte by D ms in each direction: the
latency half of the thin-link harness (tools/netns.sh), since the kernel's netem qdisc
is not available on the machines we test on (tbf is, and does the rate).

It accepts on --listen and opens one connection to --to per accepted one; bytes read
at time t on either side are written to the other side at t + D. TCP_NODELAY on both.

A relay splits the TCP connection: the sender's kernel is acknowledged by the relay at
once and would never feel the round trip of 2 D. So that a sender still sees a
window-limited path, each direction admits at most --window bytes that are "in flight",
a byte counting from when it was read until 2 D later (its delivery plus the
acknowledgement's way back), i.e. at most window / (2 D) bytes/s per connection, as a
TCP connection with that window on a path of RTT 2 D. Default 4 MiB: about what Linux
autotuning reaches (tcp_rmem max 6 MiB). Slow start is not modelled: a fresh
connection gets the whole window at once, which flatters short transfers.

Not for: anything but tests inside network namespaces or on loopback.
"""
import argparse
import asyncio
import socket
import sys


def split_hostport(s):
    host, port = s.rsplit(":", 1)
    return host.strip("[]"), int(port)


async def pump(reader, writer, delay, window, loop):
    """Copies reader to writer, each chunk delay s after it was read, with at most
    `window` bytes read and not yet 2*delay old."""
    queue = asyncio.Queue()
    state = {"used": 0}
    freed = asyncio.Event()

    def release(n):
        state["used"] -= n
        freed.set()

    async def rx():
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                while state["used"] > 0 and state["used"] + len(data) > window:
                    freed.clear()
                    await freed.wait()
                state["used"] += len(data)
                queue.put_nowait((loop.time(), data))
        except (ConnectionError, OSError):
            pass
        queue.put_nowait(None)

    async def tx():
        try:
            while True:
                item = await queue.get()
                if item is None:
                    break
                t, data = item
                wait = t + delay - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
                loop.call_at(t + 2 * delay, release, len(data))
        except (ConnectionError, OSError):
            pass
        try:
            writer.close()
        except OSError:
            pass

    await asyncio.gather(rx(), tx())


def nodelay(writer):
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True, help="HOST:PORT to accept on")
    ap.add_argument("--to", required=True, help="HOST:PORT to forward to")
    ap.add_argument("--delay-ms", type=float, required=True, help="one-way delay")
    ap.add_argument("--window", type=int, default=4 << 20, help="bytes in flight per direction")
    a = ap.parse_args()
    delay = a.delay_ms / 1000.0
    lhost, lport = split_hostport(a.listen)
    thost, tport = split_hostport(a.to)
    loop = asyncio.get_running_loop()

    async def handle(creader, cwriter):
        try:
            treader, twriter = await asyncio.open_connection(thost, tport)
        except OSError:
            cwriter.close()
            return
        nodelay(cwriter)
        nodelay(twriter)
        await asyncio.gather(pump(creader, twriter, delay, a.window, loop),
                             pump(treader, cwriter, delay, a.window, loop))

    server = await asyncio.start_server(handle, lhost, lport, reuse_address=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    sys.exit(0)
