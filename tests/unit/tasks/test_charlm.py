"""The character LM: a fixed vocabulary, disjoint shifted windows, a causal model."""
import torch

from psgd.tasks.charlm import OTHER, VOCAB, VOCAB_SIZE, CharTransformer, charlm_dataset, corpus, encode


def test_encoding_is_fixed_and_maps_unknown_characters_to_one_id():
    assert encode("a\n") .tolist() == [VOCAB.index("a"), 0]
    assert encode("é—").tolist() == [OTHER, OTHER]
    assert VOCAB_SIZE == 97


def test_windows_are_shifted_by_one_and_split_without_overlap():
    (x, y), (xv, yv) = charlm_dataset(context=16, val_every=5, max_chars=17 * 50)
    assert x.shape == (40, 16) and xv.shape == (10, 16)
    assert torch.equal(x[:, 1:], y[:, :-1]) and torch.equal(xv[:, 1:], yv[:, :-1])
    ids = encode(corpus()[:17 * 50]).view(50, 17)
    assert torch.equal(xv[0], ids[4, :-1]) and torch.equal(yv[0], ids[4, 1:])   # every 5th window held out
    assert torch.equal(x[4], ids[5, :-1])


def test_model_is_causal_and_shaped_for_cross_entropy():
    torch.manual_seed(0)
    model = CharTransformer(16, VOCAB_SIZE, d_model=32, heads=2, layers=1).eval()
    a = torch.randint(0, VOCAB_SIZE, (2, 16))
    b = a.clone()
    b[:, 10:] = (b[:, 10:] + 1) % VOCAB_SIZE
    out_a, out_b = model(a.float()), model(b.float())
    assert out_a.shape == (2, VOCAB_SIZE, 16)
    assert torch.allclose(out_a[:, :, :10], out_b[:, :, :10], atol=1e-6)  # the future is not seen
    assert not torch.allclose(out_a[:, :, 10:], out_b[:, :, 10:])


def test_loss_falls_below_uniform_after_a_few_steps():
    (x, y), _ = charlm_dataset(context=32, max_chars=33 * 200)
    torch.manual_seed(0)
    model = CharTransformer(32, VOCAB_SIZE, d_model=32, heads=2, layers=1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(40):
        loss = torch.nn.functional.cross_entropy(model(x[:64].float()), y[:64])
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.75 * torch.log(torch.tensor(float(VOCAB_SIZE))).item()


def test_builtin_names_load_the_task_and_score_sequences_per_character(tmp_path):
    from psgd.config import load_config
    from psgd.tasks import build_model, load_task
    cfg = load_config(None, ["task.dataset=charlm", "task.model=char_transformer",
                             "task.dataset_args={context: 16, max_chars: 1700, val_windows: 7}",
                             "task.model_args={d_model: 16, heads: 2, layers: 1}"])
    task = load_task(cfg)
    model = build_model(cfg, task)
    assert task.x_test.shape == (7, 16)
    accuracy, loss = task.evaluate(model)
    assert 0.0 <= accuracy <= 1.0   # per character, not per window
    assert abs(loss - torch.log(torch.tensor(float(VOCAB_SIZE))).item()) < 1.0
