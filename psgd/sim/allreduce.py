"""The all-reduce baseline on the virtual cluster: every rank's real gradient
on its own batch, averaged, applied with the same ShardUpdater on one flat
vector as workers/allreduce_worker.py; a step takes the slowest rank's
compute (with its variability and straggler delay) plus a ring all-reduce
over the workers' links (on GPUs the gradients never visit the host)."""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from psgd.config import Config, Role
from psgd.core.heterogeneity import straggler_for
from psgd.core.lr_scaling import scaled_optimizer
from psgd.core.rules.updater import ShardUpdater
from psgd.runtime.event_names import Event
from psgd.sim.event_queue import SimResult, event
from psgd.sim.step_times import StepTimes
from psgd.sim.time_model import TimeModel
from psgd.tasks import build_model, load_task
from psgd.tasks.loaders import train_loader

__all__ = ["AllReduceSim"]


class AllReduceSim:
    def __init__(self, cfg: Config, time: TimeModel, emit: Callable[[dict], None] = lambda e: None,
                 stop: Optional[Callable[[dict], bool]] = None, step_times: Optional[StepTimes] = None):
        self.cfg, self.time, self.emit = cfg, time, emit
        self.stop = stop or (lambda record: False)
        self.task = load_task(cfg, None, splits=("train", "test"))
        self.model = build_model(cfg, self.task)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.flat = parameters_to_vector(self.params).detach().clone()
        self.rule = ShardUpdater(scaled_optimizer(cfg), self.flat)
        w = cfg.cluster.workers
        train = self.task.train_data()
        self.batches = [train_loader(train, r, w, cfg.task.batch_size, cfg.run.seed) for r in range(w)]
        self.stragglers = [straggler_for(cfg.workers, r, cfg.run.seed) for r in range(w)]
        self.step_times = step_times or StepTimes(time, cfg.run.seed)
        self.steps = 0

    def _evaluate(self, t: float, final: bool = False) -> dict:
        n = self.steps * self.cfg.cluster.workers
        self.emit(event(t, Role.ALLREDUCE, 0, Event.SERVER_STATS, version=self.steps, counters={"updates": self.steps},
                        staleness_hist={"0": n} if n else {}, clock_gap_hist={"0": n} if n else {}))
        with torch.no_grad():
            vector_to_parameters(self.flat, self.params)
        accuracy, loss = self.task.evaluate(self.model)
        record = event(t, Role.EVALUATOR, 0, Event.EVAL, **({"final": True} if final else {}), accuracy=accuracy,
                       test_loss=loss, updates=self.steps, versions=[self.steps])
        self.emit(record)
        return record

    def run(self, steps_per_worker: int, max_time_s: float, eval_every_s: Optional[float]) -> SimResult:
        result, t, w = SimResult(), 0.0, self.cfg.cluster.workers
        next_eval = 0.0 if eval_every_s else float("inf")
        comm_s = self.time.allreduce_s(4 * self.flat.numel(), w)
        while self.steps < steps_per_worker:
            grads, losses, busy, computed = [], [], [], []
            for r in range(w):
                with torch.no_grad():
                    vector_to_parameters(self.flat, self.params)
                x, y = next(self.batches[r])
                self.model.zero_grad(set_to_none=False)
                loss = self.task.loss(self.model(self.task.inputs(x)), self.task.targets(y))
                loss.backward()
                grads.append(torch.cat([p.grad.reshape(-1) for p in self.params]))
                losses.append(loss.item())
                c = self.step_times.compute_s(r, self.steps)
                computed.append(c)
                s = self.stragglers[r]
                busy.append(c + (s.extra_s(c, t) if s.active else 0.0))
            end = t + max(busy) + comm_s
            # Evaluations due before this step ends see the parameters before it.
            while next_eval <= min(end, max_time_s):
                result.evals.append(self._evaluate(next_eval))
                if self.stop(result.evals[-1]):
                    return self._finish(result, next_eval)
                next_eval += eval_every_s
            if end > max_time_s:
                return self._finish(result, max_time_s)
            with torch.no_grad():
                self.rule.apply(self.flat, torch.stack(grads).mean(0), 0)
            self.steps += 1
            t = end
            for r in range(w):
                self.emit(event(t, Role.ALLREDUCE, r, Event.STEP, rank=r, clock=self.steps, loss=losses[r],
                                compute_s=round(computed[r], 9), comm_s=round(max(busy) + comm_s - busy[r], 9),
                                step_s=round(max(busy) + comm_s, 9), gap=0))
        return self._finish(result, t)

    def _finish(self, result: SimResult, t: float) -> SimResult:
        for r in range(self.cfg.cluster.workers):
            self.emit(event(t, Role.ALLREDUCE, r, Event.DONE, rank=r, clock=self.steps, steps=self.steps, resends=0,
                            bytes_sent=self.steps * self.flat.numel() * 4))
        result.evals.append(self._evaluate(t, final=True))
        result.end_s, result.steps = t, self.steps * self.cfg.cluster.workers
        return result

    def state_dict(self) -> dict:
        with torch.no_grad():
            vector_to_parameters(self.flat, self.params)
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}
