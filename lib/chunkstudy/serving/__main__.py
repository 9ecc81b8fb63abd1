"""``python -m chunkstudy.serving {args,check,list} PARAMS ...`` (see :mod:`chunkstudy.serving`)."""

from __future__ import annotations

import argparse
import sys

from .. import config, stages
from .roles import ServeError, services


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m chunkstudy.serving")
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("args", help="the vLLM arguments of ROLE's server at URL, one per line")
    a.add_argument("params")
    a.add_argument("--role", default="llm")
    a.add_argument("--url", help="the replica's base URL (default: the role's first)")
    a.add_argument("--entry", choices=("serve", "api_server"), default="serve")
    a = sub.add_parser("check", help="the up-front check of a run of every stage (exit 1 with the fixes)")
    a.add_argument("params")
    a = sub.add_parser("list", help="the servers PARAMS declares: URL, serve, roles")
    a.add_argument("params")
    a = sub.add_parser("envs", help="the serving environments (cuda, cpu) PARAMS' serve: auto servers start from")
    a.add_argument("params")
    a.add_argument("--skip-llm", action="store_true", help="leave out the LLM's server")
    args = ap.parse_args(argv)
    cfg = config.load(args.params)
    try:
        if args.cmd == "args":
            from .args import serve_args

            url = args.url or next((s.url for s in services(cfg) if args.role in s.roles), None)
            if url is None:
                raise ServeError(f"{args.params}: {args.role} talks to no server")
            print("\n".join(serve_args(cfg, args.role, url, args.entry, echo=lambda m: print(m, file=sys.stderr))))
        elif args.cmd == "check":
            from .check import problems

            found = problems(cfg, list(stages.STAGE_NAMES), args.params)
            for p in found:
                print(f"FAIL  {p}")
            if not found:
                print("PASS  every model available offline, every serve: auto server can start here")
            return 1 if found else 0
        elif args.cmd == "envs":
            from .check import needed_envs

            print("\n".join(needed_envs(cfg, args.skip_llm)))
        else:
            for s in services(cfg):
                print(f"{s.url}\t{s.serve}\t{','.join(s.roles)}\t{s.model}")
    except ServeError as e:
        print(f"serving: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
