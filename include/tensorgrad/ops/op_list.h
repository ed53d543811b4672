// The op list: every op tensorgrad can run, one line each, in OpKind order.
// No include guard: it is included once per expansion, each time with its own
// definition of TG_OP (an X-macro, as LLVM's .def files), so the enum, the
// names and the tables are all made from this one list and cannot drift.
//
//   TG_OP(kind, name, min_inputs, max_inputs, effect, param, batch, flops)
//
// kind        the OpKind enumerator
// name        the op's name in messages and dumps
// min_inputs, max_inputs  its arity
// effect      Computes (a new output), InPlace (writes its first input, the
//             output aliasing it) or View (the output is its first input's
//             memory, unchanged)
// param       &OpAttrs::field, the op's one float parameter (what
//             Builder::unary and op_param_attrs set), or nullptr
// batch       InverseRows: a graph built for a batch of n rows holds param as
//             c / n, and one planned for fewer rows rescales it; Fixed: param
//             does not depend on the batch, and a graph whose param differs
//             between two batch sizes does not scale with its batch
// flops       the op's flop rule (ops/op_table.cpp's flops_<rule>): elementwise
//             (one per output element), or the products' 2 x multiply-adds
//
// Shapes in the comments: inputs -> output, batch first. The shape rule and
// the gradient rule of each op are its entry in ops/op_table.cpp, its CPU
// kernel its entry in kernels/dispatch.cpp; both tables are checked against
// this list at compile time.
#ifndef TG_OP
#error "define TG_OP(kind, name, min_inputs, max_inputs, effect, param, batch, flops) before including op_list.h"
#endif

// Input, parameter or state: no kernel, memory bound from outside.
TG_OP(Leaf, "leaf", 0, 0, Computes, nullptr, Fixed, elementwise)
// A constant of attrs.shape filled with attrs.value.
TG_OP(Fill, "fill", 0, 0, Computes, &OpAttrs::value, InverseRows, elementwise)

