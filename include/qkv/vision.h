/* qkv/vision.h: images through transformers (included by qkv.h):
 * einops-style rearrange, the patch embedding (Conv2d with stride = kernel
 * as a linear map on flattened patches), 2-D sinusoidal positions and the
 * vision transformer (ViT). docs/vision.md has the shapes, the parameter
 * names and the PyTorch equivalents. */
#include "qkv.h" /* first: qkv.h includes every area header in order */
#ifndef QKV_VISION_H
#define QKV_VISION_H
#ifdef __cplusplus
extern "C" {
#endif

/* ---- rearrange (einops.rearrange) ---------------------------------------
 * y = rearrange(x, pattern, **sizes), e.g.
 *   qkv_rearrange(c, x, "b c (h p1) (w p2) -> b (h w) (p1 p2 c)", "p1=16,p2=16", &y)
 * Grammar (einops'): "LEFT -> RIGHT", each side a list of dims separated
 * by spaces; a dim is an axis name (letters, digits, '_', not starting with
 * a digit), a parenthesised group of names (on the left one dim of x split
 * into axes, row-major; on the right axes merged into one dim of y), "1" or
 * "()" for a unit dim, or "..." for the dims the other names leave (at most
 * once per side, not inside parentheses on the left, on both sides or
 * neither). Every name appears once per side and on both sides (no
 * reduction, no repeat). sizes: NULL or "name=length" entries separated by
 * commas or spaces ("h=14,w=14"), for axes that x's shape does not fix: in
 * each group of the left at most one length may be unknown. x has at most 4
 * dims (QKV_MAX_DIMS) and so must y; a group may hold many axes (up to 16
 * in all on a side). Recorded on the tape: the backward is the inverse
 * permutation. When the elements keep x's order (a pure reshape) y is a
 * view of x. Errors (QKV_ERR_ARG, QKV_ERR_SHAPE) name the axis, the dim and
 * the lengths: an axis on one side only, an axis twice, a length that does
 * not divide its dim, more than one unknown length in a group, x with the
 * wrong number of dims, a result of more than 4 dims, anonymous axes other
 * than 1. */
QKV_API qkv_status qkv_rearrange(qkv_ctx *c, qkv_tensor *x, const char *pattern, const char *sizes,
                                 qkv_tensor **y);

/* ---- patch embedding ----------------------------------------------------
 * conv_proj(x).flatten(2).transpose(1, 2) for conv_proj =
 * nn.Conv2d(C, D, kernel_size=(ph,pw), stride=(ph,pw)), as torchvision's
 * VisionTransformer._process_input computes it, done as a linear map on
 * flattened patches: y[n, i*gw + j, d] = b[d] + sum_{c,u,v}
 * w[d,c,u,v] x[n, c, i*ph + u, j*pw + v].
 * x (N,C,H,W), w (D,C,ph,pw) (PyTorch's Conv2d layout; the patch size is
 * w's kernel size), b (D) or NULL -> y (N, gh*gw, D), gh = H / ph, gw = W /
 * pw rounded down: rows and columns past the last whole patch are ignored,
 * as Conv2d ignores them. H >= ph, W >= pw. */
QKV_API qkv_status qkv_patch_embed(qkv_ctx *c, qkv_tensor *x, qkv_tensor *w, qkv_tensor *b,
                                   qkv_tensor **y);

/* The module: "weight" (D,C,P,P), "bias" (D), both
 * U(-1/sqrt(C*P*P), 1/sqrt(C*P*P)) as nn.Conv2d's default. x (N,C,H,W) ->
 * y (N, (H/P)*(W/P), D). */
typedef struct {
    qkv_module base;
    int64_t in_channels, embed_dim, patch;
    qkv_tensor *weight, *bias; /* (D,C,P,P); (D) */
} qkv_nn_patch_embed;
QKV_API qkv_status qkv_nn_patch_embed_init(qkv_nn_patch_embed *m, int64_t in_channels,
                                           int64_t embed_dim, int64_t patch, qkv_params *p,
                                           const char *prefix, qkv_rng *rng);

/* ---- 2-D sinusoidal positions (MAE's get_2d_sincos_pos_embed) -----------
 * pe (cls + gh*gw, d), d a multiple of 4: with cls, row 0 is zeros (the
 * class token's). The token at grid row i, column j (t = i*gw + j) gets
 * the 1-D table of MAE's get_1d_sincos_pos_embed_from_grid for its column
 * j in channels [0, d/2) and for its row i in [d/2, d) (MAE's meshgrid puts
 * the column first though it calls that half emb_h); each half of width
 * h = d/2 is [sin(p w_k) for k < h/2] then [cos(p w_k)], w_k =
 * 10000^(-k/(h/2)). Computed in double. */
QKV_API qkv_status qkv_pos_2d_sincos_fill(int64_t grid_h, int64_t grid_w, int64_t d, int cls,
                                          float *pe);

/* ---- vision transformer ------------------------------------------------ */

typedef enum {
    QKV_VIT_POS_LEARNED = 0, /* "pos_embedding" (1,S,D), N(0, 0.02^2) as torchvision's */
    QKV_VIT_POS_SINCOS,      /* fixed: qkv_pos_2d_sincos_fill, the class token's row 0 */
    QKV_VIT_POS_NONE
} qkv_vit_pos;

typedef enum {
    QKV_VIT_POOL_CLS = 0, /* the head reads the class token's final state */
    QKV_VIT_POOL_MEAN     /* the mean over every token (the class token too, if any) */
} qkv_vit_pool;

/* qkv_vit_opts_default(image_h, image_w, in_channels, patch, num_classes):
 * d_model 64, nhead 4, num_layers 4, dim_feedforward 256, dropout 0, GELU,
 * layer_norm_eps 1e-6 (torchvision's), learned positions, a class token and
 * the head on it. */
typedef struct {
    int64_t image_h, image_w, in_channels, patch, num_classes;
    int64_t d_model, nhead, num_layers, dim_feedforward;
    float dropout; /* after the positions, and in every encoder layer */
    qkv_activation activation;
    float layer_norm_eps;
    qkv_vit_pos pos;
    qkv_vit_pool pool;
    int class_token;
} qkv_vit_opts;

QKV_API qkv_vit_opts qkv_vit_opts_default(int64_t image_h, int64_t image_w, int64_t in_channels,
                                          int64_t patch, int64_t num_classes);

/* The model. Parameters (under prefix):
 *   conv_proj.weight (D,C,P,P), conv_proj.bias (D)   the patch embedding
 *   class_token (1,1,D)                               when class_token
 *   pos_embedding (1,S,D)                             learned positions
 *   encoder.layers.<i>.*                              pre-norm TransformerEncoderLayers
 *                                                     (batch_first, the activation)
 *   encoder.norm.weight, encoder.norm.bias (D)        the final LayerNorm
 *   head.weight (K,D), head.bias (K)                  the classifier
 * S = class_token + (H/P)*(W/P). The names are those of the PyTorch module
 * in docs/vision.md (nn.Conv2d, nn.Parameter, nn.TransformerEncoder with
 * norm_first layers and a final LayerNorm, nn.Linear), so state_dicts move
 * both ways. Initialisation as torchvision's VisionTransformer: conv_proj
 * weight N(0, 1/fan_in) truncated at 2 standard deviations, bias, class
 * token and head zeros; the encoder's layers as nn.TransformerEncoderLayer's
 * (every layer a copy of layer 0, as _get_clones). */
typedef struct {
    qkv_vit_opts o;
    int64_t grid_h, grid_w, seq_len;
    qkv_nn_patch_embed conv_proj;
    qkv_tensor *class_token;   /* (1,1,D) or NULL */
    qkv_tensor *pos_embedding; /* (1,S,D) or NULL */
    float *pos_table;          /* (S,D) fixed sinusoidal positions, malloc'd, or NULL */
    qkv_transformer_encoder encoder;
    qkv_nn_linear head;
} qkv_vit;

QKV_API qkv_status qkv_vit_init(qkv_vit *m, const qkv_vit_opts *o, qkv_params *p,
                                const char *prefix, qkv_rng *rng);
QKV_API void qkv_vit_free(qkv_vit *m);

/* The encoder's output after the final LayerNorm: images (N,C,H,W) with
 * H, W the model's -> tokens (N,S,D), the class token (if any) first. With
 * qkv_ctx_set_capture on, each layer's self-attention weights (N,nhead,S,S)
 * are captured in layer order: row 0 is the class token's attention. */
QKV_API qkv_status qkv_vit_features(qkv_ctx *c, const qkv_vit *m, qkv_tensor *images,
                                    qkv_tensor **tokens);
/* logits (N,num_classes) = head(pool(features(images))). */
QKV_API qkv_status qkv_vit_forward(qkv_ctx *c, const qkv_vit *m, qkv_tensor *images,
                                   qkv_tensor **logits);

/* Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in
 * Transformers"): attn (layers, heads, S, S) the layers' self-attention
 * weights in order (as qkv_vit_features captures them, one image), ->
 * out (S, S) = A_L ... A_2 A_1 where A_l = rownorm(mean_heads(attn_l) +
 * I), each row divided by its sum (for rows of weights summing to 1, the
 * paper's 0.5 W + 0.5 I). Row 0 of out is how much each token's input
 * flows into the class token's output. Computed in double. */
QKV_API qkv_status qkv_attention_rollout(const float *attn, int64_t layers, int64_t heads,
                                         int64_t S, float *out);

/* torchvision's VisionTransformer (vit_b_16, ...): its state_dict names
 * the same tensors differently. qkv_vit_torchvision_name maps one key:
 *   conv_proj.*, class_token                       the same
 *   encoder.pos_embedding                          pos_embedding
 *   encoder.layers.encoder_layer_<i>.ln_1.*        encoder.layers.<i>.norm1.*   (ln_2: norm2)
 *   encoder.layers.encoder_layer_<i>.self_attention.*   ...<i>.self_attn.*
 *   encoder.layers.encoder_layer_<i>.mlp.0.*       ...<i>.linear1.*  (mlp.3: linear2;
 *                                                  torchvision < 0.13's mlp.linear_1/_2 too)
 *   encoder.ln.*                                   encoder.norm.*
 *   heads.head.*                                   head.*
 * (QKV_ERR_NOTFOUND for anything else, such as heads.pre_logits).
 * qkv_vit_load_torchvision loads such a file into the parameters of a
 * qkv_vit built under prefix with torchvision's options (learned
 * positions, class token, pool cls, GELU, layer_norm_eps 1e-6, the image
 * and patch sizes, hidden_dim = d_model, mlp_dim = dim_feedforward),
 * strictly: every file key must map to a parameter of the same shape and
 * every parameter under prefix must be found; all is checked before
 * anything is copied. */
QKV_API qkv_status qkv_vit_torchvision_name(const char *key, char *out, size_t n);
QKV_API qkv_status qkv_vit_load_torchvision(qkv_params *p, const qkv_safetensors *st,
                                            const char *prefix);

#ifdef __cplusplus
}
#endif
#endif
