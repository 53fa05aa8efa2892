"""train/controller/memory.py: the memory plan's numbers against cases computed by hand (the arithmetic is written
out below, from the model shapes, not taken from the module), and the choices resolve makes with them."""
import pytest

from train.controller import memory as M
from train.controller import resolve as R

GIB = 2**30
H200 = 143_771 * 2**20  # nvidia-smi --query-gpu=memory.total on the H200: 143,771 MiB
A100_40 = 40_960 * 2**20


def job(model, size=None, **extra):
    overrides = {"accelerator": "cuda", **({"model_size": size} if size else {}), **extra}
    return R.resolve(model, overrides)


def test_parameters_of_the_public_shapes():
    # GPT-2 XL: 48 x (4 x 1600^2 + 2 x 1600 x 6400) + (50257 + 1024) x 1600
    assert M.model_shape(job("gpt2", "xl")).params == 48 * (10_240_000 + 20_480_000) + 51_281 * 1600 == 1_556_609_600
    # Llama 3.1 8B: 32 x (2 x 4096^2 + 2 x 4096^2 x 8/32 + 3 x 4096 x 14336) + 2 x 128256 x 4096 (untied)
    assert M.model_shape(job("llama", "8b")).params == 32 * (33_554_432 + 8_388_608 + 176_160_768) + 1_050_673_152
    # Llama 3.2 1B: 16 x (2 x 2048^2 + 2 x 2048^2 x 8/32 + 3 x 2048 x 8192) + 128256 x 2048 (tied)
    assert M.model_shape(job("llama", "1b")).params == 16 * (8_388_608 + 2_097_152 + 50_331_648) + 262_668_288
    # BERT-base: 12 x (4 x 768^2 + 2 x 768 x 3072) + (30522 + 512) x 768 -- torch counts 109.5 M with biases, norms
    assert M.model_shape(job("bert")).params == 12 * (2_359_296 + 4_718_592) + 31_034 * 768 == 108_768_768


def test_activations_of_a_gpt2_layer_are_korthikantis_34_s_h():
    shape = M.model_shape(job("gpt2", "xl"))
    assert M.layer_activation_bytes(shape, 1024) == 34 * 1024 * 1600
    # 48 layers + the full LM head's 1024 x 50257 x 10 bytes
    assert M.activation_bytes(shape, 1024, 1024) == 48 * 34 * 1024 * 1600 + 1024 * 50257 * 10 == 3_188_500_480
    # checkpointing keeps each layer's 16-bit input and one layer's activations
    assert M.activation_bytes(shape, 1024, 1024, checkpointing=True) == (48 * 2 * 1024 * 1600 + 34 * 1024 * 1600
                                                                         + 1024 * 50257 * 10)


def test_activations_of_a_llama_layer():
    shape = M.model_shape(job("llama", "8b"))
    s, h, i = 2048, 4096, 14336
    # attention 2sh + 2sh + 4sh x 8/32 + 2sh = 7sh; SwiGLU 2sh + 8si; norms 4sh; no dropout masks
    assert M.layer_activation_bytes(shape, s) == 13 * s * h + 8 * s * i == 343_932_928