// ---- forward ops ----
// (A{M,K}, B{K,N} [, bias{N}]) -> {M,N} (the bias added to every row), or batched (A{B,M,K}, B{B,K,N}) ->
// {B,M,N} (equal B, no bias); attrs.trans_a/trans_b transpose the last two axes of the operands
TG_OP(MatMul, "matmul", 2, 3, Computes, nullptr, Fixed, matmul)
// NumPy broadcasting; Add with flags kReluOutput: then ReLU, in the same pass
TG_OP(Add, "add", 2, 2, Computes, nullptr, Fixed, elementwise)
TG_OP(Sub, "sub", 2, 2, Computes, nullptr, Fixed, elementwise)
TG_OP(Mul, "mul", 2, 2, Computes, nullptr, Fixed, elementwise)
// Broadcasting as Add; a where a >= b (a <= b) else b; a NaN in either gives NaN
TG_OP(Maximum, "maximum", 2, 2, Computes, nullptr, Fixed, elementwise)
TG_OP(Minimum, "minimum", 2, 2, Computes, nullptr, Fixed, elementwise)
// (a, b) broadcast as Add -> 1 where a >= b, else 0 (the mask of Maximum/Minimum gradients)
TG_OP(GreaterEqual, "greater_equal", 2, 2, Computes, nullptr, Fixed, elementwise)
// (x, mask) broadcast as Add -> attrs.value where mask != 0, else x (torch.masked_fill with a float mask)
TG_OP(MaskedFill, "masked_fill", 2, 2, Computes, &OpAttrs::value, Fixed, elementwise)
// x * attrs.factor (a mean's 1 / n among others, hence InverseRows)
TG_OP(Scale, "scale", 1, 1, Computes, &OpAttrs::factor, InverseRows, elementwise)
TG_OP(Relu, "relu", 1, 1, Computes, nullptr, Fixed, elementwise)
TG_OP(Sigmoid, "sigmoid", 1, 1, Computes, nullptr, Fixed, elementwise)
TG_OP(Tanh, "tanh", 1, 1, Computes, nullptr, Fixed, elementwise)
// Along the last axis
TG_OP(Softmax, "softmax", 1, 1, Computes, nullptr, Fixed, elementwise)
TG_OP(LogSoftmax, "log_softmax", 1, 1, Computes, nullptr, Fixed, elementwise)
// (logits{B,C}, labels{B,C} f32 | {B} i32 [, weights{B}]) -> scalar mean
TG_OP(SoftmaxCrossEntropy, "softmax_cross_entropy", 2, 3, Computes, nullptr, Fixed, elementwise)
// (pred{B,N}, target{B,N} [, weights{B} | {B,N}]) -> scalar sum(w (p - t)^2) / (B N)
TG_OP(MseLoss, "mse_loss", 2, 3, Computes, nullptr, Fixed, elementwise)
// (pred{B,N}, target{B,N} [, weights{B} | {B,N}]) -> scalar sum(w |p - t|) / (B N)
TG_OP(MaeLoss, "mae_loss", 2, 3, Computes, nullptr, Fixed, elementwise)
// As MaeLoss; per element d^2 / 2 if |d| <= delta else delta (|d| - delta / 2), delta = attrs.delta > 0
TG_OP(HuberLoss, "huber_loss", 2, 3, Computes, &OpAttrs::delta, Fixed, elementwise)
// (logits{B,N}, targets{B,N} in [0,1] [, weights{B} | {B,N}])
//   -> scalar sum(w (max(z,0) - z y + log1p(exp(-|z|)))) / (B N)
TG_OP(BinaryCrossEntropy, "binary_cross_entropy", 2, 3, Computes, nullptr, Fixed, elementwise)
// (x, counter int64{1}): inverted dropout, rate attrs.rate; the mask is hash(attrs.seed, counter) per
// element (core/random.h)
TG_OP(Dropout, "dropout", 2, 2, Computes, &OpAttrs::rate, Fixed, elementwise)
// Over every element -> scalar
TG_OP(Sum, "sum", 1, 1, Computes, nullptr, Fixed, elementwise)
TG_OP(Mean, "mean", 1, 1, Computes, nullptr, Fixed, elementwise)
// Reduce a broadcast result back to attrs.shape
TG_OP(SumTo, "sum_to", 1, 1, Computes, nullptr, Fixed, elementwise)
// Expand to attrs.shape
TG_OP(BroadcastTo, "broadcast_to", 1, 1, Computes, nullptr, Fixed, elementwise)
// The same elements as shape attrs.shape; a view (no copy)
TG_OP(Reshape, "reshape", 1, 1, View, nullptr, Fixed, elementwise)
// 1 / sqrt(x)
TG_OP(Rsqrt, "rsqrt", 1, 1, Computes, nullptr, Fixed, elementwise)
// x Phi(x), Phi the normal CDF (Hendrycks & Gimpel 2016; torch.nn.functional.gelu's approximate="none")
TG_OP(Gelu, "gelu", 1, 1, Computes, nullptr, Fixed, elementwise)
// GELU's tanh approximation x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2 (approximate="tanh")
TG_OP(GeluTanh, "gelu_tanh", 1, 1, Computes, nullptr, Fixed, elementwise)
TG_OP(Silu, "silu", 1, 1, Computes, nullptr, Fixed, elementwise)
// x if x > 0 else attrs.alpha (e^x - 1)
TG_OP(Elu, "elu", 1, 1, Computes, &OpAttrs::alpha, Fixed, elementwise)
// x if x > 0 else attrs.negative_slope x
TG_OP(LeakyRelu, "leaky_relu", 1, 1, Computes, &OpAttrs::negative_slope, Fixed, elementwise)
TG_OP(Softplus, "softplus", 1, 1, Computes, nullptr, Fixed, elementwise)
// {..., N} -> {..., 1}
TG_OP(MeanLastAxis, "mean_last_axis", 1, 1, Computes, nullptr, Fixed, elementwise)
// attrs.length entries from attrs.start along attrs.axis
TG_OP(Slice, "slice", 1, 1, Computes, nullptr, Fixed, elementwise)
// (x0, x1, ... up to kMaxOpInputs) joined along attrs.axis
TG_OP(Concat, "concat", 2, kMaxOpInputs, Computes, nullptr, Fixed, elementwise)
// (table{V,D}, ids int32{...}) -> {..., D}: embedding lookup
TG_OP(Gather, "gather", 2, 2, Computes, nullptr, Fixed, elementwise)
// float32 holding whole numbers -> int32 (checked by the caller)
TG_OP(ToIndex, "to_index", 1, 1, Computes, nullptr, Fixed, elementwise)
// x{B,H,W,C} -> {B,Ho,Wo,C}; attrs.window (padding excluded from averages)
TG_OP(MaxPool2D, "max_pool2d", 1, 1, Computes, nullptr, Fixed, elementwise)
TG_OP(AvgPool2D, "avg_pool2d", 1, 1, Computes, nullptr, Fixed, elementwise)
// (x{B,H,W,C}, kernel{kh,kw,C,F} [, bias{F}]) -> {B,Ho,Wo,F}; attrs.window (zero padding); the bias is added
// to every output pixel while its row is in cache; flags kReluOutput: then ReLU, in the same pass
TG_OP(Conv2D, "conv2d", 2, 3, Computes, nullptr, Fixed, conv2d)
// x{..., C} -> {2, C}: the mean and the biased variance over every axis but the last
TG_OP(BatchNormStats, "batch_norm_stats", 1, 1, Computes, nullptr, Fixed, elementwise)
// (y{B,Ho,Wo,F}) -> {2, F}: BatchNormStats of y, which y's Conv2D (flags kBatchStatsOutput) wrote beside y,
// image by image while each was in cache; a view of that memory, no kernel. Made by the lazy graph only,
// when it folds a BatchNormStats into the Conv2D (the fusion pass, graph/fuse.h); the same bits as
// BatchNormStats
TG_OP(AttachedBatchStats, "attached_batch_stats", 1, 1, View, nullptr, Fixed, elementwise)
// (x{..., C}, stats{2,C}, gamma{C}, beta{C} [, residual{..., C}]) -> (x - mean) / sqrt(var + eps) gamma +
// beta [+ residual]; eps = attrs.eps; attrs.own_stats: stats are x's own (their gradient folds into dx);
// flags kReluOutput: then ReLU, in the same pass. The residual is a ResNet block's shortcut, folded in from
// an Add (the fusion pass, graph/fuse.h)
TG_OP(BatchNorm, "batch_norm", 4, 5, Computes, &OpAttrs::eps, Fixed, elementwise)
// a / b, NumPy broadcasting as Add
TG_OP(Div, "div", 2, 2, Computes, nullptr, Fixed, elementwise)
// e^x, natural log, square root (NaN below 0, as std::log / std::sqrt)
TG_OP(Exp, "exp", 1, 1, Computes, nullptr, Fixed, elementwise)
TG_OP(Log, "log", 1, 1, Computes, nullptr, Fixed, elementwise)
TG_OP(Sqrt, "sqrt", 1, 1, Computes, nullptr, Fixed, elementwise)
// The error function 2 / sqrt(pi) int_0^x e^(-t^2) dt (torch.erf, ONNX's Erf)
TG_OP(Erf, "erf", 1, 1, Computes, nullptr, Fixed, elementwise)
// x^attrs.exponent (std::pow: NaN for x < 0 with a non-integer exponent)
TG_OP(Pow, "pow", 1, 1, Computes, &OpAttrs::exponent, Fixed, elementwise)
// min(max(x, attrs.clamp_min), attrs.clamp_max); either bound may be infinite; NaN stays NaN
TG_OP(Clamp, "clamp", 1, 1, Computes, nullptr, Fixed, elementwise)
// Sum / mean along attrs.axis: the axis dropped, or kept as 1 with attrs.keepdim
TG_OP(SumAxis, "sum_axis", 1, 1, Computes, nullptr, Fixed, elementwise)
TG_OP(MeanAxis, "mean_axis", 1, 1, Computes, nullptr, Fixed, elementwise)
// Max along attrs.axis (keepdim as SumAxis); a NaN in the slice gives NaN
TG_OP(MaxAxis, "max_axis", 1, 1, Computes, nullptr, Fixed, elementwise)
// Axes attrs.axis and attrs.axis2 swapped (a copy); rank 2..Shape::kMaxRank
TG_OP(Transpose, "transpose", 1, 1, Computes, nullptr, Fixed, elementwise)
// Fused recurrent layers over a whole sequence (B batch, T steps, H units), from zero initial states or
// the given ones {B,H} (PyTorch's h0, c0).
// (xw{B,T,4H} = x W + bias, U{H,4H} [, h0, c0]) -> {B,T,6H}: per step [h | c | i | f | g | o], gates i, f, g, o
// (Keras' i, f, c, o) after their activations; z = xw_t + h_{t-1} U, c = f c_{t-1} + i g, h = o tanh(c)
// (Hochreiter & Schmidhuber 1997, as keras.layers.LSTM and torch.nn.LSTM)
TG_OP(LstmSequence, "lstm_sequence", 2, 4, Computes, nullptr, Fixed, recurrent)
// (xw{B,T,3H} = x W + input bias, U{H,3H}, recurrent bias{3H} [, h0]) -> {B,T,5H}: per step
// [h | z | r | n | hn], hn = h_{t-1} U_n + rb_n; z, r = sigmoid(xw + h_{t-1} U + rb), n = tanh(xw_n + r hn),
// h = z h_{t-1} + (1 - z) n (reset_after, as cuDNN and PyTorch)
TG_OP(GruSequence, "gru_sequence", 3, 4, Computes, nullptr, Fixed, recurrent)
// Scaled dot-product attention per n (N = batch x heads): (q{N,Lq,D}, k{Nkv,Lk,D}, v{Nkv,Lk,Dv} [, mask{Nm,Lqm,Lk}]
// [, counter int64{1}]) -> {N,Lq,Dv+1}: softmax(q k^T attrs.factor + mask) v, and in the last column each
// query's log-sum-exp of its scores (-inf when every key is hidden; its output is then 0). The mask (flags
// kAttentionMask; Nm 1 or N, Lqm 1 or Lq) is added to the scaled scores (0 keeps, -inf hides); flags kCausal hides
// the keys after each query; attrs.rate > 0 drops weights (kept ones scaled by 1 / (1 - rate)) by hash(attrs.seed,
// counter) per (n, i, j). Computed in tiles with an online softmax (FlashAttention, Dao et al. 2022): memory linear
// in Lk, no {Lq, Lk} matrix stored. Grouped-query attention: Nkv divides N, and query row n reads key-value row
// n / (N / Nkv), k and v never copied (Nkv = N: a key-value row per query row)
TG_OP(Attention, "attention", 3, 5, Computes, nullptr, Fixed, attention)
// x{..., D} [, weight{D}] -> x / sqrt(mean(x^2 over the last axis) + attrs.eps) [* weight]: root mean square
// normalization (Zhang & Sennrich 2019; keras.layers.RMSNormalization, torch.nn.functional.rms_norm)
TG_OP(RmsNorm, "rms_norm", 1, 2, Computes, &OpAttrs::eps, Fixed, elementwise)
// (x{B,T,H,D}, positions int32{T}) -> x with pair i of its first attrs.rope.dims features (ops/op.h's
// RopeOptions: pairing, theta, scaling_factor) of every head at step t rotated by positions[t] / scaling_factor
// theta^(-2i / dims); flags kRopeInverse: by the negated angle (the rotation's gradient)
TG_OP(Rope, "rope", 2, 2, Computes, nullptr, Fixed, elementwise)

