#pragma once
// Everything a user of tensorgrad needs, in one include.
#include "tensorgrad/ag/data.h"
#include "tensorgrad/ag/distributed.h"
#include "tensorgrad/ag/eager_builder.h"
#include "tensorgrad/ag/functional.h"
#include "tensorgrad/ag/gradcheck.h"
#include "tensorgrad/ag/nn/module.h"
#include "tensorgrad/ag/nn/attention.h"
#include "tensorgrad/ag/nn/conv.h"
#include "tensorgrad/ag/nn/modules.h"
#include "tensorgrad/ag/nn/recurrent.h"
#include "tensorgrad/ag/nn/llama.h"
#include "tensorgrad/ag/optim.h"
#include "tensorgrad/ag/save.h"
#include "tensorgrad/ag/tensor.h"
#include "tensorgrad/backend/backend.h"
#include "tensorgrad/backend/executable.h"
#include "tensorgrad/backend/registry.h"
#include "tensorgrad/core/device.h"
#include "tensorgrad/core/error.h"
#include "tensorgrad/core/logging.h"
#include "tensorgrad/core/memory.h"
#include "tensorgrad/core/random.h"
#include "tensorgrad/core/shape.h"
#include "tensorgrad/core/storage.h"
#include "tensorgrad/core/tensor.h"
#include "tensorgrad/core/threads.h"
#include "tensorgrad/core/version.h"
#include "tensorgrad/data/idx.h"
#include "tensorgrad/dist/communicator.h"
#include "tensorgrad/graph/graph.h"
#include "tensorgrad/io/callbacks.h"
#include "tensorgrad/io/gguf.h"
#include "tensorgrad/io/llama.h"
#include "tensorgrad/io/onnx.h"
#include "tensorgrad/io/saving.h"
#include "tensorgrad/nn/callback.h"
#include "tensorgrad/nn/callbacks.h"
#include "tensorgrad/nn/conv.h"
#include "tensorgrad/nn/data_parallel.h"
#include "tensorgrad/nn/history.h"
#include "tensorgrad/nn/layers.h"
#include "tensorgrad/nn/merge.h"
#include "tensorgrad/nn/model.h"
#include "tensorgrad/nn/attention.h"
#include "tensorgrad/nn/causal_lm.h"
#include "tensorgrad/nn/llama.h"
#include "tensorgrad/nn/normalization.h"
#include "tensorgrad/nn/recurrent.h"
#include "tensorgrad/nn/sequential.h"
#include "tensorgrad/nn/trainer.h"
#include "tensorgrad/nn/training_loop.h"
#include "tensorgrad/ops/builder.h"
#include "tensorgrad/ops/gradients.h"
#include "tensorgrad/opt/optimizer.h"
#include "tensorgrad/rl/agent.h"
#include "tensorgrad/rl/dqn.h"
#include "tensorgrad/rl/env.h"
#include "tensorgrad/rl/evaluate.h"
#include "tensorgrad/rl/ppo.h"
#include "tensorgrad/rl/replay_buffer.h"
#include "tensorgrad/rl/schedule.h"
#include "tensorgrad/opt/schedules.h"
#include "tensorgrad/text/tokenizer.h"

// The namespaces, for the API reference (scripts/docs.sh).

/// \namespace tensorgrad
/// The library: tensors, shapes and devices (core), the op set and the
/// Builder interface (ops), lazy graphs and their memory plans (graph),
/// backends and executables (backend), optimizers, losses, metrics and
/// learning-rate schedules (opt).

/// \namespace tensorgrad::nn
/// Keras-style models: layers, the functional Model and Sequential, fit,
/// callbacks, and the Trainer for loops of one's own (keras.Model,
/// keras.layers, keras.callbacks).

/// \namespace tensorgrad::nn::initializers
/// Keras' weight initializers by their Keras names.

/// \namespace tensorgrad::ag
/// The eager autograd API in PyTorch's words: tensors that run each op when
/// it is called and record it for backward() (torch.Tensor, torch.autograd),
/// the functional ops, data loading, saving and data-parallel helpers.

/// \namespace tensorgrad::ag::nn
/// Eager modules (torch.nn): Module, its state dict, and the built-in layers.

/// \namespace tensorgrad::ag::optim
/// Eager optimizers, learning-rate schedulers and gradient clipping
/// (torch.optim, torch.optim.lr_scheduler, torch.nn.utils.clip_grad_*).

/// \namespace tensorgrad::io
/// Files: GGUF reading and writing, saving and loading models, weights and
/// checkpoints (Keras' model.save and load_model), and the callbacks that
/// write them.

/// \namespace tensorgrad::dist
/// Data-parallel training over MPI: the communicator, gradient buckets and
/// the splitting of batches over ranks (as Horovod and
/// torch.distributed).

/// \namespace tensorgrad::data
/// Data sets on disk: IDX files (MNIST, Fashion-MNIST).

/// \namespace tensorgrad::text
/// Tokenizers stored in GGUF files as llama.cpp stores them (SentencePiece
/// and byte-level BPE), tokenizing as llama.cpp does, and byte-level BPE
/// training (Hugging Face tokenizers' BpeTrainer).
