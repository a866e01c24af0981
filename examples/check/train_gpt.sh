#!/usr/bin/env bash
# A GPT-2 XL-sized run on 2 nodes of 8 GPUs, as a Megatron-LM user keeps it.
torchrun --nproc-per-node 8 --nnodes 2 pretrain_gpt.py \
    --num-layers 24 --hidden-size 2048 --num-attention-heads 16 \
    --seq-length 2048 --max-position-embeddings 2048 --vocab-size 50304 \
    --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --sequence-parallel \
    --micro-batch-size 2 --global-batch-size 256 \
    --use-distributed-optimizer --overlap-grad-reduce \
    --recompute-granularity selective --bf16 \
    --lr 3e-4 --train-iters 10000 --log-interval 10 --save-interval 1000
