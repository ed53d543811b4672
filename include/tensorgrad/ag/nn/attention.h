#pragma once
// Multi-head attention of the eager API, as torch.nn.MultiheadAttention: the
// same parameter names, layouts and default initialisation, so a PyTorch
// state dict loads by name. Composed from ag ops (linear, batched matmul,
// softmax), so autograd comes from the ops.
#include <cstdint>
#include <memory>

#include "tensorgrad/ag/nn/module.h"
#include "tensorgrad/ag/nn/modules.h"
#include "tensorgrad/ag/tensor.h"

namespace tensorgrad::ag::nn {

/// What MultiheadAttention::forward returns: attn_output {N, L, E} ({L, N, E}
/// without batch_first) and, with need_weights, the attention weights
/// averaged over heads {N, L, S} (always batch first, as torch); undefined
/// without need_weights.
struct MultiheadAttentionOutput {
  /// attn_output {N, L, E} ({L, N, E} without batch_first); attn_weights
  /// {N, L, S}, averaged over heads, undefined without need_weights.
  ///@{
  Tensor attn_output, attn_weights;
  ///@}
};

/// Multi-head scaled dot-product attention, as torch.nn.MultiheadAttention
/// (without its dropout, add_bias_kv, add_zero_attn, kdim and vdim options):
///   q = query W_q^T + b_q, k = key W_k^T + b_k, v = value W_v^T + b_v, where
///   W_q, W_k, W_v are the row blocks 0, 1, 2 of in_proj_weight {3E, E} and
///   b_q, b_k, b_v those of in_proj_bias {3E}; per head h (head_dim
///   d = E / num_heads, columns h*d ... of q, k, v):
///   A_h = softmax(q_h k_h^T / sqrt(d) + mask), o_h = A_h v_h;
///   attn_output = out_proj(concat_h o_h), attn_weights = mean_h A_h.
/// Parameters in torch's state-dict order: in_proj_weight {3E, E} (xavier
/// uniform, U(+-sqrt(6 / (E + 3E)))), in_proj_bias {3E} (zeros), out_proj.weight
/// {E, E} (nn.Linear's U(+-1/sqrt(E))), out_proj.bias {E} (zeros), as torch.
/// Without bias, neither bias exists. Throws ValueError for embed_dim or
/// num_heads < 1 and when embed_dim % num_heads != 0.
class MultiheadAttention : public Module {
 public:
  /// torch.nn.MultiheadAttention's arguments, but batch_first by default
  /// (tensorgrad's sequences are batch first); throws as the class says.
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, bool bias = true, bool batch_first = true);
  const char* type() const override { return "MultiheadAttention"; }
  /// embed_dim, num_heads, bias, batch_first.
  ModuleConfig config() const override;

  /// query {N, L, E}, key and value {N, S, E} ({L, N, E} / {S, N, E}
  /// without batch_first). Masks, each optional (undefined = none), of two
  /// kinds as torch's bool and float masks:
  ///  * int32 (torch's bool): 1 = ignore that position (adds -inf to its
  ///    score), 0 = attend;
  ///  * float32: added to the scores as is (so -inf also ignores).
  /// key_padding_mask {N, S} masks keys per sequence; attn_mask {L, S} masks
  /// per query and key for every sequence. Both given: their additive forms
  /// add up (newer torch's rule; a -inf in either ignores the position). A
  /// query whose every key is ignored gets NaN weights, as torch.
  /// Throws ShapeError for inputs that are not 3-D, whose last size is not
  /// embed_dim, whose batch sizes differ, whose key and value lengths differ,
  /// or for masks of the wrong shape; TypeError for a mask that is neither
  /// int32 nor float32.
  MultiheadAttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const Tensor& key_padding_mask = Tensor(), const Tensor& attn_mask = Tensor(),
                                   bool need_weights = true);
  /// Self-attention without masks: forward(x, x, x, {}, {}, false).attn_output.
  Tensor forward(const Tensor& x) override;

  /// E, the number of heads, and d = E / num_heads.
  ///@{
  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }
  int64_t head_dim() const { return embed_dim_ / num_heads_; }
  ///@}

  /// in_proj_weight {3E, E}: W_q, W_k, W_v stacked; in_proj_bias {3E},
  /// undefined without bias.
  ///@{
  Tensor in_proj_weight, in_proj_bias;  // in_proj_bias undefined without bias
  ///@}
  std::shared_ptr<Linear> out_proj;  ///< E -> E, the output projection (child "out_proj")

 private:
  int64_t embed_dim_, num_heads_;
  bool bias_, batch_first_;
};

}  // namespace tensorgrad::ag::nn