// ---- backward ops (inputs listed at each gradient rule) ----
TG_OP(ReluBackward, "relu_backward", 2, 2, Computes, nullptr, Fixed, elementwise)
TG_OP(SigmoidBackward, "sigmoid_backward", 2, 2, Computes, nullptr, Fixed, elementwise)
TG_OP(TanhBackward, "tanh_backward", 2, 2, Computes, nullptr, Fixed, elementwise)
TG_OP(SoftmaxBackward, "softmax_backward", 2, 2, Computes, nullptr, Fixed, elementwise)
TG_OP(LogSoftmaxBackward, "log_softmax_backward", 2, 2, Computes, nullptr, Fixed, elementwise)
// (pred, target [, weights], g scalar) -> dpred
TG_OP(SoftmaxCrossEntropyBackward, "softmax_cross_entropy_backward", 3, 4, Computes, nullptr, Fixed, elementwise)
TG_OP(MseLossBackward, "mse_loss_backward", 3, 4, Computes, nullptr, Fixed, elementwise)
TG_OP(MaeLossBackward, "mae_loss_backward", 3, 4, Computes, nullptr, Fixed, elementwise)
TG_OP(HuberLossBackward, "huber_loss_backward", 3, 4, Computes, &OpAttrs::delta, Fixed, elementwise)
TG_OP(BinaryCrossEntropyBackward, "binary_cross_entropy_backward", 3, 4, Computes, nullptr, Fixed, elementwise)
// (y, g)
TG_OP(RsqrtBackward, "rsqrt_backward", 2, 2, Computes, nullptr, Fixed, elementwise)
// (x, g); parameters as the forward op's
TG_OP(GeluBackward, "gelu_backward", 2, 2, Computes, nullptr, Fixed, elementwise)
TG_OP(GeluTanhBackward, "gelu_tanh_backward", 2, 2, Computes, nullptr, Fixed, elementwise)
TG_OP(SiluBackward, "silu_backward", 2, 2, Computes, nullptr, Fixed, elementwise)
TG_OP(EluBackward, "elu_backward", 2, 2, Computes, &OpAttrs::alpha, Fixed, elementwise)
TG_OP(LeakyReluBackward, "leaky_relu_backward", 2, 2, Computes, &OpAttrs::negative_slope, Fixed, elementwise)
TG_OP(SoftplusBackward, "softplus_backward", 2, 2, Computes, nullptr, Fixed, elementwise)
TG_OP(ErfBackward, "erf_backward", 2, 2, Computes, nullptr, Fixed, elementwise)
// g -> zeros of attrs.shape with g placed at the slice
TG_OP(SliceBackward, "slice_backward", 1, 1, Computes, nullptr, Fixed, elementwise)
// (g{..., D}, ids) -> {V, D} = attrs.shape, rows summed per id
TG_OP(GatherBackward, "gather_backward", 2, 2, Computes, nullptr, Fixed, elementwise)
// (x, g) -> dx: each window's gradient to its first maximum (as PyTorch); flags kMaskNonPositive: also zero
// where x <= 0 (x a ReLU's output)
TG_OP(MaxPool2DBackward, "max_pool2d_backward", 2, 2, Computes, nullptr, Fixed, elementwise)
// (g [, y]) -> dx of attrs.shape; flags kMaskNonPositive (with y{B,H,W,C}): then zero where y <= 0 (y a
// ReLU's output, the ReLU's backward folded in)
TG_OP(AvgPool2DBackward, "avg_pool2d_backward", 1, 2, Computes, nullptr, Fixed, elementwise)
// (g{B,Ho,Wo,F}, kernel [, addend{B,H,W,C}] [, y{B,H,W,C}]) -> dx of attrs.shape {B,H,W,C} [+ addend]: the
// addend is another gradient of the same input, folded in from an Add (the fusion pass, graph/fuse.h) and
// added per image while it is in cache; flags kMaskNonPositive (with y, the last input): then zero where
// y <= 0 (y a ReLU's output, the ReLU's backward folded in)
TG_OP(Conv2DBackwardInput, "conv2d_backward_input", 2, 4, Computes, nullptr, Fixed, conv2d_backward_input)
// (x, g{B,Ho,Wo,F}) -> dkernel of attrs.shape {kh,kw,C,F}
TG_OP(Conv2DBackwardFilter, "conv2d_backward_filter", 2, 2, Computes, nullptr, Fixed, conv2d_backward_filter)
// (x, stats, g [, gamma, beta]) -> {2, C}: [sum(g xhat); sum(g)], the gradients of gamma and beta; flags
// kReluOutput (with gamma and beta): g counts only where the forward's x a + b > 0, the gradient of a ReLU
// folded into the BatchNorm, without its own pass
TG_OP(BatchNormParamGrad, "batch_norm_param_grad", 3, 5, Computes, &OpAttrs::eps, Fixed, elementwise)
// (x, stats, gamma, g, param_grad [, beta]) -> dx; attributes as BatchNorm's; flags kReluOutput (with beta):
// g masked as BatchNormParamGrad's
TG_OP(BatchNormBackward, "batch_norm_backward", 5, 6, Computes, &OpAttrs::eps, Fixed, elementwise)
// (x, g) -> g where clamp_min <= x <= clamp_max, else 0 (PyTorch's rule); attributes as Clamp's
TG_OP(ClampBackward, "clamp_backward", 2, 2, Computes, nullptr, Fixed, elementwise)
// (x, g) -> dx: g to the first maximal element of each slice along attrs.axis (a NaN counts as maximal), 0
// elsewhere; g has MaxAxis's output shape (attrs.keepdim)
TG_OP(MaxAxisBackward, "max_axis_backward", 2, 2, Computes, nullptr, Fixed, elementwise)
// (y{B,T,6H}, U{H,4H}, g{B,T,6H} [, c0{B,H}]) -> dz{B,T,4H}: the gradient of the gates' pre-activations
// (= d xw), back through time; every part of g counts (h, c and the gates). With c0 (initial states given):
// {B,T+1,4H}, step T holding [dh0 | dc0 | 0 | 0]
TG_OP(LstmSequenceBackward, "lstm_sequence_backward", 3, 4, Computes, nullptr, Fixed, recurrent)
// (y{B,T,5H}, U{H,3H}, g{B,T,5H} [, h0{B,H}]) -> {B,T,4H}: [dz | dr | dn] pre-activation (= d xw) and d hn,
// so that d(h U + rb) = [dz | dr | d hn]. With h0: {B,T+1,4H}, step T holding [dh0 | 0 | 0 | 0]
TG_OP(GruSequenceBackward, "gru_sequence_backward", 3, 4, Computes, nullptr, Fixed, recurrent)
// (q, k, v, y{N,Lq,Dv+1}, g{N,Lq,Dv+1} [, mask] [, counter]) -> {Nkv, G Lq D + Lk D + Lk Dv}, G = N / Nkv:
// [dq of the G query rows | dk | dv] per key-value row (dk and dv summed over its G query rows), each flattened,
// Attention's attributes; g's last column (the log-sum-exp's gradient) counts. The weights are
// recomputed tile by tile from y's log-sum-exp (FlashAttention's backward)
TG_OP(AttentionBackward, "attention_backward", 5, 7, Computes, nullptr, Fixed, attention)
// (x, g [, weight]) -> dx of RmsNorm, attributes as its; with r = 1 / sqrt(mean(x^2) + eps) and h = g weight:
// dx = r h - x r^3 mean(h x)
TG_OP(RmsNormBackward, "rms_norm_backward", 2, 3, Computes, &OpAttrs::eps, Fixed, elementwise)

