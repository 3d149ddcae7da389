"""PSClient joins a shard that forgot it again and repeats the request, a bounded
number of times per shard, however many shards there are (issue 39: a storm of kills
told one worker `not_registered` more often in one request than it had shards)."""
import pytest
import torch

from psgd.core.sharding import layout_for_module
from psgd.wire import protocol as P
from psgd.wire.requests import Pending
from psgd.workers.client import REJOINS_PER_SHARD, PSClient, RemoteError


class ForgetfulShards:
    """The request tracker's `start` and `wait`: shard `shard` answers not_registered `times`
    times, then every shard acknowledges; `next_id` as the real one. Records every sent request's shards."""

    def __init__(self, shard: int, times: int):
        self.shard, self.left, self.calls, self._id = shard, times, [], 0

    def next_id(self) -> int:
        self._id += 1
        return self._id

    def start(self, requests):
        self.calls.append(sorted(requests))
        return Pending(requests, {}, {}, 1.0, 0, True)

    def wait(self, pending):
        if self.left:
            self.left -= 1
            raise RemoteError(self.shard, P.ErrorCode.NOT_REGISTERED, "register with this shard first")
        return {s: (f"ack {s}", []) for s in pending.requests}


def zeros(client):
    return [torch.zeros(n) for n in client.layout.shard_sizes]


@pytest.fixture
def client():
    layout = layout_for_module(torch.nn.Linear(4, 2), 2)
    c = PSClient(["127.0.0.1:1", "127.0.0.1:2"], layout, rank=0, heartbeat_s=None)
    c.rejoined = []
    c._register_shards = lambda shards: c.rejoined.extend(shards)
    yield c
    c.close()


def test_more_rejoins_in_one_request_than_shards_are_made_and_the_request_repeated(client):
    times = REJOINS_PER_SHARD  # more than the client's 2 shards
    client._rpc = ForgetfulShards(shard=1, times=times)
    replies = client.wait(client.start(zeros(client), pull=False))
    assert replies == {0: "ack 0", 1: "ack 1"}
    assert client.rejoined == [1] * times
    assert client._rpc.calls == [[0, 1]] * (times + 1)


def test_a_shard_that_keeps_forgetting_the_worker_fails_the_request_after_the_bound(client):
    client._rpc = ForgetfulShards(shard=0, times=REJOINS_PER_SHARD + 1)
    with pytest.raises(RemoteError, match="not_registered"):
        client.wait(client.start(zeros(client), pull=False))
    assert client.rejoined == [0] * REJOINS_PER_SHARD
