#include "model/param_store.hpp"

#include "kernels/elementwise.hpp"
#include "kernels/instantiate.hpp"

namespace trident {

template <class T>
ParamStore<T>::ParamStore(const ParamLayout& layout)
    : layout_(layout),
      params_("trident::params", layout.numel(), MemCategory::params),
      grads_("trident::grads", layout.numel(), MemCategory::grads) {
  fill<T>(params_.all(), T(0));
  fill<T>(grads_.all(), T(0));
}

template <class T>
View1<T> ParamStore<T>::param(int i) const {
  const TensorSpec& t = layout_.tensors().at(static_cast<size_t>(i));
  return params_.slice(t.offset, t.numel);
}

template <class T>
View1<T> ParamStore<T>::grad(int i) const {
  const TensorSpec& t = layout_.tensors().at(static_cast<size_t>(i));
  return grads_.slice(t.offset, t.numel);
}

template <class T>
void ParamStore<T>::initialize(std::uint64_t seed) {
  for (size_t i = 0; i < layout_.tensors().size(); ++i)
    init_tensor<T>(param(static_cast<int>(i)), layout_.tensors()[i], layout_.part().tp_size, layout_.part().tp_rank, seed);
}

template <class T>
void ParamStore<T>::zero_grads() {
  fill<T>(grads_.all(), T(0));
}

template class ParamStore<float>;
template class ParamStore<double>;

}  // namespace trident
