// model/gpt2/gpt2.hpp: the GPT-2 family (Radford et al. 2019; nanoGPT's model.py): learned
// position embedding, pre-LayerNorm blocks with a fused [q | k | v] projection and an exact-GELU
// MLP of width 4C, biases optional, LM head tied to the token embedding. Tensor names are
// nanoGPT's ("transformer.h.0.attn.c_attn.weight"), so a checkpoint maps onto its PyTorch GPT.
//
// Layer: model (family folder; registered in model/family.cpp).
#pragma once

#include "model/family.hpp"

namespace trident {

/// The gpt2 record of the family registry.
ModelFamily gpt2_family();

}  // namespace trident
