// Which kernel runs scaled_dot_product_attention on neuron (registered in
// aten/AttentionRoutes.cpp).
//
// PyTorch asks a per-device "fused SDPA choice" stub; a device without one
// gets the math decomposition (bmm, softmax, bmm and their backward: several
// kernels and a full attention matrix). The real product registers this stub
// and, with TORCH_NEURONX_ENABLE_NKI_SDPA on (the default), runs attention as
// one fused flash kernel. Here the fused kernel is CPU's flash attention,
// which the fallback runs on zero-copy aliases, and the choice follows CPU's
// own rules (shapes, dtypes, torch.nn.attention.sdpa_kernel), so results
// match the CPU reference exactly.
#include "aten/native/Native.h"
#include "runtime/Alias.h"
#include "runtime/Device.h"

#include <ATen/Operators.h>
#include <ATen/SDPBackend.h>

#include <atomic>

namespace torch_neuronx::native {
namespace {

std::atomic<bool> g_fused_attention{true};

// CPU's choice reads only shapes, strides, dtypes and requires_grad, never
// data. Real tensors get a zero-copy CPU alias (cheap); the fake tensors
// torch.compile traces with (Python key, no data) get a meta twin carrying
// just that. requires_grad must survive: CPU's flash kernel has no gradient
// for attn_mask, so a mask that requires grad makes CPU choose math.
at::Tensor shape_of(const at::Tensor& t) {
  if (!t.defined()) {
    return t;
  }
  at::Tensor twin = !t.key_set().has(c10::DispatchKey::Python) && is_neuron(t)
      ? cpu_alias(t)
      : at::empty_strided_symint(
            t.sym_sizes(), t.sym_strides(), t.options().device(c10::kMeta));
  if (t.requires_grad()) {
    twin.set_requires_grad(true);
  }
  return twin;
}

// What the choice sees of one argument: a recycled alias (Alias.h) for a
// real neuron tensor that needs no requires_grad (every decode step asks
// for four per attention call), else shape_of's own twin.
class ShapeOf {
 public:
  explicit ShapeOf(const at::Tensor& t) {
    if (t.defined() && !t.requires_grad() && !t.key_set().has(c10::DispatchKey::Python) &&
        is_neuron(t)) {
      lent_.emplace(t);
    } else {
      twin_ = shape_of(t);
    }
  }
  const at::Tensor& operator*() const {
    return lent_ ? **lent_ : twin_;
  }

 private:
  std::optional<LentCpuAlias> lent_;
  at::Tensor twin_;
};

} // namespace

int64_t choose_sdp_backend(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& attn_mask,
    double dropout_p,
    bool is_causal,
    std::optional<double> scale,
    bool enable_gqa) {
  if (!g_fused_attention.load(std::memory_order_relaxed)) {
    return static_cast<int64_t>(at::SDPBackend::math);
  }
  std::optional<ShapeOf> mask;
  if (attn_mask.has_value()) {
    mask.emplace(*attn_mask);
  }
  const ShapeOf q(query), k(key), v(value);
  return at::_ops::_fused_sdp_choice::redispatch(
      c10::DispatchKeySet(c10::DispatchKey::CPU), *q, *k, *v,
      mask ? std::optional<at::Tensor>(**mask) : std::nullopt, dropout_p, is_causal, scale,
      enable_gqa);
}

void set_fused_attention(bool enabled) {
  g_fused_attention = enabled;
}

} // namespace torch_neuronx::native
