/* vision.h: what `qkv train vit|cnn|mlp`, `qkv eval` (eval_vision.c) and
 * `qkv classify` share (vision.c): an image classifier's configuration as
 * one metadata string, building the model from it, loading it from a
 * checkpoint, batches of a set through it. docs/vision_cli.md. */
#ifndef QKV_CLI_VISION_H
#define QKV_CLI_VISION_H
#include <stdio.h>
#include "cli/run_format.h"

/* The checkpoint inside a run's folder (--out DIR); its metadata "kind"
 * (vit, cnn, mlp) and "vision.config" (vision_config_format). */
#define VISION_CKPT_NAME "model.ckpt"

typedef enum { VISION_VIT = 0, VISION_CNN, VISION_MLP } vision_kind;
extern const char *const vision_kind_names[3];

/* The model and its input: images (channels, height, width) normalised
 * by (x - mean) / std (the training set's statistics) before the model. */
typedef struct {
    vision_kind kind;
    int64_t channels, height, width, classes;
    float mean, std;
    /* ViT only */
    int64_t patch, d_model, layers, heads, mlp_dim;
    qkv_vit_pool pool;
    qkv_vit_pos pos;
} vision_config;

/* The configuration in the run format (run_format.h): "kind=vit",
 * "channels=1", ..., "std=...", then for kind=vit "patch=4", "d_model=64",
 * "layers=4", "heads=4", "mlp_dim=256", "pool=cls", "pos=learned", a line
 * each; parse checks every field and its range, and reads the one-line
 * vision.config of older runs too (deprecated). */
qkv_status vision_config_format(const vision_config *g, char *buf, size_t n);
qkv_status vision_config_parse(const char *text, vision_config *g);

typedef struct {
    vision_config cfg;
    qkv_params *p;
    qkv_vit vit;
    qkv_cnn cnn;
    qkv_mlp mlp;
} vision_model;

/* A fresh model, parameters drawn from rng. */
qkv_status vision_model_init(vision_model *m, const vision_config *g, qkv_rng *rng);
/* The model of the checkpoint at path (a file, or a run's folder holding
 * VISION_CKPT_NAME); path_out (may be NULL) gets the file's path. A
 * checkpoint of another kind of model is an error saying so. */
qkv_status vision_model_load(vision_model *m, const char *path, char *path_out, size_t n);
void vision_model_free(vision_model *m);
/* logits (N,classes) of images (N,C,H,W), already normalised. */
qkv_status vision_forward(qkv_ctx *c, const vision_model *m, qkv_tensor *images, qkv_tensor **logits);

/* The test accuracy of set's first n images (all: n <= 0) in eval mode,
 * without a tape, batches of batch; confusion (classes x classes, may be
 * NULL) gets counts [true][predicted]. */
qkv_status vision_evaluate(qkv_ctx *c, const vision_model *m, const qkv_image_set *set, int64_t batch,
                           double *accuracy, int64_t *confusion);
/* The same split between the ranks of d (qkv_dist_shard of the set's
 * images), the counts summed: every rank gets the accuracy. A collective:
 * every rank calls it. */
qkv_status vision_evaluate_split(qkv_ctx *c, const vision_model *m, const qkv_image_set *set, int64_t batch,
                                 qkv_dist *d, double *accuracy);

/* "path is missing: run tools/get_data.sh fashion-mnist" and the like:
 * the set at dir (train 1, test 0), its first limit images (0: all). */
qkv_status vision_load_set(const char *dir, int train, int64_t limit, qkv_image_set **out);

/* The data folder of the run whose checkpoint is at ckpt (its vision.train
 * metadata's data=), or data when not NULL (--data), or data/fashion-mnist
 * when the checkpoint does not say; into dir (n bytes). */
void vision_data_dir(const char *ckpt, const char *data, char *dir, size_t n);


int qkv_cli_train_vision(int argc, char **argv, vision_kind kind);
#endif