// ---- metrics ----
// (logits{B,C}, labels) -> scalar count of rows whose argmax is the label
TG_OP(Accuracy, "accuracy", 2, 2, Computes, nullptr, Fixed, elementwise)
// (pred{B,N}, target{B,N}) -> scalar count of (pred > attrs.threshold) == (target > 0.5)
TG_OP(BinaryAccuracy, "binary_accuracy", 2, 2, Computes, &OpAttrs::threshold, Fixed, elementwise)
// (scores{B,C}, labels int32{B} | one-hot f32{B,C}) -> scalar count of rows whose label has fewer than
// k = attrs.k strictly greater scores (tf.math.in_top_k)
TG_OP(TopKAccuracy, "top_k_accuracy", 2, 2, Computes, nullptr, Fixed, elementwise)

// ---- optimizer ops: update their first input in place ----
// (acc, g): acc += g; or (acc, A, B): acc += op(A) op(B), MatMul's product with its trans_a / trans_b and
// rank 2, in one GEMM that adds into acc (the weight gradient of a Dense layer written straight into its
// accumulator)
TG_OP(AccumulateGrad, "accumulate_grad", 2, 3, InPlace, nullptr, Fixed, accumulate_grad)
// (hyper, step int64{1} [, schedule steps int64{n}, schedule values float32{m}]): with a schedule
// (attrs.flags, an LrScheduleKind), hyper[kLr] = the schedule at t (before the increment, as Keras), in
// double; then t += 1, hyper's bias corrections for the new t (in double) and kStepDampening (0 at t = 1,
// as PyTorch's momentum buffer starts as the gradient)
TG_OP(OptimizerTick, "optimizer_tick", 2, 4, InPlace, nullptr, Fixed, elementwise)
// The updates: attrs.flags (OptimizerFlag) choose the mode, hyper (HyperSlot) holds the numbers; the
// optional state inputs are present exactly when their flag is set. attrs.zero_grad clears grad after use.
// (param, grad, m, v, hyper): Adam with decoupled decay (AdamW) or L2 (kL2WeightDecay)
TG_OP(AdamWUpdate, "adamw_update", 5, 5, InPlace, nullptr, Fixed, elementwise)
// (param, grad, [momentum buffer if kUseMomentum], hyper): PyTorch's SGD; kNesterov
TG_OP(SgdUpdate, "sgd_update", 3, 4, InPlace, nullptr, Fixed, elementwise)
// (param, grad, mean square, [mean gradient if kCentered], [momentum buffer if kUseMomentum], hyper):
// RMSprop; kEpsInsideSqrt: sqrt(v + eps) (Keras) else sqrt(v) + eps (PyTorch)
TG_OP(RmspropUpdate, "rmsprop_update", 4, 6, InPlace, nullptr, Fixed, elementwise)
// (param, grad, sum of squares, hyper): Adagrad; kEpsInsideSqrt as RmspropUpdate
TG_OP(AdagradUpdate, "adagrad_update", 4, 4, InPlace, nullptr, Fixed, elementwise)
// Gradient clipping, in place on a persistent gradient accumulator.
// (grad): clamp every element to [-attrs.clip, attrs.clip] (clipvalue; NaN stays NaN)
TG_OP(ClipValue, "clip_value", 1, 1, InPlace, &OpAttrs::clip, Fixed, elementwise)
// (x [, running {2}]) -> {2}: the sum of x's squares (plus running's), accumulated in double and kept as the
// pair (s, e), the sum being s 4^e, so that no finite sum overflows
TG_OP(SquaredNorm, "squared_norm", 1, 2, Computes, nullptr, Fixed, elementwise)
// (grad, squared norm {2} as SquaredNorm's): grad *= c / max(norm, c) (Keras' clip_by_norm, clipnorm), or
// with kClipNormEps min(1, c / (norm + 1e-6)) (PyTorch's clip_grad_norm_); c = attrs.clip; with
// kNonFiniteNormToNaN an inf or NaN norm makes grad NaN (TensorFlow's clip_by_global_norm), logged once
// per process
TG_OP(ClipNorm, "clip_norm", 2, 2, InPlace, &OpAttrs::clip, Fixed, elementwise)
// (state, value): state = m state + (1 - m) value, m = attrs.momentum (batch-norm statistics)
TG_OP(MovingAverage, "moving_average", 2, 2, InPlace, &OpAttrs::momentum, Fixed, elementwise)
// (counter int64{1}): counter += 1, in place: a graph's random stream, once per run
TG_OP(AdvanceCounter, "advance_counter", 1, 1, InPlace, nullptr, Fixed, elementwise)
// Updates of one persistent tensor from another (target networks, snapshots), in place on the first input.
// (target, source, tau float32 {} or {1}): target = tau * source + (1 - tau) * target, in float; tau = 1
// copies source exactly (NaN and infinities included). tau is a tensor, so changing it needs no rebuild
TG_OP(PolyakUpdate, "polyak_update", 3, 3, InPlace, nullptr, Fixed, elementwise)
// (target, source): target = source, a copy of the bytes; same shape and dtype, any dtype
TG_OP(Assign, "assign", 2, 2, InPlace, nullptr, Fixed, elementwise)
