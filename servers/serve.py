"""`psgd.serve`: one parameter-server shard, blocking, in the calling process.

The `psgd server` command and the launcher's server role run through here;
a user can also host a shard inside their own program. The shard serves until
`stop` is set, `should_stop()` turns true, or a registered client sends
SHUTDOWN. Called from the main thread without a `stop` event, SIGINT and
SIGTERM stop it (the previous handlers come back afterwards).
"""
from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch

from psgd.config import Config, ConfigError, ConfigLike, load_config
from psgd.core.sharding import layout_for_module
from psgd.runtime.event_names import Event
from psgd.runtime.events import EventLog
from psgd.runtime.host import host_fields
from psgd.runtime.role import RoleContext, RoleFailed
from psgd.runtime.safe_io import WriteFailed
from psgd.runtime.token import read_run_token
from psgd.runtime.user_errors import user_code
from psgd.servers.checkpoint import CheckpointError, ShardCheckpoint
from psgd.servers.record import record_path
from psgd.servers.shard import ShardServer, bind_shard
from psgd.servers.standby import ShardFollower, claim, wait_for_address
from psgd.servers.state import ShardState
from psgd.tasks import build_model, task_shape
from psgd.tasks.registry import needs_shape
from psgd.wire.codecs.runs import Plan, push_plans
from psgd.wire.keys.curve import server_curve
from psgd.wire.transport import TransportError

__all__ = ["serve", "initial_shard_params", "run_role"]


def serve(cfg: ConfigLike, shard: int = 0, *, overrides: Sequence[str] = (), address: Optional[str] = None,
          run_dir: Optional[Path] = None, stop: Optional[threading.Event] = None,
          should_stop: Callable[[], bool] = lambda: False, events: Optional[EventLog] = None) -> None:
    """Serve shard `shard` of `cfg` at `address` (default: `cluster.servers[shard]`).
    Shards of a run directory checkpoint into RUN_DIR/checkpoints and resume from it.
    Raises ConfigError for a bad config, StartupError when the user's model fails."""
    cfg = load_config(cfg, overrides)
    if not 0 <= shard < cfg.cluster.num_servers:
        raise ConfigError("cluster.servers", f"no shard {shard} (there are {cfg.cluster.num_servers})")
    if address is None:
        if isinstance(cfg.cluster.servers, int):
            raise ConfigError("cluster.servers", "a single server needs the list of host:port addresses")
        address = cfg.cluster.servers[shard]
    events = events or EventLog(None, "server", shard)
    curve = server_curve(cfg)  # before the model is built: missing keys fail fast
    with user_code(f"model {cfg.task.model!r}"):
        params, fingerprint, push_plan = initial_shard_params(cfg, shard, run_dir)
    checkpoint = None
    if cfg.checkpoint.enabled and run_dir is not None:
        checkpoint = ShardCheckpoint(Path(run_dir) / "checkpoints", shard, fingerprint, cfg.checkpoint)
    record_to = record_path(Path(run_dir), shard) if cfg.run.record and run_dir is not None else None
    own_stop = stop is None
    stop = stop or threading.Event()
    restore = {}
    if own_stop and threading.current_thread() is threading.main_thread():
        restore = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        sock, follower = None, None
        if cfg.cluster.replicas:  # the 1 + R processes of this shard: whoever binds the address serves
            if checkpoint is None:
                raise ConfigError("cluster.replicas", "replicated shards follow the primary's checkpoint: "
                                  "they need checkpoint.enabled and a run directory")
            sock, follower = _primary_or_backup(cfg, shard, address, params, curve, checkpoint, run_dir, events,
                                                stop, should_stop)
            if sock is None:
                return  # stopped while a backup
        server = ShardServer(cfg, shard, address, params, fingerprint, events, checkpoint=checkpoint, curve=curve,
                             run_token=read_run_token(run_dir), record_to=record_to, push_plan=push_plan, sock=sock,
                             state=follower.state if follower is not None else None)
        if follower is not None:
            events.emit(Event.PROMOTED, version=server.state.version, followed=follower.applied)
        else:
            if server.resumed is not None:
                events.emit(Event.RESUMED, **server.resumed)
            events.emit(Event.READY, address=server.address, numel=params.numel(), **host_fields())
        server.serve(stop, should_stop)  # serves at once: workers register before any start signal
    finally:
        for s, handler in restore.items():
            signal.signal(s, handler)


