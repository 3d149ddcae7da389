"""`psgd replay RUN_DIR [--json] [--out FILE]`: re-execute a recorded run and say whether it matches."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from psgd.cli.failures import Fail, expected


def cmd_replay(args: argparse.Namespace) -> int:
    import torch

    from psgd.config import ConfigError
    from psgd.sim.replay import RecordError, replay
    with expected("psgd replay", Fail((RecordError, ConfigError), 2, f"cannot replay {args.run_dir}: {{}}")):
        result = replay(Path(args.run_dir))
    if args.out:
        torch.save(result.state_dict, args.out)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        print(f"replayed {result.pushes} pushes ({result.gradients} worker steps recomputed) in {result.wall_s:.2f} s")
        for line in result.loss_mismatches[:5]:
            print(f"  differs: {line}")
        if result.version_mismatch:
            print(f"  differs: {result.version_mismatch}")
        for line in result.tensor_mismatches[:5]:
            print(f"  differs: model.pt {line}")
        if not result.compared_model:
            print("no model.pt in the run directory: the final parameters were not compared")
        elif result.identical:
            print("final parameters bit-identical to model.pt; every worker's loss matches metrics.jsonl")
    return 0 if result.identical else 1


def add_replay_command(sub) -> None:
    p = sub.add_parser("replay", help="re-execute a recorded run in one process and check it bit for bit")
    p.add_argument("run_dir", help="a run directory whose shards recorded (run.record: true)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--out", help="also save the replayed final model (a state_dict) here")
    p.set_defaults(func=cmd_replay)
