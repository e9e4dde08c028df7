"""A throwaway PostgreSQL cluster for the PostgreSQL backend's tests and benchmark.

    python -m tools.postgres.cluster run -- COMMAND [ARGS...]
    python -m tools.postgres.cluster start DIR      (prints the URL; for poking by hand)
    python -m tools.postgres.cluster stop DIR

`run` installs PostgreSQL from Debian's packages when no `initdb` is found
(`apt-get update` once, then `apt-get install -y postgresql`), creates a
cluster in a fresh temporary directory, starts it on 127.0.0.1 on a free
port, runs COMMAND with these variables set, then stops the server and
removes the directory, whatever COMMAND did:

- NOBROKER_TEST_POSTGRES_URL: a URL with a password (the tests check that it
  never shows in an error or a repr);
- NOBROKER_TEST_PG_CTL: a JSON list, the pg_ctl command for this cluster
  (`[..., "restart", "-m", "immediate"]` is how the crash test restarts it).

The URL's user owns the test database and may create roles (CREATEROLE, not
superuser), so that a test can open a queue as a role that may only SELECT.

initdb refuses to run as root, so as root every server command runs as the
`postgres` user (which the Debian package creates) through `runuser`.
Standard library only: this runs before any venv exists.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

USER = "nobroker"
PASSWORD = "not-a-real-secret-5h2k"  # a throwaway cluster's; the tests look for it in errors
DATABASE = "nobroker_test"
STATE_FILE = "cluster.json"


def bindir() -> Path | None:
    """The directory of initdb/pg_ctl: the newest Debian install, else whatever is on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name)
                   if Path(p).parent.parent.name.isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).resolve().parent if initdb else None


def install() -> Path:
    """PostgreSQL's binaries, installed from Debian's packages if they are missing."""
    found = bindir()
    if found is not None:
        return found
    if os.geteuid() != 0:
        sys.exit("pg_cluster: PostgreSQL is not installed and installing it needs root")
    print("pg_cluster: installing PostgreSQL from Debian's packages", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update"], check=True, env=env)
    subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "postgresql"],
                   check=True, env=env)
    found = bindir()
    if found is None:
        sys.exit("pg_cluster: apt-get installed postgresql but no initdb was found")
    return found


def as_server_user(cmd: list[str]) -> list[str]:
    """`cmd`, run as the postgres user when we are root (initdb and postgres refuse root).
    Run it from "/": the postgres user may not enter the caller's directory."""
    if os.geteuid() != 0:
        return cmd
    return ["runuser", "-u", "postgres", "--", *cmd]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(root: Path) -> dict[str, object]:
    """initdb + start a cluster under `root`; returns what stop() and the tests need."""
    bin_dir = install()
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir(parents=True, exist_ok=True)
    pwfile = root / "pwfile"
    pwfile.write_text("postgres-" + PASSWORD + "\n")
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sockets, "postgres")
        shutil.chown(pwfile, "postgres")
    subprocess.run(as_server_user([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres",
                                   "--auth=scram-sha-256", f"--pwfile={pwfile}",
                                   "--encoding=UTF8", "--locale=C.UTF-8", "--no-instructions"]),
                   check=True, stdout=subprocess.DEVNULL, cwd="/")
    port = free_port()
    pg_ctl = as_server_user([str(bin_dir / "pg_ctl"), "-D", str(data)])
    options = (f"-c listen_addresses=127.0.0.1 -p {port} -k {sockets} "
               "-c max_connections=200 -c shared_buffers=128MB")
    subprocess.run([*pg_ctl, "-l", str(root / "server.log"), "-o", options, "-w", "start"],
                   check=True, stdout=subprocess.DEVNULL, cwd="/")
    env = dict(os.environ, PGPASSWORD="postgres-" + PASSWORD)
    subprocess.run([str(bin_dir / "psql"), "-q", "-h", "127.0.0.1", "-p", str(port),
                    "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1",
                    "-c", f"CREATE ROLE {USER} LOGIN CREATEROLE PASSWORD '{PASSWORD}'",
                    "-c", f"CREATE DATABASE {DATABASE} OWNER {USER}"],
                   check=True, env=env)
    state: dict[str, object] = {
        "url": f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{port}/{DATABASE}",
        "pg_ctl": pg_ctl, "root": str(root)}
    (root / STATE_FILE).write_text(json.dumps(state))
    return state


def stop(root: Path) -> None:
    """Stop the cluster under `root` (if it runs) and remove the directory."""
    state_file = root / STATE_FILE
    if state_file.exists():
        pg_ctl = json.loads(state_file.read_text())["pg_ctl"]
        subprocess.run([*pg_ctl, "-m", "immediate", "-w", "stop"], check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/")
    shutil.rmtree(root, ignore_errors=True)


def run(command: list[str]) -> int:
    root = Path(tempfile.mkdtemp(prefix="nobroker-pg-"))
    try:
        started = time.monotonic()
        state = start(root)
        print(f"pg_cluster: server on {str(state['url']).split('@')[1]} "
              f"({time.monotonic() - started:.1f}s to create)", flush=True)
        env = dict(os.environ, NOBROKER_TEST_POSTGRES_URL=str(state["url"]),
                   NOBROKER_TEST_PG_CTL=json.dumps(state["pg_ctl"]))
        proc = subprocess.Popen(command, env=env)
        try:
            return proc.wait()
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            return proc.wait()
    finally:
        stop(root)
        print("pg_cluster: server stopped and removed", flush=True)


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "run":
        command = argv[2:] if argv[1] == "--" else argv[1:]
        return run(command)
    if len(argv) == 2 and argv[0] == "start":
        root = Path(argv[1]).resolve()
        root.mkdir(parents=True, exist_ok=False)
        print(start(root)["url"])
        return 0
    if len(argv) == 2 and argv[0] == "stop":
        stop(Path(argv[1]).resolve())
        return 0
    print((__doc__ or "").split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
