"""Job bookkeeping on a store: addresses, the start barrier, counters (an in-memory HashStore)."""
import threading

import torch.distributed as dist

from psgd.orchestrate.cluster.discovery import EXITED, FAILED, JobStore


def _job():
    store = dist.HashStore()
    return JobStore(dist.PrefixStore("psgd/job1/", store), store)


def test_servers_publish_and_clients_read_every_address_in_shard_order():
    job = _job()
    job.publish_server(1, "10.0.0.2:7001")
    job.publish_server(0, "10.0.0.1:7000")
    assert job.server_addresses(2) == ["10.0.0.1:7000", "10.0.0.2:7001"]


def test_start_barrier_gives_every_rank_the_same_t0():
    job, got = _job(), []
    threads = [threading.Thread(target=lambda: got.append(job.start_barrier(3, poll_s=0.001))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert len(got) == 3 and len(set(got)) == 1 and got[0] is not None


def test_start_barrier_returns_none_once_a_rank_failed():
    job = _job()
    job.mark(FAILED, "server 0 could not bind")
    assert job.start_barrier(2, poll_s=0.001) is None
    assert job.get(FAILED) == "server 0 could not bind"


def test_counters_add_and_flags_are_seen():
    job = _job()
    assert job.count(EXITED) == 0
    assert job.count(EXITED, 1) == 1 and job.count(EXITED, 2) == 3
    assert not job.is_set("eval_done")
    job.mark("eval_done")
    assert job.is_set("eval_done")
