"""Run a command while busy loops keep the CPU's cores occupied: the check that the
suite's verdicts hold on a loaded machine (CONTRIBUTING.md, "Verdicts that load cannot
flip").

    python scripts/cpu_hog.py [--procs N] [--max-seconds S] -- make test

starts N processes (default: one per core) that spin in a pure-Python loop, runs the
command, and stops them when it ends, when S seconds have passed (default 3600; the
command itself is not stopped), or on Ctrl-C. The exit status is the command's. The
hogs run at normal priority, as another program on a reader's laptop would.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import time


def spin(deadline: float) -> None:
    """Keep one core busy until `deadline` (time.monotonic())."""
    while time.monotonic() < deadline:
        for _ in range(100_000):
            pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, default=os.cpu_count() or 1,
                        help="busy processes to start (default: one per core)")
    parser.add_argument("--max-seconds", type=float, default=3600.0,
                        help="stop the busy processes after this long at the latest")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the command to run under load, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --, e.g. -- make test")
    if args.procs < 1:
        parser.error(f"--procs must be >= 1, got {args.procs}")
    if args.max_seconds <= 0:
        parser.error(f"--max-seconds must be > 0, got {args.max_seconds}")
    deadline = time.monotonic() + args.max_seconds
    hogs = [mp.Process(target=spin, args=(deadline,), daemon=True)
            for _ in range(args.procs)]
    for hog in hogs:
        hog.start()
    print(f"cpu_hog: {args.procs} busy process(es) for at most {args.max_seconds:.0f} s "
          f"while running: {' '.join(command)}", file=sys.stderr, flush=True)
    start = time.monotonic()
    try:
        rc = subprocess.call(command)
    except KeyboardInterrupt:
        rc = 130
    finally:
        for hog in hogs:
            hog.terminate()
        for hog in hogs:
            hog.join(timeout=5)
    loaded = min(time.monotonic(), deadline) - start
    print(f"cpu_hog: the command ran {time.monotonic() - start:.0f} s, "
          f"{loaded:.0f} s of it under load; exit status {rc}", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())
