"""A step's work counted once (psgd.sim.op_count) and costed on a host profile's tables, term by term."""
import json
from dataclasses import replace

import pytest
import torch

from psgd.sim.host_profile import HostProfile, load_host_profile
from psgd.sim.op_count import training_step_work, work_of

PROFILE = load_host_profile("cpu-reference")


class _Task:
    """The task contract forward_backward reads: inputs, targets and the loss."""
    inputs = targets = staticmethod(lambda t: t)
    loss = staticmethod(torch.nn.functional.cross_entropy)


def test_a_steady_state_step_counts_the_gradients_zeroing_and_accumulation_and_one_pass():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    batch = (torch.randn(8, 16), torch.tensor([0, 1, 2, 3] * 2))
    from psgd.workers.step import forward_backward
    first = work_of(lambda: forward_backward(_Task, model, batch))  # no gradients yet: none zeroed or added to
    steady = training_step_work(_Task, model, batch)
    params = len(list(model.parameters()))
    assert steady.ops == first.ops + 2 * params  # a zero_ and an add_ per parameter
    assert steady.passes == 1 and first.passes == 0 and steady.products == first.products


def test_a_convolution_counts_its_forward_and_each_gradient_its_backward_computes_apart_with_their_positions():
    conv = torch.nn.Conv1d(4, 8, 3)
    x = torch.randn(2, 4, 16)
    work = work_of(lambda: conv(x).sum().backward())  # x needs no gradient: the weight's only
    forward_flops = 2 * 2 * 14 * 8 * 4 * 3
    assert work.convolutions == ((forward_flops, 2 * 14),)
    assert work.conv_weight_gradients == ((forward_flops, 2 * 14),) and work.conv_input_gradients == ()
    x.requires_grad_(True)
    both = work_of(lambda: conv(x).sum().backward())
    assert both.conv_input_gradients == both.conv_weight_gradients == ((forward_flops, 28),)
    assert both.flops == 3 * forward_flops and both.products == ()


def test_cpu_attention_is_counted_with_its_flops_forward_and_backward():
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count
    q, k, v = (torch.randn(1, 2, 8, 4, requires_grad=True) for _ in range(3))
    work = work_of(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v).sum().backward())
    shape = q.shape
    assert work.attention == (sdpa_flop_count(shape, shape, shape),)
    assert work.attention_backward == (sdpa_backward_flop_count(shape, shape, shape, shape),)


def test_every_other_operation_records_the_bytes_it_reads_and_writes():
    x = torch.randn(8, 16)
    work = work_of(lambda: torch.relu(x))
    assert work.memory == (2 * x.numel() * 4,) and work.ops == 1 and work.flops == 0


def test_a_kernels_time_is_interpolated_between_the_two_sizes_measured_around_it():
    profile = replace(PROFILE, matmul_flops=(10**6, 3 * 10**6), matmul_flops_per_s=(1e9, 1.5e9))
    t0, t1 = 1e-3, 2e-3
    assert profile.matmul_s(2 * 10**6) == pytest.approx((t0 + t1) / 2)  # a fixed cost plus a rate between
    assert profile.matmul_s(10**3) == pytest.approx(t0)                 # below: no cheaper than the smallest
    assert profile.matmul_s(6 * 10**6) == pytest.approx(6e6 / 1.5e9)    # above: at the largest's rate
    memory = replace(PROFILE, memory_bytes=(1000, 2000), memory_bytes_per_s=(1e9, 2e9))
    assert memory.memory_s(500) == pytest.approx(500 / 1e9)             # bytes below: at the smallest's rate
    assert replace(PROFILE, memory_bytes=(), memory_bytes_per_s=()).memory_s(10**6) == 0.0


