#pragma once
// Plan-side names for the linear layers of a ModelGraph, and the selectors plans use to pick them.
//
// Canonical names are independent of the file format, so one plan reads the same for a llama2.c
// checkpoint, a Hugging Face safetensors folder and a GGUF file of the same model:
//
//   blocks.<b>.attn.q  .attn.k  .attn.v  .attn.o        Llama attention projections
//   blocks.<b>.mlp.gate  .mlp.up  .mlp.down              SwiGLU MLP
//   blocks.<b>.attn.qkv  .attn.o  .mlp.up  .mlp.down     GPT-2 (c_attn, attn.c_proj, c_fc, mlp.c_proj)
//   head                                                 the output projection (when not tied)
//   blocks.<b>.<tensor name without ".weight">           weights-only graphs (Generic layers)
//   other.<tensor name without ".weight">                weights-only 2-D tensors outside blocks
//
// The weight tensor's own name ("layers.3.attention.wq.weight", "blk.3.attn_q.weight") is an
// alias: a selector matches a layer when it matches either name. A tied head is the token
// embedding table and is not a plan layer.
//
// Selector grammar (LayerSelector):
//   *          any run of characters, dots included    blocks.*.mlp.down, blocks.3.*
//   ?          any one character
//   {a,b,c}    one of the literal alternatives          blocks.*.attn.{q,k}
//   N-M        a whole dot-separated segment: any integer in [N, M]   blocks.0-3.*
// Everything else matches itself. A selector without any of these is an exact name.
#include <string>
#include <string_view>
#include <vector>

#include "core/model/layer_ref.h"
#include "core/model/model_graph.h"

namespace qs {

// A row of the layer table (LayerRef: canonical name, weight name, role, block, shape) and where
// it is in the graph the table was made from.
struct PlanLayer : LayerRef {
  const LinearLayer* linear = nullptr;  // into the graph the list was made from
  int index = 0;                        // position in planLayers() (= ModelGraph::allLinears())
};

// Every plan layer, in ModelGraph::allLinears() order. The pointers live as long as the graph.
std::vector<PlanLayer> planLayers(const ModelGraph& graph);

// The rows of every linear layer the runtime runs, in Runtime::linears() order: planLayers'
// rows, then a head tied to the token embedding (row "head", the embedding's tensor; no plan
// layer). The analysis tables (calibration, sensitivity, speed) have these rows, so row i of a
// table is layer i of a plan (i < the plan's layers) and of the runtime.
std::vector<LayerRef> linearLayerRows(const ModelGraph& graph);

// Gives rows read from a file their canonical names (LayerRef::name) and this model's weight
// names from the model's rows (linearLayerRows): the one place a file's key meets the layer
// table, once, when the file is opened against its model; everything after joins by the row.
// Files written since session 10 key rows by canonical name (a row's `name` as read), so a table
// measured on one file of a model names the layers of another file of it whose tensor names
// differ (a GGUF's table and the safetensors checkpoint); older files, and rows whose name
// matches nothing, key by weight name. BadInput naming `file` and `field` ("/sensitivity/layers/weight_name[3]") for a row
// whose weight name is no linear layer of the model or whose shape differs from the model's. A
// row without a shape (JSON tables may leave it out) takes the model's. `otherModel` (a table
// accepted for another model, --allow-other-model): a row that is no layer of this model keeps
// no name, so it joins nothing, and shapes are not compared.
void nameLayerRows(std::vector<LayerRef>& rows, const ModelGraph& graph, const std::string& file,
                   const std::string& field, bool otherModel = false);

// "attn.q", "mlp.down", … for a role inside a block; "head"; "" for Generic.
std::string_view canonicalRoleName(LinearRole role);

// The module name Hugging Face transformers gives the layer ("model.layers.3.self_attn.q_proj",
// "transformer.h.3.attn.c_attn", "lm_head"): what llm-compressor, compressed-tensors, GPTQModel
// and vLLM match against. Generic layers: the tensor name without ".weight".
std::string hfModuleName(const ModelGraph& graph, const PlanLayer& layer);

// The tensor name in a GGUF file written by llama.cpp's converter ("blk.3.attn_q.weight",
// "blk.3.ffn_down.weight", "output.weight"). Generic layers: the tensor name itself.
std::string ggufTensorName(const ModelGraph& graph, const PlanLayer& layer);

class LayerSelector {
 public:
  // Throws BadInput (field `where`) for an empty selector, unbalanced braces or a range N-M
  // with N > M.
  static LayerSelector parse(std::string_view text, const std::string& where = "layers");

  const std::string& text() const { return text_; }
  bool isPattern() const { return pattern_; }
  bool matches(std::string_view name) const;
  bool matches(const PlanLayer& layer) const;

 private:
  struct Token {
    enum Kind { Literal, Star, AnyChar, Alternatives, Range } kind = Literal;
    std::string literal;
    std::vector<std::string> alternatives;
    long long lo = 0, hi = 0;
  };
  bool matchFrom(size_t token, std::string_view name, size_t pos,
                 std::vector<signed char>& memo) const;
  bool matchToken(size_t token, std::string_view name, size_t pos,
                  std::vector<signed char>& memo) const;

  std::string text_;
  std::vector<Token> tokens_;
  bool pattern_ = false;
};

}  // namespace qs