def test_states_by_zero_stage_follow_the_zero_paper():
    n = 1_000_000_000
    assert M.state_bytes(n, 0, 8, False) == (16 * n, 0)
    assert M.state_bytes(n, 1, 8, False) == (4 * n + 12 * n // 8, 0)
    assert M.state_bytes(n, 2, 8, False) == (2 * n + 14 * n // 8, 0)
    assert M.state_bytes(n, 3, 8, False) == (2 * n, 0)
    assert M.state_bytes(n, 2, 8, True) == (2 * n + 2 * n // 8, 2 * n)
    # ZeRO-3 with offload: 16 N / W of states and the measured 4 N / W more on the host
    assert M.state_bytes(n, 3, 8, True) == (n // 2, 2 * n + n // 2)
    # half of the optimizer offloaded: 4 N / W + 8 N / W on the GPU, 8 N / W + 4 N / W on the host
    assert M.state_bytes(n, 3, 8, True, 0.5) == (12 * n // 8, 12 * n // 8)


def test_gpt2_xl_on_one_h200_is_zero_0_micro_16_without_checkpointing():
    """The case of the first XL run: ZeRO-0 (one rank: ZeRO partitions nothing), and the micro batch in the plan."""
    budget = int(0.85 * H200) - 2 * GIB                     # 126,000,917,913 bytes
    states = 16 * 1_556_609_600                             # 24,905,753,600
    per_sample = 3_188_500_480
    assert (budget - states) // per_sample == 31            # micro 16: the largest power of two <= 31
    j = R.resolve("gpt2", {"accelerator": "cuda", "model_size": "xl"}, gpu_memory_bytes=H200)
    assert (j["zero_stage"], j["offload_optimizer"], j["gradient_checkpointing"]) == (0, "none", False)
    assert (j["per_device_train_batch_size"], j["gradient_accumulation_steps"]) == (16, 32)  # 512 = 16 x 32 x 1
    assert j["optimizer"] == "adamw_torch_fused" and j["autocast"] is True
    line = M.describe(j, 1, H200).line()
    assert line.startswith("memory: model 1.56 B parameters: states 24.9 GB a rank, activations 3.19 GB a sample -> "
                           "ZeRO 0, micro 16, activation checkpointing off: 75.9 of 126.0 GB"), line


def test_gpt2_xl_on_eight_40gb_gpus_partitions_the_states():
    """On 40 GiB GPUs (a budget of 34.4 GB) 16 N = 24.9 GB leaves room for micro 2 (2,048 tokens); ZeRO-1 on 8 ranks
    (4 N + 12 N / 8 = 8.6 GB) for micro 8 (8,192 tokens): the first good choice, before checkpointing."""
    budget = int(0.85 * A100_40) - 2 * GIB
    n, per_sample = 1_556_609_600, 3_188_500_480
    assert (budget - 16 * n) // per_sample == 2
    assert (budget - (4 * n + 12 * n // 8)) // per_sample == 8
    j = R.resolve("gpt2", {"accelerator": "cuda", "model_size": "xl"}, world_size=8, gpu_memory_bytes=A100_40)
    assert (j["zero_stage"], j["offload_optimizer"], j["gradient_checkpointing"]) == (1, "none", False)
    assert (j["per_device_train_batch_size"], j["gradient_accumulation_steps"]) == (8, 8)  # 512 = 8 x 8 x 8


def test_gpt2_xl_on_one_40gb_gpu_turns_checkpointing_on():
    """One rank: no ZeRO stage helps; ZeRO-0 without checkpointing allows micro 2 (2,048 tokens), with it
    (48 x 2sh + 34sh + head = 0.73 GB a sample) micro 8 (12.99 would fit; 8 is the largest power of two)."""
    budget = int(0.85 * A100_40) - 2 * GIB
    n = 1_556_609_600
    ckpt = 48 * 2 * 1024 * 1600 + 34 * 1024 * 1600 + 1024 * 50257 * 10
    assert (budget - 16 * n) // ckpt == 12
    j = R.resolve("gpt2", {"accelerator": "cuda", "model_size": "xl"}, gpu_memory_bytes=A100_40)
    assert (j["zero_stage"], j["gradient_checkpointing"], j["per_device_train_batch_size"]) == (0, True, 8)


def test_llama_8b_on_one_h200_offloads_half_the_optimizer_where_the_host_holds_it():
    """16 N = 128.5 GB exceeds the budget of 126.0 GB. ZeRO-3 with a quarter of the optimizer offloaded keeps
    4 N + 12 N = 128.5 GB on the GPU: no; with half of it, 4 N + 8 N = 96.4 GB on the GPU and 8 N + 4 N (ZeRO-3's
    measured extra) = 96.4 GB on the host, which 75 % of a 128 GiB node (103.1 GB) holds: free 29.6 GB, a sample 3.51 GB with activation
    checkpointing (32 x 2 x 2048 x 4096 + 343.9 MB + 2048 x 128256 x 10): micro 8. Without checkpointing a sample is
    13.6 GB: micro 2 (4,096 tokens, below MIN_MICRO_TOKENS), so checkpointing is chosen."""
    n = 8_029_995_008
    budget = int(0.85 * H200) - 2 * GIB
    assert 16 * n > budget and 4 * n + 12 * n > budget
    ckpt = 32 * 2 * 2048 * 4096 + 343_932_928 + 2048 * 128_256 * 10
    assert (budget - 12 * n) // ckpt == 8 and 12 * n <= 0.75 * 128 * GIB
    for host in (128 * GIB, 512 * 10**9):
        j = R.resolve("llama", {"accelerator": "cuda", "model_size": "8b"}, gpu_memory_bytes=H200,
                      host_memory_bytes=host)
        assert (j["zero_stage"], j["offload_optimizer"], j["offload_ratio"], j["optimizer"]) == (3, "cpu", 0.5,
                                                                                                  "deepspeed")
        assert (j["per_device_train_batch_size"], j["gradient_checkpointing"]) == (8, True)
        # ZeRO-3 gathers parameters in module hooks: not compiled by default
        assert j["torch_compile"] is False
        line = M.describe(j, 1, H200, host).line()
        assert "ZeRO 3, 50% of the optimizer states on the CPU (96.4 GB a rank), micro 8" in line, line
        assert "(50% of it)" in R.summary(j)
    # a node of 96 GiB: 75 % of it (77.3 GB) holds no offload whose GPU part fits (half: 96.4 GB on the host)
    with pytest.raises(M.MemoryPlanError, match=r"model 8\.03 B parameters does not fit 1 GPU\(s\) of 150\.8 GB.*"
                                                r"an optimizer offload that fits the GPU would need 96\.4 GB of each "
                                                r"node's 103\.1 GB \(75% of it may hold the states\)"):
        R.resolve("llama", {"accelerator": "cuda", "model_size": "8b"}, gpu_memory_bytes=H200,
                  host_memory_bytes=96 * GIB)


def test_a_partial_offload_the_user_sets_is_kept_and_needs_zero_3():
    j = R.resolve("llama", {"accelerator": "cuda", "model_size": "8b", "offload_ratio": 0.75},
                  gpu_memory_bytes=H200, host_memory_bytes=512 * 10**9)
    # 4 N + 4 N = 64.2 GB on the GPU: free 61.8 GB, 4 samples of 13.6 GB without checkpointing (8,192 tokens)
    assert (j["zero_stage"], j["offload_optimizer"], j["offload_ratio"]) == (3, "cpu", 0.75)
    assert (j["per_device_train_batch_size"], j["gradient_checkpointing"]) == (4, False)
    # on a 128 GiB node three quarters need (12 N + 4 N) = 128.5 GB of the host: refused with that number
    with pytest.raises(M.MemoryPlanError, match=r"would need 128\.5 GB of each node's 137\.4 GB"):
        R.resolve("llama", {"accelerator": "cuda", "model_size": "8b", "offload_ratio": 0.75},
                  gpu_memory_bytes=H200, host_memory_bytes=128 * GIB)
    with pytest.raises(R.JobError, match=r"offload_ratio 0\.5 .* needs ZeRO stage 3 with offload_optimizer cpu; the "
                                         r"job has zero_stage 2"):
        R.resolve("llama", {"accelerator": "cuda", "model_size": "8b", "offload_ratio": 0.5, "zero_stage": 2},
                  gpu_memory_bytes=H200, host_memory_bytes=128 * GIB)
    with pytest.raises(R.JobError, match=r"offload_ratio must be in \(0, 1\], got 1\.5"):
        R.resolve("bert", {"accelerator": "cuda", "offload_ratio": "1.5"})
    with pytest.raises(R.JobError, match=r"offload_ratio must be a number"):
        R.resolve("bert", {"accelerator": "cuda", "offload_ratio": "half"})


def test_what_the_user_set_is_kept_and_checked():
    j = R.resolve("gpt2", {"accelerator": "cuda", "model_size": "xl", "per_device_train_batch_size": 64},
                  gpu_memory_bytes=H200)
    assert (j["per_device_train_batch_size"], j["gradient_accumulation_steps"]) == (64, 8)
    # 64 samples need 204 GB without checkpointing: it is turned on for them (12.4 GB + 0.66 GB x 64 fits)
    assert j["gradient_checkpointing"] is True and j["zero_stage"] == 0
    fixed = R.resolve("gpt2", {"accelerator": "cuda", "model_size": "xl", "per_device_train_batch_size": 64,
                               "gradient_checkpointing": False}, gpu_memory_bytes=H200)
    plan = M.describe(fixed, 1, H200)
    assert not plan.fits and "this run may run out of GPU memory" in plan.line()


def test_small_models_and_cpu_runs_are_unchanged():
    bert = R.resolve("bert", {"accelerator": "cuda"}, gpu_memory_bytes=H200)
    assert (bert["zero_stage"], bert["per_device_train_batch_size"], bert["gradient_checkpointing"]) == (0, 128, False)
    unknown = R.resolve("bert", {"accelerator": "cuda"})  # the GPU's memory not given: no plan, same choices here
    assert (unknown["zero_stage"], unknown["per_device_train_batch_size"]) == (0, 128)
    cpu = R.resolve("llama", {"accelerator": "cpu", "model_size": "tiny"}, gpu_memory_bytes=H200)
    assert (cpu["zero_stage"], cpu["offload_optimizer"], cpu["gradient_checkpointing"]) == (2, "none", False)
    assert M.describe(cpu, 2, H200) is None


def test_a_model_too_big_for_any_choice_is_refused_before_launch():
    with pytest.raises(M.MemoryPlanError) as err:
        R.resolve("llama", {"accelerator": "cuda", "model_size": "8b"}, gpu_memory_bytes=A100_40,
                  host_memory_bytes=96 * GIB)
    text = str(err.value)
    assert "model 8.03 B parameters does not fit 1 GPU(s) of 42.9 GB" in text
    assert "use more GPUs" in text and "(model_size / model_config)" in text


@pytest.mark.parametrize(("model", "size", "regional"), [
    ("bert", None, True),        # the masked MLM head
    ("gpt2", None, False),       # GPT-2 small: the whole model compiled, LM-head loss included
    ("gpt2", "medium", True),    # 24 layers
    ("gpt2", "xl", True),
    ("llama", "1b", True),
])
def test_regional_compilation_for_masked_heads_llama_and_deep_models(model, size, regional):
    assert job(model, size)["regional_compilation"] is regional
    assert R.resolve(model, {"accelerator": "cpu", **({"model_size": size} if size else {})})[
        "regional_compilation"] is False  # no compile on cpu


def test_values_the_job_refuses_get_the_jobs_message_not_a_memory_verdict():
    from train.common.job import JobError

    with pytest.raises(JobError, match=r"offload_optimizer needs ZeRO stage 1, 2 or 3, zero_stage is 0"):
        R.resolve("llama", {"accelerator": "cuda", "model_size": "8b", "zero_stage": 0, "offload_optimizer": "cpu"},
                  gpu_memory_bytes=A100_40)
    with pytest.raises(JobError, match=r"offload_optimizer must be one of none, cpu or auto, got 'gpu'"):
        R.resolve("llama", {"accelerator": "cuda", "offload_optimizer": "gpu"}, gpu_memory_bytes=A100_40)
