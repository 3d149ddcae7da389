"""The Ray launcher's resource requests (no Ray instance)."""
import pytest

from psgd.config import ConfigError, load_config
from psgd.orchestrate.launcher import LaunchFailed
from psgd.orchestrate.ray_launcher import check_resources, role_resources


def _cfg(*sets):
    return load_config(None, ["cluster.servers=2", "cluster.workers=3", *sets])


def test_every_process_requests_its_roles_resources():
    req = role_resources(_cfg("ray.worker.num_gpus=1", "ray.server.num_cpus=2", "ray.evaluator.num_cpus=0.5"))
    assert req == {("server", 0): {"num_cpus": 2.0, "num_gpus": 0.0}, ("server", 1): {"num_cpus": 2.0, "num_gpus": 0.0},
                   **{("worker", r): {"num_cpus": 1.0, "num_gpus": 1.0} for r in range(3)},
                   ("evaluator", 0): {"num_cpus": 0.5, "num_gpus": 0.0}}
    assert ("evaluator", 0) not in role_resources(_cfg("eval.enabled=false"))


def test_a_job_that_fits_passes():
    check_resources(role_resources(_cfg("ray.worker.num_gpus=1")), {"CPU": 6.0, "GPU": 3.0})


@pytest.mark.parametrize("available, words", [
    ({"CPU": 5.0, "GPU": 3.0}, "asks Ray for 6 CPU in all but the cluster has 5 CPU"),
    ({"CPU": 8.0, "GPU": 2.0}, "asks Ray for 3 GPU in all but the cluster has 2 GPU"),
    ({"CPU": 8.0}, "has 0 GPU")])
def test_a_job_that_cannot_fit_fails_naming_the_keys(available, words):
    with pytest.raises(LaunchFailed, match=words) as err:
        check_resources(role_resources(_cfg("ray.worker.num_gpus=1")), available)
    assert "ray.worker." in str(err.value) and "ray.server." in str(err.value)


def test_negative_requests_are_config_errors_naming_the_key():
    with pytest.raises(ConfigError, match="ray.worker.num_gpus"):
        _cfg("ray.worker.num_gpus=-1")