def _primary_or_backup(cfg: Config, shard: int, address: str, params: torch.Tensor, curve, checkpoint, run_dir,
                       events: EventLog, stop: threading.Event, should_stop: Callable[[], bool]):
    """Bind the shard's address (this process is the primary: returns (socket, None)), or
    follow the primary as a backup until the address is free and this process takes it
    over (returns (socket, the follower holding the state)); (None, None) if stopped first."""
    try:
        sock = bind_shard(cfg, address, curve)
    except TransportError:
        sock = None
    if sock is None:
        token = read_run_token(run_dir)
        follower = ShardFollower(checkpoint, lambda: ShardState(cfg, shard, params, run_token=token))
        events.emit(Event.READY, address=address, numel=params.numel(), standby=True, **host_fields())
        sock = wait_for_address(address, lambda a: bind_shard(cfg, a, curve), follower, stop, should_stop)
        if sock is None:
            return None, None
        follower.take_over()
    else:
        follower = None
    claim(run_dir, shard, os.getpid())
    return sock, follower


def initial_shard_params(cfg: Config, shard: int, run_dir=None) -> tuple[torch.Tensor, str, Plan]:
    """The shard's slice of the seeded initial model, the layout fingerprint, and the
    runs its pushes come in (psgd.wire.codecs.runs, from wire.compression).
    Never builds the data: a user's model needs none, a built-in one only its
    shape (from the run's task cache, a built-in dataset, or as a last resort the data)."""
    model = build_model(cfg, task_shape(cfg, run_dir) if needs_shape(cfg) else None)
    layout = layout_for_module(model, cfg.cluster.num_servers)
    params = [p.detach() for p in model.parameters() if p.requires_grad]
    return layout.flatten(params)[shard], layout.fingerprint, push_plans(cfg.wire, layout, cfg.local.enabled)[shard]


def run_role(ctx: RoleContext) -> int:
    """The `server` role: serve shard `ctx.index` until stopped (see serve.py).
    Raises ConfigError for a config that cannot run, StartupError when the
    user's model fails, and RoleFailed when the shard cannot start (keys,
    checkpoint, address)."""
    try:
        # cluster.replicas: processes index, index + S, ... serve shard index mod S (the first to bind it)
        servers, replicas = ctx.cfg.cluster.num_servers, ctx.cfg.cluster.replicas
        if replicas and not 0 <= ctx.index < servers * (1 + replicas):
            raise ConfigError("cluster.replicas", f"no process {ctx.index} of {servers} shards with "
                              f"{replicas} backup(s) each (0..{servers * (1 + replicas) - 1})")
        shard = ctx.index % servers if replicas else ctx.index
        ctx.events.index = shard  # the shard's events, whichever of its processes writes them
        serve(ctx.cfg, shard, run_dir=ctx.run_dir, stop=ctx.stop, events=ctx.events,
              should_stop=lambda: ctx.poll_start() or ctx.orphaned())
        return 0
    except TransportError as exc:
        raise RoleFailed(f"shard {ctx.index}: {exc}") from None
    except CheckpointError as exc:  # would fail the same way again: not restarted
        raise RoleFailed(f"shard {ctx.index}: {exc}", retry=False) from None
    except WriteFailed as exc:
        raise RoleFailed(f"shard {ctx.index}: {exc}; everything acknowledged before it is in "
                         f"{ctx.run_dir / 'checkpoints' if ctx.run_dir else 'memory only'}", retry=False) from None
    finally:
        ctx.events.close()