def test_a_convolution_is_costed_at_the_time_its_width_takes_at_the_output_positions_around_its_own():
    # two widths (FLOPs per position 10**3 and 10**4) probed at 100 and at 10000 output positions
    rates = {100: (1e8, 1e9), 10000: (5e8, 5e9)}
    profile = replace(PROFILE, conv_flops=(10**5, 10**6, 10**7, 10**8), conv_flops_per_s=rates[100] + rates[10000],
                      conv_positions=(100, 100, 10000, 10000), conv_input_gradient_flops=(),
                      conv_input_gradient_flops_per_s=(), conv_weight_gradient_flops=(),
                      conv_weight_gradient_flops_per_s=())
    assert profile.conv_s(10**6, 100) == pytest.approx(10**6 / 1e9)
    # width 10**4 at 1000 positions: between that width's times at 100 and 10000, linearly in positions
    at_100, at_10000 = 10**6 / 1e9, 10**8 / 5e9
    assert profile.conv_s(10**7, 1000) == pytest.approx(at_100 + (1000 - 100) / (10000 - 100) * (at_10000 - at_100))
    assert profile.conv_s(10**4, 10) == pytest.approx(10**5 / 1e8)       # below the counts: the smallest's time
    assert profile.conv_s(10**9, 10**5) == pytest.approx(10**9 / 5e9)    # above them: the largest's rate
    for gradient in (profile.conv_input_gradient_s, profile.conv_weight_gradient_s):  # unmeasured: the forward's
        assert gradient(10**7, 1000) == profile.conv_s(10**7, 1000)
    weight = replace(profile, conv_weight_gradient_flops=profile.conv_flops,
                     conv_weight_gradient_flops_per_s=tuple(r / 2 for r in profile.conv_flops_per_s))
    assert weight.conv_weight_gradient_s(10**7, 1000) == pytest.approx(2 * profile.conv_s(10**7, 1000))
    assert weight.conv_input_gradient_s(10**7, 1000) == profile.conv_s(10**7, 1000)
    flat = replace(PROFILE, conv_flops=(), conv_flops_per_s=(), conv_positions=())
    assert flat.conv_s(10**6, 1000) == flat.matmul_s(10**6)


def test_an_earlier_profiles_one_gradient_table_is_read_as_the_weights():
    old = {k: v for k, v in json.loads(PROFILE.to_json()).items() if not k.startswith("conv_")}
    old.update(conv_flops=[10**6], conv_flops_per_s=[1e9], conv_positions=[100], conv_gradient_flops=[10**6],
               conv_gradient_flops_per_s=[5e8], conv_gradient_positions=[100])
    read = HostProfile.from_dict(old)
    assert read.conv_weight_gradient_flops == (10**6,) and read.conv_weight_gradient_flops_per_s == (5e8,)
    assert read.conv_positions == (100,) and read.conv_input_gradient_flops == ()


def test_the_step_time_is_the_sum_of_its_terms():
    conv = torch.nn.Conv1d(4, 8, 3)
    x = torch.randn(2, 4, 16, requires_grad=True)
    work = replace(work_of(lambda: torch.relu(conv(x)).sum().backward()), passes=1)
    profile = replace(PROFILE, pass_us=250.0, memory_bytes=(1000, 10**6), memory_bytes_per_s=(1e9, 5e9))
    terms = work.host_terms(profile)
    assert terms["pass"] == pytest.approx(250e-6) and terms["dispatch"] == pytest.approx(work.ops * PROFILE.dispatch_us / 1e6)
    assert terms["convolutions"] == pytest.approx(sum(profile.conv_s(f, p) for f, p in work.convolutions)
                                                  + sum(profile.conv_input_gradient_s(f, p)
                                                        for f, p in work.conv_input_gradients)
                                                  + sum(profile.conv_weight_gradient_s(f, p)
                                                        for f, p in work.conv_weight_gradients))
    assert terms["memory"] == pytest.approx(sum(profile.memory_s(b) for b in work.memory)) and terms["memory"] > 0
    assert work.host_s(profile) == pytest.approx(sum(terms.values()))
