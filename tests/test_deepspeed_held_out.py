"""DeepSpeed's held-out pipeline-engine runs (benchmarks/engine_fidelity.py, ``DEEPSPEED_HELD_OUT``).

The pipeline factor in use (``PIPELINE_FACTORS`` in pipeplan/engines/deepspeed.py) is the fit to the four
fitting runs alone, none of the held-out runs among them; the held-out rows read as BLOOM's reshaping log
publishes them (bigscience-workshop/bigscience train/tr11-176B-ml/reshaping-log.md at c352f83) and run on the
tr11 slurm script's model; and each layout splits BLOOM's 72 pipeline layers evenly, as its
``--pp-partition-method 'type:transformer|embedding'`` does.
"""

from __future__ import annotations

import inspect

from _benchmarks import benchmark

from pipeplan.engines.deepspeed import PIPELINE_FACTORS

#: (nodes, tp, pp, micro batch, last logged seconds per iteration) of each layout in reshaping-log.md @c352f83
PUBLISHED = [(24, 4, 12, 2, 215.99), (24, 4, 12, 1, 234.72), (24, 4, 24, 1, 220.30), (24, 2, 24, 1, 199.82),
             (36, 4, 36, 1, 155.71), (36, 2, 36, 1, 141.22), (36, 1, 72, 1, 141.69)]


def test_the_factor_is_the_fit_to_the_four_runs_and_no_held_out_run() -> None:
    fidelity = benchmark("engine_fidelity")
    fitting = fidelity.DEEPSPEED_RUNS
    assert [run.label for run in fitting] == ["BLOOM 176B", "MT-NLG 530B, 280 nodes", "MT-NLG 530B, 350 nodes",
                                              "MT-NLG 530B, 420 nodes"]
    assert not set(fidelity.DEEPSPEED_HELD_OUT) & set(fitting)
    assert inspect.signature(fidelity.fit_deepspeed_factor).parameters["runs"].default is fitting
    assert round(fidelity.fit_deepspeed_factor(), 3) == PIPELINE_FACTORS["a100-80g"]


def test_the_held_out_runs_read_as_published() -> None:
    fidelity = benchmark("engine_fidelity")
    held = fidelity.DEEPSPEED_HELD_OUT
    assert [(run.gpus // 8, run.tp, run.pp, run.micro_batch, run.seconds) for run in held] == PUBLISHED
    bloom = fidelity.DEEPSPEED_RUNS[0]
    for run in held:
        # tr11-176B-ml.slurm @c352f83: NLAYERS=70, NHIDDEN=14336, NHEADS=112, --pad-vocab-size-to 250880, ALiBi,
        # GLOBAL_BATCH_SIZE=2048, ZERO_STAGE=0 (BF16_Optimizer), Jean Zay's Omni-Path: the fitting row's model
        assert (run.layers, run.hidden, run.heads, run.vocab, run.positions) == (70, 14336, 112, 250_880, False)
        assert (run.global_batch, run.dp_mode, run.inter_node) == (2048, "ddp", "omnipath")
        assert (run.layers, run.hidden, run.heads, run.vocab) == (bloom.layers, bloom.hidden, bloom.heads, bloom.vocab)
        assert run.gpus % (run.tp * run.pp) == 0
    # BLOOM trained on the first layout from 2022-07-04: the slurm script's --nodes=24, TP 4, PP 12, MBS 2
    assert held[0].source == "BLOOM's training from 2022-07-04" and (held[0].gpus, held[0].tp * held[0].pp) == (192, 48)


def test_every_layout_splits_the_72_pipeline_layers_evenly() -> None:
    """Embedding and tied head each take a layer's slot (70 + 2), as 'type:transformer|embedding' places them."""
    fidelity = benchmark("engine_fidelity")
    for run in fidelity.DEEPSPEED_HELD_OUT:
        plan = fidelity.deepspeed_predict(run)
        assert plan.layers_per_stage == (72 // run.pp,) * run.pp
        assert plan.num_microbatches * plan.micro_batch_size * plan.dp == run.global_batch
